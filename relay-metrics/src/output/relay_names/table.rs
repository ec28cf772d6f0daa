//! Relay's measurement names and descriptions, field by field, in the order Relay emits them.
//! Each line: snapshot field => name (after `nemo.relay.resource.`), base unit, description.

use super::{Base, Field};
use crate::snapshot::{
    AcceleratorDeviceMetrics, AcceleratorProcessMetrics, CpuMetrics, DiskMetrics,
    FilesystemCapacityMetrics, MemoryMetrics, NetworkTrafficMetrics, ProcessMetrics,
    ResourceLimitEventCount,
};

macro_rules! fields {
    ($section:ty: $( $field:ident => $name:literal, $base:ident, $description:literal; )*) => {
        &[$(
            Field::<$section> {
                name: concat!("nemo.relay.resource.", $name),
                description: $description,
                base: Base::$base,
                get: |section: &$section| section.$field.as_ref(),
            },
        )*]
    };
}

/// A count made up by the builder rather than read from a snapshot field.
const fn count(name: &'static str, description: &'static str) -> Field<()> {
    Field {
        name,
        description,
        base: Base::Count,
        get: |_| None,
    }
}

pub(super) const SAMPLE_COUNT: Field<()> = count(
    "nemo.relay.resource.sample_count",
    "Resource metric samples collected in this poll",
);
pub(super) const VISIBLE_COUNT: Field<()> = count(
    "nemo.relay.resource.process_sampling.visible_count",
    "Processes found before process sampling",
);
pub(super) const SAMPLED_COUNT: Field<()> = count(
    "nemo.relay.resource.process_sampling.sampled_count",
    "Processes whose base query succeeded",
);
pub(super) const FIELD_SAMPLED_COUNT: Field<()> = count(
    "nemo.relay.resource.process_sampling.field_sampled_count",
    "Processes supplying the specified counter",
);

#[rustfmt::skip]
pub(super) const CPU: &[Field<CpuMetrics>] = fields!(CpuMetrics:
    user_time => "cpu.user_time", Milliseconds, "User-mode CPU time of currently visible processes";
    system_time => "cpu.system_time", Milliseconds, "System-mode CPU time of currently visible processes";
    total_time => "cpu.total_time", Milliseconds, "CPU time of currently visible processes";
    consumption_rate => "cpu.consumption_rate", Decimal, "Average CPU capacity consumed over the sampling interval";
    throttled_time => "cpu.throttled_time", Milliseconds, "Cumulative CPU throttled time";
    effective_limit => "cpu.effective_limit", Decimal, "Effective CPU capacity";
    some_pressure_stall_time => "cpu.pressure.some_stall_time", Milliseconds, "Cumulative CPU pressure time with some work stalled";
    full_pressure_stall_time => "cpu.pressure.full_stall_time", Milliseconds, "Cumulative CPU pressure time with all work stalled";
);

#[rustfmt::skip]
pub(super) const LIMIT_EVENT: &[Field<ResourceLimitEventCount>] = fields!(ResourceLimitEventCount:
    count => "limit.event_count", Count, "Cumulative resource-limit event count";
);

#[rustfmt::skip]
pub(super) const MEMORY: &[Field<MemoryMetrics>] = fields!(MemoryMetrics:
    system_used => "memory.system.used", Kibibytes, "System memory used";
    system_total => "memory.system.total", Kibibytes, "Total system memory";
    system_available => "memory.system.available", Kibibytes, "Available system memory";
    resident => "memory.resident", Kibibytes, "Resident memory";
    private => "memory.private", Kibibytes, "Private memory";
    physical_footprint => "memory.physical_footprint", Kibibytes, "Physical memory footprint";
    virtual_memory => "memory.virtual", Kibibytes, "Virtual memory";
    peak_resident => "memory.peak_resident", Kibibytes, "Peak resident memory";
    limit => "memory.limit", Kibibytes, "Effective memory limit";
    environment_accounted => "memory.environment_accounted", Kibibytes, "Environment-accounted memory";
    some_pressure_stall_time => "memory.pressure.some_stall_time", Milliseconds, "Cumulative memory pressure time with some work stalled";
    full_pressure_stall_time => "memory.pressure.full_stall_time", Milliseconds, "Cumulative memory pressure time with all work stalled";
    out_of_memory_event_count => "memory.out_of_memory_event_count", Count, "Cumulative out-of-memory event count";
);

#[rustfmt::skip]
pub(super) const PROCESS: &[Field<ProcessMetrics>] = fields!(ProcessMetrics:
    active_count => "process.active_count", Count, "Active process count";
    descendant_count => "process.descendant_count", Count, "Descendant process count";
    thread_count => "thread.count", Count, "Thread count";
    lifetime_creation_count => "process.lifetime_creation_count", Count, "Lifetime process creation count";
    open_file_descriptor_count => "process.open_file_descriptor_count", Count, "Open file descriptor count";
    windows_handle_count => "process.windows_handle_count", Count, "Windows handle count";
);

#[rustfmt::skip]
pub(super) const DISK: &[Field<DiskMetrics>] = fields!(DiskMetrics:
    read_data => "disk.read_data", Bytes, "Lifetime data read by currently visible processes";
    write_data => "disk.write_data", Bytes, "Lifetime data written by currently visible processes";
    read_throughput => "disk.read_throughput", Decimal, "Average disk read transfer rate since the preceding sample";
    write_throughput => "disk.write_throughput", Decimal, "Average disk write transfer rate since the preceding sample";
    read_operations => "disk.read.operations", Count, "Lifetime read operations by currently visible processes";
    write_operations => "disk.write.operations", Count, "Lifetime write operations by currently visible processes";
);

#[rustfmt::skip]
pub(super) const FILESYSTEM: &[Field<FilesystemCapacityMetrics>] = fields!(FilesystemCapacityMetrics:
    total_capacity => "disk.filesystem.total_capacity", Bytes, "Total filesystem capacity";
    available_capacity => "disk.filesystem.available_capacity", Bytes, "Filesystem capacity available to unprivileged callers";
    free_capacity => "disk.filesystem.free_capacity", Bytes, "Total free filesystem capacity, including reserved space";
);

#[rustfmt::skip]
pub(super) const ACCELERATOR_PROCESS: &[Field<AcceleratorProcessMetrics>] = fields!(AcceleratorProcessMetrics:
    memory_used => "accelerator.process.memory_used", Kibibytes, "Accelerator memory attributed to an owned process";
    compute_utilization => "accelerator.process.compute_utilization", Decimal, "Accelerator compute utilization attributed to an owned process";
);

#[rustfmt::skip]
pub(super) const ACCELERATOR_DEVICE: &[Field<AcceleratorDeviceMetrics>] = fields!(AcceleratorDeviceMetrics:
    memory_used => "accelerator.device.memory_used", Kibibytes, "Accelerator device memory in use";
    compute_utilization => "accelerator.device.compute_utilization", Decimal, "Accelerator device compute utilization";
);

#[rustfmt::skip]
pub(super) const NETWORK_SYSTEM: &[Field<NetworkTrafficMetrics>] = fields!(NetworkTrafficMetrics:
    received_data => "network.system.received_data", Bytes, "System network interface counter";
    transmitted_data => "network.system.transmitted_data", Bytes, "System network interface counter";
    received_packets => "network.system.received_packets", Count, "System network interface counter";
    transmitted_packets => "network.system.transmitted_packets", Count, "System network interface counter";
    receive_errors => "network.system.receive_errors", Count, "System network interface counter";
    transmit_errors => "network.system.transmit_errors", Count, "System network interface counter";
    receive_throughput => "network.system.receive_throughput", Decimal, "Average system network transfer rate since the preceding sample";
    transmit_throughput => "network.system.transmit_throughput", Decimal, "Average system network transfer rate since the preceding sample";
);

#[rustfmt::skip]
pub(super) const NETWORK_INTERFACE: &[Field<NetworkTrafficMetrics>] = fields!(NetworkTrafficMetrics:
    received_data => "network.interface.received_data", Bytes, "System network interface counter";
    transmitted_data => "network.interface.transmitted_data", Bytes, "System network interface counter";
    received_packets => "network.interface.received_packets", Count, "System network interface counter";
    transmitted_packets => "network.interface.transmitted_packets", Count, "System network interface counter";
    receive_errors => "network.interface.receive_errors", Count, "System network interface counter";
    transmit_errors => "network.interface.transmit_errors", Count, "System network interface counter";
    receive_throughput => "network.interface.receive_throughput", Decimal, "Average system network transfer rate since the preceding sample";
    transmit_throughput => "network.interface.transmit_throughput", Decimal, "Average system network transfer rate since the preceding sample";
);
