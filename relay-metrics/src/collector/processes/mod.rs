//! The per-process part of a pass: list the processes of the target, read each once, apply
//! Relay's rules for processes that exit or fail (Relay 0.10.4).
//!
//! Each process is read into one record ([`ProcessSample`]) by procfs or from the task
//! iterator's record (`iter` chooses the path); from the record on, one code path applies the
//! private-memory policy, the membership and identity checks, the reasons and the counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::ResourceMetricsConfig;
use crate::model::{
    CpuTicks, IoValues, PressureValues, ProcessCounters, ProcessPass, ProcessSet, SystemValues,
    Wanted,
};
use crate::source::cgroup;
use crate::source::file::HeldFile;
use crate::source::procfs::{
    self, PidLister, ProcessFields, ProcessReader, ProcessSample, ProcessTreeWalker,
};
use crate::source::reap;
use crate::source::system::SystemSample;
use crate::source::task_iter::TaskRecord;
use crate::source::Roots;

pub(crate) mod iter;
mod private;

#[cfg(test)]
pub(crate) use iter::tests::{assert_paths_agree_on_stopped_processes, Scope as IterTestScope};

use private::PrivateMemoryCache;

use super::environment::{CgroupEpoch, MEMBERSHIP_MAX_AGE};
use super::reasons::Reasons;
use super::{age_ms, CollectorError, Target};

/// The kernel's counts of the events that change a tracked process tree's membership:
/// processes the tree created and that exited (`SCOPES`), members userspace added to the
/// kernel's tracking, and failed map insertions (a child the kernel could not track). While
/// they stand still, the last walk of the tree still lists it: a child is linked to its parent
/// before `task_newtask` counts it, and a member's exit is counted before its children are
/// reparented, which the reused list then catches by their parent pid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TreeEpoch {
    pub(super) processes_created: u64,
    pub(super) processes_exited: u64,
    pub(super) members_added: u64,
    pub(super) insert_failures: u64,
}

/// The kernel's machine-wide counts of processes created and exited: the `/proc` listing of the
/// global scope changes only by a process created (counted once it is in the pid hash, so a
/// listing after the count's read shows it) or reaped (its exit is counted before; a reused
/// listing that still names a reaped process reads it as gone, and the next pass lists again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct MachineEpoch {
    pub(super) processes_created: u64,
    pub(super) processes_exited: u64,
}

/// What a listing of the target's processes depends on, as counted by the kernel: while it
/// stands still (and the listing is recent), the listing is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListingEpoch {
    Tree(TreeEpoch),
    Cgroup(CgroupEpoch),
    Machine(MachineEpoch),
}

impl ListingEpoch {
    /// The longest a listing taken at this epoch is reused.
    fn max_age(&self) -> Duration {
        match self {
            Self::Tree(_) | Self::Cgroup(_) => LISTING_MAX_AGE,
            Self::Machine(_) => MACHINE_LISTING_MAX_AGE,
        }
    }
}

/// The longest a listing is reused: a cgroup's membership reading (see [`MEMBERSHIP_MAX_AGE`];
/// the exited process it may keep is a zombie until reaped, so still readable). A tree needs
/// no bound (its exits are caught by the parent pids), but the bound costs one walk a second
/// and limits any error.
const LISTING_MAX_AGE: Duration = MEMBERSHIP_MAX_AGE;

/// The longest the global scope's listing is reused: it needs no bound (see [`MachineEpoch`]),
/// but the bound limits any error, as the measured cgroups' backstop does.
const MACHINE_LISTING_MAX_AGE: Duration = Duration::from_secs(10);

/// How sampling the listed pids ended.
enum Sampled {
    Done(PassOutcome),
    /// A member's parent is not listed: the list is out of date.
    Reparented,
    RootUnavailable(String),
}

#[derive(Default)]
struct PassOutcome {
    failures: u64,
    first_failure: Option<procfs::ProcessError>,
    /// A listed process (not the root) is gone.
    member_gone: bool,
}

impl PassOutcome {
    /// A listed process (not the root) that could not be read: gone, or a failure to count.
    fn missed(&mut self, error: procfs::ProcessError) {
        if error.is_gone() {
            self.member_gone = true;
        } else {
            self.failures += 1;
            self.first_failure.get_or_insert(error);
        }
    }
}

/// Reads the processes of a target, holding their files open between passes.
pub(super) struct ProcessPassReader {
    wanted: Wanted,
    /// What the record must hold; private memory is read after it (see [`Self::sample`]).
    fields: ProcessFields,
    reader: ProcessReader,
    lister: Option<PidLister>,
    walker: Option<ProcessTreeWalker>,
    cgroup_walker: cgroup::SubtreeWalker,
    pids: Vec<u32>,
    /// The epoch read before the listing of `pids`, and when that listing began, while it can
    /// be reused.
    listed_at: Option<(ListingEpoch, Instant)>,
    /// Listings of the target's processes so far (walks, for a tree).
    listings: u64,
    /// The process list of the previous pass, handed back for reuse.
    spare: Vec<ProcessCounters>,
    ticks_per_second: u64,
    /// Private memory's cadence, when memory is wanted.
    private: Option<PrivateMemoryCache>,
    /// The task iterator, or why procfs serves.
    source: iter::SourceState,
    /// Where a tree's walk also starts from the orphans this process adopted, the list of its
    /// main thread's children ([`Self::walk_adopted_orphans`]).
    adopted_from: Option<(HeldFile, Vec<u8>)>,
    /// The orphans the last walk started from (sorted).
    adopted: Vec<u32>,
}

impl ProcessPassReader {
    pub(super) fn new(
        roots: &Roots,
        config: &ResourceMetricsConfig,
        target: &Target,
        wanted: Wanted,
    ) -> Result<Self, CollectorError> {
        let source_error =
            |error: crate::source::SourceError| CollectorError::Target(error.to_string());
        let source = iter::SourceState::new(roots, config, target, &wanted)?;
        let fields = ProcessFields {
            schedstat: wanted.cpu && !matches!(target, Target::Global),
            peak_resident: wanted.memory && matches!(target, Target::Process { tree: false, .. }),
            private_memory: false,
            open_fds: wanted.process,
            io: wanted.disk_io,
            exact_resident: wanted.memory,
        };
        Ok(Self {
            wanted,
            fields,
            reader: ProcessReader::new(
                roots,
                held_process_cap(config.extensions.max_held_processes),
            )
            .map_err(source_error)?,
            lister: match target {
                Target::Global => Some(PidLister::new(roots).map_err(source_error)?),
                _ => None,
            },
            walker: match target {
                Target::Process { tree: true, .. } => {
                    Some(ProcessTreeWalker::new(roots).map_err(source_error)?)
                }
                _ => None,
            },
            pids: Vec::new(),
            listed_at: None,
            listings: 0,
            spare: Vec::new(),
            cgroup_walker: cgroup::SubtreeWalker::new(),
            // Relay's fallback is none: without the tick rate CPU times are unknown, so they
            // become null (ticks_to_ms of a zero rate), never guessed.
            ticks_per_second: procfs::clock_ticks_per_second().unwrap_or(0),
            private: wanted.memory.then(|| {
                PrivateMemoryCache::new(Duration::from_millis(
                    config.extensions.private_memory_interval_millis,
                ))
            }),
            source,
            adopted_from: None,
            adopted: Vec::new(),
        })
    }

    /// Makes a tree's walk also start from this process's children outside its process group:
    /// the tree's orphans it adopted as their child subreaper, which the walk from the root no
    /// longer reaches (its own helpers stay in its group).
    pub(super) fn walk_adopted_orphans(&mut self) {
        self.adopted_from = Some((reap::main_thread_children(), Vec::new()));
    }

    /// Whether `pid` is an adopted orphan walked as a root of the tree.
    fn is_adopted(&self, pid: u32) -> bool {
        self.adopted.binary_search(&pid).is_ok()
    }

    /// How many passes listed the target's processes (the others reused the previous list).
    pub(super) fn listings(&self) -> u64 {
        self.listings
    }

    pub(super) fn clock_ticks_per_second(&self) -> u64 {
        self.ticks_per_second
    }

    /// Age of the oldest private-memory value used in the last pass.
    pub(super) fn private_memory_age_ms(&self) -> Option<u64> {
        self.private.as_ref()?.oldest_used.map(age_ms)
    }

    /// The task iterator's records of the last pass (sorted by pid), when it served the pass.
    pub(super) fn task_records(&self) -> Option<&[TaskRecord]> {
        self.source.last_records()
    }

    /// `extensions.collector.process_source` and its reason for the last pass.
    pub(crate) fn process_source(&self) -> (&'static str, Option<&Arc<str>>) {
        self.source.describe()
    }

    /// The pids the last iterator pass read entirely through procfs.
    #[cfg(test)]
    pub(crate) fn procfs_pids(&self) -> &[u32] {
        self.source.procfs_pids()
    }

    /// Takes back the previous pass so its process list can be reused.
    pub(super) fn recycle(&mut self, pass: ProcessPass) {
        if let ProcessPass::Sampled(set) = pass {
            self.spare = set.processes;
        }
    }

    /// One pass over the target's processes. `epoch` is the kernel's count of the events that
    /// change the target's listing, read just before this pass (see [`ListingEpoch`]).
    pub(super) fn read(
        &mut self,
        target: &Target,
        epoch: Option<ListingEpoch>,
        reasons: &mut Reasons,
    ) -> ProcessPass {
        if !self.wanted.needs_processes() {
            return ProcessPass::NotRequested;
        }
        let mut reuse_listing = match (self.listed_at, epoch) {
            (Some((listed, at)), Some(now)) => listed == now && at.elapsed() < now.max_age(),
            _ => false,
        };
        let is_tree = matches!(target, Target::Process { tree: true, .. });
        let mut processes = std::mem::take(&mut self.spare);
        loop {
            if !reuse_listing {
                let listing_began = Instant::now();
                self.listed_at = None;
                if let Err(reason) = self.list(target) {
                    if let Target::Process { pid, .. } = target {
                        if !self.root_alive(*pid, target) {
                            return ProcessPass::RootUnavailable(format!("process {pid} exited"));
                        }
                    }
                    reasons.add("process_sampling", format_args!("{reason}"));
                    return ProcessPass::ListFailed;
                }
                self.pids.sort_unstable();
                self.pids.dedup();
                let pids = &self.pids;
                self.reader.retain(|pid| pids.binary_search(&pid).is_ok());
                self.listed_at = epoch.map(|epoch| (epoch, listing_began));
            }
            processes.clear();
            // Only a tree's members have their parents listed.
            let check_parents = reuse_listing && is_tree;
            let records = self.source.take_records(self.pids.len(), reasons);
            let sampled =
                self.sample_listed(records.as_deref(), target, check_parents, &mut processes);
            self.source.keep_records(records);
            match sampled {
                Sampled::Done(outcome) => {
                    if outcome.member_gone {
                        // A reaped member: the next pass lists the target afresh.
                        self.listed_at = None;
                    }
                    return self.finish(target, processes, outcome, reasons);
                }
                // The reused list is out of date: list the tree now and sample again.
                Sampled::Reparented => reuse_listing = false,
                Sampled::RootUnavailable(reason) => return ProcessPass::RootUnavailable(reason),
            }
        }
    }

    /// Samples every listed pid into `processes`, from its iterator record where `records`
    /// (the iterator serves this pass) has a whole one, else through procfs. A tree's root that
    /// is gone or replaced ends the pass; with `check_parents` (the list is a reused walk), a
    /// member whose parent is not listed means the tree changed since the walk.
    fn sample_listed(
        &mut self,
        records: Option<&[TaskRecord]>,
        target: &Target,
        check_parents: bool,
        processes: &mut Vec<ProcessCounters>,
    ) -> Sampled {
        let (root, root_start) = match target {
            Target::Process {
                pid,
                start_time_ticks,
                ..
            } => (Some(*pid), Some(*start_time_ticks)),
            _ => (None, None),
        };
        if let Some(private) = &mut self.private {
            private.begin_pass();
        }
        let mut outcome = PassOutcome::default();
        let mut next = 0;
        for index in 0..self.pids.len() {
            let pid = self.pids[index];
            let record = records.and_then(|records| {
                while records.get(next).is_some_and(|record| record.tgid < pid) {
                    next += 1;
                }
                records
                    .get(next)
                    .filter(|record| record.tgid == pid && record.is_complete())
            });
            if records.is_some() && record.is_none() {
                // Not shown by the iterator (pid 1 on some hosts, a process started after the
                // iterator passed its pid) or too large for its walks.
                self.source.served_by_procfs(pid);
            }
            let sample = match self.sample(pid, record) {
                Ok(sample) => sample,
                Err(error) => {
                    if Some(pid) == root {
                        return Sampled::RootUnavailable(error.to_string());
                    }
                    outcome.missed(error);
                    continue;
                }
            };
            if Some(pid) == root && Some(sample.start_time_ticks) != root_start {
                return Sampled::RootUnavailable(format!(
                    "process {pid} was replaced by another process with the same pid"
                ));
            }
            // Reparented (its parent exited) or adopted by a process outside the list.
            if check_parents
                && Some(pid) != root
                && !self.is_adopted(pid)
                && self.pids.binary_search(&sample.ppid).is_err()
            {
                return Sampled::Reparented;
            }
            processes.push(counters(&sample));
        }
        if let Some(private) = &mut self.private {
            private.end_pass();
        }
        Sampled::Done(outcome)
    }

    /// The record of `pid`: from its iterator `record`, or through procfs. Then what the record
    /// lacks, through procfs: `statm` where the iterator's resident size is not exact, and
    /// private memory on its cadence (see [`PrivateMemoryCache`]).
    fn sample(
        &mut self,
        pid: u32,
        record: Option<&TaskRecord>,
    ) -> Result<ProcessSample, procfs::ProcessError> {
        let (mut sample, read_statm) = match (record, self.source.iter()) {
            (Some(record), Some(iter)) => iter.sample(record, &self.fields),
            _ => (self.reader.sample(pid, &self.fields)?, false),
        };
        let start = sample.start_time_ticks;
        let read_private = self
            .private
            .as_ref()
            .is_some_and(|private| private.must_read(pid, start));
        if read_statm || read_private {
            // Through the pid's held files where it has them (its identity pinned); otherwise
            // `memory` checks the identity by the start time.
            let (statm_bytes, private_kib) =
                self.reader.memory(pid, start, read_statm, read_private)?;
            sample.rss_bytes = statm_bytes.unwrap_or(sample.rss_bytes);
            sample.private_kib = private_kib;
        }
        if let Some(private) = &mut self.private {
            sample.private_kib = if read_private {
                private.store(pid, start, sample.private_kib)
            } else {
                private.cached(pid)
            };
        }
        Ok(sample)
    }

    fn finish(
        &mut self,
        target: &Target,
        processes: Vec<ProcessCounters>,
        outcome: PassOutcome,
        reasons: &mut Reasons,
    ) -> ProcessPass {
        let mut set = ProcessSet {
            visible: self.pids.len() as u64,
            incomplete: None,
            processes,
        };
        if let Some(error) = outcome.first_failure {
            if matches!(target, Target::Process { .. }) {
                set.incomplete = Some(error.to_string());
            }
            reasons.add(
                "process_sampling",
                format_args!(
                    "{} process(es) could not be read, e.g. {error}",
                    outcome.failures
                ),
            );
        }
        ProcessPass::Sampled(set)
    }

    fn list(&mut self, target: &Target) -> Result<(), String> {
        self.listings += 1;
        self.pids.clear();
        match target {
            Target::Global => match &mut self.lister {
                Some(lister) => lister.list(&mut self.pids).map_err(|e| e.to_string()),
                None => Err("no process lister".into()),
            },
            Target::Process {
                pid, tree: false, ..
            } => {
                self.pids.push(*pid);
                Ok(())
            }
            Target::Process {
                pid, tree: true, ..
            } => match &mut self.walker {
                Some(walker) => {
                    let (adopted, adopted_from) = (&mut self.adopted, &mut self.adopted_from);
                    // Read after the root's subtree: an orphan reparented meanwhile is in one.
                    let later = || {
                        adopted.clear();
                        if let Some((children, buf)) = adopted_from {
                            adopted.extend(reap::adopted_children(children, buf));
                            adopted.sort_unstable();
                        }
                        adopted.clone()
                    };
                    walker
                        .walk_from(*pid, later, &mut self.pids)
                        .map_err(|e| e.to_string())
                }
                None => Err("no process tree walker".into()),
            },
            Target::Cgroup { resolved, .. } => self
                .cgroup_walker
                .pids(resolved, &mut self.pids)
                .map_err(|e| e.to_string()),
        }
    }

    fn root_alive(&mut self, pid: u32, target: &Target) -> bool {
        match (self.reader.start_time_ticks(pid), target) {
            (
                Ok(start),
                Target::Process {
                    start_time_ticks, ..
                },
            ) => start == *start_time_ticks,
            _ => false,
        }
    }
}

fn counters(sample: &ProcessSample) -> ProcessCounters {
    ProcessCounters {
        pid: sample.pid,
        start_time_ticks: sample.start_time_ticks,
        utime_ticks: sample.utime_ticks,
        stime_ticks: sample.stime_ticks,
        cutime_ticks: sample.cutime_ticks,
        cstime_ticks: sample.cstime_ticks,
        threads: sample.num_threads,
        rss_bytes: sample.rss_bytes,
        vsize_bytes: sample.vsize_bytes,
        peak_resident_kib: sample.peak_resident_kib,
        private_kib: sample.private_kib,
        open_fds: sample.open_fd_count,
        io: sample.io.map(|io| IoValues {
            read_bytes: io.read_bytes,
            write_bytes: io.write_bytes,
            read_syscalls: io.read_syscalls,
            write_syscalls: io.write_syscalls,
        }),
        run_time_ns: sample.run_time_ns,
        run_queue_wait_ns: sample.schedstat.map(|s| s.wait_ns),
    }
}

/// The global scope's machine CPU ticks and pressure in the model's terms, written in place (system
/// memory comes with the other machine-wide values, see `system_wide`).
pub(super) fn fill_system_values(sample: &SystemSample, out: &mut SystemValues) {
    let pressure = |p: Option<crate::source::system::Pressure>| PressureValues {
        some_usec: p.and_then(|p| p.some_total_usec),
        full_usec: p.and_then(|p| p.full_total_usec),
    };
    out.cpu_ticks.clear();
    // A CPU line that cannot be summed empties the list: the rate is then unknown, not wrong.
    for cpu in &sample.per_cpu {
        match (cpu.busy_ticks(), cpu.total_ticks()) {
            (Some(busy), Some(total)) => out.cpu_ticks.push(CpuTicks {
                cpu: cpu.cpu,
                busy,
                total,
            }),
            _ => {
                out.cpu_ticks.clear();
                break;
            }
        }
    }
    out.cpu_pressure = pressure(sample.cpu_pressure);
    out.memory_pressure = pressure(sample.memory_pressure);
}

/// `/proc/stat`'s per-CPU ticks kept from going back, as node_exporter keeps them: a mode's
/// counter can fall between two reads (`iowait` does under NO_HZ, and `idle` with it), and a
/// counter series that falls reads as a reset to Prometheus, whose `rate` then counts the whole
/// value again.
#[derive(Debug, Default)]
pub(super) struct CpuModeFloor {
    /// The ticks given out last, one entry per online CPU in ascending CPU order.
    given: Vec<crate::source::system::CpuTimes>,
    /// The buffer the next call writes into (swapped with `given`).
    next: Vec<crate::source::system::CpuTimes>,
}

/// `idle` falling by this much is a CPU taken offline and brought back (its counters restart),
/// not the jitter of a read: node_exporter's threshold.
const CPU_RESTART_IDLE_SECONDS: u64 = 3;

impl CpuModeFloor {
    /// Per CPU and mode, the larger of `per_cpu` (ascending CPU order, as `/proc/stat` lists
    /// them) and what was given out last. A CPU whose idle time fell by
    /// [`CPU_RESTART_IDLE_SECONDS`] or more starts again from this read; a CPU without a line
    /// (offline) is forgotten.
    pub(super) fn apply(
        &mut self,
        per_cpu: &[crate::source::system::CpuTimes],
        ticks_per_second: u64,
    ) -> &[crate::source::system::CpuTimes] {
        let restart_ticks = CPU_RESTART_IDLE_SECONDS.saturating_mul(ticks_per_second.max(1));
        let mut last = self.given.iter().peekable();
        self.next.clear();
        for read in per_cpu {
            while last.next_if(|old| old.cpu < read.cpu).is_some() {}
            let kept = match last.next_if(|old| old.cpu == read.cpu) {
                Some(old) if old.idle.saturating_sub(read.idle) < restart_ticks => {
                    crate::source::system::CpuTimes {
                        cpu: read.cpu,
                        user: read.user.max(old.user),
                        nice: read.nice.max(old.nice),
                        system: read.system.max(old.system),
                        idle: read.idle.max(old.idle),
                        iowait: read.iowait.max(old.iowait),
                        irq: read.irq.max(old.irq),
                        softirq: read.softirq.max(old.softirq),
                        steal: read.steal.max(old.steal),
                    }
                }
                _ => *read,
            };
            self.next.push(kept);
        }
        std::mem::swap(&mut self.given, &mut self.next);
        &self.given
    }
}

/// Per-CPU ticks as seconds per mode, into `out` (cleared first).
pub(super) fn cpu_mode_seconds(
    per_cpu: &[crate::source::system::CpuTimes],
    ticks_per_second: u64,
    out: &mut Vec<crate::snapshot::CpuModeSeconds>,
) {
    // A division, not a multiplication by 1/HZ: it is correctly rounded, so 309974 ticks print
    // as 3099.74 s as node_exporter's do, not 3099.7400000000002.
    let hz = ticks_per_second.max(1) as f64;
    let seconds = |ticks: u64| ticks as f64 / hz;
    out.clear();
    out.extend(per_cpu.iter().map(|t| crate::snapshot::CpuModeSeconds {
        cpu: t.cpu,
        user: seconds(t.user),
        nice: seconds(t.nice),
        system: seconds(t.system),
        idle: seconds(t.idle),
        iowait: seconds(t.iowait),
        irq: seconds(t.irq),
        softirq: seconds(t.softirq),
        steal: seconds(t.steal),
    }));
}

/// Descriptors one held process can use (its directory, stat, status, statm, io, schedstat,
/// smaps_rollup, fd/, task/ and a children file),
/// and descriptors kept free for everything else.
const DESCRIPTORS_PER_PROCESS: u64 = 10;
const RESERVED_DESCRIPTORS: u64 = 256;

/// How many processes may keep their files open: the configured cap, lowered so that held
/// files can never exhaust the open-file limit (raised to its hard limit first, which needs no
/// privilege). Processes beyond the cap are read with open/read/close: slower, still correct.
fn held_process_cap(configured: usize) -> usize {
    let limit = crate::source::held::raise_open_file_limit();
    let affordable = limit.saturating_sub(RESERVED_DESCRIPTORS) / DESCRIPTORS_PER_PROCESS;
    configured.min(usize::try_from(affordable).unwrap_or(usize::MAX))
}

#[cfg(test)]
mod tests;
