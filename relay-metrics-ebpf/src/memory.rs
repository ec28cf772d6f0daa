//! Memory-reclaim stalls, reclaim throttling and OOM kills.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_ktime_get_boot_ns, bpf_ktime_get_ns,
    },
    macros::tracepoint,
    programs::TracePointContext,
    EbpfContext,
};
use relay_metrics_common::{OomVictimRecord, COMM_LEN, NO_FIELD};

use crate::{
    add, cgroup_stats, count_events, ctx, current_tgid, global, insert_failed, OOM_EVENTS,
    RECLAIM_TS, SCOPES, TRACKED,
};

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
    count_events(tgid, |events| {
        // SAFETY: map value pointer from the kernel.
        unsafe {
            add(&raw mut (*events).reclaim_count, 1);
            add(&raw mut (*events).reclaim_total_ns, stall_ns);
        }
    });
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
    count_events(current_tgid(), |events| {
        // SAFETY: map value pointer from the kernel.
        unsafe {
            add(&raw mut (*events).throttled_count, 1);
            add(
                &raw mut (*events).throttled_total_usec,
                delayed_usec.max(0) as u64,
            );
        }
    });
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
    let tracked_scope = unsafe { TRACKED.get(&victim) }.copied();
    if let Some(scope) = tracked_scope {
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
        // Scope slots are below MAX_SCOPES (64), so slot + 1 fits in a u16.
        scope_plus_one: tracked_scope.map_or(0, |slot| slot as u16 + 1),
        comm,
    };
    entry.write(record);
    entry.submit(0);
    0
}
