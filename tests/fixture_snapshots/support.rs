//! Cases, collection, golden comparison and JSON accessors shared by the fixture tests.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

use relay_metrics::{ResourceMetricsConfig, ResourceMetricsSnapshot};
use serde_json::{json, Value};

/// Where the GPU case looks for NVML: a path that cannot exist, so the load fails the same way on
/// every machine (with or without an NVIDIA driver).
pub(crate) const MISSING_NVML: &str = "/nonexistent/relay-metrics-golden/libnvidia-ml.so.1";

pub(crate) fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

pub(crate) fn fixture(name: &str) -> PathBuf {
    repo_path("tests/fixtures").join(name)
}

/// The fixtures encode rss in 4096-byte pages and CPU time in 1/100 s ticks.
pub(crate) fn assert_machine_matches_fixtures() {
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    // SAFETY: as above.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    assert_eq!(page, 4096, "the fixtures assume a 4096-byte page");
    assert_eq!(ticks, 100, "the fixtures assume 100 clock ticks per second");
}

/// Points NVML at a missing library, once for the whole test binary and before any collector
/// exists (only GPU-enabled collectors read the variable, when they are created).
pub(crate) fn nvml_env() {
    static SET: Once = Once::new();
    SET.call_once(|| std::env::set_var("RELAY_METRICS_NVML_LIBRARY", MISSING_NVML));
}

// ------------------------------------------------------------------------------------------
// Cases
// ------------------------------------------------------------------------------------------

/// One golden case: a fixture tree, a configuration, and how many snapshots to take (the last
/// one is compared).
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) fixture: &'static str,
    pub(crate) config: Value,
    pub(crate) collections: usize,
}

/// Merges `patch` into `base` (objects recursively, anything else replaced).
pub(crate) fn merge(base: &mut Value, patch: Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                merge(base.entry(key).or_insert(Value::Null), value);
            }
        }
        (base, patch) => *base = patch,
    }
}

/// Every category on except the GPU, plus `patch`.
pub(crate) fn config(patch: Value) -> Value {
    let mut config = json!({
        "cpu": {"enabled": true},
        "memory": {"enabled": true},
        "process": {"enabled": true},
        "disk": {"enabled": true, "process_io": true},
        "gpu": {"enabled": false},
        "network": {"enabled": true},
        "extensions": {"kernel_events": false},
    });
    merge(&mut config, patch);
    config
}

pub(crate) fn case(name: &'static str) -> Case {
    // The GPU cases: the global scope with every other category off.
    let gpu_only = || {
        config(json!({
            "measurement_scope": "global",
            "cpu": {"enabled": false},
            "memory": {"enabled": false},
            "process": {"enabled": false},
            "disk": {"enabled": false},
            "network": {"enabled": false},
            "gpu": {"enabled": true},
        }))
    };
    let (fixture, config, collections) = match name {
        "cgroup_v2_relay_test" => (
            "cgroup-v2",
            config(json!({"measurement_scope": "cgroup", "cgroup_path": "/relay-test"})),
            1,
        ),
        "cgroup_v1_relay_test" => (
            "cgroup-v1",
            config(json!({"measurement_scope": "cgroup", "cgroup_path": "/relay-test"})),
            1,
        ),
        "cgroup_hybrid_relay_test" => (
            "cgroup-hybrid",
            config(json!({"measurement_scope": "cgroup", "cgroup_path": "/relay-test"})),
            1,
        ),
        "process_tree" => (
            "global-small",
            config(json!({"measurement_scope": "process_tree", "root_pid": 100})),
            1,
        ),
        "process_tree_cgroup_v2" => (
            "cgroup-v2",
            config(json!({"measurement_scope": "process_tree", "root_pid": 4242})),
            1,
        ),
        "application_process" => (
            "global-small",
            config(json!({"measurement_scope": "application_process", "root_pid": 100})),
            1,
        ),
        "global_small" => (
            "global-small",
            config(json!({"measurement_scope": "global"})),
            1,
        ),
        "disabled_categories" => (
            "global-small",
            config(json!({
                "measurement_scope": "process_tree",
                "root_pid": 100,
                "cpu": {"enabled": false},
                "disk": {"enabled": false},
                "network": {"enabled": false},
            })),
            1,
        ),
        "units" => (
            "global-small",
            config(json!({
                "measurement_scope": "process_tree",
                "root_pid": 100,
                "gpu": {"enabled": true},
                "units": {
                    "cpu": {
                        "user_time": "seconds",
                        "system_time": "seconds",
                        "total_time": "seconds",
                        "throttled_time": "seconds",
                        "some_pressure_stall_time": "seconds",
                        "consumption_rate": "millicores",
                        "effective_limit": "millicores",
                    },
                    "memory": {
                        "system_total": "mebibytes",
                        "resident": "mebibytes",
                        "private": "mebibytes",
                        "virtual_memory": "mebibytes",
                        "limit": "mebibytes",
                        "environment_accounted": "mebibytes",
                    },
                    "disk": {"read_data": "kibibytes", "read_throughput": "megabits_per_second"},
                    "gpu": {
                        "device_memory_used": "gibibytes",
                        "device_compute_utilization": "fraction",
                    },
                    "network": {
                        "system": {"receive_throughput": "megabits_per_second"},
                        "interface": {"received_data": "kilobytes"},
                    },
                },
            })),
            // The second snapshot has rates (all 0 over unchanged files), so the throughput and
            // consumption units show.
            2,
        ),
        "gpu_missing_nvml" => ("global-small", gpu_only(), 1),
        "gpu_drm_clients" => ("drm-clients", gpu_only(), 1),
        other => panic!("unknown case {other}"),
    };
    Case {
        name,
        fixture,
        config,
        collections,
    }
}

pub(crate) const CASES: &[&str] = &[
    "cgroup_v2_relay_test",
    "cgroup_v1_relay_test",
    "cgroup_hybrid_relay_test",
    "process_tree",
    "process_tree_cgroup_v2",
    "application_process",
    "global_small",
    "disabled_categories",
    "units",
    "gpu_missing_nvml",
    "gpu_drm_clients",
];

/// A collected snapshot, masked: as a JSON value for lookups, as text in wire order (for the
/// golden file), and with the key order of every object (serde_json's `Value` sorts keys).
#[derive(Clone)]
pub(crate) struct Snap {
    pub(crate) value: Value,
    pub(crate) text: String,
    pub(crate) orders: HashMap<String, Vec<String>>,
}

impl std::ops::Deref for Snap {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

impl Snap {
    /// Masks what depends on wall time or on where the checkout lives.
    pub(crate) fn new(snapshot: &ResourceMetricsSnapshot, base: &Path) -> Self {
        Self::masking(snapshot, base, &[])
    }

    /// As [`Snap::new`], masking also the values at `more` (JSON pointers).
    pub(crate) fn masking(snapshot: &ResourceMetricsSnapshot, base: &Path, more: &[&str]) -> Self {
        let text = serde_json::to_string(snapshot).unwrap();
        let mut ordered: Ordered = serde_json::from_str(&text).unwrap();
        for pointer in [
            "/timestamp",
            "/extensions/collector/collect_duration_usec",
            "/extensions/collector/version",
            "/extensions/sample_ages",
            "/extensions/cumulative/since",
        ]
        .iter()
        .chain(more)
        {
            *ordered.get_mut(pointer).unwrap() = Ordered::Leaf(json!("<masked>"));
        }
        ordered.replace_strings(&base.display().to_string(), "<fixture>");
        let mut orders = HashMap::new();
        ordered.collect_orders(String::new(), &mut orders);
        Self {
            value: ordered.to_value(),
            text: serde_json::to_string_pretty(&ordered).unwrap() + "\n",
            orders,
        }
    }
}

/// A JSON value that keeps the key order of objects.
#[derive(Clone, Debug)]
pub(crate) enum Ordered {
    Leaf(Value),
    Array(Vec<Ordered>),
    Object(Vec<(String, Ordered)>),
}

impl Ordered {
    pub(crate) fn get_mut(&mut self, pointer: &str) -> Option<&mut Ordered> {
        pointer
            .split('/')
            .skip(1)
            .try_fold(self, |node, token| match node {
                Ordered::Object(entries) => entries
                    .iter_mut()
                    .find(|(key, _)| key == token)
                    .map(|(_, v)| v),
                Ordered::Array(items) => items.get_mut(token.parse::<usize>().ok()?),
                Ordered::Leaf(_) => None,
            })
    }

    pub(crate) fn replace_strings(&mut self, from: &str, to: &str) {
        match self {
            Ordered::Leaf(Value::String(text)) => *text = text.replace(from, to),
            Ordered::Leaf(_) => {}
            Ordered::Array(items) => items.iter_mut().for_each(|v| v.replace_strings(from, to)),
            Ordered::Object(entries) => entries
                .iter_mut()
                .for_each(|(_, v)| v.replace_strings(from, to)),
        }
    }

    pub(crate) fn collect_orders(&self, at: String, orders: &mut HashMap<String, Vec<String>>) {
        match self {
            Ordered::Leaf(_) => {}
            Ordered::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    item.collect_orders(format!("{at}/{i}"), orders);
                }
            }
            Ordered::Object(entries) => {
                orders.insert(at.clone(), entries.iter().map(|(k, _)| k.clone()).collect());
                for (key, value) in entries {
                    value.collect_orders(format!("{at}/{key}"), orders);
                }
            }
        }
    }

    pub(crate) fn to_value(&self) -> Value {
        match self {
            Ordered::Leaf(value) => value.clone(),
            Ordered::Array(items) => Value::Array(items.iter().map(Ordered::to_value).collect()),
            Ordered::Object(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

impl serde::Serialize for Ordered {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            Ordered::Leaf(value) => value.serialize(serializer),
            Ordered::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Ordered::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> serde::Deserialize<'de> for Ordered {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, v: bool) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::Bool(v)))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::from(v)))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::from(v)))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::from(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::String(v.to_string())))
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::Null))
            }
            fn visit_none<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Leaf(Value::Null))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Ordered, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Ordered::Array(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Ordered, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Ordered>()? {
                    entries.push(entry);
                }
                Ok(Ordered::Object(entries))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// Collects a case; returns its last snapshot, masked.
pub(crate) fn run(case: &Case) -> Snap {
    let base = fixture(case.fixture);
    assert_machine_matches_fixtures();
    nvml_env();
    let config = ResourceMetricsConfig::from_value(case.config.clone()).expect("valid config");
    let mut collector = relay_metrics::internals::collector_with_roots(
        config,
        relay_metrics::internals::Roots::fixture(&base),
    )
    .unwrap();
    let mut snapshot = collector.collect();
    for _ in 1..case.collections {
        // Rates need a later instant than the baseline.
        std::thread::sleep(Duration::from_millis(20));
        snapshot = collector.collect();
    }
    Snap::new(&snapshot, &base)
}

/// Compares with `tests/golden/<name>.json`, or rewrites it when `UPDATE_GOLDEN=1`.
pub(crate) fn check_golden(name: &str, snap: &Snap) {
    let path = repo_path("tests/golden").join(format!("{name}.json"));
    let (actual, text) = (&snap.value, &snap.text);
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        eprintln!("UPDATE_GOLDEN=1: rewrote {}", path.display());
        return;
    }
    let expected_text = std::fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "cannot read golden file {} ({error}); create it with UPDATE_GOLDEN=1",
            path.display()
        )
    });
    let expected: Value = serde_json::from_str(&expected_text).unwrap();
    if &expected != actual {
        let first = first_difference(&expected, actual, String::new())
            .unwrap_or_else(|| "(no single difference found)".into());
        panic!(
            "snapshot differs from golden file {}\nfirst difference: {first}\nactual:\n{text}\n\
             rerun with UPDATE_GOLDEN=1 if the change is intended, and review the diff",
            path.display()
        );
    }
}

pub(crate) fn first_difference(expected: &Value, actual: &Value, at: String) -> Option<String> {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            let keys: BTreeSet<&String> = e.keys().chain(a.keys()).collect();
            keys.into_iter().find_map(|key| {
                let path = format!("{at}/{key}");
                match (e.get(key), a.get(key)) {
                    (Some(e), Some(a)) => first_difference(e, a, path),
                    (e, a) => Some(format!("{path}: expected {e:?}, got {a:?}")),
                }
            })
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => e
            .iter()
            .zip(a)
            .enumerate()
            .find_map(|(i, (e, a))| first_difference(e, a, format!("{at}/{i}"))),
        (e, a) if e == a => None,
        (e, a) => Some(format!("{at}: expected {e}, got {a}")),
    }
}

// ------------------------------------------------------------------------------------------
// Reading values
// ------------------------------------------------------------------------------------------

#[track_caller]
pub(crate) fn at<'v>(snapshot: &'v Value, pointer: &str) -> &'v Value {
    snapshot
        .pointer(pointer)
        .unwrap_or_else(|| panic!("{pointer} is missing"))
}

/// The value of the measurement at `pointer`, read with `read` once its unit is asserted.
#[track_caller]
fn measured<T>(
    snapshot: &Value,
    pointer: &str,
    unit: &str,
    read: fn(&Value) -> Option<T>,
    what: &str,
) -> T {
    let m = at(snapshot, pointer);
    assert_eq!(m["unit"], unit, "unit of {pointer}");
    read(&m["value"]).unwrap_or_else(|| panic!("{pointer} is not {what}: {m}"))
}

/// An integer measurement: asserts its unit and returns its value.
#[track_caller]
pub(crate) fn int(snapshot: &Value, pointer: &str, unit: &str) -> u64 {
    measured(snapshot, pointer, unit, Value::as_u64, "an integer")
}

/// Any numeric measurement as f64: asserts its unit.
#[track_caller]
pub(crate) fn num(snapshot: &Value, pointer: &str, unit: &str) -> f64 {
    measured(snapshot, pointer, unit, Value::as_f64, "a number")
}

#[track_caller]
pub(crate) fn is_null(snapshot: &Value, pointer: &str) {
    assert!(
        at(snapshot, pointer).is_null(),
        "{pointer} should be null, is {}",
        at(snapshot, pointer)
    );
}

#[track_caller]
pub(crate) fn assert_close(actual: f64, expected: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= 1e-9 * expected.abs().max(1.0),
        "{what}: expected {expected}, got {actual}"
    );
}

/// `limit_events` of a category as (resource, event, count) triples in wire order.
pub(crate) fn limit_events(snapshot: &Value, category: &str) -> Vec<(String, String, u64)> {
    at(snapshot, &format!("/{category}/limit_events"))
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(e["count"]["unit"], "events");
            (
                e["resource"].as_str().unwrap().to_string(),
                e["event"].as_str().unwrap().to_string(),
                e["count"]["value"].as_u64().unwrap(),
            )
        })
        .collect()
}

pub(crate) fn events(list: &[(&str, &str, u64)]) -> Vec<(String, String, u64)> {
    list.iter()
        .map(|(r, e, c)| (r.to_string(), e.to_string(), *c))
        .collect()
}

pub(crate) fn field_counts(snapshot: &Value) -> Vec<(String, u64)> {
    at(snapshot, "/process_sampling/field_sampled_processes")
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect()
}

pub(crate) fn counts(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = list.iter().map(|(k, c)| (k.to_string(), *c)).collect();
    v.sort();
    v
}

pub(crate) fn unavailable_fields(snapshot: &Value) -> Vec<String> {
    at(snapshot, "/extensions/unavailable")
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["field"].as_str().unwrap().to_string())
        .collect()
}

/// System memory and network values: the same files in every tree.
#[track_caller]
pub(crate) fn assert_system_values(s: &Value) {
    if !at(s, "/memory").is_null() {
        assert_eq!(int(s, "/memory/system_total", "kibibytes"), 8_388_608);
        assert_eq!(int(s, "/memory/system_available", "kibibytes"), 6_291_456);
        assert_eq!(int(s, "/memory/system_used", "kibibytes"), 2_097_152);
    }
    if !at(s, "/network").is_null() {
        assert_eq!(at(s, "/network/measurement_scope"), "global");
        assert_eq!(int(s, "/network/system/received_data", "bytes"), 1_001_000);
        assert_eq!(int(s, "/network/system/transmitted_data", "bytes"), 501_000);
        assert_eq!(int(s, "/network/system/received_packets", "packets"), 1010);
        assert_eq!(
            int(s, "/network/system/transmitted_packets", "packets"),
            510
        );
        assert_eq!(int(s, "/network/system/receive_errors", "errors"), 2);
        assert_eq!(int(s, "/network/system/transmit_errors", "errors"), 1);
        let names: Vec<&str> = at(s, "/network/interfaces")
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["eth0", "lo"], "interfaces sorted by name");
        assert_eq!(
            int(s, "/network/interfaces/0/traffic/received_data", "bytes"),
            1_000_000
        );
        assert_eq!(
            int(
                s,
                "/network/interfaces/1/traffic/transmitted_packets",
                "packets"
            ),
            10
        );
    }
}

// ------------------------------------------------------------------------------------------
// Golden cases with explicit numbers
// ------------------------------------------------------------------------------------------
