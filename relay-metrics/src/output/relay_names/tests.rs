use super::*;
use crate::snapshot::{
    CpuMetrics, DiskMetrics, FilesystemCapacityMetrics, MemoryMetrics, NetworkInterfaceMetrics,
    NetworkMetrics, NetworkTrafficMetrics, ProcessSamplingMetadata, ResourceLimitEventKind,
    ResourceLimitResource,
};
use crate::units::{CapacityUnit, CountUnit, DataUnit, DurationUnit};

fn snapshot() -> ResourceMetricsSnapshot {
    let mut coverage = crate::snapshot::FieldCoverage::default();
    coverage.set("cpu.user_time", 3);
    ResourceMetricsSnapshot {
        measurement_scope: MeasurementScope::ProcessTree,
        process_sampling: Some(ProcessSamplingMetadata {
            visible_processes: 3,
            sampled_processes: 3,
            field_sampled_processes: coverage,
        }),
        cpu: Some(CpuMetrics {
            user_time: Some(Measurement::integer(
                1500,
                DurationUnit::Milliseconds,
                DurationUnit::Milliseconds,
            )),
            system_time: Some(Measurement::integer(
                2000,
                DurationUnit::Milliseconds,
                DurationUnit::Seconds,
            )),
            total_time: Some(Measurement::integer(
                7,
                DurationUnit::Milliseconds,
                DurationUnit::Microseconds,
            )),
            limit_events: vec![ResourceLimitEventCount {
                resource: ResourceLimitResource::Cpu,
                event: ResourceLimitEventKind::Throttled,
                count: Some(Measurement::count(4, CountUnit::Events)),
            }],
            ..Default::default()
        }),
        memory: Some(MemoryMetrics {
            system_total: Some(Measurement::integer(
                2048,
                CapacityUnit::Kibibytes,
                CapacityUnit::Kibibytes,
            )),
            resident: Some(Measurement::integer(
                2000,
                CapacityUnit::Kibibytes,
                CapacityUnit::Kilobytes,
            )),
            private: Some(Measurement::integer(
                1,
                CapacityUnit::Kibibytes,
                CapacityUnit::Bytes,
            )),
            virtual_memory: Some(Measurement {
                value: MeasurementValue::Integer(u64::MAX),
                unit: MeasurementUnit::Kibibytes,
            }),
            ..Default::default()
        }),
        disk: Some(DiskMetrics {
            read_data: Some(Measurement::integer(
                2048,
                DataUnit::Bytes,
                DataUnit::Kibibytes,
            )),
            filesystems: vec![FilesystemCapacityMetrics {
                path: "/".into(),
                total_capacity: Some(Measurement::integer(
                    10,
                    CapacityUnit::Bytes,
                    CapacityUnit::Bytes,
                )),
                ..Default::default()
            }],
            ..Default::default()
        }),
        network: Some(NetworkMetrics {
            measurement_scope: MeasurementScope::Global,
            system: NetworkTrafficMetrics {
                received_packets: Some(Measurement::count(5, CountUnit::Packets)),
                ..Default::default()
            },
            interfaces: vec![NetworkInterfaceMetrics {
                name: "lo".into(),
                traffic: NetworkTrafficMetrics {
                    transmit_errors: Some(Measurement::count(0, CountUnit::Errors)),
                    ..Default::default()
                },
            }],
        }),
        ..Default::default()
    }
}

fn short(name: &str) -> &str {
    name.strip_prefix(NAME_PREFIX).unwrap()
}

#[test]
fn measurements_come_in_relays_order_without_nulls() {
    let snapshot = snapshot();
    let names: Vec<&str> = relay_measurements(&snapshot)
        .iter()
        .map(|m| short(m.name))
        .collect();
    assert_eq!(
        names,
        [
            "sample_count",
            "cpu.user_time",
            "cpu.system_time",
            "cpu.total_time",
            "limit.event_count",
            "memory.system.total",
            "memory.resident",
            "memory.private",
            // memory.virtual is above i64::MAX: left out, as Relay does.
            "disk.read_data",
            "disk.filesystem.total_capacity",
            "network.system.received_packets",
            "network.interface.transmit_errors",
            "process_sampling.visible_count",
            "process_sampling.sampled_count",
            "process_sampling.field_sampled_count",
        ]
    );
}

#[test]
fn value_types_follow_the_unit_the_field_is_collected_in() {
    let snapshot = snapshot();
    let measurements = relay_measurements(&snapshot);
    let value = |name: &str| {
        measurements
            .iter()
            .find(|m| short(m.name) == name)
            .unwrap()
            .value
    };
    assert_eq!(value("sample_count"), RelayValue::U64(1));
    assert_eq!(value("cpu.user_time"), RelayValue::U64(1500));
    // Whole seconds are still f64: seconds cannot hold every millisecond value.
    assert_eq!(value("cpu.system_time"), RelayValue::F64(2.0));
    assert_eq!(value("cpu.total_time"), RelayValue::U64(7000));
    assert_eq!(value("memory.system.total"), RelayValue::U64(2048));
    assert_eq!(value("memory.resident"), RelayValue::F64(2048.0));
    assert_eq!(value("memory.private"), RelayValue::U64(1024));
    // Data is collected in bytes: kibibytes are f64 there, unlike memory.
    assert_eq!(value("disk.read_data"), RelayValue::F64(2.0));
    assert_eq!(value("disk.filesystem.total_capacity"), RelayValue::U64(10));
    assert_eq!(value("limit.event_count"), RelayValue::U64(4));
    assert_eq!(RelayValue::F64(2.0).value_type(), "f64");
}

#[test]
fn attributes_carry_scope_and_item_sorted_by_key() {
    let snapshot = snapshot();
    let measurements = relay_measurements(&snapshot);
    let find = |name: &str| measurements.iter().find(|m| short(m.name) == name).unwrap();
    assert_eq!(
        find("cpu.user_time").attributes(),
        [
            (
                ATTR_MEASUREMENT_SCOPE,
                RelayAttributeValue::Str("process_tree")
            ),
            (ATTR_OPERATING_SYSTEM, RelayAttributeValue::Str("linux")),
        ]
    );
    assert_eq!(
        find("limit.event_count").attributes(),
        [
            (ATTR_LIMIT_EVENT, RelayAttributeValue::Str("throttled")),
            (ATTR_LIMIT_RESOURCE, RelayAttributeValue::Str("cpu")),
            (
                ATTR_MEASUREMENT_SCOPE,
                RelayAttributeValue::Str("process_tree")
            ),
            (ATTR_OPERATING_SYSTEM, RelayAttributeValue::Str("linux")),
        ]
    );
    assert_eq!(
        find("network.interface.transmit_errors").attributes(),
        [
            (ATTR_MEASUREMENT_SCOPE, RelayAttributeValue::Str("global")),
            (ATTR_INTERFACE_NAME, RelayAttributeValue::Str("lo")),
            (ATTR_OPERATING_SYSTEM, RelayAttributeValue::Str("linux")),
        ]
    );
    assert_eq!(
        find("process_sampling.field_sampled_count").attributes()[0],
        (ATTR_FIELD, RelayAttributeValue::Str("cpu.user_time"))
    );
}

#[test]
fn non_finite_decimals_are_left_out() {
    let mut snapshot = snapshot();
    if let Some(cpu) = snapshot.cpu.as_mut() {
        cpu.consumption_rate = Some(Measurement {
            value: MeasurementValue::Decimal(f64::NAN),
            unit: MeasurementUnit::LogicalProcessors,
        });
        cpu.effective_limit = Some(Measurement {
            value: MeasurementValue::Decimal(0.5),
            unit: MeasurementUnit::LogicalProcessors,
        });
    }
    let measurements = relay_measurements(&snapshot);
    assert!(!measurements
        .iter()
        .any(|m| short(m.name) == "cpu.consumption_rate"));
    let limit = measurements
        .iter()
        .find(|m| short(m.name) == "cpu.effective_limit")
        .unwrap();
    assert_eq!(limit.value, RelayValue::F64(0.5));
}

/// The fields of `T` flagged `relay` in the schema table that `table` (named `place`) does not
/// carry exactly once, as messages; records `T` as checked.
fn missing_marks<T: crate::snapshot::Section>(
    table: &[Field<T>],
    place: &str,
    checked: &mut Vec<&'static str>,
) -> Vec<String> {
    let section = T::INFO;
    checked.push(section.name);
    section
        .fields
        .iter()
        .filter(|field| field.relay)
        .filter_map(|field| {
            let lines = table.iter().filter(|line| line.field == field.name).count();
            (lines != 1).then(|| {
                format!(
                    "{}.{} is flagged `relay` in the schema table (relay-metrics/src/snapshot/mod.rs) \
                     but relay-metrics/src/output/relay_names/table.rs `{place}` has {lines} lines \
                     for it (want 1: its Relay name and description)",
                    section.name, field.name
                )
            })
        })
        .collect()
}

#[test]
fn every_field_flagged_relay_in_the_schema_table_has_one_mark() {
    use crate::snapshot::{AcceleratorDeviceMetrics, AcceleratorProcessMetrics, SECTIONS};
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    problems.extend(missing_marks(table::CPU, "CPU", &mut checked));
    problems.extend(missing_marks(
        table::LIMIT_EVENT,
        "LIMIT_EVENT",
        &mut checked,
    ));
    problems.extend(missing_marks(table::MEMORY, "MEMORY", &mut checked));
    problems.extend(missing_marks(table::PROCESS, "PROCESS", &mut checked));
    problems.extend(missing_marks(table::DISK, "DISK", &mut checked));
    problems.extend(missing_marks(table::FILESYSTEM, "FILESYSTEM", &mut checked));
    problems.extend(missing_marks::<AcceleratorProcessMetrics>(
        table::ACCELERATOR_PROCESS,
        "ACCELERATOR_PROCESS",
        &mut checked,
    ));
    problems.extend(missing_marks::<AcceleratorDeviceMetrics>(
        table::ACCELERATOR_DEVICE,
        "ACCELERATOR_DEVICE",
        &mut checked,
    ));
    problems.extend(missing_marks(
        table::NETWORK_SYSTEM,
        "NETWORK_SYSTEM",
        &mut checked,
    ));
    problems.extend(missing_marks(
        table::NETWORK_INTERFACE,
        "NETWORK_INTERFACE",
        &mut checked,
    ));
    for section in SECTIONS {
        let relay = section.fields.iter().filter(|field| field.relay);
        for field in relay {
            if !checked.contains(&section.name) {
                problems.push(format!(
                    "{}.{} is flagged `relay` in the schema table (relay-metrics/src/snapshot/mod.rs) \
                     but no table of relay-metrics/src/output/relay_names/table.rs covers {}",
                    section.name, field.name, section.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
