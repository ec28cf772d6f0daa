//! The iterator path against the procfs path on live, stopped processes: identical counters.

use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::super::super::reasons::Reasons;
use super::super::super::Target;
use super::super::ProcessPassReader;
use super::{BPF_ITER, PROCFS};
use crate::config::{ProcessSource, ResourceMetricsConfig, ScopeSetting};
use crate::model::{ProcessCounters, ProcessPass, Wanted};
use crate::source::Roots;

const CHILD_MODE: &str = "RELAY_METRICS_TASK_ITER_WORKLOAD";
const CHILD_TEST: &str = "collector::processes::iter::tests::workload_child";

/// Not a test of its own: the body of the workload processes (a no-op without the variable).
/// Threads that read and write files, one of which exits first (its counts move to the
/// process's dead-thread totals), CPU work, open descriptors; then it waits to be stopped.
#[test]
fn workload_child() {
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
    // After the harness's "test <name> ... " on the same line.
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
            .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
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

fn reader(source: ProcessSource) -> ProcessPassReader {
    let mut config = ResourceMetricsConfig {
        measurement_scope: ScopeSetting::Global,
        ..ResourceMetricsConfig::default()
    };
    config.extensions.process_source = source;
    let target = Target::Global;
    let wanted = Wanted::from_config(&config, target.scope());
    ProcessPassReader::new(&Roots::host(), &config, &target, wanted).unwrap()
}

fn pass(reader: &mut ProcessPassReader) -> Vec<ProcessCounters> {
    let mut reasons = Reasons::default();
    reasons.begin();
    match reader.read(&Target::Global, None, &mut reasons) {
        ProcessPass::Sampled(set) => set.processes,
        other => panic!("no processes sampled: {other:?}"),
    }
}

/// Both paths over the same stopped processes; returns how many were compared.
pub(crate) fn assert_paths_agree_on_stopped_processes() -> usize {
    assert_eq!(
        nix::unistd::geteuid().as_raw(),
        0,
        "this test loads a BPF iterator: run it as root"
    );
    let workloads = [Stopped::start(4), Stopped::start(1), Stopped::start(8)];
    let mut iter = reader(ProcessSource::BpfIter);
    let mut procfs = reader(ProcessSource::Procfs);
    assert_eq!(iter.process_source().0, BPF_ITER);
    assert_eq!(procfs.process_source().0, PROCFS);
    // Twice: the first pass opens files, the second reads held ones; and the iterator's
    // utime/stime split must agree before and after procfs advanced the kernel's clamp state.
    for round in 0..2 {
        let by_iter = pass(&mut iter);
        assert_eq!(iter.process_source(), (BPF_ITER, None));
        for workload in &workloads {
            assert!(
                !iter.procfs_pids().contains(&workload.pid()),
                "pid {} was not served by the iterator",
                workload.pid()
            );
        }
        let by_procfs = pass(&mut procfs);
        for workload in &workloads {
            let find = |set: &[ProcessCounters]| {
                set.iter()
                    .find(|p| p.pid == workload.pid())
                    .cloned()
                    .unwrap_or_else(|| panic!("round {round}: pid {} missing", workload.pid()))
            };
            let (a, b) = (find(&by_iter), find(&by_procfs));
            assert_eq!(
                a,
                b,
                "round {round}: iterator vs procfs for {}",
                workload.pid()
            );
            assert!(a.threads >= 1 && a.open_fds.unwrap() >= 4 && a.rss_bytes > 0);
            assert!(a.io.unwrap().write_syscalls >= 16 && a.utime_ticks + a.stime_ticks > 0);
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
        // No process lost from the global sums: every pid procfs read is there.
        let pids = |set: &[ProcessCounters]| set.iter().map(|p| p.pid).collect::<Vec<_>>();
        let (iter_pids, procfs_pids) = (pids(&by_iter), pids(&by_procfs));
        for pid in [1u32, std::process::id()] {
            assert_eq!(
                iter_pids.contains(&pid),
                procfs_pids.contains(&pid),
                "pid {pid}"
            );
        }
    }
    workloads.len()
}

#[test]
#[ignore = "root: loads the BPF task iterator"]
fn iterator_and_procfs_agree_on_stopped_processes() {
    assert_eq!(assert_paths_agree_on_stopped_processes(), 3);
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
