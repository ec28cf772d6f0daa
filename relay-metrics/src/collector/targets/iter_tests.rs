//! The measured cgroups read with `extensions.cgroup_source` `files` and `bpf_iter` side by
//! side, on live cgroups this test makes (root): a memory user under a limit (one OOM kill, then
//! a process holding memory), a busy loop under a CFS quota, a sleeper under a pids limit.
//! `exercise` runs on the host's v1 hierarchies here and on the pure-v2 6.1 kernel in the VM
//! (`vm_tests::cgroup_iter`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::*;
use crate::config::CgroupSource;
use crate::snapshot::CgroupTargetReport;
use crate::source::cgroup_iter::exact::{read_value, Field, Kind};
use crate::source::cgroup_iter::pass::{BPF_ITER, FILES};

const MEMORY_LIMIT: &str = "8388608";

/// The test's parent cgroup, `/relay-pass-<test>-<pid>` in each hierarchy, with one child per
/// process; removed (after the processes) on drop.
struct Tree {
    /// The parent's directory in each hierarchy.
    parents: Vec<PathBuf>,
    children: Vec<Child>,
}

impl Tree {
    fn new(v2: bool, test: &str) -> Self {
        let root = Path::new("/sys/fs/cgroup");
        let name = format!("relay-pass-{test}-{}", std::process::id());
        let parents: Vec<PathBuf> = if v2 {
            vec![root.join(&name)]
        } else {
            ["memory", "pids", "cpu", "cpuacct"]
                .iter()
                .map(|hierarchy| root.join(hierarchy).join(&name))
                .collect()
        };
        for parent in &parents {
            std::fs::create_dir(parent).unwrap();
        }
        if v2 {
            std::fs::write(
                parents[0].join("cgroup.subtree_control"),
                "+memory +pids +cpu",
            )
            .unwrap();
        }
        Self {
            parents,
            children: Vec::new(),
        }
    }

    /// Makes child `name` in every hierarchy, writes `settings` (file, value) wherever the
    /// file exists, and starts `command` in it.
    fn child(&mut self, name: &str, settings: &[(&str, &str)], command: &str) {
        let mut join = String::new();
        for parent in &self.parents {
            let dir = parent.join(name);
            std::fs::create_dir(&dir).unwrap();
            for (file, value) in settings {
                if dir.join(file).exists() {
                    std::fs::write(dir.join(file), value)
                        .unwrap_or_else(|error| panic!("{file} = {value}: {error}"));
                }
            }
            join.push_str(&format!(
                "echo $$ > {} && ",
                dir.join("cgroup.procs").display()
            ));
        }
        // stdin stays open (piped, never written): `read` waits on it without a child process.
        // The shell's "Killed" (its OOM-killed `tail`) would split the test harness's lines.
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("{join}{command}"))
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for parent in &self.parents {
            for _ in 0..100 {
                let children: Vec<PathBuf> = std::fs::read_dir(parent)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|entry| entry.path())
                    .filter(|path| path.is_dir())
                    .collect();
                let removed = children.iter().all(|dir| std::fs::remove_dir(dir).is_ok())
                    && std::fs::remove_dir(parent).is_ok();
                if removed || !parent.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn tree(v2: bool, test: &str) -> Tree {
    let mut tree = Tree::new(v2, test);
    let memory: &[(&str, &str)] = if v2 {
        &[("memory.max", MEMORY_LIMIT), ("memory.swap.max", "0")]
    } else {
        &[("memory.limit_in_bytes", MEMORY_LIMIT)]
    };
    // `tail` keeps every line; /dev/zero has none: it grows until the OOM killer ends it. Then
    // the shell holds 3 MB in a variable and waits on its stdin.
    tree.child(
        "mem",
        memory,
        "tail /dev/zero; x=$(head -c 3000000 /dev/zero | tr '\\0' a); read y",
    );
    tree.child("pids", &[("pids.max", "10")], "exec sleep 60");
    let quota: &[(&str, &str)] = if v2 {
        &[("cpu.max", "10000 100000")]
    } else {
        &[("cpu.cfs_quota_us", "10000")]
    };
    tree.child("cpu", quota, "exec sh -c 'while :; do :; done'");
    // The OOM kill, the variable's memory, and a 100 ms period that throttled the loop (a VM
    // under emulation takes seconds).
    let (usage, stat) = if v2 {
        ("memory.current", "cpu.stat")
    } else {
        ("memory.usage_in_bytes", "cpu.stat")
    };
    let cpu = tree.parents.iter().map(|p| p.join("cpu").join(stat));
    let cpu: Vec<PathBuf> = cpu.filter(|path| path.exists()).collect();
    let mem = tree.parents[0].join("mem").join(usage);
    let start = std::time::Instant::now();
    while read_value(&mem, Field::Whole) < Some(3_000_000)
        || cpu
            .iter()
            .any(|path| read_value(path, Field::Keyed("nr_throttled")) < Some(1))
    {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the workloads did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tree
}

fn target_set(source: CgroupSource, test: &str) -> TargetSet {
    let roots = Roots::host();
    let layout = CgroupLayout::discover(&roots).unwrap();
    let mut config = ResourceMetricsConfig::default();
    config.extensions.cgroups = vec![format!("/relay-pass-{test}-{}/*", std::process::id())];
    config.extensions.cgroup_source = source;
    TargetSet::new(&config, &roots, Some(&layout))
        .unwrap()
        .unwrap()
}

fn fill(set: &mut TargetSet) -> Vec<CgroupTargetReport> {
    let mut out = Targets::default();
    set.fill(None, None, None, 100, None, &mut out);
    assert_eq!(out.cgroups.len(), 3, "{:?}", out.reasons);
    out.cgroups
}

/// The values the iterator can serve, by name.
fn served(report: &CgroupTargetReport) -> [(&'static str, Option<u64>); 9] {
    [
        ("memory_current_bytes", report.memory_current_bytes),
        ("memory_peak_bytes", report.memory_peak_bytes),
        ("memory_events.max", report.memory_events.max),
        ("memory_events.oom", report.memory_events.oom),
        ("memory_events.oom_kill", report.memory_events.oom_kill),
        ("pids_current", report.pids_current),
        ("cpu_periods", report.cpu_periods),
        ("cpu_throttled_periods", report.cpu_throttled_periods),
        ("cpu_throttled_ns", report.cpu_throttled_ns),
    ]
}

/// Every value of `iter` lies between the files' reads `before` and `after` (equal where it
/// did not move), and the settings are equal.
fn assert_bracketed(
    before: &[CgroupTargetReport],
    iter: &[CgroupTargetReport],
    after: &[CgroupTargetReport],
) {
    for ((before, iter), after) in before.iter().zip(iter).zip(after) {
        assert_eq!(
            (&before.cgroup, &after.cgroup),
            (&iter.cgroup, &iter.cgroup)
        );
        for (((name, b), (_, i)), (_, a)) in served(before)
            .into_iter()
            .zip(served(iter))
            .zip(served(after))
        {
            let agrees = match (b, i, a) {
                (Some(b), Some(i), Some(a)) => b.min(a) <= i && i <= b.max(a),
                _ => b == i && i == a,
            };
            assert!(
                agrees,
                "{} {name}: files {b:?} then {a:?}, iterator path {i:?}",
                iter.cgroup
            );
        }
        assert_eq!(
            (
                before.memory_limit_bytes,
                before.pids_limit,
                before.cpu_limit_cores
            ),
            (
                iter.memory_limit_bytes,
                iter.pids_limit,
                iter.cpu_limit_cores
            ),
            "{}",
            iter.cgroup
        );
    }
}

fn report<'r>(reports: &'r [CgroupTargetReport], child: &str) -> &'r CgroupTargetReport {
    reports
        .iter()
        .find(|report| report.cgroup.ends_with(&format!("/{child}")))
        .unwrap()
}

/// The pass with `bpf_iter` gives the values of the pass with `files`, says where they came
/// from, and leaves a kind made to disagree to its file, saying so.
pub(crate) fn exercise(v2: bool) {
    assert!(nix::unistd::geteuid().is_root(), "run as root");
    let tree = tree(v2, "exercise");
    let mut files = target_set(CgroupSource::Files, "exercise");
    let mut iter = target_set(CgroupSource::BpfIter, "exercise");
    for _ in 0..3 {
        let before = fill(&mut files);
        let served = fill(&mut iter);
        let after = fill(&mut files);
        assert_bracketed(&before, &served, &after);
        // What the test caused is there: the check compared real values.
        let memory = report(&served, "mem");
        assert!(memory.memory_events.oom_kill >= Some(1), "{memory:?}");
        assert!(memory.memory_current_bytes >= Some(3_000_000), "{memory:?}");
        assert_eq!(report(&served, "pids").pids_current, Some(1));
        let cpu = report(&served, "cpu");
        assert!(cpu.cpu_throttled_periods >= Some(1), "{cpu:?}");
        // The limits the test set, served by the iterator and equal to the files' above.
        assert_eq!(memory.memory_limit_bytes, MEMORY_LIMIT.parse().ok());
        assert_eq!(report(&served, "pids").pids_limit, Some(10));
        assert_eq!(cpu.cpu_limit_cores, Some(0.1));
        if !v2 {
            assert!(memory.memory_events.max >= Some(1), "{memory:?}");
        }
    }
    assert_eq!(iter.cgroup_source(), (BPF_ITER, None));
    let (source, reason) = files.cgroup_source();
    assert_eq!(source, FILES);
    assert_eq!(
        reason.map(|reason| &**reason),
        Some("extensions.cgroup_source is \"files\"")
    );

    // One kind made to disagree: its file serves, the snapshot says so, the values still equal.
    iter.kernel_values
        .recheck_skewed(Some((Kind::PidsCurrent, 1)));
    let before = fill(&mut files);
    let served = fill(&mut iter);
    let after = fill(&mut files);
    assert_bracketed(&before, &served, &after);
    assert_eq!(report(&served, "pids").pids_current, Some(1));
    let (source, reason) = iter.cgroup_source();
    assert_eq!(source, BPF_ITER);
    let reason = reason.unwrap();
    assert!(
        reason.starts_with("pids_current from files: ") && reason.contains("iterator "),
        "{reason}"
    );

    // A limit made to disagree likewise: the pids limit is read from its file again.
    iter.kernel_values
        .recheck_skewed(Some((Kind::PidsLimit, 1)));
    let served = fill(&mut iter);
    assert_eq!(report(&served, "pids").pids_limit, Some(10));
    let reason = iter.cgroup_source().1.unwrap();
    assert!(
        reason.starts_with("pids_limit from files: ") && reason.contains("iterator 11, file 10"),
        "{reason}"
    );
    drop(tree);
}

#[test]
#[ignore = "root: makes v1 memory, pids, cpu and cpuacct cgroups"]
fn the_iterator_pass_gives_the_files_values_on_v1_hierarchies() {
    exercise(false);
}

#[test]
#[ignore = "root: makes v1 cgroups"]
fn auto_reads_the_files_below_the_break_even() {
    assert!(nix::unistd::geteuid().is_root(), "run as root");
    let tree = tree(false, "auto");
    let mut auto = target_set(CgroupSource::Auto, "auto");
    fill(&mut auto);
    let (source, reason) = auto.cgroup_source();
    assert_eq!(source, FILES);
    assert_eq!(
        reason.map(|reason| &**reason),
        Some(
            format!(
                "3 measured cgroups: their files cost less than the cgroup iterator below {}",
                crate::source::cgroup_iter::pass::BREAK_EVEN
            )
            .as_str()
        )
    );
    drop(tree);
}
