//! `relay-metrics run`'s cgroup on pure v2, live: the caller sits in a limited non-root cgroup
//! that holds processes. The cgroup is made below it without enabling any controller there
//! (the "no internal processes" rule would refuse it, EBUSY, unless the caller moved), the
//! caller stays where it is, the caller's memory limit OOM-kills a command in the nested
//! cgroup as it would the command alone, and the nested cgroup is measured and removed.

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};

use super::{go, spawn_child, TestCgroup, CHILD_MODE};
use crate::config::ScopeSetting;
use crate::source::cgroup::{CgroupLayout, NestedCgroup};
use crate::source::Roots;
use crate::{Collector, ResourceMetricsConfig};

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn run_nests_below_a_limited_occupied_v2_cgroup_without_moving_the_caller_in_vm() {
    let parent = TestCgroup::create("nest", "memory");
    let _watchdog = parent.watchdog("nest");
    parent.write("memory.max", &(32u64 << 20).to_string());
    if parent.path.join("memory.swap.max").exists() {
        parent.write("memory.swap.max", "0");
    }
    // The caller: a process in the limited cgroup.
    let mut caller = spawn_child("idle", &parent);
    let caller_cgroup =
        std::fs::read(format!("/proc/{}/cgroup", caller.id())).expect("the caller's cgroup");
    let layout = CgroupLayout::discover(&Roots::host()).expect("a cgroup layout");
    let nested = NestedCgroup::create(&layout, &caller_cgroup, "relay-metrics-run-vm")
        .unwrap_or_else(|why| panic!("no nested cgroup: {why}"));
    let dir = parent.path.join("relay-metrics-run-vm");
    assert_eq!(nested.dirs(), std::slice::from_ref(&dir));
    assert_eq!(
        nested.path(),
        format!("{}/relay-metrics-run-vm", parent.relative)
    );
    // Nothing enabled in the caller's cgroup, the caller not moved, and the lack is said.
    assert_eq!(parent.read("cgroup.subtree_control").trim(), "");
    assert!(parent
        .read("cgroup.procs")
        .contains(&caller.id().to_string()));
    assert!(!nested.has_memory_controller());
    assert!(
        nested
            .notes()
            .iter()
            .any(|n| n.contains("no internal processes")),
        "{:?}",
        nested.notes()
    );
    // The command, in the nested cgroup, allocates 256 MiB: the caller's 32 MiB limit kills it.
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .env(CHILD_MODE, "oom")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut victim =
        crate::source::ebpf::tests::spawn_in_cgroup(command, &dir.join("cgroup.procs"));
    let config = ResourceMetricsConfig {
        cgroup_path: Some(nested.path().to_string()),
        ..super::quiet_config(ScopeSetting::Cgroup)
    };
    let preload = Collector::preload_kernel_events(&config);
    let mut collector = Collector::with_preload_in(config, preload, &nested)
        .expect("a collector of the nested cgroup");
    let first = collector.collect();
    assert_eq!(
        first.extensions.target.cgroup_path.as_deref(),
        Some(nested.path())
    );
    assert!(nested.members().contains(&victim.id()));
    go(&mut victim);
    let status = victim.wait().expect("waiting for the victim");
    assert_eq!(status.signal(), Some(9), "not OOM-killed: {status:?}");
    assert!(
        parent.keyed("memory.events", "oom_kill") >= 1,
        "{}",
        parent.read("memory.events")
    );
    // The nested cgroup still reads (base cpu.stat exists without the cpu controller).
    let last = collector.collect();
    assert!(last.cpu.is_some(), "no CPU values from the nested cgroup");
    drop(collector);
    nested.remove().expect("removing the nested cgroup");
    assert!(!dir.exists());
    go(&mut caller);
    assert!(caller.wait().expect("waiting for the caller").success());
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn run_never_writes_into_an_undelegated_systemd_unit_in_vm() {
    // A unit-named cgroup without the delegate attribute, as systemd's session scopes are.
    let unit = TestCgroup::create("unit", "memory");
    let scope = unit.path.join("session-7.scope");
    std::fs::create_dir(&scope).expect("making session-7.scope");
    let mut caller = spawn_child("idle", &unit);
    std::fs::write(scope.join("cgroup.procs"), caller.id().to_string()).expect("moving");
    let caller_cgroup =
        std::fs::read(format!("/proc/{}/cgroup", caller.id())).expect("the caller's cgroup");
    let layout = CgroupLayout::discover(&Roots::host()).expect("a cgroup layout");
    let refused = NestedCgroup::create(&layout, &caller_cgroup, "relay-metrics-run-vm");
    assert!(
        refused
            .as_ref()
            .is_err_and(|why| why.contains("not delegated")),
        "{refused:?}"
    );
    assert!(!scope.join("relay-metrics-run-vm").exists());
    // systemd's mark of Delegate=yes.
    crate::source::xattr::set(&scope, "trusted.delegate", b"1").expect("setting trusted.delegate");
    let nested = NestedCgroup::create(&layout, &caller_cgroup, "relay-metrics-run-vm")
        .unwrap_or_else(|why| panic!("refused a delegated unit: {why}"));
    assert_eq!(nested.dirs(), [scope.join("relay-metrics-run-vm")]);
    nested.remove().expect("removing the nested cgroup");
    go(&mut caller);
    assert!(caller.wait().expect("waiting for the caller").success());
    std::fs::remove_dir(&scope).expect("removing session-7.scope");
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
#[expect(
    clippy::zombie_processes,
    reason = "the command is reaped by wait4, after its exit is measured, as run does"
)]
fn below_an_occupied_v2_cgroup_memory_and_io_come_from_the_processes_in_vm() {
    use std::io::{BufRead as _, BufReader, Write as _};

    use crate::config::{CategoryConfig, DiskConfig};
    use crate::summary::{Baseline, ReapedUsage, RunEnd, SummaryBuilder};

    let parent = TestCgroup::create("occupied", "memory");
    let _watchdog = parent.watchdog("occupied");
    let mut caller = spawn_child("idle", &parent);
    // The case: a controller cannot be enabled below a cgroup that holds processes.
    let refused = std::fs::write(parent.path.join("cgroup.subtree_control"), "+memory");
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.raw_os_error() == Some(libc::EBUSY)),
        "enabling memory below the occupied cgroup: {refused:?}"
    );
    let caller_cgroup =
        std::fs::read(format!("/proc/{}/cgroup", caller.id())).expect("the caller's cgroup");
    let layout = CgroupLayout::discover(&Roots::host()).expect("a cgroup layout");
    let nested = NestedCgroup::create(&layout, &caller_cgroup, "relay-metrics-run-vm-occupied")
        .unwrap_or_else(|why| panic!("no nested cgroup: {why}"));
    assert!(!nested.has_memory_controller());
    let dir = parent.path.join("relay-metrics-run-vm-occupied");
    // The command: allocates 64 MiB and writes 8 MiB once told to, then holds the memory.
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .env(CHILD_MODE, "hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = crate::source::ebpf::tests::spawn_in_cgroup(command, &dir.join("cgroup.procs"));
    // As `run` measures its cgroup: counted from the command's start, with the nesting's note.
    let config = ResourceMetricsConfig {
        cgroup_path: Some(nested.path().to_string()),
        memory: CategoryConfig { enabled: true },
        disk: DiskConfig::default(),
        ..super::quiet_config(ScopeSetting::Cgroup)
    };
    let preload = Collector::preload_kernel_events(&config);
    let mut collector = Collector::with_preload_in(config, preload, &nested)
        .expect("a collector of the nested cgroup");
    collector.count_cumulative_from_start();
    for note in nested.notes() {
        collector.note_cumulative(note);
    }
    let mut builder = SummaryBuilder::new(Baseline::Zero);
    builder.observe(&collector.collect());
    let mut stdin = child.stdin.take().expect("child stdin");
    writeln!(stdin, "go").expect("starting the child");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("child stdout"))
        .read_line(&mut line)
        .expect("reading the child's own counts");
    let own: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().expect("a number"))
        .collect();
    let (own_write_bytes, own_wchar) = (own[0], own[1]);
    assert!(
        own_wchar >= 8 << 20,
        "the child wrote {own_wchar} B: {line}"
    );
    // While it holds the memory.
    builder.observe(&collector.collect());
    writeln!(stdin, "exit").expect("ending the child");
    drop(stdin);
    // Exited, not reaped: its /proc/<pid>/io is read as `run` reads it.
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).expect("pid"));
    let flags = nix::sys::wait::WaitPidFlag::WEXITED | nix::sys::wait::WaitPidFlag::WNOWAIT;
    nix::sys::wait::waitid(nix::sys::wait::Id::Pid(pid), flags).expect("waiting for the exit");
    let last = collector.collect();
    builder.observe(&last);
    let reaped = crate::internals::wait4(pid.as_raw(), false)
        .expect("reaping the child")
        .expect("the child's usage");
    let summary = builder.finish(RunEnd {
        reaped: Some(ReapedUsage {
            user: reaped.user,
            system: reaped.system,
            max_rss_bytes: reaped.max_rss_bytes,
        }),
        ..RunEnd::default()
    });
    let json = summary.to_json();
    // Memory: the processes' resident sum, and the charged peak unknown with its reason.
    assert_eq!(summary.memory.peak_charged_bytes, None, "{json}");
    let resident = summary.memory.peak_resident_bytes.expect("a peak resident");
    assert!(
        (64 << 20..96 << 20).contains(&resident),
        "peak resident {resident}: {json}"
    );
    assert!(
        summary.memory.max_single_process_rss_bytes >= Some(64 << 20),
        "{json}"
    );
    assert!(
        summary
            .unknown
            .iter()
            .any(|u| u.field == "memory.peak_charged_bytes"
                && u.reason.contains("no memory controller")),
        "{json}"
    );
    // Storage bytes: the processes' /proc/<pid>/io, equal to the child's own count (0 here:
    // the VM's files are in RAM, which storage accounting does not count).
    assert_eq!(summary.io.written_bytes, Some(own_write_bytes), "{json}");
    let reason = summary.cumulative_reason.clone().unwrap_or_default();
    for said in [
        "no internal processes",
        "from the processes' /proc/<pid>/io",
        "no io controller",
        "no memory controller",
    ] {
        assert!(
            reason.contains(said),
            "{said:?} not in the reason: {reason}"
        );
    }
    eprintln!(
        "VM occupied v2: peak resident {resident} B, max RSS {:?} B, written {:?} B (own \
         write_bytes {own_write_bytes}, wchar {own_wchar}); reason: {reason}",
        summary.memory.max_single_process_rss_bytes, summary.io.written_bytes
    );
    drop(last);
    drop(collector);
    nested.remove().expect("removing the nested cgroup");
    go(&mut caller);
    assert!(caller.wait().expect("waiting for the caller").success());
}
