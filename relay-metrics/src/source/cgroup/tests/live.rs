//! Live test on this machine's cgroup v1 hierarchies. NEEDS ROOT and a host with v1 cpu and memory
//! hierarchies (the dev/CI machines are hybrid); it fails loudly rather than skipping otherwise.
//! It creates and removes its own cgroups only.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::super::parse::LimitValue;
use super::super::*;
use crate::source::Roots;

/// Own cgroups and the busy child; removed on drop, so also when an assertion fails.
struct Cleanup {
    child: Option<Child>,
    dirs: Vec<PathBuf>,
}

impl Cleanup {
    fn run(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(mut child) = self.child.take() {
            if let Err(error) = child.kill() {
                problems.push(format!("kill child: {error}"));
            }
            if let Err(error) = child.wait() {
                problems.push(format!("wait child: {error}"));
            }
        }
        for dir in self.dirs.drain(..) {
            if let Err(error) = fs::remove_dir(&dir) {
                problems.push(format!("rmdir {}: {error}", dir.display()));
            }
        }
        problems
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for problem in self.run() {
            eprintln!("cleanup: {problem}");
        }
    }
}

fn write(path: &Path, value: &str) {
    let mut file = OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    file.write_all(value.as_bytes())
        .unwrap_or_else(|e| panic!("write {value:?} to {}: {e}", path.display()));
}

fn file_u64(path: &Path) -> u64 {
    let text = fs::read_to_string(path).unwrap();
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {text:?}: {e}", path.display()))
}

fn key_u64(path: &Path, key: &str) -> u64 {
    let text = fs::read_to_string(path).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("{}: no {key}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// The values the reader should report, read independently with plain `std::fs`.
#[derive(Debug, PartialEq)]
struct Independent {
    nr_periods: u64,
    nr_throttled: u64,
    throttled_usec: u64,
    usage_ns: Option<u64>,
    limit_bytes: u64,
    current_bytes: u64,
    failcnt: u64,
}

fn independent(cpu: &Path, cpuacct: Option<&Path>, memory: &Path) -> Independent {
    let stat = cpu.join("cpu.stat");
    Independent {
        nr_periods: key_u64(&stat, "nr_periods"),
        nr_throttled: key_u64(&stat, "nr_throttled"),
        throttled_usec: key_u64(&stat, "throttled_time") / 1000,
        usage_ns: cpuacct.map(|dir| file_u64(&dir.join("cpuacct.usage"))),
        limit_bytes: file_u64(&memory.join("memory.limit_in_bytes")),
        current_bytes: file_u64(&memory.join("memory.usage_in_bytes")),
        failcnt: file_u64(&memory.join("memory.failcnt")),
    }
}

#[test]
#[ignore = "root: creates v1 cgroups under /sys/fs/cgroup"]
fn live_v1_needs_root_throttling_limits_and_membership() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root: it creates cgroups under /sys/fs/cgroup"
    );
    let roots = Roots::host();
    let layout = discover(&roots).unwrap();
    let cpu_root = layout
        .v1_hierarchy("cpu")
        .expect("this test needs a cgroup v1 cpu hierarchy (hybrid host)")
        .mount
        .mount_point
        .clone();
    let memory_root = layout
        .v1_hierarchy("memory")
        .expect("this test needs a cgroup v1 memory hierarchy (hybrid host)")
        .mount
        .mount_point
        .clone();
    let acct_root = layout
        .v1_hierarchy("cpuacct")
        .map(|h| h.mount.mount_point.clone());

    let name = format!("relay-metrics-test-{}", std::process::id());
    let cpu_dir = cpu_root.join(&name);
    let memory_dir = memory_root.join(&name);
    let combined = acct_root.as_ref() == Some(&cpu_root);
    let acct_dir = acct_root
        .filter(|root| *root != cpu_root)
        .map(|root| root.join(&name));
    // Where cpuacct.usage is: its own hierarchy, or the cpu one when mounted as cpu,cpuacct.
    let usage_dir = if combined {
        Some(cpu_dir.clone())
    } else {
        acct_dir.clone()
    };
    let mut cleanup = Cleanup {
        child: None,
        dirs: Vec::new(),
    };
    for dir in [Some(&cpu_dir), Some(&memory_dir), acct_dir.as_ref()]
        .into_iter()
        .flatten()
    {
        fs::create_dir(dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        cleanup.dirs.push(dir.clone());
    }
    write(&cpu_dir.join("cpu.cfs_period_us"), "100000");
    write(&cpu_dir.join("cpu.cfs_quota_us"), "20000");
    write(&memory_dir.join("memory.limit_in_bytes"), "67108864");

    let child = Command::new("sh")
        .args(["-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid = child.id();
    cleanup.child = Some(child);
    for dir in [Some(&cpu_dir), Some(&memory_dir), acct_dir.as_ref()]
        .into_iter()
        .flatten()
    {
        write(&dir.join("cgroup.procs"), &pid.to_string());
    }
    std::thread::sleep(Duration::from_millis(1000));
    // Stop the child so that the counters settle and two reads can be compared exactly; the
    // bandwidth timer runs a period or two more before it goes idle.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(400));

    let target = resolve(&layout, &format!("/{name}")).unwrap();
    let mut reader = CgroupReader::new();
    let before = independent(&cpu_dir, usage_dir.as_deref(), &memory_dir);
    let sample = reader.read(&target, CgroupFields::ALL).unwrap();
    let after = independent(&cpu_dir, usage_dir.as_deref(), &memory_dir);

    assert!(sample.cpu.nr_throttled.unwrap() > 0, "{sample:?}");
    assert!(sample.cpu.throttled_usec.unwrap() > 0, "{sample:?}");
    assert!(sample.cpu.usage_ns.unwrap() > 100_000_000, "{sample:?}");
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(0.2));
    assert_eq!(sample.cpu.throttling_version, Some(CgroupVersion::V1));
    assert_eq!(sample.memory.limit_bytes, Some(67_108_864));
    assert_eq!(sample.memory.version, Some(CgroupVersion::V1));

    // Counters are settled: both independent reads agree and the reader saw the same values.
    assert_eq!(before.nr_periods, after.nr_periods);
    assert_eq!(sample.cpu.nr_periods, Some(after.nr_periods));
    assert_eq!(sample.cpu.nr_throttled, Some(after.nr_throttled));
    assert_eq!(sample.cpu.throttled_usec, Some(after.throttled_usec));
    assert_eq!(sample.cpu.usage_ns, after.usage_ns);
    assert_eq!(sample.memory.limit_bytes, Some(after.limit_bytes));
    assert_eq!(sample.memory.events.max, Some(after.failcnt));
    // Per-CPU charge caches can be drained by other workloads between reads.
    let current = sample.memory.current_bytes.unwrap();
    let (low, high) = (
        before.current_bytes.min(after.current_bytes),
        before.current_bytes.max(after.current_bytes),
    );
    assert!(
        (low..=high).contains(&current),
        "{current} not in {low}..={high}"
    );

    let mut pids = Vec::new();
    subtree_pids(&target, &mut pids).unwrap();
    assert_eq!(pids, vec![pid]);
    assert!(owns_exclusively(&target, &[pid]).unwrap());
    // A long-lived walker holds the top directory and its cgroup.procs between walks.
    let mut walker = SubtreeWalker::new();
    assert!(walker.owns_exclusively(&target, &[pid]).unwrap());
    assert!(!walker.owns_exclusively(&target, &[pid, pid + 1]).unwrap());
    walker.pids(&target, &mut pids).unwrap();
    assert_eq!(pids, vec![pid]);
    // A process moved in and out is seen by the very next walk. (v1 serves a cached pid list
    // to a descriptor read again within a second, so the held walker must reopen the file.)
    let extra = Command::new("sleep").arg("30").spawn().unwrap();
    let extra_pid = extra.id();
    // Declared after `cleanup`, so dropped (killed) first, leaving the cgroups empty.
    let _extra = Cleanup {
        child: Some(extra),
        dirs: Vec::new(),
    };
    write(&memory_dir.join("cgroup.procs"), &extra_pid.to_string());
    walker.pids(&target, &mut pids).unwrap();
    let mut expected = vec![pid, extra_pid];
    expected.sort_unstable();
    assert_eq!(pids, expected);
    assert!(!walker.owns_exclusively(&target, &[pid]).unwrap());
    write(
        Path::new("/sys/fs/cgroup/memory/cgroup.procs"),
        &extra_pid.to_string(),
    );
    walker.pids(&target, &mut pids).unwrap();
    assert_eq!(pids, vec![pid]);
    assert!(walker.owns_exclusively(&target, &[pid]).unwrap());
    let of_child = resolve_for_pid(&layout, &roots, pid).unwrap();
    assert_eq!(of_child.v1_dir("cpu").unwrap().dir, cpu_dir);
    assert_eq!(of_child.v1_dir("memory").unwrap().path, format!("/{name}"));

    let problems = cleanup.run();
    assert!(problems.is_empty(), "{problems:?}");
    // The reader still holds descriptors of the removed cgroups: they must read as gone.
    let error = reader.read(&target, CgroupFields::ALL).unwrap_err();
    assert!(error.is_gone(), "{error}");
    assert!(subtree_pids(&target, &mut pids).unwrap_err().is_gone());
    // Its held descriptors of the removed cgroup read as gone too ...
    assert!(walker.pids(&target, &mut pids).unwrap_err().is_gone());
    // ... and a cgroup recreated under the same path is read afresh (empty), not as gone.
    assert!(walker.pids(&target, &mut pids).unwrap_err().is_gone());
    fs::create_dir(&memory_dir).unwrap();
    let recreated = Cleanup {
        child: None,
        dirs: vec![memory_dir.clone()],
    };
    pids.push(1);
    walker.pids(&target, &mut pids).unwrap();
    assert!(pids.is_empty(), "{pids:?}");
    drop(recreated);
}

#[test]
#[ignore = "root: creates a v1 cgroup under /sys/fs/cgroup"]
fn live_v1_hierarchy_roots_hold_no_limit() {
    // The reader leaves a v1 hierarchy's root (the directory with `release_agent`) out of the
    // limit chains: this checks, on this kernel, that only the root has that file and that its
    // limits read unlimited; and that a cgroup just below the root still gets its own limit.
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root: it creates cgroups under /sys/fs/cgroup"
    );
    let layout = discover(&Roots::host()).unwrap();
    let root_of = |controller: &str| {
        layout
            .v1_hierarchy(controller)
            .unwrap_or_else(|| panic!("this test needs a cgroup v1 {controller} hierarchy"))
            .mount
            .mount_point
            .clone()
    };
    let (memory_root, cpu_root, pids_root) = (root_of("memory"), root_of("cpu"), root_of("pids"));
    for root in [&memory_root, &cpu_root, &pids_root] {
        assert!(root.join("release_agent").exists(), "{}", root.display());
    }
    let root_limit = fs::read(memory_root.join("memory.limit_in_bytes")).unwrap();
    assert_eq!(
        parse_v1_memory_limit(&root_limit),
        Some(LimitValue::Unlimited)
    );
    let quota = fs::read(cpu_root.join("cpu.cfs_quota_us")).unwrap();
    let period = fs::read(cpu_root.join("cpu.cfs_period_us")).unwrap();
    assert_eq!(
        parse_v1_cpu_quota(&quota, &period),
        Some(CpuQuota::Unlimited)
    );
    assert!(!pids_root.join("pids.max").exists());

    let name = format!("relay-metrics-test-roots-{}", std::process::id());
    let memory_dir = memory_root.join(&name);
    fs::create_dir(&memory_dir).unwrap();
    let _cleanup = Cleanup {
        child: None,
        dirs: vec![memory_dir.clone()],
    };
    assert!(!memory_dir.join("release_agent").exists());
    let target = resolve(&layout, &format!("/{name}")).unwrap();
    let mut reader = CgroupReader::new();
    let only_memory = CgroupFields {
        memory: true,
        ..CgroupFields::NONE
    };
    assert_eq!(
        reader
            .read(&target, only_memory)
            .unwrap()
            .memory
            .limit_bytes,
        None
    );
    write(&memory_dir.join("memory.limit_in_bytes"), "67108864");
    // A limit is read again once the last read of it is this old.
    std::thread::sleep(super::super::values::LIMITS_MAX_AGE);
    assert_eq!(
        reader
            .read(&target, only_memory)
            .unwrap()
            .memory
            .limit_bytes,
        Some(67_108_864)
    );
}

/// `cgroup.procs` is a record-by-record seq_file (a page per read): with 1,500 members it is
/// many pages long, and both the subtree walk and the mount layout read them to the end.
#[test]
#[ignore = "root: makes a v1 pids cgroup with 1,500 processes"]
fn a_cgroup_of_1500_processes_is_listed_whole() {
    let sleepers = crate::long_files::Sleepers::new(1500);
    let procs = sleepers.cgroup.join("cgroup.procs");
    let oracle: Vec<u32> = fs::read_to_string(&procs)
        .unwrap()
        .split_whitespace()
        .map(|pid| pid.parse().unwrap())
        .collect();
    assert_eq!(oracle.len(), 1501);
    let mut pids = Vec::new();
    let file = fs::File::open(&procs).unwrap();
    super::super::membership::read_procs(&file, &mut Vec::new(), &mut pids).unwrap();
    assert_eq!(pids, oracle);

    let layout = CgroupLayout::discover(&Roots::host()).unwrap();
    let name = sleepers.cgroup.file_name().unwrap().to_str().unwrap();
    let target = resolve(&layout, &format!("/{name}")).unwrap();
    let mut walked = Vec::new();
    subtree_pids(&target, &mut walked).unwrap();
    let mut sorted = oracle.clone();
    sorted.sort_unstable();
    assert_eq!(walked, sorted);
}

/// `mountinfo` is a record-by-record seq_file: with 1,000 mounts before it, a cgroup
/// hierarchy's line is ~15 pages in, and the layout still finds it.
#[test]
#[ignore = "root: makes a mount namespace with 1,000 tmpfs mounts"]
fn a_cgroup_mount_past_the_first_page_of_mountinfo_is_found() {
    let mounts = crate::long_files::Mounts::new(1000);
    let fake_proc = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(mounts.proc_dir(), fake_proc.path().join("self")).unwrap();
    let mountinfo = fake_proc.path().join("self/mountinfo");
    let oracle = fs::read(&mountinfo).unwrap();
    let pids_at = oracle
        .windows(b" - cgroup cgroup rw,pids".len())
        .rposition(|w| w == b" - cgroup cgroup rw,pids")
        .expect("the pids hierarchy in the oracle");
    assert!(pids_at > 10 * crate::long_files::PAGE, "at byte {pids_at}");
    let roots = Roots {
        proc: fake_proc.path().to_path_buf(),
        sys: PathBuf::from("/sys"),
    };
    let layout = CgroupLayout::discover(&roots).unwrap();
    assert!(layout.v1_hierarchy("pids").is_some(), "{layout:?}");
    assert_eq!(layout, CgroupLayout::from_mountinfo(&oracle, &roots));
}
