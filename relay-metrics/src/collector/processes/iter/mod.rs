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
        /// Why the last pass fell back to procfs, if it did.
        failed: Option<Arc<str>>,
        /// The pids the last pass read through procfs entirely (not shown by the iterator,
        /// or past its walks' bounds).
        procfs_pids: Vec<u32>,
        /// Descriptors the readers held when the records were taken (see `source::held`).
        held_at_read: usize,
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
        if !matches!(target, Target::Global) {
            return refused("the task iterator serves the global scope only");
        }
        let Some(page_size_bytes) = procfs::page_size_bytes() else {
            return refused("the page size is unknown");
        };
        if task_iter::ns_to_ticks(0, procfs::clock_ticks_per_second().unwrap_or(0)).is_none() {
            return refused("the clock tick rate is unknown or does not divide a second");
        }
        match TaskIter::load(roots) {
            Ok(iter) => Ok(SourceState::Iter {
                iter,
                records: Vec::new(),
                page_size_bytes,
                failed: None,
                procfs_pids: Vec::new(),
                held_at_read: 0,
            }),
            Err(error) => refused(&error.0),
        }
    }

    /// The `process_source` and `process_source_reason` of the last pass.
    pub(crate) fn describe(&self) -> (&'static str, Option<&Arc<str>>) {
        match self {
            SourceState::Iter { failed: None, .. } => (BPF_ITER, None),
            SourceState::Iter {
                failed: Some(reason),
                ..
            } => (PROCFS, Some(reason)),
            SourceState::Procfs { reason } => (PROCFS, reason.as_ref()),
        }
    }
}

impl ProcessPassReader {
    /// Samples the listed pids from one iterator read; `None` when the iterator does not serve
    /// (then the caller reads every pid through procfs).
    pub(super) fn sample_listed_iter(
        &mut self,
        processes: &mut Vec<ProcessCounters>,
        reasons: &mut Reasons,
    ) -> Option<Sampled> {
        let SourceState::Iter {
            iter,
            records,
            failed,
            procfs_pids,
            held_at_read,
            ..
        } = &mut self.source
        else {
            return None;
        };
        procfs_pids.clear();
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
                Some(record) => self.counters_of_record(record),
                // Not shown by the iterator (pid 1 on some hosts, a process started after the
                // iterator passed its pid) or too large for its walks.
                None => {
                    if let SourceState::Iter { procfs_pids, .. } = &mut self.source {
                        procfs_pids.push(pid);
                    }
                    self.sample_procfs(pid)
                        .map(|(sample, private_kib)| counters(&sample, private_kib))
                }
            };
            match result {
                Ok(counters) => processes.push(counters),
                Err(error) if error.is_gone() => outcome.member_gone = true,
                Err(error) => {
                    outcome.failures += 1;
                    outcome.first_failure.get_or_insert(error);
                }
            }
        }
        self.private.end_pass();
        if let SourceState::Iter { records: kept, .. } = &mut self.source {
            *kept = records;
        }
        Some(Sampled::Done(outcome))
    }

    /// The counters procfs would give for the process of `record`, reading through procfs only
    /// what the record cannot give exactly (`statm` on 6.2+, `smaps_rollup`).
    fn counters_of_record(
        &mut self,
        record: &TaskRecord,
    ) -> Result<ProcessCounters, procfs::ProcessError> {
        let SourceState::Iter {
            page_size_bytes,
            held_at_read,
            ..
        } = &self.source
        else {
            return Err(procfs::ProcessError::Gone { pid: record.tgid });
        };
        let (page_size_bytes, held_at_read) = (*page_size_bytes, *held_at_read);
        let pid = record.tgid;
        let ticks = |ns| task_iter::ns_to_ticks(ns, self.ticks_per_second).unwrap_or(0);
        let start_time_ticks = ticks(record.start_boottime_ns);
        let (utime_ns, stime_ns) = record.adjusted_cputime_ns();
        let resident = record.resident_source();
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
        let stat_rss_bytes = record.stat_rss_pages().saturating_mul(page_size_bytes);
        let rss_bytes = match resident {
            ResidentSource::None => 0,
            ResidentSource::Exact => stat_rss_bytes,
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
            run_time_ns: None,
            run_queue_wait_ns: None,
        })
    }

    /// The pids the last iterator pass read entirely through procfs.
    #[cfg(test)]
    pub(crate) fn procfs_pids(&self) -> &[u32] {
        match &self.source {
            SourceState::Iter { procfs_pids, .. } => procfs_pids,
            SourceState::Procfs { .. } => &[],
        }
    }

    /// `extensions.collector.process_source` and its reason for the last pass.
    pub(crate) fn process_source(&self) -> (&'static str, Option<&Arc<str>>) {
        self.source.describe()
    }
}

#[cfg(test)]
pub(crate) mod tests;
