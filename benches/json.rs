//! Serialising a full snapshot (second collect of the 10-process synthetic tree, so rates are
//! present; every category but GPU) into a reused `Vec<u8>`: `write_json` (the path the CLI and
//! `serve` use), and serde_json for comparison (`json/<scope>/serde`).
//!
//! Run with `cargo bench -p relay-metrics-suite --bench json`.

mod support;

use criterion::{Criterion, Throughput};
use relay_metrics::config::ScopeSetting;

use support::{or_die, second_snapshot, SyntheticTree};

fn json(c: &mut Criterion) {
    let tree = or_die(SyntheticTree::generate(10), "generating the tree");
    let mut group = c.benchmark_group("json");
    for (name, scope) in [
        ("process_tree", ScopeSetting::ProcessTree),
        ("global", ScopeSetting::Global),
    ] {
        let snapshot = second_snapshot(&tree, scope);
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

quick_main!(2; json);
