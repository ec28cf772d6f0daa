//! Encoding one snapshot for the agent's outputs (global scope of the 10-process synthetic tree,
//! second collect so rates are present, every category but GPU): the Prometheus text, and the
//! OTLP request as the sampling thread makes it (`OtlpPublisher::publish`: build
//! opentelemetry-proto's message, then encode it as protobuf or JSON, optionally gzip).
//!
//! Run with `cargo bench -p relay-metrics-suite --bench exports`.

mod support;

use std::time::SystemTime;

use criterion::Criterion;
use relay_metrics::config::{MetricNames, ScopeSetting};
use relay_metrics::output::otlp::{self, OtlpFlags, OtlpSettings};
use relay_metrics::output::prometheus;

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

quick_main!(2; exports);
