use std::collections::BTreeMap;

use serde_json::Value;

use super::*;
use crate::output::prometheus;
use crate::{Collector, ResourceMetricsConfig};

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
    prometheus::encode(snapshot, &mut text);
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
    let mut body = Vec::new();
    encode(&snapshot, &OtlpResource::new(start), &mut body);
    let request: Value = serde_json::from_slice(&body).unwrap();

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
            let expected_start = (kind == "counter").then_some("1700000000000000000");
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
fn units_follow_the_base_unit_suffix() {
    let unit = |name: &'static str| {
        otlp_name_and_unit(&Family {
            name,
            kind: Kind::Gauge,
            help: "",
        })
    };
    assert_eq!(unit("a_read_bytes_total"), ("a_read_bytes", "By"));
    assert_eq!(
        unit("a_read_bytes_per_second"),
        ("a_read_bytes_per_second", "By/s")
    );
    assert_eq!(unit("a_user_seconds_total"), ("a_user_seconds", "s"));
    assert_eq!(unit("a_limit_cores"), ("a_limit_cores", "{cpu}"));
    assert_eq!(unit("a_utilization_ratio"), ("a_utilization_ratio", "1"));
    assert_eq!(unit("a_processes"), ("a_processes", "1"));
}

#[test]
fn endpoints_default_to_port_4318_and_the_metrics_path() {
    let parse = |url| OtlpEndpoint::parse(url).map(|e| e.to_string());
    assert_eq!(
        parse("http://collector").unwrap(),
        "http://collector:4318/v1/metrics"
    );
    assert_eq!(
        parse("http://127.0.0.1:9000/").unwrap(),
        "http://127.0.0.1:9000/v1/metrics"
    );
    assert_eq!(
        parse("http://h:1/custom/path").unwrap(),
        "http://h:1/custom/path"
    );
    assert_eq!(
        parse("http://[::1]").unwrap(),
        "http://[::1]:4318/v1/metrics"
    );
    assert_eq!(
        parse("http://[::1]:5000").unwrap(),
        "http://[::1]:5000/v1/metrics"
    );
}

#[test]
fn endpoints_that_are_not_plain_http_are_refused_with_the_reason() {
    for (url, reason) in [
        ("https://collector:4318", "https is not supported"),
        ("collector:4318", "expected http://"),
        ("http://", "expected a host"),
        ("http://user@host", "expected a host"),
        ("http://host:port", "the port is not a number"),
        ("http://host:70000", "the port is not a number"),
        ("http://:80", "the port is not a number"),
    ] {
        let error = OtlpEndpoint::parse(url).unwrap_err().to_string();
        assert!(error.contains(reason), "{url}: {error}");
    }
}

#[tokio::test]
async fn an_export_needs_a_2xx_answer() {
    use tokio::net::TcpListener;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint =
        OtlpEndpoint::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let server = tokio::spawn(async move {
        let mut requests = Vec::new();
        for status in ["200 OK", "400 Bad Request"] {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            // Head and the 2-byte body.
            while !request.ends_with(b"\r\n\r\n{}") {
                let read = stream.read(&mut chunk).await.unwrap();
                assert!(read > 0, "{}", String::from_utf8_lossy(&request));
                request.extend_from_slice(&chunk[..read]);
            }
            let answer = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            stream.write_all(answer.as_bytes()).await.unwrap();
            requests.push(String::from_utf8(request).unwrap());
        }
        requests
    });
    export(&endpoint, b"{}").await.unwrap();
    let error = export(&endpoint, b"{}").await.unwrap_err();
    assert!(
        matches!(&error, ExportError::Rejected(line) if line == "HTTP/1.1 400 Bad Request"),
        "{error}"
    );
    let requests = server.await.unwrap();
    assert!(
        requests[0].starts_with("POST /v1/metrics HTTP/1.1\r\n"),
        "{}",
        requests[0]
    );
    assert!(requests[0].contains("\r\nContent-Type: application/json\r\n"));
    assert!(requests[0].contains("\r\nContent-Length: 2\r\n"));
    // Nothing listens any more.
    let refused = export(&endpoint, b"{}").await.unwrap_err();
    assert!(matches!(refused, ExportError::Io(_)), "{refused}");
}

#[test]
fn only_a_final_2xx_http_status_is_success() {
    let outcome = |response: &[u8]| final_status(response).map(|r| r.map_err(|e| e.to_string()));
    assert_eq!(outcome(b"HTTP/1.1 200 OK\r\n"), Some(Ok(())));
    assert_eq!(outcome(b"HTTP/1.0 204 No Content\n\n"), Some(Ok(())));
    assert_eq!(
        outcome(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\n"),
        Some(Ok(()))
    );
    assert_eq!(
        outcome(b"HTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\nHTTP/1.1 503 Busy\r\n"),
        Some(Err(
            "the collector answered \"HTTP/1.1 503 Busy\"".to_owned()
        ))
    );
    // Incomplete: more is needed.
    assert_eq!(outcome(b""), None);
    assert_eq!(outcome(b"HTTP/1.1 200 O"), None);
    assert_eq!(outcome(b"HTTP/1.1 100 Continue\r\n"), None);
    // Not HTTP, or no valid status code.
    for bad in [
        &b"SSH-2.0 2xx\r\n"[..],
        b"HTTP/1.1 2000 OK\r\n",
        b"HTTP/1.1 abc\r\n",
    ] {
        assert!(matches!(outcome(bad), Some(Err(_))), "{bad:?}");
    }
}
