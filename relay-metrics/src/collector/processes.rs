//! The per-process part of a pass: list the processes of the target, read each once, apply
//! Relay's rules for processes that exit or fail (relay-reference §4.1).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::config::ResourceMetricsConfig;
use crate::model::{
    CpuTicks, IoValues, PressureValues, ProcessCounters, ProcessPass, ProcessSet, SystemValues,
    Wanted,
};
use crate::source::cgroup;
use crate::source::procfs::{
    self, PidLister, ProcessFields, ProcessReader, ProcessSample, ProcessTreeWalker,
};
use crate::source::system::SystemSample;
use crate::source::Roots;

use super::reasons::Reasons;
use super::{age_ms, CollectorError, Target};

/// Reads the processes of a target, holding their files open between passes.
pub(super) struct ProcessPassReader {
    wanted: Wanted,
    fields: ProcessFields,
    reader: ProcessReader,
    lister: Option<PidLister>,
    walker: Option<ProcessTreeWalker>,
    cgroup_walker: cgroup::SubtreeWalker,
    pids: Vec<u32>,
    /// The process list of the previous pass, handed back for reuse.
    spare: Vec<ProcessCounters>,
    ticks_per_second: u64,
    private: PrivateMemoryCache,
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
        let fields = ProcessFields {
            schedstat: wanted.cpu && !matches!(target, Target::Global),
            peak_resident: wanted.memory && matches!(target, Target::Process { tree: false, .. }),
            private_memory: wanted.memory,
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
            spare: Vec::new(),
            cgroup_walker: cgroup::SubtreeWalker::new(),
            // Relay's fallback is none: without the tick rate CPU times are unknown, so they
            // become null (ticks_to_ms of a zero rate), never guessed.
            ticks_per_second: procfs::clock_ticks_per_second().unwrap_or(0),
            private: PrivateMemoryCache::new(Duration::from_millis(
                config.extensions.private_memory_interval_millis,
            )),
        })
    }

    pub(super) fn clock_ticks_per_second(&self) -> u64 {
        self.ticks_per_second
    }

    /// Age of the oldest private-memory value used in the last pass.
    pub(super) fn private_memory_age_ms(&self) -> Option<u64> {
        self.private.oldest_used.map(age_ms)
    }

    /// Takes back the previous pass so its process list can be reused.
    pub(super) fn recycle(&mut self, pass: ProcessPass) {
        if let ProcessPass::Sampled(set) = pass {
            self.spare = set.processes;
        }
    }

    /// One pass over the target's processes.
    pub(super) fn read(&mut self, target: &Target, reasons: &mut Reasons) -> ProcessPass {
        if !self.wanted.needs_processes() {
            return ProcessPass::NotRequested;
        }
        let strict = matches!(target, Target::Process { .. });
        if let Err(reason) = self.list(target) {
            if let Target::Process { pid, .. } = target {
                if !self.root_alive(*pid, target) {
                    return ProcessPass::RootUnavailable(format!("process {pid} exited"));
                }
            }
            reasons.add("process_sampling", format_args!("{reason}"));
            return ProcessPass::ListFailed(reason);
        }
        self.pids.sort_unstable();
        self.pids.dedup();
        let pids = &self.pids;
        self.reader.retain(|pid| pids.binary_search(&pid).is_ok());
        self.private.begin_pass();

        let mut processes = std::mem::take(&mut self.spare);
        processes.clear();
        let mut set = ProcessSet {
            visible: self.pids.len() as u64,
            incomplete: None,
            processes,
        };
        let mut failures = 0u64;
        let mut first_failure: Option<procfs::ProcessError> = None;
        for &pid in &self.pids {
            let mut fields = self.fields;
            fields.private_memory = self.fields.private_memory && self.private.needs_read(pid);
            let mut result = self.reader.sample(pid, &fields);
            // A cached private value belongs to another process if the pid was reused.
            if let Ok(sample) = &result {
                if self.fields.private_memory
                    && !fields.private_memory
                    && !self.private.matches(pid, sample.start_time_ticks)
                {
                    fields.private_memory = true;
                    result = self.reader.sample(pid, &fields);
                }
            }
            let sample = match result {
                Ok(sample) => sample,
                Err(error) => {
                    if let Target::Process { pid: root, .. } = target {
                        if pid == *root {
                            return ProcessPass::RootUnavailable(error.to_string());
                        }
                    }
                    if !error.is_gone() {
                        failures += 1;
                        first_failure.get_or_insert(error);
                    }
                    continue;
                }
            };
            if let Target::Process {
                pid: root,
                start_time_ticks,
                ..
            } = target
            {
                if pid == *root && sample.start_time_ticks != *start_time_ticks {
                    return ProcessPass::RootUnavailable(format!(
                        "process {pid} was replaced by another process with the same pid"
                    ));
                }
            }
            let private_kib = if !self.fields.private_memory {
                None
            } else if fields.private_memory {
                self.private.store(&sample)
            } else {
                self.private.cached(pid)
            };
            set.processes.push(counters(&sample, private_kib));
        }
        self.private.end_pass();
        if let Some(error) = first_failure {
            if strict {
                set.incomplete = Some(error.to_string());
            }
            reasons.add(
                "process_sampling",
                format_args!("{failures} process(es) could not be read, e.g. {error}"),
            );
        }
        ProcessPass::Sampled(set)
    }

    fn list(&mut self, target: &Target) -> Result<(), String> {
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
                Some(walker) => walker.walk(*pid, &mut self.pids).map_err(|e| e.to_string()),
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

fn counters(sample: &ProcessSample, private_kib: Option<u64>) -> ProcessCounters {
    ProcessCounters {
        pid: sample.pid,
        start_time_ticks: sample.start_time_ticks,
        utime_ticks: sample.utime_ticks,
        stime_ticks: sample.stime_ticks,
        threads: sample.num_threads,
        rss_bytes: sample.rss_bytes,
        vsize_bytes: sample.vsize_bytes,
        peak_resident_kib: sample.peak_resident_kib,
        private_kib,
        open_fds: sample.open_fd_count,
        io: sample.io.map(|io| IoValues {
            read_bytes: io.read_bytes,
            write_bytes: io.write_bytes,
            read_syscalls: io.read_syscalls,
            write_syscalls: io.write_syscalls,
        }),
        // Summed over the process's threads by the reader (see ProcessSample::schedstat).
        run_time_ns: sample.schedstat.map(|s| s.run_ns),
        run_queue_wait_ns: sample.schedstat.map(|s| s.wait_ns),
    }
}

/// Private memory on its own cadence: `smaps_rollup` walks every mapping (~90 µs a process),
/// so with an interval set, each process's value is re-read only when older than the interval.
/// Values are read in the same pass as the process's other files, so a process that exits
/// in between is dropped like any other exited process, never half-counted.
struct PrivateMemoryCache {
    interval: Duration,
    /// pid → (start time, value, when read).
    values: HashMap<u32, (u64, Option<u64>, Instant)>,
    seen: Vec<u32>,
    oldest_used: Option<Instant>,
}

impl PrivateMemoryCache {
    fn new(interval: Duration) -> Self {
        Self {
            interval,
            values: HashMap::new(),
            seen: Vec::new(),
            oldest_used: None,
        }
    }

    fn begin_pass(&mut self) {
        self.seen.clear();
        self.oldest_used = None;
    }

    /// True when the value of `pid` must be (re)read in this pass.
    fn needs_read(&self, pid: u32) -> bool {
        self.interval.is_zero()
            || self
                .values
                .get(&pid)
                .is_none_or(|(_, _, read_at)| read_at.elapsed() >= self.interval)
    }

    /// True when the cached value was read from this very process.
    fn matches(&self, pid: u32, start_time_ticks: u64) -> bool {
        self.values
            .get(&pid)
            .is_some_and(|(start, _, _)| *start == start_time_ticks)
    }

    fn store(&mut self, sample: &ProcessSample) -> Option<u64> {
        let now = Instant::now();
        self.seen.push(sample.pid);
        self.oldest_used = Some(self.oldest_used.map_or(now, |o| o.min(now)));
        if !self.interval.is_zero() {
            self.values.insert(
                sample.pid,
                (sample.start_time_ticks, sample.private_kib, now),
            );
        }
        sample.private_kib
    }

    fn cached(&mut self, pid: u32) -> Option<u64> {
        self.seen.push(pid);
        let (_, value, read_at) = *self.values.get(&pid)?;
        self.oldest_used = Some(self.oldest_used.map_or(read_at, |o| o.min(read_at)));
        value
    }

    /// Drops values of processes that were not in this pass.
    fn end_pass(&mut self) {
        if self.values.len() > self.seen.len() {
            self.seen.sort_unstable();
            let seen = &self.seen;
            self.values.retain(|pid, _| seen.binary_search(pid).is_ok());
        }
    }
}

/// System values in the model's terms, written in place.
pub(super) fn fill_system_values(sample: &SystemSample, out: &mut SystemValues) {
    let pressure = |p: Option<crate::source::system::Pressure>| PressureValues {
        some_usec: p.and_then(|p| p.some_total_usec),
        full_usec: p.and_then(|p| p.full_total_usec),
    };
    out.memory_total_kib = sample.memory.and_then(|m| m.total_kib);
    out.memory_available_kib = sample.memory.and_then(|m| m.available_kib);
    out.cpu_ticks.clear();
    // A CPU line that cannot be summed empties the list: the rate is then unknown, not wrong.
    for cpu in &sample.per_cpu {
        match (cpu.busy_ticks(), cpu.total_ticks()) {
            (Some(busy), Some(total)) => out.cpu_ticks.push(CpuTicks { busy, total }),
            _ => {
                out.cpu_ticks.clear();
                break;
            }
        }
    }
    out.cpu_pressure = pressure(sample.cpu_pressure);
    out.memory_pressure = pressure(sample.memory_pressure);
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
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let limit = match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    };
    let affordable = limit.saturating_sub(RESERVED_DESCRIPTORS) / DESCRIPTORS_PER_PROCESS;
    configured.min(usize::try_from(affordable).unwrap_or(usize::MAX))
}
