//! Inside a PID namespace of its own (`unshare --pid --fork --mount-proc`), the iterator path
//! reports the pids and parent pids that namespace's `/proc` shows: never the initial
//! namespace's.

use std::process::{Child, Command};

use super::super::super::Target;
use super::tests::{pass, reader};
use super::BPF_ITER;
use crate::config::ProcessSource;
use crate::source::task_iter::TaskIter;
use crate::source::Roots;

const CHILD_MODE: &str = "RELAY_METRICS_PID_NAMESPACE_CHILD";
const CHECKED: &str = " pid-namespace-checked";

fn proc_pids() -> Vec<u32> {
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids
}

fn start_time_ticks(pid: u32) -> u64 {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
    crate::source::procfs::parse::parse_stat(&stat)
        .unwrap()
        .start_time_ticks
}

/// The checks that run in the namespace, when this test binary runs there
/// (`crate::test_children`; returns at once without the variable). A failed check panics,
/// which aborts the child with the message on stderr.
pub(crate) fn run_child_if_requested() {
    if std::env::var_os(CHILD_MODE).is_none() {
        return;
    }
    // This process is the init of a PID namespace other than the test runner's.
    assert_eq!(std::process::id(), 1, "not the init of a new PID namespace");
    let outer = std::env::var(CHILD_MODE).unwrap();
    let own = std::fs::read_link("/proc/self/ns/pid").unwrap();
    assert_ne!(
        own.to_string_lossy(),
        outer,
        "still in the runner's PID namespace"
    );

    let mut sleepers: Vec<Child> = (0..3)
        .map(|_| Command::new("sleep").arg("60").spawn().unwrap())
        .collect();
    let target = Target::Global;
    let mut iter = reader(ProcessSource::BpfIter, &target);
    assert_eq!(iter.process_source(), (BPF_ITER, None));
    let processes = pass(&mut iter, &target);
    let reported: Vec<u32> = processes.iter().map(|p| p.pid).collect();
    assert_eq!(reported, proc_pids(), "the namespace's processes");
    for sleeper in &sleepers {
        let pid = sleeper.id();
        assert!(
            !iter.procfs_pids().contains(&pid),
            "pid {pid} was not served by the iterator"
        );
        let counters = processes.iter().find(|p| p.pid == pid).unwrap();
        assert_eq!(
            counters.start_time_ticks,
            start_time_ticks(pid),
            "pid {pid}"
        );
    }

    // The records themselves: pids and parent pids as this namespace numbers them.
    let mut task_iter = TaskIter::load(&Roots::host(), true).unwrap();
    let mut records = Vec::new();
    task_iter.read(&mut records).unwrap();
    let listed = proc_pids();
    for record in &records {
        assert!(
            listed.binary_search(&record.tgid).is_ok(),
            "record of pid {} not in this namespace's /proc {listed:?}",
            record.tgid
        );
    }
    for sleeper in &sleepers {
        let record = records.iter().find(|r| r.tgid == sleeper.id()).unwrap();
        assert_eq!(record.ppid, 1, "parent of {}", sleeper.id());
    }
    // The init's parent is outside the namespace: 0, as stat prints it.
    if let Some(init) = records.iter().find(|r| r.tgid == 1) {
        assert_eq!(init.ppid, 0);
    }
    for sleeper in &mut sleepers {
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }
    println!("{CHECKED}");
    std::process::exit(0);
}

#[test]
#[ignore = "root: creates a PID namespace and loads the BPF task iterator"]
fn pids_in_a_pid_namespace_are_that_namespaces_as_root() {
    assert_eq!(
        nix::unistd::geteuid().as_raw(),
        0,
        "unshare --pid and the task iterator need root"
    );
    let output = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(std::env::current_exe().unwrap())
        .env(CHILD_MODE, std::fs::read_link("/proc/self/ns/pid").unwrap())
        .output()
        .expect("unshare (util-linux) runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(CHECKED),
        "in the namespace:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
