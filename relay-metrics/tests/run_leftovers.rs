//! What `relay-metrics run` does with the processes the command leaves behind: they are named
//! (in `extensions.cumulative.reason` and so in the summary) with what `run` did to them, ended
//! by default or waited for with `--wait-all`; and without a cgroup (`--no-cgroup`) nothing is
//! left running in any exit path, `setsid` descendants included.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{json_lines, Reaped};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

const BIN: &str = env!("CARGO_BIN_EXE_relay-metrics");

/// The pids of live processes whose command line starts with `sleep <marker>` (not the shells
/// whose arguments hold it: they exist before `run` is ready for signals).
fn with_marker(marker: &str) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rfind(')')
            .is_some_and(|at| stat[at + 1..].trim_start().starts_with('Z'));
        let line = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !zombie && line.starts_with(&format!("sleep {marker}")) {
            found.push(pid);
        }
    }
    found
}

/// Waits up to `limit` for no process to carry `marker`; kills what is left (so that a
/// failure leaves nothing behind) and returns it.
fn left_after(marker: &str, limit: Duration) -> Vec<i32> {
    let deadline = Instant::now() + limit;
    loop {
        let left = with_marker(marker);
        if left.is_empty() || Instant::now() > deadline {
            for &pid in &left {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until a process carries `marker`.
fn started(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while with_marker(marker).is_empty() {
        assert!(Instant::now() < deadline, "{marker} never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `run --no-cgroup` on a command that starts a `setsid` descendant (`sleep <marker>`) and
/// goes on itself (`sleep <marker>1`), with the forwarded signals at their defaults.
fn run_setsid(marker: &str) -> Reaped {
    let script = format!("setsid sleep {marker} & exec sleep {marker}1");
    let mut command = Command::new(BIN);
    command
        .args([
            "run",
            "--no-cgroup",
            "--interval-ms",
            "50",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: only `signal`, which is async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGTERM, libc::SIG_DFL);
            Ok(())
        });
    }
    let run = Reaped(command.spawn().unwrap());
    started(&format!("{marker}1"));
    started(marker);
    run
}

/// A marker no other test uses: a number of seconds `sleep` takes.
fn marker(case: u32) -> String {
    format!("{case}{}.25", std::process::id())
}

#[test]
fn no_cgroup_a_closed_reader_leaves_no_setsid_descendant() {
    let marker = marker(301);
    let mut run = run_setsid(&marker);
    let mut stdout = BufReader::new(run.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    drop(stdout);
    let _ = run.0.wait();
    let left = left_after(&marker, Duration::from_millis(1500));
    assert!(
        left.is_empty(),
        "left running after a closed reader: {left:?}"
    );
}

#[test]
fn no_cgroup_sigterm_leaves_no_setsid_descendant() {
    let marker = marker(302);
    let mut run = run_setsid(&marker);
    let stdout = run.0.stdout.take().unwrap();
    let drain = std::thread::spawn(move || std::io::copy(&mut { stdout }, &mut std::io::sink()));
    kill(Pid::from_raw(run.0.id() as i32), Signal::SIGTERM).unwrap();
    let status = run.0.wait().unwrap();
    let _ = drain.join();
    // The command (sleep) died of the SIGTERM run passed on.
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    let left = left_after(&marker, Duration::from_millis(1500));
    assert!(left.is_empty(), "left running after SIGTERM: {left:?}");
}

#[test]
fn no_cgroup_a_killed_run_leaves_no_setsid_descendant() {
    let marker = marker(303);
    let mut run = run_setsid(&marker);
    let stdout = run.0.stdout.take().unwrap();
    let drain = std::thread::spawn(move || std::io::copy(&mut { stdout }, &mut std::io::sink()));
    // The guard hears of a process that left the group within 100 ms.
    std::thread::sleep(Duration::from_millis(300));
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    let _ = drain.join();
    let left = left_after(&marker, Duration::from_millis(3000));
    assert!(
        left.is_empty(),
        "left running after run was killed: {left:?}"
    );
}

/// Runs `run` with `options` on `script` to its end; returns the last line's cumulative
/// reason and the summary (text) `run` printed.
fn run_to_end(options: &[&str], script: &str) -> (String, String) {
    let output = Command::new(BIN)
        .arg("run")
        .args(options)
        .args(["--summary", "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let lines = json_lines(&output.stdout);
    let reason = lines.last().unwrap()["extensions"]["cumulative"]["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (reason, String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn what_the_command_leaves_running_is_named_and_ended_by_default() {
    for mode in [&[][..], &["--no-cgroup"][..]] {
        let marker = marker(304 + mode.len() as u32);
        let dir = tempfile::tempdir().unwrap();
        let touched = dir.path().join("x");
        let script = format!("(sleep {marker}; touch {}) & exit 0", touched.display());
        let (reason, summary) = run_to_end(mode, &script);
        assert!(
            reason.contains("the command left") && reason.contains(&format!("sleep {marker}")),
            "{mode:?}: {reason}"
        );
        assert!(
            reason.contains("run ended them (SIGKILL)"),
            "{mode:?}: {reason}"
        );
        assert!(
            summary.contains(&format!("sleep {marker}")),
            "{mode:?}: {summary}"
        );
        assert!(left_after(&marker, Duration::from_millis(500)).is_empty());
        assert!(!touched.exists());
    }
}

#[test]
fn wait_all_waits_for_what_the_command_left_running_and_its_limit_ends_it() {
    for mode in [&["--wait-all"][..], &["--wait-all", "--no-cgroup"][..]] {
        let dir = tempfile::tempdir().unwrap();
        let touched = dir.path().join("x");
        let script = format!("(sleep 0.6; touch {}) & exit 0", touched.display());
        let (reason, _) = run_to_end(mode, &script);
        assert!(
            touched.exists(),
            "{mode:?}: the left-over process was not waited for"
        );
        assert!(
            reason.contains("run waited for them (--wait-all)"),
            "{mode:?}: {reason}"
        );
    }
    let marker = marker(306);
    let started = Instant::now();
    let (reason, _) = run_to_end(&["--wait-all=0.5"], &format!("sleep {marker} & exit 0"));
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(reason.contains("--wait-all limit passed"), "{reason}");
    assert!(left_after(&marker, Duration::from_millis(500)).is_empty());
}
