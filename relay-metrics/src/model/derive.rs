//! From a [`Sample`] to a snapshot: sums, rates and units, following Relay's field rules.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::aggregate::{sum, ticks_to_ms, Coverage, Sum};
use super::rates::{ProcessRates, RatePair};
use super::{Baselines, CgroupValues, ProcessCounters, ProcessPass, Sample};
use crate::config::{ResourceMetricsConfig, TrafficUnits};
use crate::snapshot::{
    CpuMetrics, DiskMetrics, Extensions, FieldCoverage, GpuMetrics, MeasurementScope,
    MemoryMetrics, NetworkMetrics, NetworkTrafficMetrics, OperatingSystem, PreciseCpu,
    ProcessMetrics, ProcessSamplingMetadata, ResourceLimitEventCount, ResourceLimitEventKind,
    ResourceLimitResource, ResourceMetricsSnapshot, SampleAges,
};
use crate::units::{
    BandwidthUnit, CapacityUnit, CountUnit, CpuUnit, DataUnit, DurationUnit, Measurement,
    UtilizationUnit,
};

/// Which per-process values a configuration asks for (relay-reference §4.1 step 1).
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
            count(sample.kernel_events.processes_created, CountUnit::Processes);
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
    };
    extensions.precise_cpu = None;
}

/// Per-field sums over the processes of a pass.
struct Sums {
    user_ms: Sum,
    system_ms: Sum,
    total_ms: Sum,
    resident_kib: Sum,
    private_kib: Sum,
    virtual_kib: Sum,
    peak_resident_kib: Sum,
    threads: Sum,
    open_fds: Sum,
    read_bytes: Sum,
    write_bytes: Sum,
    read_syscalls: Sum,
    write_syscalls: Sum,
    run_ns: Sum,
    run_wait_ns: Sum,
}

impl Sums {
    fn of(processes: &[ProcessCounters], coverage: Coverage, ticks_per_second: u64) -> Self {
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

fn duration_ms(value_ms: u64, unit: DurationUnit) -> Measurement {
    Measurement::integer(value_ms, DurationUnit::Milliseconds, unit)
}

fn capacity_kib(value_kib: Option<u64>, unit: CapacityUnit) -> Option<Measurement> {
    value_kib.map(|v| Measurement::integer(v, CapacityUnit::Kibibytes, unit))
}

fn fill_limit_events(
    list: &mut Vec<ResourceLimitEventCount>,
    candidates: &[(ResourceLimitResource, ResourceLimitEventKind, Option<u64>)],
) {
    list.clear();
    for (resource, event, count) in candidates {
        if let Some(count) = count {
            list.push(ResourceLimitEventCount {
                resource: *resource,
                event: *event,
                count: Some(Measurement::count(*count, CountUnit::Events)),
            });
        }
    }
}

fn fill_memory(
    memory: &mut MemoryMetrics,
    config: &ResourceMetricsConfig,
    sample: &Sample,
    scope: MeasurementScope,
    sums: Option<&Sums>,
    cgroup: Option<&CgroupValues>,
) {
    let units = &config.units.memory;
    let per_process = |select: fn(&Sums) -> Sum| {
        sums.filter(|_| scope != MeasurementScope::Global)
            .and_then(|s| select(s).value)
    };
    let total = sample.system.memory_total_kib;
    let available = sample.system.memory_available_kib;
    let used = total.zip(available).and_then(|(t, a)| t.checked_sub(a));
    let pressure = if scope == MeasurementScope::Global {
        sample.system.memory_pressure
    } else {
        cgroup.map(|c| c.memory_pressure).unwrap_or_default()
    };
    let stall = |usec: Option<u64>, unit| usec.map(|u| duration_ms(u / 1000, unit));
    let peak = if scope == MeasurementScope::ApplicationProcess {
        per_process(|s| s.peak_resident_kib)
    } else {
        None
    };
    let oom_kills = cgroup
        .and_then(|c| c.memory_oom_kills)
        .or(sample.kernel_events.oom_kills);
    memory.system_used = capacity_kib(used, units.system_used);
    memory.system_total = capacity_kib(total, units.system_total);
    memory.system_available = capacity_kib(available, units.system_available);
    memory.resident = capacity_kib(per_process(|s| s.resident_kib), units.resident);
    memory.private = capacity_kib(per_process(|s| s.private_kib), units.private);
    memory.physical_footprint = None;
    memory.virtual_memory = capacity_kib(per_process(|s| s.virtual_kib), units.virtual_memory);
    memory.peak_resident = capacity_kib(peak, units.peak_resident);
    memory.limit = capacity_kib(
        cgroup.and_then(|c| c.memory_limit_bytes).map(|b| b / 1024),
        units.limit,
    );
    memory.environment_accounted = capacity_kib(
        cgroup
            .and_then(|c| c.memory_current_bytes)
            .map(|b| b / 1024),
        units.environment_accounted,
    );
    memory.some_pressure_stall_time = stall(pressure.some_usec, units.some_pressure_stall_time);
    memory.full_pressure_stall_time = stall(pressure.full_usec, units.full_pressure_stall_time);
    // Without cgroup counters (a process tree sharing its cgroup), the OOM kills the eBPF
    // programs saw in the tree are the tree's out-of-memory events.
    let oom_events = cgroup
        .and_then(|c| c.memory_oom_events)
        .or(sample.kernel_events.oom_kills);
    memory.out_of_memory_event_count = oom_events.map(|v| Measurement::count(v, CountUnit::Events));
    fill_limit_events(
        &mut memory.limit_events,
        &[
            (
                ResourceLimitResource::Memory,
                ResourceLimitEventKind::High,
                cgroup.and_then(|c| c.memory_high_events),
            ),
            (
                ResourceLimitResource::Memory,
                ResourceLimitEventKind::Maximum,
                cgroup.and_then(|c| c.memory_max_events),
            ),
            (
                ResourceLimitResource::Memory,
                ResourceLimitEventKind::OutOfMemory,
                oom_events,
            ),
            (
                ResourceLimitResource::Memory,
                ResourceLimitEventKind::Terminated,
                oom_kills,
            ),
        ],
    );
}

fn sampling_metadata(
    visible: u64,
    sampled: usize,
    sums: Option<&Sums>,
    rates: &ProcessRates,
    wanted: Wanted,
    scope: MeasurementScope,
) -> ProcessSamplingMetadata {
    let mut fields = FieldCoverage::default();
    let mut put = |key: &str, value: u64| fields.set(key, value);
    let supplied = |select: fn(&Sums) -> Sum| sums.map(|s| select(s).supplied).unwrap_or(0);
    if wanted.cpu {
        put("cpu.user_time", supplied(|s| s.user_ms));
        put("cpu.system_time", supplied(|s| s.system_ms));
        put("cpu.total_time", supplied(|s| s.total_ms));
    }
    if wanted.memory {
        put("memory.resident", supplied(|s| s.resident_kib));
        put("memory.private", supplied(|s| s.private_kib));
        put("memory.physical_footprint", 0);
        put("memory.virtual_memory", supplied(|s| s.virtual_kib));
        if scope == MeasurementScope::ApplicationProcess {
            put("memory.peak_resident", supplied(|s| s.peak_resident_kib));
        }
    }
    if wanted.process {
        put("process.thread_count", supplied(|s| s.threads));
        put(
            "process.open_file_descriptor_count",
            supplied(|s| s.open_fds),
        );
        put("process.windows_handle_count", 0);
    }
    if wanted.disk_io {
        put("disk.read_data", supplied(|s| s.read_bytes));
        put("disk.write_data", supplied(|s| s.write_bytes));
        put("disk.read_operations", supplied(|s| s.read_syscalls));
        put("disk.write_operations", supplied(|s| s.write_syscalls));
        put("disk.read_throughput", rates.read_pairs);
        put("disk.write_throughput", rates.write_pairs);
    }
    ProcessSamplingMetadata {
        visible_processes: visible,
        sampled_processes: sampled as u64,
        field_sampled_processes: fields,
    }
}

fn fill_network(
    network: &mut NetworkMetrics,
    config: &ResourceMetricsConfig,
    sample: &Sample,
    baselines: &mut Baselines,
) {
    let rates = baselines.interface_rates(sample.instant, &sample.interfaces);
    let units = &config.units.network;
    network.measurement_scope = MeasurementScope::Global;
    let mut index = 0;
    refill(
        &mut network.interfaces,
        &sample.interfaces,
        |entry, interface| {
            let (rx_rate, tx_rate) = rates[index];
            index += 1;
            entry.name = Arc::clone(&interface.name);
            entry.traffic = traffic(
                &units.interface,
                [
                    interface.rx_bytes,
                    interface.tx_bytes,
                    interface.rx_packets,
                    interface.tx_packets,
                    interface.rx_errors,
                    interface.tx_errors,
                ],
                (rx_rate, tx_rate),
            );
        },
    );
    let total = |field: fn(&super::InterfaceValues) -> Option<u64>| {
        if sample.interfaces.is_empty() {
            return None;
        }
        sample
            .interfaces
            .iter()
            .try_fold(0u64, |acc, i| acc.checked_add(field(i)?))
    };
    let total_rate = |select: fn(&RatePair) -> Option<f64>| {
        if rates.is_empty() {
            return None;
        }
        rates.iter().map(select).sum::<Option<f64>>()
    };
    network.system = traffic(
        &units.system,
        [
            total(|i| i.rx_bytes),
            total(|i| i.tx_bytes),
            total(|i| i.rx_packets),
            total(|i| i.tx_packets),
            total(|i| i.rx_errors),
            total(|i| i.tx_errors),
        ],
        (total_rate(|r| r.0), total_rate(|r| r.1)),
    );
}

/// Counters in order rx bytes, tx bytes, rx packets, tx packets, rx errors, tx errors.
fn traffic(
    units: &TrafficUnits,
    counters: [Option<u64>; 6],
    rates: (Option<f64>, Option<f64>),
) -> NetworkTrafficMetrics {
    let data = |v: Option<u64>, unit| v.map(|v| Measurement::integer(v, DataUnit::Bytes, unit));
    let rate = |v: Option<f64>, unit| {
        v.and_then(|v| Measurement::decimal(v, BandwidthUnit::BytesPerSecond, unit))
    };
    let count = |v: Option<u64>, unit| v.map(|v| Measurement::count(v, unit));
    let [rx_bytes, tx_bytes, rx_packets, tx_packets, rx_errors, tx_errors] = counters;
    NetworkTrafficMetrics {
        received_data: data(rx_bytes, units.received_data),
        transmitted_data: data(tx_bytes, units.transmitted_data),
        receive_throughput: rate(rates.0, units.receive_throughput),
        transmit_throughput: rate(rates.1, units.transmit_throughput),
        received_packets: count(rx_packets, CountUnit::Packets),
        transmitted_packets: count(tx_packets, CountUnit::Packets),
        receive_errors: count(rx_errors, CountUnit::Errors),
        transmit_errors: count(tx_errors, CountUnit::Errors),
    }
}

/// Relay's stable shape when the root process is gone: every enabled category present with
/// all-null values and empty lists, GPU groups `null`, no `process_sampling`.
fn fill_unavailable(config: &ResourceMetricsConfig, out: &mut ResourceMetricsSnapshot) {
    out.process_sampling = None;
    fill(&mut out.cpu, config.cpu.enabled, |cpu| {
        let mut events = std::mem::take(&mut cpu.limit_events);
        events.clear();
        *cpu = CpuMetrics {
            limit_events: events,
            ..Default::default()
        };
    });
    fill(&mut out.memory, config.memory.enabled, |memory| {
        let mut events = std::mem::take(&mut memory.limit_events);
        events.clear();
        *memory = MemoryMetrics {
            limit_events: events,
            ..Default::default()
        };
    });
    fill(&mut out.process, config.process.enabled, |process| {
        let mut events = std::mem::take(&mut process.limit_events);
        events.clear();
        *process = ProcessMetrics {
            limit_events: events,
            ..Default::default()
        };
    });
    fill(&mut out.disk, config.disk.enabled, |disk| {
        let mut filesystems = std::mem::take(&mut disk.filesystems);
        filesystems.clear();
        *disk = DiskMetrics {
            filesystems,
            ..Default::default()
        };
    });
    fill(&mut out.gpu, config.gpu.enabled, |gpu| {
        *gpu = GpuMetrics {
            device_metrics: None,
            process_metrics: None,
        };
    });
    fill(&mut out.network, config.network.enabled, |network| {
        network.measurement_scope = MeasurementScope::Global;
        network.system = NetworkTrafficMetrics::default();
        network.interfaces.clear();
    });
}

#[cfg(test)]
mod tests;
