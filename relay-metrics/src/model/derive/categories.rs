//! The CPU, process, disk and GPU categories of a snapshot, filled in place from one [`Pass`].

use std::sync::Arc;

use super::{duration_ms, fill, fill_limit_events, refill, Pass};
use crate::snapshot::{
    CpuMetrics, DiskMetrics, GpuMetrics, MeasurementScope, ProcessMetrics, ResourceLimitEventKind,
    ResourceLimitResource,
};
use crate::units::{
    BandwidthUnit, CapacityUnit, CountUnit, CpuUnit, DataUnit, Measurement, UtilizationUnit,
};

pub(super) fn fill_cpu(cpu: &mut CpuMetrics, pass: &Pass<'_>) {
    let units = &pass.config.units.cpu;
    let cgroup = pass.cgroup;
    let ms = |value: Option<u64>, unit| value.map(|v| duration_ms(v, unit));
    let pressure = if pass.scope == MeasurementScope::Global {
        pass.sample.system.cpu_pressure
    } else {
        cgroup.map(|c| c.cpu_pressure).unwrap_or_default()
    };
    let consumption_rate = match pass.scope {
        MeasurementScope::Global => pass.system_cpu_rate,
        // The cgroup's own usage counter (ns) also covers processes that exited during the
        // interval; the process sum is the fallback where there is none.
        MeasurementScope::Cgroup => pass.cgroup_usage_rate.or(pass.rates.cpu_logical_processors),
        _ => pass.rates.cpu_logical_processors,
    };
    cpu.user_time = ms(pass.sum(|s| s.user_ms), units.user_time);
    cpu.system_time = ms(pass.sum(|s| s.system_ms), units.system_time);
    cpu.total_time = ms(pass.sum(|s| s.total_ms), units.total_time);
    cpu.consumption_rate = consumption_rate.and_then(|rate| {
        Measurement::decimal(rate, CpuUnit::LogicalProcessors, units.consumption_rate)
    });
    // Relay truncates µs to ms at collection; converting afterwards keeps its numbers.
    cpu.throttled_time = ms(
        cgroup
            .and_then(|c| c.throttled_usec)
            .map(|usec| usec / 1000),
        units.throttled_time,
    );
    cpu.effective_limit = cgroup
        .and_then(|c| c.effective_cpu_limit)
        .and_then(|limit| {
            Measurement::decimal(limit, CpuUnit::LogicalProcessors, units.effective_limit)
        });
    cpu.some_pressure_stall_time = ms(
        pressure.some_usec.map(|u| u / 1000),
        units.some_pressure_stall_time,
    );
    cpu.full_pressure_stall_time = ms(
        pressure.full_usec.map(|u| u / 1000),
        units.full_pressure_stall_time,
    );
    fill_limit_events(
        &mut cpu.limit_events,
        &[(
            ResourceLimitResource::Cpu,
            ResourceLimitEventKind::Throttled,
            cgroup.and_then(|c| c.throttled_periods),
        )],
    );
}

pub(super) fn fill_process(process: &mut ProcessMetrics, pass: &Pass<'_>) {
    let counted = pass.summable.map(|list| list.len() as u64);
    let active = match pass.scope {
        MeasurementScope::Global => pass.processes.map(|set| set.visible),
        _ => counted,
    };
    let descendants = match pass.scope {
        MeasurementScope::ProcessTree | MeasurementScope::ApplicationProcess => {
            active.and_then(|a| a.checked_sub(1))
        }
        MeasurementScope::Global | MeasurementScope::Cgroup => None,
    };
    let count = |value: Option<u64>, unit| value.map(|v| Measurement::count(v, unit));
    process.active_count = count(active, CountUnit::Processes);
    process.descendant_count = count(descendants, CountUnit::Processes);
    process.thread_count = count(pass.sum(|s| s.threads), CountUnit::Threads);
    process.lifetime_creation_count =
        count(pass.sample.lifetime.processes_created, CountUnit::Processes);
    process.open_file_descriptor_count =
        count(pass.sum(|s| s.open_fds), CountUnit::FileDescriptors);
    process.windows_handle_count = None;
    fill_limit_events(
        &mut process.limit_events,
        &[(
            ResourceLimitResource::Processes,
            ResourceLimitEventKind::Maximum,
            pass.cgroup.and_then(|c| c.pids_max_events),
        )],
    );
}

pub(super) fn fill_disk(disk: &mut DiskMetrics, pass: &Pass<'_>) {
    let units = &pass.config.units.disk;
    let process_io = pass.config.disk.process_io;
    let io = |select| pass.sum(select).filter(|_| process_io);
    let data =
        |value: Option<u64>, unit| value.map(|v| Measurement::integer(v, DataUnit::Bytes, unit));
    let bandwidth = |value: Option<f64>, unit| {
        value
            .filter(|_| process_io)
            .and_then(|v| Measurement::decimal(v, BandwidthUnit::BytesPerSecond, unit))
    };
    let operations =
        |value: Option<u64>| value.map(|v| Measurement::count(v, CountUnit::Operations));
    disk.read_data = data(io(|s| s.read_bytes), units.read_data);
    disk.write_data = data(io(|s| s.write_bytes), units.write_data);
    disk.read_throughput = bandwidth(pass.rates.read_bytes_per_second, units.read_throughput);
    disk.write_throughput = bandwidth(pass.rates.write_bytes_per_second, units.write_throughput);
    disk.read_operations = operations(io(|s| s.read_syscalls));
    disk.write_operations = operations(io(|s| s.write_syscalls));
    let capacity =
        |v: Option<u64>, unit| v.map(|v| Measurement::integer(v, CapacityUnit::Bytes, unit));
    refill(
        &mut disk.filesystems,
        &pass.sample.filesystems,
        |entry, fs| {
            entry.path = Arc::clone(&fs.path);
            entry.total_capacity = capacity(fs.total_bytes, units.filesystem_total_capacity);
            entry.available_capacity =
                capacity(fs.available_bytes, units.filesystem_available_capacity);
            entry.free_capacity = capacity(fs.free_bytes, units.filesystem_free_capacity);
        },
    );
}

pub(super) fn fill_gpu(gpu: &mut GpuMetrics, pass: &Pass<'_>) {
    let config = &pass.config.gpu;
    let units = &pass.config.units.gpu;
    let sample = &pass.sample.gpu;
    let memory = |bytes: Option<u64>, unit| {
        bytes.map(|b| Measurement::integer(b / 1024, CapacityUnit::Kibibytes, unit))
    };
    let utilization = |percent: Option<f64>, unit| {
        percent.and_then(|p| Measurement::decimal(p, UtilizationUnit::Percentage, unit))
    };
    fill(&mut gpu.device_metrics, config.device_metrics, |devices| {
        refill(devices, &sample.devices, |entry, d| {
            entry.vendor = d.vendor;
            entry.device_identifier = Arc::clone(&d.identifier);
            entry.device_index = d.index;
            entry.memory_used = memory(d.memory_used_bytes, units.device_memory_used);
            entry.compute_utilization =
                utilization(d.utilization_percent, units.device_compute_utilization);
        });
    });
    let process_records = config.process_metrics && pass.summable.is_some();
    fill(&mut gpu.process_metrics, process_records, |list| {
        refill(list, &sample.processes, |entry, p| {
            entry.vendor = p.vendor;
            entry.device_identifier = Arc::clone(&p.identifier);
            entry.device_index = p.index;
            entry.process_id = p.pid;
            entry.memory_used = memory(p.memory_used_bytes, units.process_memory_used);
            entry.compute_utilization =
                utilization(p.utilization_percent, units.process_compute_utilization);
        });
    });
}
