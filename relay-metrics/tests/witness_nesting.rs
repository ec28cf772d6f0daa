//! The witness of nesting on the hybrid (v1) host: the same command alone under the same limit
//! of the caller's cgroup. A shell in a limited cgroup below the test's own runs a command,
//! once alone and once under `relay-metrics run`: under a CPU quota the command's CPU rate is
//! the same both ways, and under a pids limit its forks fail both ways. (The memory limit's
//! OOM kill is `run_nesting.rs`'s.) Each comparison is printed as
//! `WITNESS | host v1 | limit | field | under run | alone | allowed`. Root only (it makes
//! cgroups).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use common::{assert_root, Below};

const BIN: &str = env!("CARGO_BIN_EXE_relay-metrics");

/// Spins for 2 s of wall time and prints the CPU rate of the loop (CPU seconds per second)
/// and its whole CPU time (interpreter start included).
const SPIN: &str = "import time
wall, cpu = time.monotonic(), time.process_time()
while time.monotonic() - wall < 2: pass
print(round((time.process_time() - cpu) / (time.monotonic() - wall), 4), time.process_time())";

/// Reads the tasks of the caller's limited cgroup (`sys.argv[1]`, its `pids.current`, itself
/// included), then tries `FORK_ATTEMPTS` forks of children that wait to be killed; prints the
/// forks that failed (EAGAIN), the tasks it found before, and those after (its children alive).
const FORKS: &str = "import os, signal, sys
tasks = lambda: int(open(sys.argv[1]).read())
before = tasks()
pids, failed = [], 0
for _ in range(32):
    try:
        pid = os.fork()
    except BlockingIOError:
        failed += 1
        continue
    if pid == 0:
        signal.pause()
        os._exit(0)
    pids.append(pid)
after = tasks()
for pid in pids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
print(failed, before, after)";

/// The forks `FORKS` tries.
const FORK_ATTEMPTS: f64 = 32.0;
/// How many tasks `run`'s own count may change by while the command forks (a helper thread or
/// process of its collector that starts or ends meanwhile): each is one fork more or less that
/// fits under the caller's limit. An escape from the limit is off by the forks that fit, far
/// more.
const RUN_TASK_SLACK: f64 = 2.0;

/// The caller's quota: 20 ms of each 100 ms period.
const QUOTA_CORES: f64 = 0.2;
/// How far a rate may be from the quota and from the other: 15 % of the quota (one period's
/// 20 ms at either end of the 2 s window is 0.02).
const RATE_TOLERANCE: f64 = 0.03;

/// Runs `program` (Python, with the cgroup's `pids.current` as its argument) from a shell
/// that first moves itself into `cgroup`: alone, or under `run` (its summary as JSON on
/// stderr, its stream discarded).
fn in_cgroup(cgroup: &Below, under_run: bool, program: &str) -> Output {
    let prefix = if under_run {
        format!("{BIN} run --summary-format json --output /dev/null -- ")
    } else {
        String::new()
    };
    let line = format!(
        "echo $$ > {}/cgroup.procs && exec {prefix}/usr/bin/python3 -c \"$0\" {}",
        cgroup.dir.display(),
        cgroup.dir.join("pids.current").display()
    );
    let output = Command::new("sh")
        .args(["-c", &line, program])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    common::assert_success(&output);
    output
}

fn printed(output: &Output) -> Vec<f64> {
    String::from_utf8_lossy(&output.stdout)
        .split_whitespace()
        .map(|word| word.parse().unwrap())
        .collect()
}

fn summary(output: &Output) -> Value {
    serde_json::from_slice(&output.stderr)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)))
}

fn v1_host() -> bool {
    Path::new("/sys/fs/cgroup/cpu/cgroup.procs").exists()
}

#[test]
#[ignore = "root: makes a v1 cpu cgroup with a quota"]
fn under_the_callers_cpu_quota_a_command_has_the_rate_it_has_alone() {
    assert_root("makes a v1 cpu cgroup");
    assert!(
        v1_host(),
        "no v1 cpu hierarchy: the VM tier tests v2 (vm_tests::nesting_limits)"
    );
    let quota = Below::new("cpu", "quota");
    quota.write("cpu.cfs_period_us", "100000");
    quota.write("cpu.cfs_quota_us", "20000");
    let alone = printed(&in_cgroup(&quota, false, SPIN));
    let output = in_cgroup(&quota, true, SPIN);
    let under = printed(&output);
    let (rate_alone, rate_under) = (alone[0], under[0]);
    eprintln!(
        "WITNESS | host v1 | cpu.cfs_quota_us 20 % | the loop's rate | {rate_under} | \
         {rate_alone} | ±{RATE_TOLERANCE}"
    );
    for rate in [rate_alone, rate_under] {
        assert!(
            (rate - QUOTA_CORES).abs() <= RATE_TOLERANCE,
            "{rate} CPUs under a {QUOTA_CORES} quota (alone {rate_alone}, under run {rate_under})"
        );
    }
    assert!((rate_under - rate_alone).abs() <= RATE_TOLERANCE);

    // run's own figures of the throttled command: its CPU as the command counted it (±2 % or
    // 20 ms, + 5 ms for the guard in run's cgroup), its average within the quota.
    let summary = summary(&output);
    let total = summary["cpu"]["total_s"].as_f64().unwrap();
    let own = under[1];
    eprintln!("WITNESS | host v1 | cpu.cfs_quota_us 20 % | cpu.total_s | {total} | {own} | ±2 % or 20 ms, + 5 ms");
    assert!(
        (total - own).abs() <= (0.02 * own).max(0.020) + 0.005,
        "cpu.total_s {total}, the command's own {own}"
    );
    let average = summary["cpu"]["average_cores"].as_f64().unwrap();
    eprintln!("WITNESS | host v1 | cpu.cfs_quota_us 20 % | cpu.average_cores | {average} | {QUOTA_CORES} | ≤ quota + {RATE_TOLERANCE}");
    assert!(
        average <= QUOTA_CORES + RATE_TOLERANCE,
        "average_cores {average}"
    );
    // The quota is the caller's: run makes no v1 cpu cgroup, so it has no throttling counter.
    assert!(summary["throttled_s"].is_null(), "{summary}");
    let unknown = summary["unknown"].as_array().unwrap();
    assert!(
        unknown.iter().any(|u| u["field"] == "throttled_s"),
        "{summary}"
    );
}

#[test]
#[ignore = "root: makes a v1 pids cgroup with a limit"]
fn under_the_callers_pids_limit_a_commands_forks_fail_as_alone() {
    assert_root("makes a v1 pids cgroup");
    assert!(
        Path::new("/sys/fs/cgroup/pids/cgroup.procs").exists(),
        "no v1 pids hierarchy: the VM tier tests v2 (vm_tests::nesting_limits)"
    );
    let limited = Below::new("pids", "limit");
    // run's own tasks (its threads, the guard) are charged to the caller's cgroup too, as any
    // wrapper's are: the limit leaves room for run's start, and the command fewer tasks than
    // it tries to fork.
    let limit = run_peak_tasks(&Below::new("pids", "peak")) + 4;
    limited.write("pids.max", &limit.to_string());
    let (alone, under) = (
        in_cgroup(&limited, false, FORKS),
        in_cgroup(&limited, true, FORKS),
    );
    let [failed_alone, before_alone, after_alone] = printed(&alone)[..] else {
        panic!("{alone:?}")
    };
    let [failed_under, before_under, after_under] = printed(&under)[..] else {
        panic!("{under:?}")
    };
    // Each way, the forks that fit are the limit less the tasks the caller's cgroup held
    // (exactly alone; under run, within what run's own tasks may change meanwhile).
    eprintln!(
        "WITNESS | host v1 | pids.max {limit} | failed forks of {FORK_ATTEMPTS} | {failed_under} \
         (with run's {} tasks) | {failed_alone} | 32 - (limit - tasks before), exact alone, \
         ±{RUN_TASK_SLACK} under run",
        before_under - 1.0
    );
    assert_eq!(
        before_alone, 1.0,
        "alone, the command is the cgroup's only task"
    );
    assert_eq!(
        failed_alone,
        FORK_ATTEMPTS - (f64::from(limit) - before_alone)
    );
    assert_eq!(after_alone, before_alone + FORK_ATTEMPTS - failed_alone);
    assert!(
        failed_under > failed_alone,
        "run's tasks took none of the limit"
    );
    let stderr = String::from_utf8_lossy(&under.stderr);
    let expected = FORK_ATTEMPTS - (f64::from(limit) - before_under);
    assert!(
        (failed_under - expected).abs() <= RUN_TASK_SLACK,
        "{failed_under} failed forks, {expected} expected: {stderr}"
    );
    // The forks that succeeded are charged to the limited cgroup (none escaped it).
    let forked = FORK_ATTEMPTS - failed_under;
    assert!(
        (after_under - before_under - forked).abs() <= RUN_TASK_SLACK,
        "{forked} forks, the cgroup's tasks went from {before_under} to {after_under}: {stderr}"
    );
}

/// The most tasks `run` and a command that sleeps take in `cgroup` (`pids.peak`, its start's
/// threads included).
fn run_peak_tasks(cgroup: &Below) -> u32 {
    let status = Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && exec {BIN} run --output /dev/null -- sleep 0.5",
                cgroup.dir.display()
            ),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read_to_string(cgroup.dir.join("pids.peak"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Directories named `name` up to four levels below `/sys/fs/cgroup` (a v1 hierarchy's own
/// paths included).
fn cgroups_named(name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut level = vec![PathBuf::from("/sys/fs/cgroup")];
    for _ in 0..4 {
        let mut next = Vec::new();
        for dir in level {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    if entry.file_name() == name {
                        found.push(path.clone());
                    }
                    next.push(path);
                }
            }
        }
        level = next;
    }
    found
}

#[test]
#[ignore = "root: makes a v1 pids cgroup with a limit"]
fn a_command_the_callers_pids_limit_keeps_from_starting_leaves_no_cgroup_behind() {
    assert_root("makes a v1 pids cgroup");
    let limited = Below::new("pids", "nostart");
    // Room for run alone: the command's shell cannot be forked.
    limited.write("pids.max", "1");
    let child = Command::new("sh")
        .args([
            "-c",
            &format!(
                "echo $$ > {}/cgroup.procs && exec {BIN} run --output /dev/null -- true",
                limited.dir.display()
            ),
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run_pid = child.id();
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("cannot start true"),
        "{:?}: {stderr}",
        output.status
    );
    let left = cgroups_named(&format!("relay-metrics-run-{run_pid}"));
    for dir in &left {
        let _ = std::fs::remove_dir(dir);
    }
    assert!(left.is_empty(), "run left its cgroup behind: {left:?}");
}
