//! What the commands do with edge-case input: scope precedence between the config and the flags,
//! thread ids and kernel threads as `--pid`, a target that exits under `watch`, `bench` with a
//! closed stdout or an absurd iteration count, and intervals of 0.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_refused, json_of, relay_metrics, Reaped};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_relay-metrics");

fn sleeper(seconds: &str) -> Reaped {
    Reaped(
        Command::new("sleep")
            .arg(seconds)
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep starts"),
    )
}

fn config_file(dir: &tempfile::TempDir, text: &str) -> String {
    let path = dir.path().join("relay.json");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_scope_in_the_config_wins_over_the_one_pid_implies() {
    let target = sleeper("30");
    let pid = target.0.id().to_string();
    let dir = tempfile::tempdir().unwrap();
    let application = config_file(&dir, r#"{"measurement_scope": "application_process"}"#);
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--config",
        &application,
        "--pid",
        &pid,
    ]));
    assert_eq!(snapshot["measurement_scope"], "application_process");
    assert_eq!(
        snapshot["extensions"]["target"]["root_pid"],
        target.0.id(),
        "--pid still names the process"
    );
    // --scope overrides the config.
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--config",
        &application,
        "--scope",
        "process_tree",
        "--pid",
        &pid,
    ]));
    assert_eq!(snapshot["measurement_scope"], "process_tree");
    // Without a scope in the config, --pid implies process_tree as before.
    let unscoped = config_file(&dir, r#"{"gpu": {"enabled": false}}"#);
    let snapshot = json_of(&relay_metrics(&[
        "snapshot", "--config", &unscoped, "--pid", &pid,
    ]));
    assert_eq!(snapshot["measurement_scope"], "process_tree");
    // A config that measures everything cannot take a pid: said, not ignored.
    let global = config_file(&dir, r#"{"measurement_scope": "global"}"#);
    assert_refused(
        &relay_metrics(&["snapshot", "--config", &global, "--pid", &pid]),
        "the config's measurement_scope global measures every process: drop --pid",
    );
}

#[test]
fn a_thread_id_is_refused_with_its_process() {
    let (sender, receiver) = std::sync::mpsc::channel();
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        sender.send(nix::unistd::gettid().as_raw()).unwrap();
        let _ = stopped.recv();
    });
    let tid = receiver.recv().unwrap();
    let output = relay_metrics(&["snapshot", "--pid", &tid.to_string()]);
    stop.send(()).unwrap();
    thread.join().unwrap();
    assert_refused(
        &output,
        &format!(
            "{tid} is a thread of process {}, not a process",
            std::process::id()
        ),
    );
}

/// A kernel thread's pid (flag `PF_KTHREAD` in its stat line).
fn kernel_thread() -> u32 {
    const PF_KTHREAD: u64 = 0x0020_0000;
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                return false;
            };
            let after_comm = &stat[stat.rfind(')').unwrap() + 1..];
            let flags: u64 = after_comm
                .split_whitespace()
                .nth(6)
                .unwrap()
                .parse()
                .unwrap();
            flags & PF_KTHREAD != 0
        })
        .expect("the host shows at least one kernel thread (kthreadd)")
}

#[test]
fn a_kernel_thread_is_refused() {
    let pid = kernel_thread().to_string();
    assert_refused(
        &relay_metrics(&["snapshot", "--pid", &pid]),
        &format!("process {pid} is a kernel thread"),
    );
}

/// Runs `command` to completion (its output collected as it comes, so a full pipe never blocks
/// it) while `meanwhile` runs; fails if it takes longer than `limit`, killing it.
fn output_within(command: &mut Command, limit: Duration, meanwhile: impl FnOnce()) -> Output {
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output().unwrap()));
    meanwhile();
    match receiver.recv_timeout(limit) {
        Ok(output) => output,
        Err(_) => {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("{command:?} still running after {limit:?}");
        }
    }
}

#[test]
fn watch_ends_with_a_clear_line_once_its_target_exited() {
    // Long enough for watch to start (loading the eBPF programs) on a loaded machine.
    let target = sleeper("2");
    let pid = target.0.id().to_string();
    let output = output_within(
        Command::new(BIN).args(["watch", "--pid", &pid, "--interval-ms", "50"]),
        Duration::from_secs(20),
        || {
            // Reaps the sleeper as soon as it exits, as a parent does.
            let mut target = target;
            target.0.wait().unwrap();
        },
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&format!("process {pid} ")), "{stderr}");
    assert!(stderr.trim_end().ends_with(": stopping"), "{stderr}");
    let lines = common::json_lines(&output.stdout);
    assert!(!lines.is_empty(), "no snapshot before the target exited");
    // No all-null snapshot of a vanished process.
    assert!(lines
        .iter()
        .all(|line| line["process"]["active_count"].is_object()));
}

#[test]
fn bench_survives_a_closed_stdout() {
    let (read, write) = nix::unistd::pipe().unwrap();
    drop(read);
    let output = Command::new(BIN)
        .args(["bench", "--iterations", "5", "--scope", "global"])
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.status.success(), "{:?}: {stderr}", output.status);
}

#[test]
fn absurd_counts_and_zero_intervals_get_a_clear_error() {
    let started = Instant::now();
    assert_refused(
        &relay_metrics(&["bench", "--iterations", "18446744073709551615"]),
        "not in 1..=10000000",
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_refused(
        &relay_metrics(&["snapshot", "--interval-ms", "0"]),
        "invalid value '0' for '--interval-ms <MS>'",
    );
    assert_refused(
        &relay_metrics(&["watch", "--interval-ms", "0"]),
        "invalid value '0' for '--interval-ms <MS>'",
    );
}

/// `/proc/vmstat` `oom_kill`.
fn vmstat_oom_kills() -> u64 {
    let vmstat = std::fs::read_to_string("/proc/vmstat").unwrap();
    vmstat
        .lines()
        .find_map(|line| line.strip_prefix("oom_kill "))
        .expect("this kernel counts OOM kills")
        .parse()
        .unwrap()
}

#[test]
fn global_lifetime_fields_hold_only_counts_since_boot() {
    let before = vmstat_oom_kills();
    let snapshot = json_of(&relay_metrics(&["snapshot", "--scope", "global"]));
    let after = vmstat_oom_kills();
    let terminated: Vec<&Value> = snapshot["memory"]["limit_events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["resource"] == "memory" && event["event"] == "terminated")
        .collect();
    assert_eq!(
        terminated.len(),
        1,
        "{}",
        snapshot["memory"]["limit_events"]
    );
    let count = terminated[0]["count"]["value"].as_u64().unwrap();
    assert!(
        (before..=after).contains(&count),
        "terminated {count}, /proc/vmstat said {before} then {after}"
    );
    // No since-boot source exists for these: null, not a count from the collector's start.
    assert_eq!(snapshot["memory"]["out_of_memory_event_count"], Value::Null);
    assert_eq!(snapshot["process"]["lifetime_creation_count"], Value::Null);
}
