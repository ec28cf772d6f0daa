//! `extensions.cumulative` never decreases over a churn of 2,000 short processes, in each
//! scope (global, process tree, and a cgroup as root), and counts what exited.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the collector or the workload is broken"
)]

mod common;

use std::io::Write as _;
use std::process::{Child, Command, Stdio};

use relay_metrics::config::{ResourceMetricsConfig, ScopeSetting};
use relay_metrics::snapshot::Cumulative;
use relay_metrics::Collector;

/// 2,000 short processes, started once a line arrives on stdin.
fn churn() -> Child {
    Command::new("sh")
        .args([
            "-c",
            "read go; i=0; while [ $i -lt 2000 ]; do /bin/true; i=$((i+1)); done",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn config(scope: ScopeSetting) -> ResourceMetricsConfig {
    let mut config = ResourceMetricsConfig::from_text(
        r#"{"gpu": {"enabled": false}, "network": {"enabled": false}}"#,
    )
    .unwrap();
    config.measurement_scope = scope;
    config
}

/// The totals as a list, to compare field by field.
fn fields(c: &Cumulative) -> [(&'static str, Option<u64>); 6] {
    [
        ("cpu_user_ns", c.cpu_user_ns),
        ("cpu_system_ns", c.cpu_system_ns),
        ("storage_read_bytes", c.storage_read_bytes),
        ("storage_write_bytes", c.storage_write_bytes),
        ("processes_created", c.processes_created),
        ("processes_exited", c.processes_exited),
    ]
}

/// Collects while `child` churns, asserting that no total ever goes down; returns the first
/// and last totals.
fn collect_through(collector: &mut Collector, mut child: Child) -> (Cumulative, Cumulative) {
    let first = collector.collect().extensions.cumulative.clone().unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut previous = first.clone();
    let mut snapshots = 0;
    loop {
        let done = child.try_wait().unwrap().is_some();
        let now = collector.collect().extensions.cumulative.clone().unwrap();
        for ((name, before), (_, after)) in fields(&previous).into_iter().zip(fields(&now)) {
            if let (Some(before), Some(after)) = (before, after) {
                assert!(after >= before, "{name} went down: {before} then {after}");
            }
        }
        assert_eq!(now.since, first.since, "since moved");
        previous = now;
        snapshots += 1;
        if done {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    assert!(
        snapshots > 10,
        "too few snapshots during the churn: {snapshots}"
    );
    (first, previous)
}

#[test]
fn global_totals_never_decrease_over_a_churn() {
    let mut collector = Collector::new(config(ScopeSetting::Global)).unwrap();
    let (first, last) = collect_through(&mut collector, churn());
    assert_eq!(last.method.as_str(), "proc_stat");
    let created = last.processes_created.unwrap() - first.processes_created.unwrap();
    assert!(created >= 2000, "{created} forks counted");
    assert!(last.processes_exited.unwrap() > first.processes_exited.unwrap());
    assert!(last.cpu_user_ns.unwrap() + last.cpu_system_ns.unwrap() > 0);
}

#[test]
fn process_tree_totals_never_decrease_over_a_churn_and_keep_the_exited() {
    let child = churn();
    let mut config = config(ScopeSetting::ProcessTree);
    config.root_pid = Some(child.id());
    let mut collector = Collector::new(config).unwrap();
    let (_, last) = collect_through(&mut collector, child);
    assert_eq!(last.method.as_str(), "process_tree");
    // 2,000 exec'd processes cost CPU that only cutime/cstime still hold once they are reaped.
    let cpu = last.cpu_user_ns.unwrap() + last.cpu_system_ns.unwrap();
    assert!(cpu > 50_000_000, "{cpu} ns for 2,000 processes");
}

#[test]
#[ignore = "root: creates a cgroup"]
fn cgroup_totals_never_decrease_over_a_churn() {
    common::assert_root("it creates a cgroup");
    let cgroup = common::TestCgroup::new("cumulative", &["cpuacct", "memory", "blkio"]);
    let child = churn();
    cgroup.enter(child.id());
    let mut config = config(ScopeSetting::Cgroup);
    config.cgroup_path = Some(cgroup.path.clone());
    let mut collector = Collector::new(config).unwrap();
    let (_, last) = collect_through(&mut collector, child);
    assert!(last.method.as_str().starts_with("cgroup_"), "{last:?}");
    let cpu = last.cpu_user_ns.unwrap() + last.cpu_system_ns.unwrap();
    assert!(cpu > 50_000_000, "{cpu} ns for 2,000 processes");
    assert!(last.memory_peak_bytes.unwrap() > 0);
    drop(collector);
}
