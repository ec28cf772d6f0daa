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
            // A gauge's start is 0, "not set"; a counter without an exporter's history is an
            // unknown-start reset point (its start is its time), not a count since `start`.
            let expected_start = if kind == "counter" {
                Some(time.as_str())
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

/// A loopback HTTP server that answers each request with the next of `answers` (raw status line
/// and headers) and hands over each request's body.
async fn scripted_collector(
    answers: Vec<&'static str>,
) -> (String, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (sender, bodies) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        for answer in answers {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut chunk = [0u8; 16 * 1024];
            let body = loop {
                let read = stream.read(&mut chunk).await.unwrap();
                assert!(read > 0, "the request ended early");
                request.extend_from_slice(&chunk[..read]);
                let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") else {
                    continue;
                };
                let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length: "))
                    .unwrap()
                    .parse()
                    .unwrap();
                if request.len() >= end + 4 + length {
                    break request[end + 4..end + 4 + length].to_vec();
                }
            };
            let response = format!("{answer}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            stream.write_all(response.as_bytes()).await.unwrap();
            let _ = sender.send(body);
        }
    });
    (url, bodies)
}

fn snapshots_counter(body: &[u8]) -> f64 {
    let request: Value = serde_json::from_slice(body).unwrap();
    request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|metric| metric["name"] == "relay_metrics_snapshots")
        .and_then(|metric| metric["sum"]["dataPoints"][0]["asDouble"].as_f64())
        .unwrap()
}

#[tokio::test]
async fn at_stop_the_newest_snapshot_gets_one_last_attempt_despite_a_long_retry_after() {
    let (url, mut bodies) = scripted_collector(vec![
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 60",
        "HTTP/1.1 200 OK",
    ])
    .await;
    let flags = OtlpFlags {
        otlp_endpoint: Some(url),
        otlp_protocol: Some(Protocol::HttpJson),
        ..OtlpFlags::default()
    };
    let settings = OtlpSettings::resolve(&flags, &|_| None).unwrap().unwrap();
    let (publisher, exporter) = start(&settings, std::time::SystemTime::now()).unwrap();
    let failures = exporter.failures();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(exporter.run(async move {
        let _ = stopped.await;
    }));

    let config: ResourceMetricsConfig = serde_json::from_value(serde_json::json!({
        "measurement_scope": "global", "extensions": {"kernel_events": false}
    }))
    .unwrap();
    let mut collector = Collector::new(config).unwrap();
    publisher.publish(&collector.collect());
    let refused = bodies.recv().await.unwrap();
    assert_eq!(snapshots_counter(&refused), 1.0);
    // Two newer snapshots while the exporter waits out the collector's 60 s: the newest
    // replaces the refused one.
    collector.collect();
    publisher.publish(&collector.collect());
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(failures.get(), 1);
    let _ = stop.send(());
    let last = tokio::time::timeout(Duration::from_secs(5), bodies.recv())
        .await
        .expect("the last attempt is made at once, not after 60 s")
        .unwrap();
    assert_eq!(snapshots_counter(&last), 3.0);
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("run returns after the last attempt")
        .unwrap();
    assert_eq!(failures.get(), 1);
}
