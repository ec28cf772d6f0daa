//! The node agent's per-cgroup GPU attribution over the fake: processes started in cgroups of
//! the test's own are the fake driver's GPU processes; each measured cgroup's series carry the
//! sums of its processes' records, and follow a process moved to another cgroup.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::SystemTime;

use relay_metrics::config::MetricNames;
use relay_metrics::output::otlp::{request, OtlpResource};
use relay_metrics::{Collector, ResourceMetricsConfig};
use serde_json::{json, Value};

use super::snapshot::collect_snapshot_until as collect_until;
use super::{built_library, lock, TestDir, Variant, ENV_LOCK, MIB, SCRIPT_VARIABLES, UUID_0};

// The root package's tests share the cgroup helper of the relay-metrics tests.
#[path = "../../relay-metrics/tests/common/cgroup.rs"]
#[allow(dead_code, reason = "these tests only make cgroups at the root")]
pub(super) mod cgroup;

use cgroup::TestCgroup;

/// Sleeping processes, killed and reaped on drop.
pub(super) struct Sleepers(pub(super) Vec<Child>);

impl Sleepers {
    pub(super) fn spawn(&mut self) -> u32 {
        let child = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        self.0.push(child);
        pid
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `gpus` of the measured cgroup `path`.
pub(super) fn gpus<'j>(json: &'j Value, path: &str) -> &'j Value {
    json["extensions"]["targets"]["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cgroup"] == path)
        .map_or(&Value::Null, |c| &c["gpus"])
}

/// Device 0's use as the fake scripts it: pid a (its first slot) 8192 bytes (the larger of its
/// compute and graphics entries), SM 30 %, memory 12 % (its newer sample); b 1 MiB and no
/// utilisation sample after the first query.
fn device_0(processes: u64, memory: u64, sm: Option<f64>, mem: Option<f64>) -> Value {
    json!([{"index": 0, "uuid": UUID_0, "processes": processes, "memory_used_bytes": memory,
            "sm_utilization_percent": sm, "memory_utilization_percent": mem}])
}

/// `name{…cgroup="path"…device="0"…}` on /metrics, if exported.
fn series(text: &str, name: &str, path: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        (rest.contains(&format!("cgroup=\"{path}\""))
            && rest.contains("device=\"0\"")
            && rest.contains(&format!("uuid=\"{UUID_0}\"")))
        .then(|| line.rsplit(' ').next()?.parse().ok())
        .flatten()
    })
}

#[test]
#[ignore = "root: makes cgroups; tools: opentelemetry-semantic-conventions in target/otlp-venv (scripts/install-deps.sh)"]
fn measured_cgroups_carry_their_processes_gpu_use_and_follow_a_move() {
    // (As another user, making the cgroups fails with the path and EACCES.)
    // Discovery walks v1 `memory` on hybrid hosts, the unified hierarchy on v2 hosts.
    let x = TestCgroup::new("gpu-x", &["memory"]);
    let y = TestCgroup::new("gpu-y", &["memory"]);
    let mut sleepers = Sleepers(Vec::new());
    // a in x, b in y, c (on both devices) in the test's own cgroup, which is not measured.
    let a = sleepers.spawn();
    let b = sleepers.spawn();
    let c = sleepers.spawn();
    x.enter(a);
    y.enter(b);

    let files = TestDir::new("targets");
    let library = files.0.join("libnvidia-ml.so.1");
    std::fs::copy(built_library(Variant::Full), &library).unwrap();
    // No device metrics: no XID thread initialising the library after the environment is reset.
    let config = ResourceMetricsConfig::from_text(&format!(
        r#"{{"measurement_scope": "global", "disk": {{"enabled": false}},
             "network": {{"enabled": false}}, "gpu": {{"device_metrics": false}},
             "extensions": {{"cgroups": ["{}", "{}"]}}}}"#,
        x.path, y.path
    ))
    .unwrap();
    let mut collector = {
        let _env = lock(&ENV_LOCK);
        std::env::set_var("RELAY_METRICS_NVML_LIBRARY", &library);
        std::env::set_var("FAKE_NVML_SCENARIO", "two_devices");
        std::env::set_var("FAKE_NVML_PIDS", format!("{a},{b},{c}"));
        for name in SCRIPT_VARIABLES {
            std::env::remove_var(name);
        }
        let mut collector = Collector::new(config).unwrap();
        // Held until the GPU thread's first query (its nvmlInit_v2 reads the environment).
        collect_until(&mut collector, "NVML's first answer", |json| {
            !gpus(json, &x.path).is_null()
        });
        std::env::remove_var("RELAY_METRICS_NVML_LIBRARY");
        collector
    };
    let (x_path, y_path) = (x.path.as_str(), y.path.as_str());

    // From the second query on, utilisation samples are there.
    let (snapshot, before) = collect_until(&mut collector, "a's utilisation in x", |json| {
        gpus(json, x_path)[0]["sm_utilization_percent"].is_number()
    });
    assert_eq!(
        *gpus(&before, x_path),
        device_0(1, 8192, Some(30.0), Some(12.0))
    );
    assert_eq!(*gpus(&before, y_path), device_0(1, MIB, None, None));
    // c counts in no measured cgroup, but still in the scope's per-process records.
    let records = before["gpu"]["process_metrics"].as_array().unwrap();
    assert_eq!(
        records.iter().filter(|r| r["process_id"] == c).count(),
        2,
        "{records:#?}"
    );

    let mut text = String::new();
    relay_metrics::output::prometheus::encode(&snapshot, MetricNames::RelayMetrics, &mut text);
    let memory = "relay_metrics_cgroup_gpu_memory_used_bytes";
    let sm = "relay_metrics_cgroup_gpu_sm_utilization_ratio";
    let mem = "relay_metrics_cgroup_gpu_memory_utilization_ratio";
    let processes = "relay_metrics_cgroup_gpu_processes";
    assert_eq!(series(&text, memory, x_path), Some(8192.0), "{text}");
    assert_eq!(series(&text, sm, x_path), Some(0.3), "{text}");
    assert_eq!(series(&text, mem, x_path), Some(0.12), "{text}");
    assert_eq!(series(&text, processes, x_path), Some(1.0), "{text}");
    assert_eq!(series(&text, memory, y_path), Some(MIB as f64), "{text}");
    assert_eq!(series(&text, sm, y_path), None, "no sample of b: {text}");
    assert!(
        !text.contains("device=\"1\""),
        "c alone uses device 1: {text}"
    );

    let resource = OtlpResource::new(SystemTime::now(), &[]);
    let otlp =
        serde_json::to_string(&request(&snapshot, &resource, MetricNames::RelayMetrics)).unwrap();
    for name in [memory, sm, mem, processes] {
        assert!(otlp.contains(&format!("\"{name}\"")), "{name} not in OTLP");
    }
    let otel = serde_json::to_string(&request(&snapshot, &resource, MetricNames::Otel)).unwrap();
    for name in [
        "\"relay_metrics.cgroup_gpu_memory_used\"",
        "\"relay_metrics.cgroup_gpu_sm_utilization\"",
        "\"relay_metrics.cgroup_gpu_memory_utilization\"",
        "\"relay_metrics.cgroup_gpu_processes\"",
        "\"hw.id\"",
        "\"relay_metrics.cgroup\"",
    ] {
        assert!(otel.contains(name), "{name} not in the otel OTLP request");
    }
    semantic_conventions_accept(&files.0, &otel);

    // a moves to y: its use leaves x and joins b's in y.
    y.enter(a);
    let (_, after) = collect_until(&mut collector, "a's use in y", |json| {
        gpus(json, y_path)[0]["processes"] == 2
    });
    assert_eq!(*gpus(&after, x_path), json!([]));
    assert_eq!(
        *gpus(&after, y_path),
        device_0(2, 8192 + MIB, Some(30.0), Some(12.0))
    );
    drop(collector);
    drop(sleepers);
}

/// Where NVML refuses a device's process list, a process only in that list has no record, so no
/// measured cgroup's sums are complete: `gpus` is `null`, not a partial list that reads as no
/// use of that device.
#[test]
#[ignore = "root: makes cgroups"]
fn a_refused_process_list_makes_the_cgroups_gpu_use_null() {
    let x = TestCgroup::new("gpu-refused", &["memory"]);
    let mut sleepers = Sleepers(Vec::new());
    let a = sleepers.spawn();
    x.enter(a);
    let files = TestDir::new("targets-refused");
    let library = files.0.join("libnvidia-ml.so.1");
    std::fs::copy(built_library(Variant::Full), &library).unwrap();
    let config = ResourceMetricsConfig::from_text(&format!(
        r#"{{"measurement_scope": "global", "disk": {{"enabled": false}},
             "network": {{"enabled": false}}, "gpu": {{"device_metrics": false}},
             "extensions": {{"cgroups": ["{}"]}}}}"#,
        x.path
    ))
    .unwrap();
    let _env = lock(&ENV_LOCK);
    std::env::set_var("RELAY_METRICS_NVML_LIBRARY", &library);
    // Device 0's compute list answers NOT_SUPPORTED; a is in its graphics list too.
    std::env::set_var("FAKE_NVML_SCENARIO", "not_supported");
    std::env::set_var("FAKE_NVML_PIDS", format!("{a},1,1"));
    for name in SCRIPT_VARIABLES {
        std::env::remove_var(name);
    }
    let mut collector = Collector::new(config).unwrap();
    let refused = |json: &Value| {
        json["extensions"]["unavailable"]
            .as_array()
            .unwrap()
            .iter()
            .any(|entry| entry["field"] == "gpu.process_metrics")
    };
    let (_, json) = collect_until(&mut collector, "NVML's answer with the refusal", refused);
    std::env::remove_var("RELAY_METRICS_NVML_LIBRARY");
    std::env::remove_var("FAKE_NVML_SCENARIO");
    std::env::remove_var("FAKE_NVML_PIDS");
    let cgroups = json["extensions"]["targets"]["cgroups"].as_array().unwrap();
    assert!(cgroups.iter().any(|c| c["cgroup"] == x.path), "{json:#}");
    assert!(gpus(&json, &x.path).is_null(), "{json:#}");
    drop(collector);
    drop(sleepers);
}

/// Runs `relay-metrics/tests/otel_semconv.py` (PyPI's opentelemetry-semantic-conventions) over
/// the OTLP/JSON request `otel`.
fn semantic_conventions_accept(dir: &Path, otel: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/otlp-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-deps.sh",
        python.display()
    );
    let file = dir.join("otel.json");
    std::fs::write(&file, otel).unwrap();
    let output = Command::new(python)
        .arg(root.join("relay-metrics/tests/otel_semconv.py"))
        .arg(&file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("relay_metrics.cgroup_gpu_memory_used"),
        "{text}"
    );
}
