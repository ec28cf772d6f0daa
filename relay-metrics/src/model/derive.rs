//! From a [`Sample`] to a snapshot: sums, rates and units, following Relay's field rules.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::aggregate::{sum, ticks_to_ms, Coverage, Sum};
use super::rates::ProcessRates;
use super::{Baselines, ProcessCounters, ProcessPass, Sample};
use crate::config::ResourceMetricsConfig;
use crate::snapshot::{
    Extensions, MeasurementScope, OperatingSystem, PreciseCpu, ResourceLimitEventKind,
    ResourceLimitResource, ResourceMetricsSnapshot, SampleAges,
};
use crate::units::{
    BandwidthUnit, CapacityUnit, CountUnit, CpuUnit, DataUnit, Measurement, UtilizationUnit,
};

/// Which per-process values a configuration asks for (Relay 0.10.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
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
    pub fn from_config(config: &ResourceMetricsConfig, scope: MeasurementScope) -> Self {
        Self {
            cpu: config.cpu.enabled,
            memory: config.memory.enabled && scope != MeasurementScope::Global,
            process: config.process.enabled,
            disk_io: config.disk.enabled && config.disk.process_io,
            gpu_processes: config.gpu.enabled && config.gpu.process_metrics,
        }
    }

    /// True when per-process counters are summed (`process_sampling` is reported).
    pub fn any_sum(&self) -> bool {
        self.cpu || self.memory || self.process || self.disk_io
    }

    /// True when the process list is needed at all.
    pub fn needs_processes(&self) -> bool {
        self.any_sum() || self.gpu_processes
    }
}

/// Builds the snapshot of `sample`, updating the rate baselines of its series.
#[cfg(test)]
pub fn derive(
    config: &ResourceMetricsConfig,
    sample: &Sample,
    baselines: &mut Baselines,
    timestamp: DateTime<Utc>,
) -> ResourceMetricsSnapshot {
    let mut snapshot = ResourceMetricsSnapshot::default();
    derive_into(config, sample, baselines, timestamp, &mut snapshot);
    snapshot
}

/// Like [`derive`], but overwrites `out` in place, reusing its lists: once `out` has held a
/// snapshot of the same shape, this allocates nothing.
pub fn derive_into(
    config: &ResourceMetricsConfig,
    sample: &Sample,
    baselines: &mut Baselines,
    timestamp: DateTime<Utc>,
    out: &mut ResourceMetricsSnapshot,
) {
    let scope = sample.scope;
    let wanted = Wanted::from_config(config, scope);
    let coverage = match scope {
        MeasurementScope::ApplicationProcess | MeasurementScope::ProcessTree => Coverage::Strict,
        MeasurementScope::Global | MeasurementScope::Cgroup => Coverage::Partial,
    };
    out.timestamp = timestamp;
    out.operating_system = OperatingSystem::Linux;
    out.measurement_scope = scope;
    fill_extensions(&mut out.extensions, sample);

    if let ProcessPass::RootUnavailable(_) = &sample.processes {
        baselines.reset();
        fill_unavailable(config, out);
        return;
    }

    let (processes, complete) = match &sample.processes {
        ProcessPass::Sampled(set) => (Some(set), set.incomplete.is_none()),
        _ => (None, false),
    };
    // Relay nulls process sums of an incomplete tree/application pass; partial scopes keep them.
    let summable = processes
        .filter(|_| complete || coverage == Coverage::Partial)
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
    // An incomplete tree/application pass cannot tell whether the set owns its cgroup.
    let cgroup = sample
        .cgroup
        .as_ref()
        .filter(|_| complete || coverage == Coverage::Partial);
    let cgroup_usage_rate =
        baselines.cgroup_usage_rate(sample.instant, cgroup.and_then(|c| c.usage_ns));
    let system_cpu_rate = if scope == MeasurementScope::Global && config.cpu.enabled {
        baselines.system_cpu_rate(sample.instant, &sample.system.cpu_ticks)
    } else {
        None
    };

    out.extensions.precise_cpu = wanted.cpu.then(|| PreciseCpu {
        run_time_ns: sums.as_ref().and_then(|s| s.run_ns.value),
        run_queue_wait_ns: sums.as_ref().and_then(|s| s.run_wait_ns.value),
        run_rate_logical_processors: rates.run_logical_processors,
        cgroup_usage_ns: cgroup.and_then(|c| c.usage_ns),
        cgroup_usage_rate_logical_processors: cgroup_usage_rate,
    });

    out.process_sampling = match processes {
        Some(set) if wanted.any_sum() => Some(sampling_metadata(
            set.visible,
            set.processes.len(),
            sums.as_ref(),
            &rates,
            wanted,
            scope,
        )),
        _ => None,
    };

    let units = &config.units;
    let ms = |value: Option<u64>, unit| value.map(|v| duration_ms(v, unit));
    fill(&mut out.cpu, config.cpu.enabled, |cpu| {
        let pressure = if scope == MeasurementScope::Global {
            sample.system.cpu_pressure
        } else {
            cgroup.map(|c| c.cpu_pressure).unwrap_or_default()
        };
        let consumption_rate = match scope {
            MeasurementScope::Global => system_cpu_rate,
            // The cgroup's own usage counter (ns) also covers processes that exited during
            // the interval; the process sum is the fallback where there is none.
            MeasurementScope::Cgroup => cgroup_usage_rate.or(rates.cpu_logical_processors),
            _ => rates.cpu_logical_processors,
        };
        let sum = |select: fn(&Sums) -> Sum| sums.as_ref().and_then(|s| select(s).value);
        cpu.user_time = ms(sum(|s| s.user_ms), units.cpu.user_time);
        cpu.system_time = ms(sum(|s| s.system_ms), units.cpu.system_time);
        cpu.total_time = ms(sum(|s| s.total_ms), units.cpu.total_time);
        cpu.consumption_rate = consumption_rate.and_then(|rate| {
            Measurement::decimal(rate, CpuUnit::LogicalProcessors, units.cpu.consumption_rate)
        });
        // Relay truncates µs to ms at collection; converting afterwards keeps its numbers.
        cpu.throttled_time = ms(
            cgroup
                .and_then(|c| c.throttled_usec)
                .map(|usec| usec / 1000),
            units.cpu.throttled_time,
        );
        cpu.effective_limit = cgroup
            .and_then(|c| c.effective_cpu_limit)
            .and_then(|limit| {
                Measurement::decimal(limit, CpuUnit::LogicalProcessors, units.cpu.effective_limit)
            });
        cpu.some_pressure_stall_time = ms(
            pressure.some_usec.map(|u| u / 1000),
            units.cpu.some_pressure_stall_time,
        );
        cpu.full_pressure_stall_time = ms(
            pressure.full_usec.map(|u| u / 1000),
            units.cpu.full_pressure_stall_time,
        );
        fill_limit_events(
            &mut cpu.limit_events,
            &[(
                ResourceLimitResource::Cpu,
                ResourceLimitEventKind::Throttled,
                cgroup.and_then(|c| c.throttled_periods),
            )],
        );
    });

    fill(&mut out.memory, config.memory.enabled, |memory| {
        fill_memory(memory, config, sample, scope, sums.as_ref(), cgroup)
    });

    fill(&mut out.process, config.process.enabled, |process| {
        let counted = summable.map(|list| list.len() as u64);
        let active = match scope {
            MeasurementScope::Global => processes.map(|set| set.visible),
            _ => counted,
        };
        let descendants = match scope {
            MeasurementScope::ProcessTree | MeasurementScope::ApplicationProcess => {
                active.and_then(|a| a.checked_sub(1))
            }
            MeasurementScope::Global | MeasurementScope::Cgroup => None,
        };
        let count = |value: Option<u64>, unit| value.map(|v| Measurement::count(v, unit));
        let sum = |select: fn(&Sums) -> Sum| sums.as_ref().and_then(|s| select(s).value);
        process.active_count = count(active, CountUnit::Processes);
        process.descendant_count = count(descendants, CountUnit::Processes);
        process.thread_count = count(sum(|s| s.threads), CountUnit::Threads);
        process.lifetime_creation_count =
            count(sample.lifetime.processes_created, CountUnit::Processes);
        process.open_file_descriptor_count = count(sum(|s| s.open_fds), CountUnit::FileDescriptors);
        process.windows_handle_count = None;
        fill_limit_events(
            &mut process.limit_events,
            &[(
                ResourceLimitResource::Processes,
                ResourceLimitEventKind::Maximum,
                cgroup.and_then(|c| c.pids_max_events),
            )],
        );
    });

    fill(&mut out.disk, config.disk.enabled, |disk| {
        let process_io = config.disk.process_io;
        let io = |select: fn(&Sums) -> Sum| {
            sums.as_ref()
                .filter(|_| process_io)
                .and_then(|s| select(s).value)
        };
        let data = |value: Option<u64>, unit| {
            value.map(|v| Measurement::integer(v, DataUnit::Bytes, unit))
        };
        let bandwidth = |value: Option<f64>, unit| {
            value
                .filter(|_| process_io)
                .and_then(|v| Measurement::decimal(v, BandwidthUnit::BytesPerSecond, unit))
        };
        let operations =
            |value: Option<u64>| value.map(|v| Measurement::count(v, CountUnit::Operations));
        disk.read_data = data(io(|s| s.read_bytes), units.disk.read_data);
        disk.write_data = data(io(|s| s.write_bytes), units.disk.write_data);
        disk.read_throughput = bandwidth(rates.read_bytes_per_second, units.disk.read_throughput);
        disk.write_throughput =
            bandwidth(rates.write_bytes_per_second, units.disk.write_throughput);
        disk.read_operations = operations(io(|s| s.read_syscalls));
        disk.write_operations = operations(io(|s| s.write_syscalls));
        let capacity =
            |v: Option<u64>, unit| v.map(|v| Measurement::integer(v, CapacityUnit::Bytes, unit));
        refill(&mut disk.filesystems, &sample.filesystems, |entry, fs| {
            entry.path = Arc::clone(&fs.path);
            entry.total_capacity = capacity(fs.total_bytes, units.disk.filesystem_total_capacity);
            entry.available_capacity =
                capacity(fs.available_bytes, units.disk.filesystem_available_capacity);
            entry.free_capacity = capacity(fs.free_bytes, units.disk.filesystem_free_capacity);
        });
    });

    fill(&mut out.gpu, config.gpu.enabled, |gpu| {
        let memory = |bytes: Option<u64>, unit| {
            bytes.map(|b| Measurement::integer(b / 1024, CapacityUnit::Kibibytes, unit))
        };
        let utilization = |percent: Option<f64>, unit| {
            percent.and_then(|p| Measurement::decimal(p, UtilizationUnit::Percentage, unit))
        };
        fill(
            &mut gpu.device_metrics,
            config.gpu.device_metrics,
            |devices| {
                refill(devices, &sample.gpu.devices, |entry, d| {
                    entry.vendor = d.vendor;
                    entry.device_identifier = Arc::clone(&d.identifier);
                    entry.device_index = d.index;
                    entry.memory_used = memory(d.memory_used_bytes, units.gpu.device_memory_used);
                    entry.compute_utilization =
                        utilization(d.utilization_percent, units.gpu.device_compute_utilization);
                });
            },
        );
        let process_records = config.gpu.process_metrics && summable.is_some();
        fill(&mut gpu.process_metrics, process_records, |list| {
            refill(list, &sample.gpu.processes, |entry, p| {
                entry.vendor = p.vendor;
                entry.device_identifier = Arc::clone(&p.identifier);
                entry.device_index = p.index;
                entry.process_id = p.pid;
                entry.memory_used = memory(p.memory_used_bytes, units.gpu.process_memory_used);
                entry.compute_utilization =
                    utilization(p.utilization_percent, units.gpu.process_compute_utilization);
            });
        });
    });

    fill(&mut out.network, config.network.enabled, |network| {
        fill_network(network, config, sample, baselines)
    });
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
    events.active = source.active;
    events.reason.clone_from(&source.reason);
    events.counting_since = source.counting_since;
    events.processes_created = source.processes_created;
    events.processes_exited = source.processes_exited;
    events.involuntary_switches = source.involuntary_switches;
    events.run_queue_delay_count = source.run_queue_delay_count;
    events.run_queue_delay_total_ns = source.run_queue_delay_total_ns;
    match (
        &mut events.run_queue_delay_log2_ns,
        &source.run_queue_delay_log2_ns,
    ) {
        (Some(target), Some(histogram)) => target.clone_from(histogram),
        (target, histogram) => target.clone_from(histogram),
    }
    events.reclaim_stall_count = source.reclaim_stall_count;
    events.reclaim_stall_total_ns = source.reclaim_stall_total_ns;
    events.oom_kills = source.oom_kills;
    events
        .recent_oom_victims
        .clone_from(&source.recent_oom_victims);
    events.ring_buffer_drops = source.ring_buffer_drops;
    extensions.cgroups.clone_from(&sample.cgroup_reports);
    extensions.unavailable.clone_from(&sample.unavailable);
    extensions.sample_ages = SampleAges {
        private_memory_ms: sample.private_memory_age_ms,
        gpu_ms: sample.gpu.age_ms,
        cgroups_ms: sample.cgroup_reports_age_ms,
        system_wide_ms: sample.system_wide_age_ms,
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

use sections::{
    duration_ms, fill_limit_events, fill_memory, fill_network, fill_unavailable, sampling_metadata,
};
#[cfg(test)]
mod tests;
