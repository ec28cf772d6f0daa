//! The collector over the fake: `extensions.gpu` in the snapshot and its JSON, GPU limit
//! events, per-value reasons, and a device that is lost and returns, with the fake's clock in
//! a file so that each phase is held while the GPU thread samples it.

use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::Arc;
use std::time::SystemTime;

use relay_metrics::config::MetricNames;
use relay_metrics::output::otlp::{request, OtlpResource};
use relay_metrics::report::ReportBuilder;
use relay_metrics::summary::RunEnd;
use relay_metrics::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};
use serde_json::Value;

use super::scenario::{set_clock, SCENARIO};
use super::{built_library, lock, TestDir, Variant, ENV_LOCK, SCRIPT_VARIABLES, UUID_0, UUID_1};

/// Collects until `ready` accepts a snapshot's JSON (the GPU thread samples every 500 ms).
fn collect_until(collector: &mut Collector, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    collect_snapshot_until(collector, what, ready).1
}

pub(super) fn collect_snapshot_until(
    collector: &mut Collector,
    what: &str,
    ready: impl Fn(&Value) -> bool,
) -> (Arc<ResourceMetricsSnapshot>, Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let snapshot = collector.collect();
        let json = to_json(&snapshot);
        if ready(&json) {
            return (snapshot, json);
        }
        assert!(
            Instant::now() < deadline,
            "no snapshot with {what}: {json:#}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(super) fn to_json(snapshot: &ResourceMetricsSnapshot) -> Value {
    let mut out = Vec::new();
    relay_metrics::output::json::write_snapshot(snapshot, &mut out);
    serde_json::from_slice(&out).unwrap()
}

fn reasons(json: &Value, field: &str) -> Vec<String> {
    json["extensions"]["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|entry| entry["field"] == field)
        .map(|entry| entry["reason"].as_str().unwrap().to_string())
        .collect()
}

fn event<'j>(json: &'j Value, name: &str, uuid: &str) -> &'j Value {
    json["extensions"]["gpu"]["limit_events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["event"] == name && e["uuid"] == uuid)
        .unwrap_or_else(|| panic!("no {name} event of {uuid}: {json:#}"))
}

/// A collector of one process over the fake, its scenario, its clock file, and its first
/// snapshot with both devices and the XID thread listening.
struct Started {
    files: TestDir,
    clock: std::path::PathBuf,
    collector: Collector,
    first: (Arc<ResourceMetricsSnapshot>, Value),
}

/// [`Started`] with `scenario`, the fake's clock at `clock_ms`.
fn start(label: &str, scenario: &str, clock_ms: u64) -> Started {
    start_in("two_devices", label, scenario, clock_ms)
}

/// [`start`] in the fake's `fake_scenario` (`FAKE_NVML_SCENARIO`).
fn start_in(fake_scenario: &str, label: &str, scenario: &str, clock_ms: u64) -> Started {
    let files = TestDir::new(label);
    let library = files.0.join("libnvidia-ml.so.1");
    std::fs::copy(built_library(Variant::Full), &library).unwrap();
    let script = files.0.join("scenario.txt");
    std::fs::write(&script, scenario).unwrap();
    let clock = files.0.join("clock");
    set_clock(&clock, clock_ms);
    let config = ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "application_process", "disk": {"enabled": false},
            "network": {"enabled": false}}"#,
    )
    .unwrap();
    // The environment is read by the first nvmlInit_v2, on the GPU or XID thread: held until
    // both listen (the xid limit events appear when the XID thread is registered).
    let env = lock(&ENV_LOCK);
    std::env::set_var("RELAY_METRICS_NVML_LIBRARY", &library);
    std::env::set_var("FAKE_NVML_SCENARIO", fake_scenario);
    set_env(&script, &clock);
    let mut collector = Collector::new(config).unwrap();
    let first = collect_snapshot_until(&mut collector, "two devices and XID listening", |json| {
        json["extensions"]["gpu"]["limit_events"]
            .as_array()
            .is_some_and(|events| events.iter().filter(|e| e["event"] == "xid").count() == 2)
    });
    std::env::remove_var("RELAY_METRICS_NVML_LIBRARY");
    drop(env);
    Started {
        files,
        clock,
        collector,
        first,
    }
}

#[test]
fn a_failed_process_list_is_a_reason_of_the_process_records() {
    let Started {
        files: _files,
        first: (_, json),
        ..
    } = start_in("not_supported", "process-lists", SCENARIO, 2000);
    // Device 0's compute list is unsupported: its compute-only process would be missing.
    let why = reasons(&json, "gpu.process_metrics");
    assert_eq!(why.len(), 1, "{json:#}");
    assert!(
        why[0].starts_with(&format!("{UUID_0}: its compute process list: ")),
        "{why:?}"
    );
    let Started {
        files: _files,
        first: (_, json),
        ..
    } = start("process-lists-read", SCENARIO, 2000);
    assert!(reasons(&json, "gpu.process_metrics").is_empty(), "{json:#}");
}

#[test]
fn snapshots_carry_gpu_values_limit_events_and_per_value_reasons() {
    let Started {
        files: _files,
        clock,
        mut collector,
        first: (snapshot, hot),
    } = start("snapshot", SCENARIO, 2000);

    // The thermal phase: every value of device 0, each in its unit.
    let zero = &hot["extensions"]["gpu"]["devices"][0];
    assert_eq!(zero["vendor"], "nvidia");
    assert_eq!(zero["index"], 0);
    assert_eq!(zero["uuid"], UUID_0);
    assert_eq!(zero["lost"], false);
    assert_eq!(zero["power_watts"], 300.0, "set in the power-capped phase");
    assert_eq!(zero["power_limit_watts"], 300.0);
    assert_eq!(zero["energy_joules"], 1000.0);
    assert_eq!(zero["temperature_celsius"], 95.0);
    assert_eq!(zero["memory_temperature_celsius"], 50.0);
    assert_eq!(zero["sm_clock_hz"], 1_410_000_000_u64);
    assert_eq!(zero["memory_clock_max_hz"], 2_619_000_000_u64);
    assert_eq!(
        zero["throttle_reasons"],
        serde_json::json!(["sw_thermal_slowdown", "hw_thermal_slowdown"])
    );
    assert_eq!(zero["violation_power_seconds"], 1.5);
    assert_eq!(zero["violation_thermal_seconds"], 0.7);
    assert_eq!(zero["ecc_corrected_aggregate"], 2);
    assert_eq!(zero["remapping_pending"], false);
    assert_eq!(zero["pcie_rx_bytes_per_second"], 2_048_000);
    assert_eq!(zero["mig_enabled"], false);
    assert_eq!(zero["utilization_percent"], 25.0);
    let one = &hot["extensions"]["gpu"]["devices"][1];
    assert_eq!(one["uuid"], UUID_1);
    assert_eq!(one["memory_temperature_celsius"], Value::Null);
    assert_eq!(one["mig_instances"][1]["memory_used_bytes"], 2_u64 << 30);
    let why = reasons(&hot, "extensions.gpu.devices.memory_temperature_celsius");
    assert_eq!(
        why,
        [format!(
            "{UUID_1}: the requested operation is not available on the target device"
        )]
    );
    assert_eq!(
        reasons(&hot, "extensions.gpu.devices.remapped_rows").len(),
        1
    );
    assert!(reasons(&hot, "extensions.gpu.devices.power_watts").is_empty());

    // The same values in /metrics and OTLP, with device and uuid labels.
    let mut text = String::new();
    relay_metrics::output::prometheus::encode(&snapshot, MetricNames::RelayMetrics, &mut text);
    for (family, labels, value) in [
        ("relay_metrics_gpu_power_watts", vec![], "300"),
        ("relay_metrics_gpu_power_limit_watts", vec![], "300"),
        ("relay_metrics_gpu_energy_joules_total", vec![], "1000"),
        (
            "relay_metrics_gpu_temperature_celsius",
            vec!["sensor=\"gpu\""],
            "95",
        ),
        (
            "relay_metrics_gpu_clock_hertz",
            vec!["clock=\"sm\""],
            "1410000000",
        ),
        (
            "relay_metrics_gpu_throttle_active",
            vec!["reason=\"hw_thermal_slowdown\""],
            "1",
        ),
        (
            "relay_metrics_gpu_throttle_active",
            vec!["reason=\"sw_power_cap\""],
            "0",
        ),
        (
            "relay_metrics_gpu_throttled_seconds_total",
            vec!["reason=\"power\""],
            "1.5",
        ),
        (
            "relay_metrics_gpu_ecc_errors_total",
            vec!["type=\"corrected\"", "counter=\"aggregate\""],
            "2",
        ),
        ("relay_metrics_gpu_pcie_replays_total", vec![], "0"),
    ] {
        let found = text.lines().any(|line| {
            line.starts_with(&format!("{family}{{"))
                && line.contains("device=\"0\"")
                && line.contains(&format!("uuid=\"{UUID_0}\""))
                && labels.iter().all(|label| line.contains(label))
                && line.ends_with(&format!(" {value}"))
        });
        assert!(
            found,
            "no {family} {labels:?} {value} of device 0 in:\n{text}"
        );
    }
    let otlp = serde_json::to_string(&request(
        &snapshot,
        &OtlpResource::new(SystemTime::now(), &[]),
        MetricNames::RelayMetrics,
    ))
    .unwrap();
    for name in [
        "relay_metrics_gpu_power_watts",
        "relay_metrics_gpu_energy_joules",
        "relay_metrics_gpu_temperature_celsius",
        "relay_metrics_gpu_throttle_periods",
        UUID_0,
    ] {
        // OTLP names drop `_total` (a collector's Prometheus exporter adds it back to sums).
        assert!(
            otlp.contains(&format!("\"{name}")),
            "{name} missing from the OTLP request"
        );
    }

    // `otel` names: the hardware conventions' hw.power, hw.energy, hw.temperature, with hw.id
    // (the UUID) and hw.type "gpu", and hw.gpu.memory.usage, hw.gpu.utilization for a whole
    // device; the others in relay_metrics.*.
    let otel = serde_json::to_string(&request(
        &snapshot,
        &OtlpResource::new(SystemTime::now(), &[]),
        MetricNames::Otel,
    ))
    .unwrap();
    for name in [
        "\"hw.power\"",
        "\"hw.energy\"",
        "\"hw.temperature\"",
        "\"hw.id\"",
        "\"hw.type\"",
        "\"hw.gpu.memory.usage\"",
        "\"hw.gpu.utilization\"",
        "\"relay_metrics.gpu_clock\"",
    ] {
        assert!(
            otel.contains(name),
            "{name} missing from the otel OTLP request"
        );
    }

    // Limit events: every sampled period was thermal (and hw_slowdown: hw_thermal_slowdown).
    let thermal = event(&hot, "thermal", UUID_0);
    let periods = thermal["sampled_periods"].as_u64().unwrap();
    assert!(periods >= 1);
    assert_eq!(thermal["resource"], "gpu");
    assert_eq!(thermal["count"], periods);
    assert_eq!(
        thermal["throttled_seconds"], 0.0,
        "no growth within the phase"
    );
    assert_eq!(event(&hot, "hw_slowdown", UUID_0)["count"], periods);
    assert_eq!(
        event(&hot, "hw_slowdown", UUID_0)["throttled_seconds"],
        Value::Null
    );
    assert_eq!(event(&hot, "power_cap", UUID_0)["count"], 0);
    assert_eq!(event(&hot, "xid", UUID_0)["count"], 0);

    // XID 79 and an ECC error.
    set_clock(&clock, 3000);
    let after = collect_until(&mut collector, "XID 79", |json| {
        json["extensions"]["gpu"]["devices"][0]["xid_errors"]
            .as_array()
            .is_some_and(|list| !list.is_empty())
            && json["extensions"]["gpu"]["devices"][0]["ecc_corrected_volatile"] == 1
    });
    let zero = &after["extensions"]["gpu"]["devices"][0];
    assert_eq!(
        zero["xid_errors"],
        serde_json::json!([{"xid": 79, "count": 1}])
    );
    assert_eq!(event(&after, "xid", UUID_0)["count"], 1);
    // The report of the two lines marks the XID error and lists it in its summary.
    let mut report = ReportBuilder::default();
    report
        .read_ndjson(format!("{hot}\n{after}\n").as_bytes())
        .unwrap();
    let report = report.finish(RunEnd::default()).unwrap();
    assert!(report.to_svg().unwrap().contains("GPU XID error (1)"));
    let gpu = report.summary.gpu.as_ref().unwrap();
    let xid = gpu
        .limit_events
        .iter()
        .find(|e| e.event == "xid" && e.uuid == UUID_0);
    assert_eq!(xid.map(|e| e.count), Some(1), "{gpu:?}");
    let mut text = String::new();
    relay_metrics::output::prometheus::encode(
        &collector.collect(),
        MetricNames::RelayMetrics,
        &mut text,
    );
    assert!(
        text.lines().any(
            |line| line.starts_with("relay_metrics_gpu_xid_errors_total{")
                && line.contains("xid=\"79\"")
                && line.ends_with(" 1")
        ),
        "{text}"
    );
    assert_eq!(zero["throttle_reasons"], serde_json::json!(["gpu_idle"]));

    // Device 1 reports XID 79 and falls off the bus: reported lost, with a reason and its
    // XID error (they were left out while it was lost), without blocking a collect.
    set_clock(&clock, 3500);
    collect_until(&mut collector, "XID 79 of device 1", |json| {
        json["extensions"]["gpu"]["devices"][1]["xid_errors"]
            .as_array()
            .is_some_and(|list| !list.is_empty())
    });
    set_clock(&clock, 4000);
    let lost = collect_until(&mut collector, "a lost device", |json| {
        json["extensions"]["gpu"]["devices"][1]["lost"] == true
    });
    let one = &lost["extensions"]["gpu"]["devices"][1];
    assert_eq!(one["uuid"], UUID_1);
    assert_eq!(one["power_watts"], Value::Null);
    assert_eq!(
        one["xid_errors"],
        serde_json::json!([{"xid": 79, "count": 1}])
    );
    assert_eq!(event(&lost, "xid", UUID_1)["count"], 1);
    // Still named by its UUID a pass later (it was `nvidia:1` after one query).
    std::thread::sleep(Duration::from_millis(1100));
    let later = collector.collect();
    let later = serde_json::to_value(&*later).unwrap();
    assert_eq!(later["extensions"]["gpu"]["devices"][1]["uuid"], UUID_1);
    let why = reasons(&lost, "extensions.gpu.devices");
    assert_eq!(why.len(), 1, "{why:?}");
    assert!(why[0].starts_with(&format!(
        "NVML device 1 ({UUID_1}): device fell off the bus"
    )));
    let started = Instant::now();
    collector.collect();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "a collect waited on NVML"
    );

    // … and returns.
    set_clock(&clock, 5000);
    let back = collect_until(&mut collector, "the device back", |json| {
        json["extensions"]["gpu"]["devices"][1]["lost"] == false
    });
    assert_eq!(
        back["extensions"]["gpu"]["devices"][1]["power_watts"],
        200.0
    );
    assert!(reasons(&back, "extensions.gpu.devices").is_empty());
}

fn set_env(script: &Path, clock: &Path) {
    for (name, value) in SCRIPT_VARIABLES.into_iter().zip([script, clock]) {
        std::env::set_var(name, value);
    }
}

/// A driver call that blocks (device 0's queries sleep 6.5 s from the fake's 1000 ms on): once
/// the GPU thread's last answer is over 5 s old its values are left out with the reason, not
/// exported as current, while the devices and the XID errors counted by the event thread stay;
/// the values return with the next answer.
#[test]
fn a_blocked_nvml_query_leaves_its_stale_values_out_with_a_reason() {
    let Started {
        files: _files,
        clock,
        mut collector,
        ..
    } = start(
        "stall",
        "500 1 xid 79\n1000 0 stall_ms 6500\n2000 0 stall_ms 0\n",
        0,
    );
    set_clock(&clock, 500);
    collect_until(&mut collector, "XID 79 of device 1", |json| {
        json["extensions"]["gpu"]["devices"][1]["xid_errors"]
            .as_array()
            .is_some_and(|list| !list.is_empty())
    });

    set_clock(&clock, 1000);
    let stale = collect_until(&mut collector, "a stale GPU sample", |json| {
        reasons(json, "gpu")
            .iter()
            .any(|reason| reason.contains("a query is blocked"))
    });
    assert_eq!(stale["gpu"]["device_metrics"], serde_json::json!([]));
    // The devices stay known, their values `null`; the XID errors (the event thread's) stay.
    let devices = &stale["extensions"]["gpu"]["devices"];
    assert_eq!(devices[0]["uuid"], UUID_0);
    assert_eq!(devices[0]["power_watts"], Value::Null);
    assert_eq!(devices[1]["uuid"], UUID_1);
    assert_eq!(
        devices[1]["xid_errors"],
        serde_json::json!([{"xid": 79, "count": 1}])
    );
    assert_eq!(event(&stale, "xid", UUID_1)["count"], 1);
    // The event thread listens: device 0's series goes on at 0, as while its values are read.
    assert_eq!(event(&stale, "xid", UUID_0)["count"], 0);
    let events = stale["extensions"]["gpu"]["limit_events"]
        .as_array()
        .unwrap();
    assert!(
        events.iter().all(|e| e["event"] == "xid"),
        "throttling counts of a stale sample: {events:?}"
    );

    set_clock(&clock, 2000);
    let back = collect_until(&mut collector, "fresh GPU values", |json| {
        json["gpu"]["device_metrics"]
            .as_array()
            .is_some_and(|devices| devices.len() == 2)
    });
    assert!(reasons(&back, "gpu").is_empty(), "{back:#}");
}
