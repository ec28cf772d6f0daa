//! Filling the snapshot's categories from sums, rates and the sample, in place.

use std::sync::Arc;

use super::{fill, refill, Sums};
use crate::config::{ResourceMetricsConfig, TrafficUnits};
use crate::model::aggregate::Sum;
use crate::model::rates::{ProcessRates, RatePair};
use crate::model::{Baselines, CgroupValues, Sample, Wanted};
use crate::snapshot::{
    CpuMetrics, DiskMetrics, FieldCoverage, GpuMetrics, MeasurementScope, MemoryMetrics,
    NetworkMetrics, NetworkTrafficMetrics, ProcessMetrics, ProcessSamplingMetadata,
    ResourceLimitEventCount, ResourceLimitEventKind, ResourceLimitResource,
    ResourceMetricsSnapshot,
};
use crate::units::{BandwidthUnit, CapacityUnit, CountUnit, DataUnit, DurationUnit, Measurement};

pub(super) fn duration_ms(value_ms: u64, unit: DurationUnit) -> Measurement {
    Measurement::integer(value_ms, DurationUnit::Milliseconds, unit)
}

pub(super) fn capacity_kib(value_kib: Option<u64>, unit: CapacityUnit) -> Option<Measurement> {
    value_kib.map(|v| Measurement::integer(v, CapacityUnit::Kibibytes, unit))
}

pub(super) fn fill_limit_events(
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

pub(super) fn fill_memory(
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
        .or(sample.lifetime.oom_kills);
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
    // Without cgroup counters (a process tree sharing its cgroup), only a lifetime count of
    // the scope's own (see `LifetimeCounts`) fills the field.
    let oom_events = cgroup
        .and_then(|c| c.memory_oom_events)
        .or(sample.lifetime.oom_events);
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

pub(super) fn sampling_metadata(
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

pub(super) fn fill_network(
    network: &mut NetworkMetrics,
    config: &ResourceMetricsConfig,
    sample: &Sample,
    baselines: &mut Baselines,
) {
    let rates = baselines.interface_rates(sample.system_wide_instant, &sample.interfaces);
    let units = &config.units.network;
    network.measurement_scope = MeasurementScope::Global;
    let mut index = 0;
    let listed: &[_] = if config.extensions.network_interfaces {
        &sample.interfaces
    } else {
        &[]
    };
    refill(&mut network.interfaces, listed, |entry, interface| {
        let (rx_rate, tx_rate) = rates[index];
        index += 1;
        entry.name = Arc::clone(&interface.name);
        entry.traffic = traffic(
            &units.interface,
            interface.counts.to_array(),
            (rx_rate, tx_rate),
        );
    });
    let total = |counter: usize| {
        if sample.interfaces.is_empty() {
            return None;
        }
        sample.interfaces.iter().try_fold(0u64, |acc, i| {
            acc.checked_add(i.counts.to_array()[counter]?)
        })
    };
    let total_rate = |select: fn(&RatePair) -> Option<f64>| {
        if rates.is_empty() {
            return None;
        }
        rates.iter().map(select).sum::<Option<f64>>()
    };
    network.system = traffic(
        &units.system,
        std::array::from_fn(total),
        (total_rate(|r| r.0), total_rate(|r| r.1)),
    );
}

/// Counters in order rx bytes, tx bytes, rx packets, tx packets, rx errors, tx errors.
pub(super) fn traffic(
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
pub(super) fn fill_unavailable(config: &ResourceMetricsConfig, out: &mut ResourceMetricsSnapshot) {
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
