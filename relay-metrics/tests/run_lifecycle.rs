//! `relay-metrics run`'s lifecycle: it ends right after the command with one final snapshot,
//! passes SIGTERM and SIGINT on, and never leaves the command or its descendants running when it
//! must stop early.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{json_lines, Reaped};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_relay-metrics");

/// Runs `run` with `args`, failing (and killing it) if it takes longer than `limit`.
fn run_within(args: &[&str], limit: Duration) -> (Output, Duration) {
    let started = Instant::now();
    let child = Command::new(BIN)
        .arg("run")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || sender.send(child.wait_with_output().unwrap()));
    match receiver.recv_timeout(limit) {
        Ok(output) => (output, started.elapsed()),
        Err(_) => {
            let _ = kill(pid, Signal::SIGKILL);
            panic!("run {args:?} still running after {limit:?}");
        }
    }
}

/// True while `pid` exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat[stat.rfind(')').unwrap() + 1..]
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

/// Waits up to 5 s for `pid` to be gone.
fn gone_soon(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while alive(pid) {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn run_exits_right_after_the_command_with_one_final_snapshot() {
    // The command ends long before the next 3 s tick: run must not wait for it. The command
    // notes when it ends (ns since the epoch); run's exit is timed from there.
    let (output, _) = run_within(
        &[
            "--interval-ms",
            "3000",
            "--",
            "sh",
            "-c",
            "sleep 0.3; date +%s%N >&2; exit 4",
        ],
        Duration::from_secs(30),
    );
    let exited_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    let command_end_ns: u128 = stderr.trim().parse().unwrap();
    let after_command = Duration::from_nanos((exited_ns - command_end_ns) as u64);
    // Generous for a loaded machine: the next tick was 2.7 s away, and the kernel's detach of
    // the eBPF programs happens in another process after run's exit.
    assert!(
        after_command < Duration::from_millis(1500),
        "run exited {after_command:?} after its command"
    );
    let lines = json_lines(&output.stdout);
    // The command before it ran, the first tick at the start, then the final snapshot at the
    // exit.
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["extensions"]["sampler"], Value::Null);
    assert_eq!(lines[0]["extensions"]["collector"]["sequence"], 1);
    assert_eq!(lines[1]["extensions"]["sampler"]["tick_index"], 0);
    let last = &lines[2];
    assert_eq!(
        last["extensions"]["sampler"],
        Value::Null,
        "off the tick grid"
    );
    let cumulative = &last["extensions"]["cumulative"];
    assert!(
        cumulative["cpu_user_ns"].as_u64().unwrap() + cumulative["cpu_system_ns"].as_u64().unwrap()
            > 0,
        "the final snapshot carries the exited command's totals: {cumulative}"
    );

    // The longest period (a day): the final snapshot still comes at the exit.
    let (output, took) = run_within(
        &["--interval-ms", "86400000", "--", "true"],
        Duration::from_secs(30),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(took < Duration::from_secs(10), "run took {took:?}");
    // The line before it ran, the first tick unless `true` was already gone, the final one.
    let lines = json_lines(&output.stdout);
    assert!((2..=3).contains(&lines.len()), "{} lines", lines.len());
    assert_eq!(lines.last().unwrap()["extensions"]["sampler"], Value::Null);
}

/// Starts `run` on a shell script that reports its pid in `dir/ready` once its traps are set.
fn run_script(dir: &tempfile::TempDir, script: &str) -> (Reaped, i32) {
    let ready = dir.path().join("ready");
    let script = format!(
        "{script}\necho $$ > {}.tmp && mv {0}.tmp {0}\nwait",
        ready.display()
    );
    let mut command = Command::new(BIN);
    command
        .args(["run", "--interval-ms", "50", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // As from a terminal: the signals `run` passes on are not ignored. A test runner started in
    // the background by a non-interactive shell ignores SIGINT, and the command inherits that
    // (as `nohup` relies on): `run` passes SIGINT on, but `sh` cannot trap an ignored signal.
    // SAFETY: only `signal`, which is async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let run = Reaped(command.spawn().unwrap());
    let deadline = Instant::now() + Duration::from_secs(20);
    let pid = loop {
        if let Ok(text) = std::fs::read_to_string(&ready) {
            break text.trim().parse::<i32>().unwrap();
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(10));
    };
    (run, pid)
}

fn wait_with_limit(run: &mut Reaped, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = run.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "run did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads `run`'s stdout to its end on a thread, as a reader of the stream would: `run` writes
/// ~7 KiB a line, and once the pipe holds 64 KiB its next write waits for a reader (on a
/// loaded machine the command's start alone can take that many 50 ms ticks).
fn drain_stdout(run: &mut Reaped) -> std::thread::JoinHandle<usize> {
    let mut stdout = run.0.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()).unwrap() as usize)
}

#[test]
fn sigterm_and_sigint_reach_the_command() {
    for (signal, code) in [(Signal::SIGTERM, 7), (Signal::SIGINT, 8)] {
        let dir = tempfile::tempdir().unwrap();
        let (mut run, command) =
            run_script(&dir, "trap 'exit 7' TERM; trap 'exit 8' INT; sleep 30 &");
        let stream = drain_stdout(&mut run);
        kill(Pid::from_raw(run.0.id() as i32), signal).unwrap();
        let status = wait_with_limit(&mut run, Duration::from_secs(10));
        assert!(stream.join().unwrap() > 0, "{signal}: run wrote its stream");
        assert_eq!(
            status.code(),
            Some(code),
            "{signal}: run exits with the command's code"
        );
        assert!(gone_soon(command), "{signal}: the command is gone");
    }
}

/// `run` on a command whose background child ignores SIGTERM (only the group's SIGKILL ends
/// it); returns `run`, the command's pid and the child's, both checked alive.
fn run_with_a_stubborn_descendant(dir: &tempfile::TempDir) -> (Reaped, i32, i32) {
    let pids = dir.path().join("pids");
    let (run, command) = run_script(
        dir,
        &format!(
            "(trap '' TERM; exec sleep 60) & echo $! > {}",
            pids.display()
        ),
    );
    let descendant: i32 = std::fs::read_to_string(&pids)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(alive(command) && alive(descendant));
    (run, command, descendant)
}

#[test]
fn a_reader_that_goes_away_ends_the_command_and_its_descendants() {
    let dir = tempfile::tempdir().unwrap();
    let (mut run, command, descendant) = run_with_a_stubborn_descendant(&dir);
    // The reader reads one line, then goes away: the next write fails.
    let mut stdout = BufReader::new(run.0.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    drop(stdout);
    let status = wait_with_limit(&mut run, Duration::from_secs(10));
    assert!(!status.success());
    assert!(gone_soon(command), "the command was left running");
    assert!(gone_soon(descendant), "its descendant was left running");
}

#[test]
fn a_killed_run_leaves_neither_the_command_nor_its_descendants() {
    let dir = tempfile::tempdir().unwrap();
    let (mut run, command, descendant) = run_with_a_stubborn_descendant(&dir);
    // SIGKILL: run itself can do nothing about it.
    run.0.kill().unwrap();
    run.0.wait().unwrap();
    assert!(gone_soon(command), "the command was left running");
    assert!(gone_soon(descendant), "its descendant was left running");
}

#[test]
fn a_full_output_file_ends_the_command() {
    // A marker in the command line finds the command among all processes.
    let marker = format!("31.{}", std::process::id());
    let (output, _) = run_within(
        &[
            "--interval-ms",
            "50",
            "--output",
            "/dev/full",
            "--",
            "sleep",
            &marker,
        ],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("cannot write the snapshot stream"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    let survivors: Vec<i32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                cmdline
                    .windows(marker.len())
                    .any(|w| w == marker.as_bytes())
            })
        })
        .filter(|pid| alive(*pid))
        .collect();
    assert!(survivors.is_empty(), "left running: {survivors:?}");
}

#[test]
fn the_command_starts_with_no_signal_blocked() {
    let dir = tempfile::tempdir().unwrap();
    let status = dir.path().join("status");
    let (output, _) = run_within(
        &[
            "--interval-ms",
            "1000",
            "--",
            "cp",
            "/proc/self/status",
            status.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert!(output.status.success());
    let text = std::fs::read_to_string(&status).unwrap();
    let blocked = text
        .lines()
        .find_map(|line| line.strip_prefix("SigBlk:"))
        .unwrap()
        .trim();
    assert_eq!(
        blocked, "0000000000000000",
        "the signals run forwards leaked into the command"
    );
}

#[test]
fn the_command_has_runs_stdin_and_the_signal_dispositions_run_was_given() {
    // The command is forked by run's starter, not by run: it must still read run's stdin, and
    // SIGINT and SIGQUIT are neither ignored (as in a shell's background job) nor un-ignored
    // where run's caller ignored them (here SIGQUIT).
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("stream.ndjson");
    let mut command = Command::new("sh");
    command
        .args([
            "-c",
            "trap '' QUIT; exec \"$0\" run --no-cgroup --output \"$1\" -- sh -c 'grep SigIgn /proc/self/status; cat'",
            BIN,
            stream.to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // run's caller does not ignore SIGINT, whatever the test runner was started with (in the
    // background of a non-interactive shell it ignores SIGINT, and `sh` cannot undo that).
    // SAFETY: only `signal`, which is async-signal-safe, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    std::io::Write::write_all(&mut child.stdin.take().unwrap(), b"from run's stdin\n").unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("from run's stdin"), "{stdout}");
    let ignored = stdout
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
        .unwrap();
    let bit = |signal: Signal| 1u64 << (signal as i32 - 1);
    assert_eq!(ignored & bit(Signal::SIGINT), 0, "SIGINT ignored: {stdout}");
    assert_ne!(
        ignored & bit(Signal::SIGQUIT),
        0,
        "SIGQUIT not kept: {stdout}"
    );
}
