//! `extensions.cumulative` never decreases over a churn of 2,000 short processes, in each
//! scope (global, process tree, and a cgroup as root), and counts what exited.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the collector or the workload is broken"
)]

mod common;

use std::io::Write as _;
use std::process::{Child, Command, Stdio};

use relay_metrics::config::{ProcessSource, ResourceMetricsConfig, ScopeSetting};
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

/// The tests of this file one at a time: each counts what the machine creates.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Process creations and exits come from the eBPF counters; without them (not root) they are
/// `null` and the reason says so.
fn creations(first: &Cumulative, last: &Cumulative) -> Option<(u64, u64)> {
    match (first.processes_created, last.processes_created) {
        (Some(before), Some(after)) => Some((
            after - before,
            last.processes_exited.unwrap() - first.processes_exited.unwrap(),
        )),
        _ => {
            assert!(
                !nix::unistd::geteuid().is_root()
                    && last.reason.as_deref().is_some_and(|r| r.contains("eBPF")),
                "no creations counted: {:?}",
                last.reason
            );
            None
        }
    }
}

#[test]
fn global_totals_never_decrease_over_a_churn() {
    let _alone = alone();
    let mut collector = Collector::new(config(ScopeSetting::Global)).unwrap();
    let (first, last) = collect_through(&mut collector, churn());
    assert_eq!(last.method.as_str(), "proc_stat");
    if let Some((created, exited)) = creations(&first, &last) {
        assert!(created >= 2000, "{created} processes counted");
        assert!(exited >= 2000, "{exited} exits counted");
    }
    assert!(last.cpu_user_ns.unwrap() + last.cpu_system_ns.unwrap() > 0);
}

/// `/proc/stat`'s `processes` counts every clone, threads too: 1,000 threads of one process
/// are one process created.
#[test]
fn global_creations_are_processes_not_threads() {
    let _alone = alone();
    let mut collector = Collector::new(config(ScopeSetting::Global)).unwrap();
    let first = collector.collect().extensions.cumulative.clone().unwrap();
    let threads = Command::new("python3")
        .args([
            "-c",
            "import threading\nfor _ in range(1000):\n    t = threading.Thread(target=int)\n    t.start()\n    t.join()",
        ])
        .status()
        .unwrap();
    assert!(threads.success());
    let last = collector.collect().extensions.cumulative.clone().unwrap();
    if let Some((created, exited)) = creations(&first, &last) {
        // The Python process, and what else the machine started meanwhile.
        assert!((1..100).contains(&created), "{created} processes created");
        assert!(exited <= created + 100, "{exited} exits");
    }
}

#[test]
fn process_tree_totals_never_decrease_over_a_churn_and_keep_the_exited() {
    let _alone = alone();
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
    let _alone = alone();
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

/// A process that runs one busy thread after another (each 0.2 s of CPU), beside an idle one:
/// about one logical processor. Its run-time rate (`extensions.precise_cpu`, from the task
/// iterator) must count the threads that ended during the interval: a sum of the live threads'
/// run time falls whenever one ends. Witness: the process's own `stat` user and system ticks
/// over the same interval. procfs has no file for the whole run time: `null` there.
#[test]
#[ignore = "root: the BPF task iterator"]
fn a_process_whose_threads_come_and_go_has_its_whole_run_time_rate() {
    struct Killed(Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _alone = alone();
    let child = Command::new("python3")
        .args([
            "-c",
            "import threading, time\n\
             threading.Thread(target=time.sleep, args=(1000,), daemon=True).start()\n\
             def spin():\n    end = time.thread_time() + 0.2\n    while time.thread_time() < end: pass\n\
             while True:\n    t = threading.Thread(target=spin)\n    t.start()\n    t.join()",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let child = Killed(child);
    let pid = child.0.id();
    let ticks = |pid: u32| -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let fields: Vec<&str> = after.split(' ').collect();
        fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
    };
    let clock_ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .unwrap()
        .unwrap() as f64;
    for source in [ProcessSource::BpfIter, ProcessSource::Procfs] {
        // A process tree: the iterator reads a single process through procfs.
        let mut config = config(ScopeSetting::ProcessTree);
        config.root_pid = Some(pid);
        config.extensions.process_source = source;
        let mut collector = Collector::new(config).unwrap();
        let (started, ticks_before) = (std::time::Instant::now(), ticks(pid));
        collector.collect();
        std::thread::sleep(std::time::Duration::from_secs(2));
        let snapshot = collector.collect();
        let (elapsed, ticks_after) = (started.elapsed(), ticks(pid));
        let precise = snapshot.extensions.precise_cpu.clone().unwrap();
        let rate = precise.run_rate_logical_processors;
        if source == ProcessSource::Procfs {
            assert_eq!((precise.run_time_ns, rate), (None, None));
            continue;
        }
        let rate = rate.expect("a run-time rate");
        let witness = (ticks_after - ticks_before) as f64 / clock_ticks / elapsed.as_secs_f64();
        assert!(
            witness > 0.7,
            "the process ran {witness} logical processors"
        );
        assert!(
            (rate - witness).abs() <= 0.1,
            "run-time rate {rate}, stat's ticks {witness}"
        );
    }
}
