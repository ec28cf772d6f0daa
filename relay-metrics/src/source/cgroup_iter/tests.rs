//! Root tests on live cgroups this test makes: a memory user killed at its limit, a busy loop
//! under a CFS quota, a sleeper under a pids limit. `exercise` runs on the host's v1 hierarchies
//! here and on the pure-v2 6.1 kernel in the VM (`vm_tests::cgroup_iter`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use super::exact::{self, Kind, Source};
use super::{CgroupIter, CgroupRecord};

const MEMORY_LIMIT: u64 = 8 << 20;
const PIDS_LIMIT: u64 = 10;

/// Where the test's three cgroups go: one hierarchy root per controller (v1), or the unified
/// root three times (v2).
pub(crate) struct Layout {
    pub memory: PathBuf,
    pub pids: PathBuf,
    pub cpu: PathBuf,
    pub v2: bool,
}

impl Layout {
    pub(crate) fn host_v1() -> Self {
        let root = Path::new("/sys/fs/cgroup");
        Self {
            memory: root.join("memory"),
            pids: root.join("pids"),
            cpu: root.join("cpu"),
            v2: false,
        }
    }
}

/// A cgroup of this test, removed (after its process) on drop.
struct TestCgroup {
    dir: PathBuf,
    child: Option<Child>,
}

impl TestCgroup {
    fn new(root: &Path, name: &str, settings: &[(&str, &str)], command: &str) -> Self {
        let dir = root.join(format!("relay-iter-{name}-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap();
        for (file, value) in settings {
            std::fs::write(dir.join(file), value)
                .unwrap_or_else(|error| panic!("{file} = {value}: {error}"));
        }
        let procs = dir.join("cgroup.procs");
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("echo $$ > {} && exec {command}", procs.display()))
            .spawn()
            .unwrap();
        Self {
            dir,
            child: Some(child),
        }
    }

    fn wait_exit(&mut self, limit: Duration) {
        let start = Instant::now();
        while let Some(child) = self.child.as_mut() {
            if child.try_wait().unwrap().is_some() {
                self.child = None;
            } else {
                assert!(
                    start.elapsed() < limit,
                    "{} did not exit",
                    self.dir.display()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The test's cgroups, driven to their limits.
struct Fixture {
    memory: TestCgroup,
    pids: TestCgroup,
    cpu: TestCgroup,
}

fn fixture(layout: &Layout) -> Fixture {
    let limit = MEMORY_LIMIT.to_string();
    let pids_limit = PIDS_LIMIT.to_string();
    let memory_settings: Vec<(&str, &str)> = if layout.v2 {
        vec![("memory.max", &limit), ("memory.swap.max", "0")]
    } else {
        vec![("memory.limit_in_bytes", &limit)]
    };
    let cpu_settings: &[(&str, &str)] = if layout.v2 {
        &[("cpu.max", "10000 100000")]
    } else {
        &[("cpu.cfs_quota_us", "10000")]
    };
    // `tail` keeps every line; /dev/zero has none, so it grows until the OOM killer ends it.
    let mut memory = TestCgroup::new(&layout.memory, "mem", &memory_settings, "tail /dev/zero");
    memory.wait_exit(Duration::from_secs(30));
    let pids = TestCgroup::new(
        &layout.pids,
        "pids",
        &[("pids.max", &pids_limit)],
        "sleep 60",
    );
    let cpu = TestCgroup::new(
        &layout.cpu,
        "cpu",
        cpu_settings,
        "sh -c 'while :; do :; done'",
    );
    // A few 100 ms periods, so that the quota throttled the loop.
    std::thread::sleep(Duration::from_millis(600));
    Fixture { memory, pids, cpu }
}

fn record_of(iter: &mut CgroupIter, dir: &Path) -> CgroupRecord {
    let mut records = Vec::new();
    iter.read(&mut records).unwrap();
    let name = dir.strip_prefix(iter.root()).unwrap().to_owned();
    *records
        .iter()
        .find(|record| iter.path_of(record.id) == Some(name.as_path()))
        .unwrap_or_else(|| panic!("no record for {}", dir.display()))
}

fn assert_from_iterator(iter: &mut CgroupIter, kinds: &[Kind]) {
    let verdicts = exact::check(iter);
    eprintln!("{}: {verdicts:#?}", iter.root().display());
    for kind in kinds {
        let verdict = verdicts
            .iter()
            .find(|verdict| verdict.kind == *kind)
            .unwrap();
        assert_eq!(
            verdict.source,
            Source::Iterator,
            "{}: {verdict:?}",
            iter.root().display()
        );
        assert!(verdict.reason.contains("equal to its file"), "{verdict:?}");
    }
}

/// Loads an iterator on each hierarchy of `layout`, checks each kind against its file and the
/// test cgroups' values against what the test set and caused.
pub(crate) fn exercise(layout: &Layout) {
    let fixture = fixture(layout);
    let mut memory = CgroupIter::load(&layout.memory).unwrap();
    let record = record_of(&mut memory, &fixture.memory.dir);
    let counter = record.memory.unwrap();
    assert_eq!(counter.max * 4096, MEMORY_LIMIT, "{record:?}");
    assert!(record.oom_kill.unwrap() >= 1, "{record:?}");
    assert!(counter.watermark * 4096 > MEMORY_LIMIT / 2, "{record:?}");
    let mut memory_kinds = vec![
        Kind::MemoryUsage,
        Kind::MemoryPeak,
        Kind::MemoryLimit,
        Kind::OomKill,
    ];
    if !layout.v2 {
        assert!(counter.failcnt >= 1, "{record:?}");
        memory_kinds.push(Kind::MemoryFailcnt);
    }
    assert_from_iterator(&mut memory, &memory_kinds);
    if layout.v2 {
        // v2 has no failcnt and no memsw files: those kinds say so and stay unused.
        let verdicts = exact::check(&mut memory);
        for kind in [Kind::MemoryFailcnt, Kind::MemswUsage, Kind::MemswLimit] {
            let verdict = verdicts
                .iter()
                .find(|verdict| verdict.kind == kind)
                .unwrap();
            assert_eq!(verdict.source, Source::File, "{verdict:?}");
            assert_eq!(
                verdict.reason, "no file holds it on a cgroup v2",
                "{verdict:?}"
            );
        }
    }

    let mut pids = CgroupIter::load(&layout.pids).unwrap();
    let record = record_of(&mut pids, &fixture.pids.dir);
    assert_eq!(record.pids, Some((1, PIDS_LIMIT)), "{record:?}");
    assert_from_iterator(&mut pids, &[Kind::PidsCurrent, Kind::PidsLimit]);

    let mut cpu = CgroupIter::load(&layout.cpu).unwrap();
    let record = record_of(&mut cpu, &fixture.cpu.dir);
    let (periods, throttled, time) = record.cfs.unwrap();
    assert!(periods >= 2 && throttled >= 1 && time > 0, "{record:?}");
    // The quota the fixture set (10 ms per 100 ms period), in ns.
    assert_eq!(
        record.cfs_bandwidth,
        Some((10_000_000, 100_000_000)),
        "{record:?}"
    );
    assert_from_iterator(
        &mut cpu,
        &[
            Kind::CfsPeriods,
            Kind::CfsThrottledPeriods,
            Kind::CfsThrottledTime,
            Kind::CfsQuota,
            Kind::CfsPeriod,
        ],
    );

    // The per-kind fallback: one kind made to disagree goes to its file and says why; the
    // others of the same hierarchy stay on the iterator.
    let verdicts = exact::check_skewed(&mut pids, Some((Kind::PidsLimit, 1)));
    let limit = verdicts.iter().find(|v| v.kind == Kind::PidsLimit).unwrap();
    assert_eq!(limit.source, Source::File, "{limit:?}");
    assert!(
        limit
            .reason
            .contains("iterator 11, file 10 before and 10 after"),
        "{limit:?}"
    );
    let current = verdicts
        .iter()
        .find(|v| v.kind == Kind::PidsCurrent)
        .unwrap();
    assert_eq!(current.source, Source::Iterator, "{current:?}");
    // A usage left to its file takes its peak with it.
    let verdicts = exact::check_skewed(&mut memory, Some((Kind::MemoryUsage, 1)));
    let source = |kind| verdicts.iter().find(|v| v.kind == kind).unwrap().source;
    assert_eq!(source(Kind::MemoryUsage), Source::File, "{verdicts:?}");
    assert_eq!(source(Kind::MemoryPeak), Source::File, "{verdicts:?}");
    assert_eq!(source(Kind::MemoryLimit), Source::Iterator, "{verdicts:?}");
    drop(fixture);
}

#[test]
fn a_peak_is_read_where_its_usage_is() {
    let verdict = |kind, source| exact::Verdict {
        kind,
        source,
        reason: "equal to its file on 3 cgroups (bracketed)".into(),
    };
    let verdicts = exact::peaks_with_their_usage(vec![
        verdict(Kind::MemoryUsage, Source::File),
        verdict(Kind::MemoryPeak, Source::Iterator),
        verdict(Kind::MemswUsage, Source::Iterator),
        verdict(Kind::MemswPeak, Source::Iterator),
    ]);
    assert_eq!(verdicts[1].source, Source::File);
    assert_eq!(
        verdicts[1].reason,
        "read with memory_usage, which its file serves (equal to its file on 3 cgroups (bracketed))"
    );
    assert_eq!(verdicts[3].source, Source::Iterator);
}

#[test]
#[ignore = "root: makes v1 memory, pids and cpu cgroups"]
fn iterator_values_equal_the_files_on_v1_hierarchies() {
    exercise(&Layout::host_v1());
}

/// More records than one iterator read can carry (~32 KiB, 240 records): the map holds them all.
#[test]
#[ignore = "root: makes 300 v1 pids cgroups"]
fn a_walk_past_one_read_buffer_keeps_every_cgroup() {
    let parent =
        Path::new("/sys/fs/cgroup/pids").join(format!("relay-iter-many-{}", std::process::id()));
    std::fs::create_dir(&parent).unwrap();
    let dirs: Vec<PathBuf> = (0..300).map(|at| parent.join(format!("c{at}"))).collect();
    for dir in &dirs {
        std::fs::create_dir(dir).unwrap();
    }
    let mut iter = CgroupIter::load(Path::new("/sys/fs/cgroup/pids")).unwrap();
    let mut records = Vec::new();
    let read = iter.read(&mut records);
    let found = dirs
        .iter()
        .filter(|dir| {
            let name = dir.strip_prefix("/sys/fs/cgroup/pids").unwrap();
            let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(dir).unwrap());
            records.iter().any(|record| record.id == ino) && iter.path_of(ino) == Some(name)
        })
        .count();
    for dir in dirs.iter().rev() {
        std::fs::remove_dir(dir).unwrap();
    }
    std::fs::remove_dir(&parent).unwrap();
    read.unwrap();
    assert_eq!(found, 300);
    assert!(records.len() * super::RECORD_BYTES > 32 * 1024);
}

#[test]
fn a_record_parses_only_at_its_size_and_keeps_validity() {
    let mut bytes = vec![0u8; super::RECORD_BYTES];
    bytes[..8].copy_from_slice(&42u64.to_ne_bytes());
    bytes[8..16].copy_from_slice(&super::VALID_PIDS.to_ne_bytes());
    bytes[16..24].copy_from_slice(&3u64.to_ne_bytes());
    bytes[96..104].copy_from_slice(&5u64.to_ne_bytes());
    bytes[104..112].copy_from_slice(&9u64.to_ne_bytes());
    let record = CgroupRecord::parse(&bytes).unwrap();
    assert_eq!(
        (record.id, record.level, record.pids),
        (42, 3, Some((5, 9)))
    );
    assert_eq!((record.memory, record.cfs), (None, None));
    assert!(CgroupRecord::parse(&bytes[1..]).is_none());
    // Level 0 without the root bit: not a record the program writes.
    bytes[16..24].copy_from_slice(&0u64.to_ne_bytes());
    assert!(CgroupRecord::parse(&bytes).is_none());
}
