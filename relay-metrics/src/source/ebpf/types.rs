//! The public types of the eBPF source: options, program states, counters, OOM victims, errors.

use std::io;
use std::path::PathBuf;

use aya::maps::MapError;
use relay_metrics_common::{
    EventCounters, OomVictimRecord, ScopeStats, TgidStats, COMM_LEN, MAX_SCOPES, RUNQ_HIST_BUCKETS,
};

use crate::source::Roots;

/// Why no kernel-event counter is available: the snapshot reports this and goes on without them.
#[derive(Debug, thiserror::Error)]
pub enum EbpfUnavailable {
    /// Neither root nor CAP_BPF + CAP_PERFMON (or CAP_SYS_ADMIN).
    #[error("not privileged: loading eBPF needs root or CAP_BPF+CAP_PERFMON (CapEff {cap_eff:#x} in {path})")]
    NotPrivileged {
        /// The effective capability mask read.
        cap_eff: u64,
        /// Where it was read.
        path: PathBuf,
    },
    /// tracefs is neither mounted nor mountable.
    #[error("tracefs not available at {path}: {source}")]
    NoTracefs {
        /// The mount point tried.
        path: PathBuf,
        /// Why mounting failed.
        source: io::Error,
    },
    /// The kernel disabled tracing, so no tracepoint can be attached: their ids and formats are
    /// tracefs files, and tracefs is empty (kernel lockdown `confidentiality` does this).
    #[error("tracing is disabled by the kernel ({why}): the tracepoints' ids and record formats are tracefs files, so no program can be attached")]
    TracingDisabled {
        /// What showed it.
        why: String,
    },
    /// The object could not be loaded (maps creation, relocation).
    #[error("loading the eBPF object: {0}")]
    Load(#[source] Box<aya::EbpfError>),
    /// Every program failed; each failure is listed.
    #[error("no eBPF program could be attached: {0}")]
    NothingAttached(String),
}

/// A failed map access.
#[derive(Debug, thiserror::Error)]
pub enum EbpfReadError {
    /// A map lookup or update failed.
    #[error("eBPF map {map}: {source}")]
    Map {
        /// The map concerned.
        map: &'static str,
        /// The underlying error.
        source: MapError,
    },
    /// Every scope slot is taken.
    #[error("no free process-tree scope (at most {MAX_SCOPES})")]
    ScopesFull,
    /// The map the operation needs was not created.
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    /// The kernel refused to turn on the programs' run-time statistics.
    #[error("enabling BPF run-time statistics: {0}")]
    Stats(#[source] aya::sys::SyscallError),
}

pub(super) fn map_error(map: &'static str) -> impl FnOnce(MapError) -> EbpfReadError {
    move |source| EbpfReadError::Map { map, source }
}

/// Options of [`EbpfSource::load`](super::EbpfSource::load).
#[derive(Debug, Clone)]
pub struct EbpfOptions {
    /// Where `/proc` and `/sys` are (tracefs is looked up below `sys`).
    pub roots: Roots,
    /// How many OOM victims
    /// [`EbpfSource::recent_oom_victims`](super::EbpfSource::recent_oom_victims) keeps (oldest
    /// dropped first).
    pub max_recent_oom_victims: usize,
    /// The scheduler programs (`sched_switch`, `sched_wakeup`, `sched_wakeup_new`) skip the
    /// threads of processes outside every tracked scope (see
    /// [`EbpfSource::track_tree`](super::EbpfSource::track_tree)), at close to the cost of an
    /// empty program: the run-queue and preemption counters of untracked processes
    /// ([`EbpfSource::tgid`](super::EbpfSource::tgid)) then stay zero. For a caller that reads
    /// only scopes (a process tree, a cgroup) or nothing per process (global).
    pub tracked_only: bool,
}

impl Default for EbpfOptions {
    fn default() -> Self {
        Self {
            roots: Roots::host(),
            max_recent_oom_victims: 64,
            tracked_only: false,
        }
    }
}

/// One eBPF program and where it attaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramSpec {
    /// The program's name in the object.
    pub program: &'static str,
    /// Tracepoint category (`sched`, `oom`, …).
    pub category: &'static str,
    /// Tracepoint name.
    pub tracepoint: &'static str,
}

const fn spec(
    program: &'static str,
    category: &'static str,
    tracepoint: &'static str,
) -> ProgramSpec {
    ProgramSpec {
        program,
        category,
        tracepoint,
    }
}

/// Every program of the object.
pub(crate) const PROGRAMS: [ProgramSpec; 15] = [
    spec("task_newtask", "task", "task_newtask"),
    spec("sched_process_exit", "sched", "sched_process_exit"),
    spec("sched_switch", "sched", "sched_switch"),
    spec("sched_wakeup", "sched", "sched_wakeup"),
    spec("sched_wakeup_new", "sched", "sched_wakeup_new"),
    spec("oom_mark_victim", "oom", "mark_victim"),
    spec(
        "memcg_reclaim_begin",
        "vmscan",
        "mm_vmscan_memcg_reclaim_begin",
    ),
    spec("memcg_reclaim_end", "vmscan", "mm_vmscan_memcg_reclaim_end"),
    spec(
        "direct_reclaim_begin",
        "vmscan",
        "mm_vmscan_direct_reclaim_begin",
    ),
    spec(
        "direct_reclaim_end",
        "vmscan",
        "mm_vmscan_direct_reclaim_end",
    ),
    spec("vmscan_throttled", "vmscan", "mm_vmscan_throttled"),
    spec("cgroup_attach_task", "cgroup", "cgroup_attach_task"),
    spec("cgroup_mkdir", "cgroup", "cgroup_mkdir"),
    spec("cgroup_rmdir", "cgroup", "cgroup_rmdir"),
    spec("cgroup_rename", "cgroup", "cgroup_rename"),
];

/// Whether a program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramState {
    /// Loaded and attached: its counters are live.
    Attached,
    /// Not running, with the reason; its counters stay zero.
    Failed(String),
}

/// The state of one program after [`EbpfSource::load`](super::EbpfSource::load).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramStatus {
    /// Which program.
    pub spec: ProgramSpec,
    /// Whether it runs.
    pub state: ProgramState,
}

/// Kernel run-time statistics of one program (collected while `kernel.bpf_stats_enabled` is on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramRunStats {
    /// Which program.
    pub spec: ProgramSpec,
    /// The kernel's id of the loaded program (as `bpftool prog` lists it).
    pub id: u32,
    /// Total ns spent running it.
    pub run_time_ns: u64,
    /// Times it ran.
    pub run_count: u64,
}

/// Run-queue delay: time threads spent runnable but waiting for a CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunqDelay {
    /// Waits measured.
    pub count: u64,
    /// Total ns waited.
    pub total_ns: u64,
    /// Log2 histogram: bucket `i` counts waits of `2^i ..< 2^(i+1)` ns (the last one: longer).
    pub hist: [u64; RUNQ_HIST_BUCKETS],
}

/// Memory-reclaim stalls (memcg and direct reclaim).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReclaimStalls {
    /// Stalls.
    pub count: u64,
    /// Total ns stalled.
    pub total_ns: u64,
}

/// Kernel-event counters of a tracked scope (counted by the kernel while each process was a
/// member, so they never go down) or of a set of processes (summed over their per-tgid
/// counters): see [`EbpfSource::scope_counters`](super::EbpfSource::scope_counters) and
/// [`EbpfSource::tgid_counters`](super::EbpfSource::tgid_counters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EbpfCounters {
    /// Processes created: by the scope's whole tree since it was tracked when a scope is given
    /// (`lifetime_creation_count`), else by the listed (live) processes.
    pub processes_created: u64,
    /// Processes of the scope's tree that exited since it was tracked (0 without a scope).
    pub processes_exited: u64,
    /// Threads created by the processes.
    pub threads_created: u64,
    /// Run-queue delay of the processes' threads.
    pub runq_delay: RunqDelay,
    /// Switches away from a still-runnable thread (preemption, yield) of the processes.
    pub involuntary_switches: u64,
    /// Reclaim stalls of the processes.
    pub reclaim: ReclaimStalls,
    /// `reclaim_throttle` sleeps of the processes.
    pub throttled_count: u64,
    /// µs of those sleeps.
    pub throttled_usec: u64,
    /// OOM victims in the scope's tree since it was tracked (0 without a scope).
    pub oom_kills: u64,
    /// How many of the listed processes had counters (the others did nothing counted yet); 0
    /// for a scope.
    pub tgids_found: u32,
}

impl EbpfCounters {
    pub(super) fn add_tgid(&mut self, stats: &TgidStats) {
        self.processes_created += stats.processes_created;
        self.threads_created += stats.threads_created;
        self.add_events(&stats.events);
        self.tgids_found += 1;
    }

    /// The counters of a tracked scope, counted by the kernel while its processes were members.
    pub(super) fn of_scope(stats: &ScopeStats) -> Self {
        let mut counters = Self {
            processes_created: stats.processes_created,
            processes_exited: stats.processes_exited,
            threads_created: stats.threads_created,
            oom_kills: stats.oom_kills,
            ..Self::default()
        };
        counters.add_events(&stats.events);
        counters
    }

    fn add_events(&mut self, events: &EventCounters) {
        self.runq_delay.count += events.runq_count;
        self.runq_delay.total_ns += events.runq_total_ns;
        for (sum, bucket) in self.runq_delay.hist.iter_mut().zip(events.runq_hist) {
            *sum += bucket;
        }
        self.involuntary_switches += events.involuntary_switches;
        self.reclaim.count += events.reclaim_count;
        self.reclaim.total_ns += events.reclaim_total_ns;
        self.throttled_count += events.throttled_count;
        self.throttled_usec += events.throttled_total_usec;
    }
}

/// A process-tree scope counted in the kernel (see
/// [`EbpfSource::track_tree`](super::EbpfSource::track_tree)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeId(pub(super) u32);

#[cfg(test)]
impl ScopeId {
    /// A scope id for fakes of the maps.
    pub(crate) fn for_tests(slot: u32) -> Self {
        Self(slot)
    }
}

/// One OOM kill, as reported by `oom:mark_victim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OomVictim {
    /// Victim's pid.
    pub pid: u32,
    /// Victim's command name, NUL-padded: from the kernel when the victim thread ran the OOM
    /// killer itself, else from `/proc/<pid>/comm` at drain time (all zero if already reaped).
    pub comm: [u8; COMM_LEN],
    /// Victim's uid.
    pub uid: u32,
    /// Victim's `oom_score_adj`.
    pub oom_score_adj: i16,
    /// Victim's virtual memory size.
    pub total_vm_bytes: u64,
    /// Victim's anonymous resident memory.
    pub anon_rss_bytes: u64,
    /// Victim's file-backed resident memory.
    pub file_rss_bytes: u64,
    /// Victim's resident shared memory.
    pub shmem_rss_bytes: u64,
    /// Victim's page tables.
    pub pgtables_bytes: u64,
    /// When it was marked, ns since the Unix epoch (converted from the boot clock at load time).
    pub time_unix_ns: u64,
    /// When it was marked, ns since boot (`CLOCK_BOOTTIME`).
    pub time_boot_ns: u64,
    /// tgid of the task that ran the OOM killer (the allocating task).
    pub killer_tgid: u32,
    /// cgroup v2 id of that task.
    pub killer_cgroup_id: u64,
    /// The tracked scope the victim belonged to when it was marked (see
    /// [`EbpfSource::track_tree`](super::EbpfSource::track_tree)).
    pub scope: Option<ScopeId>,
}

impl OomVictim {
    /// The command name up to its NUL (empty if it is not UTF-8).
    pub fn comm_str(&self) -> &str {
        let len = self.comm.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
        std::str::from_utf8(&self.comm[..len]).unwrap_or("")
    }

    pub(super) fn from_record(record: &OomVictimRecord, boot_to_unix_ns: i128) -> Self {
        let unix = i128::from(record.time_boot_ns) + boot_to_unix_ns;
        Self {
            pid: record.pid,
            comm: record.comm,
            uid: record.uid,
            oom_score_adj: record.oom_score_adj,
            total_vm_bytes: record.total_vm_kib.saturating_mul(1024),
            anon_rss_bytes: record.anon_rss_kib.saturating_mul(1024),
            file_rss_bytes: record.file_rss_kib.saturating_mul(1024),
            shmem_rss_bytes: record.shmem_rss_kib.saturating_mul(1024),
            pgtables_bytes: record.pgtables_kib.saturating_mul(1024),
            time_unix_ns: u64::try_from(unix.max(0)).unwrap_or(u64::MAX),
            time_boot_ns: record.time_boot_ns,
            killer_tgid: record.killer_tgid,
            killer_cgroup_id: record.killer_cgroup_id,
            scope: record
                .scope_plus_one
                .checked_sub(1)
                .map(|slot| ScopeId(u32::from(slot))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_victim_kib_to_bytes_and_boot_time_to_unix() {
        let mut record = OomVictimRecord {
            anon_rss_kib: 3,
            time_boot_ns: 10,
            pid: 7,
            ..OomVictimRecord::default()
        };
        record.comm[..4].copy_from_slice(b"test");
        let victim = OomVictim::from_record(&record, 1_000);
        assert_eq!(victim.anon_rss_bytes, 3 * 1024);
        assert_eq!(victim.time_unix_ns, 1_010);
        assert_eq!(victim.comm_str(), "test");
        assert_eq!(victim.pid, 7);
    }
}
