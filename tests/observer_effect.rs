//! The collector's own held descriptors are not counted in its own process's
//! `open_file_descriptor_count` (one test in its own binary: the count of held descriptors is
//! process-wide, so no other collector may run meanwhile).

#![expect(
    clippy::expect_used,
    reason = "test helpers fail loudly on a broken environment"
)]

use std::process::{Child, Command, Stdio};

use relay_metrics::config::ScopeSetting;
use relay_metrics::{Collector, ResourceMetricsConfig};

/// Entries of `/proc/<pid>/fd` (for `self`: without the descriptor of the listing itself).
fn fd_count(pid: &str) -> u64 {
    let entries = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("listing fd/")
        .count() as u64;
    if pid == "self" {
        entries - 1
    } else {
        entries
    }
}

struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn the_collectors_held_descriptors_are_left_out_of_its_own_count() {
    let children = Children(
        (0..40)
            .map(|_| {
                Command::new("sleep")
                    .arg("60")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("sleep starts")
            })
            .collect(),
    );
    let before = fd_count("self");
    let config = ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "process_tree",
            "disk": {"enabled": false}, "gpu": {"enabled": false}, "network": {"enabled": false},
            "extensions": {"kernel_events": false}}"#,
    )
    .unwrap();
    assert_eq!(config.measurement_scope, ScopeSetting::ProcessTree);
    let mut collector = Collector::new(config).unwrap();
    collector.collect();
    let snapshot = collector.collect();
    let held_now = fd_count("self") - before;
    // The effect is real: the collector holds several descriptors per process of the tree.
    assert!(
        held_now >= 2 * 41,
        "the collector holds only {held_now} descriptors"
    );
    let total = snapshot
        .process
        .as_ref()
        .unwrap()
        .open_file_descriptor_count
        .as_ref()
        .expect("every process's count was read")
        .value
        .as_f64() as u64;
    let children_fds: u64 = children
        .0
        .iter()
        .map(|c| fd_count(&c.id().to_string()))
        .sum();
    let own = total - children_fds;
    // What this process had open before the collector, give or take the few descriptors the
    // collector holds that are not for reading kernel files (none with these categories off).
    assert!(
        own <= before + 2 && own + 2 >= before,
        "own count {own}, {before} before the collector, {held_now} held by it"
    );
}
