//! The measurement behind docs/PERFORMANCE.md's cgroup-iterator figures (root; run with
//! `cargo test --release -p relay-metrics --lib source::cgroup_iter::bench -- --ignored --nocapture`):
//! per-cgroup cost of one iterator walk against reading the same memory values from the files,
//! at 500 and 2,000 v1 memory cgroups made here and removed after, medians of many rounds,
//! side by side in one run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::CgroupIter;

/// The memory values the record holds, as v1 files (the OOM-kill count is a line of the last).
const FILES: [&str; 9] = [
    "memory.usage_in_bytes",
    "memory.max_usage_in_bytes",
    "memory.limit_in_bytes",
    "memory.failcnt",
    "memory.memsw.usage_in_bytes",
    "memory.memsw.max_usage_in_bytes",
    "memory.memsw.limit_in_bytes",
    "memory.memsw.failcnt",
    "memory.oom_control",
];

const ROUNDS: usize = 41;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Per-cgroup medians, µs: the iterator walk, the files opened and read each round, the same
/// files held open and re-read with `pread` (as the collector's reader does); and the number of
/// cgroups walked.
fn measure(root: &Path, dirs: &[PathBuf]) -> (f64, f64, f64, usize) {
    let mut iter = CgroupIter::load(root).unwrap();
    let mut records = Vec::new();
    let mut walk = Vec::new();
    let mut files = Vec::new();
    let mut held_times = Vec::new();
    let held: Vec<std::fs::File> = dirs
        .iter()
        .flat_map(|dir| FILES.iter().map(move |file| dir.join(file)))
        .map(|path| std::fs::File::open(path).unwrap())
        .collect();
    let mut buf = [0u8; 512];
    for _ in 0..ROUNDS {
        let start = Instant::now();
        iter.read(&mut records).unwrap();
        walk.push(start.elapsed().as_secs_f64() * 1e6);
        let start = Instant::now();
        let mut sum = 0usize;
        for dir in dirs {
            for file in FILES {
                sum += std::fs::read(dir.join(file)).unwrap().len();
            }
        }
        assert!(sum > 0);
        files.push(start.elapsed().as_secs_f64() * 1e6);
        let start = Instant::now();
        for file in &held {
            sum += std::os::unix::fs::FileExt::read_at(file, &mut buf, 0).unwrap();
        }
        assert!(sum > 0);
        held_times.push(start.elapsed().as_secs_f64() * 1e6);
    }
    // Per cgroup: the walk covers every cgroup of the hierarchy (the test's and the host's).
    let per_cgroup = |samples: Vec<f64>| median(samples) / dirs.len() as f64;
    (
        median(walk) / records.len() as f64,
        per_cgroup(files),
        per_cgroup(held_times),
        records.len(),
    )
}

#[test]
#[ignore = "root: makes up to 2,000 v1 memory cgroups; a measurement, run with --nocapture"]
fn iterator_walk_against_files_per_cgroup() {
    let root = Path::new("/sys/fs/cgroup/memory");
    let mut made = Made::new(root.join(format!("relay-iter-bench-{}", std::process::id())));
    for count in [500, 2000] {
        while made.dirs.len() < count {
            let dir = made.parent.join(format!("c{}", made.dirs.len()));
            std::fs::create_dir(&dir).unwrap();
            made.dirs.push(dir);
        }
        let (walk, files, held, walked) = measure(root, &made.dirs);
        eprintln!(
            "{count} cgroups ({walked} walked): iterator {walk:.3} µs/cgroup; {} files: \
             open+read+close {files:.3} µs/cgroup, held pread {held:.3} µs/cgroup \
             (pread/iterator {:.1})",
            FILES.len(),
            held / walk
        );
        assert!(walked >= count);
    }
    let (alone, walking) = churn(root, &made.parent);
    eprintln!(
        "mkdir+rmdir of a memory cgroup beside 2,000: median/p99 {:.1}/{:.1} µs alone, \
         {:.1}/{:.1} µs while another thread walks the iterator without pause",
        alone.0, alone.1, walking.0, walking.1
    );
}

/// The cgroups the measurement made, removed on drop: also when it fails half-way, so that a
/// failed run leaves no 2,000 cgroups behind to slow every later walk of the host.
struct Made {
    parent: PathBuf,
    dirs: Vec<PathBuf>,
}

impl Made {
    fn new(parent: PathBuf) -> Self {
        std::fs::create_dir(&parent).unwrap();
        Self {
            parent,
            dirs: Vec::new(),
        }
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        let churned = self.parent.join(CHURNED);
        for dir in std::iter::once(&churned).chain(self.dirs.iter().rev()) {
            let _ = std::fs::remove_dir(dir);
        }
        if let Err(error) = std::fs::remove_dir(&self.parent) {
            eprintln!("cannot remove {}: {error}", self.parent.display());
        }
    }
}

/// The cgroup [`churn`] makes and removes over and over.
const CHURNED: &str = "churn";

/// Sets its flag when dropped: the walker stops also when the churn beside it panics, instead of
/// walking on while the scope waits for it.
struct StopOnDrop<'f>(&'f std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Median and 99th percentile (µs) of creating and removing one cgroup, alone and while another
/// thread runs iterator walks back to back: the walk holds `cgroup_mutex`, which both need.
fn churn(root: &Path, parent: &Path) -> ((f64, f64), (f64, f64)) {
    const TIMES: usize = 300;
    let dir = parent.join(CHURNED);
    let cycle = || {
        let mut samples: Vec<f64> = (0..TIMES)
            .map(|_| {
                let start = Instant::now();
                std::fs::create_dir(&dir).unwrap();
                std::fs::remove_dir(&dir).unwrap();
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        samples.sort_by(f64::total_cmp);
        (samples[TIMES / 2], samples[TIMES * 99 / 100])
    };
    let alone = cycle();
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let walking = std::thread::scope(|scope| {
        let walker = scope.spawn(|| {
            let mut iter = CgroupIter::load(root).unwrap();
            let mut records = Vec::new();
            let mut walks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                iter.read(&mut records).unwrap();
                walks += 1;
                started.store(true, Ordering::Relaxed);
            }
            walks
        });
        let stop_walker = StopOnDrop(&stop);
        // Churn only once the walker walks: loading the program takes a while on a busy machine.
        while !started.load(Ordering::Relaxed) {
            assert!(
                !walker.is_finished(),
                "the walker ended before its first walk"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let walking = cycle();
        drop(stop_walker);
        assert!(walker.join().unwrap() > 0);
        walking
    });
    (alone, walking)
}
