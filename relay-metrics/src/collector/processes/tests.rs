//! The reuse of a listing (a process-tree walk, a cgroup's process lists, the global scope's
//! `/proc`) across passes, on fixture trees, and the global one on this machine with the kernel's
//! counts: which changes make the next pass (or the same one) list the target again.

use std::path::Path;

use super::{ListingEpoch, MachineEpoch, ProcessPassReader, TreeEpoch};
use crate::collector::environment::CgroupEpoch;
use crate::collector::reasons::Reasons;
use crate::collector::test_fixtures::cgroup_v2_machine;
use crate::collector::Target;
use crate::config::ResourceMetricsConfig;
use crate::model::{ProcessPass, Wanted};
use crate::source::Roots;

const ROOT: u32 = 100;
const ROOT_START_TICKS: u64 = 37904;

/// Writes `/proc/<pid>/stat` (parent `ppid`) and its main thread's `children` file.
fn write_process(proc: &Path, pid: u32, ppid: u32, children: &[u32]) {
    let task = proc.join(format!("{pid}/task/{pid}"));
    std::fs::create_dir_all(&task).unwrap();
    let stat = format!(
        "{pid} (sh) S {ppid} 8453 3470 0 -1 4194304 98 0 0 0 7 3 0 0 20 0 1 0 {ROOT_START_TICKS} 2990080 424 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
    );
    std::fs::write(proc.join(format!("{pid}/stat")), stat).unwrap();
    let listed: String = children.iter().map(|c| format!("{c} ")).collect();
    std::fs::write(task.join("children"), listed).unwrap();
}

struct Fixture {
    dir: tempfile::TempDir,
    reader: ProcessPassReader,
    target: Target,
    reasons: Reasons,
}

impl Fixture {
    /// A root with children 101 and 102; 102 has a child 103.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        write_process(&proc, ROOT, 1, &[101, 102]);
        write_process(&proc, 101, ROOT, &[]);
        write_process(&proc, 102, ROOT, &[103]);
        write_process(&proc, 103, 102, &[]);
        let target = Target::Process {
            pid: ROOT,
            start_time_ticks: ROOT_START_TICKS,
            tree: true,
        };
        Self::with(dir, target)
    }

    /// The global scope of a machine with processes 100 to 103.
    fn global() -> Self {
        let fixture = Self::new();
        Self::with(fixture.dir, Target::Global)
    }

    /// The cgroup v2 fixture machine's `/relay-test` (4242, and 4243 in a child cgroup).
    fn cgroup() -> Self {
        let (dir, resolved) = cgroup_v2_machine();
        let target = Target::Cgroup {
            path: "/relay-test".into(),
            resolved: Box::new(resolved),
        };
        Self::with(dir, target)
    }

    /// CPU only, nothing held (the reader reopens each file, so a removed directory reads as
    /// gone, as a reaped process's held files do on procfs).
    fn with(dir: tempfile::TempDir, target: Target) -> Self {
        let roots = Roots::fixture(dir.path());
        Self::with_roots(dir, &roots, target)
    }

    fn with_roots(dir: tempfile::TempDir, roots: &Roots, target: Target) -> Self {
        let config = ResourceMetricsConfig::from_text(
            r#"{"memory": {"enabled": false}, "disk": {"enabled": false}, "gpu": {"enabled": false}, "network": {"enabled": false}, "process": {"enabled": false}, "extensions": {"max_held_processes": 0}}"#,
        )
        .unwrap();
        let wanted = Wanted::from_config(&config, target.scope());
        let reader = ProcessPassReader::new(roots, &config, &target, wanted).unwrap();
        Self {
            dir,
            reader,
            target,
            reasons: Reasons::default(),
        }
    }

    fn proc(&self) -> std::path::PathBuf {
        self.dir.path().join("proc")
    }

    fn pids(&mut self, epoch: Option<ListingEpoch>) -> Vec<u32> {
        self.reasons.begin();
        match self.reader.read(&self.target, epoch, &mut self.reasons) {
            ProcessPass::Sampled(set) => {
                assert!(set.incomplete.is_none(), "{:?}", set.incomplete);
                let mut pids: Vec<u32> = set.processes.iter().map(|p| p.pid).collect();
                pids.sort_unstable();
                self.reader.recycle(ProcessPass::Sampled(set));
                pids
            }
            other => panic!("pass not sampled: {other:?}"),
        }
    }
}

fn epoch(processes_created: u64) -> Option<ListingEpoch> {
    Some(ListingEpoch::Tree(TreeEpoch {
        processes_created,
        processes_exited: 0,
        members_added: 0,
        insert_failures: 0,
    }))
}

#[test]
fn an_unchanged_epoch_reuses_the_walk_and_a_new_one_walks_again() {
    let mut fixture = Fixture::new();
    assert_eq!(fixture.pids(epoch(5)), [100, 101, 102, 103]);
    // A child the kernel has not counted is not looked for: the walk is reused.
    write_process(&fixture.proc(), 104, 101, &[]);
    write_process(&fixture.proc(), 101, ROOT, &[104]);
    assert_eq!(fixture.pids(epoch(5)), [100, 101, 102, 103]);
    // Its creation counted, the next pass lists the tree again.
    assert_eq!(fixture.pids(epoch(6)), [100, 101, 102, 103, 104]);
}

#[test]
fn without_an_epoch_every_pass_walks() {
    let mut fixture = Fixture::new();
    assert_eq!(fixture.pids(None), [100, 101, 102, 103]);
    write_process(&fixture.proc(), 104, 101, &[]);
    write_process(&fixture.proc(), 101, ROOT, &[104]);
    assert_eq!(fixture.pids(None), [100, 101, 102, 103, 104]);
}

#[test]
fn a_reparented_member_makes_the_same_pass_walk_again() {
    let mut fixture = Fixture::new();
    assert_eq!(fixture.pids(epoch(5)), [100, 101, 102, 103]);
    // 102 exited (counted in an earlier pass) and its child 103 went to init: with the epoch
    // unchanged, 103's parent pid alone shows that the list is stale.
    write_process(&fixture.proc(), ROOT, 1, &[101, 102]);
    write_process(&fixture.proc(), 102, ROOT, &[]);
    write_process(&fixture.proc(), 103, 1, &[]);
    assert_eq!(fixture.pids(epoch(5)), [100, 101, 102]);
}

#[test]
fn a_vanished_member_makes_the_next_pass_walk_again() {
    // Nothing is held (max_held_processes = 0): the reader reopens each file, so a removed
    // directory reads as gone, as a reaped process's held files do on procfs.
    let mut fixture = Fixture::new();
    assert_eq!(fixture.pids(epoch(5)), [100, 101, 102, 103]);
    write_process(&fixture.proc(), ROOT, 1, &[102]);
    std::fs::remove_dir_all(fixture.proc().join("101")).unwrap();
    // This pass drops the vanished member as a fresh walk would...
    let pids = fixture.pids(epoch(5));
    assert!(!pids.contains(&101), "{pids:?}");
    // ...and the next one walks: a child that appeared meanwhile is found with the same epoch.
    write_process(&fixture.proc(), 104, 102, &[]);
    write_process(&fixture.proc(), 102, ROOT, &[103, 104]);
    assert_eq!(fixture.pids(epoch(5)), [100, 102, 103, 104]);
}

fn cgroup_epoch(cgroup_migrations: u64) -> Option<ListingEpoch> {
    Some(ListingEpoch::Cgroup(CgroupEpoch {
        processes_created: 7,
        processes_exited: 3,
        cgroup_migrations,
        clone_into_cgroup: 0,
    }))
}

impl Fixture {
    /// Moves `pid` (a new process, parent init) into `/relay-test`, beside 4242.
    fn move_into_the_cgroup(&self, pid: u32) {
        write_process(&self.proc(), pid, 1, &[]);
        let procs = self
            .dir
            .path()
            .join("sys/fs/cgroup/relay-test/cgroup.procs");
        std::fs::write(procs, format!("4242\n{pid}\n")).unwrap();
    }
}

#[test]
fn an_unchanged_cgroup_epoch_reuses_the_listing_and_a_counted_move_lists_again() {
    let mut fixture = Fixture::cgroup();
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242, 4243]);
    fixture.move_into_the_cgroup(4244);
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242, 4243]);
    assert_eq!(fixture.reader.listings(), 1);
    assert_eq!(fixture.pids(cgroup_epoch(2)), [4242, 4243, 4244]);
    assert_eq!(fixture.reader.listings(), 2);
}

#[test]
fn a_cgroup_listing_is_reused_for_at_most_a_second() {
    let mut fixture = Fixture::cgroup();
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242, 4243]);
    fixture.move_into_the_cgroup(4244);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    // Same epoch, but the listing is too old to trust: listed again.
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242, 4243, 4244]);
}

#[test]
fn a_vanished_cgroup_member_makes_the_next_pass_list_again() {
    let mut fixture = Fixture::cgroup();
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242, 4243]);
    std::fs::remove_dir_all(fixture.proc().join("4243")).unwrap();
    std::fs::write(
        fixture
            .dir
            .path()
            .join("sys/fs/cgroup/relay-test/helper/cgroup.procs"),
        "",
    )
    .unwrap();
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242]);
    // The reused listing held a reaped member, so this pass lists again and finds a process
    // that came meanwhile with the epoch unchanged.
    fixture.move_into_the_cgroup(4244);
    assert_eq!(fixture.pids(cgroup_epoch(1)), [4242, 4244]);
}

#[test]
fn cpu_mode_seconds_print_as_the_ticks_divided_by_the_clock_rate() {
    // 309974 ticks × 0.01 is 3099.7400000000002 in f64; the exposition must show 3099.74, the
    // value a reader computes from /proc/stat (a scrape once failed an exact bracket this way).
    let ticks = crate::source::system::CpuTimes {
        cpu: 0,
        idle: 309_974,
        user: 7,
        ..Default::default()
    };
    let mut out = Vec::new();
    super::cpu_mode_seconds(&[ticks], 100, &mut out);
    assert_eq!(out[0].idle.to_string(), "3099.74");
    assert_eq!(out[0].idle, 309_974.0 / 100.0);
    assert_eq!(out[0].user.to_string(), "0.07");
}

#[test]
fn cpu_mode_counters_never_go_back_except_for_a_cpu_that_restarted() {
    use crate::source::system::CpuTimes;
    let ticks = |cpu, idle, iowait| CpuTimes {
        cpu,
        idle,
        iowait,
        user: 50,
        ..Default::default()
    };
    let mut floor = super::CpuModeFloor::default();
    assert_eq!(
        floor.apply(&[ticks(0, 1000, 40), ticks(1, 1000, 40)], 100),
        [ticks(0, 1000, 40), ticks(1, 1000, 40)]
    );
    // iowait back by 2 ticks and idle by 1 (NO_HZ's jitter): the values given last stay.
    assert_eq!(
        floor.apply(&[ticks(0, 999, 38), ticks(1, 1010, 41)], 100),
        [ticks(0, 1000, 40), ticks(1, 1010, 41)]
    );
    // CPU 1 offline, then back with fresh counters (idle back by 3 s): it starts again, and
    // CPU 2 appears.
    assert_eq!(
        floor.apply(&[ticks(0, 1005, 40)], 100),
        [ticks(0, 1005, 40)]
    );
    let back = [ticks(0, 1006, 41), ticks(1, 5, 0), ticks(2, 7, 1)];
    assert_eq!(floor.apply(&back, 100), back);
    // An idle time 3 s or more below the last one given out is a restart, not jitter.
    assert_eq!(
        floor.apply(&[ticks(0, 706, 0), ticks(1, 6, 0), ticks(2, 8, 1)], 100),
        [ticks(0, 706, 0), ticks(1, 6, 0), ticks(2, 8, 1)]
    );
}

fn machine_epoch(processes_created: u64) -> Option<ListingEpoch> {
    Some(ListingEpoch::Machine(MachineEpoch {
        processes_created,
        processes_exited: 2,
    }))
}

#[test]
fn an_unchanged_machine_epoch_reuses_the_proc_listing_and_a_counted_creation_lists_again() {
    let mut fixture = Fixture::global();
    assert_eq!(fixture.pids(machine_epoch(5)), [100, 101, 102, 103]);
    // A process the kernel has not counted is not looked for: the listing is reused.
    write_process(&fixture.proc(), 104, 1, &[]);
    assert_eq!(fixture.pids(machine_epoch(5)), [100, 101, 102, 103]);
    assert_eq!(fixture.reader.listings(), 1);
    // Its creation counted, the next pass lists `/proc` again.
    assert_eq!(fixture.pids(machine_epoch(6)), [100, 101, 102, 103, 104]);
    assert_eq!(fixture.reader.listings(), 2);
    // Without the count, every pass lists.
    write_process(&fixture.proc(), 105, 1, &[]);
    assert_eq!(fixture.pids(None), [100, 101, 102, 103, 104, 105]);
}

#[test]
fn a_reaped_process_in_a_reused_machine_listing_makes_the_next_pass_list_again() {
    let mut fixture = Fixture::global();
    assert_eq!(fixture.pids(machine_epoch(5)), [100, 101, 102, 103]);
    // 101 reaped after its exit was counted in an earlier pass: dropped as gone now...
    std::fs::remove_dir_all(fixture.proc().join("101")).unwrap();
    assert_eq!(fixture.pids(machine_epoch(5)), [100, 102, 103]);
    assert_eq!(fixture.reader.listings(), 1);
    // ...and the next pass lists `/proc` again with the same epoch.
    assert_eq!(fixture.pids(machine_epoch(5)), [100, 102, 103]);
    assert_eq!(fixture.reader.listings(), 2);
}

/// The global scope's listing reused by the kernel's live counts: over passes taken while this
/// test starts and reaps processes of its own (other tests run beside it), every pass has each
/// of them from its start to its reaping and none after. Counts how many passes reused.
#[test]
#[ignore = "root: loads the eBPF programs"]
fn the_global_listing_reused_by_the_kernels_counts_has_every_process_started_and_none_reaped() {
    use crate::source::ebpf::{EbpfOptions, EbpfSource};
    let source = EbpfSource::load(&EbpfOptions::default()).expect("loading the eBPF programs");
    let epoch = || {
        let global = source.global().expect("global counters");
        Some(ListingEpoch::Machine(MachineEpoch {
            processes_created: global.processes_created,
            processes_exited: global.processes_exited,
        }))
    };
    let mut fixture =
        Fixture::with_roots(tempfile::tempdir().unwrap(), &Roots::host(), Target::Global);
    let mut live: Vec<std::process::Child> = Vec::new();
    let mut reaped: Vec<u32> = Vec::new();
    let passes = 60;
    for step in 0..passes {
        match step % 6 {
            0 => live.push(
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap(),
            ),
            3 if live.len() > 1 => {
                let mut child = live.remove(0);
                child.kill().unwrap();
                child.wait().unwrap();
                reaped.push(child.id());
            }
            _ => {}
        }
        let pids = fixture.pids(epoch());
        for child in &live {
            assert!(
                pids.contains(&child.id()),
                "{} missing at {step}",
                child.id()
            );
        }
        for pid in &reaped {
            // A reaped pid the machine gave to a new process may be listed again.
            let reused = std::path::Path::new(&format!("/proc/{pid}")).exists();
            assert!(
                reused || !pids.contains(pid),
                "{pid} still listed at {step}"
            );
        }
    }
    for mut child in live {
        let _ = child.kill();
        let _ = child.wait();
    }
    let listings = fixture.reader.listings();
    eprintln!("{listings} listings in {passes} passes");
    assert!(listings >= 10, "a listing after each start: {listings}");
}
