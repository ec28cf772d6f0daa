//! The schema table against its other homes that the compiler cannot see: the coverage keys
//! and the Python dataclasses (the package's public face, written by hand).

use crate::snapshot::{FieldUnit, COVERAGE_KEYS, SECTIONS};

const TABLE: &str = "relay-metrics/src/snapshot/mod.rs";
const PYTHON: &str = "relay-metrics-python/python/relay_metrics/resource_metrics.py";

/// The `@dataclass` classes of a Python module: name, then each annotated field and its
/// annotation, in order.
fn dataclasses(source: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut classes: Vec<(String, Vec<(String, String)>)> = Vec::new();
    let mut decorated = false;
    let mut inside = false;
    for line in source.lines() {
        if line.starts_with("@dataclass") {
            decorated = true;
            continue;
        }
        if let Some(rest) = line.strip_prefix("class ") {
            inside = decorated;
            decorated = false;
            if inside {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                classes.push((name, Vec::new()));
            }
            continue;
        }
        if !line.is_empty() && !line.starts_with(' ') {
            inside = false;
            decorated = false;
            continue;
        }
        let Some(body) = line.strip_prefix("    ") else {
            continue;
        };
        if !inside || body.starts_with(' ') {
            continue;
        }
        let Some((name, annotation)) = body.split_once(": ") else {
            continue;
        };
        if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let annotation = annotation.split(" = ").next().unwrap_or(annotation);
        if let Some((_, fields)) = classes.last_mut() {
            fields.push((name.to_owned(), annotation.trim().to_owned()));
        }
    }
    classes
}

/// Everything on which the schema table and the Python dataclasses disagree, one message each.
fn mismatches(source: &str) -> Vec<String> {
    let classes = dataclasses(source);
    let mut problems = Vec::new();
    for section in SECTIONS {
        let Some((_, python)) = classes.iter().find(|(name, _)| name == section.name) else {
            problems.push(format!(
                "{} is a section of the schema table ({TABLE}) but {PYTHON} has no dataclass {}",
                section.name, section.name
            ));
            continue;
        };
        for field in section.fields {
            let Some((_, annotation)) = python.iter().find(|(name, _)| name == field.name) else {
                problems.push(format!(
                    "{}.{} is in the schema table ({TABLE}) but not in the dataclass {} of {PYTHON}",
                    section.name, field.name, section.name
                ));
                continue;
            };
            match field.unit {
                Some(unit) => {
                    let wanted = format!(", {}] | None", unit.python_enum());
                    if !annotation.starts_with("ResourceMeasurement[")
                        || !annotation.ends_with(&wanted)
                    {
                        problems.push(format!(
                            "{}.{} is a {unit:?} measurement in the schema table ({TABLE}) but \
                             {PYTHON} annotates it `{annotation}` (want `ResourceMeasurement[…{wanted}`)",
                            section.name, field.name
                        ));
                    }
                }
                None if annotation.contains("ResourceMeasurement") => problems.push(format!(
                    "{}.{} is not a measurement in the schema table ({TABLE}) but {PYTHON} \
                     annotates it `{annotation}`",
                    section.name, field.name
                )),
                None => {}
            }
        }
        for (name, _) in python {
            if !section.fields.iter().any(|field| field.name == name) {
                problems.push(format!(
                    "{}.{name} is in the dataclass {} of {PYTHON} but not in the schema table ({TABLE})",
                    section.name, section.name
                ));
            }
        }
        let table_order: Vec<&str> = section.fields.iter().map(|field| field.name).collect();
        let python_order: Vec<&str> = python.iter().map(|(name, _)| name.as_str()).collect();
        if problems.is_empty() && table_order != python_order {
            problems.push(format!(
                "{}: the schema table ({TABLE}) orders the fields {table_order:?}, the dataclass in \
                 {PYTHON} {python_order:?} (Relay's order is the JSON's and the constructor's)",
                section.name
            ));
        }
    }
    for (name, _) in &classes {
        // The generic `{value, unit}` wrapper is every measurement field's type, not a section.
        if name != "ResourceMeasurement" && !SECTIONS.iter().any(|section| section.name == name) {
            problems.push(format!(
                "{PYTHON} has a dataclass {name} that is not a section of the schema table ({TABLE})"
            ));
        }
    }
    problems
}

fn python_source() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../relay-metrics-python/python/relay_metrics/resource_metrics.py"
    );
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("reading {path}: {error}"))
}

#[test]
fn the_python_dataclasses_match_the_schema_table_field_for_field() {
    let source = python_source();
    assert!(
        dataclasses(&source).len() > SECTIONS.len() / 2,
        "no dataclass parsed from {PYTHON}"
    );
    let problems = mismatches(&source);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The messages `edit` adds to those of the source as it is.
fn new_mismatches(source: &str, edit: impl Fn(&str) -> String) -> Vec<String> {
    let edited = edit(source);
    assert_ne!(edited, source, "the test's edit no longer applies");
    let before = mismatches(source);
    mismatches(&edited)
        .into_iter()
        .filter(|problem| !before.contains(problem))
        .collect()
}

#[test]
fn a_field_missing_on_either_side_is_named() {
    let source = python_source();
    let problems = new_mismatches(&source, |source| {
        source.replacen(
            "    throttled_time: ResourceMeasurement[int | float, DurationUnit] | None\n",
            "",
            1,
        )
    });
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("CpuMetrics.throttled_time is in the schema table"));

    let problems = new_mismatches(&source, |source| {
        source.replacen(
            "    limit_events: list[ResourceLimitEventCount]\n",
            "    limit_events: list[ResourceLimitEventCount]\n    spare: int\n",
            1,
        )
    });
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("CpuMetrics.spare is in the dataclass CpuMetrics"));

    let problems = new_mismatches(&source, |source| {
        source.replacen(
            "    read_data: ResourceMeasurement[int | float, DataUnit] | None\n",
            "    read_data: ResourceMeasurement[int | float, CapacityUnit] | None\n",
            1,
        )
    });
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].starts_with("DiskMetrics.read_data is a Data measurement"));
}

#[test]
fn coverage_keys_are_the_sampled_fields_sorted() {
    let mut keys: Vec<String> = SECTIONS
        .iter()
        .flat_map(|section| section.fields)
        .filter(|field| field.coverage.is_some())
        .map(|field| {
            let section = SECTIONS
                .iter()
                .find(|section| section.fields.contains(field))
                .map_or("", |section| section.path);
            format!("{section}.{}", field.name)
        })
        .collect();
    keys.sort();
    assert_eq!(keys, COVERAGE_KEYS);
}

#[test]
fn every_field_has_a_unique_name_and_flags_only_measurements() {
    for section in SECTIONS {
        for (index, field) in section.fields.iter().enumerate() {
            assert!(
                !section.fields[..index]
                    .iter()
                    .any(|other| other.name == field.name),
                "{}.{} twice",
                section.name,
                field.name
            );
            if field.unit.is_none() {
                assert!(
                    !field.relay && !field.metric && field.coverage.is_none(),
                    "{}.{} is flagged but is not a measurement",
                    section.name,
                    field.name
                );
            }
        }
    }
}

/// Whether `unit` is one of `family`'s units.
fn in_family(unit: crate::units::MeasurementUnit, family: FieldUnit) -> bool {
    use crate::units::{
        BandwidthUnit, CapacityUnit, CpuUnit, DataUnit, DurationUnit, MeasurementUnit as U,
        UtilizationUnit,
    };
    match family {
        FieldUnit::Duration => DurationUnit::from_measurement_unit(unit).is_some(),
        FieldUnit::Memory | FieldUnit::Capacity => {
            CapacityUnit::from_measurement_unit(unit).is_some()
        }
        FieldUnit::Data => DataUnit::from_measurement_unit(unit).is_some(),
        FieldUnit::Bandwidth => BandwidthUnit::from_measurement_unit(unit).is_some(),
        FieldUnit::Cpu => CpuUnit::from_measurement_unit(unit).is_some(),
        FieldUnit::Utilization => UtilizationUnit::from_measurement_unit(unit).is_some(),
        FieldUnit::Count => matches!(
            unit,
            U::Processes
                | U::Threads
                | U::FileDescriptors
                | U::Handles
                | U::Events
                | U::Operations
                | U::Packets
                | U::Errors
        ),
    }
}

/// Checks every object of `value` that is a section (its keys are exactly a section's fields)
/// against the table: each measurement's unit is of its field's family. Counts the sections
/// seen by name.
fn check_units(
    value: &serde_json::Value,
    at: &str,
    seen: &mut Vec<&'static str>,
    problems: &mut Vec<String>,
) {
    match value {
        serde_json::Value::Object(object) => {
            let section = SECTIONS.iter().find(|section| {
                section.fields.len() == object.len()
                    && section
                        .fields
                        .iter()
                        .all(|field| object.contains_key(field.name))
            });
            if let Some(section) = section {
                seen.push(section.name);
                for field in section.fields {
                    let (Some(family), Some(unit)) = (field.unit, object[field.name].get("unit"))
                    else {
                        continue;
                    };
                    let unit = serde_json::from_value(unit.clone());
                    if !unit.as_ref().is_ok_and(|unit| in_family(*unit, family)) {
                        problems.push(format!(
                            "{at}/{}: unit {unit:?} is not of the family the schema table ({TABLE}) \
                             gives {}.{} ({family:?})",
                            field.name, section.name, field.name
                        ));
                    }
                }
            }
            for (key, child) in object {
                check_units(child, &format!("{at}/{key}"), seen, problems);
            }
        }
        serde_json::Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                check_units(item, &format!("{at}/{index}"), seen, problems);
            }
        }
        _ => {}
    }
}

#[test]
fn the_golden_snapshots_units_are_of_their_fields_families() {
    let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/golden");
    let mut seen = Vec::new();
    let mut problems = Vec::new();
    let mut files = 0;
    for entry in std::fs::read_dir(golden).unwrap_or_else(|error| panic!("{golden}: {error}")) {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_none_or(|extension| extension != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a readable golden file");
        let value: serde_json::Value = serde_json::from_str(&text).expect("golden JSON");
        check_units(
            &value,
            &path.display().to_string(),
            &mut seen,
            &mut problems,
        );
        files += 1;
    }
    assert!(files > 5, "only {files} golden files in {golden}");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The goldens have no filesystem entries (a fixture tree has nothing to `statvfs`) and no
    // per-process accelerator records; every other section with measurements is checked.
    let unchecked = ["FilesystemCapacityMetrics", "AcceleratorProcessMetrics"];
    for section in SECTIONS {
        let measured = section.fields.iter().any(|field| field.unit.is_some());
        if measured && !unchecked.contains(&section.name) {
            assert!(
                seen.contains(&section.name),
                "no golden snapshot has a {}",
                section.name
            );
        }
    }
}
