//! NeMo Relay's metric view of a snapshot: the measurements that Relay's polling marks carry
//! (event `nemo.relay.resource_metrics`, data schema `nemo.relay.metric_measurements` v1).
//!
//! This module is the one home of Relay's measurement names, descriptions, attribute keys and
//! value-type rule. The Python package emits its polling marks from it, and the metric exports
//! use it for Relay's names.
//!
//! The rules, as Relay 0.10.4 applies them (checked against its own marks on Linux):
//! - every name starts with `nemo.relay.resource.`; attribute keys start with `nemo_relay.resource.`
//!   (an underscore), and every measurement carries the operating system and measurement scope
//!   (`global` for network measurements);
//! - a `null` value is left out; so is an integer above `i64::MAX` and a non-finite float;
//! - the value is a `u64` when the configured unit can express every value of the field's base
//!   unit as an integer (milliseconds and microseconds for durations; kibibytes and bytes for
//!   memory; bytes for data and filesystem capacity; every count), and an `f64` otherwise, even
//!   when the number happens to be whole (1000 ms in seconds is `1.0`); rates, CPU amounts and
//!   utilisations are always `f64`;
//! - measurements come in a fixed order: the sample count, CPU (with its limit events), memory
//!   (with its limit events), process (with its limit events), disk, filesystems, accelerator
//!   processes and devices, the network system sum, each interface, then process-sampling
//!   coverage.

use crate::snapshot::{
    AcceleratorVendor, FieldUnit, GpuMetrics, MeasurementScope, NetworkMetrics,
    ProcessSamplingMetadata, ResourceLimitEventCount, ResourceMetricsSnapshot, SchemaField,
};
use crate::units::{CountUnit, Measurement, MeasurementUnit, MeasurementValue};

/// Prefix of every measurement name.
pub const NAME_PREFIX: &str = "nemo.relay.resource.";
/// The mark event's name.
pub const EVENT_NAME: &str = "nemo.relay.resource_metrics";
/// The mark's data schema name.
pub const DATA_SCHEMA_NAME: &str = "nemo.relay.metric_measurements";
/// The mark's data schema version.
pub const DATA_SCHEMA_VERSION: &str = "1";

/// Attribute key: the operating system (`linux`).
pub const ATTR_OPERATING_SYSTEM: &str = "nemo_relay.resource.operating_system";
/// Attribute key: the measurement scope (`global` for network measurements).
pub const ATTR_MEASUREMENT_SCOPE: &str = "nemo_relay.resource.measurement_scope";
/// Attribute key: a limit event's resource.
pub const ATTR_LIMIT_RESOURCE: &str = "nemo_relay.resource.limit.resource";
/// Attribute key: a limit event's kind.
pub const ATTR_LIMIT_EVENT: &str = "nemo_relay.resource.limit.event";
/// Attribute key: a configured filesystem path.
pub const ATTR_FILESYSTEM_PATH: &str = "nemo_relay.resource.disk.filesystem_path";
/// Attribute key: an accelerator's vendor.
pub const ATTR_ACCELERATOR_VENDOR: &str = "nemo_relay.resource.accelerator.vendor";
/// Attribute key: an accelerator's identifier.
pub const ATTR_ACCELERATOR_DEVICE_IDENTIFIER: &str =
    "nemo_relay.resource.accelerator.device_identifier";
/// Attribute key: an accelerator's NVML index (only when it has one).
pub const ATTR_ACCELERATOR_DEVICE_INDEX: &str = "nemo_relay.resource.accelerator.device_index";
/// Attribute key: the process of a per-process accelerator record.
pub const ATTR_PROCESS_ID: &str = "nemo_relay.resource.process_id";
/// Attribute key: a network interface's name.
pub const ATTR_INTERFACE_NAME: &str = "nemo_relay.resource.network.interface_name";
/// Attribute key: the field of a process-sampling coverage count.
pub const ATTR_FIELD: &str = "nemo_relay.resource.field";

/// Most attributes one measurement carries (an accelerator process record: four, plus the
/// operating system and scope).
const MAX_ATTRIBUTES: usize = 6;

/// A measurement's number, typed as Relay types it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RelayValue {
    /// `value_type = "u64"`.
    U64(u64),
    /// `value_type = "f64"`.
    F64(f64),
}

impl RelayValue {
    /// Relay's `value_type` string.
    pub fn value_type(self) -> &'static str {
        match self {
            Self::U64(_) => "u64",
            Self::F64(_) => "f64",
        }
    }
}

/// An attribute value: text, or an integer (accelerator index, process id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayAttributeValue<'s> {
    /// Text.
    Str(&'s str),
    /// An integer.
    Int(u64),
}

/// One measurement of a Relay mark. Its kind is always `gauge` and it has no boundaries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RelayMeasurement<'s> {
    /// Full name, e.g. `nemo.relay.resource.cpu.user_time`.
    pub name: &'static str,
    /// Relay's description text.
    pub description: &'static str,
    /// The unit, as configured.
    pub unit: MeasurementUnit,
    /// The number.
    pub value: RelayValue,
    attributes: [(&'static str, RelayAttributeValue<'s>); MAX_ATTRIBUTES],
    attribute_count: usize,
}

impl<'s> RelayMeasurement<'s> {
    /// The attributes, sorted by key (as Relay's maps are).
    pub fn attributes(&self) -> &[(&'static str, RelayAttributeValue<'s>)] {
        &self.attributes[..self.attribute_count]
    }
}

/// How a field's value type is decided: by the unit its values are collected in.
#[derive(Debug, Clone, Copy)]
enum Base {
    /// Durations, collected in milliseconds.
    Milliseconds,
    /// Memory-like capacities, collected in kibibytes.
    Kibibytes,
    /// Data amounts and filesystem capacities, collected in bytes.
    Bytes,
    /// Counts (never converted).
    Count,
    /// Rates, CPU amounts, utilisations: always decimals.
    Decimal,
}

impl Base {
    /// The base of a field the schema table flags `relay`, from its unit; `None` for a field
    /// that is not a measurement or not flagged `relay`.
    const fn of(field: SchemaField) -> Option<Self> {
        if !field.relay {
            return None;
        }
        match field.unit {
            Some(FieldUnit::Duration) => Some(Self::Milliseconds),
            Some(FieldUnit::Memory) => Some(Self::Kibibytes),
            Some(FieldUnit::Capacity | FieldUnit::Data) => Some(Self::Bytes),
            Some(FieldUnit::Count) => Some(Self::Count),
            Some(FieldUnit::Bandwidth | FieldUnit::Cpu | FieldUnit::Utilization) => {
                Some(Self::Decimal)
            }
            None => None,
        }
    }

    /// Size of the base unit in its family's smallest unit (µs or bytes).
    fn factor(self) -> Option<u64> {
        match self {
            Self::Milliseconds => Some(1_000),
            Self::Kibibytes => Some(1_024),
            Self::Bytes => Some(1),
            Self::Count | Self::Decimal => None,
        }
    }
}

/// Size of a duration or capacity unit in microseconds or bytes.
fn unit_factor(unit: MeasurementUnit) -> Option<u64> {
    use MeasurementUnit as U;
    Some(match unit {
        U::Microseconds | U::Bytes => 1,
        U::Milliseconds | U::Kilobytes => 1_000,
        U::Seconds | U::Megabytes => 1_000_000,
        U::Minutes => 60_000_000,
        U::Gigabytes => 1_000_000_000,
        U::Terabytes => 1_000_000_000_000,
        U::Kibibytes => 1 << 10,
        U::Mebibytes => 1 << 20,
        U::Gibibytes => 1 << 30,
        U::Tebibytes => 1 << 40,
        _ => return None,
    })
}

/// Relay's value-type rule: an integer stays `u64` when the unit can hold every base-unit value
/// as an integer; values Relay cannot carry (above `i64::MAX`, non-finite) give `None`.
fn relay_value(measurement: &Measurement, base: Base) -> Option<RelayValue> {
    let integral_unit = match base {
        Base::Count => true,
        Base::Decimal => false,
        _ => match (base.factor(), unit_factor(measurement.unit)) {
            (Some(base), Some(unit)) => base % unit == 0,
            _ => false,
        },
    };
    match measurement.value {
        MeasurementValue::Integer(value) if value > i64::MAX as u64 => None,
        MeasurementValue::Integer(value) if integral_unit => Some(RelayValue::U64(value)),
        MeasurementValue::Integer(value) => Some(RelayValue::F64(value as f64)),
        MeasurementValue::Decimal(value) if value.is_finite() => Some(RelayValue::F64(value)),
        MeasurementValue::Decimal(_) => None,
    }
}

/// One measurement field of a snapshot section, with Relay's name for it.
struct Field<T> {
    name: &'static str,
    description: &'static str,
    base: Base,
    get: fn(&T) -> Option<&Measurement>,
    /// The snapshot field, for the tests' check against the schema table.
    #[cfg(test)]
    field: &'static str,
}

/// Collects measurements for one snapshot.
struct Builder<'s, F> {
    operating_system: &'s str,
    scope: &'s str,
    emit: F,
}

impl<'s, F: FnMut(RelayMeasurement<'s>)> Builder<'s, F> {
    fn fields<T>(&mut self, section: &T, fields: &[Field<T>], extra: &[Attribute<'s>]) {
        self.scoped_fields(section, fields, extra, self.scope);
    }

    fn scoped_fields<T>(
        &mut self,
        section: &T,
        fields: &[Field<T>],
        extra: &[Attribute<'s>],
        scope: &'s str,
    ) {
        for field in fields {
            self.push(field, (field.get)(section), extra, scope);
        }
    }

    fn push<T>(
        &mut self,
        field: &Field<T>,
        measurement: Option<&Measurement>,
        extra: &[Attribute<'s>],
        scope: &'s str,
    ) {
        let Some(measurement) = measurement else {
            return;
        };
        let Some(value) = relay_value(measurement, field.base) else {
            return;
        };
        let mut attributes = [("", RelayAttributeValue::Int(0)); MAX_ATTRIBUTES];
        attributes[0] = (ATTR_MEASUREMENT_SCOPE, RelayAttributeValue::Str(scope));
        attributes[1] = (
            ATTR_OPERATING_SYSTEM,
            RelayAttributeValue::Str(self.operating_system),
        );
        let mut count = 2;
        for attribute in extra.iter().take(MAX_ATTRIBUTES - 2) {
            attributes[count] = *attribute;
            count += 1;
        }
        attributes[..count].sort_unstable_by_key(|(key, _)| *key);
        (self.emit)(RelayMeasurement {
            name: field.name,
            description: field.description,
            unit: measurement.unit,
            value,
            attributes,
            attribute_count: count,
        });
    }

    fn count(&mut self, field: &Field<()>, measurement: Measurement, extra: &[Attribute<'s>]) {
        self.push(field, Some(&measurement), extra, self.scope);
    }

    fn limit_events(&mut self, events: &'s [ResourceLimitEventCount]) {
        for event in events {
            let attributes = [
                (
                    ATTR_LIMIT_RESOURCE,
                    RelayAttributeValue::Str(event.resource.as_str()),
                ),
                (
                    ATTR_LIMIT_EVENT,
                    RelayAttributeValue::Str(event.event.as_str()),
                ),
            ];
            self.fields(event, table::LIMIT_EVENT, &attributes);
        }
    }
}

/// An attribute key and value.
type Attribute<'s> = (&'static str, RelayAttributeValue<'s>);

/// Calls `emit` with each of Relay's measurements of `snapshot`, in Relay's order. Allocates
/// nothing.
pub fn for_each_measurement<'s>(
    snapshot: &'s ResourceMetricsSnapshot,
    emit: impl FnMut(RelayMeasurement<'s>),
) {
    let mut b = Builder {
        operating_system: snapshot.operating_system.as_str(),
        scope: snapshot.measurement_scope.as_str(),
        emit,
    };
    b.count(
        &table::SAMPLE_COUNT,
        Measurement::count(1, CountUnit::Events),
        &[],
    );
    if let Some(cpu) = &snapshot.cpu {
        b.fields(cpu, table::CPU, &[]);
        b.limit_events(&cpu.limit_events);
    }
    if let Some(memory) = &snapshot.memory {
        b.fields(memory, table::MEMORY, &[]);
        b.limit_events(&memory.limit_events);
    }
    if let Some(process) = &snapshot.process {
        b.fields(process, table::PROCESS, &[]);
        b.limit_events(&process.limit_events);
    }
    if let Some(disk) = &snapshot.disk {
        b.fields(disk, table::DISK, &[]);
        for filesystem in &disk.filesystems {
            let path = [(
                ATTR_FILESYSTEM_PATH,
                RelayAttributeValue::Str(&filesystem.path),
            )];
            b.fields(filesystem, table::FILESYSTEM, &path);
        }
    }
    if let Some(gpu) = &snapshot.gpu {
        b.accelerators(gpu);
    }
    if let Some(network) = &snapshot.network {
        b.network(network);
    }
    if let Some(sampling) = &snapshot.process_sampling {
        b.process_sampling(sampling);
    }
}

impl<'s, F: FnMut(RelayMeasurement<'s>)> Builder<'s, F> {
    /// Per process, then per device.
    fn accelerators(&mut self, gpu: &'s GpuMetrics) {
        for record in gpu.process_metrics.iter().flatten() {
            let (attributes, count) = accelerator_attributes(
                record.vendor,
                &record.device_identifier,
                record.device_index,
                Some(record.process_id),
            );
            self.fields(record, table::ACCELERATOR_PROCESS, &attributes[..count]);
        }
        for record in gpu.device_metrics.iter().flatten() {
            let (attributes, count) = accelerator_attributes(
                record.vendor,
                &record.device_identifier,
                record.device_index,
                None,
            );
            self.fields(record, table::ACCELERATOR_DEVICE, &attributes[..count]);
        }
    }

    /// The machine's traffic, then each interface's: always global scope.
    fn network(&mut self, network: &'s NetworkMetrics) {
        let global = MeasurementScope::Global.as_str();
        self.scoped_fields(&network.system, table::NETWORK_SYSTEM, &[], global);
        for interface in &network.interfaces {
            let name = [(
                ATTR_INTERFACE_NAME,
                RelayAttributeValue::Str(&interface.name),
            )];
            self.scoped_fields(&interface.traffic, table::NETWORK_INTERFACE, &name, global);
        }
    }

    /// The visible and sampled process counts, and the sampled count per field.
    fn process_sampling(&mut self, sampling: &'s ProcessSamplingMetadata) {
        let processes = |count| Measurement::count(count, CountUnit::Processes);
        self.count(
            &table::VISIBLE_COUNT,
            processes(sampling.visible_processes),
            &[],
        );
        self.count(
            &table::SAMPLED_COUNT,
            processes(sampling.sampled_processes),
            &[],
        );
        for (field, count) in sampling.field_sampled_processes.iter() {
            let attribute = [(ATTR_FIELD, RelayAttributeValue::Str(field))];
            self.count(&table::FIELD_SAMPLED_COUNT, processes(count), &attribute);
        }
    }
}

/// Every Relay measurement of `snapshot`, in Relay's order.
pub fn relay_measurements(snapshot: &ResourceMetricsSnapshot) -> Vec<RelayMeasurement<'_>> {
    let mut out = Vec::with_capacity(96);
    for_each_measurement(snapshot, |measurement| out.push(measurement));
    out
}

fn accelerator_attributes(
    vendor: AcceleratorVendor,
    identifier: &str,
    index: Option<u32>,
    process_id: Option<u32>,
) -> ([Attribute<'_>; 4], usize) {
    let mut attributes = [("", RelayAttributeValue::Int(0)); 4];
    attributes[0] = (
        ATTR_ACCELERATOR_VENDOR,
        RelayAttributeValue::Str(vendor.as_str()),
    );
    attributes[1] = (
        ATTR_ACCELERATOR_DEVICE_IDENTIFIER,
        RelayAttributeValue::Str(identifier),
    );
    let mut count = 2;
    if let Some(index) = index {
        attributes[count] = (
            ATTR_ACCELERATOR_DEVICE_INDEX,
            RelayAttributeValue::Int(u64::from(index)),
        );
        count += 1;
    }
    if let Some(pid) = process_id {
        attributes[count] = (ATTR_PROCESS_ID, RelayAttributeValue::Int(u64::from(pid)));
        count += 1;
    }
    (attributes, count)
}

mod table;
#[cfg(test)]
mod tests;
