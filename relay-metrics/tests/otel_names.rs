//! `--metric-names otel`: every metric name, unit, instrument kind, attribute key and enumerated
//! value the agent exports over OTLP is checked against PyPI's
//! `opentelemetry-semantic-conventions` (installed in the test virtualenv by
//! scripts/install-deps.sh) by `otel_semconv.py`, or sits in the `relay_metrics.*` namespace;
//! in global scope (`system.*`), for a process tree (`process.*`), for a cgroup (`container.*`)
//! and for the cgroups measured one by one beside the global scope (`--cgroup-depth`). The Prometheus form of the same names parses with `promtool` and carries
//! `target_info`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{start_agent, venv_python, wait_ready, Reaped};

/// The second OTLP/JSON export of an agent started with `scope_args` and `--metric-names otel`
/// (the second: rates need a previous snapshot), and its `/metrics`.
fn export(scope_args: &[&str]) -> (Vec<u8>, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let mut args = scope_args.to_vec();
    args.extend([
        "--metric-names",
        "otel",
        "--otlp-endpoint",
        &endpoint,
        "--otlp-protocol",
        "http/json",
    ]);
    let agent = start_agent(&args);
    let (_, body) = common::receive_requests(listener, 2, Duration::from_secs(30))
        .pop()
        .unwrap();
    wait_ready(&agent.address);
    let metrics = common::get(&agent.address, "/metrics").text();
    (body, metrics)
}

/// Runs the conventions check over `files`; its exit status and output.
fn check(files: &[&Path]) -> (bool, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel_semconv.py");
    let output = Command::new(venv_python())
        .arg(script)
        .args(files)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// The cgroup of this test process where its CPU is accounted (v1 `cpuacct`, or the unified
/// hierarchy), so that the cgroup scope has CPU time.
fn own_cgroup() -> String {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = |wanted: &str| {
        text.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            let found = if wanted.is_empty() {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == wanted)
            };
            found.then(|| path.to_owned())
        })
    };
    path("cpuacct").or_else(|| path("")).unwrap()
}

#[test]
#[ignore = "tools: opentelemetry-semantic-conventions in the OTLP virtualenv target/otlp-venv, promtool (scripts/install-deps.sh)"]
fn every_otel_name_and_attribute_is_a_semantic_convention_or_ours() {
    let sleeper = Reaped(
        Command::new("sleep")
            .arg("60")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = sleeper.0.id().to_string();
    let cgroup = own_cgroup();
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    let mut conventional = String::new();
    for (label, args) in [
        ("global", vec!["--scope", "global"]),
        ("process_tree", vec!["--pid", pid.as_str()]),
        ("cgroup", vec!["--cgroup", cgroup.as_str()]),
        // The cgroups measured one by one beside the global scope (`container.*` per cgroup).
        ("cgroups", vec!["--scope", "global", "--cgroup-depth", "2"]),
    ] {
        let (body, metrics) = export(&args);
        let file = dir.path().join(format!("{label}.json"));
        std::fs::write(&file, &body).unwrap();
        let (ok, output) = check(&[&file]);
        assert!(ok, "{label}: {output}");
        if label == "cgroups" {
            // Global's system.cpu.time, and each cgroup's container.memory.usage with its
            // relay_metrics.cgroup attribute.
            assert!(output.contains("container.memory.usage"), "{output}");
            assert!(output.contains("relay_metrics.cgroup "), "{output}");
        }
        conventional.push_str(&output);
        files.push(file);

        // The Prometheus form: OpenTelemetry's translation (dots to underscores, unit suffix,
        // `_total` on monotonic sums; a `.count` of `{thing}` as the plural of its thing, a
        // name of cAdvisor's in our namespace), parsed by promtool without a lint.
        assert!(metrics.contains("\ntarget_info{host_name=\""), "{metrics}");
        assert!(metrics.contains("os_type=\"linux\""), "{metrics}");
        assert!(metrics.contains("service_instance_id=\""), "{metrics}");
        // (promtool exits 1 on lints too: a parse error is a line of another kind.)
        let (_, printed) = common::promtool_check(&metrics);
        assert_eq!(printed.trim(), "", "{label}: promtool");
        for name in ["\n# TYPE container_memory_usage_bytes ", "_count gauge\n"] {
            assert!(!metrics.contains(name), "{label}: {name}");
        }
        if label == "global" {
            // A counter keeps OpenTelemetry's `_count_total`: only a gauge's `.count` is renamed.
            for (name, kind) in [
                ("system_network_packet_count_total", "counter"),
                ("system_processes", "gauge"),
            ] {
                let line = format!("\n# TYPE {name} {kind}\n");
                assert!(metrics.contains(&line), "{label}: {line}");
            }
        }
        let types: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with("# TYPE "))
            .collect();
        let mut unique = types.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            types.len(),
            unique.len(),
            "{label}: a family announced twice"
        );
    }
    // What each scope is named by.
    for name in [
        "system.cpu.time",
        "system.memory.usage",
        "system.network.io",
        "system.process.count",
        "process.cpu.time",
        "process.memory.usage",
        "process.thread.count",
        "container.cpu.time",
    ] {
        assert!(
            conventional.contains(name),
            "{name} not exported: {conventional}"
        );
    }
    for key in [
        "cpu.mode",
        "system.memory.state",
        "network.io.direction",
        "network.interface.name",
    ] {
        assert!(
            conventional.contains(key),
            "{key} not exported: {conventional}"
        );
    }

    // The check bites: a name, a unit, a kind and an attribute value the conventions do not
    // have each fail it.
    let global = std::fs::read_to_string(&files[0]).unwrap();
    for (from, to) in [
        ("\"system.cpu.time\"", "\"system.cpu.seconds\""),
        ("\"unit\":\"s\"", "\"unit\":\"ms\""),
        ("\"isMonotonic\":true", "\"isMonotonic\":false"),
        ("\"stringValue\":\"user\"", "\"stringValue\":\"usr\""),
        ("\"key\":\"os.type\"", "\"key\":\"os.kind\""),
    ] {
        assert!(global.contains(from), "{from} in {global}");
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, global.replacen(from, to, 1)).unwrap();
        let (ok, output) = check(&[&bad]);
        assert!(!ok, "{from} -> {to} passed: {output}");
    }
}
