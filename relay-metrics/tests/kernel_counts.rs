//! Kernel event counts through the binary, as root: exact process-creation counts in `run`,
//! and no false tracking error when tracked processes exit.

mod common;

use serde_json::Value;

fn assert_root() {
    common::assert_root("it loads eBPF programs");
}

/// Runs `relay-metrics run` (with `options`) on `script` and returns its NDJSON lines.
fn run_with(options: &[&str], interval_ms: &str, script: &str) -> Vec<Value> {
    let mut args = vec!["--interval-ms", interval_ms];
    args.extend_from_slice(options);
    common::run_script(&args, script)
}

fn run(interval_ms: &str, script: &str) -> Vec<Value> {
    run_with(&[], interval_ms, script)
}

#[test]
#[ignore = "root: loads eBPF programs"]
fn exiting_members_leave_no_kernel_events_error_as_root() {
    assert_root();
    let lines = run("100", "for i in $(seq 300); do /bin/true; done");
    assert!(lines.len() >= 2);
    for line in &lines {
        let events = &line["extensions"]["kernel_events"];
        assert_eq!(events["active"], true, "{events}");
        assert_eq!(events["reason"], Value::Null, "{events}");
        let unavailable = line["extensions"]["unavailable"].as_array().unwrap();
        assert!(
            !unavailable
                .iter()
                .any(|u| u["field"] == "extensions.kernel_events"),
            "{unavailable:?}"
        );
    }
}

#[test]
#[ignore = "root: loads eBPF programs"]
fn run_counts_exactly_the_processes_its_command_creates_and_not_threads_as_root() {
    assert_root();
    // 200 forks (the loop and `[` are built into the shell), then one process with 20 threads
    // (Debian's python3 itself: a version-manager shim on $PATH may fork to find it).
    let script = "i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done; \
        /usr/bin/python3 -c 'import threading; [threading.Thread(target=int).start() for _ in range(20)]'";
    // In run's own cgroup (as root by default), then on the process tree.
    let last = run("50", script).pop().unwrap();
    assert_eq!(last["measurement_scope"], "cgroup", "{last}");
    let events = &last["extensions"]["kernel_events"];
    assert_eq!(events["processes_created"], 201, "{events}");
    chrono::DateTime::parse_from_rfc3339(events["counting_since"].as_str().unwrap()).unwrap();
    let cumulative = &last["extensions"]["cumulative"];
    assert_eq!(cumulative["processes_created"], 201, "{cumulative}");

    let last = run_with(&["--no-cgroup"], "50", script).pop().unwrap();
    assert_eq!(last["measurement_scope"], "process_tree", "{last}");
    let events = &last["extensions"]["kernel_events"];
    assert_eq!(events["processes_created"], 201, "{events}");
    // The command was started stopped and tracked before it ran: the count is its lifetime's.
    assert_eq!(last["process"]["lifetime_creation_count"]["value"], 201);
}
