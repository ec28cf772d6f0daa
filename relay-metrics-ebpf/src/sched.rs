//! Run-queue delay and involuntary switches.

use aya_ebpf::{
    helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext, EbpfContext,
};
use relay_metrics_common::{TidState, NO_FIELD, RUNQ_HIST_BUCKETS};

use crate::{add, ctx, current_tgid, insert_failed, tgid_stats, CONFIG, CREATED_BY, TIDS};

#[inline(always)]
fn mark_queued(tid: u32, tgid: u32, now_ns: u64, preempted: u32) {
    if let Some(state) = TIDS.get_ptr_mut(&tid) {
        // SAFETY: map value pointer from the kernel; a thread is queued by one CPU at a time.
        unsafe {
            (*state).queued_ns = now_ns;
            (*state).preempted = preempted;
            if tgid != 0 {
                (*state).tgid = tgid;
            }
        }
        return;
    }
    let state = TidState {
        queued_ns: now_ns,
        tgid,
        preempted,
    };
    if TIDS.insert(&tid, &state, 0).is_err() {
        insert_failed();
    }
}

#[inline(always)]
fn on_wakeup(ctx: &TracePointContext, off: u16, new_task: bool) -> u32 {
    if off == NO_FIELD {
        return 0;
    }
    let Some(tid) = ctx::u32_at(ctx.as_ptr() as *const u8, off) else {
        return 0;
    };
    if tid == 0 {
        return 0;
    }
    // A new task has not run yet, so its tgid is not known from a switch: it is its own tgid
    // when it is a new process, else (a thread) its creator's, which is running now.
    let tgid = if !new_task {
        0
    // SAFETY: plain lookup, the value is not used.
    } else if unsafe { CREATED_BY.get(&tid) }.is_some() {
        tid
    } else {
        current_tgid()
    };
    // SAFETY: helper without arguments.
    mark_queued(tid, tgid, unsafe { bpf_ktime_get_ns() }, 0);
    0
}

/// `sched:sched_wakeup`: the thread is queued from now on.
#[tracepoint]
pub fn sched_wakeup(ctx: TracePointContext) -> u32 {
    on_wakeup(&ctx, cfg!(wakeup_pid), false)
}

/// `sched:sched_wakeup_new`: a new task is queued for the first time.
#[tracepoint]
pub fn sched_wakeup_new(ctx: TracePointContext) -> u32 {
    on_wakeup(&ctx, cfg!(wakeup_new_pid), true)
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
    // The clock read is a large part of the cost (~70 ns in our VMs): read it once, and only
    // when a wait starts or ends here (not for a thread going to sleep and the idle task).
    let mut now_cache = 0u64;
    let mut now_ns = || {
        if now_cache == 0 {
            // SAFETY: helper without arguments.
            now_cache = unsafe { bpf_ktime_get_ns() };
        }
        now_cache
    };
    if prev != 0 {
        let tgid = current_tgid();
        // SAFETY: CONFIG is a valid static.
        let sleep_mask = unsafe { core::ptr::read_volatile(&CONFIG.sleep_state_mask) };
        if state & sleep_mask == 0 {
            mark_queued(prev, tgid, now_ns(), 1);
        } else {
            mark_queued(prev, tgid, 0, 0);
        }
    }
    if next == 0 {
        return 0;
    }
    let Some(state) = TIDS.get_ptr_mut(&next) else {
        return 0;
    };
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
    let now_ns = now_ns();
    if tgid == 0 || now_ns < queued_ns {
        return 0;
    }
    let delay_ns = now_ns - queued_ns;
    let Some(stats) = tgid_stats(tgid) else {
        return 0;
    };
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
    // SAFETY: map value pointer from the kernel; `bucket` is below RUNQ_HIST_BUCKETS.
    unsafe {
        if preempted != 0 {
            add(&raw mut (*stats).involuntary_switches, 1);
        }
        add(&raw mut (*stats).runq_count, 1);
        add(&raw mut (*stats).runq_total_ns, delay_ns);
        add(
            (&raw mut (*stats).runq_hist as *mut u64).add(bucket & (RUNQ_HIST_BUCKETS - 1)),
            1,
        );
    }
    0
}
