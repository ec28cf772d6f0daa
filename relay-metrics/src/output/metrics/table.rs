//! The `relay_metrics_*` families, one table per snapshot section, in export order. Each line:
//! Prometheus name, kind, help, then the snapshot field(s) it reads; a field marked
//! `@ label = value` is one series of a family that has several (PSI `some`/`full`,
//! filesystem `total`/`available`/`free`). A family's base unit comes from its fields' unit in
//! the schema table ([`crate::snapshot`]); a field the table flags `metric` but missing here
//! fails this module's tests, by name.

use super::{Def, Kind, Series, Unit};
use crate::snapshot::{
    AcceleratorDeviceMetrics, AcceleratorProcessMetrics, CollectorInfo, CpuMetrics, Cumulative,
    DiskMetrics, FilesystemCapacityMetrics, MemoryMetrics, NetworkTrafficMetrics, ProcessMetrics,
    ProcessSamplingMetadata, ResourceLimitEventCount,
};
use crate::units::{CountUnit, DataUnit, DurationUnit, Measurement};

macro_rules! families {
    ($section:ty: $(
        $name:literal, $kind:ident, $help:literal,
        $first:ident $(@ $first_key:literal = $first_value:literal)?
        $(, $field:ident $(@ $key:literal = $value:literal)? )* ;
    )*) => {
        &[$(
            Def::<$section> {
                name: $name,
                kind: Kind::$kind,
                unit: families!(@unit $section, $first),
                help: $help,
                series: &[
                    families!(@series $section, $first $(, $first_key, $first_value)?),
                    $( families!(@series $section, $field $(, $key, $value)?), )*
                ],
            },
        )*]
    };
    (@series $section:ty, $field:ident $(, $key:literal, $value:literal)?) => {
        Series {
            label: families!(@label $($key, $value)?),
            get: |section: &$section| section.$field,
            #[cfg(test)]
            unit: families!(@unit $section, $field),
            #[cfg(test)]
            field: stringify!($field),
        }
    };
    // Evaluated at compile time: a series of a field the schema table does not flag `metric`
    // does not compile.
    (@unit $section:ty, $field:ident) => {
        match Unit::of(<$section>::$field) {
            Some(unit) => unit,
            None => panic!(concat!(
                "output/metrics/table.rs has a relay_metrics series for ",
                stringify!($section), ".", stringify!($field),
                ", which the schema table (snapshot/mod.rs) does not flag `metric`"
            )),
        }
    };
    (@label) => { None };
    (@label $key:literal, $value:literal) => { Some(($key, $value)) };
}

/// Families of one series whose value is computed from the section (a count made a
/// measurement): name, kind, base unit, help, then the function.
macro_rules! computed {
    ($section:ty: $(
        $name:literal, $kind:ident, $unit:ident, $help:literal, |$arg:ident| $value:expr ;
    )*) => {
        &[$(
            Def::<$section> {
                name: $name,
                kind: Kind::$kind,
                unit: Unit::$unit,
                help: $help,
                series: &[Series {
                    label: None,
                    get: |$arg: &$section| $value,
                    #[cfg(test)]
                    unit: Unit::$unit,
                    #[cfg(test)]
                    field: "",
                }],
            },
        )*]
    };
}

#[rustfmt::skip]
pub(super) const CPU: &[Def<CpuMetrics>] = families!(CpuMetrics:
    "relay_metrics_cpu_consumption_cores", Gauge, "Average CPU use since the previous snapshot, in logical processors.", consumption_rate;
    "relay_metrics_cpu_throttled_seconds_total", Counter, "Time the cgroup was throttled by its CPU quota.", throttled_time;
    "relay_metrics_cpu_effective_limit_cores", Gauge, "CPU capacity allowed by cgroup quota and cpuset.", effective_limit;
    "relay_metrics_cpu_pressure_stall_seconds_total", Counter, "PSI CPU stall time.",
        some_pressure_stall_time @ "kind" = "some", full_pressure_stall_time @ "kind" = "full";
);

#[rustfmt::skip]
pub(super) const MEMORY: &[Def<MemoryMetrics>] = families!(MemoryMetrics:
    "relay_metrics_memory_system_used_bytes", Gauge, "System memory in use (total - available).", system_used;
    "relay_metrics_memory_system_total_bytes", Gauge, "Total system memory.", system_total;
    "relay_metrics_memory_system_available_bytes", Gauge, "Available system memory.", system_available;
    "relay_metrics_memory_resident_bytes", Gauge, "Resident memory of the processes in scope.", resident;
    "relay_metrics_memory_private_bytes", Gauge, "Private memory of the processes in scope.", private;
    "relay_metrics_memory_virtual_bytes", Gauge, "Virtual memory of the processes in scope.", virtual_memory;
    "relay_metrics_memory_peak_resident_bytes", Gauge, "Peak resident memory of the application process.", peak_resident;
    "relay_metrics_memory_limit_bytes", Gauge, "Effective memory limit of the cgroup.", limit;
    "relay_metrics_memory_cgroup_charged_bytes", Gauge, "Memory charged to the cgroup.", environment_accounted;
    "relay_metrics_memory_pressure_stall_seconds_total", Counter, "PSI memory stall time.",
        some_pressure_stall_time @ "kind" = "some", full_pressure_stall_time @ "kind" = "full";
);

/// Labelled with the event's `resource` and `event` by the walk.
#[rustfmt::skip]
pub(super) const LIMIT_EVENTS: &[Def<ResourceLimitEventCount>] = families!(ResourceLimitEventCount:
    "relay_metrics_limit_events_total", Counter, "Resource-limit events (cgroup counters and eBPF).", count;
);

#[rustfmt::skip]
pub(super) const PROCESS: &[Def<ProcessMetrics>] = families!(ProcessMetrics:
    "relay_metrics_processes", Gauge, "Processes in scope.", active_count;
    "relay_metrics_threads", Gauge, "Threads of the processes in scope.", thread_count;
    "relay_metrics_open_file_descriptors", Gauge, "Open file descriptors of the processes in scope.", open_file_descriptor_count;
    "relay_metrics_processes_created_total", Counter, "Processes created in scope since the collector started.", lifetime_creation_count;
);

#[rustfmt::skip]
pub(super) const DISK: &[Def<DiskMetrics>] = families!(DiskMetrics:
    "relay_metrics_disk_read_bytes_per_second", Gauge, "Read rate since the previous snapshot.", read_throughput;
    "relay_metrics_disk_write_bytes_per_second", Gauge, "Write rate since the previous snapshot.", write_throughput;
    "relay_metrics_disk_read_syscalls", Gauge, "Read system calls of the processes alive in scope (a sum over the live processes: it drops when one exits).", read_operations;
    "relay_metrics_disk_write_syscalls", Gauge, "Write system calls of the processes alive in scope (a sum over the live processes: it drops when one exits).", write_operations;
);

/// Labelled with the filesystem's `path` by the walk.
#[rustfmt::skip]
pub(super) const FILESYSTEM: &[Def<FilesystemCapacityMetrics>] = families!(FilesystemCapacityMetrics:
    "relay_metrics_filesystem_bytes", Gauge, "Filesystem capacity of a configured path.",
        total_capacity @ "kind" = "total", available_capacity @ "kind" = "available", free_capacity @ "kind" = "free";
);

/// Labelled with the `device` by the walk.
#[rustfmt::skip]
pub(super) const GPU_DEVICE: &[Def<AcceleratorDeviceMetrics>] = families!(AcceleratorDeviceMetrics:
    "relay_metrics_gpu_memory_used_bytes", Gauge, "Accelerator memory in use.", memory_used;
    "relay_metrics_gpu_utilization_ratio", Gauge, "Accelerator compute utilisation (0-1).", compute_utilization;
);

/// Labelled with the `device` and `pid` by the walk.
#[rustfmt::skip]
pub(super) const GPU_PROCESS: &[Def<AcceleratorProcessMetrics>] = families!(AcceleratorProcessMetrics:
    "relay_metrics_gpu_process_memory_used_bytes", Gauge, "Accelerator memory used by a process in scope.", memory_used;
    "relay_metrics_gpu_process_utilization_ratio", Gauge, "Accelerator utilisation of a process in scope (0-1).", compute_utilization;
);

/// Labelled with the `interface` by the walk.
#[rustfmt::skip]
pub(super) const NETWORK: &[Def<NetworkTrafficMetrics>] = families!(NetworkTrafficMetrics:
    "relay_metrics_network_received_bytes_total", Counter, "Bytes received on the interface.", received_data;
    "relay_metrics_network_transmitted_bytes_total", Counter, "Bytes transmitted on the interface.", transmitted_data;
    "relay_metrics_network_receive_bytes_per_second", Gauge, "Receive rate since the previous snapshot.", receive_throughput;
    "relay_metrics_network_transmit_bytes_per_second", Gauge, "Transmit rate since the previous snapshot.", transmit_throughput;
    "relay_metrics_network_received_packets_total", Counter, "Packets received on the interface.", received_packets;
    "relay_metrics_network_transmitted_packets_total", Counter, "Packets transmitted on the interface.", transmitted_packets;
    "relay_metrics_network_receive_errors_total", Counter, "Receive errors on the interface.", receive_errors;
    "relay_metrics_network_transmit_errors_total", Counter, "Transmit errors on the interface.", transmit_errors;
);

/// Process-sampling coverage: plain counts in the snapshot, made measurements here.
#[rustfmt::skip]
pub(super) const SAMPLING: &[Def<ProcessSamplingMetadata>] = computed!(ProcessSamplingMetadata:
    "relay_metrics_sampling_visible_processes", Gauge, Count, "Processes listed by the last snapshot.",
        |s| Some(Measurement::count(s.visible_processes, CountUnit::Processes));
    "relay_metrics_sampling_sampled_processes", Gauge, Count, "Processes whose base query succeeded in the last snapshot.",
        |s| Some(Measurement::count(s.sampled_processes, CountUnit::Processes));
);

/// The collector's own figures.
#[rustfmt::skip]
pub(super) const COLLECTOR: &[Def<CollectorInfo>] = computed!(CollectorInfo:
    "relay_metrics_collect_duration_seconds", Gauge, Seconds, "Wall time the last collection took.",
        |c| Some(Measurement::integer(c.collect_duration_usec, DurationUnit::Microseconds, DurationUnit::Microseconds));
    "relay_metrics_snapshots_total", Counter, Count, "Snapshots taken by this collector.",
        |c| Some(Measurement::count(c.sequence, CountUnit::Events));
);

/// The scope's CPU time since the agent started, exited processes included
/// (`extensions.cumulative`: `/proc/stat` globally, the cgroup's own usage counter, or the
/// process tree's live and reaped times): counters that never decrease while the agent runs.
/// The CPU section's `user_time`/`system_time` are sums over the live processes (Relay's
/// meaning), which drop when a process exits, so they are not exported as counters.
#[rustfmt::skip]
pub(super) const CUMULATIVE_CPU: &[Def<Cumulative>] = computed!(Cumulative:
    "relay_metrics_cpu_user_seconds_total", Counter, Seconds, "User-mode CPU time of the scope since the agent started, exited processes included.",
        |c| c.cpu_user_ns.and_then(seconds);
    "relay_metrics_cpu_system_seconds_total", Counter, Seconds, "Kernel-mode CPU time of the scope since the agent started, exited processes included.",
        |c| c.cpu_system_ns.and_then(seconds);
);

/// The scope's storage I/O since the agent started, exited processes included
/// (`extensions.cumulative`: `/proc/diskstats` physical disks globally, the cgroup's `io.stat` /
/// `blkio`, or the process tree's live and reaped bytes).
#[rustfmt::skip]
pub(super) const CUMULATIVE_DISK: &[Def<Cumulative>] = computed!(Cumulative:
    "relay_metrics_disk_read_bytes_total", Counter, Bytes, "Bytes read from storage by the scope since the agent started, exited processes included.",
        |c| c.storage_read_bytes.map(bytes);
    "relay_metrics_disk_written_bytes_total", Counter, Bytes, "Bytes written to storage by the scope since the agent started, exited processes included.",
        |c| c.storage_write_bytes.map(bytes);
);

fn seconds(ns: u64) -> Option<Measurement> {
    Measurement::decimal(
        ns as f64 / 1e9,
        DurationUnit::Seconds,
        DurationUnit::Seconds,
    )
}

fn bytes(count: u64) -> Measurement {
    Measurement::integer(count, DataUnit::Bytes, DataUnit::Bytes)
}

/// node_exporter's names for the machine's memory (`cadvisor` naming).
#[rustfmt::skip]
pub(super) const NODE_MEMORY: &[Def<MemoryMetrics>] = families!(MemoryMetrics:
    "node_memory_MemTotal_bytes", Gauge, "Memory information field MemTotal_bytes.", system_total;
    "node_memory_MemAvailable_bytes", Gauge, "Memory information field MemAvailable_bytes.", system_available;
);

/// node_exporter's pressure families (`cadvisor` naming, global scope only: in another scope
/// the PSI fields are the scope's cgroup's).
#[rustfmt::skip]
pub(super) const NODE_CPU_PRESSURE: &[Def<CpuMetrics>] = families!(CpuMetrics:
    "node_pressure_cpu_waiting_seconds_total", Counter, "Total time in seconds that processes have waited for CPU time", some_pressure_stall_time;
);

#[rustfmt::skip]
pub(super) const NODE_MEMORY_PRESSURE: &[Def<MemoryMetrics>] = families!(MemoryMetrics:
    "node_pressure_memory_waiting_seconds_total", Counter, "Total time in seconds that processes have waited for memory", some_pressure_stall_time;
    "node_pressure_memory_stalled_seconds_total", Counter, "Total time in seconds no process could make progress due to memory congestion", full_pressure_stall_time;
);

/// node_exporter's interface counters, labelled `device` by the walk (`cadvisor` naming).
#[rustfmt::skip]
pub(super) const NODE_NETWORK: &[Def<NetworkTrafficMetrics>] = families!(NetworkTrafficMetrics:
    "node_network_receive_bytes_total", Counter, "Network device statistic receive_bytes.", received_data;
    "node_network_transmit_bytes_total", Counter, "Network device statistic transmit_bytes.", transmitted_data;
    "node_network_receive_packets_total", Counter, "Network device statistic receive_packets.", received_packets;
    "node_network_transmit_packets_total", Counter, "Network device statistic transmit_packets.", transmitted_packets;
    "node_network_receive_errs_total", Counter, "Network device statistic receive_errs.", receive_errors;
    "node_network_transmit_errs_total", Counter, "Network device statistic transmit_errs.", transmit_errors;
);

/// node_exporter's filesystem sizes, labelled `mountpoint` by the walk (`cadvisor` naming).
#[rustfmt::skip]
pub(super) const NODE_FILESYSTEM: &[Def<FilesystemCapacityMetrics>] = families!(FilesystemCapacityMetrics:
    "node_filesystem_size_bytes", Gauge, "Filesystem size in bytes.", total_capacity;
    "node_filesystem_avail_bytes", Gauge, "Filesystem space available to non-root users in bytes.", available_capacity;
    "node_filesystem_free_bytes", Gauge, "Filesystem free space in bytes.", free_capacity;
);

/// The `relay_metrics_*` families a node_exporter family carries in the `cadvisor` naming.
pub(super) const NODE_COVERED: &[&str] = &[
    "relay_metrics_memory_system_total_bytes",
    "relay_metrics_memory_system_available_bytes",
    "relay_metrics_network_received_bytes_total",
    "relay_metrics_network_transmitted_bytes_total",
    "relay_metrics_network_received_packets_total",
    "relay_metrics_network_transmitted_packets_total",
    "relay_metrics_network_receive_errors_total",
    "relay_metrics_network_transmit_errors_total",
    "relay_metrics_filesystem_bytes",
];
