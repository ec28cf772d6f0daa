//! Kernel-event counters from eBPF programs on scheduler, OOM and memory-reclaim tracepoints.
//!
//! [`EbpfSource::load`] loads the committed object (built by `cargo xtask build-ebpf` from
//! `relay-metrics-ebpf/`) once, with the tracepoint field offsets of the running kernel, and
//! attaches each program on its own: a program that fails disables only its counters and is named
//! in [`EbpfSource::status`]. Each tick then reads the kernel maps with per-key lookups into
//! caller-provided structs, and drains OOM victims from the ring buffer into a bounded list.
//! Dropping the source detaches every program.
//!
//! cgroup attribution: the kernel side keys by `bpf_get_current_cgroup_id`, the cgroup v2 id. On
//! hybrid hosts every process sits in the v2 root there, so callers attribute v1 cgroups by pid
//! (sum [`EbpfSource::read_counters`] over the cgroup's pids).

mod format;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};

use aya::maps::{Array, HashMap, MapData, MapError, RingBuf};
use aya::programs::TracePoint;
use aya::{Ebpf, EbpfLoader};
pub use relay_metrics_common::{
    CgroupStats, GlobalStats, ScopeStats, TgidStats, MAX_SCOPES, RUNQ_HIST_BUCKETS,
};
use relay_metrics_common::{Config, OomVictimRecord, COMM_LEN, NO_FIELD};

use crate::source::file::read_once;
use crate::source::Roots;

pub use format::{find_field, FormatField};

/// The eBPF object, committed so that a plain `cargo build` needs no eBPF toolchain.
static OBJECT: &[u8] = aya::include_bytes_aligned!("relay-metrics.bpf.o");

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
}

fn map_error(map: &'static str) -> impl FnOnce(MapError) -> EbpfReadError {
    move |source| EbpfReadError::Map { map, source }
}

/// Options of [`EbpfSource::load`].
#[derive(Debug, Clone)]
pub struct EbpfOptions {
    /// Where `/proc` and `/sys` are (tracefs is looked up below `sys`).
    pub roots: Roots,
    /// How many OOM victims [`EbpfSource::recent_oom_victims`] keeps (oldest dropped first).
    pub max_recent_oom_victims: usize,
}

impl Default for EbpfOptions {
    fn default() -> Self {
        Self {
            roots: Roots::host(),
            max_recent_oom_victims: 64,
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
pub const PROGRAMS: [ProgramSpec; 11] = [
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
];

/// Whether a program runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgramState {
    /// Loaded and attached: its counters are live.
    Attached,
    /// Not running, with the reason; its counters stay zero.
    Failed(String),
}

/// The state of one program after [`EbpfSource::load`].
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

/// Kernel-event counters of a set of processes, summed by [`EbpfSource::read_counters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EbpfCounters {
    /// Processes created: by the scope's whole tree since it was tracked when a scope is given
    /// (`lifetime_creation_count`), else by the listed (live) processes.
    pub processes_created: u64,
    /// Processes of the scope's tree that exited since it was tracked (0 without a scope).
    pub processes_exited: u64,
    /// Threads created by the listed processes.
    pub threads_created: u64,
    /// Run-queue delay of the listed processes' threads.
    pub runq_delay: RunqDelay,
    /// Switches away from a still-runnable thread (preemption, yield) of the listed processes.
    pub involuntary_switches: u64,
    /// Reclaim stalls of the listed processes.
    pub reclaim: ReclaimStalls,
    /// `reclaim_throttle` sleeps of the listed processes.
    pub throttled_count: u64,
    /// µs of those sleeps.
    pub throttled_usec: u64,
    /// OOM victims in the scope's tree since it was tracked (0 without a scope).
    pub oom_kills: u64,
    /// How many of the listed processes had counters (the others did nothing counted yet).
    pub tgids_found: u32,
}

impl EbpfCounters {
    fn add_tgid(&mut self, stats: &TgidStats) {
        self.processes_created += stats.processes_created;
        self.threads_created += stats.threads_created;
        self.runq_delay.count += stats.runq_count;
        self.runq_delay.total_ns += stats.runq_total_ns;
        for (sum, bucket) in self.runq_delay.hist.iter_mut().zip(stats.runq_hist) {
            *sum += bucket;
        }
        self.involuntary_switches += stats.involuntary_switches;
        self.reclaim.count += stats.reclaim_count;
        self.reclaim.total_ns += stats.reclaim_total_ns;
        self.throttled_count += stats.throttled_count;
        self.throttled_usec += stats.throttled_total_usec;
        self.tgids_found += 1;
    }
}

/// A process-tree scope counted in the kernel (see [`EbpfSource::track_tree`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScopeId(u32);

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
}

impl OomVictim {
    /// The command name up to its NUL (empty if it is not UTF-8).
    pub fn comm_str(&self) -> &str {
        let len = self.comm.iter().position(|&b| b == 0).unwrap_or(COMM_LEN);
        std::str::from_utf8(&self.comm[..len]).unwrap_or("")
    }

    fn from_record(record: &OomVictimRecord, boot_to_unix_ns: i128) -> Self {
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
        }
    }
}

/// The loaded programs and their maps.
pub struct EbpfSource {
    // Maps first: fields drop in order, and the maps' descriptors must not outlive nothing else;
    // dropping `ebpf` detaches the programs.
    tgids: Option<HashMap<MapData, u32, TgidStats>>,
    cgroups: Option<HashMap<MapData, u64, CgroupStats>>,
    created_by: Option<HashMap<MapData, u32, u32>>,
    tracked: Option<HashMap<MapData, u32, u32>>,
    scopes: Option<Array<MapData, ScopeStats>>,
    global: Option<Array<MapData, GlobalStats>>,
    oom_events: Option<RingBuf<MapData>>,
    ebpf: Ebpf,
    status: Vec<ProgramStatus>,
    config: Config,
    free_scopes: u64,
    recent_oom: VecDeque<OomVictim>,
    max_recent_oom: usize,
    oom_victims_drained: u64,
    boot_to_unix_ns: i128,
    roots: Roots,
    comm_buf: Vec<u8>,
}

impl std::fmt::Debug for EbpfSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfSource")
            .field("status", &self.status)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

const CAP_SYS_ADMIN: u64 = 1 << 21;
const CAP_PERFMON: u64 = 1 << 38;
const CAP_BPF: u64 = 1 << 39;

fn effective_capabilities(status: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(status).ok()?;
    let line = text.lines().find(|line| line.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

fn check_privilege(roots: &Roots) -> Result<(), EbpfUnavailable> {
    let path = roots.proc.join("self/status");
    let mut buf = Vec::new();
    let cap_eff = read_once(&path, &mut buf)
        .ok()
        .and_then(effective_capabilities)
        .unwrap_or(0);
    let tracing = CAP_BPF | CAP_PERFMON;
    if cap_eff & CAP_SYS_ADMIN != 0 || cap_eff & tracing == tracing {
        Ok(())
    } else {
        Err(EbpfUnavailable::NotPrivileged { cap_eff, path })
    }
}

/// Finds tracefs' `events` directory, mounting tracefs at `/sys/kernel/tracing` when needed.
fn tracefs_events(roots: &Roots) -> Result<PathBuf, EbpfUnavailable> {
    let tracing = roots.map(Path::new("/sys/kernel/tracing"));
    let events = tracing.join("events");
    if events.is_dir() {
        return Ok(events);
    }
    let legacy = roots.map(Path::new("/sys/kernel/debug/tracing/events"));
    if legacy.is_dir() {
        return Ok(legacy);
    }
    let no_tracefs = |source| EbpfUnavailable::NoTracefs {
        path: tracing.clone(),
        source,
    };
    let target = std::ffi::CString::new(tracing.as_os_str().as_encoded_bytes())
        .map_err(|_| no_tracefs(io::Error::from(io::ErrorKind::InvalidInput)))?;
    // SAFETY: every pointer is a NUL-terminated string alive for the call; data may be null.
    let rc = unsafe {
        libc::mount(
            c"nodev".as_ptr(),
            target.as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(no_tracefs(io::Error::last_os_error()));
    }
    Ok(events)
}

fn read_formats(events: &Path) -> format::Formats {
    let read = |category: &str, name: &str| {
        let mut buf = Vec::new();
        match read_once(&events.join(category).join(name).join("format"), &mut buf) {
            Ok(_) => buf,
            Err(_) => Vec::new(),
        }
    };
    format::Formats {
        newtask: read("task", "task_newtask"),
        exit: read("sched", "sched_process_exit"),
        switch: read("sched", "sched_switch"),
        wakeup: read("sched", "sched_wakeup"),
        wakeup_new: read("sched", "sched_wakeup_new"),
        mark_victim: read("oom", "mark_victim"),
        throttled: read("vmscan", "mm_vmscan_throttled"),
    }
}

/// The record fields a program cannot work without; missing ones keep it detached.
fn required_fields(program: &str, config: &Config) -> &'static [(&'static str, bool)] {
    let missing = |offset: u16| offset == NO_FIELD;
    match program {
        "task_newtask" if missing(config.newtask_pid) || missing(config.newtask_clone_flags) => {
            &[("task_newtask pid/clone_flags", false)]
        }
        "sched_switch"
            if missing(config.switch_prev_pid)
                || missing(config.switch_prev_state)
                || missing(config.switch_next_pid) =>
        {
            &[("sched_switch prev_pid/prev_state/next_pid", false)]
        }
        "sched_wakeup" if missing(config.wakeup_pid) => &[("sched_wakeup pid", false)],
        "sched_wakeup_new" if missing(config.wakeup_new_pid) => &[("sched_wakeup_new pid", false)],
        "oom_mark_victim" if missing(config.victim_pid) => &[("mark_victim pid", false)],
        _ => &[],
    }
}

fn clock_ns(clock: nix::time::ClockId) -> i128 {
    nix::time::clock_gettime(clock)
        .map(|ts| i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec()))
        .unwrap_or(0)
}

impl EbpfSource {
    /// Loads the programs with this kernel's tracepoint layouts and attaches each one it can.
    pub fn load(options: &EbpfOptions) -> Result<Self, EbpfUnavailable> {
        check_privilege(&options.roots)?;
        let events = tracefs_events(&options.roots)?;
        let config = format::config(&read_formats(&events));
        let mut ebpf = EbpfLoader::new()
            .override_global("CONFIG", &config, true)
            .load(OBJECT)
            .map_err(|error| EbpfUnavailable::Load(Box::new(error)))?;
        let mut status = Vec::with_capacity(PROGRAMS.len());
        for spec in PROGRAMS {
            let state = match attach(&mut ebpf, spec, &config, &events) {
                Ok(()) => ProgramState::Attached,
                Err(reason) => ProgramState::Failed(reason),
            };
            status.push(ProgramStatus { spec, state });
        }
        if !status.iter().any(|s| s.state == ProgramState::Attached) {
            let failures: Vec<String> = status
                .iter()
                .map(|s| format!("{}: {:?}", s.spec.program, s.state))
                .collect();
            return Err(EbpfUnavailable::NothingAttached(failures.join("; ")));
        }
        let take_hash = |ebpf: &mut Ebpf, name: &str| ebpf.take_map(name);
        let tgids = take_hash(&mut ebpf, "TGIDS").and_then(|m| HashMap::try_from(m).ok());
        let cgroups = take_hash(&mut ebpf, "CGROUPS").and_then(|m| HashMap::try_from(m).ok());
        let created_by = take_hash(&mut ebpf, "CREATED_BY").and_then(|m| HashMap::try_from(m).ok());
        let tracked = take_hash(&mut ebpf, "TRACKED").and_then(|m| HashMap::try_from(m).ok());
        let scopes = ebpf
            .take_map("SCOPES")
            .and_then(|m| Array::try_from(m).ok());
        let global = ebpf
            .take_map("GLOBAL")
            .and_then(|m| Array::try_from(m).ok());
        let oom_events = ebpf
            .take_map("OOM_EVENTS")
            .and_then(|m| RingBuf::try_from(m).ok());
        let boot_to_unix_ns = clock_ns(nix::time::ClockId::CLOCK_REALTIME)
            - clock_ns(nix::time::ClockId::CLOCK_BOOTTIME);
        let max_recent_oom = options.max_recent_oom_victims;
        Ok(Self {
            tgids,
            cgroups,
            created_by,
            tracked,
            scopes,
            global,
            oom_events,
            ebpf,
            status,
            config,
            free_scopes: u64::MAX >> (64 - MAX_SCOPES),
            recent_oom: VecDeque::with_capacity(max_recent_oom),
            max_recent_oom,
            oom_victims_drained: 0,
            boot_to_unix_ns,
            roots: options.roots.clone(),
            comm_buf: Vec::with_capacity(64),
        })
    }

    /// Each program's state after loading.
    pub fn status(&self) -> &[ProgramStatus] {
        &self.status
    }

    /// True when `program` (a [`ProgramSpec::program`] name) is attached.
    pub fn is_attached(&self, program: &str) -> bool {
        self.status
            .iter()
            .any(|s| s.spec.program == program && s.state == ProgramState::Attached)
    }

    /// The field offsets given to the programs.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The counters of one tgid, `None` when it has none (nothing counted, or evicted).
    pub fn tgid(&self, tgid: u32) -> Result<Option<TgidStats>, EbpfReadError> {
        let map = self
            .tgids
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("TGIDS"))?;
        lookup(map.get(&tgid, 0), "TGIDS")
    }

    /// The counters of one cgroup v2 id.
    pub fn cgroup(&self, cgroup_id: u64) -> Result<Option<CgroupStats>, EbpfReadError> {
        let map = self
            .cgroups
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("CGROUPS"))?;
        lookup(map.get(&cgroup_id, 0), "CGROUPS")
    }

    /// The tgid that created process `tgid`, when it was created after loading.
    pub fn created_by(&self, tgid: u32) -> Result<Option<u32>, EbpfReadError> {
        let map = self
            .created_by
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("CREATED_BY"))?;
        lookup(map.get(&tgid, 0), "CREATED_BY")
    }

    /// Machine-wide counters.
    pub fn global(&self) -> Result<GlobalStats, EbpfReadError> {
        let map = self
            .global
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("GLOBAL"))?;
        map.get(&0, 0).map_err(map_error("GLOBAL"))
    }

    /// Starts counting a process tree in the kernel: `members` (the tree's current tgids) and
    /// every process they or their descendants create from now on. Returns the scope to read.
    pub fn track_tree(&mut self, members: &[u32]) -> Result<ScopeId, EbpfReadError> {
        if self.free_scopes == 0 {
            return Err(EbpfReadError::ScopesFull);
        }
        let slot = self.free_scopes.trailing_zeros();
        let scopes = self
            .scopes
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("SCOPES"))?;
        scopes
            .set(slot, ScopeStats::default(), 0)
            .map_err(map_error("SCOPES"))?;
        let tracked = self
            .tracked
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKED"))?;
        for &tgid in members {
            tracked
                .insert(tgid, slot, 0)
                .map_err(map_error("TRACKED"))?;
        }
        self.free_scopes &= !(1u64 << slot);
        Ok(ScopeId(slot))
    }

    /// Stops counting a scope and forgets its members.
    pub fn untrack(&mut self, scope: ScopeId) -> Result<(), EbpfReadError> {
        let tracked = self
            .tracked
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKED"))?;
        let members: Vec<u32> = tracked
            .iter()
            .filter_map(Result::ok)
            .filter(|&(_, slot)| slot == scope.0)
            .map(|(tgid, _)| tgid)
            .collect();
        for tgid in members {
            match tracked.remove(&tgid) {
                Ok(()) | Err(MapError::KeyNotFound) => {}
                Err(source) => return Err(map_error("TRACKED")(source)),
            }
        }
        self.free_scopes |= 1u64 << scope.0;
        Ok(())
    }

    /// The kernel's counters of a scope.
    pub fn scope(&self, scope: ScopeId) -> Result<ScopeStats, EbpfReadError> {
        let map = self
            .scopes
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("SCOPES"))?;
        map.get(&scope.0, 0).map_err(map_error("SCOPES"))
    }

    /// Sums the counters of `tgids` (one lookup each) into `out`, which is reset first; with a
    /// scope, its tree-wide creation, exit and OOM counts replace the per-tgid creation count.
    /// Allocation-free: reuse `out` between ticks.
    pub fn read_counters(
        &self,
        tgids: &[u32],
        scope: Option<ScopeId>,
        out: &mut EbpfCounters,
    ) -> Result<(), EbpfReadError> {
        *out = EbpfCounters::default();
        for &tgid in tgids {
            if let Some(stats) = self.tgid(tgid)? {
                out.add_tgid(&stats);
            }
        }
        if let Some(scope) = scope {
            let stats = self.scope(scope)?;
            out.processes_created = stats.processes_created;
            out.processes_exited = stats.processes_exited;
            out.oom_kills = stats.oom_kills;
        }
        Ok(())
    }

    /// Moves OOM victims from the ring buffer to the recent list (bounded: the oldest go first)
    /// and returns how many arrived.
    pub fn drain_oom_victims(&mut self) -> usize {
        let Some(ring) = self.oom_events.as_mut() else {
            return 0;
        };
        let mut drained = 0;
        while let Some(item) = ring.next() {
            if item.len() < std::mem::size_of::<OomVictimRecord>() {
                continue;
            }
            // SAFETY: the item holds at least one OomVictimRecord written by the program;
            // read_unaligned copes with any alignment, and every bit pattern is valid.
            let record =
                unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<OomVictimRecord>()) };
            drained += 1;
            if self.max_recent_oom == 0 {
                continue;
            }
            if self.recent_oom.len() == self.max_recent_oom {
                self.recent_oom.pop_front();
            }
            let mut victim = OomVictim::from_record(&record, self.boot_to_unix_ns);
            if victim.comm[0] == 0 {
                // Rare (an OOM kill), so the path allocation does not matter.
                let path = self.roots.proc.join(victim.pid.to_string()).join("comm");
                if let Ok(comm) = read_once(&path, &mut self.comm_buf) {
                    let comm = comm.strip_suffix(b"\n").unwrap_or(comm);
                    let len = comm.len().min(COMM_LEN);
                    victim.comm[..len].copy_from_slice(&comm[..len]);
                }
            }
            self.recent_oom.push_back(victim);
        }
        self.oom_victims_drained += drained as u64;
        drained
    }

    /// The most recent OOM victims drained, oldest first.
    pub fn recent_oom_victims(&self) -> impl ExactSizeIterator<Item = &OomVictim> {
        self.recent_oom.iter()
    }

    /// OOM victims drained since loading (the kernel-side count is [`GlobalStats::oom_kills`];
    /// ring-buffer overflows are [`GlobalStats::oom_ringbuf_drops`]).
    pub fn oom_victims_drained(&self) -> u64 {
        self.oom_victims_drained
    }

    /// Run time and count of each attached program (meaningful while BPF stats are enabled).
    pub fn program_run_stats(&self) -> Vec<ProgramRunStats> {
        PROGRAMS
            .iter()
            .filter(|spec| self.is_attached(spec.program))
            .filter_map(|&spec| {
                let info = self.ebpf.program(spec.program)?.info().ok()?;
                Some(ProgramRunStats {
                    spec,
                    run_time_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                    run_count: info.run_count(),
                })
            })
            .collect()
    }
}

fn lookup<V>(result: Result<V, MapError>, map: &'static str) -> Result<Option<V>, EbpfReadError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(MapError::KeyNotFound) => Ok(None),
        Err(source) => Err(EbpfReadError::Map { map, source }),
    }
}

/// An error with its causes, `a: b: c` (the verifier log is in aya's load error's `Display`).
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn attach(
    ebpf: &mut Ebpf,
    spec: ProgramSpec,
    config: &Config,
    events: &Path,
) -> Result<(), String> {
    if let Some((field, _)) = required_fields(spec.program, config).first() {
        return Err(format!(
            "tracepoint field {field} missing or of an unexpected size"
        ));
    }
    if !events.join(spec.category).join(spec.tracepoint).is_dir() {
        return Err(format!(
            "tracepoint {}:{} does not exist on this kernel",
            spec.category, spec.tracepoint
        ));
    }
    let program: &mut TracePoint = ebpf
        .program_mut(spec.program)
        .ok_or_else(|| format!("program {} missing from the object", spec.program))?
        .try_into()
        .map_err(|error| format!("{error}"))?;
    program
        .load()
        .map_err(|error| format!("load failed: {}", chain(&error)))?;
    program
        .attach(spec.category, spec.tracepoint)
        .map_err(|error| format!("attach failed: {}", chain(&error)))?;
    Ok(())
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn reads_effective_capabilities() {
        let status = b"Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_capabilities(status), Some(0x1ff_ffff_ffff));
        assert_eq!(effective_capabilities(b"CapEff:\tzz\n"), None);
        assert_eq!(effective_capabilities(b""), None);
    }

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
