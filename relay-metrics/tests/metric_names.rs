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

/// `extensions.metric_names = "cadvisor"` on a cgroup of the test's own with a CPU quota and
/// a memory limit: cAdvisor's families with its labels, values from the cgroup's files, the
/// `relay_metrics_cgroup_*` families cAdvisor has no equivalent of beside them, none of those
/// it covers, node_exporter's families for the machine; `promtool` finds only the lints
/// cAdvisor's own names draw.
#[test]
#[ignore = "root: makes a cgroup; tools: promtool (Debian package prometheus)"]
fn the_config_key_selects_cadvisors_names_with_values_from_the_cgroup_files() {
    let cgroup = common::TestCgroup::new("cadvisor", &["cpu", "cpuacct", "memory", "pids"]);
    let hybrid = !std::path::Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let (cpu_dir, memory_dir) = if hybrid {
        (
            format!("/sys/fs/cgroup/cpu{}", cgroup.path),
            format!("/sys/fs/cgroup/memory{}", cgroup.path),
        )
    } else {
        (
            format!("/sys/fs/cgroup{}", cgroup.path),
            format!("/sys/fs/cgroup{}", cgroup.path),
        )
    };
    if hybrid {
        std::fs::write(format!("{cpu_dir}/cpu.cfs_quota_us"), "25000").unwrap();
        std::fs::write(format!("{memory_dir}/memory.limit_in_bytes"), "67108864").unwrap();
    } else {
        std::fs::write(format!("{cpu_dir}/cpu.max"), "25000 100000").unwrap();
        std::fs::write(format!("{memory_dir}/memory.max"), "67108864").unwrap();
    }
    let mut sleeper = common::Reaped(
        std::process::Command::new("sleep")
            .arg("600")
            .spawn()
            .unwrap(),
    );
    cgroup.enter(sleeper.0.id());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        format!(
            r#"{{"measurement_scope": "global", "extensions": {{"metric_names": "cadvisor", "cgroups": ["{}"]}}}}"#,
            cgroup.path
        ),
    )
    .unwrap();
    // cpu0's idle seconds in /proc/stat (USER_HZ is 100) before and after the scrape.
    let idle = || -> f64 {
        let stat = std::fs::read_to_string("/proc/stat").unwrap();
        let line = stat.lines().find(|l| l.starts_with("cpu0 ")).unwrap();
        line.split_whitespace()
            .nth(4)
            .unwrap()
            .parse::<f64>()
            .unwrap()
            / 100.0
    };
    let before = idle();
    let agent = start_agent(&["--config", config.to_str().unwrap()]);
    let text = metrics(&agent);
    let after = idle();
    let node_idle: f64 = sample(&text, "node_cpu_seconds_total{cpu=\"0\",mode=\"idle\"}")
        .parse()
        .unwrap();
    assert!(
        (before..=after).contains(&node_idle),
        "{before} <= {node_idle} <= {after}"
    );
    let cpus = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .count();
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("node_cpu_seconds_total{"))
            .count(),
        cpus * 8,
        "every mode of every CPU"
    );
    let id = format!("id=\"{}\"", cgroup.path);
    let line = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(&id))
            .unwrap_or_else(|| panic!("{name} for {id} in\n{text}"))
    };
    let value = |name: &str| -> f64 { line(name).rsplit(' ').next().unwrap().parse().unwrap() };
    assert!(line("container_cpu_usage_seconds_total").contains("cpu=\"total\""));
    assert_eq!(value("container_spec_cpu_quota"), 25_000.0);
    assert_eq!(value("container_spec_cpu_period"), 100_000.0);
    assert_eq!(value("container_spec_memory_limit_bytes"), 67_108_864.0);
    assert_eq!(value("container_processes"), 1.0);
    let usage = value("container_memory_usage_bytes");
    let working_set = value("container_memory_working_set_bytes");
    assert!(working_set <= usage, "{working_set} > {usage}");
    for name in [
        "container_cpu_user_seconds_total",
        "container_cpu_cfs_periods_total",
        "container_memory_rss",
        "container_memory_cache",
        "container_memory_max_usage_bytes",
        "container_memory_failcnt",
        "container_last_seen",
        "relay_metrics_cgroup_memory_events_total",
    ] {
        line(name);
    }
    // What cAdvisor's families carry is not exported twice; the machine is node_exporter's.
    assert!(
        !text.contains("relay_metrics_cgroup_cpu_usage_seconds_total"),
        "{text}"
    );
    assert!(!text.contains("cgroup=\""), "{text}");
    assert_eq!(
        sample(&text, "node_memory_MemTotal_bytes"),
        (meminfo_total_kib() * 1024).to_string()
    );
    let (_, lints) = common::promtool_check(&text);
    for lint in lints.lines() {
        assert!(
            [
                "container_memory_failcnt",
                "container_spec_cpu_",
                "container_last_seen",
                "container_memory_rss",
                "container_memory_cache",
                "container_memory_swap",
                "container_memory_mapped_file",
                "container_threads_max",
                "node_memory_"
            ]
            .iter()
            .any(|name| lint.contains(name)),
            "promtool: {lint}"
        );
    }
    let _ = sleeper.0.kill();
    let _ = sleeper.0.wait();
}
