//! From a [`Sample`] to a snapshot: sums, rates and units, following Relay's field rules.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::aggregate::{sum, ticks_to_ms, Coverage, Sum};
use super::rates::ProcessRates;
use super::{Baselines, CgroupValues, ProcessCounters, ProcessPass, Sample};
use crate::config::{ResourceMetricsConfig, TrafficUnits};
use crate::snapshot::{
    AcceleratorDeviceMetrics, AcceleratorProcessMetrics, CpuMetrics, DiskMetrics, Extensions,
    FilesystemCapacityMetrics, GpuMetrics, MeasurementScope, MemoryMetrics,
    NetworkInterfaceMetrics, NetworkMetrics, NetworkTrafficMetrics, OperatingSystem, PreciseCpu,
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
    let scope = sample.scope;
    let wanted = Wanted::from_config(config, scope);
    let coverage = match scope {
        MeasurementScope::ApplicationProcess | MeasurementScope::ProcessTree => Coverage::Strict,
        MeasurementScope::Global | MeasurementScope::Cgroup => Coverage::Partial,
    };
    let mut extensions = Extensions {
        kernel_events: sample.kernel_events.clone(),
        cgroups: sample.cgroup_reports.clone(),
        unavailable: sample.unavailable.clone(),
        sample_ages: SampleAges {
            private_memory_ms: sample.private_memory_age_ms,
            gpu_ms: sample.gpu.age_ms,
        },
        ..Default::default()
    };

    if let ProcessPass::RootUnavailable(_) = &sample.processes {
        baselines.reset();
        return unavailable_snapshot(config, scope, timestamp, extensions);
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
    let rates = match summable {
        Some(list) if wanted.any_sum() => baselines.process_rates(
            list,
            (sample.instant, sample.boottime_ns),
            sample.clock_ticks_per_second,
            coverage,
            true,
        ),
        _ => {
            baselines.process_rates(
                &[],
                (sample.instant, sample.boottime_ns),
                1,
                coverage,
                false,
            );
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

    if wanted.cpu {
        extensions.precise_cpu = Some(PreciseCpu {
            run_time_ns: sums.as_ref().and_then(|s| s.run_ns.value),
            run_queue_wait_ns: sums.as_ref().and_then(|s| s.run_wait_ns.value),
            run_rate_logical_processors: rates.run_logical_processors,
            cgroup_usage_ns: cgroup.and_then(|c| c.usage_ns),
            cgroup_usage_rate_logical_processors: cgroup_usage_rate,
        });
    }

    let process_sampling = match processes {
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
    let cpu = config.cpu.enabled.then(|| {
        let pressure = if scope == MeasurementScope::Global {
            sample.system.cpu_pressure
        } else {
            cgroup.map(|c| c.cpu_pressure).unwrap_or_default()
        };
        let consumption_rate = if scope == MeasurementScope::Global {
            system_cpu_rate
        } else {
            rates.cpu_logical_processors
        };
        let ms = |value: Option<u64>, unit| value.map(|v| duration_ms(v, unit));
        CpuMetrics {
            user_time: ms(
                sums.as_ref().and_then(|s| s.user_ms.value),
                units.cpu.user_time,
            ),
            system_time: ms(
                sums.as_ref().and_then(|s| s.system_ms.value),
                units.cpu.system_time,
            ),
            total_time: ms(
                sums.as_ref().and_then(|s| s.total_ms.value),
                units.cpu.total_time,
            ),
            consumption_rate: consumption_rate.and_then(|rate| {
                Measurement::decimal(rate, CpuUnit::LogicalProcessors, units.cpu.consumption_rate)
            }),
            throttled_time: ms(
                cgroup
                    .and_then(|c| c.throttled_usec)
                    .map(|usec| usec / 1000),
                units.cpu.throttled_time,
            ),
            effective_limit: cgroup
                .and_then(|c| c.effective_cpu_limit)
                .and_then(|limit| {
                    Measurement::decimal(
                        limit,
                        CpuUnit::LogicalProcessors,
                        units.cpu.effective_limit,
                    )
                }),
            some_pressure_stall_time: ms(
                pressure.some_usec.map(|u| u / 1000),
                units.cpu.some_pressure_stall_time,
            ),
            full_pressure_stall_time: ms(
                pressure.full_usec.map(|u| u / 1000),
                units.cpu.full_pressure_stall_time,
            ),
            limit_events: limit_events(&[(
                ResourceLimitResource::Cpu,
                ResourceLimitEventKind::Throttled,
                cgroup.and_then(|c| c.throttled_periods),
            )]),
        }
    });

    let memory = config
        .memory
        .enabled
        .then(|| memory_metrics(config, sample, scope, sums.as_ref(), cgroup));

    let process = config.process.enabled.then(|| {
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
        ProcessMetrics {
            active_count: count(active, CountUnit::Processes),
            descendant_count: count(descendants, CountUnit::Processes),
            thread_count: count(
                sums.as_ref().and_then(|s| s.threads.value),
                CountUnit::Threads,
            ),
            lifetime_creation_count: count(
                sample.kernel_events.processes_created,
                CountUnit::Processes,
            ),
            open_file_descriptor_count: count(
                sums.as_ref().and_then(|s| s.open_fds.value),
                CountUnit::FileDescriptors,
            ),
            windows_handle_count: None,
            limit_events: limit_events(&[(
                ResourceLimitResource::Processes,
                ResourceLimitEventKind::Maximum,
                cgroup.and_then(|c| c.pids_max_events),
            )]),
        }
    });

    let disk = config.disk.enabled.then(|| {
        let io = |select: fn(&Sums) -> Sum| {
            sums.as_ref()
                .filter(|_| config.disk.process_io)
                .and_then(|s| select(s).value)
        };
        let data = |value: Option<u64>, unit| {
            value.map(|v| Measurement::integer(v, DataUnit::Bytes, unit))
        };
        let bandwidth = |value: Option<f64>, unit| {
            value
                .filter(|_| config.disk.process_io)
                .and_then(|v| Measurement::decimal(v, BandwidthUnit::BytesPerSecond, unit))
        };
        let operations =
            |value: Option<u64>| value.map(|v| Measurement::count(v, CountUnit::Operations));
        DiskMetrics {
            read_data: data(io(|s| s.read_bytes), units.disk.read_data),
            write_data: data(io(|s| s.write_bytes), units.disk.write_data),
            read_throughput: bandwidth(rates.read_bytes_per_second, units.disk.read_throughput),
            write_throughput: bandwidth(rates.write_bytes_per_second, units.disk.write_throughput),
            read_operations: operations(io(|s| s.read_syscalls)),
            write_operations: operations(io(|s| s.write_syscalls)),
            filesystems: sample
                .filesystems
                .iter()
                .map(|fs| {
                    let capacity = |v: Option<u64>, unit| {
                        v.map(|v| Measurement::integer(v, CapacityUnit::Bytes, unit))
                    };
                    FilesystemCapacityMetrics {
                        path: fs.path.clone(),
                        total_capacity: capacity(
                            fs.total_bytes,
                            units.disk.filesystem_total_capacity,
                        ),
                        available_capacity: capacity(
                            fs.available_bytes,
                            units.disk.filesystem_available_capacity,
                        ),
                        free_capacity: capacity(fs.free_bytes, units.disk.filesystem_free_capacity),
                    }
                })
                .collect(),
        }
    });

    let gpu = config.gpu.enabled.then(|| {
        let memory = |bytes: Option<u64>, unit| {
            bytes.map(|b| Measurement::integer(b / 1024, CapacityUnit::Kibibytes, unit))
        };
        let utilization = |percent: Option<f64>, unit| {
            percent.and_then(|p| Measurement::decimal(p, UtilizationUnit::Percentage, unit))
        };
        GpuMetrics {
            device_metrics: config.gpu.device_metrics.then(|| {
                sample
                    .gpu
                    .devices
                    .iter()
                    .map(|d| AcceleratorDeviceMetrics {
                        vendor: d.vendor,
                        device_identifier: d.identifier.clone(),
                        device_index: d.index,
                        memory_used: memory(d.memory_used_bytes, units.gpu.device_memory_used),
                        compute_utilization: utilization(
                            d.utilization_percent,
                            units.gpu.device_compute_utilization,
                        ),
                    })
                    .collect()
            }),
            process_metrics: (config.gpu.process_metrics && summable.is_some()).then(|| {
                sample
                    .gpu
                    .processes
                    .iter()
                    .map(|p| AcceleratorProcessMetrics {
                        vendor: p.vendor,
                        device_identifier: p.identifier.clone(),
                        device_index: p.index,
                        process_id: p.pid,
                        memory_used: memory(p.memory_used_bytes, units.gpu.process_memory_used),
                        compute_utilization: utilization(
                            p.utilization_percent,
                            units.gpu.process_compute_utilization,
                        ),
                    })
                    .collect()
            }),
        }
    });

    let network = config
        .network
        .enabled
        .then(|| network_metrics(config, sample, baselines));

    ResourceMetricsSnapshot {
        timestamp,
        operating_system: OperatingSystem::Linux,
        measurement_scope: scope,
        process_sampling,
        cpu,
        memory,
        process,
        disk,
        gpu,
        network,
        extensions,
    }
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
            run_ns: s(|p| p.run_time_ns),
            run_wait_ns: s(|p| p.run_queue_wait_ns),
        }
    }
}

fn duration_ms(value_ms: u64, unit: DurationUnit) -> Measurement {
    Measurement::integer(value_ms, DurationUnit::Milliseconds, unit)
}

fn capacity_kib(value_kib: Option<u64>, unit: CapacityUnit) -> Option<Measurement> {
    value_kib.map(|v| Measurement::integer(v, CapacityUnit::Kibibytes, unit))
}

fn limit_events(
    candidates: &[(ResourceLimitResource, ResourceLimitEventKind, Option<u64>)],
) -> Vec<ResourceLimitEventCount> {
    candidates
        .iter()
        .filter_map(|(resource, event, count)| {
            count.map(|count| ResourceLimitEventCount {
                resource: *resource,
                event: *event,
                count: Some(Measurement::count(count, CountUnit::Events)),
            })
        })
        .collect()
}

fn memory_metrics(
    config: &ResourceMetricsConfig,
    sample: &Sample,
    scope: MeasurementScope,
    sums: Option<&Sums>,
    cgroup: Option<&CgroupValues>,
) -> MemoryMetrics {
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
    MemoryMetrics {
        system_used: capacity_kib(used, units.system_used),
        system_total: capacity_kib(total, units.system_total),
        system_available: capacity_kib(available, units.system_available),
        resident: capacity_kib(per_process(|s| s.resident_kib), units.resident),
        private: capacity_kib(per_process(|s| s.private_kib), units.private),
        physical_footprint: None,
        virtual_memory: capacity_kib(per_process(|s| s.virtual_kib), units.virtual_memory),
        peak_resident: capacity_kib(peak, units.peak_resident),
        limit: capacity_kib(
            cgroup.and_then(|c| c.memory_limit_bytes).map(|b| b / 1024),
            units.limit,
        ),
        environment_accounted: capacity_kib(
            cgroup
                .and_then(|c| c.memory_current_bytes)
                .map(|b| b / 1024),
            units.environment_accounted,
        ),
        some_pressure_stall_time: stall(pressure.some_usec, units.some_pressure_stall_time),
        full_pressure_stall_time: stall(pressure.full_usec, units.full_pressure_stall_time),
        out_of_memory_event_count: cgroup
            .and_then(|c| c.memory_oom_events)
            .map(|v| Measurement::count(v, CountUnit::Events)),
        limit_events: limit_events(&[
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
                cgroup.and_then(|c| c.memory_oom_events),
            ),
            (
                ResourceLimitResource::Memory,
                ResourceLimitEventKind::Terminated,
                oom_kills,
            ),
        ]),
    }
}

fn sampling_metadata(
    visible: u64,
    sampled: usize,
    sums: Option<&Sums>,
    rates: &ProcessRates,
    wanted: Wanted,
    scope: MeasurementScope,
) -> ProcessSamplingMetadata {
    let mut fields = BTreeMap::new();
    let mut put = |key: &str, value: u64| {
        fields.insert(key.to_string(), value);
    };
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

fn network_metrics(
    config: &ResourceMetricsConfig,
    sample: &Sample,
    baselines: &mut Baselines,
) -> NetworkMetrics {
    let mut rates = Vec::with_capacity(sample.interfaces.len());
    baselines.interface_rates(sample.instant, &sample.interfaces, &mut rates);
    let units = &config.units.network;
    let interfaces: Vec<NetworkInterfaceMetrics> = sample
        .interfaces
        .iter()
        .zip(&rates)
        .map(|(interface, (rx_rate, tx_rate))| NetworkInterfaceMetrics {
            name: interface.name.clone(),
            traffic: traffic(
                &units.interface,
                [
                    interface.rx_bytes,
                    interface.tx_bytes,
                    interface.rx_packets,
                    interface.tx_packets,
                    interface.rx_errors,
                    interface.tx_errors,
                ],
                (*rx_rate, *tx_rate),
            ),
        })
        .collect();
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
    let system = traffic(
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
    NetworkMetrics {
        measurement_scope: MeasurementScope::Global,
        system,
        interfaces,
    }
}

/// Receive and transmit rates of one interface (bytes per second).
type RatePair = (Option<f64>, Option<f64>);

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
fn unavailable_snapshot(
    config: &ResourceMetricsConfig,
    scope: MeasurementScope,
    timestamp: DateTime<Utc>,
    extensions: Extensions,
) -> ResourceMetricsSnapshot {
    ResourceMetricsSnapshot {
        timestamp,
        operating_system: OperatingSystem::Linux,
        measurement_scope: scope,
        process_sampling: None,
        cpu: config.cpu.enabled.then(|| CpuMetrics {
            user_time: None,
            system_time: None,
            total_time: None,
            consumption_rate: None,
            throttled_time: None,
            effective_limit: None,
            some_pressure_stall_time: None,
            full_pressure_stall_time: None,
            limit_events: Vec::new(),
        }),
        memory: config.memory.enabled.then(|| MemoryMetrics {
            system_used: None,
            system_total: None,
            system_available: None,
            resident: None,
            private: None,
            physical_footprint: None,
            virtual_memory: None,
            peak_resident: None,
            limit: None,
            environment_accounted: None,
            some_pressure_stall_time: None,
            full_pressure_stall_time: None,
            out_of_memory_event_count: None,
            limit_events: Vec::new(),
        }),
        process: config.process.enabled.then(|| ProcessMetrics {
            active_count: None,
            descendant_count: None,
            thread_count: None,
            lifetime_creation_count: None,
            open_file_descriptor_count: None,
            windows_handle_count: None,
            limit_events: Vec::new(),
        }),
        disk: config.disk.enabled.then(|| DiskMetrics {
            read_data: None,
            write_data: None,
            read_throughput: None,
            write_throughput: None,
            read_operations: None,
            write_operations: None,
            filesystems: Vec::new(),
        }),
        gpu: config.gpu.enabled.then_some(GpuMetrics {
            device_metrics: None,
            process_metrics: None,
        }),
        network: config.network.enabled.then(|| NetworkMetrics {
            measurement_scope: MeasurementScope::Global,
            system: NetworkTrafficMetrics::default(),
            interfaces: Vec::new(),
        }),
        extensions,
    }
}

#[cfg(test)]
mod tests;
