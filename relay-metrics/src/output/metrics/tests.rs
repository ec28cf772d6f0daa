use super::*;
use crate::units::{CountUnit, CpuUnit, DataUnit, UtilizationUnit};
use crate::{Collector, ResourceMetricsConfig};

/// Records what a walk hands to its sink.
#[derive(Default)]
struct Recorder {
    begun: Vec<&'static str>,
    points: Vec<(&'static str, String, Number)>,
}

impl Sink for Recorder {
    fn begin(&mut self, family: &Family) {
        self.begun.push(family.name);
    }
    fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| match v {
                Label::Str(text) => format!("{k}={text}"),
                Label::Int(number) => format!("{k}#{number}"),
            })
            .collect();
        self.points.push((family.name, labels.join(","), value));
    }
    fn histogram(&mut self, family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram) {
        self.point(family, labels, Number::U64(histogram.count));
    }
}

#[test]
fn values_are_exported_in_base_units_whatever_the_configured_unit() {
    let ms = Measurement::integer(1500, DurationUnit::Milliseconds, DurationUnit::Milliseconds);
    assert_eq!(base(ms), 1.5);
    let minutes = Measurement::integer(2, DurationUnit::Minutes, DurationUnit::Minutes);
    assert_eq!(base(minutes), 120.0);
    let millicores = Measurement::decimal(250.0, CpuUnit::Millicores, CpuUnit::Millicores).unwrap();
    assert_eq!(base(millicores), 0.25);
    let percent = Measurement::decimal(
        25.0,
        UtilizationUnit::Percentage,
        UtilizationUnit::Percentage,
    )
    .unwrap();
    assert_eq!(base(percent), 0.25);
    let kib = Measurement::integer(3, CapacityUnit::Kibibytes, CapacityUnit::Kibibytes);
    assert_eq!(base(kib), 3072.0);
    // Data units share the capacities' names and factors.
    let mb = Measurement::integer(2, DataUnit::Megabytes, DataUnit::Megabytes);
    assert_eq!(base(mb), 2e6);
    let mbit = Measurement::integer(
        8,
        BandwidthUnit::MegabitsPerSecond,
        BandwidthUnit::MegabitsPerSecond,
    );
    assert_eq!(base(mbit), 1e6);
    assert_eq!(base(Measurement::count(7, CountUnit::Packets)), 7.0);
}

static EMPTY_DEF: Def<(Option<Measurement>, Option<Measurement>)> = Def {
    name: "m_bytes",
    kind: Kind::Counter,
    unit: Unit::Bytes,
    help: "help",
    series: &[
        Series {
            label: Some(("kind", "a")),
            get: |pair| pair.0,
            unit: Unit::Bytes,
            field: "a",
        },
        Series {
            label: Some(("kind", "b")),
            get: |pair| pair.1,
            unit: Unit::Bytes,
            field: "b",
        },
    ],
};

#[test]
fn only_finite_values_are_handed_over_and_empty_families_are_not_announced() {
    let bytes = |value: f64| Measurement::decimal(value, DataUnit::Bytes, DataUnit::Bytes);
    let mut recorder = Recorder::default();
    let mut writer = Writer {
        sink: &mut recorder,
        scope: Some("global"),
        names: MetricNames::RelayMetrics,
    };
    let none: &[(Option<Measurement>, Option<Measurement>)] = &[(None, None)];
    writer.section(std::slice::from_ref(&EMPTY_DEF), none, |_| []);
    assert!(recorder.begun.is_empty());
    let mut writer = Writer {
        sink: &mut recorder,
        scope: Some("global"),
        names: MetricNames::RelayMetrics,
    };
    let items = [
        (
            bytes(f64::NAN),
            Some(Measurement::count(2, CountUnit::Events)),
        ),
        (bytes(3.0), None),
    ];
    writer.section(std::slice::from_ref(&EMPTY_DEF), &items, |item| {
        [("item", Label::Int(item.1.map_or(9, |_| 1)))]
    });
    assert_eq!(recorder.begun, ["m_bytes"]);
    assert_eq!(
        recorder.points,
        [
            (
                "m_bytes",
                "scope=global,item#1,kind=b".to_owned(),
                Number::F64(2.0)
            ),
            (
                "m_bytes",
                "scope=global,item#9,kind=a".to_owned(),
                Number::F64(3.0)
            ),
        ]
    );
}

fn machine_snapshot(units: &str) -> std::sync::Arc<ResourceMetricsSnapshot> {
    let config = ResourceMetricsConfig::from_text(&format!(
        r#"{{"measurement_scope": "global", "disk": {{"filesystem_paths": ["/"]}},
            "extensions": {{"kernel_events": false}}, "units": {units}}}"#
    ))
    .unwrap();
    let mut collector = Collector::new(config).unwrap();
    collector.collect();
    collector.collect()
}

#[test]
fn relay_names_are_relays_measurements_grouped_by_name_in_the_configured_units() {
    let snapshot = machine_snapshot(
        r#"{"cpu": {"user_time": "seconds"}, "memory": {"system_total": "mebibytes"}}"#,
    );
    let mut recorder = Recorder::default();
    walk(&snapshot, MetricNames::Relay, &mut recorder);
    let measurements = relay_names::relay_measurements(&snapshot);
    assert_eq!(recorder.points.len(), measurements.len());
    // Each name announced once, and all its points follow it.
    let mut seen = std::collections::BTreeSet::new();
    for name in &recorder.begun {
        assert!(seen.insert(*name), "{name} announced twice");
        assert!(name.starts_with("nemo.relay.resource."), "{name}");
    }
    let mut last = "";
    for (name, _, _) in &recorder.points {
        if *name != last {
            assert_eq!(Some(name), recorder.begun.iter().find(|n| *n == name));
            last = name;
        }
    }
    // Every Relay measurement is there with its attributes and value type.
    for measurement in &measurements {
        let value = match measurement.value {
            RelayValue::U64(n) => Number::U64(n),
            RelayValue::F64(n) => Number::F64(n),
        };
        assert!(
            recorder
                .points
                .iter()
                .any(|(name, _, v)| *name == measurement.name && *v == value),
            "{measurement:?}"
        );
    }
    // The configured units, with Relay's value type: seconds are always f64, memory in MiB too.
    let user = recorder
        .points
        .iter()
        .find(|(name, _, _)| *name == "nemo.relay.resource.cpu.user_time")
        .unwrap();
    assert!(matches!(user.2, Number::F64(_)), "{user:?}");
    assert!(
        user.1
            .contains("nemo_relay.resource.measurement_scope=global"),
        "{user:?}"
    );
    let count = recorder
        .points
        .iter()
        .find(|(name, _, _)| *name == "nemo.relay.resource.sample_count")
        .unwrap();
    assert_eq!(count.2, Number::U64(1));
}

/// The fields of `T` flagged `metric` in the schema table that `table` (named `place`) does not
/// read exactly once, and the families whose series mix units, as messages; records `T` as
/// checked.
fn missing_families<T: crate::snapshot::Section>(
    table: &[Def<T>],
    place: &str,
    checked: &mut Vec<&'static str>,
) -> Vec<String> {
    let section = T::INFO;
    checked.push(section.name);
    let mut problems: Vec<String> = section
        .fields
        .iter()
        .filter(|field| field.metric)
        .filter_map(|field| {
            let series = table
                .iter()
                .flat_map(|def| def.series)
                .filter(|series| series.field == field.name)
                .count();
            (series != 1).then(|| {
                format!(
                    "{}.{} is flagged `metric` in the schema table (relay-metrics/src/snapshot/mod.rs) \
                     but relay-metrics/src/output/metrics/table.rs `{place}` reads it in {series} \
                     series (want 1: a family line with its name, kind and help)",
                    section.name, field.name
                )
            })
        })
        .collect();
    for def in table {
        for series in def.series.iter().filter(|series| series.unit != def.unit) {
            problems.push(format!(
                "relay-metrics/src/output/metrics/table.rs `{place}`: {} mixes units ({} is {:?}, \
                 the family {:?})",
                def.name, series.field, series.unit, def.unit
            ));
        }
    }
    problems
}

#[test]
fn every_field_flagged_metric_in_the_schema_table_has_one_series() {
    use crate::snapshot::{AcceleratorDeviceMetrics, AcceleratorProcessMetrics, SECTIONS};
    let mut checked = Vec::new();
    let mut problems = Vec::new();
    problems.extend(missing_families(table::CPU, "CPU", &mut checked));
    problems.extend(missing_families(table::MEMORY, "MEMORY", &mut checked));
    problems.extend(missing_families(
        table::LIMIT_EVENTS,
        "LIMIT_EVENTS",
        &mut checked,
    ));
    problems.extend(missing_families(table::PROCESS, "PROCESS", &mut checked));
    problems.extend(missing_families(table::DISK, "DISK", &mut checked));
    problems.extend(missing_families(
        table::FILESYSTEM,
        "FILESYSTEM",
        &mut checked,
    ));
    problems.extend(missing_families::<AcceleratorDeviceMetrics>(
        table::GPU_DEVICE,
        "GPU_DEVICE",
        &mut checked,
    ));
    problems.extend(missing_families::<AcceleratorProcessMetrics>(
        table::GPU_PROCESS,
        "GPU_PROCESS",
        &mut checked,
    ));
    problems.extend(missing_families(table::NETWORK, "NETWORK", &mut checked));
    for section in SECTIONS {
        for field in section.fields.iter().filter(|field| field.metric) {
            if !checked.contains(&section.name) {
                problems.push(format!(
                    "{}.{} is flagged `metric` in the schema table (relay-metrics/src/snapshot/mod.rs) \
                     but no table of relay-metrics/src/output/metrics/table.rs covers {}",
                    section.name, field.name, section.name
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn cpu_and_storage_counters_come_from_the_cumulative_totals_not_the_live_sums() {
    let mut snapshot = (*machine_snapshot("{}")).clone();
    let ms = |value| {
        Some(Measurement::integer(
            value,
            DurationUnit::Milliseconds,
            DurationUnit::Milliseconds,
        ))
    };
    let cpu = snapshot.cpu.as_mut().unwrap();
    // The live sums: what the processes alive now used (drops when one exits).
    cpu.user_time = ms(1);
    cpu.system_time = ms(2);
    let disk = snapshot.disk.as_mut().unwrap();
    disk.read_data = Some(Measurement::integer(5, DataUnit::Bytes, DataUnit::Bytes));
    let cumulative = snapshot
        .extensions
        .cumulative
        .get_or_insert_with(Default::default);
    cumulative.cpu_user_ns = Some(3_500_000_000);
    cumulative.cpu_system_ns = Some(250_000_000);
    cumulative.storage_read_bytes = Some(4096);
    cumulative.storage_write_bytes = None;
    let mut recorder = Recorder::default();
    walk(&snapshot, MetricNames::RelayMetrics, &mut recorder);
    let value = |name: &str| {
        recorder
            .points
            .iter()
            .find(|(family, _, _)| *family == name)
            .map(|(_, _, value)| *value)
    };
    assert_eq!(
        value("relay_metrics_cpu_user_seconds_total"),
        Some(Number::F64(3.5))
    );
    assert_eq!(
        value("relay_metrics_cpu_system_seconds_total"),
        Some(Number::F64(0.25))
    );
    assert_eq!(
        value("relay_metrics_disk_read_bytes_total"),
        Some(Number::F64(4096.0))
    );
    // A total the source does not have is not exported (never the live sum instead).
    assert_eq!(value("relay_metrics_disk_written_bytes_total"), None);
    // Without cumulative totals, no CPU or storage counter at all.
    snapshot.extensions.cumulative = None;
    let mut recorder = Recorder::default();
    walk(&snapshot, MetricNames::RelayMetrics, &mut recorder);
    assert!(recorder
        .begun
        .iter()
        .all(|name| !name.starts_with("relay_metrics_cpu_user")
            && !name.starts_with("relay_metrics_disk_read_bytes_total")));
}

#[test]
fn every_counter_family_has_a_monotonic_source() {
    // The families typed counter, by name: each is listed in docs/METRICS.md's audit with its
    // source; a new counter must be added there (and here) deliberately.
    fn kinds<T>(defs: &[Def<T>]) -> impl Iterator<Item = (&'static str, Kind)> + '_ {
        defs.iter().map(|def| (def.name, def.kind))
    }
    let counters: Vec<&str> = kinds(table::CPU)
        .chain(kinds(table::CUMULATIVE_CPU))
        .chain(kinds(table::MEMORY))
        .chain(kinds(table::LIMIT_EVENTS))
        .chain(kinds(table::PROCESS))
        .chain(kinds(table::DISK))
        .chain(kinds(table::CUMULATIVE_DISK))
        .chain(kinds(table::FILESYSTEM))
        .chain(kinds(table::GPU_DEVICE))
        .chain(kinds(table::GPU_PROCESS))
        .chain(kinds(table::NETWORK))
        .chain(kinds(table::SAMPLING))
        .chain(kinds(table::COLLECTOR))
        .filter(|(_, kind)| *kind == Kind::Counter)
        .map(|(name, _)| name)
        .collect();
    let audit = include_str!("../../../../docs/METRICS.md");
    for name in &counters {
        assert!(
            audit.contains(&format!("`{name}` | counter")),
            "{name} is a counter but docs/METRICS.md's audit does not list it as one"
        );
    }
    for name in [
        "relay_metrics_disk_read_syscalls",
        "relay_metrics_processes",
        "relay_metrics_threads",
    ] {
        assert!(!counters.contains(&name), "{name} is a live sum: a gauge");
    }
}

/// The families fed by `extensions` (the collector's, the cumulative CPU and disk counters)
/// read numbers of its values table: each series' value, in the family's base unit, is one
/// row's, converted.
#[test]
fn the_families_of_extensions_read_rows_of_its_values_table_in_their_base_unit() {
    use crate::snapshot::{distinct, Cumulative, Extensions, EXTENSION_VALUES};
    let template = Extensions {
        cumulative: Some(Cumulative::default()),
        ..Extensions::default()
    };
    // Only the rows' numbers, so that the text and flags stay `null`.
    let (extensions, _) = distinct(&template, |path| {
        EXTENSION_VALUES.iter().all(|row| row.json_path != path)
    });
    let cumulative = extensions.cumulative.clone().unwrap();
    let mut exported = Vec::new();
    let mut add = |name: &'static str, unit: Unit, value: Option<Measurement>| {
        exported.push((name, unit, base(value.unwrap())));
    };
    for def in table::COLLECTOR {
        for series in def.series {
            add(def.name, def.unit, (series.get)(&extensions.collector));
        }
    }
    for def in table::CUMULATIVE_CPU.iter().chain(table::CUMULATIVE_DISK) {
        for series in def.series {
            add(def.name, def.unit, (series.get)(&cumulative));
        }
    }
    assert_eq!(exported.len(), 6, "{exported:?}");
    for (name, unit, value) in exported {
        let rows: Vec<_> = EXTENSION_VALUES
            .iter()
            .filter(|row| {
                let (base_unit, divisor) = Unit::base_of(row.unit);
                let number = (row.read)(&extensions).map(|v| v / divisor);
                base_unit == unit && number.is_some_and(|n| (n - value).abs() <= value * 1e-12)
            })
            .map(|row| row.json_path)
            .collect();
        assert_eq!(
            rows.len(),
            1,
            "{name} exports {value} ({unit:?}), the value of {rows:?} in the values table of \
             `extensions` (relay-metrics/src/snapshot/extension_values.rs): want one row"
        );
        // The doc's line names the value the family reads, first in its source column.
        let doc = include_str!("../../../../docs/METRICS.md");
        let line = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")));
        let source = line.and_then(|l| l.split(" | ").nth(2));
        assert!(
            source.is_some_and(|s| s.starts_with(&format!("`extensions.{}`", rows[0]))),
            "docs/METRICS.md's line of {name} does not begin its source with `extensions.{}`, \
             the value it reads: {line:?}",
            rows[0]
        );
    }
}
