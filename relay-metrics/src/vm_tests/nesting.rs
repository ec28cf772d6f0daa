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
