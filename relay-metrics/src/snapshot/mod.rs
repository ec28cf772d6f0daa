//! The snapshot schema: Relay's `resource_metrics` classes, field for field and in Relay's key
//! order, plus one `extensions` object for everything Relay does not have.
//!
//! Conventions (Relay 0.10.4): a disabled category is `null`; an enabled category carries
//! every field; an unavailable value is `null`, never `0`; measurements are `{value, unit}`.
//!
//! The structs are declared once, in the schema table at the end of this file, which also says
//! for each measurement field its unit and the outputs that carry it ([`SECTIONS`]).

#[macro_use]
mod schema;
mod coverage;
mod extension_values;
mod extensions;
mod scope_values;
mod target_values;
mod targets;
mod values;

pub use coverage::{FieldCoverage, COVERAGE_KEYS};
pub use extension_values::*;
pub use extensions::*;
pub use schema::{FieldUnit, SchemaField, Section, SectionInfo};
pub use scope_values::{scope_values, ScopeValue};
pub use target_values::{MemoryEventCounts, TargetFamily, TargetSeries, TARGET_FAMILIES};
pub use targets::*;
pub use values::{ValueRow, ValueUnit};

/// A measured cgroup with a different number in every value (the output tests use it too).
#[cfg(test)]
pub(crate) use target_values::tests::distinct_report;
/// A struct with a different number in every value, made through its JSON (the output tests
/// hold their families to the values tables with it).
#[cfg(test)]
pub(crate) use values::tests::distinct;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::units::Measurement;

/// The operating system a snapshot was taken on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OperatingSystem {
    /// Linux.
    #[default]
    Linux,
    /// macOS (never produced by this collector).
    Macos,
    /// Windows (never produced by this collector).
    Windows,
    /// Anything else.
    Unsupported,
}

impl OperatingSystem {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Linux => "linux",
            Self::Macos => "macos",
            Self::Windows => "windows",
            Self::Unsupported => "unsupported",
        }
    }
}

/// The set of processes a snapshot measures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeasurementScope {
    /// Every process of the system, plus system-wide pressure.
    #[default]
    Global,
    /// One process, without its children.
    ApplicationProcess,
    /// A root process and all its live descendants.
    ProcessTree,
    /// relay-metrics addition: every process of a cgroup subtree, plus the cgroup's own counters.
    Cgroup,
}

impl MeasurementScope {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Global => "global",
            Self::ApplicationProcess => "application_process",
            Self::ProcessTree => "process_tree",
            Self::Cgroup => "cgroup",
        }
    }
}

/// Accelerator vendors.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AcceleratorVendor {
    /// NVIDIA (NVML).
    #[default]
    Nvidia,
    /// AMD.
    Amd,
    /// Intel.
    Intel,
    /// Apple.
    Apple,
    /// Anything else.
    Other,
}

impl AcceleratorVendor {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nvidia => "nvidia",
            Self::Amd => "amd",
            Self::Intel => "intel",
            Self::Apple => "apple",
            Self::Other => "other",
        }
    }
}

/// The resource a limit event concerns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceLimitResource {
    /// CPU.
    #[default]
    Cpu,
    /// Memory.
    Memory,
    /// Process count.
    Processes,
}

impl ResourceLimitResource {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Memory => "memory",
            Self::Processes => "processes",
        }
    }
}

/// The kind of limit event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceLimitEventKind {
    /// Throttled by a quota.
    #[default]
    Throttled,
    /// Above the high (soft) limit.
    High,
    /// Hit the maximum (hard) limit.
    Maximum,
    /// Out of memory.
    OutOfMemory,
    /// A process was terminated (OOM kill; from the eBPF event source).
    Terminated,
}

impl ResourceLimitEventKind {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Throttled => "throttled",
            Self::High => "high",
            Self::Maximum => "maximum",
            Self::OutOfMemory => "out_of_memory",
            Self::Terminated => "terminated",
        }
    }
}

// The schema table. A field is `name: Type`; a measurement field adds `=> Unit [flags]`: its
// unit family (`FieldUnit`) and where it goes: `relay` (Relay's marks), `metric` (a
// `relay_metrics` family), `sampled` (a `field_sampled_processes` key). See docs/ARCHITECTURE.md,
// "Adding a field".
sections! {
    /// One point-in-time observation, its metadata and the enabled categories.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct ResourceMetricsSnapshot in "" {
        /// When collection completed (UTC, RFC 3339 with nanoseconds).
        pub timestamp: DateTime<Utc>,
        /// Always `linux` for this collector.
        pub operating_system: OperatingSystem,
        /// The scope actually collected.
        pub measurement_scope: MeasurementScope,
        /// Coverage of the process-summed values; `null` when no per-process value was requested or
        /// the process list could not be obtained.
        pub process_sampling: Option<ProcessSamplingMetadata>,
        /// CPU category (`null` when disabled).
        pub cpu: Option<CpuMetrics>,
        /// Memory category.
        pub memory: Option<MemoryMetrics>,
        /// Process category.
        pub process: Option<ProcessMetrics>,
        /// Disk category.
        pub disk: Option<DiskMetrics>,
        /// GPU category.
        pub gpu: Option<GpuMetrics>,
        /// Network category.
        pub network: Option<NetworkMetrics>,
        /// relay-metrics additions (not part of Relay's schema).
        pub extensions: Extensions,
    }

    /// Coverage of the process queries behind process-summed values.
    #[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
    pub struct ProcessSamplingMetadata in "process_sampling" {
        /// PIDs listed at the start of collection.
        pub visible_processes: u64,
        /// PIDs whose base query succeeded.
        pub sampled_processes: u64,
        /// Per canonical field path, how many sampled processes supplied a value.
        pub field_sampled_processes: FieldCoverage,
    }

    /// CPU measurements and CPU limit events.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct CpuMetrics in "cpu" {
        /// Cumulative user-mode CPU time of the processes in scope.
        pub user_time: Option<Measurement> => Duration [relay sampled],
        /// Cumulative kernel-mode CPU time.
        pub system_time: Option<Measurement> => Duration [relay sampled],
        /// User + system time.
        pub total_time: Option<Measurement> => Duration [relay sampled],
        /// Average CPU use since the previous sample of the same series.
        pub consumption_rate: Option<Measurement> => Cpu [relay metric],
        /// Cumulative cgroup CPU throttling.
        pub throttled_time: Option<Measurement> => Duration [relay metric],
        /// CPU capacity allowed by cgroup quota and cpuset.
        pub effective_limit: Option<Measurement> => Cpu [relay metric],
        /// Cumulative PSI "some" CPU stall time.
        pub some_pressure_stall_time: Option<Measurement> => Duration [relay metric],
        /// Cumulative PSI "full" CPU stall time.
        pub full_pressure_stall_time: Option<Measurement> => Duration [relay metric],
        /// CPU limit event counters.
        pub limit_events: Vec<ResourceLimitEventCount>,
    }

    /// System and process memory measurements and memory limit events.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct MemoryMetrics in "memory" {
        /// System RAM in use (total − available).
        pub system_used: Option<Measurement> => Memory [relay metric],
        /// Total system RAM.
        pub system_total: Option<Measurement> => Memory [relay metric],
        /// Available system RAM.
        pub system_available: Option<Measurement> => Memory [relay metric],
        /// Resident set size summed over the scope.
        pub resident: Option<Measurement> => Memory [relay metric sampled],
        /// Private (unshared) memory summed over the scope.
        pub private: Option<Measurement> => Memory [relay metric sampled],
        /// macOS only; always `null` here.
        pub physical_footprint: Option<Measurement> => Memory [relay sampled],
        /// Virtual size summed over the scope.
        pub virtual_memory: Option<Measurement> => Memory [relay metric sampled],
        /// High-water resident size (application_process only).
        pub peak_resident: Option<Measurement> => Memory [relay metric sampled],
        /// Effective memory limit of the cgroup.
        pub limit: Option<Measurement> => Memory [relay metric],
        /// Memory charged to the cgroup.
        pub environment_accounted: Option<Measurement> => Memory [relay metric],
        /// Cumulative PSI "some" memory stall time.
        pub some_pressure_stall_time: Option<Measurement> => Duration [relay metric],
        /// Cumulative PSI "full" memory stall time.
        pub full_pressure_stall_time: Option<Measurement> => Duration [relay metric],
        /// Cumulative OOM events of the cgroup.
        pub out_of_memory_event_count: Option<Measurement> => Count [relay],
        /// Memory limit event counters.
        pub limit_events: Vec<ResourceLimitEventCount>,
    }

    /// Process counts, limits, handles and descriptors.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct ProcessMetrics in "process" {
        /// Processes included.
        pub active_count: Option<Measurement> => Count [relay metric],
        /// Processes included, less the root.
        pub descendant_count: Option<Measurement> => Count [relay],
        /// Threads summed over the scope.
        pub thread_count: Option<Measurement> => Count [relay metric sampled],
        /// Processes created in scope since the collector started (needs the eBPF event source).
        pub lifetime_creation_count: Option<Measurement> => Count [relay metric],
        /// Open file descriptors summed over the scope.
        pub open_file_descriptor_count: Option<Measurement> => Count [relay metric sampled],
        /// Windows only; always `null` here.
        pub windows_handle_count: Option<Measurement> => Count [relay sampled],
        /// Process limit event counters.
        pub limit_events: Vec<ResourceLimitEventCount>,
    }

    /// Disk I/O of the measured processes and filesystem capacity.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct DiskMetrics in "disk" {
        /// Lifetime bytes read from storage.
        pub read_data: Option<Measurement> => Data [relay sampled],
        /// Lifetime bytes written to storage.
        pub write_data: Option<Measurement> => Data [relay sampled],
        /// Read rate since the previous sample.
        pub read_throughput: Option<Measurement> => Bandwidth [relay metric sampled],
        /// Write rate since the previous sample.
        pub write_throughput: Option<Measurement> => Bandwidth [relay metric sampled],
        /// Lifetime read system calls.
        pub read_operations: Option<Measurement> => Count [relay metric sampled],
        /// Lifetime write system calls.
        pub write_operations: Option<Measurement> => Count [relay metric sampled],
        /// One entry per configured path, in configuration order.
        pub filesystems: Vec<FilesystemCapacityMetrics>,
    }

    /// Capacity of one configured filesystem path.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct FilesystemCapacityMetrics in "disk.filesystems" {
        /// The path as configured.
        pub path: Arc<str>,
        /// Total size.
        pub total_capacity: Option<Measurement> => Capacity [relay metric],
        /// Space usable by an unprivileged caller.
        pub available_capacity: Option<Measurement> => Capacity [relay metric],
        /// Free space including root-reserved blocks.
        pub free_capacity: Option<Measurement> => Capacity [relay metric],
    }

    /// Accelerator device and per-process measurements.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct GpuMetrics in "gpu" {
        /// Device-wide records (`null` when that group is disabled).
        pub device_metrics: Option<Vec<AcceleratorDeviceMetrics>>,
        /// Per-process records (`null` when that group is disabled).
        pub process_metrics: Option<Vec<AcceleratorProcessMetrics>>,
    }

    /// Device-wide accelerator measurements.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct AcceleratorDeviceMetrics in "gpu.device_metrics" {
        /// Vendor.
        pub vendor: AcceleratorVendor,
        /// NVML UUID (fallback `nvidia:<index>`) or PCI address.
        pub device_identifier: Arc<str>,
        /// NVML index; `null` for DRM devices.
        pub device_index: Option<u32>,
        /// Device memory in use.
        pub memory_used: Option<Measurement> => Memory [relay metric],
        /// Device compute utilisation.
        pub compute_utilization: Option<Measurement> => Utilization [relay metric],
    }

    /// Accelerator measurements attributed to one process of the scope.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct AcceleratorProcessMetrics in "gpu.process_metrics" {
        /// Vendor.
        pub vendor: AcceleratorVendor,
        /// Device identifier, as in the device record.
        pub device_identifier: Arc<str>,
        /// NVML index; `null` for DRM devices.
        pub device_index: Option<u32>,
        /// The process.
        pub process_id: u32,
        /// Device memory used by the process.
        pub memory_used: Option<Measurement> => Memory [relay metric],
        /// The process's compute utilisation of the device.
        pub compute_utilization: Option<Measurement> => Utilization [relay metric],
    }

    /// System-wide network traffic, independent of the process scope.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct NetworkMetrics in "network" {
        /// Always `global`.
        pub measurement_scope: MeasurementScope,
        /// Sum over the selected interfaces.
        pub system: NetworkTrafficMetrics,
        /// The selected interfaces, sorted by name.
        pub interfaces: Vec<NetworkInterfaceMetrics>,
    }

    /// Traffic of one interface.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct NetworkInterfaceMetrics in "network.interfaces" {
        /// Kernel interface name.
        pub name: Arc<str>,
        /// Its traffic.
        pub traffic: NetworkTrafficMetrics,
    }

    /// Interface traffic counters and rates.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct NetworkTrafficMetrics in "network.system" {
        /// Lifetime bytes received.
        pub received_data: Option<Measurement> => Data [relay metric],
        /// Lifetime bytes transmitted.
        pub transmitted_data: Option<Measurement> => Data [relay metric],
        /// Receive rate since the previous sample.
        pub receive_throughput: Option<Measurement> => Bandwidth [relay metric],
        /// Transmit rate since the previous sample.
        pub transmit_throughput: Option<Measurement> => Bandwidth [relay metric],
        /// Lifetime packets received.
        pub received_packets: Option<Measurement> => Count [relay metric],
        /// Lifetime packets transmitted.
        pub transmitted_packets: Option<Measurement> => Count [relay metric],
        /// Lifetime receive errors.
        pub receive_errors: Option<Measurement> => Count [relay metric],
        /// Lifetime transmit errors.
        pub transmit_errors: Option<Measurement> => Count [relay metric],
    }

    /// One cumulative resource-limit event counter.
    #[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
    pub struct ResourceLimitEventCount in "*.limit_events" {
        /// The resource.
        pub resource: ResourceLimitResource,
        /// The event.
        pub event: ResourceLimitEventKind,
        /// How many times (unit `events`).
        pub count: Option<Measurement> => Count [relay metric],
    }
}
