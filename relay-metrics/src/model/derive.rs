//! From a [`Sample`] to a snapshot: sums, rates and units, following Relay's field rules.

use chrono::{DateTime, Utc};

use super::aggregate::{sum, ticks_to_ms, Coverage, Sum};
use super::rates::ProcessRates;
use super::{Baselines, CgroupValues, ProcessCounters, ProcessPass, ProcessSet, Sample};
use crate::config::ResourceMetricsConfig;
use crate::snapshot::{
    Extensions, KernelEvents, MeasurementScope, OperatingSystem, PreciseCpu,
    ProcessSamplingMetadata, ResourceMetricsSnapshot, SampleAges,
};

/// Which per-process values a configuration asks for (Relay 0.10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// CPU times.
    pub cpu: bool,
    /// Per-process memory (never in global scope).
    pub memory: bool,
    /// Thread and fd counts.
    pub process: bool,
    /// Per-process I/O.
    pub disk_io: bool,
    /// GPU per-process records.
    pub gpu_processes: bool,
}

impl Wanted {
    /// Derives what is wanted from the configuration and the scope.
    pub(crate) fn from_config(config: &ResourceMetricsConfig, scope: MeasurementScope) -> Self {
        Self {
            cpu: config.cpu.enabled,
            memory: config.memory.enabled && scope != MeasurementScope::Global,
            process: config.process.enabled,
            disk_io: config.disk.enabled && config.disk.process_io,
            gpu_processes: config.gpu.enabled && config.gpu.process_metrics,
        }
    }

    /// True when per-process counters are summed (`process_sampling` is reported).
    pub(crate) fn any_sum(&self) -> bool {
        self.cpu || self.memory || self.process || self.disk_io
    }

    /// True when the process list is needed at all.
    pub(crate) fn needs_processes(&self) -> bool {
        self.any_sum() || self.gpu_processes
    }
}

/// Builds the snapshot of `sample`, updating the rate baselines of its series.
#[cfg(test)]
pub(super) fn derive(
    config: &ResourceMetricsConfig,
    sample: &Sample,
    baselines: &mut Baselines,
    timestamp: DateTime<Utc>,
) -> ResourceMetricsSnapshot {
    let mut snapshot = ResourceMetricsSnapshot::default();
    derive_into(
        config,
        &mut sample.clone(),
        baselines,
        timestamp,
        &mut snapshot,
    );
    snapshot
}

/// Like [`derive`], but overwrites `out` in place, reusing its lists: once `out` has held a
/// snapshot of the same shape, this allocates nothing. The measured cgroups are moved, not
/// copied: `out`'s take their place in `sample`, whose next pass writes over them (a node's are
/// hundreds of reports).
pub(crate) fn derive_into(
    config: &ResourceMetricsConfig,
    sample: &mut Sample,
    baselines: &mut Baselines,
    timestamp: DateTime<Utc>,
    out: &mut ResourceMetricsSnapshot,
) {
    out.timestamp = timestamp;
    out.operating_system = OperatingSystem::Linux;
    out.measurement_scope = sample.scope;
    std::mem::swap(&mut out.extensions.targets, &mut sample.targets);
    let sample = &*sample;
    fill_extensions(&mut out.extensions, sample);

    if let ProcessPass::RootUnavailable(_) = &sample.processes {
        baselines.reset();
        fill_unavailable(config, out);
        return;
    }

    let pass = Pass::new(config, sample, baselines);
    out.extensions.precise_cpu = pass.wanted.cpu.then(|| pass.precise_cpu());
    out.process_sampling = pass.sampling();
    fill(&mut out.cpu, config.cpu.enabled, |cpu| fill_cpu(cpu, &pass));
    fill(&mut out.memory, config.memory.enabled, |memory| {
        fill_memory(
            memory,
            config,
            sample,
            pass.scope,
            pass.sums.as_ref(),
            pass.cgroup,
        )
    });
    fill(&mut out.process, config.process.enabled, |process| {
        fill_process(process, &pass)
    });
    fill(&mut out.disk, config.disk.enabled, |disk| {
        fill_disk(disk, &pass)
    });
    fill(&mut out.gpu, config.gpu.enabled, |gpu| fill_gpu(gpu, &pass));
    fill(&mut out.network, config.network.enabled, |network| {
        fill_network(network, config, sample, baselines)
    });
}

/// What the categories of one snapshot are derived from: the sample and configuration, and the
/// sums, rates and cgroup values computed once for all categories.
struct Pass<'a> {
    config: &'a ResourceMetricsConfig,
    sample: &'a Sample,
    scope: MeasurementScope,
    wanted: Wanted,
    processes: Option<&'a ProcessSet>,
    /// The processes whose counters are summed: none for an incomplete tree/application pass
    /// (Relay nulls its sums; partial scopes keep them).
    summable: Option<&'a [ProcessCounters]>,
    sums: Option<Sums>,
    rates: ProcessRates,
    /// The cgroup values that apply: none for an incomplete tree/application pass, which cannot
    /// tell whether the set owns its cgroup.
    cgroup: Option<&'a CgroupValues>,
    cgroup_usage_rate: Option<f64>,
    system_cpu_rate: Option<f64>,
}

impl<'a> Pass<'a> {
    /// Sums the processes and advances the rate baselines of every series this sample feeds.
    fn new(
        config: &'a ResourceMetricsConfig,
        sample: &'a Sample,
        baselines: &mut Baselines,
    ) -> Self {
        let scope = sample.scope;
        let wanted = Wanted::from_config(config, scope);
        let coverage = match scope {
            MeasurementScope::ApplicationProcess | MeasurementScope::ProcessTree => {
                Coverage::Strict
            }
            MeasurementScope::Global | MeasurementScope::Cgroup => Coverage::Partial,
        };
        let (processes, complete) = match &sample.processes {
            ProcessPass::Sampled(set) => (Some(set), set.incomplete.is_none()),
            _ => (None, false),
        };
        let applies = complete || coverage == Coverage::Partial;
        let summable = processes
            .filter(|_| applies)
            .map(|set| set.processes.as_slice());
        let sums = summable.map(|list| Sums::of(list, coverage, sample.clock_ticks_per_second));
        let clock = (sample.instant, sample.boottime_ns);
        let rates = match summable {
            Some(list) if wanted.any_sum() => {
                baselines.process_rates(list, clock, sample.clock_ticks_per_second, coverage, true)
            }
            _ => {
                baselines.process_rates(&[], clock, 1, coverage, false);
                ProcessRates::default()
            }
        };
        let cgroup = sample.cgroup.as_ref().filter(|_| applies);
        let cgroup_usage_rate =
            baselines.cgroup_usage_rate(sample.instant, cgroup.and_then(|c| c.usage_ns));
        let system_cpu_rate = if scope == MeasurementScope::Global && config.cpu.enabled {
            baselines.system_cpu_rate(sample.instant, &sample.system.cpu_ticks)
        } else {
            None
        };
        Self {
            config,
            sample,
            scope,
            wanted,
            processes,
            summable,
            sums,
            rates,
            cgroup,
            cgroup_usage_rate,
            system_cpu_rate,
        }
    }

    /// One field of the process sums, when there are sums and the field has a value.
    fn sum(&self, select: fn(&Sums) -> Sum) -> Option<u64> {
        self.sums.as_ref().and_then(|s| select(s).value)
    }

    /// `extensions.precise_cpu`: ns CPU time and the cgroup's own usage.
    fn precise_cpu(&self) -> PreciseCpu {
        PreciseCpu {
            run_time_ns: self.sum(|s| s.run_ns),
            run_queue_wait_ns: self.sum(|s| s.run_wait_ns),
            run_rate_logical_processors: self.rates.run_logical_processors,
            cgroup_usage_ns: self.cgroup.and_then(|c| c.usage_ns),
            cgroup_usage_rate_logical_processors: self.cgroup_usage_rate,
        }
    }

    /// `process_sampling`, reported whenever per-process counters are summed.
    fn sampling(&self) -> Option<ProcessSamplingMetadata> {
        match self.processes {
            Some(set) if self.wanted.any_sum() => Some(sampling_metadata(
                set.visible,
                set.processes.len(),
                self.sums.as_ref(),
                &self.rates,
                self.wanted,
                self.scope,
            )),
            _ => None,
        }
    }
}

/// Sets `slot` to `None` when disabled, otherwise updates the value in place (creating it once).
fn fill<T: Default>(slot: &mut Option<T>, enabled: bool, update: impl FnOnce(&mut T)) {
    if enabled {
        update(slot.get_or_insert_with(T::default));
    } else {
        *slot = None;
    }
}

/// Makes `list` as long as `sources` and updates each entry in place: no allocation once the
/// list has had that length.
fn refill<T: Default, S>(list: &mut Vec<T>, sources: &[S], mut update: impl FnMut(&mut T, &S)) {
    list.resize_with(sources.len(), T::default);
    for (entry, source) in list.iter_mut().zip(sources) {
        update(entry, source);
    }
}

fn fill_extensions(extensions: &mut Extensions, sample: &Sample) {
    let events = &mut extensions.kernel_events;
    let source = &sample.kernel_events;
    // The lists are copied into the allocations they already have; every other field is a copy.
    let mut histogram = events.run_queue_delay_log2_ns.take();
    match (&mut histogram, &source.run_queue_delay_log2_ns) {
        (Some(target), Some(histogram)) => target.clone_from(histogram),
        (target, histogram) => target.clone_from(histogram),
    }
    let mut victims = std::mem::take(&mut events.recent_oom_victims);
    victims.clone_from(&source.recent_oom_victims);
    *events = KernelEvents {
        reason: source.reason.clone(),
        run_queue_delay_log2_ns: histogram,
        recent_oom_victims: victims,
        ..*source
    };
    extensions.cgroups.clone_from(&sample.cgroup_reports);
    extensions.unavailable.clone_from(&sample.unavailable);
    extensions.gpu.clone_from(&sample.gpu.extension);
    extensions.sample_ages = SampleAges {
        private_memory_ms: sample.private_memory_age_ms,
        gpu_ms: sample.gpu.age_ms,
        cgroups_ms: sample.cgroup_reports_age_ms,
        system_wide_ms: sample.system_wide_age_ms,
        filesystems_ms: sample.filesystems_age_ms,
    };
    extensions.precise_cpu = None;
}

/// Per-field sums over the processes of a pass.
pub(super) struct Sums {
    pub(super) user_ms: Sum,
    pub(super) system_ms: Sum,
    pub(super) total_ms: Sum,
    pub(super) resident_kib: Sum,
    pub(super) private_kib: Sum,
    pub(super) virtual_kib: Sum,
    pub(super) peak_resident_kib: Sum,
    pub(super) threads: Sum,
    pub(super) open_fds: Sum,
    pub(super) read_bytes: Sum,
    pub(super) write_bytes: Sum,
    pub(super) read_syscalls: Sum,
    pub(super) write_syscalls: Sum,
    pub(super) run_ns: Sum,
    pub(super) run_wait_ns: Sum,
}

impl Sums {
    pub(super) fn of(
        processes: &[ProcessCounters],
        coverage: Coverage,
        ticks_per_second: u64,
    ) -> Self {
        let ms = |ticks: u64| ticks_to_ms(ticks, ticks_per_second);
        let s = |field: fn(&ProcessCounters) -> Option<u64>| sum(processes, coverage, field);
        Self {
            user_ms: sum(processes, coverage, |p| ms(p.utime_ticks)),
            system_ms: sum(processes, coverage, |p| ms(p.stime_ticks)),
            total_ms: sum(processes, coverage, |p| {
                ms(p.utime_ticks.saturating_add(p.stime_ticks))
            }),
            resident_kib: s(|p| Some(p.rss_bytes / 1024)),
            private_kib: s(|p| p.private_kib),
            virtual_kib: s(|p| Some(p.vsize_bytes / 1024)),
            peak_resident_kib: s(|p| p.peak_resident_kib),
            threads: s(|p| Some(p.threads)),
            open_fds: s(|p| p.open_fds),
            read_bytes: s(|p| p.io.map(|io| io.read_bytes)),
            write_bytes: s(|p| p.io.map(|io| io.write_bytes)),
            read_syscalls: s(|p| p.io.map(|io| io.read_syscalls)),
            write_syscalls: s(|p| p.io.map(|io| io.write_syscalls)),
            // ns CPU time has no coverage count in the snapshot, so a partial sum would pass for
            // the whole scope: it is reported only when every process supplied it.
            run_ns: sum(processes, Coverage::Strict, |p| p.run_time_ns),
            run_wait_ns: sum(processes, Coverage::Strict, |p| p.run_queue_wait_ns),
        }
    }
}

mod sections;

mod categories;

use categories::{fill_cpu, fill_disk, fill_gpu, fill_process};
use sections::{
    duration_ms, fill_limit_events, fill_memory, fill_network, fill_unavailable, sampling_metadata,
};
#[cfg(test)]
mod tests;
