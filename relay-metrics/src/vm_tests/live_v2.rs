//! Discovery and per-cgroup values on a live pure cgroup v2 kernel, on a systemd-style tree the
//! test makes: a Kubernetes container scope below its QoS and pod slices, and a service. Each
//! value is checked against the cgroup's own files, read just before and after the snapshot.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{go, VM_ONLY};
use crate::config::ScopeSetting;
use crate::snapshot::{CgroupTargetReport, Targets};
use crate::Collector;

const POD_UID: &str = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
const CONTAINER_ID: &str = "6c1f0e9a2b3d4c5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6";
const UNIT: &str = "relay-vm-test.service";

/// The tree's directories, removed deepest first (their processes killed) when dropped.
struct Tree {
    root: PathBuf,
    dirs: Vec<String>,
}

impl Tree {
    fn new() -> Self {
        let root = PathBuf::from("/sys/fs/cgroup");
        assert!(root.join("cgroup.controllers").exists(), "{VM_ONLY}");
        let pod = format!("kubepods-burstable-pod{}.slice", POD_UID.replace('-', "_"));
        let slices = [
            "/kubepods.slice".to_string(),
            "/kubepods.slice/kubepods-burstable.slice".to_string(),
            format!("/kubepods.slice/kubepods-burstable.slice/{pod}"),
            format!("/kubepods.slice/kubepods-burstable.slice/{pod}/cri-containerd-{CONTAINER_ID}.scope"),
            "/system.slice".to_string(),
            format!("/system.slice/{UNIT}"),
        ];
        let mut tree = Self {
            root,
            dirs: Vec::new(),
        };
        for dir in slices {
            let path = tree.path(&dir);
            if !path.exists() {
                std::fs::create_dir(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                tree.dirs.push(dir.clone());
            }
            if dir.ends_with(".slice") || dir == "/system.slice" {
                std::fs::write(path.join("cgroup.subtree_control"), "+cpu +memory +pids")
                    .unwrap_or_else(|e| panic!("enabling controllers below {dir}: {e}"));
            }
        }
        tree
    }

    fn path(&self, cgroup: &str) -> PathBuf {
        self.root.join(cgroup.trim_start_matches('/'))
    }

    fn container(&self) -> String {
        self.dirs
            .iter()
            .find(|d| d.ends_with(".scope"))
            .expect("the container scope")
            .clone()
    }

    fn remove(&mut self, cgroup: &str) {
        let path = self.path(cgroup);
        kill_members(&path);
        for _ in 0..250 {
            if std::fs::remove_dir(&path).is_ok() {
                self.dirs.retain(|d| d != cgroup);
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("{} was not removed", path.display());
    }
}

fn kill_members(path: &Path) {
    if let Ok(procs) = std::fs::read_to_string(path.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for dir in self.dirs.clone().iter().rev() {
            let path = self.path(dir);
            kill_members(&path);
            for _ in 0..250 {
                if std::fs::remove_dir(&path).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn keyed(path: &Path, file: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(path.join(file)).expect(file);
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {file}: {text:?}"))
}

fn file_u64(path: &Path, file: &str) -> u64 {
    let text = std::fs::read_to_string(path.join(file)).expect(file);
    text.trim()
        .parse()
        .unwrap_or_else(|_| panic!("{file}: {text:?}"))
}

fn target<'a>(targets: &'a Targets, cgroup: &str) -> &'a CgroupTargetReport {
    targets
        .cgroups
        .iter()
        .find(|t| &*t.cgroup == cgroup)
        .unwrap_or_else(|| panic!("{cgroup} not measured: {targets:?}"))
}

pub(super) fn collector() -> Collector {
    let mut config = super::quiet_config(ScopeSetting::Global);
    config.extensions.cgroups = vec![
        "/kubepods.slice/**/*.scope".to_owned(),
        "/system.slice/*.service".to_owned(),
    ];
    Collector::new(config).expect("a global collector with cgroup targets")
}

/// A child of this test binary in `mode` (see `run_child_if_requested`), moved into `cgroup`
/// before it is told to go.
fn child_in(mode: &str, cgroup: &Path) -> std::process::Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .env(super::CHILD_MODE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    crate::source::ebpf::tests::spawn_in_cgroup(command, &cgroup.join("cgroup.procs"))
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn a_systemd_style_tree_is_discovered_labelled_and_measured_per_container_in_vm() {
    let mut tree = Tree::new();
    let container = tree.container();
    let container_dir = tree.path(&container);
    let service = format!("/system.slice/{UNIT}");
    std::fs::write(container_dir.join("memory.max"), (32u64 << 20).to_string())
        .expect("memory.max");
    if container_dir.join("memory.swap.max").exists() {
        std::fs::write(container_dir.join("memory.swap.max"), "0").expect("memory.swap.max");
    }
    std::fs::write(container_dir.join("cpu.max"), "10000 100000").expect("cpu.max");

    let mut oom = child_in("oom", &container_dir);
    let oom_pid = oom.id();
    let mut collector = collector();
    let first = collector.collect();
    let targets = first
        .extensions
        .targets
        .as_deref()
        .expect("extensions.targets");
    assert!(
        first.extensions.kernel_events.active,
        "{:?}",
        first.extensions.kernel_events.reason
    );
    let labels = &target(targets, &container).labels;
    assert_eq!(
        labels.container_id.as_deref(),
        Some(CONTAINER_ID),
        "{labels:?}"
    );
    assert_eq!(
        labels.container_runtime.as_deref(),
        Some("containerd"),
        "{labels:?}"
    );
    assert_eq!(labels.pod_uid.as_deref(), Some(POD_UID), "{labels:?}");
    assert_eq!(labels.qos_class.as_deref(), Some("Burstable"), "{labels:?}");
    assert_eq!(target(targets, &service).labels.unit.as_deref(), Some(UNIT));
    assert_eq!(targets.cgroups.len(), 2, "{targets:?}");
    drop(first);

    // An OOM kill and an exit in the container, a busy loop throttled by its cpu.max.
    go(&mut oom);
    let status = oom.wait().expect("waiting for the OOM child");
    assert!(
        !status.success(),
        "the child was not OOM-killed: {status:?}"
    );
    let mut spin = child_in("spin", &container_dir);
    let started = Instant::now();
    while keyed(&container_dir, "cpu.stat", "nr_throttled") < 3 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "never throttled"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let throttled_before = keyed(&container_dir, "cpu.stat", "nr_throttled");
    let peak_before = file_u64(&container_dir, "memory.peak");
    let snapshot = collector.collect();
    let throttled_after = keyed(&container_dir, "cpu.stat", "nr_throttled");
    let peak_after = file_u64(&container_dir, "memory.peak");
    let targets = snapshot
        .extensions
        .targets
        .as_deref()
        .expect("extensions.targets");
    let measured = target(targets, &container);
    let throttled = measured
        .cpu_throttled_periods
        .expect("cpu_throttled_periods");
    assert!(
        throttled_before <= throttled && throttled <= throttled_after,
        "{throttled_before} <= {throttled} <= {throttled_after}"
    );
    assert_eq!(measured.cpu_limit_cores, Some(0.1));
    let peak = measured.memory_peak_bytes.expect("memory_peak_bytes");
    assert!(
        peak_before <= peak && peak <= peak_after,
        "{peak_before} <= {peak} <= {peak_after}"
    );
    assert!(peak >= 16 << 20, "the OOM child's peak: {peak}");
    assert_eq!(
        measured.memory_events.oom_kill,
        Some(keyed(&container_dir, "memory.events", "oom_kill"))
    );
    let events = measured
        .kernel_events
        .as_ref()
        .expect("kernel events per cgroup");
    let victims: Vec<u32> = events.oom_victims.iter().map(|v| v.pid).collect();
    assert_eq!(victims, vec![oom_pid], "{events:?}");
    assert!(events.processes_exited >= 1, "{events:?}");
    let quiet = target(targets, &service);
    let quiet_events = quiet
        .kernel_events
        .as_ref()
        .expect("kernel events per cgroup");
    assert!(
        quiet_events.oom_victims.is_empty() && quiet_events.processes_exited == 0,
        "{quiet_events:?}"
    );
    drop(snapshot);

    // Removed: gone from the next snapshot.
    let _ = spin.kill();
    let _ = spin.wait();
    tree.remove(&container);
    let after = collector.collect();
    let targets = after
        .extensions
        .targets
        .as_deref()
        .expect("extensions.targets");
    assert!(
        targets.cgroups.iter().all(|t| *t.cgroup != container),
        "{targets:?}"
    );
    assert_eq!(targets.cgroups.len(), 1, "{targets:?}");
}
