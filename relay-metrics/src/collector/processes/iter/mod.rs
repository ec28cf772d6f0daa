//! Which path reads a pass's processes: the BPF task iterator (see `source::task_iter`), whose
//! one read per pass gives every process's record, or procfs. The pass itself
//! (`super::ProcessPassReader::read`) is the same for both from the record on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{ProcessSource, ResourceMetricsConfig};
use crate::model::Wanted;
use crate::source::system::LoadavgReader;
use crate::source::task_iter::{self, TaskIter, TaskRecord};
use crate::source::Roots;

use super::super::reasons::Reasons;
use super::super::{CollectorError, Target};

/// The `extensions.collector.process_source` values.
pub(crate) const BPF_ITER: &str = "bpf_iter";
/// See [`BPF_ITER`].
pub(crate) const PROCFS: &str = "procfs";

/// Whether the iterator serves this reader's passes.
pub(crate) enum SourceState {
    Iter {
        iter: TaskIter,
        records: Vec<TaskRecord>,
        /// Why the last pass fell back to procfs, if it did.
        failed: Option<Arc<str>>,
        /// For a scope smaller than the machine (cgroup, process tree): what chooses, each pass,
        /// the cheaper path. `None` in the global scope, which the iterator always serves.
        crossover: Option<Crossover>,
        /// The pids the last pass read through procfs entirely (not shown by the iterator,
        /// or past its walks' bounds).
        procfs_pids: Vec<u32>,
    },
    /// `auto` for a scope smaller than the machine, while procfs is the cheaper path: the
    /// iterator is loaded only once the scope grows past the crossover, so a small scope never
    /// pays for the load (nor, where it happens in this process, for aya's parse of the kernel
    /// BTF, which leaves ~16 MiB resident).
    Deferred {
        roots: Roots,
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
        if mode == ProcessSource::Auto && !matches!(target, Target::Global) {
            // What is known without loading is said at once.
            if let Err(unavailable) = task_iter::preconditions(roots) {
                return refused(&unavailable.0);
            }
            return Ok(SourceState::Deferred {
                roots: roots.clone(),
                memory: wanted.memory,
                crossover: Crossover::new(roots),
                reason: None,
            });
        }
        match TaskIter::load(roots, wanted.memory) {
            // Forced ("bpf_iter") or global, the iterator serves whatever the cost.
            Ok(iter) => Ok(Self::loaded(iter, None)),
            Err(error) => refused(&error.0),
        }
    }

    fn loaded(iter: TaskIter, crossover: Option<Crossover>) -> Self {
        SourceState::Iter {
            iter,
            records: Vec::new(),
            failed: None,
            crossover,
            procfs_pids: Vec::new(),
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
            memory,
            crossover,
            ..
        } = deferred
        else {
            return;
        };
        *self = match TaskIter::load(&roots, memory) {
            Ok(iter) => Self::loaded(iter, Some(crossover)),
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

/// How old the machine's task count may be. It only weighs the two paths' costs (both are
/// exact), and a machine's task count moves slowly: not worth a read in every collect.
const TASKS_MAX_AGE: Duration = Duration::from_secs(1);

/// Chooses, per pass, between the iterator and procfs for a scope that holds only some of the
/// machine's processes: the iterator's cost grows with the machine, procfs's with the scope.
pub(crate) struct Crossover {
    /// `/proc/loadavg`, whose fourth field counts the machine's tasks (threads included).
    loadavg: LoadavgReader,
    /// The last task count read, and when: re-read at most every [`TASKS_MAX_AGE`].
    tasks: Option<(Instant, u64)>,
    /// Made once: a collect of a fixed scope allocates nothing (`tests/allocations.rs`).
    reason: Arc<str>,
}

impl Crossover {
    fn new(roots: &Roots) -> Self {
        Self {
            loadavg: LoadavgReader::new(roots),
            tasks: None,
            reason: Arc::from(
                "procfs is cheaper for this scope's processes than a task-iterator pass over \
                 every task of the machine",
            ),
        }
    }

    /// The machine's task count (`/proc/loadavg`'s `running/total`), at most [`TASKS_MAX_AGE`]
    /// old.
    fn tasks(&mut self) -> Option<u64> {
        let now = Instant::now();
        if let Some((read_at, tasks)) = self.tasks {
            if now.saturating_duration_since(read_at) < TASKS_MAX_AGE {
                return Some(tasks);
            }
        }
        let tasks = self.loadavg.tasks()?;
        self.tasks = Some((now, tasks));
        Some(tasks)
    }

    /// Why procfs is cheaper for a scope of `listed` processes, or `None` when the iterator is.
    fn prefer_procfs(&mut self, listed: usize) -> Option<Arc<str>> {
        let listed = u64::try_from(listed).unwrap_or(u64::MAX);
        // Without the task count, the iterator (exact either way) serves.
        let tasks = self.tasks()?;
        procfs_is_cheaper(listed, tasks).then(|| Arc::clone(&self.reason))
    }
}

impl SourceState {
    /// This pass's records, sorted by pid, when the iterator serves it (the caller hands them
    /// back with [`SourceState::keep_records`]); `None` when procfs serves, with the reason
    /// kept for [`SourceState::describe`] (and added to `reasons` when the read failed).
    pub(super) fn take_records(
        &mut self,
        listed: usize,
        reasons: &mut Reasons,
    ) -> Option<Vec<TaskRecord>> {
        self.load_when_cheaper(listed);
        let SourceState::Iter {
            iter,
            records,
            failed,
            crossover,
            procfs_pids,
        } = self
        else {
            return None;
        };
        procfs_pids.clear();
        if let Some(reason) = crossover.as_mut().and_then(|c| c.prefer_procfs(listed)) {
            *failed = Some(reason);
            return None;
        }
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
        // The kernel walks pids in ascending order; sorting keeps the pass's merge correct if a
        // kernel ever did not.
        if !records.is_sorted_by_key(|record| record.tgid) {
            records.sort_unstable_by_key(|record| record.tgid);
        }
        Some(std::mem::take(records))
    }

    /// Takes back the records of [`SourceState::take_records`], for the next pass to reuse.
    pub(super) fn keep_records(&mut self, taken: Option<Vec<TaskRecord>>) {
        if let (SourceState::Iter { records, .. }, Some(taken)) = (self, taken) {
            *records = taken;
        }
    }

    /// The records of the last pass, sorted by pid, when the iterator served it.
    pub(super) fn last_records(&self) -> Option<&[TaskRecord]> {
        match self {
            SourceState::Iter {
                records,
                failed: None,
                ..
            } => Some(records),
            SourceState::Iter { .. }
            | SourceState::Deferred { .. }
            | SourceState::Procfs { .. } => None,
        }
    }

    /// The iterator, where it serves.
    pub(super) fn iter(&self) -> Option<&TaskIter> {
        match self {
            SourceState::Iter { iter, .. } => Some(iter),
            SourceState::Deferred { .. } | SourceState::Procfs { .. } => None,
        }
    }

    /// Notes a pid of an iterator pass that procfs read entirely.
    pub(super) fn served_by_procfs(&mut self, pid: u32) {
        if let SourceState::Iter { procfs_pids, .. } = self {
            procfs_pids.push(pid);
        }
    }

    /// The pids the last iterator pass read entirely through procfs.
    #[cfg(test)]
    pub(super) fn procfs_pids(&self) -> &[u32] {
        match self {
            SourceState::Iter { procfs_pids, .. } => procfs_pids,
            SourceState::Deferred { .. } | SourceState::Procfs { .. } => &[],
        }
    }
}

#[cfg(test)]
pub(crate) mod namespace_tests;
#[cfg(test)]
pub(crate) mod tests;
