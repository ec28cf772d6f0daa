//! Run-queue delay and involuntary switches.
//!
//! Each thread's [`TidState`] holds when it was queued, whether by an involuntary switch, and its
//! tgid. The tgid is set by `task_newtask` for threads created after loading and otherwise at the
//! thread's first switch-out (the only scheduler event where it is `current`); it is then kept
//! rather than re-read on every switch, since a thread id belongs to another tgid only after
//! `sched_process_exit` cleared the state and `task_newtask` gave the id to a new thread.
//!
//! Costs (README, "Kernel events"): a map-helper lookup is ~50 ns on our machines and the clock
//! read ~70 ns, so states below `TID_SLOT_COUNT` live in an array the verifier inlines, and the
//! clock is read only when a wait starts or ends.
//!
//! With `CONFIG.sched_tracked_only` (a process tree or a cgroup is measured, and nothing reads
//! other processes' counters), a thread outside every tracked scope is skipped before any clock
//! read or hash lookup: whether its tgid is in `TRACKED` is cached in its state with the
//! `TRACKING_GENERATION` it was looked up at, so the check is two inlined array reads, and
//! the hash lookup happens once per thread after each change userspace makes to `TRACKED`. The
//! kernel's own changes to `TRACKED` need no new generation: a process it adds is new (its
//! threads' states are reset by `task_newtask`), one it removes has exited (states cleared).

use aya_ebpf::{
    helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext, EbpfContext,
};
use relay_metrics_common::{TidState, NO_FIELD, RUNQ_HIST_BUCKETS};

use crate::{
    add, count_events, ctx, current_tgid, insert_failed, tracking_generation, CONFIG, TIDS,
    TID_SLOTS, TRACKED,
};

/// True when the programs skip threads outside every tracked scope (a frozen `.rodata` value:
/// the verifier removes the branch not taken).
#[inline(always)]
fn tracked_only() -> bool {
    cfg!(sched_tracked_only) != 0
}

/// Whether the thread of `state` belongs to a tracked process (its tgid must be known), from the
/// cache in its state while `generation` is the one it was looked up at. A thread found
/// untracked forgets any wait it was in: it is not timed while untracked, so a wait recorded
/// before must not be closed after it is tracked again.
#[inline(always)]
fn is_tracked(state: *mut TidState, generation: u32) -> bool {
    // SAFETY: map value pointer from the kernel; concurrent refreshes write the same values.
    unsafe {
        if (*state).tracked_generation != generation {
            let tgid = (*state).tgid;
            let tracked = TRACKED.get(&tgid).is_some();
            if !tracked {
                (*state).queued_ns = 0;
                (*state).preempted = 0;
            }
            (*state).tracked = tracked as u32;
            (*state).tracked_generation = generation;
        }
        (*state).tracked != 0
    }
}

/// The state of thread `tid`; `None` only for an id beyond the array that has no hash entry.
#[inline(always)]
fn tid_state(tid: u32) -> Option<*mut TidState> {
    if let Some(state) = TID_SLOTS.get_ptr_mut(tid) {
        return Some(state);
    }
    TIDS.get_ptr_mut(&tid)
}

/// Stores `state` for a thread whose id has no slot and no hash entry yet.
#[inline(always)]
fn insert_tid_state(tid: u32, state: &TidState) {
    if TIDS.insert(&tid, state, 0).is_err() {
        insert_failed();
    }
}

/// Gives thread id `tid` to a new thread of `tgid` (from `task_newtask`): whatever a previous
/// thread with this id left is reset.
#[inline(always)]
pub(crate) fn new_thread(tid: u32, tgid: u32) {
    let state = TidState {
        tgid,
        ..TidState::default()
    };
    match tid_state(tid) {
        // SAFETY: map value pointer from the kernel; the new thread has not run or been queued.
        Some(slot) => unsafe { *slot = state },
        None => insert_tid_state(tid, &state),
    }
}

/// Forgets an exiting thread.
#[inline(always)]
pub(crate) fn thread_exited(tid: u32) {
    if let Some(slot) = TID_SLOTS.get_ptr_mut(tid) {
        // SAFETY: map value pointer from the kernel; the thread is exiting on this CPU.
        unsafe { *slot = TidState::default() };
    } else {
        let _ = TIDS.remove(&tid);
    }
}

#[inline(always)]
fn on_wakeup(ctx: &TracePointContext, off: u16) -> u32 {
    if off == NO_FIELD {
        return 0;
    }
    let Some(tid) = ctx::u32_at(ctx.as_ptr() as *const u8, off) else {
        return 0;
    };
    if tid == 0 {
        return 0;
    }
    let state = tid_state(tid);
    if tracked_only() {
        // A thread whose tgid is still unknown (it existed before loading and has not run
        // since) could not have this wait counted anyway: see `sched_switch`.
        let Some(state) = state else {
            return 0;
        };
        // SAFETY: map value pointer from the kernel.
        if unsafe { (*state).tgid } == 0 || !is_tracked(state, tracking_generation()) {
            return 0;
        }
    }
    // SAFETY: helper without arguments.
    let now_ns = unsafe { bpf_ktime_get_ns() };
    match state {
        // SAFETY: map value pointer from the kernel; a thread is queued by one CPU at a time.
        Some(state) => unsafe {
            (*state).queued_ns = now_ns;
            (*state).preempted = 0;
        },
        // A thread that existed before loading: its tgid is learnt at its first switch-out.
        None => insert_tid_state(
            tid,
            &TidState {
                queued_ns: now_ns,
                ..TidState::default()
            },
        ),
    }
    0
}

/// `sched:sched_wakeup`: the thread is queued from now on.
#[tracepoint]
pub fn sched_wakeup(ctx: TracePointContext) -> u32 {
    on_wakeup(&ctx, cfg!(wakeup_pid))
}

/// `sched:sched_wakeup_new`: a new task is queued for the first time (its tgid was set by
/// `task_newtask`).
#[tracepoint]
pub fn sched_wakeup_new(ctx: TracePointContext) -> u32 {
    on_wakeup(&ctx, cfg!(wakeup_new_pid))
}

/// `sched:sched_switch`: the next thread's queueing ends (its run-queue delay is recorded, and
/// its involuntary switch if that is how it was queued); the previous thread, if still runnable,
/// was switched out involuntarily and is queued again.
#[tracepoint]
pub fn sched_switch(ctx: TracePointContext) -> u32 {
    let (off_prev, off_state, off_next) = (
        cfg!(switch_prev_pid),
        cfg!(switch_prev_state),
        cfg!(switch_next_pid),
    );
    if off_prev == NO_FIELD || off_state == NO_FIELD || off_next == NO_FIELD {
        return 0;
    }
    let p = ctx.as_ptr() as *const u8;
    let (Some(prev), Some(state), Some(next)) = (
        ctx::u32_at(p, off_prev),
        ctx::u64_at(p, off_state),
        ctx::u32_at(p, off_next),
    ) else {
        return 0;
    };
    // Read once, and only when a wait starts or ends here (not for a thread going to sleep and
    // the idle task).
    let mut now_cache = 0u64;
    let mut now_ns = || {
        if now_cache == 0 {
            // SAFETY: helper without arguments.
            now_cache = unsafe { bpf_ktime_get_ns() };
        }
        now_cache
    };
    // Read only when threads are filtered (the verifier removes the read otherwise).
    let generation = if tracked_only() {
        tracking_generation()
    } else {
        0
    };
    if prev != 0 {
        // SAFETY: CONFIG is a valid static.
        let sleep_mask = unsafe { core::ptr::read_volatile(&CONFIG.sleep_state_mask) };
        let runnable = state & sleep_mask == 0;
        match tid_state(prev) {
            // SAFETY: map value pointer from the kernel; `prev` is switched out by this CPU.
            Some(s) => unsafe {
                if (*s).tgid == 0 {
                    (*s).tgid = current_tgid();
                }
                if tracked_only() && !is_tracked(s, generation) {
                    // Not timed: `is_tracked` cleared any wait when it found it untracked.
                } else if runnable {
                    (*s).queued_ns = now_ns();
                    (*s).preempted = 1;
                } else if (*s).queued_ns != 0 {
                    // Woken while still running: that wait never started.
                    (*s).queued_ns = 0;
                    (*s).preempted = 0;
                }
            },
            None => {
                let tgid = current_tgid();
                // A thread id beyond the array, first seen: its state caches whether it is
                // tracked, so that later events need no `TRACKED` lookup either.
                // SAFETY: the value is a plain u32 checked for presence only.
                let tracked = !tracked_only() || unsafe { TRACKED.get(&tgid) }.is_some();
                let queued = runnable && tracked;
                insert_tid_state(
                    prev,
                    &TidState {
                        queued_ns: if queued { now_ns() } else { 0 },
                        tgid,
                        preempted: queued as u32,
                        tracked_generation: generation,
                        tracked: tracked as u32,
                    },
                );
            }
        }
    }
    if next == 0 {
        return 0;
    }
    let Some(state) = tid_state(next) else {
        return 0;
    };
    if tracked_only() {
        // SAFETY: map value pointer from the kernel.
        if unsafe { (*state).tgid } == 0 || !is_tracked(state, generation) {
            return 0;
        }
    }
    // SAFETY: map value pointer from the kernel; only this CPU switches `next` in.
    let (queued_ns, tgid, preempted) =
        unsafe { ((*state).queued_ns, (*state).tgid, (*state).preempted) };
    if queued_ns == 0 {
        return 0;
    }
    // SAFETY: as above.
    unsafe {
        (*state).queued_ns = 0;
        (*state).preempted = 0;
    }
    if tgid == 0 {
        return 0;
    }
    let now_ns = now_ns();
    if now_ns < queued_ns {
        return 0;
    }
    let delay_ns = now_ns - queued_ns;
    let bucket = if delay_ns == 0 {
        0
    } else {
        (63 - delay_ns.leading_zeros()) as usize
    };
    let bucket = if bucket >= RUNQ_HIST_BUCKETS {
        RUNQ_HIST_BUCKETS - 1
    } else {
        bucket
    };
    count_events(tgid, |events| {
        // SAFETY: map value pointer from the kernel; `bucket` is below RUNQ_HIST_BUCKETS.
        unsafe {
            if preempted != 0 {
                add(&raw mut (*events).involuntary_switches, 1);
            }
            add(&raw mut (*events).runq_count, 1);
            add(&raw mut (*events).runq_total_ns, delay_ns);
            add(
                (&raw mut (*events).runq_hist as *mut u64).add(bucket & (RUNQ_HIST_BUCKETS - 1)),
                1,
            );
        }
    });
    0
}
