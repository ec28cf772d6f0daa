//! Relay's measurement names and descriptions, field by field, in the order Relay emits them.
//! Each line: snapshot field => name (after `nemo.relay.resource.`), description. The field's
//! unit (hence Relay's value type) comes from the schema table in [`crate::snapshot`]; a field
//! the table flags `relay` but missing here fails this module's tests, by name.

use super::{Base, Field};
use crate::snapshot::{
    AcceleratorDeviceMetrics, AcceleratorProcessMetrics, CpuMetrics, DiskMetrics,
    FilesystemCapacityMetrics, MemoryMetrics, NetworkTrafficMetrics, ProcessMetrics,
    ResourceLimitEventCount,
};

macro_rules! fields {
    ($section:ty: $( $field:ident => $name:literal, $description:literal; )*) => {
        &[$(
            Field::<$section> {
                name: concat!("nemo.relay.resource.", $name),
                description: $description,
                // Evaluated at compile time: a line for a field the schema table does not flag
                // `relay` does not compile.
                base: match Base::of(<$section>::$field) {
                    Some(base) => base,
                    None => panic!(concat!(
                        "output/relay_names/table.rs has a Relay mark for ",
                        stringify!($section), ".", stringify!($field),
                        ", which the schema table (snapshot/mod.rs) does not flag `relay`"
                    )),
                },
                get: |section: &$section| section.$field.as_ref(),
                #[cfg(test)]
                field: stringify!($field),
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
        #[cfg(test)]
        field: "",
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
    user_time => "cpu.user_time", "User-mode CPU time of currently visible processes";
    system_time => "cpu.system_time", "System-mode CPU time of currently visible processes";
    total_time => "cpu.total_time", "CPU time of currently visible processes";
    consumption_rate => "cpu.consumption_rate", "Average CPU capacity consumed over the sampling interval";
    throttled_time => "cpu.throttled_time", "Cumulative CPU throttled time";
    effective_limit => "cpu.effective_limit", "Effective CPU capacity";
    some_pressure_stall_time => "cpu.pressure.some_stall_time", "Cumulative CPU pressure time with some work stalled";
    full_pressure_stall_time => "cpu.pressure.full_stall_time", "Cumulative CPU pressure time with all work stalled";
);

#[rustfmt::skip]
pub(super) const LIMIT_EVENT: &[Field<ResourceLimitEventCount>] = fields!(ResourceLimitEventCount:
    count => "limit.event_count", "Cumulative resource-limit event count";
);

#[rustfmt::skip]
pub(super) const MEMORY: &[Field<MemoryMetrics>] = fields!(MemoryMetrics:
    system_used => "memory.system.used", "System memory used";
    system_total => "memory.system.total", "Total system memory";
    system_available => "memory.system.available", "Available system memory";
    resident => "memory.resident", "Resident memory";
    private => "memory.private", "Private memory";
    physical_footprint => "memory.physical_footprint", "Physical memory footprint";
    virtual_memory => "memory.virtual", "Virtual memory";
    peak_resident => "memory.peak_resident", "Peak resident memory";
    limit => "memory.limit", "Effective memory limit";
    environment_accounted => "memory.environment_accounted", "Environment-accounted memory";
    some_pressure_stall_time => "memory.pressure.some_stall_time", "Cumulative memory pressure time with some work stalled";
    full_pressure_stall_time => "memory.pressure.full_stall_time", "Cumulative memory pressure time with all work stalled";
    out_of_memory_event_count => "memory.out_of_memory_event_count", "Cumulative out-of-memory event count";
);

#[rustfmt::skip]
pub(super) const PROCESS: &[Field<ProcessMetrics>] = fields!(ProcessMetrics:
    active_count => "process.active_count", "Active process count";
    descendant_count => "process.descendant_count", "Descendant process count";
    thread_count => "thread.count", "Thread count";
    lifetime_creation_count => "process.lifetime_creation_count", "Lifetime process creation count";
    open_file_descriptor_count => "process.open_file_descriptor_count", "Open file descriptor count";
    windows_handle_count => "process.windows_handle_count", "Windows handle count";
);

#[rustfmt::skip]
pub(super) const DISK: &[Field<DiskMetrics>] = fields!(DiskMetrics:
    read_data => "disk.read_data", "Lifetime data read by currently visible processes";
    write_data => "disk.write_data", "Lifetime data written by currently visible processes";
    read_throughput => "disk.read_throughput", "Average disk read transfer rate since the preceding sample";
    write_throughput => "disk.write_throughput", "Average disk write transfer rate since the preceding sample";
    read_operations => "disk.read.operations", "Lifetime read operations by currently visible processes";
    write_operations => "disk.write.operations", "Lifetime write operations by currently visible processes";
);

#[rustfmt::skip]
pub(super) const FILESYSTEM: &[Field<FilesystemCapacityMetrics>] = fields!(FilesystemCapacityMetrics:
    total_capacity => "disk.filesystem.total_capacity", "Total filesystem capacity";
    available_capacity => "disk.filesystem.available_capacity", "Filesystem capacity available to unprivileged callers";
    free_capacity => "disk.filesystem.free_capacity", "Total free filesystem capacity, including reserved space";
);

#[rustfmt::skip]
pub(super) const ACCELERATOR_PROCESS: &[Field<AcceleratorProcessMetrics>] = fields!(AcceleratorProcessMetrics:
    memory_used => "accelerator.process.memory_used", "Accelerator memory attributed to an owned process";
    compute_utilization => "accelerator.process.compute_utilization", "Accelerator compute utilization attributed to an owned process";
);

#[rustfmt::skip]
pub(super) const ACCELERATOR_DEVICE: &[Field<AcceleratorDeviceMetrics>] = fields!(AcceleratorDeviceMetrics:
    memory_used => "accelerator.device.memory_used", "Accelerator device memory in use";
    compute_utilization => "accelerator.device.compute_utilization", "Accelerator device compute utilization";
);

#[rustfmt::skip]
pub(super) const NETWORK_SYSTEM: &[Field<NetworkTrafficMetrics>] = fields!(NetworkTrafficMetrics:
    received_data => "network.system.received_data", "System network interface counter";
    transmitted_data => "network.system.transmitted_data", "System network interface counter";
    received_packets => "network.system.received_packets", "System network interface counter";
    transmitted_packets => "network.system.transmitted_packets", "System network interface counter";
    receive_errors => "network.system.receive_errors", "System network interface counter";
    transmit_errors => "network.system.transmit_errors", "System network interface counter";
    receive_throughput => "network.system.receive_throughput", "Average system network transfer rate since the preceding sample";
    transmit_throughput => "network.system.transmit_throughput", "Average system network transfer rate since the preceding sample";
);

#[rustfmt::skip]
pub(super) const NETWORK_INTERFACE: &[Field<NetworkTrafficMetrics>] = fields!(NetworkTrafficMetrics:
    received_data => "network.interface.received_data", "System network interface counter";
    transmitted_data => "network.interface.transmitted_data", "System network interface counter";
    received_packets => "network.interface.received_packets", "System network interface counter";
    transmitted_packets => "network.interface.transmitted_packets", "System network interface counter";
    receive_errors => "network.interface.receive_errors", "System network interface counter";
    transmit_errors => "network.interface.transmit_errors", "System network interface counter";
    receive_throughput => "network.interface.receive_throughput", "Average system network transfer rate since the preceding sample";
    transmit_throughput => "network.interface.transmit_throughput", "Average system network transfer rate since the preceding sample";
);
