//! relay-metrics kernel-event programs: process creations/exits, run-queue delay and involuntary
//! switches, memory-reclaim stalls and throttling, OOM kills.
//!
//! Everything is read from classic tracepoint records (or from `bpf_get_current_*` helpers): no
//! kernel-memory reads, so the programs load under lockdown=confidentiality too. Field offsets are
//! not compiled in: userspace parses them from tracefs `format` files and writes them into the
//! `.rodata` global [`CONFIG`]; the verifier treats those values as constants, so each field
//! access below resolves to a single load at a constant offset (the other branches are dead code
//! the verifier removes).
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod ctx;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_ktime_get_boot_ns, bpf_ktime_get_ns,
    },
    macros::{map, tracepoint},
    maps::{Array, HashMap, LruHashMap, RingBuf},
    programs::TracePointContext,
    EbpfContext,
};
use relay_metrics_common::{
    CgroupStats, Config, GlobalStats, OomVictimRecord, ScopeStats, TgidStats, TidState, COMM_LEN,
    MAX_SCOPES, NO_FIELD, RUNQ_HIST_BUCKETS,
};

/// Field offsets, written by the loader before the programs are verified.
#[no_mangle]
static CONFIG: Config = Config::unavailable();

/// Initial value of a new [`TGIDS`] entry; a static so the 328 bytes live in `.rodata`, not on
/// the 512-byte BPF stack.
#[no_mangle]
static ZERO_TGID_STATS: TgidStats = TgidStats::ZERO;

const CLONE_THREAD: u64 = 0x0001_0000;
const BPF_NOEXIST: u64 = 1;

#[map]
static TGIDS: LruHashMap<u32, TgidStats> = LruHashMap::with_max_entries(16384, 0);
#[map]
static CGROUPS: LruHashMap<u64, CgroupStats> = LruHashMap::with_max_entries(4096, 0);
/// child tgid -> parent tgid, for every process created since load.
#[map]
static CREATED_BY: LruHashMap<u32, u32> = LruHashMap::with_max_entries(65536, 0);
/// tgid -> scope index; userspace inserts scope roots, the fork program adds their descendants.
/// Not LRU: evicting a member would silently lose its subtree.
#[map]
static TRACKED: HashMap<u32, u32> = HashMap::with_max_entries(65536, 0);
#[map]
static SCOPES: Array<ScopeStats> = Array::with_max_entries(MAX_SCOPES, 0);
#[map]
static TIDS: LruHashMap<u32, TidState> = LruHashMap::with_max_entries(65536, 0);
#[map]
static RECLAIM_TS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);
#[map]
static GLOBAL: Array<GlobalStats> = Array::with_max_entries(1, 0);
#[map]
static OOM_EVENTS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// Reads one `u16` of [`CONFIG`] so that the compiler cannot fold it to the compile-time default.
macro_rules! cfg {
    ($field:ident) => {
        // SAFETY: CONFIG is a valid static; volatile keeps the load from `.rodata` in the program.
        unsafe { core::ptr::read_volatile(&CONFIG.$field) }
    };
}

#[inline(always)]
fn add(counter: *mut u64, value: u64) {
    // SAFETY: `counter` points into a map value returned by the kernel, valid and 8-byte aligned
    // for the program's run; other CPUs update it concurrently, hence the atomic add (BPF_XADD;
    // core's atomics lack read-modify-write operations on this target).
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) counter,
            v = in(reg) value,
            options(nostack, preserves_flags),
        );
    }
}

#[inline(always)]
fn global() -> Option<*mut GlobalStats> {
    GLOBAL.get_ptr_mut(0)
}

#[inline(always)]
fn insert_failed() {
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).map_insert_failures }, 1);
    }
}

#[inline(always)]
fn tgid_stats(tgid: u32) -> Option<*mut TgidStats> {
    if let Some(stats) = TGIDS.get_ptr_mut(&tgid) {
        return Some(stats);
    }
    // NOEXIST: another CPU may have inserted it meanwhile; its counts must not be reset.
    let _ = TGIDS.insert(&tgid, &ZERO_TGID_STATS, BPF_NOEXIST);
    let stats = TGIDS.get_ptr_mut(&tgid);
    if stats.is_none() {
        insert_failed();
    }
    stats
}

#[inline(always)]
fn cgroup_stats() -> Option<*mut CgroupStats> {
    // SAFETY: helper without arguments.
    let id = unsafe { bpf_get_current_cgroup_id() };
    if let Some(stats) = CGROUPS.get_ptr_mut(&id) {
        return Some(stats);
    }
    let _ = CGROUPS.insert(&id, &CgroupStats::default(), BPF_NOEXIST);
    let stats = CGROUPS.get_ptr_mut(&id);
    if stats.is_none() {
        insert_failed();
    }
    stats
}

#[inline(always)]
fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

/// `task:task_newtask`: fires in the parent with the new task's pid and clone flags, which tell
/// threads from processes (`sched_process_fork` fires for both and cannot tell them apart).
#[tracepoint]
pub fn task_newtask(ctx: TracePointContext) -> u32 {
    let (off_pid, off_flags) = (cfg!(newtask_pid), cfg!(newtask_clone_flags));
    if off_pid == NO_FIELD || off_flags == NO_FIELD {
        return 0;
    }
    let p = ctx.as_ptr() as *const u8;
    let (Some(child), Some(flags)) = (ctx::u32_at(p, off_pid), ctx::u64_at(p, off_flags)) else {
        return 0;
    };
    let parent = current_tgid();
    let Some(stats) = tgid_stats(parent) else {
        return 0;
    };
    if flags & CLONE_THREAD != 0 {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*stats).threads_created }, 1);
        return 0;
    }
    // SAFETY: map value pointer from the kernel.
    add(unsafe { &raw mut (*stats).processes_created }, 1);
    if CREATED_BY.insert(&child, &parent, 0).is_err() {
        insert_failed();
    }
    if let Some(cg) = cgroup_stats() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*cg).processes_created }, 1);
    }
    // SAFETY: the value is a plain u32 copied out at once.
    if let Some(scope) = unsafe { TRACKED.get(&parent) }.copied() {
        if TRACKED.insert(&child, &scope, 0).is_err() {
            insert_failed();
        }
        if let Some(s) = SCOPES.get_ptr_mut(scope) {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*s).processes_created }, 1);
        }
    }
    0
}

/// `sched:sched_process_exit`: fires for every exiting thread; the process is gone with its last
/// thread (`group_dead`, or the leader's exit on kernels whose record lacks that field).
#[tracepoint]
pub fn sched_process_exit(ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    let _ = TIDS.remove(&tid);
    let off_dead = cfg!(exit_group_dead);
    let group_dead = if off_dead == NO_FIELD {
        tid == tgid
    } else {
        match ctx::u8_at(ctx.as_ptr() as *const u8, off_dead) {
            Some(dead) => dead != 0,
            None => return 0,
        }
    };
    if !group_dead {
        return 0;
    }
    if let Some(cg) = cgroup_stats() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*cg).processes_exited }, 1);
    }
    // SAFETY: the value is a plain u32 copied out at once.
    if let Some(scope) = unsafe { TRACKED.get(&tgid) }.copied() {
        let _ = TRACKED.remove(&tgid);
        if let Some(s) = SCOPES.get_ptr_mut(scope) {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*s).processes_exited }, 1);
        }
    }
    0
}

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
    // SAFETY: helper without arguments.
    let now_ns = unsafe { bpf_ktime_get_ns() };
    if prev != 0 {
        let tgid = current_tgid();
        // SAFETY: CONFIG is a valid static.
        let sleep_mask = unsafe { core::ptr::read_volatile(&CONFIG.sleep_state_mask) };
        if state & sleep_mask == 0 {
            mark_queued(prev, tgid, now_ns, 1);
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

#[inline(always)]
fn reclaim_begin() -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    // SAFETY: helper without arguments.
    let now_ns = unsafe { bpf_ktime_get_ns() };
    if RECLAIM_TS.insert(&tid, &now_ns, 0).is_err() {
        insert_failed();
    }
    0
}

#[inline(always)]
fn reclaim_end() -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tid, tgid) = (pid_tgid as u32, (pid_tgid >> 32) as u32);
    // SAFETY: the value is a plain u64 copied out at once.
    let Some(begin_ns) = unsafe { RECLAIM_TS.get(&tid) }.copied() else {
        return 0;
    };
    let _ = RECLAIM_TS.remove(&tid);
    // SAFETY: helper without arguments.
    let stall_ns = unsafe { bpf_ktime_get_ns() }.saturating_sub(begin_ns);
    if let Some(stats) = tgid_stats(tgid) {
        // SAFETY: map value pointer from the kernel.
        unsafe {
            add(&raw mut (*stats).reclaim_count, 1);
            add(&raw mut (*stats).reclaim_total_ns, stall_ns);
        }
    }
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        unsafe {
            add(&raw mut (*g).reclaim_count, 1);
            add(&raw mut (*g).reclaim_total_ns, stall_ns);
        }
    }
    if let Some(cg) = cgroup_stats() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*cg).reclaim_count }, 1);
    }
    0
}

/// `vmscan:mm_vmscan_memcg_reclaim_begin`: a task starts reclaiming for its memory cgroup.
#[tracepoint]
pub fn memcg_reclaim_begin(_ctx: TracePointContext) -> u32 {
    reclaim_begin()
}

/// `vmscan:mm_vmscan_memcg_reclaim_end`.
#[tracepoint]
pub fn memcg_reclaim_end(_ctx: TracePointContext) -> u32 {
    reclaim_end()
}

/// `vmscan:mm_vmscan_direct_reclaim_begin`: a task starts direct (global) reclaim.
#[tracepoint]
pub fn direct_reclaim_begin(_ctx: TracePointContext) -> u32 {
    reclaim_begin()
}

/// `vmscan:mm_vmscan_direct_reclaim_end`.
#[tracepoint]
pub fn direct_reclaim_end(_ctx: TracePointContext) -> u32 {
    reclaim_end()
}

/// `vmscan:mm_vmscan_throttled`: the task was put to sleep by `reclaim_throttle`.
#[tracepoint]
pub fn vmscan_throttled(ctx: TracePointContext) -> u32 {
    let off = cfg!(throttled_usec_delayed);
    let delayed_usec = if off == NO_FIELD {
        0
    } else {
        ctx::u32_at(ctx.as_ptr() as *const u8, off).unwrap_or(0) as i32
    };
    if let Some(stats) = tgid_stats(current_tgid()) {
        // SAFETY: map value pointer from the kernel.
        unsafe {
            add(&raw mut (*stats).throttled_count, 1);
            add(
                &raw mut (*stats).throttled_total_usec,
                delayed_usec.max(0) as u64,
            );
        }
    }
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).throttled_count }, 1);
    }
    0
}

/// `oom:mark_victim`: the OOM killer chose a victim; it is counted and pushed to userspace.
#[tracepoint]
pub fn oom_mark_victim(ctx: TracePointContext) -> u32 {
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).oom_kills }, 1);
    }
    if let Some(cg) = cgroup_stats() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*cg).oom_kills }, 1);
    }
    let Some(mut entry) = OOM_EVENTS.reserve::<OomVictimRecord>(0) else {
        if let Some(g) = global() {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*g).oom_ringbuf_drops }, 1);
        }
        return 0;
    };
    let p = ctx.as_ptr() as *const u8;
    let u64_field = |off: u16| {
        if off == NO_FIELD {
            0
        } else {
            ctx::u64_at(p, off).unwrap_or(0)
        }
    };
    let u32_field = |off: u16| {
        if off == NO_FIELD {
            0
        } else {
            ctx::u32_at(p, off).unwrap_or(0)
        }
    };
    let victim = u32_field(cfg!(victim_pid));
    // The victim is still alive (and tracked) when it is marked.
    // SAFETY: the value is a plain u32 copied out at once.
    if let Some(scope) = unsafe { TRACKED.get(&victim) }.copied() {
        if let Some(s) = SCOPES.get_ptr_mut(scope) {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*s).oom_kills }, 1);
        }
    }
    // The allocating task is often the victim itself; reading another task's comm would need a
    // kernel-memory read. (The record's comm is dynamic data past the fixed fields, beyond what a
    // tracepoint program may read directly: attaching fails with EACCES.)
    let pid_tgid = bpf_get_current_pid_tgid();
    let comm = if victim == pid_tgid as u32 {
        bpf_get_current_comm().unwrap_or([0; COMM_LEN])
    } else {
        [0; COMM_LEN]
    };
    let off_adj = cfg!(victim_oom_score_adj);
    let record = OomVictimRecord {
        // SAFETY: helper without arguments.
        time_boot_ns: unsafe { bpf_ktime_get_boot_ns() },
        // SAFETY: helper without arguments.
        killer_cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        total_vm_kib: u64_field(cfg!(victim_total_vm)),
        anon_rss_kib: u64_field(cfg!(victim_anon_rss)),
        file_rss_kib: u64_field(cfg!(victim_file_rss)),
        shmem_rss_kib: u64_field(cfg!(victim_shmem_rss)),
        pgtables_kib: u64_field(cfg!(victim_pgtables)),
        pid: victim,
        uid: u32_field(cfg!(victim_uid)),
        killer_tgid: (pid_tgid >> 32) as u32,
        oom_score_adj: if off_adj == NO_FIELD {
            0
        } else {
            ctx::i16_at(p, off_adj).unwrap_or(0)
        },
        _pad: 0,
        comm,
    };
    entry.write(record);
    entry.submit(0);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
