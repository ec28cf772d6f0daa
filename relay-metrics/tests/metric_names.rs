//! `--metric-names relay` (config `extensions.metric_names`) end to end: NeMo Relay's names on
//! `/metrics` (dots as underscores, no unit suffix, the unit in `# UNIT` and `# HELP`) checked
//! by Prometheus's `promtool`, and in OTLP exactly Relay's names with the configured unit,
//! decoded by opentelemetry-proto's Python classes (`tests/otlp_receiver.py`).

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Kills and reaps a child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_address() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.local_addr().unwrap().to_string()
}

/// Starts `serve` on a free port with `args`; returns it and its address.
fn start_agent(args: &[&str]) -> (Reaped, String) {
    let address = free_address();
    let mut command = Command::new(env!("CARGO_BIN_EXE_relay-metrics"));
    command
        .args(["serve", "--listen", &address, "--interval-ms", "200"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    let agent = Reaped(command.spawn().expect("the agent starts"));
    (agent, address)
}

/// GET `/metrics` until it answers 200 (the first snapshot is published); returns the body.
fn metrics(address: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut stream) = TcpStream::connect(address) {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            write!(
                stream,
                "GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
            )
            .unwrap();
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            if response.starts_with("HTTP/1.1 200") {
                let (_, body) = response.split_once("\r\n\r\n").unwrap();
                return body.to_owned();
            }
        }
        assert!(Instant::now() < deadline, "no /metrics within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn meminfo_total_kib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    meminfo
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap()
}

/// The value of the first series of `name`.
fn sample(exposition: &str, name: &str) -> String {
    exposition
        .lines()
        .find(|line| line.starts_with(&format!("{name}{{")))
        .and_then(|line| line.rsplit(' ').next())
        .unwrap_or_else(|| panic!("{name} missing"))
        .to_owned()
}

/// `promtool check metrics`: Relay's names break only its naming lints (`_count` and `_total`
/// suffixes on gauges); any other line (a parse error) fails.
fn assert_promtool_parses(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed (scripts/install-deps.sh)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    for line in text.lines() {
        assert!(
            line.ends_with("metrics should not have \"_count\" suffix")
                || line.ends_with("non-counter metrics should not have \"_total\" suffix"),
            "promtool: {line}"
        );
    }
}

#[test]
fn promtool_reports_a_broken_exposition_other_than_by_lint() {
    // The check above can fail: a malformed line is not a lint message.
    let result = std::panic::catch_unwind(|| {
        assert_promtool_parses("# TYPE a gauge\na{b=\"c\" 1\n");
    });
    assert!(result.is_err());
}

#[test]
fn prometheus_gets_relays_names_without_unit_suffixes_and_the_unit_in_unit_and_help() {
    let (_agent, address) = start_agent(&["--scope", "global", "--metric-names", "relay"]);
    let text = metrics(&address);
    // The snapshot's families are Relay's; only the agent's own health series keep our names.
    for line in text.lines().filter(|line| line.contains("relay_metrics_")) {
        assert!(
            line.contains("relay_metrics_sample_age_seconds")
                || line.contains("relay_metrics_otlp_export_failures"),
            "{line}"
        );
    }
    let name = "nemo_relay_resource_memory_system_total";
    // Kibibytes, Relay's default unit, as an integer (Relay's u64 rule).
    assert_eq!(sample(&text, name), meminfo_total_kib().to_string());
    assert!(
        text.contains(&format!("# UNIT {name} kibibytes\n")),
        "{text}"
    );
    assert!(text.contains(&format!("# HELP {name} Total system memory (kibibytes)\n")));
    assert!(text.contains(&format!("# TYPE {name} gauge\n")));
    assert!(text.contains(
        "nemo_relay_resource_memory_system_total{nemo_relay_resource_measurement_scope=\"global\",\
         nemo_relay_resource_operating_system=\"linux\"}"
    ));
    assert!(text.contains(
        "nemo_relay_resource_network_interface_received_data{nemo_relay_resource_measurement_scope=\"global\",\
         nemo_relay_resource_network_interface_name=\"lo\",nemo_relay_resource_operating_system=\"linux\"}"
    ));
    // Every family announced once, with all its series together.
    let types: Vec<&str> = text.lines().filter(|l| l.starts_with("# TYPE ")).collect();
    let mut unique = types.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(types.len(), unique.len());
    assert_promtool_parses(&text);
}

#[test]
fn the_config_key_selects_relays_names_and_the_name_never_changes_with_the_units() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        r#"{"measurement_scope": "global", "extensions": {"metric_names": "relay"},
            "units": {"memory": {"system_total": "mebibytes"}}}"#,
    )
    .unwrap();
    let (_agent, address) = start_agent(&["--config", config.to_str().unwrap()]);
    let text = metrics(&address);
    let name = "nemo_relay_resource_memory_system_total";
    assert!(
        text.contains(&format!("# UNIT {name} mebibytes\n")),
        "{text}"
    );
    let value: f64 = sample(&text, name).parse().unwrap();
    assert_eq!(value, meminfo_total_kib() as f64 / 1024.0);

    // The flag wins over the config.
    let (_agent, address) = start_agent(&[
        "--config",
        config.to_str().unwrap(),
        "--metric-names",
        "relay_metrics",
    ]);
    let text = metrics(&address);
    assert_eq!(
        sample(&text, "relay_metrics_memory_system_total_bytes"),
        (meminfo_total_kib() * 1024).to_string()
    );
    assert!(!text.contains("nemo_relay"));
}

#[test]
fn otlp_gets_exactly_relays_names_with_the_configured_unit() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/otlp-venv/bin/python");
    assert!(
        python.exists(),
        "run scripts/install-deps.sh (OTLP virtualenv)"
    );
    let mut receiver = Command::new(python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp_receiver.py"))
        .args(["--protocol", "grpc"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(receiver.stdout.take().unwrap()).lines();
    let _receiver = Reaped(receiver);
    let port = lines.next().unwrap().unwrap();
    let port = port.strip_prefix("listening ").unwrap().to_owned();
    let endpoint = format!("http://127.0.0.1:{port}");
    let (_agent, _) = start_agent(&[
        "--scope",
        "global",
        "--metric-names",
        "relay",
        "--otlp-protocol",
        "grpc",
        "--otlp-endpoint",
        &endpoint,
    ]);
    let record: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(record["status"], "OK", "{record}");
    let metrics = record["request"]["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap();
    for metric in metrics {
        let name = metric["name"].as_str().unwrap();
        assert!(name.starts_with("nemo.relay.resource."), "{name}");
        assert!(metric.get("gauge").is_some(), "{name} is not a gauge");
    }
    let total = metrics
        .iter()
        .find(|m| m["name"] == "nemo.relay.resource.memory.system.total")
        .unwrap();
    assert_eq!(total["unit"], "kibibytes");
    let point = &total["gauge"]["dataPoints"][0];
    // MessageToDict writes int64 as a string.
    assert_eq!(point["asInt"], meminfo_total_kib().to_string());
    let attributes = point["attributes"].as_array().unwrap();
    assert!(attributes
        .iter()
        .any(|kv| kv["key"] == "nemo_relay.resource.measurement_scope"
            && kv["value"]["stringValue"] == "global"));
    let user = metrics
        .iter()
        .find(|m| m["name"] == "nemo.relay.resource.cpu.user_time")
        .unwrap();
    assert_eq!(user["unit"], "milliseconds");
}
