//! Process creations and exits.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext, EbpfContext,
};
use relay_metrics_common::NO_FIELD;

use crate::{
    add, cgroup_stats, ctx, current_tgid, global, insert_failed, scope_of, sched, tgid_stats,
    CLONE_INTO_CGROUP, CLONE_THREAD, CREATED_BY, SCOPES, TGIDS, TRACKED,
};

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
    if let Some(g) = global() {
        if flags & CLONE_THREAD == 0 {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*g).processes_created }, 1);
        }
        if flags & CLONE_INTO_CGROUP != 0 {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*g).clone_into_cgroup }, 1);
        }
    }
    let parent = current_tgid();
    sched::new_thread(
        child,
        if flags & CLONE_THREAD != 0 {
            parent
        } else {
            child
        },
    );
    let Some(stats) = tgid_stats(parent) else {
        return 0;
    };
    if flags & CLONE_THREAD != 0 {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*stats).threads_created }, 1);
        if let Some(scope) = scope_of(parent, stats) {
            // SAFETY: map value pointer from the kernel.
            add(unsafe { &raw mut (*scope).threads_created }, 1);
        }
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
    sched::thread_exited(tid);
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
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).processes_exited }, 1);
    }
    if let Some(cg) = cgroup_stats() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*cg).processes_exited }, 1);
    }
    // A process that reuses the id must look its scope up afresh (the counters stay readable).
    if let Some(stats) = TGIDS.get_ptr_mut(&tgid) {
        // SAFETY: map value pointer from the kernel; generation 0 never matches userspace's.
        unsafe {
            (*stats).scope_plus_one = 0;
            (*stats).scope_generation = 0;
        }
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

/// `cgroup:cgroup_attach_task`: a task moved to another cgroup (after the move). With creations
/// and exits, it tells userspace when a cgroup's membership may have changed.
#[tracepoint]
pub fn cgroup_attach_task(_ctx: TracePointContext) -> u32 {
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).cgroup_migrations }, 1);
    }
    0
}

/// Counts a cgroup directory made, removed or renamed (see `GlobalStats::cgroup_dir_changes`).
fn cgroup_dir_changed() -> u32 {
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).cgroup_dir_changes }, 1);
    }
    0
}

/// `cgroup:cgroup_mkdir`: a cgroup made (just before its directory shows).
#[tracepoint]
pub fn cgroup_mkdir(_ctx: TracePointContext) -> u32 {
    cgroup_dir_changed()
}

/// `cgroup:cgroup_rmdir`: a cgroup removed (after its directory went).
#[tracepoint]
pub fn cgroup_rmdir(_ctx: TracePointContext) -> u32 {
    cgroup_dir_changed()
}

/// `cgroup:cgroup_rename`: a cgroup's directory renamed (after the rename).
#[tracepoint]
pub fn cgroup_rename(_ctx: TracePointContext) -> u32 {
    cgroup_dir_changed()
}
