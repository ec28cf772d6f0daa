//! Relay's wire rules checked on every case: fields, measurements, units, nulls.

use serde_json::{json, Value};

use crate::support::*;

pub(crate) const CPU_FIELDS: &[&str] = &[
    "user_time",
    "system_time",
    "total_time",
    "consumption_rate",
    "throttled_time",
    "effective_limit",
    "some_pressure_stall_time",
    "full_pressure_stall_time",
    "limit_events",
];
pub(crate) const MEMORY_FIELDS: &[&str] = &[
    "system_used",
    "system_total",
    "system_available",
    "resident",
    "private",
    "physical_footprint",
    "virtual_memory",
    "peak_resident",
    "limit",
    "environment_accounted",
    "some_pressure_stall_time",
    "full_pressure_stall_time",
    "out_of_memory_event_count",
    "limit_events",
];
pub(crate) const PROCESS_FIELDS: &[&str] = &[
    "active_count",
    "descendant_count",
    "thread_count",
    "lifetime_creation_count",
    "open_file_descriptor_count",
    "windows_handle_count",
    "limit_events",
];
pub(crate) const DISK_FIELDS: &[&str] = &[
    "read_data",
    "write_data",
    "read_throughput",
    "write_throughput",
    "read_operations",
    "write_operations",
    "filesystems",
];
pub(crate) const GPU_FIELDS: &[&str] = &["device_metrics", "process_metrics"];
pub(crate) const NETWORK_FIELDS: &[&str] = &["measurement_scope", "system", "interfaces"];
pub(crate) const TRAFFIC_FIELDS: &[&str] = &[
    "received_data",
    "transmitted_data",
    "receive_throughput",
    "transmit_throughput",
    "received_packets",
    "transmitted_packets",
    "receive_errors",
    "transmit_errors",
];

/// Relay's default unit of every measurement field, by path pattern (`*` = one array index).
pub(crate) fn default_unit(path: &str) -> Option<&'static str> {
    let field = path.rsplit('/').next().unwrap();
    let category = path.split('/').nth(1).unwrap();
    Some(match (category, field) {
        (_, "count") => "events",
        ("cpu", "consumption_rate" | "effective_limit") => "logical_processors",
        ("cpu" | "memory", f) if f.ends_with("_time") => "milliseconds",
        ("memory", "out_of_memory_event_count") => "events",
        ("memory", _) => "kibibytes",
        ("process", "thread_count") => "threads",
        ("process", "open_file_descriptor_count") => "file_descriptors",
        ("process", "windows_handle_count") => "handles",
        ("process", _) => "processes",
        ("disk", "read_data" | "write_data") => "bytes",
        ("disk", "read_throughput" | "write_throughput") => "bytes_per_second",
        ("disk", "read_operations" | "write_operations") => "operations",
        ("disk", _) => "bytes",
        ("gpu", "memory_used") => "kibibytes",
        ("gpu", "compute_utilization") => "percentage",
        ("network", "received_data" | "transmitted_data") => "bytes",
        ("network", "receive_throughput" | "transmit_throughput") => "bytes_per_second",
        ("network", "received_packets" | "transmitted_packets") => "packets",
        ("network", "receive_errors" | "transmit_errors") => "errors",
        _ => return None,
    })
}

/// The unit a case configured for `path`, if it changed the default.
pub(crate) fn configured_unit(config: &Value, path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').skip(1).collect();
    let (category, field) = (parts[0], *parts.last().unwrap());
    let units = config.get("units")?;
    let key = match (category, parts.as_slice()) {
        ("network", [_, "system", ..]) => units.pointer(&format!("/network/system/{field}")),
        ("network", _) => units.pointer(&format!("/network/interface/{field}")),
        ("disk", [_, "filesystems", ..]) => units.pointer(&format!("/disk/filesystem_{field}")),
        ("gpu", [_, group, ..]) => {
            let prefix = if *group == "device_metrics" {
                "device"
            } else {
                "process"
            };
            units.pointer(&format!("/gpu/{prefix}_{field}"))
        }
        _ => units.pointer(&format!("/{category}/{field}")),
    }?;
    key.as_str().map(str::to_string)
}

/// The object at `pointer` has exactly `expected` keys, in that (wire) order.
#[track_caller]
pub(crate) fn assert_keys(snap: &Snap, pointer: &str, expected: &[&str], what: &str) {
    let value = at(snap, pointer);
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap_or_else(|| panic!("{what}: {pointer} is not an object: {value}"))
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut sorted = expected.to_vec();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "{what}: fields of {pointer}");
    if let Some(order) = snap.orders.get(pointer) {
        assert_eq!(order, expected, "{what}: order of the fields of {pointer}");
    }
}

/// A measurement slot: `null` or exactly `{value, unit}` with a number and the expected unit.
#[track_caller]
pub(crate) fn assert_measurement(snap: &Snap, path: &str, config: &Value, case: &str) {
    let m = at(snap, path);
    if m.is_null() {
        return;
    }
    assert_keys(snap, path, &["value", "unit"], case);
    assert!(m["value"].is_number(), "{case}: {path} value {m}");
    let expected = configured_unit(config, path)
        .or_else(|| default_unit(path).map(str::to_string))
        .unwrap_or_else(|| panic!("no known unit for {path}"));
    assert_eq!(m["unit"], expected.as_str(), "{case}: unit of {path}");
}

pub(crate) fn enabled(config: &Value, category: &str) -> bool {
    config[category]["enabled"].as_bool().unwrap_or(true)
}

pub(crate) const DEVICE_FIELDS: &[&str] = &[
    "vendor",
    "device_identifier",
    "device_index",
    "memory_used",
    "compute_utilization",
];
pub(crate) const GPU_PROCESS_FIELDS: &[&str] = &[
    "vendor",
    "device_identifier",
    "device_index",
    "process_id",
    "memory_used",
    "compute_utilization",
];

pub(crate) fn indices(snap: &Snap, pointer: &str) -> std::ops::Range<usize> {
    0..at(snap, pointer).as_array().map_or(0, Vec::len)
}

pub(crate) fn assert_traffic(snap: &Snap, pointer: &str, config: &Value, case: &str) {
    assert_keys(snap, pointer, TRAFFIC_FIELDS, case);
    for field in TRAFFIC_FIELDS {
        assert_measurement(snap, &format!("{pointer}/{field}"), config, case);
    }
}

/// Relay's wire rules (0.10.4): every field of every enabled category, in order;
/// measurements exactly `{value, unit}` in the configured or default unit; disabled categories
/// `null`.
pub(crate) fn assert_shape(snap: &Snap, config: &Value, case: &str) {
    assert_keys(
        snap,
        "",
        &[
            "timestamp",
            "operating_system",
            "measurement_scope",
            "process_sampling",
            "cpu",
            "memory",
            "process",
            "disk",
            "gpu",
            "network",
            "extensions",
        ],
        case,
    );
    assert_eq!(snap["operating_system"], "linux");
    if !snap["process_sampling"].is_null() {
        assert_keys(
            snap,
            "/process_sampling",
            &[
                "visible_processes",
                "sampled_processes",
                "field_sampled_processes",
            ],
            case,
        );
    }
    let categories: [(&str, &[&str]); 6] = [
        ("cpu", CPU_FIELDS),
        ("memory", MEMORY_FIELDS),
        ("process", PROCESS_FIELDS),
        ("disk", DISK_FIELDS),
        ("gpu", GPU_FIELDS),
        ("network", NETWORK_FIELDS),
    ];
    for (category, fields) in categories {
        let pointer = format!("/{category}");
        if !enabled(config, category) {
            assert!(
                snap[category].is_null(),
                "{case}: disabled {category} must be null"
            );
            continue;
        }
        assert_keys(snap, &pointer, fields, case);
        for field in fields.iter().filter(|f| {
            !matches!(
                **f,
                "limit_events"
                    | "filesystems"
                    | "device_metrics"
                    | "process_metrics"
                    | "measurement_scope"
                    | "system"
                    | "interfaces"
            )
        }) {
            assert_measurement(snap, &format!("{pointer}/{field}"), config, case);
        }
        if fields.contains(&"limit_events") {
            for i in indices(snap, &format!("{pointer}/limit_events")) {
                let event = format!("{pointer}/limit_events/{i}");
                assert_keys(snap, &event, &["resource", "event", "count"], case);
                assert_measurement(snap, &format!("{event}/count"), config, case);
            }
        }
        match category {
            "disk" => {
                for i in indices(snap, "/disk/filesystems") {
                    let fs = format!("/disk/filesystems/{i}");
                    let capacities = ["total_capacity", "available_capacity", "free_capacity"];
                    let mut keys = vec!["path"];
                    keys.extend(capacities);
                    assert_keys(snap, &fs, &keys, case);
                    for field in capacities {
                        assert_measurement(snap, &format!("{fs}/{field}"), config, case);
                    }
                }
            }
            "gpu" => {
                for (group, record_fields) in [
                    ("device_metrics", DEVICE_FIELDS),
                    ("process_metrics", GPU_PROCESS_FIELDS),
                ] {
                    for i in indices(snap, &format!("/gpu/{group}")) {
                        let record = format!("/gpu/{group}/{i}");
                        assert_keys(snap, &record, record_fields, case);
                        for field in ["memory_used", "compute_utilization"] {
                            assert_measurement(snap, &format!("{record}/{field}"), config, case);
                        }
                    }
                }
            }
            "network" => {
                assert_eq!(snap["network"]["measurement_scope"], "global");
                assert_traffic(snap, "/network/system", config, case);
                for i in indices(snap, "/network/interfaces") {
                    let interface = format!("/network/interfaces/{i}");
                    assert_keys(snap, &interface, &["name", "traffic"], case);
                    assert_traffic(snap, &format!("{interface}/traffic"), config, case);
                }
            }
            _ => {}
        }
    }
    // Any other object with a `value` or `unit` key must be exactly a measurement.
    assert_no_loose_measurements(snap, "", case);
}

pub(crate) fn assert_no_loose_measurements(value: &Value, path: &str, case: &str) {
    match value {
        Value::Object(map) => {
            if map.contains_key("value") || map.contains_key("unit") {
                let mut keys: Vec<&String> = map.keys().collect();
                keys.sort_unstable();
                assert_eq!(keys, ["unit", "value"], "{case}: measurement at {path}");
            }
            for (key, v) in map {
                assert_no_loose_measurements(v, &format!("{path}/{key}"), case);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                assert_no_loose_measurements(v, &format!("{path}/{i}"), case);
            }
        }
        _ => {}
    }
}

/// Relay's wire rules on every case: field sets and order, `{value, unit}` measurements, `null`
/// for disabled categories, Relay's default units wherever the case did not choose one.
#[test]
pub(crate) fn every_case_has_relays_shape() {
    for name in CASES {
        let case = case(name);
        let s = run(&case);
        assert_shape(&s, &case.config, name);
    }
}

/// The shape checker itself: it must reject a wrong unit, an extra key, a missing field, a bare
/// number instead of a measurement and a wrong key order.
#[test]
pub(crate) fn shape_checker_rejects_broken_snapshots() {
    let case = case("process_tree");
    let good = run(&case);
    assert_shape(&good, &case.config, "good");
    let broken: [fn(&mut Snap); 5] = [
        |s| s.value["memory"]["resident"]["unit"] = json!("bytes"),
        |s| s.value["cpu"]["user_time"]["status"] = json!("ok"),
        |s| {
            s.value["disk"]
                .as_object_mut()
                .unwrap()
                .remove("write_data");
        },
        |s| s.value["network"]["system"]["received_data"] = json!(5),
        |s| s.orders.get_mut("/cpu").unwrap().swap(0, 1),
    ];
    for (i, breaks) in broken.iter().enumerate() {
        let mut s = good.clone();
        breaks(&mut s);
        let result = std::panic::catch_unwind(|| assert_shape(&s, &case.config, "broken"));
        assert!(
            result.is_err(),
            "broken snapshot {i} passed the shape check"
        );
    }
}

// ------------------------------------------------------------------------------------------
// Rates over two collections
// ------------------------------------------------------------------------------------------
