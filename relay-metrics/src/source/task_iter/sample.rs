//! A record as the per-process record both paths produce ([`ProcessSample`]): after this, the
//! collector treats a process the same whichever path read it.

use crate::source::held;
use crate::source::procfs::{
    IoCounters, ProcessFields, ProcessSample, SchedStat, MAX_SCHEDSTAT_THREADS,
};

use super::{ns_to_ticks, ResidentSource, TaskIter, TaskRecord, READ_DESCRIPTORS};

impl TaskIter {
    /// What [`ProcessReader::sample`](crate::source::procfs::ProcessReader::sample) with
    /// `fields` would give for the process of `record`, read by the last [`TaskIter::read`],
    /// and whether `statm` must still be read for its resident size (Linux 6.2–6.15, see
    /// [`ResidentSource::CentralCountOnly`]); until then `rss_bytes` is `stat`'s. Not in the
    /// record, so `None`: private memory, `VmHWM`, the children's CPU times.
    pub(crate) fn sample(
        &self,
        record: &TaskRecord,
        fields: &ProcessFields,
    ) -> (ProcessSample, bool) {
        let ticks = |ns| ns_to_ticks(ns, self.ticks_per_second).unwrap_or(0);
        let bytes = |pages: u64| pages.saturating_mul(self.page_size_bytes);
        let (utime_ns, stime_ns) = record.split_ns;
        let resident = record.resident_source(self.statm_sums);
        let rss_bytes = match resident {
            ResidentSource::None => 0,
            // statm's value where the procfs reader reads statm, else stat's.
            ResidentSource::Summed if fields.exact_resident => {
                bytes(record.summed_rss_pages().unwrap_or(0))
            }
            ResidentSource::Exact | ResidentSource::Summed | ResidentSource::CentralCountOnly => {
                bytes(record.stat_rss_pages())
            }
        };
        // As the procfs reader: the live threads' schedstat summed, none above its thread bound,
        // zeros where the kernel keeps no scheduler statistics.
        let schedstat =
            (fields.schedstat && record.nr_threads <= MAX_SCHEDSTAT_THREADS).then(|| {
                let on = self.sched_info_on;
                SchedStat {
                    run_ns: if on { record.live_runtime_ns } else { 0 },
                    wait_ns: if on { record.run_delay_ns } else { 0 },
                }
            });
        let open_fd_count = fields.open_fds.then(|| {
            if record.is_kernel_thread() {
                0
            } else if record.tgid == self.own_pid {
                // The same rule as procfs: leave out what the collector holds to read.
                held::own_fd_count_held(record.open_fds, self.held_at_read, READ_DESCRIPTORS)
            } else {
                record.open_fds
            }
        });
        let sample = ProcessSample {
            pid: record.tgid,
            start_time_ticks: ticks(record.start_boottime_ns),
            ppid: record.ppid,
            utime_ticks: ticks(utime_ns),
            stime_ticks: ticks(stime_ns),
            // The program does not read signal->cutime/cstime (docs/PROCESS_SOURCE.md).
            cutime_ticks: None,
            cstime_ticks: None,
            num_threads: record.nr_threads,
            rss_bytes,
            vsize_bytes: if resident == ResidentSource::None {
                0
            } else {
                bytes(record.total_vm_pages)
            },
            schedstat,
            run_time_ns: fields.schedstat.then_some(record.runtime_ns),
            peak_resident_kib: None,
            private_kib: None,
            open_fd_count,
            io: fields.io.then_some(IoCounters {
                read_bytes: record.io[0],
                write_bytes: record.io[1],
                read_syscalls: record.io[2],
                write_syscalls: record.io[3],
            }),
        };
        let read_statm = fields.exact_resident && resident == ResidentSource::CentralCountOnly;
        (sample, read_statm)
    }
}
