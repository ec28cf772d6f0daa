//! Types shared by the relay-metrics eBPF programs (kernel side) and their loader (user side).
//!
//! Every type is `#[repr(C)]` with explicit padding fields and a compile-time size assertion, so
//! both sides agree on the layout byte for byte and no uninitialised padding reaches a map.
#![no_std]

/// Marks a tracepoint field offset as unavailable (the field is missing or has another size on
/// this kernel): the program that needs it then counts nothing rather than a wrong number.
pub const NO_FIELD: u16 = u16::MAX;

/// Number of log2 buckets of the run-queue delay histogram: bucket `i` counts delays `d` (ns)
/// with `floor(log2(d)) == i` (bucket 0 also holds 0 ns); the last bucket holds everything above.
pub const RUNQ_HIST_BUCKETS: usize = 32;

/// Maximum number of process-tree scopes whose creations are counted in the kernel.
pub const MAX_SCOPES: u32 = 64;

/// Bytes of a task's command name (`TASK_COMM_LEN`).
pub const COMM_LEN: usize = 16;

/// Offsets (bytes from the start of the tracepoint record) of the fields the programs read, taken
/// at load time from `/sys/kernel/tracing/events/<cat>/<name>/format`. Stored in `.rodata` so the
/// verifier sees them as constants. A field the format lacks is [`NO_FIELD`].
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::Immutable,
        zerocopy::KnownLayout
    )
)]
pub struct Config {
    /// `task:task_newtask` `pid` (pid_t, 4 bytes).
    pub newtask_pid: u16,
    /// `task:task_newtask` `clone_flags` (u64, 8 bytes).
    pub newtask_clone_flags: u16,
    /// `sched:sched_process_exit` `pid` (pid_t).
    pub exit_pid: u16,
    /// `sched:sched_process_exit` `group_dead` (bool, 1 byte; absent before Linux 6.8).
    pub exit_group_dead: u16,
    /// `sched:sched_switch` `prev_pid` (pid_t).
    pub switch_prev_pid: u16,
    /// `sched:sched_switch` `prev_state` (long, 8 bytes).
    pub switch_prev_state: u16,
    /// `sched:sched_switch` `next_pid` (pid_t).
    pub switch_next_pid: u16,
    /// `sched:sched_wakeup` `pid` (pid_t).
    pub wakeup_pid: u16,
    /// `sched:sched_wakeup_new` `pid` (pid_t).
    pub wakeup_new_pid: u16,
    /// `oom:mark_victim` `pid` (int).
    pub victim_pid: u16,
    /// `oom:mark_victim` `total_vm` (unsigned long, KiB).
    pub victim_total_vm: u16,
    /// `oom:mark_victim` `anon_rss` (unsigned long, KiB).
    pub victim_anon_rss: u16,
    /// `oom:mark_victim` `file_rss` (unsigned long, KiB).
    pub victim_file_rss: u16,
    /// `oom:mark_victim` `shmem_rss` (unsigned long, KiB).
    pub victim_shmem_rss: u16,
    /// `oom:mark_victim` `uid` (uid_t).
    pub victim_uid: u16,
    /// `oom:mark_victim` `pgtables` (unsigned long, KiB).
    pub victim_pgtables: u16,
    /// `oom:mark_victim` `oom_score_adj` (short).
    pub victim_oom_score_adj: u16,
    /// `vmscan:mm_vmscan_throttled` `usec_delayed` (int).
    pub throttled_usec_delayed: u16,
    /// Non-zero: the scheduler programs skip the threads of processes outside every tracked
    /// scope (`TRACKED`), returning before any clock read; their per-tgid run-queue counters
    /// stay zero. Set when nothing reads those counters for untracked processes.
    pub sched_tracked_only: u16,
    /// Explicit padding.
    pub _pad: u16,
    /// Bits of `sched_switch`'s `prev_state` that report a sleeping state: a switch with none of
    /// them set is involuntary (preempted, or yielded while runnable).
    pub sleep_state_mask: u64,
}
const _: () = assert!(core::mem::size_of::<Config>() == 48);

impl Config {
    /// A configuration with every field unavailable: every program counts nothing.
    pub const fn unavailable() -> Self {
        Self {
            newtask_pid: NO_FIELD,
            newtask_clone_flags: NO_FIELD,
            exit_pid: NO_FIELD,
            exit_group_dead: NO_FIELD,
            switch_prev_pid: NO_FIELD,
            switch_prev_state: NO_FIELD,
            switch_next_pid: NO_FIELD,
            wakeup_pid: NO_FIELD,
            wakeup_new_pid: NO_FIELD,
            victim_pid: NO_FIELD,
            victim_total_vm: NO_FIELD,
            victim_anon_rss: NO_FIELD,
            victim_file_rss: NO_FIELD,
            victim_shmem_rss: NO_FIELD,
            victim_uid: NO_FIELD,
            victim_pgtables: NO_FIELD,
            victim_oom_score_adj: NO_FIELD,
            throttled_usec_delayed: NO_FIELD,
            sched_tracked_only: 0,
            _pad: 0,
            sleep_state_mask: 0xff,
        }
    }
}

/// Scheduler and memory-reclaim event counters, kept per thread group ([`TgidStats`]) and per
/// tracked scope ([`ScopeStats`]).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventCounters {
    /// Times a thread waited on a run queue before running.
    pub runq_count: u64,
    /// Total ns the threads waited on run queues.
    pub runq_total_ns: u64,
    /// Log2 histogram of the waits (see [`RUNQ_HIST_BUCKETS`]).
    pub runq_hist: [u64; RUNQ_HIST_BUCKETS],
    /// Switches away from a runnable thread (preemptions and yields).
    pub involuntary_switches: u64,
    /// Memory-reclaim stalls (memcg and direct reclaim) the threads went through.
    pub reclaim_count: u64,
    /// Total ns of those stalls.
    pub reclaim_total_ns: u64,
    /// Times the threads were throttled by `reclaim_throttle` (`vmscan:mm_vmscan_throttled`).
    pub throttled_count: u64,
    /// Total µs of that throttling.
    pub throttled_total_usec: u64,
}
const _: () = assert!(core::mem::size_of::<EventCounters>() == 8 * (RUNQ_HIST_BUCKETS + 7));

impl EventCounters {
    /// All counters zero.
    pub const ZERO: Self = Self {
        runq_count: 0,
        runq_total_ns: 0,
        runq_hist: [0; RUNQ_HIST_BUCKETS],
        involuntary_switches: 0,
        reclaim_count: 0,
        reclaim_total_ns: 0,
        throttled_count: 0,
        throttled_total_usec: 0,
    };
}

impl Default for EventCounters {
    fn default() -> Self {
        Self::ZERO
    }
}

/// Counters kept per thread group (tgid) in an LRU hash map.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TgidStats {
    /// Processes (not threads) this tgid created.
    pub processes_created: u64,
    /// Threads this tgid created.
    pub threads_created: u64,
    /// Its threads' scheduler and reclaim events.
    pub events: EventCounters,
    /// The tracked scope the tgid belongs to, plus one (0: none), as last looked up in `TRACKED`:
    /// a cache, so that counting an event for the scope too costs no hash lookup.
    pub scope_plus_one: u32,
    /// The value of `TRACKING_GENERATION` when `scope_plus_one` was looked up; userspace bumps
    /// it whenever it changes `TRACKED`, which makes every tgid look its scope up again.
    pub scope_generation: u32,
}
const _: () =
    assert!(core::mem::size_of::<TgidStats>() == 16 + core::mem::size_of::<EventCounters>() + 8);

impl TgidStats {
    /// All counters zero, scope not looked up yet (userspace's generations start at 1).
    pub const ZERO: Self = Self {
        processes_created: 0,
        threads_created: 0,
        events: EventCounters::ZERO,
        scope_plus_one: 0,
        scope_generation: 0,
    };
}

/// Counters kept per cgroup v2 id (`bpf_get_current_cgroup_id`) in an LRU hash map. On hybrid
/// hosts every process is in the v2 root, so userspace attributes v1 cgroups by pid instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupStats {
    /// Processes created by tasks of this cgroup.
    pub processes_created: u64,
    /// Processes whose last thread exited in this cgroup.
    pub processes_exited: u64,
    /// OOM kills decided while a task of this cgroup was running (the allocating task).
    pub oom_kills: u64,
    /// Memory-reclaim stalls of tasks of this cgroup.
    pub reclaim_count: u64,
}
const _: () = assert!(core::mem::size_of::<CgroupStats>() == 32);

/// Counters of one process-tree scope (see the `TRACKED` map): every process created by a tracked
/// process becomes tracked with the same scope, so the kernel counts a whole tree's creations even
/// when intermediate processes have exited before userspace looked.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScopeStats {
    /// Processes created inside the tree since it was tracked.
    pub processes_created: u64,
    /// Processes of the tree that exited since it was tracked.
    pub processes_exited: u64,
    /// Processes of the tree chosen as OOM victims since it was tracked.
    pub oom_kills: u64,
    /// Threads created by processes of the tree while they were tracked.
    pub threads_created: u64,
    /// Scheduler and reclaim events of the tree's processes while they were tracked: unlike a
    /// sum over the live processes, these never go down when a process exits.
    pub events: EventCounters,
}
const _: () =
    assert!(core::mem::size_of::<ScopeStats>() == 32 + core::mem::size_of::<EventCounters>());

/// Machine-wide counters (a single-entry array map).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalStats {
    /// OOM victims marked (`oom:mark_victim`).
    pub oom_kills: u64,
    /// OOM victims that could not be pushed to the ring buffer (it was full).
    pub oom_ringbuf_drops: u64,
    /// Map insertions that failed (a map full of non-evictable entries).
    pub map_insert_failures: u64,
    /// Memory-reclaim stalls.
    pub reclaim_count: u64,
    /// Total ns of memory-reclaim stalls.
    pub reclaim_total_ns: u64,
    /// `vmscan:mm_vmscan_throttled` events.
    pub throttled_count: u64,
    /// Processes (not threads) created machine-wide.
    pub processes_created: u64,
    /// Processes (last thread) that exited machine-wide.
    pub processes_exited: u64,
    /// Tasks moved between cgroups (`cgroup:cgroup_attach_task`), on any hierarchy.
    pub cgroup_migrations: u64,
    /// Tasks created straight into another cgroup than their parent's (clone3's
    /// `CLONE_INTO_CGROUP`): with `cgroup_migrations`, every way a task enters a cgroup other
    /// than by inheriting its parent's.
    pub clone_into_cgroup: u64,
    /// Cgroup directories made, removed or renamed (`cgroup:cgroup_mkdir`, `cgroup_rmdir`,
    /// `cgroup_rename`), on any hierarchy: while it stands still, a walk of a hierarchy's
    /// directories finds what the last one found. `cgroup_mkdir` fires just before the new
    /// directory shows, so a walk begun after the count may still miss it.
    pub cgroup_dir_changes: u64,
}
const _: () = assert!(core::mem::size_of::<GlobalStats>() == 88);

/// Per-thread state of the scheduler programs: when the thread was queued, and its tgid (known
/// from when it last ran, since a wakeup or switch-in record names only the thread id).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TidState {
    /// `bpf_ktime_get_ns` when the thread became runnable; 0 while it is not queued.
    pub queued_ns: u64,
    /// The thread's tgid; 0 until it has been seen running.
    pub tgid: u32,
    /// 1 when it was queued by an involuntary switch: counted when it next runs, where its tgid's
    /// counters are looked up anyway (saving a lookup per preemption).
    pub preempted: u32,
    /// The value of `TRACKING_GENERATION` when `tracked` was looked up (0: never, unless
    /// userspace has tracked nothing yet, when nothing is tracked indeed).
    pub tracked_generation: u32,
    /// 1 when the thread's tgid was in `TRACKED` at `tracked_generation`: a cache, so that
    /// [`Config::sched_tracked_only`] costs no hash lookup per event.
    pub tracked: u32,
}
const _: () = assert!(core::mem::size_of::<TidState>() == 24);

/// One OOM victim, pushed through the ring buffer by `oom:mark_victim`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(
    feature = "user",
    derive(
        zerocopy::FromBytes,
        zerocopy::IntoBytes,
        zerocopy::Immutable,
        zerocopy::KnownLayout
    )
)]
pub struct OomVictimRecord {
    /// `bpf_ktime_get_boot_ns` at the kill (ns since boot, suspend included).
    pub time_boot_ns: u64,
    /// `bpf_get_current_cgroup_id` of the task that ran the OOM killer.
    pub killer_cgroup_id: u64,
    /// Victim's total virtual memory, KiB (the record's unit since the fields exist).
    pub total_vm_kib: u64,
    /// Victim's anonymous RSS, KiB.
    pub anon_rss_kib: u64,
    /// Victim's file RSS, KiB.
    pub file_rss_kib: u64,
    /// Victim's shared-memory RSS, KiB.
    pub shmem_rss_kib: u64,
    /// Victim's page tables, KiB.
    pub pgtables_kib: u64,
    /// Victim's pid (thread-group leader's pid as the kernel reports it).
    pub pid: u32,
    /// Victim's uid.
    pub uid: u32,
    /// tgid of the task that ran the OOM killer.
    pub killer_tgid: u32,
    /// Victim's `oom_score_adj`.
    pub oom_score_adj: i16,
    /// 1 + the scope slot the victim was tracked in when it was marked; 0 when untracked.
    pub scope_plus_one: u16,
    /// Victim's command name, NUL-padded, when the victim is the task running the OOM killer
    /// (the record's own comm is dynamic data past the fixed fields, which a tracepoint program
    /// may not read directly); else all zero and userspace reads `/proc/<pid>/comm`.
    pub comm: [u8; COMM_LEN],
}
const _: () = assert!(core::mem::size_of::<OomVictimRecord>() == 7 * 8 + 4 * 3 + 4 + COMM_LEN);

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)], made only of integers with explicit padding fields
    // (no implicit padding, checked by the size assertions), so every bit pattern is valid.
    unsafe impl aya::Pod for super::Config {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TgidStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CgroupStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ScopeStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::GlobalStats {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::TidState {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::OomVictimRecord {}
}
