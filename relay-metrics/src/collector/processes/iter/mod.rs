//! The process pass through the BPF task iterator (see `source::task_iter`): one iterator read
//! per pass gives every listed process's values; what the iterator cannot give exactly, and
//! every process it does not show, is read through procfs.

use std::sync::Arc;

use crate::config::{ProcessSource, ResourceMetricsConfig};
use crate::model::{IoValues, ProcessCounters, Wanted};
use crate::source::task_iter::{self, ResidentSource, TaskIter, TaskRecord};
use crate::source::Roots;
use crate::source::{held, procfs};

use super::super::reasons::Reasons;
use super::super::{CollectorError, Target};
use super::{counters, PassOutcome, ProcessPassReader, Sampled};

/// The `extensions.collector.process_source` values.
pub(crate) const BPF_ITER: &str = "bpf_iter";
/// See [`BPF_ITER`].
pub(crate) const PROCFS: &str = "procfs";

/// Whether the iterator serves this reader's passes.
pub(crate) enum SourceState {
    Iter {
        iter: TaskIter,
        records: Vec<TaskRecord>,
        page_size_bytes: u64,
        /// Whether the kernel keeps scheduler statistics (`CONFIG_SCHED_INFO`): without them
        /// `schedstat` prints zeros, which the iterator's values must then be too.
        sched_info_on: bool,
        /// Why the last pass fell back to procfs, if it did.
        failed: Option<Arc<str>>,
        /// For a scope smaller than the machine (cgroup, process tree): what chooses, each pass,
        /// the cheaper path. `None` in the global scope, which the iterator always serves.
        crossover: Option<Crossover>,
        /// The pids the last pass read through procfs entirely (not shown by the iterator,
        /// or past its walks' bounds).
        procfs_pids: Vec<u32>,
        /// Descriptors the readers held when the records were taken (see `source::held`).
        held_at_read: usize,
    },
    /// `auto` for a scope smaller than the machine, while procfs is the cheaper path: the
    /// iterator is loaded only once the scope grows past the crossover, so a small scope never
    /// pays for the load (nor, where it happens in this process, for aya's parse of the kernel
    /// BTF, which leaves ~16 MiB resident).
    Deferred {
        roots: Roots,
        page_size_bytes: u64,
        /// Whether the records must carry memory values (`TaskIter::load`).
        memory: bool,
        crossover: Crossover,
        reason: Option<Arc<str>>,
    },
    Procfs {
        reason: Option<Arc<str>>,
    },
}

impl SourceState {
    pub(crate) fn new(
        roots: &Roots,
        config: &ResourceMetricsConfig,
        target: &Target,
        wanted: &Wanted,
    ) -> Result<Self, CollectorError> {
        let mode = config.extensions.process_source;
        let procfs = |reason: &str| SourceState::Procfs {
            reason: Some(Arc::from(reason)),
        };
        if mode == ProcessSource::Procfs {
            return Ok(procfs("extensions.process_source is \"procfs\""));
        }
        let refused = |reason: &str| -> Result<Self, CollectorError> {
            if mode == ProcessSource::BpfIter {
                Err(CollectorError::Target(format!(
                    "extensions.process_source is \"bpf_iter\", but the task iterator cannot \
                     serve: {reason}"
                )))
            } else {
                Ok(procfs(reason))
            }
        };
        if !wanted.needs_processes() {
            return Ok(SourceState::Procfs { reason: None });
        }
        if matches!(target, Target::Process { tree: false, .. }) {
            // One process costs a few reads through procfs, far below one pass over every task.
            return refused(
                "a single process is read through procfs (cheaper than a pass over every task)",
            );
        }
        let Some(page_size_bytes) = procfs::page_size_bytes() else {
            return refused("the page size is unknown");
        };
        if task_iter::ns_to_ticks(0, procfs::clock_ticks_per_second().unwrap_or(0)).is_none() {
            return refused("the clock tick rate is unknown or does not divide a second");
        }
        if mode == ProcessSource::Auto && !matches!(target, Target::Global) {
            // What is known without loading is said at once.
            if let Err(unavailable) = task_iter::preconditions(roots) {
                return refused(&unavailable.0);
            }
            return Ok(SourceState::Deferred {
                roots: roots.clone(),
                page_size_bytes,
                memory: wanted.memory,
                crossover: Crossover::new(roots),
                reason: None,
            });
        }
        match TaskIter::load(roots, wanted.memory) {
            // Forced ("bpf_iter") or global, the iterator serves whatever the cost.
            Ok(iter) => Ok(Self::loaded(iter, roots, page_size_bytes, None)),
            Err(error) => refused(&error.0),
        }
    }

    fn loaded(
        iter: TaskIter,
        roots: &Roots,
        page_size_bytes: u64,
        crossover: Option<Crossover>,
    ) -> Self {
        SourceState::Iter {
            iter,
            records: Vec::new(),
            page_size_bytes,
            sched_info_on: sched_info_on(roots),
            failed: None,
            crossover,
            procfs_pids: Vec::new(),
            held_at_read: 0,
        }
    }

    /// A deferred iterator is loaded once a scope of `listed` processes makes it the cheaper
    /// path; a load that fails leaves procfs serving for good, with the reason.
    fn load_when_cheaper(&mut self, listed: usize) {
        let SourceState::Deferred {
            crossover, reason, ..
        } = self
        else {
            return;
        };
        if let Some(why) = crossover.prefer_procfs(listed) {
            *reason = Some(why);
            return;
        }
        let deferred = std::mem::replace(self, SourceState::Procfs { reason: None });
        let SourceState::Deferred {
            roots,
            page_size_bytes,
            memory,
            crossover,
            ..
        } = deferred
        else {
            return;
        };
        *self = match TaskIter::load(&roots, memory) {
            Ok(iter) => Self::loaded(iter, &roots, page_size_bytes, Some(crossover)),
            Err(error) => SourceState::Procfs {
                reason: Some(Arc::from(error.0)),
            },
        };
    }

    /// The `process_source` and `process_source_reason` of the last pass.
    pub(crate) fn describe(&self) -> (&'static str, Option<&Arc<str>>) {
        match self {
            SourceState::Iter { failed: None, .. } => (BPF_ITER, None),
            SourceState::Iter {
                failed: Some(reason),
                ..
            } => (PROCFS, Some(reason)),
            SourceState::Deferred { reason, .. } | SourceState::Procfs { reason } => {
                (PROCFS, reason.as_ref())
            }
        }
    }
}

/// Estimated cost of one iterator pass: a fixed part, then every task on the machine (threads
/// too: the kernel walks them all), then each record the scope keeps. And of reading one
/// process through procfs in a cgroup or tree scope (stat, statm, io, fd/, schedstat).
/// Measured with `bench --process-source both` (docs/PROCESS_SOURCE.md, "Crossover").
/// Private memory (`smaps_rollup`) is left out: both paths read it alike.
const ITER_FIXED_NS: u64 = 20_000;
const ITER_PER_TASK_NS: u64 = 500;
const ITER_PER_LISTED_NS: u64 = 600;
const PROCFS_PER_LISTED_NS: u64 = 5_000;

/// Whether reading `listed` processes through procfs costs no more than an iterator pass over
/// a machine of `tasks` tasks.
fn procfs_is_cheaper(listed: u64, tasks: u64) -> bool {
    let iter_ns = ITER_FIXED_NS
        .saturating_add(tasks.saturating_mul(ITER_PER_TASK_NS))
        .saturating_add(listed.saturating_mul(ITER_PER_LISTED_NS));
    listed.saturating_mul(PROCFS_PER_LISTED_NS) <= iter_ns
}

/// Chooses, per pass, between the iterator and procfs for a scope that holds only some of the
/// machine's processes: the iterator's cost grows with the machine, procfs's with the scope.
pub(crate) struct Crossover {
    /// `/proc/loadavg`, whose fourth field counts the machine's tasks (threads included).
    loadavg: Option<std::fs::File>,
    buf: Vec<u8>,
    /// Made once: a collect of a fixed scope allocates nothing (`tests/allocations.rs`).
    reason: Arc<str>,
}

impl Crossover {
    fn new(roots: &Roots) -> Self {
        Self {
            loadavg: std::fs::File::open(roots.proc.join("loadavg")).ok(),
            buf: vec![0; 128],
            reason: Arc::from(
                "procfs is cheaper for this scope's processes than a task-iterator pass over \
                 every task of the machine",
            ),
        }
    }

    /// The machine's task count (`/proc/loadavg`'s `running/total`).
    fn tasks(&mut self) -> Option<u64> {
        use std::os::unix::fs::FileExt as _;
        let read = self.loadavg.as_ref()?.read_at(&mut self.buf, 0).ok()?;
        let text = std::str::from_utf8(self.buf.get(..read)?).ok()?;
        let (_, total) = text.split_whitespace().nth(3)?.split_once('/')?;
        total.parse().ok()
    }

    /// Why procfs is cheaper for a scope of `listed` processes, or `None` when the iterator is.
    fn prefer_procfs(&mut self, listed: usize) -> Option<Arc<str>> {
        let listed = u64::try_from(listed).unwrap_or(u64::MAX);
        // Without the task count, the iterator (exact either way) serves.
        let tasks = self.tasks()?;
        procfs_is_cheaper(listed, tasks).then(|| Arc::clone(&self.reason))
    }
}

/// `schedstat` of this process: a live process has run, so zeros mean the kernel keeps no
/// scheduler statistics and prints `0 0 0` for every task.
fn sched_info_on(roots: &Roots) -> bool {
    std::fs::read(roots.proc.join("self/schedstat"))
        .ok()
        .and_then(|bytes| procfs::parse::parse_schedstat(&bytes))
        .is_none_or(|stat| stat.run_ns != 0)
}

impl ProcessPassReader {
    /// Samples the listed pids from one iterator read; `None` when the iterator does not serve
    /// (then the caller reads every pid through procfs). The same rules as `sample_listed`:
    /// a tree's root that is gone or replaced ends the pass, and with `check_parents` (a reused
    /// walk) a member whose parent is not listed means the tree changed.
    pub(super) fn sample_listed_iter(
        &mut self,
        target: &Target,
        check_parents: bool,
        processes: &mut Vec<ProcessCounters>,
        reasons: &mut Reasons,
    ) -> Option<Sampled> {
        self.source.load_when_cheaper(self.pids.len());
        let SourceState::Iter {
            iter,
            records,
            failed,
            crossover,
            procfs_pids,
            held_at_read,
            ..
        } = &mut self.source
        else {
            return None;
        };
        procfs_pids.clear();
        if let Some(crossover) = crossover {
            if let Some(reason) = crossover.prefer_procfs(self.pids.len()) {
                *failed = Some(reason);
                return None;
            }
        }
        *held_at_read = held::held_descriptors();
        if let Err(error) = iter.read(records) {
            let reason = format!("reading the task iterator failed, procfs served: {error}");
            reasons.add(
                "extensions.collector.process_source",
                format_args!("{reason}"),
            );
            *failed = Some(Arc::from(reason));
            return None;
        }
        *failed = None;
        // The kernel walks pids in ascending order; sorting keeps the merge below correct if a
        // kernel ever did not.
        if !records.is_sorted_by_key(|record| record.tgid) {
            records.sort_unstable_by_key(|record| record.tgid);
        }
        let records = std::mem::take(records);
        let sampled = self.merge_records(&records, target, check_parents, processes);
        if let SourceState::Iter { records: kept, .. } = &mut self.source {
            *kept = records;
        }
        Some(sampled)
    }

    /// Each listed pid from its record, or through procfs where there is none.
    fn merge_records(
        &mut self,
        records: &[TaskRecord],
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
        self.private.begin_pass();
        let mut outcome = PassOutcome::default();
        let mut next = 0;
        for index in 0..self.pids.len() {
            let pid = self.pids[index];
            while records.get(next).is_some_and(|record| record.tgid < pid) {
                next += 1;
            }
            let record = records
                .get(next)
                .filter(|record| record.tgid == pid && !record.is_truncated());
            let result = match record {
                Some(record) => self
                    .counters_of_record(record)
                    .map(|counters| (counters, record.ppid)),
                // Not shown by the iterator (pid 1 on some hosts, a process started after the
                // iterator passed its pid) or too large for its walks.
                None => {
                    if let SourceState::Iter { procfs_pids, .. } = &mut self.source {
                        procfs_pids.push(pid);
                    }
                    self.sample_procfs(pid)
                        .map(|(sample, private_kib)| (counters(&sample, private_kib), sample.ppid))
                }
            };
            let (counters, ppid) = match result {
                Ok(read) => read,
                Err(error) => {
                    if Some(pid) == root {
                        return Sampled::RootUnavailable(error.to_string());
                    }
                    outcome.missed(error);
                    continue;
                }
            };
            if Some(pid) == root && Some(counters.start_time_ticks) != root_start {
                return Sampled::RootUnavailable(format!(
                    "process {pid} was replaced by another process with the same pid"
                ));
            }
            // Reparented (its parent exited) or adopted by a process outside the list.
            if check_parents && Some(pid) != root && self.pids.binary_search(&ppid).is_err() {
                return Sampled::Reparented;
            }
            processes.push(counters);
        }
        self.private.end_pass();
        Sampled::Done(outcome)
    }

    /// The counters procfs would give for the process of `record`, reading through procfs only
    /// what the record cannot give exactly (`statm` on 6.2+, `smaps_rollup`).
    fn counters_of_record(
        &mut self,
        record: &TaskRecord,
    ) -> Result<ProcessCounters, procfs::ProcessError> {
        let SourceState::Iter {
            iter,
            page_size_bytes,
            held_at_read,
            sched_info_on,
            ..
        } = &self.source
        else {
            return Err(procfs::ProcessError::Gone { pid: record.tgid });
        };
        let (page_size_bytes, held_at_read, statm_sums, sched_info_on) = (
            *page_size_bytes,
            *held_at_read,
            iter.statm_sums(),
            *sched_info_on,
        );
        let pid = record.tgid;
        let ticks = |ns| task_iter::ns_to_ticks(ns, self.ticks_per_second).unwrap_or(0);
        let start_time_ticks = ticks(record.start_boottime_ns);
        let (utime_ns, stime_ns) = record.adjusted_cputime_ns();
        let resident = record.resident_source(statm_sums);
        let read_statm = self.fields.exact_resident && resident == ResidentSource::CentralCountOnly;
        let mut read_private = self.fields.private_memory && self.private.needs_read(pid);
        if self.fields.private_memory
            && !read_private
            && !self.private.matches(pid, start_time_ticks)
        {
            read_private = true;
        }
        let (statm_bytes, private_read) = if read_statm || read_private {
            self.reader
                .memory(pid, start_time_ticks, read_statm, read_private)?
        } else {
            (None, None)
        };
        // As the procfs reader: the live threads' schedstat summed, none above its thread bound.
        let schedstat = (self.fields.schedstat
            && record.nr_threads <= procfs::MAX_SCHEDSTAT_THREADS)
            .then_some(if sched_info_on {
                (record.live_runtime_ns, record.run_delay_ns)
            } else {
                (0, 0)
            });
        let stat_rss_bytes = record.stat_rss_pages().saturating_mul(page_size_bytes);
        let rss_bytes = match resident {
            ResidentSource::None => 0,
            ResidentSource::Exact => stat_rss_bytes,
            // statm's value where the procfs path reads statm, else stat's.
            ResidentSource::Summed if self.fields.exact_resident => record
                .summed_rss_pages()
                .unwrap_or(0)
                .saturating_mul(page_size_bytes),
            ResidentSource::Summed => stat_rss_bytes,
            // As the procfs path: statm when asked and readable, else stat's value.
            ResidentSource::CentralCountOnly => statm_bytes.unwrap_or(stat_rss_bytes),
        };
        let private_kib = if !self.fields.private_memory {
            None
        } else if read_private {
            self.private.store(pid, start_time_ticks, private_read)
        } else {
            self.private.cached(pid)
        };
        Ok(ProcessCounters {
            pid,
            start_time_ticks,
            utime_ticks: ticks(utime_ns),
            stime_ticks: ticks(stime_ns),
            // The program does not read signal->cutime/cstime (see docs/PROCESS_SOURCE.md).
            cutime_ticks: None,
            cstime_ticks: None,
            threads: record.nr_threads,
            rss_bytes,
            vsize_bytes: if resident == ResidentSource::None {
                0
            } else {
                record.total_vm_pages.saturating_mul(page_size_bytes)
            },
            peak_resident_kib: None,
            private_kib,
            open_fds: self.fields.open_fds.then(|| {
                if record.is_kernel_thread() {
                    0
                } else if pid == std::process::id() {
                    // The same rule as procfs: leave out what the collector holds to read.
                    held::own_fd_count_held(
                        record.open_fds,
                        held_at_read,
                        task_iter::READ_DESCRIPTORS,
                    )
                } else {
                    record.open_fds
                }
            }),
            io: self.fields.io.then_some(IoValues {
                read_bytes: record.io[0],
                write_bytes: record.io[1],
                read_syscalls: record.io[2],
                write_syscalls: record.io[3],
            }),
            run_time_ns: schedstat.map(|(run, _)| run),
            run_queue_wait_ns: schedstat.map(|(_, wait)| wait),
        })
    }

    /// The pids the last iterator pass read entirely through procfs.
    #[cfg(test)]
    pub(crate) fn procfs_pids(&self) -> &[u32] {
        match &self.source {
            SourceState::Iter { procfs_pids, .. } => procfs_pids,
            SourceState::Deferred { .. } | SourceState::Procfs { .. } => &[],
        }
    }

    /// `extensions.collector.process_source` and its reason for the last pass.
    pub(crate) fn process_source(&self) -> (&'static str, Option<&Arc<str>>) {
        self.source.describe()
    }
}

#[cfg(test)]
pub(crate) mod namespace_tests;
#[cfg(test)]
pub(crate) mod tests;
