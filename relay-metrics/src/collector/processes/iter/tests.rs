//! The iterator path against the procfs path on live, stopped processes: identical counters.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::super::super::reasons::Reasons;
use super::super::super::Target;
use super::super::ProcessPassReader;
use super::{SourceState, BPF_ITER, PROCFS};
use crate::config::{ProcessSource, ResourceMetricsConfig, ScopeSetting};
use crate::model::{ProcessCounters, ProcessPass, Wanted};
use crate::source::Roots;

const CHILD_MODE: &str = "RELAY_METRICS_TASK_ITER_WORKLOAD";

/// The body of the workload processes, when this test binary runs as one (`crate::test_children`;
/// returns at once without the variable). Threads that read and write files, one of which exits
/// first (its counts move to the process's dead-thread totals), CPU work, open descriptors; then
/// it waits to be stopped.
pub(crate) fn run_child_if_requested() {
    let Ok(mode) = std::env::var(CHILD_MODE) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("relay-metrics-iter-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let threads: usize = mode.parse().unwrap();
    let mut held = Vec::new();
    for index in 0..4 {
        held.push(std::fs::File::create(dir.join(format!("held{index}"))).unwrap());
    }
    let work = |index: usize, dir: std::path::PathBuf| {
        let path = dir.join(format!("t{index}"));
        let block = vec![index as u8; 64 * 1024];
        for _ in 0..16 {
            std::io::Write::write_all(&mut std::fs::File::create(&path).unwrap(), &block).unwrap();
            let _ = std::fs::read(&path).unwrap();
        }
        let mut x = 0u64;
        for j in 0..3_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(j));
        }
        std::hint::black_box(x);
    };
    // One thread that exits before the measurement.
    let d = dir.clone();
    std::thread::spawn(move || work(99, d)).join().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    for index in 1..threads {
        let d = dir.clone();
        let sender = sender.clone();
        std::thread::spawn(move || {
            work(index, d);
            sender.send(()).unwrap();
            loop {
                std::thread::park();
            }
        });
    }
    for _ in 1..threads {
        receiver.recv().unwrap();
    }
    work(0, dir.clone());
    let _ = std::fs::remove_dir_all(&dir);
    println!(" ready");
    std::hint::black_box(&held);
    loop {
        std::thread::park();
    }
}

/// A workload process, stopped (SIGSTOP) once ready: every thread then stands still.
struct Stopped(Child);

impl Stopped {
    fn start(threads: usize) -> Self {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_MODE, threads.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        assert!(
            lines.any(|line| line.unwrap().trim_end().ends_with(" ready")),
            "the workload never got ready"
        );
        let pid = child.id();
        // SAFETY: a signal to our own child.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !all_threads_stopped(pid) {
            assert!(Instant::now() < deadline, "workload {pid} did not stop");
            std::thread::sleep(Duration::from_millis(5));
        }
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.filter_map(Result::ok).all(|task| {
        std::fs::read_to_string(task.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('T'))
            })
            .unwrap_or(false)
    })
}

/// The scope the two paths are compared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    Global,
    /// A cgroup of the test's own that holds the stopped workloads.
    Cgroup,
    /// The test process's own tree (the workloads are its children).
    Tree,
}

/// A cgroup created for the test, in the v1 `pids` hierarchy on a hybrid host or the v2 root
/// elsewhere; its processes go back to the parent and it is removed on drop.
struct OwnCgroup {
    /// As `cgroup_path` takes it.
    relative: String,
    dir: std::path::PathBuf,
    parent: std::path::PathBuf,
}

impl OwnCgroup {
    fn create() -> Self {
        let v1 = std::path::Path::new("/sys/fs/cgroup/pids");
        let parent = if v1.join("cgroup.procs").exists() {
            v1.to_path_buf()
        } else {
            std::path::PathBuf::from("/sys/fs/cgroup")
        };
        // Unique per test too: the cgroup-scope tests of this binary run in parallel.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let serial = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let relative = format!("/relay-metrics-iter-test-{}-{serial}", std::process::id());
        let dir = parent.join(relative.trim_start_matches('/'));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        Self {
            relative,
            dir,
            parent,
        }
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", self.dir.display()));
    }

    fn target(&self) -> Target {
        let layout = crate::source::cgroup::discover(&Roots::host()).unwrap();
        Target::Cgroup {
            path: self.relative.clone(),
            resolved: Box::new(crate::source::cgroup::resolve(&layout, &self.relative).unwrap()),
        }
    }
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines() {
                let _ = std::fs::write(self.parent.join("cgroup.procs"), pid);
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

pub(super) fn reader(source: ProcessSource, target: &Target) -> ProcessPassReader {
    let mut config = ResourceMetricsConfig {
        measurement_scope: match target.scope() {
            crate::snapshot::MeasurementScope::Global => ScopeSetting::Global,
            crate::snapshot::MeasurementScope::Cgroup => ScopeSetting::Cgroup,
            _ => ScopeSetting::ProcessTree,
        },
        ..ResourceMetricsConfig::default()
    };
    config.extensions.process_source = source;
    let wanted = Wanted::from_config(&config, target.scope());
    ProcessPassReader::new(&Roots::host(), &config, target, wanted).unwrap()
}

pub(super) fn pass(reader: &mut ProcessPassReader, target: &Target) -> Vec<ProcessCounters> {
    let mut reasons = Reasons::default();
    reasons.begin();
    match reader.read(target, None, &mut reasons) {
        ProcessPass::Sampled(set) => set.processes,
        other => panic!("no processes sampled: {other:?}"),
    }
}

/// Both paths over the same stopped processes in `scope`; returns how many were compared.
/// Outside the global scope the memory and CPU categories read more (exact resident size,
/// per-thread scheduler statistics), and those must agree too.
pub(crate) fn assert_paths_agree_on_stopped_processes(scope: Scope) -> usize {
    assert_eq!(
        nix::unistd::geteuid().as_raw(),
        0,
        "this test loads a BPF iterator: run it as root"
    );
    // One comparison at a time: the collector's own descriptor count is compared, and another
    // comparison's files would come and go in between.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cgroup = (scope == Scope::Cgroup).then(OwnCgroup::create);
    let workloads = [Stopped::start(4), Stopped::start(1), Stopped::start(8)];
    let target = match &cgroup {
        Some(cgroup) => {
            for workload in &workloads {
                cgroup.add(workload.pid());
            }
            cgroup.target()
        }
        None if scope == Scope::Tree => {
            let own = std::fs::read("/proc/self/stat").unwrap();
            let own = crate::source::procfs::parse::parse_stat(&own).unwrap();
            Target::Process {
                pid: std::process::id(),
                start_time_ticks: own.start_time_ticks,
                tree: true,
            }
        }
        None => Target::Global,
    };
    let mut iter = reader(ProcessSource::BpfIter, &target);
    let mut procfs = reader(ProcessSource::Procfs, &target);
    assert_eq!(iter.process_source().0, BPF_ITER);
    assert_eq!(procfs.process_source().0, PROCFS);
    // Twice: the first pass opens files, the second reads held ones; and the iterator's
    // utime/stime split must agree before and after procfs advanced the kernel's clamp state.
    for round in 0..2 {
        let by_iter = pass(&mut iter, &target);
        assert_eq!(iter.process_source(), (BPF_ITER, None), "{scope:?}");
        for workload in &workloads {
            assert!(
                !iter.procfs_pids().contains(&workload.pid()),
                "pid {} was not served by the iterator",
                workload.pid()
            );
        }
        let by_procfs = pass(&mut procfs, &target);
        for workload in &workloads {
            let find = |set: &[ProcessCounters]| {
                set.iter()
                    .find(|p| p.pid == workload.pid())
                    .cloned()
                    .unwrap_or_else(|| panic!("round {round}: pid {} missing", workload.pid()))
            };
            let (mut a, mut b) = (find(&by_iter), find(&by_procfs));
            // Private memory comes from smaps_rollup on both paths, and it moves even for a
            // stopped process: a page of the shared test binary turns from private to shared
            // when another process (this one) maps it.
            assert_eq!(a.private_kib.is_some(), scope != Scope::Global);
            assert_eq!(b.private_kib.is_some(), scope != Scope::Global);
            (a.private_kib, b.private_kib) = (None, None);
            // The children's CPU times come from procfs only.
            assert!(a.cutime_ticks.is_none() && b.cutime_ticks.is_some());
            (b.cutime_ticks, b.cstime_ticks) = (None, None);
            // The whole process's run time (exited threads included) comes from the iterator
            // only. `stat`'s user and system times are the kernel's split of that same run
            // time, so in clock ticks they are its truncation, each part truncated.
            assert_eq!(b.run_time_ns, None);
            if let Some(run_ns) = a.run_time_ns {
                let tick_ns =
                    1_000_000_000 / crate::source::procfs::clock_ticks_per_second().unwrap();
                let ticks = b.utime_ticks + b.stime_ticks;
                assert!(
                    (ticks..=ticks + 2).contains(&(run_ns / tick_ns)),
                    "{scope:?}: run time {run_ns} ns, stat {ticks} ticks"
                );
            }
            b.run_time_ns = a.run_time_ns;
            assert_eq!(
                a,
                b,
                "{scope:?} round {round}: iterator vs procfs for {}",
                workload.pid()
            );
            assert!(a.threads >= 1 && a.open_fds.unwrap() >= 4 && a.rss_bytes > 0);
            assert!(a.io.unwrap().write_syscalls >= 16 && a.utime_ticks + a.stime_ticks > 0);
            if scope != Scope::Global {
                assert!(
                    a.run_time_ns.unwrap() > 0,
                    "{scope:?}: no scheduler statistics"
                );
            }
        }
        let pids = |set: &[ProcessCounters]| set.iter().map(|p| p.pid).collect::<Vec<_>>();
        let (iter_pids, procfs_pids) = (pids(&by_iter), pids(&by_procfs));
        if scope != Scope::Global {
            let mut expected: Vec<u32> = workloads.iter().map(Stopped::pid).collect();
            expected.sort_unstable();
            if scope == Scope::Cgroup {
                // The cgroup's processes exactly, from both paths.
                assert_eq!(iter_pids, expected, "round {round}: the cgroup's processes");
                assert_eq!(
                    procfs_pids, expected,
                    "round {round}: the cgroup's processes"
                );
            } else {
                // The tree: this process and its children, among them the workloads. Other
                // tests' children come and go, and so do this process's own descriptors (the
                // global comparison checks those, alone).
                assert!(iter_pids.contains(&std::process::id()));
                assert!(expected.iter().all(|pid| iter_pids.contains(pid)));
            }
            continue;
        }
        // The collector's own descriptor count leaves out what either path holds to read.
        let own = |set: &[ProcessCounters]| {
            set.iter()
                .find(|p| p.pid == std::process::id())
                .and_then(|p| p.open_fds)
        };
        assert_eq!(
            own(&by_iter),
            own(&by_procfs),
            "round {round}: own open_fds"
        );
        // No process lost from the sums: every pid procfs read is there.
        for pid in [1u32, std::process::id()] {
            assert_eq!(
                iter_pids.contains(&pid),
                procfs_pids.contains(&pid),
                "pid {pid}"
            );
        }
    }
    drop(workloads);
    drop(cgroup);
    3
}

#[test]
#[ignore = "root: loads the BPF task iterator"]
fn iterator_and_procfs_agree_on_stopped_processes() {
    assert_eq!(assert_paths_agree_on_stopped_processes(Scope::Global), 3);
}

#[test]
#[ignore = "root: loads the BPF task iterator, creates a cgroup"]
fn iterator_and_procfs_agree_on_stopped_processes_in_cgroup_scope() {
    assert_eq!(assert_paths_agree_on_stopped_processes(Scope::Cgroup), 3);
}

#[test]
fn forcing_the_iterator_where_it_cannot_serve_is_an_error_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("proc")).unwrap();
    let mut config = ResourceMetricsConfig {
        measurement_scope: ScopeSetting::Global,
        ..ResourceMetricsConfig::default()
    };
    config.extensions.process_source = ProcessSource::BpfIter;
    let wanted = Wanted::from_config(&config, Target::Global.scope());
    let Err(error) = ProcessPassReader::new(
        &Roots::fixture(dir.path()),
        &config,
        &Target::Global,
        wanted,
    ) else {
        panic!("the iterator was forced on a fixture tree");
    };
    let error = error.to_string();
    assert!(
        error.contains("\"bpf_iter\"") && error.contains("fixture"),
        "{error}"
    );
    // In "auto" the same refusal is the reason procfs serves.
    config.extensions.process_source = ProcessSource::Auto;
    let reader = ProcessPassReader::new(
        &Roots::fixture(dir.path()),
        &config,
        &Target::Global,
        wanted,
    )
    .unwrap();
    let (source, reason) = reader.process_source();
    assert_eq!(source, PROCFS);
    assert!(reason.unwrap().contains("fixture"));
}

#[test]
#[ignore = "root: loads the BPF task iterator"]
fn iterator_and_procfs_agree_on_stopped_processes_in_process_tree_scope() {
    assert_eq!(assert_paths_agree_on_stopped_processes(Scope::Tree), 3);
}

#[test]
fn procfs_serves_small_scopes_and_the_iterator_large_ones() {
    use super::procfs_is_cheaper;
    // A handful of processes on a busy machine: procfs.
    assert!(procfs_is_cheaper(1, 100));
    assert!(procfs_is_cheaper(5, 600));
    // Most of the machine: the iterator.
    assert!(!procfs_is_cheaper(80, 200));
    assert!(!procfs_is_cheaper(500, 700));
    // The crossover moves with the machine's size.
    let crossover = |tasks| (1..10_000).find(|&n| !procfs_is_cheaper(n, tasks)).unwrap();
    assert!(crossover(100) < crossover(1_000));
}

/// In "auto", a cgroup of one process is read through procfs, with the reason; forced, the
/// iterator serves it.
#[test]
#[ignore = "root: loads the BPF task iterator, creates a cgroup"]
fn a_small_cgroup_is_read_through_procfs_in_auto_with_the_reason() {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    let cgroup = OwnCgroup::create();
    let workload = Stopped::start(1);
    cgroup.add(workload.pid());
    let target = cgroup.target();
    let mut auto = reader(ProcessSource::Auto, &target);
    assert_eq!(pass(&mut auto, &target).len(), 1);
    let (source, reason) = auto.process_source();
    assert_eq!(source, PROCFS);
    assert!(reason.unwrap().contains("cheaper"), "{reason:?}");
    assert!(
        matches!(auto.source, SourceState::Deferred { .. }),
        "a scope that procfs serves more cheaply does not load the iterator"
    );
    let mut forced = reader(ProcessSource::BpfIter, &target);
    assert_eq!(pass(&mut forced, &target).len(), 1);
    assert_eq!(forced.process_source(), (BPF_ITER, None));
    drop(workload);
}
