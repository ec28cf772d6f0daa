use std::collections::BTreeMap;

use serde_json::Value;

use std::time::{Duration, UNIX_EPOCH};

use super::*;
use crate::config::MetricNames;
use crate::output::prometheus;
use crate::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};

fn machine_snapshot() -> std::sync::Arc<ResourceMetricsSnapshot> {
    let config: ResourceMetricsConfig = serde_json::from_value(serde_json::json!({
        "measurement_scope": "global",
        "disk": {"filesystem_paths": ["/"]},
        "extensions": {"kernel_events": false}
    }))
    .unwrap();
    let mut collector = Collector::new(config).unwrap();
    collector.collect();
    collector.collect()
}

fn attributes(value: &Value) -> BTreeMap<String, String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv["key"].as_str().unwrap().to_owned(),
                kv["value"]["stringValue"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Per Prometheus family: its kind and number of series, from the text exposition.
fn prometheus_families(snapshot: &ResourceMetricsSnapshot) -> BTreeMap<String, (String, usize)> {
    let mut text = String::new();
    prometheus::encode(snapshot, MetricNames::RelayMetrics, &mut text);
    let mut families = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            families.insert(name.to_owned(), (kind.to_owned(), 0));
        } else if !line.starts_with('#') {
            let name = line.split('{').next().unwrap();
            families.get_mut(name).unwrap().1 += 1;
        }
    }
    families
}

#[test]
fn exports_the_same_families_and_series_as_the_prometheus_text() {
    let snapshot = machine_snapshot();
    let start = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let request = serde_json::to_value(request(
        &snapshot,
        &OtlpResource::new(start, &[]),
        MetricNames::RelayMetrics,
    ))
    .unwrap();

    let resource = &request["resourceMetrics"][0];
    let resource_attributes = attributes(&resource["resource"]["attributes"]);
    assert_eq!(resource_attributes["service.name"], "relay-metrics");
    assert_eq!(
        resource_attributes["service.version"],
        env!("CARGO_PKG_VERSION")
    );
    let scope = &resource["scopeMetrics"][0];
    assert_eq!(scope["scope"]["name"], "relay-metrics");

    let time = snapshot
        .timestamp
        .timestamp_nanos_opt()
        .unwrap()
        .to_string();
    let mut exported = BTreeMap::new();
    for metric in scope["metrics"].as_array().unwrap() {
        let name = metric["name"].as_str().unwrap();
        let (kind, points) = if let Some(sum) = metric.get("sum") {
            assert_eq!(sum["aggregationTemporality"], 2, "{name}");
            assert_eq!(sum["isMonotonic"], true, "{name}");
            ("counter", sum["dataPoints"].as_array().unwrap())
        } else {
            ("gauge", metric["gauge"]["dataPoints"].as_array().unwrap())
        };
        for point in points {
            assert_eq!(point["timeUnixNano"], time.as_str(), "{name}");
            // A gauge's start is 0, "not set".
            let expected_start = if kind == "counter" {
                Some("1700000000000000000")
            } else {
                Some("0")
            };
            assert_eq!(
                point["startTimeUnixNano"].as_str(),
                expected_start,
                "{name}"
            );
            assert!(point["asDouble"].as_f64().unwrap().is_finite(), "{name}");
            assert_eq!(
                attributes(&point["attributes"])["scope"],
                "global",
                "{name}"
            );
        }
        let prometheus_name = if kind == "counter" {
            format!("{name}_total")
        } else {
            name.to_owned()
        };
        exported.insert(prometheus_name, (kind.to_owned(), points.len()));
    }
    assert_eq!(exported, prometheus_families(&snapshot));
    // A global snapshot of a live machine has values in every category it enables.
    for family in [
        "relay_metrics_cpu_user_seconds_total",
        "relay_metrics_memory_system_total_bytes",
        "relay_metrics_filesystem_bytes",
        "relay_metrics_network_received_bytes_total",
    ] {
        assert!(
            exported.contains_key(family),
            "{family} missing: {exported:?}"
        );
    }
}

#[test]
fn resource_variables_replace_the_defaults() {
    let resource = OtlpResource::new(
        UNIX_EPOCH,
        &[
            ("service.name".into(), "node-agent".into()),
            ("k8s.node.name".into(), "n1".into()),
        ],
    );
    let snapshot = machine_snapshot();
    let request =
        serde_json::to_value(request(&snapshot, &resource, MetricNames::RelayMetrics)).unwrap();
    let attributes = attributes(&request["resourceMetrics"][0]["resource"]["attributes"]);
    assert_eq!(attributes["service.name"], "node-agent");
    assert_eq!(attributes["k8s.node.name"], "n1");
    assert_eq!(attributes["service.version"], env!("CARGO_PKG_VERSION"));
}
