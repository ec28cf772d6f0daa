//! `--metric-names relay` (config `extensions.metric_names`) end to end: NeMo Relay's names on
//! `/metrics` (dots as underscores, no unit suffix, the unit in `# UNIT` and `# HELP`) checked
//! by Prometheus's `promtool`, and in OTLP exactly Relay's names with the configured unit,
//! decoded by opentelemetry-proto's Python classes (`tests/otlp_receiver.py`).

mod common;

use common::{meminfo_total_kib, sample, start_agent, Agent};
use serde_json::Value;

/// `/metrics` once the first snapshot is published.
fn metrics(agent: &Agent) -> String {
    common::wait_ready(&agent.address);
    common::get(&agent.address, "/metrics").text()
}

/// `promtool check metrics`: Relay's names break only its naming lints (`_count` and `_total`
/// suffixes on gauges); any other line (a parse error) fails.
fn assert_promtool_parses(exposition: &str) {
    let (_, text) = common::promtool_check(exposition);
    for line in text.lines() {
        assert!(
            line.ends_with("metrics should not have \"_count\" suffix")
                || line.ends_with("non-counter metrics should not have \"_total\" suffix"),
            "promtool: {line}"
        );
    }
}

#[test]
#[ignore = "tools: promtool (Debian package prometheus)"]
fn promtool_reports_a_broken_exposition_other_than_by_lint() {
    // The check above can fail: a malformed line is not a lint message.
    let result = std::panic::catch_unwind(|| {
        assert_promtool_parses("# TYPE a gauge\na{b=\"c\" 1\n");
    });
    assert!(result.is_err());
}

#[test]
#[ignore = "tools: promtool (Debian package prometheus)"]
fn prometheus_gets_relays_names_without_unit_suffixes_and_the_unit_in_unit_and_help() {
    let agent = start_agent(&["--scope", "global", "--metric-names", "relay"]);
    let text = metrics(&agent);
    // The snapshot's families are Relay's; only the agent's own series (health, build info)
    // keep our names.
    for line in text.lines().filter(|line| line.contains("relay_metrics_")) {
        assert!(
            line.contains("relay_metrics_sample_age_seconds")
                || line.contains("relay_metrics_otlp_export_failures")
                || line.contains("relay_metrics_build_info"),
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
    let agent = start_agent(&["--config", config.to_str().unwrap()]);
    let text = metrics(&agent);
    let name = "nemo_relay_resource_memory_system_total";
    assert!(
        text.contains(&format!("# UNIT {name} mebibytes\n")),
        "{text}"
    );
    let value: f64 = sample(&text, name).parse().unwrap();
    assert_eq!(value, meminfo_total_kib() as f64 / 1024.0);

    // The flag wins over the config.
    let agent = start_agent(&[
        "--config",
        config.to_str().unwrap(),
        "--metric-names",
        "relay_metrics",
    ]);
    let text = metrics(&agent);
    assert_eq!(
        sample(&text, "relay_metrics_memory_system_total_bytes"),
        (meminfo_total_kib() * 1024).to_string()
    );
    assert!(!text.contains("nemo_relay"));
}

#[test]
#[ignore = "tools: the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn otlp_gets_exactly_relays_names_with_the_configured_unit() {
    let receiver = common::OtlpReceiver::start(&["--protocol", "grpc"]);
    let port = receiver.port;
    let endpoint = format!("http://127.0.0.1:{port}");
    let _agent = start_agent(&[
        "--scope",
        "global",
        "--metric-names",
        "relay",
        "--otlp-protocol",
        "grpc",
        "--otlp-endpoint",
        &endpoint,
    ]);
    let record: Value = receiver.next();
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
