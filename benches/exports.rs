//! Encoding one snapshot for the agent's outputs (global scope of the 10-process synthetic tree,
//! second collect so rates are present, every category but GPU): the Prometheus text, and the
//! OTLP request as the sampling thread makes it (`OtlpPublisher::publish`: build
//! opentelemetry-proto's message, then encode it as protobuf or JSON, optionally gzip).
//!
//! Also a node agent's `/metrics` body: the same snapshot with 500 measured cgroups (Kubernetes
//! pods' paths and labels, every value present, one disk each), encoded in the `relay_metrics`
//! and the `cadvisor` naming, and that text compressed as the agent compresses a scrape (gzip,
//! fastest level, zlib-rs). `prometheus_after_last` writes two texts in a row as the agent does
//! (`CgroupLines`): the first after the other case's, then the case's, whose unchanged cgroups'
//! lines are copied.
//!
//! Run with `cargo bench -p relay-metrics-suite --bench exports`.

mod support;

use std::io::Write as _;
use std::time::SystemTime;

use criterion::Criterion;
use relay_metrics::config::{MetricNames, ScopeSetting};
use relay_metrics::output::otlp::{self, OtlpFlags, OtlpSettings};
use relay_metrics::output::prometheus;
use relay_metrics::snapshot::{CgroupTargetReport, Targets};
use relay_metrics::ResourceMetricsSnapshot;

use support::{or_die, second_snapshot, SyntheticTree};

fn exports(c: &mut Criterion) {
    let tree = or_die(SyntheticTree::generate(10), "generating the tree");
    let snapshot = second_snapshot(&tree, ScopeSetting::Global);

    let mut group = c.benchmark_group("exports");
    let mut text = String::with_capacity(16 * 1024);
    for (name, names) in [
        ("relay_metrics", MetricNames::RelayMetrics),
        ("relay", MetricNames::Relay),
    ] {
        group.bench_function(format!("prometheus/{name}"), |b| {
            b.iter(|| prometheus::encode(&snapshot, names, &mut text))
        });
    }
    for (name, protocol, compression) in [
        ("http_protobuf", "http/protobuf", "none"),
        ("http_protobuf_gzip", "http/protobuf", "gzip"),
        ("http_json", "http/json", "none"),
    ] {
        let flags = OtlpFlags {
            otlp_endpoint: Some("http://127.0.0.1:4318".into()),
            ..OtlpFlags::default()
        };
        let env = |variable: &str| match variable {
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some(protocol.to_owned()),
            "OTEL_EXPORTER_OTLP_COMPRESSION" => Some(compression.to_owned()),
            _ => None,
        };
        let settings = or_die(OtlpSettings::resolve(&flags, &env), "settings")
            .unwrap_or_else(|| panic!("an endpoint is set"));
        let (publisher, _exporter) = or_die(otlp::start(&settings, SystemTime::now()), "start");
        group.bench_function(format!("otlp/{name}"), |b| {
            b.iter(|| publisher.publish(&snapshot))
        });
    }
    group.finish();
}

/// Measured cgroups in the node agent's bench.
const NODE_CGROUPS: usize = 500;

fn node_scrape(c: &mut Criterion) {
    let tree = or_die(SyntheticTree::generate(10), "generating the tree");
    let mut snapshot =
        ResourceMetricsSnapshot::clone(&second_snapshot(&tree, ScopeSetting::Global));
    snapshot.extensions.targets = Some(Box::new(Targets {
        matched: NODE_CGROUPS as u64,
        cgroups: (0..NODE_CGROUPS).map(pod_cgroup).collect(),
        ..Targets::default()
    }));
    let mut group = c.benchmark_group("node_500_cgroups");
    let mut text = String::with_capacity(4 << 20);
    for (name, names) in [
        ("relay_metrics", MetricNames::RelayMetrics),
        ("cadvisor", MetricNames::Cadvisor),
    ] {
        group.bench_function(format!("prometheus/{name}"), |b| {
            b.iter(|| prometheus::encode(&snapshot, names, &mut text))
        });
    }
    // As the agent writes its texts: the next snapshot's, every cgroup's report unchanged (an
    // idle node) or one in ten changed (a value each), copying the unchanged cgroups' lines.
    let unchanged = std::sync::Arc::new(snapshot.clone());
    let mut changed = snapshot.clone();
    if let Some(targets) = changed.extensions.targets.as_mut() {
        for report in targets.cgroups.iter_mut().step_by(10) {
            report.memory_current_bytes = report.memory_current_bytes.map(|bytes| bytes + 4096);
        }
    }
    let changed = std::sync::Arc::new(changed);
    let budget = relay_metrics::output::budget::SeriesBudget::everything();
    for (name, next) in [("unchanged", &unchanged), ("tenth_changed", &changed)] {
        let mut lines = prometheus::CgroupLines::new(MetricNames::RelayMetrics, budget.clone());
        group.bench_function(format!("prometheus_after_last/{name}"), |b| {
            b.iter(|| {
                lines.write(&unchanged, |_| {});
                lines.write(next, |_| {})
            })
        });
    }
    prometheus::encode(&snapshot, MetricNames::RelayMetrics, &mut text);
    let series = text.lines().filter(|line| !line.starts_with('#')).count();
    assert!(series > NODE_CGROUPS * 40, "{series} series");
    let mut gzipped = Vec::with_capacity(text.len() / 4);
    group.bench_function("gzip_fast/relay_metrics", |b| {
        b.iter(|| {
            gzipped.clear();
            let mut encoder =
                flate2::write::GzEncoder::new(&mut gzipped, flate2::Compression::fast());
            or_die(encoder.write_all(text.as_bytes()), "compressing");
            or_die(encoder.finish(), "compressing");
        })
    });
    eprintln!(
        "node_500_cgroups: relay_metrics text {} bytes, {series} series, gzip {} bytes",
        text.len(),
        gzipped.len()
    );
    group.finish();
}

/// A pod's container cgroup, every value present.
fn pod_cgroup(index: usize) -> CgroupTargetReport {
    let pod = format!("{index:08x}-1b2c-4d5e-8f90-a1b2c3d4e5f6");
    let container = format!("{index:064x}");
    let n = index as u64;
    let report = serde_json::json!({
        "cgroup": format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{container}.scope",
            pod.replace('-', "_")
        ),
        "labels": {"unit": format!("cri-containerd-{container}.scope"), "container_id": container,
                   "container_runtime": "containerd", "container_name": null, "container_image": null,
                   "pod_uid": pod, "pod_name": null, "pod_namespace": null, "qos_class": "Burstable"},
        "cpu_usage_ns": 81_234_567_891_u64 + n, "cpu_user_ns": 61_230_000_000_u64 + n,
        "cpu_system_ns": 20_000_000_000_u64 + n, "cpu_periods": 912_345 + n,
        "cpu_throttled_periods": 1_234 + n, "cpu_throttled_ns": 9_876_543_210_u64 + n,
        "cpu_limit_cores": 0.5, "memory_current_bytes": 389_120 + 4096 * n,
        "memory_peak_bytes": 757_760 + 4096 * n, "memory_limit_bytes": 536_870_912,
        "memory_events": {"low": 0, "high": 3, "max": 17, "oom": 1, "oom_kill": 1},
        "pids_current": 12, "pids_limit": 4096,
        "pressure": {"cpu_some_usec": 123_456 + n, "cpu_full_usec": 23_456 + n,
                     "memory_some_usec": 3_456, "memory_full_usec": 456,
                     "io_some_usec": 78_910, "io_full_usec": 8_910},
        "devices": [{"device": "8:0", "read_bytes": 1_048_576 * n, "write_bytes": 65_536 * n,
                     "read_operations": 256 * n, "write_operations": 16 * n}],
        "processes": {"count": 3, "threads": 17, "resident_bytes": 73_272_704 + n,
                      "open_file_descriptors": 41},
        "gpus": null,
        "kernel_events": {"run_queue_count": 91_234 + n, "run_queue_total_ns": 912_345_678 + n,
                          "run_queue_histogram": (0..32).map(|b| if (8..22).contains(&b) { 1000 + b + n } else { 0 }).collect::<Vec<u64>>(),
                          "preemptions": 4_567 + n, "reclaim_stalls": 2, "reclaim_stall_ns": 1_234_567,
                          "processes_created": 45, "processes_exited": 42, "oom_victims": []},
        "created_seconds": 1_796_493_849.356_425_5,
        "reason": null
    });
    or_die(serde_json::from_value(report), "a measured cgroup's JSON")
}

quick_main!(2; exports, node_scrape);
