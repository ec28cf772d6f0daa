//! The witness of nesting on pure v2: the same command alone under the caller's limit. The
//! caller sits in a limited non-root v2 cgroup that holds it (so no controller can be enabled
//! there); `run`'s cgroup is made below it ([`NestedCgroup`]); a command in the nested cgroup
//! must meet the caller's CPU quota and pids limit exactly as the same command started alone
//! in the caller's cgroup does. (The memory limit's OOM kill is `nesting.rs`'s.)

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{go, spawn_child, TestCgroup, CHILD_MODE, FORK_ATTEMPTS};
use crate::source::cgroup::{CgroupLayout, NestedCgroup};
use crate::source::Roots;

/// The caller's quota: 20 ms of CPU each 100 ms period, 0.2 of a CPU.
const QUOTA_CORES: f64 = 0.2;
/// How far a measured rate may be from the other's (and above the quota): a quarter of the
/// quota, room for one period's 20 ms at either end of a window and the emulator's timers.
const RATE_TOLERANCE: f64 = 0.05;
/// The window a rate is measured over: ten quota periods.
const WINDOW: Duration = Duration::from_secs(1);
/// Windows per placement, alternating: the emulated CPU is shared with the other tests and
/// the host's load, which slow a window below the quota; the quota bounds each from above.
const WINDOWS: usize = 3;

/// A child of this test binary doing `mode` (see `super::run_child_if_requested`), started in
/// the cgroup directory `dir`.
fn spawn_in(mode: &str, dir: &Path) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .env(CHILD_MODE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    crate::source::ebpf::tests::spawn_in_cgroup(command, &dir.join("cgroup.procs"))
}

/// The caller (an idle process in the limited `parent`) and `run`'s cgroup nested below it.
fn caller_and_nested(parent: &TestCgroup, name: &str) -> (Child, NestedCgroup) {
    let caller = spawn_child("idle", parent);
    let caller_cgroup =
        std::fs::read(format!("/proc/{}/cgroup", caller.id())).expect("the caller's cgroup");
    let layout = CgroupLayout::discover(&Roots::host()).expect("a cgroup layout");
    let nested = NestedCgroup::create(&layout, &caller_cgroup, name)
        .unwrap_or_else(|why| panic!("no nested cgroup: {why}"));
    assert_eq!(nested.dirs(), [parent.path.join(name)]);
    assert!(parent
        .read("cgroup.procs")
        .contains(&caller.id().to_string()));
    (caller, nested)
}

/// Nanoseconds `pid` has run (`/proc/<pid>/schedstat`: the scheduler's own count).
fn run_ns(pid: u32) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .unwrap_or_else(|error| panic!("/proc/{pid}/schedstat: {error}"));
    text.split_whitespace()
        .next()
        .and_then(|ns| ns.parse().ok())
        .unwrap_or_else(|| panic!("/proc/{pid}/schedstat: {text:?}"))
}

/// The CPU rate of a busy loop started in `dir` (logical processors), over [`WINDOW`] once
/// the `parent`'s quota has throttled it; and the periods `parent` throttled meanwhile.
fn spin_rate(dir: &Path, parent: &TestCgroup) -> (f64, u64) {
    let throttled_before = parent.keyed("cpu.stat", "nr_throttled");
    let mut spinner = spawn_in("spin", dir);
    let pid = spinner.id();
    let deadline = Instant::now() + Duration::from_secs(60);
    while parent.keyed("cpu.stat", "nr_throttled") < throttled_before + 3 {
        assert!(
            Instant::now() < deadline,
            "the busy loop in {} was never throttled: {}",
            dir.display(),
            parent.read("cpu.stat")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (began, ran) = (Instant::now(), run_ns(pid));
    std::thread::sleep(WINDOW);
    let (ended, ran_after) = (Instant::now(), run_ns(pid));
    spinner.kill().expect("killing the busy loop");
    spinner.wait().expect("waiting for the busy loop");
    let rate = (ran_after - ran) as f64 / 1e9 / (ended - began).as_secs_f64();
    let throttled = parent.keyed("cpu.stat", "nr_throttled") - throttled_before;
    (rate, throttled)
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn the_callers_cpu_quota_holds_a_nested_command_to_the_rate_it_has_alone_in_vm() {
    let parent = TestCgroup::create("nestcpu", "cpu");
    let _watchdog = parent.watchdog("nestcpu");
    parent.write("cpu.max", "20000 100000");
    let (mut caller, nested) = caller_and_nested(&parent, "relay-metrics-run-vm-cpu");
    assert_eq!(parent.read("cgroup.subtree_control").trim(), "");

    // The fastest window of each placement; every window throttled by the caller's quota.
    let (mut alone, mut under) = (0.0_f64, 0.0_f64);
    for _ in 0..WINDOWS {
        for (dir, best) in [(&parent.path, &mut alone), (&nested.dirs()[0], &mut under)] {
            let (rate, throttled) = spin_rate(dir, &parent);
            assert!(throttled > 0, "{} was not throttled", dir.display());
            assert!(
                rate <= QUOTA_CORES + RATE_TOLERANCE,
                "{rate:.3} CPUs in {} under a {QUOTA_CORES} quota",
                dir.display()
            );
            *best = best.max(rate);
        }
    }
    eprintln!(
        "WITNESS | vm v2 | cpu.max 20000 100000 | busy loop's rate, fastest of {WINDOWS} | nested \
         {under:.3} | alone {alone:.3} | ±{RATE_TOLERANCE}"
    );
    assert!(
        (under - alone).abs() <= RATE_TOLERANCE,
        "nested {under:.3} CPUs, alone {alone:.3}"
    );

    nested.remove().expect("removing the nested cgroup");
    go(&mut caller);
    assert!(caller.wait().expect("waiting for the caller").success());
}

/// Forks that failed for the `fork` child started in `dir`.
fn fork_failures(dir: &Path) -> u32 {
    let mut child = spawn_in("fork", dir);
    go(&mut child);
    let stdout = child.stdout.take().expect("child stdout");
    let output: Vec<String> = BufReader::new(stdout)
        .lines()
        .map(|line| line.expect("child output"))
        .collect();
    let status = child.wait().expect("waiting for the forking child");
    assert!(status.success(), "{status:?}: {output:?}");
    output
        .iter()
        .find_map(|line| line.split_once("fork-failures ").map(|(_, n)| n))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the child reported no fork failures: {output:?}"))
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn the_callers_pids_limit_stops_a_nested_commands_forks_as_alone_in_vm() {
    let parent = TestCgroup::create("nestpids", "pids");
    let _watchdog = parent.watchdog("nestpids");
    // The caller and the forking child take two: two of its forks succeed.
    parent.write("pids.max", "4");
    let (mut caller, nested) = caller_and_nested(&parent, "relay-metrics-run-vm-pids");

    let alone = fork_failures(&parent.path);
    let under = fork_failures(&nested.dirs()[0]);
    eprintln!(
        "WITNESS | vm v2 | pids.max 4 | failed forks of {FORK_ATTEMPTS} | nested {under} | \
         alone {alone} | equal"
    );
    assert!(
        alone > 0,
        "pids.max did not stop a fork: {}",
        parent.read("pids.events")
    );
    assert_eq!(under, alone, "{}", parent.read("pids.events"));
    assert_eq!(
        parent.keyed("pids.events", "max"),
        u64::from(alone + under),
        "{}",
        parent.read("pids.events")
    );

    nested.remove().expect("removing the nested cgroup");
    go(&mut caller);
    assert!(caller.wait().expect("waiting for the caller").success());
}
