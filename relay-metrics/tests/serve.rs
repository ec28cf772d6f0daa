//! The agent endpoint end to end: `relay-metrics serve` on a free loopback port, read over HTTP,
//! checked by Prometheus's own tools (`promtool check metrics`) and scraped by a real Prometheus
//! server, which must then answer a query with the collector's value. Prometheus comes from
//! Debian's `prometheus` package (scripts/install-deps.sh installs it); without it these tests
//! fail rather than skip. The OTLP export is received by a test listener and parsed strictly
//! with opentelemetry-proto's own Python bindings (a virtualenv that scripts/install-deps.sh
//! creates in `target/otlp-venv`).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    free_address, receive_requests, start_agent, venv_python, wait_ready, Prometheus, Reaped,
};
use serde_json::Value;

/// One HTTP GET; returns the status code and the body.
fn get(address: &str, path: &str) -> (u16, String) {
    let response = common::get(address, path);
    (response.status, response.text())
}

fn meminfo_total_bytes() -> f64 {
    (common::meminfo_total_kib() * 1024) as f64
}

/// The value of the first series of `name` in an exposition.
fn sample(exposition: &str, name: &str) -> f64 {
    common::sample(exposition, name)
        .parse()
        .unwrap_or_else(|error| panic!("{name}: {error}"))
}

#[test]
#[ignore = "tools: promtool (Debian package prometheus)"]
fn serves_valid_prometheus_text_and_the_snapshot_json() {
    let agent = start_agent(&["--scope", "global"]);
    let address = agent.address.clone();
    wait_ready(&address);
    let (status, metrics) = get(&address, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        sample(&metrics, "relay_metrics_memory_system_total_bytes"),
        meminfo_total_bytes()
    );
    assert!(metrics
        .contains("relay_metrics_network_received_bytes_total{scope=\"global\",interface=\"lo\"}"));
    assert!(sample(&metrics, "relay_metrics_processes") > 0.0);
    // The exporter conventions: build info, the agent's own process series.
    assert!(
        metrics.contains(&format!(
            "relay_metrics_build_info{{version=\"{}\",revision=\"",
            env!("CARGO_PKG_VERSION")
        )),
        "{metrics}"
    );
    assert!(sample(&metrics, "process_cpu_seconds_total") >= 0.0);
    assert!(sample(&metrics, "process_resident_memory_bytes") > 1e6);
    assert!(sample(&metrics, "process_open_fds") >= 3.0);
    let (status, landing) = get(&address, "/");
    assert_eq!(status, 200);
    assert!(landing.contains("<a href=\"metrics\">"), "{landing}");

    let (passed, printed) = common::promtool_check(&metrics);
    assert!(passed && printed.is_empty(), "promtool: {printed}");

    let (status, json) = get(&address, "/snapshot");
    assert_eq!(status, 200);
    let snapshot: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(snapshot["measurement_scope"], "global");
    assert_eq!(get(&address, "/healthz"), (200, "ok\n".to_string()));
    assert_eq!(get(&address, "/nope").0, 404);
}

#[test]
#[ignore = "tools: prometheus (Debian package prometheus)"]
fn a_prometheus_server_scrapes_the_agent() {
    let agent = start_agent(&["--scope", "global"]);
    let address = agent.address.clone();
    wait_ready(&address);
    let prometheus = Prometheus::start(&[&address]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let value = loop {
        if let Some(value) = prometheus.first_value("relay_metrics_memory_system_total_bytes") {
            break value;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus never returned the scraped value"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(value, meminfo_total_bytes());
}

/// Parses an OTLP/HTTP JSON body with opentelemetry-proto's bindings (unknown or mistyped
/// fields are errors); returns the metric names.
fn parse_with_opentelemetry_proto(body: &[u8]) -> Vec<String> {
    let python = venv_python();
    let script = "import sys\n\
        from google.protobuf import json_format\n\
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service\n\
        request = json_format.Parse(sys.stdin.read(), service.ExportMetricsServiceRequest())\n\
        for resource in request.resource_metrics:\n\
        \x20   for scope in resource.scope_metrics:\n\
        \x20       for metric in scope.metrics:\n\
        \x20           print(metric.name)\n";
    let mut child = Command::new(&python)
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(body).unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "opentelemetry-proto refused the body: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
#[ignore = "tools: the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn exports_snapshots_as_otlp_that_opentelemetry_proto_accepts() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let _agent = start_agent(&[
        "--scope",
        "global",
        "--otlp-endpoint",
        &endpoint,
        "--otlp-protocol",
        "http/json",
    ]);
    let (head, body) = receive_requests(listener, 1, Duration::from_secs(20))
        .pop()
        .unwrap();
    assert!(head.starts_with("POST /v1/metrics HTTP/1.1\r\n"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("\r\ncontent-type: application/json\r\n"),
        "{head}"
    );

    let names = parse_with_opentelemetry_proto(&body);
    for name in [
        "relay_metrics_cpu_user_seconds",
        "relay_metrics_memory_system_total_bytes",
        "relay_metrics_snapshots",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
    }
    let request: Value = serde_json::from_slice(&body).unwrap();
    let total = request["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|metric| metric["name"] == "relay_metrics_memory_system_total_bytes")
        .unwrap();
    assert_eq!(total["unit"], "By");
    assert_eq!(
        total["gauge"]["dataPoints"][0]["asDouble"].as_f64(),
        Some(meminfo_total_bytes())
    );
}

#[test]
fn an_endpoint_that_is_not_http_is_refused_at_start() {
    let output = Command::new(env!("CARGO_BIN_EXE_relay-metrics"))
        .args(["serve", "--otlp-endpoint", "ftp://collector:4318"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("expected http://"), "{stderr}");
}

#[test]
fn an_agent_whose_stderr_is_closed_keeps_serving_and_exporting() {
    let (address, nobody_listens) = (free_address(), free_address());
    let mut child = Command::new(env!("CARGO_BIN_EXE_relay-metrics"))
        .args(["serve", "--listen", &address, "--interval-ms", "100"])
        .args(["--otlp-endpoint", &format!("http://{nobody_listens}")])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Closed before the agent writes its first line: every later line meets a broken pipe.
    drop(child.stderr.take());
    let mut agent = Reaped(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(&address).is_err() {
        assert!(
            agent.0.try_wait().unwrap().is_none(),
            "the agent exited at start"
        );
        assert!(Instant::now() < deadline, "the agent never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_ready(&address);
    // Several exports fail meanwhile (refused), and their report goes to the closed stderr.
    std::thread::sleep(Duration::from_millis(500));
    assert!(agent.0.try_wait().unwrap().is_none(), "the agent exited");
    assert_eq!(get(&address, "/healthz").0, 200);
}

#[test]
fn an_agent_out_of_descriptors_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(&config, r#"{"extensions": {"kernel_events": false}}"#).unwrap();
    let address = free_address();
    // A few descriptors above what the agent needs for itself: most connections cannot be
    // accepted until others close.
    let script = format!(
        "ulimit -n 40 && exec {} serve --listen {address} --interval-ms 200 --config {} \
         --scope application_process --pid {}",
        env!("CARGO_BIN_EXE_relay-metrics"),
        config.display(),
        std::process::id()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (lines, received) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut agent = Reaped(child);
    let serving = received.recv_timeout(Duration::from_secs(10)).unwrap();
    assert!(serving.contains("serving"), "{serving}");
    wait_ready(&address);

    let idle: Vec<TcpStream> = (0..60)
        .map(|_| TcpStream::connect(&address).unwrap())
        .collect();
    let refused = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the agent reports that it cannot accept");
    assert!(
        refused.contains("cannot accept a connection") && refused.contains("Too many open files"),
        "{refused}"
    );
    // The burst goes on (60 connections held, room for ~20): it is logged once, not per
    // failed accept.
    let deadline = Instant::now() + Duration::from_secs(1);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        if let Ok(line) = received.recv_timeout(left) {
            assert!(!line.contains("cannot accept"), "logged again: {line}");
        }
    }
    assert!(agent.0.try_wait().unwrap().is_none(), "the agent exited");
    drop(idle);
    wait_ready(&address);
    assert_eq!(get(&address, "/healthz").0, 200);
}

/// A veth pair of the test's own in the root network namespace, deleted when dropped.
struct Veth(String);

impl Veth {
    fn new() -> Self {
        common::assert_root("the test makes a veth pair");
        let name = format!("vethrm{}", std::process::id() % 1_000_000);
        let status = Command::new("ip")
            .args(["link", "add", &name, "type", "veth", "peer", "name"])
            .arg(format!("{name}p"))
            .status()
            .unwrap();
        assert!(status.success(), "ip link add {name}");
        Self(name)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).status();
    }
}

/// The series budget end to end: `--no-interfaces 'veth*'` drops every series of the test's
/// veth pair and keeps the others' (`lo`), `--no-metrics` turns its families off, on
/// `/metrics` and in the same naming in cAdvisor's, and a bad glob is refused at start.
#[test]
#[ignore = "root: makes a veth pair"]
fn the_series_budget_drops_families_and_veth_interfaces() {
    let veth = Veth::new();
    let agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    common::scrape_until(
        &agent.address,
        Duration::from_secs(10),
        "the veth pair's series without a budget",
        ("interface", &veth.0),
        |text| {
            text.contains(&format!("interface=\"{}\"", veth.0))
                && text.contains("relay_metrics_network_receive_bytes_per_second")
        },
    );

    for names in ["relay_metrics", "cadvisor"] {
        let agent = start_agent(&[
            "--scope",
            "global",
            "--metric-names",
            names,
            "--no-interfaces",
            "veth*",
            "--no-metrics",
            "relay_metrics_network_*_per_second",
            "node_filesystem_*",
        ]);
        wait_ready(&agent.address);
        // Rates are there from the second snapshot (every 200 ms).
        std::thread::sleep(Duration::from_secs(1));
        let (_, text) = get(&agent.address, "/metrics");
        assert!(!text.contains(&veth.0), "{names}: {text}");
        assert!(
            !text.contains("relay_metrics_network_receive_bytes_per_second"),
            "{names}: {text}"
        );
        let lo = if names == "cadvisor" {
            "node_network_receive_bytes_total{device=\"lo\"}"
        } else {
            "relay_metrics_network_received_bytes_total{scope=\"global\",interface=\"lo\"}"
        };
        assert!(text.contains(lo), "{names}: {text}");
    }
    let output = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--no-metrics", "a{b"])
        .output()
        .unwrap();
    common::assert_refused(&output, "invalid glob \"a{b\"");
}
