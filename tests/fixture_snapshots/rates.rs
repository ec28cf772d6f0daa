//! Rates between two collections over a fixture tree edited in between.

use std::path::Path;
use std::time::{Duration, Instant};

use relay_metrics::ResourceMetricsConfig;
use serde_json::{json, Value};

use crate::shape::assert_shape;
use crate::support::*;
use relay_metrics::internals::copy_tree;

/// Rewrites a counter file in place (same inode: the collector holds it open and re-reads it).
pub(crate) fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

/// Rate bounds from the instants around both collections: the collector's own interval lies
/// between `before2 - after1` and `after2 - before1`.
pub(crate) struct Interval {
    pub(crate) shortest: f64,
    pub(crate) longest: f64,
}

impl Interval {
    #[track_caller]
    pub(crate) fn assert_rate(&self, actual: f64, delta: f64, what: &str) {
        let (low, high) = (delta / self.longest, delta / self.shortest);
        assert!(
            actual >= low * (1.0 - 1e-9) && actual <= high * (1.0 + 1e-9),
            "{what}: {actual} not within [{low}, {high}] (delta {delta} over {}..{} s)",
            self.shortest,
            self.longest
        );
    }
}

/// Two collections of a tree and of the whole system over a copied fixture whose counters are
/// advanced in between; the rates must match the hand-computed deltas over the elapsed time.
#[test]
pub(crate) fn rates_between_two_collections() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("global-small");
    copy_tree(&fixture("global-small"), &base).unwrap();
    let tree_config = config(json!({"measurement_scope": "process_tree", "root_pid": 100}));
    let global_config = config(json!({"measurement_scope": "global"}));
    let open = |config: &Value| {
        let config = ResourceMetricsConfig::from_value(config.clone()).unwrap();
        relay_metrics::internals::collector_with_roots(
            config,
            relay_metrics::internals::Roots::fixture(&base),
        )
        .unwrap()
    };
    assert_machine_matches_fixtures();
    let mut tree = open(&tree_config);
    let mut global = open(&global_config);

    let before1 = Instant::now();
    let tree1 = tree.collect();
    let global1 = global.collect();
    let after1 = Instant::now();
    let first = Snap::new(&tree1, &base);
    is_null(&first, "/cpu/consumption_rate");
    is_null(&first, "/disk/read_throughput");
    is_null(&first, "/network/system/receive_throughput");
    let first_global = Snap::new(&global1, &base);
    is_null(&first_global, "/cpu/consumption_rate");

    let proc = base.join("proc");
    for (file, from, to) in [
        // 101: utime 200 → 210 ticks (+0.1 s CPU); schedstat +100 ms run time.
        ("101/stat", " 200 50 0 0 ", " 210 50 0 0 "),
        // 102: read_bytes +1 MiB.
        ("102/io", "read_bytes: 4194304", "read_bytes: 5242880"),
        // eth0: rx +100000 B, tx +50000 B; lo unchanged.
        (
            "net/dev",
            "eth0: 1000000    1000    2    0    0     0          0         0   500000     500",
            "eth0: 1100000    1100    2    0    0     0          0         0   550000     550",
        ),
        // cpu0: busy +50 of +100 ticks; cpu1: busy +20 of +100 → 0.5 + 0.2 = 0.7 exactly.
        (
            "stat",
            "cpu0 4000 100 1000 10000 100 0 50 0 0 0",
            "cpu0 4050 100 1000 10050 100 0 50 0 0 0",
        ),
        (
            "stat",
            "cpu1 3000 0 500 12000 0 0 0 0 0 0",
            "cpu1 3020 0 500 12080 0 0 0 0 0 0",
        ),
    ] {
        edit(&proc.join(file), from, to);
    }
    std::thread::sleep(Duration::from_millis(200));

    let before2 = Instant::now();
    let tree2 = tree.collect();
    let global2 = global.collect();
    let after2 = Instant::now();
    let interval = Interval {
        shortest: before2.duration_since(after1).as_secs_f64(),
        longest: after2.duration_since(before1).as_secs_f64(),
    };
    assert!(interval.shortest >= 0.2);

    let s = Snap::new(&tree2, &base);
    // 10 ticks = 0.1 s of CPU.
    interval.assert_rate(
        num(&s, "/cpu/consumption_rate", "logical_processors"),
        0.1,
        "tree cpu rate",
    );
    assert_eq!(int(&s, "/cpu/user_time", "milliseconds"), 6100);
    interval.assert_rate(
        num(&s, "/disk/read_throughput", "bytes_per_second"),
        1_048_576.0,
        "tree read throughput",
    );
    assert_eq!(num(&s, "/disk/write_throughput", "bytes_per_second"), 0.0);
    assert_eq!(
        at(
            &s,
            "/process_sampling/field_sampled_processes/disk.read_throughput"
        ),
        3
    );
    interval.assert_rate(
        num(&s, "/network/system/receive_throughput", "bytes_per_second"),
        100_000.0,
        "system rx",
    );
    interval.assert_rate(
        num(
            &s,
            "/network/system/transmit_throughput",
            "bytes_per_second",
        ),
        50_000.0,
        "system tx",
    );
    interval.assert_rate(
        num(
            &s,
            "/network/interfaces/0/traffic/receive_throughput",
            "bytes_per_second",
        ),
        100_000.0,
        "eth0 rx",
    );
    assert_eq!(
        num(
            &s,
            "/network/interfaces/1/traffic/receive_throughput",
            "bytes_per_second"
        ),
        0.0,
        "lo did not move"
    );
    assert_eq!(int(&s, "/network/system/received_data", "bytes"), 1_101_000);

    let g = Snap::new(&global2, &base);
    // Σ Δbusy/Δtotal per CPU: independent of wall time.
    assert_close(
        num(&g, "/cpu/consumption_rate", "logical_processors"),
        0.7,
        "global cpu rate",
    );
    interval.assert_rate(
        num(&g, "/disk/read_throughput", "bytes_per_second"),
        1_048_576.0,
        "global read throughput",
    );
    // Pid 1 has no io counters: 4 usable pairs of 5 processes.
    assert_eq!(
        at(
            &g,
            "/process_sampling/field_sampled_processes/disk.read_throughput"
        ),
        4
    );
    interval.assert_rate(
        num(&g, "/network/system/receive_throughput", "bytes_per_second"),
        100_000.0,
        "global rx",
    );
    assert_shape(&s, &tree_config, "rates tree");
    assert_shape(&g, &global_config, "rates global");
}
