//! The binary inside a PID namespace of its own (`unshare --pid --fork --mount-proc`): with the
//! task iterator forced, it must load (its first read proves the pids, parent pids and start
//! time of the collector are the namespace's) and count exactly the namespace's processes, as
//! the procfs path does. The pid-by-pid comparison with that namespace's `/proc` is the library
//! test `collector::processes::iter::namespace_tests`.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::process::Command;

use common::{assert_root, binary, json_of};

/// A snapshot taken as the init of a new PID namespace that also holds three `sleep`s.
fn snapshot_in_namespace(process_source: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        format!(r#"{{"extensions": {{"process_source": "{process_source}"}}}}"#),
    )
    .unwrap();
    let output = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", "sh", "-c"])
        // The shell becomes the collector (exec), so the namespace holds it and the sleeps.
        .arg(r#"sleep 60 & sleep 60 & sleep 60 & exec "$0" snapshot --scope global --config "$1""#)
        .arg(binary())
        .arg(&config)
        .output()
        .expect("unshare (util-linux) runs");
    json_of(&output)
}

#[test]
#[ignore = "root: creates a PID namespace and loads the BPF task iterator"]
fn the_iterator_counts_a_pid_namespaces_own_processes_as_root() {
    assert_root("unshare --pid and the task iterator");
    let by_iter = snapshot_in_namespace("bpf_iter");
    let collector = &by_iter["extensions"]["collector"];
    assert_eq!(collector["process_source"], "bpf_iter", "{collector}");
    assert_eq!(collector["process_source_reason"], serde_json::Value::Null);
    // The collector (pid 1 there) and the three sleeps: none of the host's processes.
    assert_eq!(by_iter["process"]["active_count"]["value"], 4, "{by_iter}");
    let by_procfs = snapshot_in_namespace("procfs");
    assert_eq!(
        by_procfs["process"]["active_count"]["value"], 4,
        "{by_procfs}"
    );
}
