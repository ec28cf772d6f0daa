//! The GPU part of the big-host tier: the fake's `big_host` scenario (8 devices, 200 processes
//! spread over them, every value a formula of the device index or the process slot: see
//! `tools/fake-nvml/src/big_host.rs`) read through the source, a global snapshot with three
//! measured cgroups and `serve`'s /metrics. The oracle recomputes each value from the formula on
//! its own; each check prints `ROW | what | ours | oracle | equal` as
//! `relay-metrics/tests/big_host.rs` does (`--nocapture` shows them).

use std::collections::BTreeMap;

use relay_metrics::internals::gpu::{GpuProcessSample, NvmlOptions};
use relay_metrics::{Collector, ResourceMetricsConfig};
use serde_json::{json, Value};

mod serve;

use super::snapshot::collect_snapshot_until;
use super::targets::cgroup::TestCgroup;
use super::targets::{gpus, Sleepers};
use super::{
    built_library, lock, open_ok, own_pid, summary, TestDir, Variant, ENV_LOCK, MIB, PID_B, PID_C,
    SCRIPT_VARIABLES,
};

const DEVICES: usize = 8;
const PROCESSES: usize = 200;
/// Measured cgroups; process slot `p` sits in cgroup `p % CGROUPS`.
const CGROUPS: usize = 3;

fn uuid(device: usize) -> String {
    format!("GPU-6a1f0c3e-0000-4000-8000-{device:012}")
}

/// The oracle of one process slot, from the fake's formula.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Process {
    device: usize,
    memory_bytes: u64,
    /// SM and memory utilisation (%) of its newer sample; `None` for `p % 10 == 9`.
    utilization: Option<(f64, f64)>,
}

fn oracle(p: usize) -> Process {
    let factor = if p % 5 >= 3 { 2 } else { 1 };
    let percent = |n: usize| f64::from(u32::try_from(n).unwrap());
    Process {
        device: p % DEVICES,
        memory_bytes: (p as u64 + 1) * factor * MIB,
        utilization: (p % 10 != 9).then(|| (percent(p % 7 + 1), percent(p % 5 + 1))),
    }
}

/// The oracle of device `d`: (memory used bytes, utilisation %, power W, energy J,
/// temperature °C, PCIe TX and RX bytes/s).
fn device_oracle(d: usize) -> [f64; 7] {
    let scale = f64::from(u32::try_from(d + 1).unwrap());
    [
        4.0 * scale * MIB as f64,
        10.0 * scale,
        100.0 * scale,
        1000.0 * scale,
        40.0 + 5.0 * scale,
        1000.0 * scale * 1024.0,
        2000.0 * scale * 1024.0,
    ]
}

fn row(what: &str, ours: impl std::fmt::Display, oracle: impl std::fmt::Display, equal: bool) {
    println!(
        "ROW | {what} | {ours} | {oracle} | {}",
        if equal { "yes" } else { "NO" }
    );
}

/// Prints the row of `equal` values out of `total` and fails unless all are.
fn row_all(what: &str, equal: usize, total: usize) {
    row(what, equal, total, equal == total);
    assert_eq!(equal, total, "{what}");
}

/// The source's process list by the formula, with the slots 0 to 2 given the PIDs the test's
/// environment sets (the others keep 10000 + p); utilisation only `with_utilization`.
fn expected_processes(with_utilization: bool) -> Vec<GpuProcessSample> {
    let pid = |p: usize| match p {
        0 => own_pid(),
        1 => PID_B,
        2 => PID_C,
        _ => 10_000 + u32::try_from(p).unwrap(),
    };
    let mut list: Vec<GpuProcessSample> = (0..PROCESSES)
        .map(|p| {
            let o = oracle(p);
            let u = o.utilization.filter(|_| with_utilization);
            let index = u32::try_from(o.device).unwrap();
            super::process(index, &uuid(o.device), pid(p), Some(o.memory_bytes), u)
        })
        .collect();
    list.sort_by_key(|s| (s.device_index, s.pid));
    list
}

fn expected_devices() -> Vec<super::DeviceSummary> {
    (0..DEVICES)
        .map(|d| {
            let [memory, utilization, ..] = device_oracle(d);
            let index = u32::try_from(d).unwrap();
            super::device(index, &uuid(d), Some(memory as u64), Some(utilization))
        })
        .collect()
}

/// Two samples of the source over `fake`: every device and process as the formula says.
fn assert_two_samples_by_formula(fake: &mut super::Fake) {
    // First query: no utilisation yet; then every sampled process's newer sample.
    let first = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(summary(&first.devices), expected_devices());
    assert_eq!(first.processes.len(), PROCESSES);
    assert_eq!(first.processes, expected_processes(false));
    let second = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(second.processes.len(), PROCESSES);
    assert_eq!(second.processes, expected_processes(true));
}

#[test]
fn big_host_source_lists_8_devices_and_200_processes_by_formula() {
    let mut fake = open_ok(Variant::Full, "big_host", NvmlOptions::default());
    assert_two_samples_by_formula(&mut fake);
}

/// Regression: a list that grew between NVML's count query and the fill (6 entries, beyond
/// nvml-wrapper's 5 of headroom for processes and its none for samples) answered
/// `INSUFFICIENT_SIZE`, and the source dropped the device's whole compute or graphics list, or
/// all its utilisation samples, from that sample. It now queries again.
#[test]
fn big_host_lists_that_grow_between_count_and_fill_are_read_whole() {
    let growth = std::path::Path::new("6");
    let (mut fake, loaded) = super::open_with(
        Variant::Full,
        "big_host",
        NvmlOptions::default(),
        &[("FAKE_NVML_GROWTH", growth)],
    );
    loaded.unwrap();
    assert_two_samples_by_formula(&mut fake);
}

/// 200 sleeping processes, slot `p` in cgroup `p % CGROUPS`, and the cgroups.
struct Host {
    sleepers: Sleepers,
    pids: Vec<u32>,
    cgroups: Vec<TestCgroup>,
}

impl Host {
    fn build() -> Self {
        let cgroups: Vec<TestCgroup> = (0..CGROUPS)
            .map(|k| TestCgroup::new(&format!("gpu-big-{k}"), &["memory"]))
            .collect();
        let mut sleepers = Sleepers(Vec::new());
        let pids: Vec<u32> = (0..PROCESSES)
            .map(|p| {
                let pid = sleepers.spawn();
                cgroups[p % CGROUPS].enter(pid);
                pid
            })
            .collect();
        Self {
            sleepers,
            pids,
            cgroups,
        }
    }

    fn config(&self) -> ResourceMetricsConfig {
        let paths: Vec<&str> = self.cgroups.iter().map(|c| c.path.as_str()).collect();
        let text = json!({"measurement_scope": "global", "disk": {"enabled": false},
            "network": {"enabled": false}, "extensions": {"cgroups": paths}});
        ResourceMetricsConfig::from_text(&text.to_string()).unwrap()
    }

    /// Sets the fake's environment (the caller holds [`ENV_LOCK`]).
    fn set_env(&self, library: &std::path::Path) {
        std::env::set_var("RELAY_METRICS_NVML_LIBRARY", library);
        std::env::set_var("FAKE_NVML_SCENARIO", "big_host");
        let list: Vec<String> = self.pids.iter().map(u32::to_string).collect();
        std::env::set_var("FAKE_NVML_PIDS", list.join(","));
        for name in SCRIPT_VARIABLES {
            std::env::remove_var(name);
        }
    }

    /// The oracle of cgroup `k` on device `d`: (processes, memory bytes, SM % sum, memory % sum).
    fn cgroup_oracle(k: usize, d: usize) -> (u64, u64, f64, f64) {
        (0..PROCESSES)
            .filter(|p| p % CGROUPS == k && p % DEVICES == d)
            .map(oracle)
            .fold((0, 0, 0.0, 0.0), |(n, m, sm, mem), o| {
                let (s, u) = o.utilization.unwrap_or((0.0, 0.0));
                (n + 1, m + o.memory_bytes, sm + s, mem + u)
            })
    }
}

/// Whether a snapshot has the second NVML answer for all 200 processes and XID listens on all
/// 8 devices (the XID thread's `nvmlInit_v2` reads the environment too).
fn complete(json: &Value) -> bool {
    let records = json["gpu"]["process_metrics"].as_array();
    let xid = json["extensions"]["gpu"]["limit_events"]
        .as_array()
        .map_or(0, |e| e.iter().filter(|e| e["event"] == "xid").count());
    xid == DEVICES
        && records.is_some_and(|r| {
            r.len() >= PROCESSES && r.iter().any(|r| r["compute_utilization"].is_object())
        })
}

fn value(measurement: &Value) -> Option<f64> {
    measurement["value"].as_f64()
}

#[test]
#[ignore = "root: makes cgroups"]
fn big_host_snapshot_and_serve_report_every_value_of_8_devices_and_200_processes() {
    let host = Host::build();
    let files = TestDir::new("big-host");
    let library = files.0.join("libnvidia-ml.so.1");
    std::fs::copy(built_library(Variant::Full), &library).unwrap();
    let mut collector = {
        let _env = lock(&ENV_LOCK);
        host.set_env(&library);
        let mut collector = Collector::new(host.config()).unwrap();
        collect_snapshot_until(&mut collector, "XID on 8 devices", complete);
        std::env::remove_var("RELAY_METRICS_NVML_LIBRARY");
        collector
    };
    // The collect after the one that saw the second NVML answer: every record then has one.
    let (_, json) = collect_snapshot_until(&mut collector, "200 processes sampled", |json| {
        complete(json)
            && json["gpu"]["process_metrics"]
                .as_array()
                .is_some_and(|r| r.iter().all(|r| !r["process_id"].is_null()))
    });
    check_snapshot_devices(&json);
    check_snapshot_processes(&json, &host);
    check_snapshot_cgroups(&json, &host);
    drop(collector);

    let served = files.0.join("served").join("libnvidia-ml.so.1");
    std::fs::create_dir_all(served.parent().unwrap()).unwrap();
    std::fs::copy(built_library(Variant::Full), &served).unwrap();
    let text = serve::metrics(&host, &served);
    serve::check(&text, &host);
    drop(host.sleepers);
}

fn check_snapshot_devices(json: &Value) {
    let devices = json["gpu"]["device_metrics"].as_array().unwrap();
    row(
        "snapshot: gpu.device_metrics devices",
        devices.len(),
        DEVICES,
        devices.len() == DEVICES,
    );
    let extension = json["extensions"]["gpu"]["devices"].as_array().unwrap();
    let mut equal = 0;
    for d in 0..DEVICES {
        let [memory, utilization, power, energy, temperature, tx, rx] = device_oracle(d);
        let record = devices.iter().find(|r| r["device_identifier"] == uuid(d));
        let e = extension.iter().find(|e| e["uuid"] == uuid(d));
        let ours = [
            record
                .and_then(|r| value(&r["memory_used"]))
                .map(|kib| kib * 1024.0),
            record.and_then(|r| value(&r["compute_utilization"])),
            e.and_then(|e| e["power_watts"].as_f64()),
            e.and_then(|e| e["energy_joules"].as_f64()),
            e.and_then(|e| e["temperature_celsius"].as_f64()),
            e.and_then(|e| e["pcie_tx_bytes_per_second"].as_f64()),
            e.and_then(|e| e["pcie_rx_bytes_per_second"].as_f64()),
        ];
        let oracle = [memory, utilization, power, energy, temperature, tx, rx];
        equal += ours
            .iter()
            .zip(oracle)
            .filter(|(o, x)| **o == Some(*x))
            .count();
    }
    row_all(
        "snapshot: device values (memory, utilisation, power, energy, temperature, PCIe TX/RX) × 8",
        equal,
        DEVICES * 7,
    );
}

fn check_snapshot_processes(json: &Value, host: &Host) {
    let records = json["gpu"]["process_metrics"].as_array().unwrap();
    let ours: BTreeMap<u64, &Value> = records
        .iter()
        .filter_map(|r| Some((r["process_id"].as_u64()?, r)))
        .collect();
    row(
        "snapshot: gpu.process_metrics records",
        records.len(),
        PROCESSES,
        records.len() == PROCESSES,
    );
    assert_eq!(records.len(), PROCESSES, "{records:#?}");
    let equal = (0..PROCESSES)
        .filter(|&p| {
            let o = oracle(p);
            ours.get(&u64::from(host.pids[p])).is_some_and(|r| {
                r["device_index"] == o.device
                    && r["device_identifier"] == uuid(o.device)
                    && value(&r["memory_used"]) == Some(o.memory_bytes as f64 / 1024.0)
                    && value(&r["compute_utilization"]) == o.utilization.map(|(sm, _)| sm)
            })
        })
        .count();
    row_all(
        "snapshot: per-process device, memory, SM utilisation (joined by PID)",
        equal,
        PROCESSES,
    );
}

fn check_snapshot_cgroups(json: &Value, host: &Host) {
    let mut equal = 0;
    for (k, cgroup) in host.cgroups.iter().enumerate() {
        let ours = gpus(json, &cgroup.path)
            .as_array()
            .cloned()
            .unwrap_or_default();
        for d in 0..DEVICES {
            let (n, memory, sm, mem) = Host::cgroup_oracle(k, d);
            let expected = json!({"index": d, "uuid": uuid(d), "processes": n,
                "memory_used_bytes": memory, "sm_utilization_percent": sm,
                "memory_utilization_percent": mem});
            equal += usize::from(ours.contains(&expected));
        }
    }
    row_all(
        "snapshot: GPU use per measured cgroup and device (processes, memory, SM, memory %)",
        equal,
        CGROUPS * DEVICES,
    );
}
