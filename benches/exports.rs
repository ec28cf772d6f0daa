//! Encoding one snapshot for the agent's outputs (global scope of the 10-process synthetic tree,
//! second collect so rates are present, every category but GPU): the Prometheus text, and the
//! OTLP request as the sampling thread makes it (`OtlpPublisher::publish`: build
//! opentelemetry-proto's message, then encode it as protobuf or JSON, optionally gzip).
//!
//! Run with `cargo bench -p relay-metrics-suite --bench exports`.

#[expect(dead_code, reason = "the collect bench uses the rest of the generator")]
mod support;

use std::time::{Duration, SystemTime};

use criterion::{criterion_group, criterion_main, Criterion};
use relay_metrics::config::{MetricNames, ScopeSetting};
use relay_metrics::internals::Roots;
use relay_metrics::output::otlp::{self, OtlpFlags, OtlpSettings};
use relay_metrics::output::prometheus;
use relay_metrics::ResourceMetricsConfig;

use support::{SyntheticTree, ROOT_PID};

fn or_die<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{what}: {error}"),
    }
}

fn exports(c: &mut Criterion) {
    let tree = or_die(SyntheticTree::generate(10), "generating the tree");
    let mut config = ResourceMetricsConfig {
        measurement_scope: ScopeSetting::Global,
        root_pid: Some(ROOT_PID),
        ..Default::default()
    };
    config.gpu.enabled = false;
    config.disk.filesystem_paths = vec!["/".into(), "/tmp".into()];
    let mut collector = or_die(
        relay_metrics::internals::collector_with_roots(config, Roots::fixture(tree.path())),
        "creating the collector",
    );
    drop(collector.collect());
    let snapshot = collector.collect();

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

fn quick() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = quick();
    targets = exports
}
criterion_main!(benches);
