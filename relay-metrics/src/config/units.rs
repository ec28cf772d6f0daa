//! The `units` section: the output unit of every convertible field, with Relay's defaults.

use serde::{Deserialize, Serialize};

use crate::units::{BandwidthUnit, CapacityUnit, CpuUnit, DataUnit, DurationUnit, UtilizationUnit};

macro_rules! units_section {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$fmeta:meta])* $field:ident : $family:ident = $default:ident ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct $name {
            $( $(#[$fmeta])* pub $field: $family ),+
        }

        impl Default for $name {
            fn default() -> Self {
                Self { $( $field: $family::$default ),+ }
            }
        }
    };
}

/// `units` section.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UnitsConfig {
    /// CPU units.
    pub cpu: CpuUnits,
    /// Memory units.
    pub memory: MemoryUnits,
    /// Disk units.
    pub disk: DiskUnits,
    /// GPU units.
    pub gpu: GpuUnits,
    /// Network units.
    pub network: NetworkUnits,
}

units_section! {
    /// `units.cpu`.
    CpuUnits {
        /// Unit of `cpu.user_time`.
        user_time: DurationUnit = Milliseconds,
        /// Unit of `cpu.system_time`.
        system_time: DurationUnit = Milliseconds,
        /// Unit of `cpu.total_time`.
        total_time: DurationUnit = Milliseconds,
        /// Unit of `cpu.throttled_time`.
        throttled_time: DurationUnit = Milliseconds,
        /// Unit of `cpu.some_pressure_stall_time`.
        some_pressure_stall_time: DurationUnit = Milliseconds,
        /// Unit of `cpu.full_pressure_stall_time`.
        full_pressure_stall_time: DurationUnit = Milliseconds,
        /// Unit of `cpu.consumption_rate`.
        consumption_rate: CpuUnit = LogicalProcessors,
        /// Unit of `cpu.effective_limit`.
        effective_limit: CpuUnit = LogicalProcessors,
    }
}

units_section! {
    /// `units.memory`.
    MemoryUnits {
        /// Unit of `memory.system_used`.
        system_used: CapacityUnit = Kibibytes,
        /// Unit of `memory.system_total`.
        system_total: CapacityUnit = Kibibytes,
        /// Unit of `memory.system_available`.
        system_available: CapacityUnit = Kibibytes,
        /// Unit of `memory.resident`.
        resident: CapacityUnit = Kibibytes,
        /// Unit of `memory.private`.
        private: CapacityUnit = Kibibytes,
        /// Unit of `memory.physical_footprint`.
        physical_footprint: CapacityUnit = Kibibytes,
        /// Unit of `memory.virtual_memory`.
        virtual_memory: CapacityUnit = Kibibytes,
        /// Unit of `memory.peak_resident`.
        peak_resident: CapacityUnit = Kibibytes,
        /// Unit of `memory.limit`.
        limit: CapacityUnit = Kibibytes,
        /// Unit of `memory.environment_accounted`.
        environment_accounted: CapacityUnit = Kibibytes,
        /// Unit of `memory.some_pressure_stall_time`.
        some_pressure_stall_time: DurationUnit = Milliseconds,
        /// Unit of `memory.full_pressure_stall_time`.
        full_pressure_stall_time: DurationUnit = Milliseconds,
    }
}

units_section! {
    /// `units.disk`.
    DiskUnits {
        /// Unit of `disk.read_data`.
        read_data: DataUnit = Bytes,
        /// Unit of `disk.write_data`.
        write_data: DataUnit = Bytes,
        /// Unit of `disk.filesystems[*].total_capacity`.
        filesystem_total_capacity: CapacityUnit = Bytes,
        /// Unit of `disk.filesystems[*].available_capacity`.
        filesystem_available_capacity: CapacityUnit = Bytes,
        /// Unit of `disk.filesystems[*].free_capacity`.
        filesystem_free_capacity: CapacityUnit = Bytes,
        /// Unit of `disk.read_throughput`.
        read_throughput: BandwidthUnit = BytesPerSecond,
        /// Unit of `disk.write_throughput`.
        write_throughput: BandwidthUnit = BytesPerSecond,
    }
}

units_section! {
    /// `units.gpu`.
    GpuUnits {
        /// Unit of device `memory_used`.
        device_memory_used: CapacityUnit = Kibibytes,
        /// Unit of process `memory_used`.
        process_memory_used: CapacityUnit = Kibibytes,
        /// Unit of device `compute_utilization`.
        device_compute_utilization: UtilizationUnit = Percentage,
        /// Unit of process `compute_utilization`.
        process_compute_utilization: UtilizationUnit = Percentage,
    }
}

units_section! {
    /// `units.network.system` and `units.network.interface`.
    TrafficUnits {
        /// Unit of `received_data`.
        received_data: DataUnit = Bytes,
        /// Unit of `transmitted_data`.
        transmitted_data: DataUnit = Bytes,
        /// Unit of `receive_throughput`.
        receive_throughput: BandwidthUnit = BytesPerSecond,
        /// Unit of `transmit_throughput`.
        transmit_throughput: BandwidthUnit = BytesPerSecond,
    }
}

/// `units.network`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkUnits {
    /// Units of `network.system`.
    pub system: TrafficUnits,
    /// Units of `network.interfaces[*].traffic`.
    pub interface: TrafficUnits,
}
