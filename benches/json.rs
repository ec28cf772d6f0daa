//! Serialising a full snapshot (second collect of the 10-process synthetic tree, so rates are
//! present; every category but GPU) into a reused `Vec<u8>`: `write_json` (the path the CLI and
//! `serve` use), and serde_json for comparison (`json/<scope>/serde`).
//!
//! Run with `cargo bench -p relay-metrics-suite --bench json`.

#[expect(dead_code, reason = "the collect bench uses the rest of the generator")]
mod support;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use relay_metrics::config::ScopeSetting;
use relay_metrics::internals::Roots;
use relay_metrics::ResourceMetricsConfig;

use support::{SyntheticTree, ROOT_PID};

fn or_die<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{what}: {error}"),
    }
}

fn json(c: &mut Criterion) {
    let tree = or_die(SyntheticTree::generate(10), "generating the tree");
    let mut group = c.benchmark_group("json");
    for (name, scope) in [
        ("process_tree", ScopeSetting::ProcessTree),
        ("global", ScopeSetting::Global),
    ] {
        let mut config = ResourceMetricsConfig {
            measurement_scope: scope,
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
        let mut buf = Vec::with_capacity(16 * 1024);
        or_die(serde_json::to_writer(&mut buf, &*snapshot), "serialising");
        let mut fast = Vec::with_capacity(16 * 1024);
        snapshot.write_json(&mut fast);
        assert!(
            fast == buf,
            "json/{name}: write_json differs from serde_json"
        );
        eprintln!("json/{name}: {} bytes", buf.len());
        group.throughput(Throughput::Bytes(buf.len() as u64));
        group.bench_function(format!("{name}/write_json"), |b| {
            b.iter(|| {
                buf.clear();
                snapshot.write_json(&mut buf);
            })
        });
        group.bench_function(format!("{name}/serde"), |b| {
            b.iter(|| {
                buf.clear();
                serde_json::to_writer(&mut buf, &*snapshot)
            })
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
    targets = json
}
criterion_main!(benches);
