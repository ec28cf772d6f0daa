//! Synthetic fixture trees for the benches: `N` processes under `proc/`, one pure cgroup v2
//! hierarchy under `sys/fs/cgroup` whose cgroup holds them all, and the system-wide files.
//!
//! Every file follows the kernel's format: per-process files are the bytes captured from a
//! sleeping process on the dev machine (`relay-metrics/src/source/procfs/testdata/sleep_*`) with
//! pid-dependent fields rewritten; system files are the captured `system/` and `net/` testdata
//! (2 CPUs, 4 interfaces); cgroup files follow `tests/fixtures/cgroup-v2`.
//!
//! Also the setup every bench shares: [`or_die`], [`quick`] (and [`quick_main!`]),
//! [`bench_config`] and [`second_snapshot`].

#![allow(dead_code, reason = "each bench uses its own subset of the helpers")]

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use relay_metrics::config::ScopeSetting;
use relay_metrics::internals::Roots;
use relay_metrics::{ResourceMetricsConfig, ResourceMetricsSnapshot};

/// Panics with `what` and the error: a bench that cannot set itself up must not report a number.
pub fn or_die<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    match result {
        Ok(value) => value,
        Err(error) => panic!("{what}: {error}"),
    }
}

/// Criterion with a 0.5 s warm-up and `measurement` per bench, so a whole bench file runs in
/// minutes on a shared machine.
pub fn quick(measurement: Duration) -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(measurement)
}

/// The bench's `main`: its `targets`, each measured for `seconds` with [`quick`] settings.
#[macro_export]
macro_rules! quick_main {
    ($seconds:expr; $($target:path),+ $(,)?) => {
        criterion::criterion_group! {
            name = benches;
            config = $crate::support::quick(std::time::Duration::from_secs($seconds));
            targets = $($target),+
        }
        criterion::criterion_main!(benches);
    };
}

/// Every category but GPU, `/` and `/tmp` as filesystem paths.
pub fn bench_config(scope: ScopeSetting) -> ResourceMetricsConfig {
    let mut config = ResourceMetricsConfig {
        measurement_scope: scope,
        ..Default::default()
    };
    config.gpu.enabled = false;
    config.disk.filesystem_paths = vec!["/".into(), "/tmp".into()];
    config
}

/// The second snapshot (so rates are present) of a collector over `tree` in `scope`, rooted at
/// [`ROOT_PID`], with [`bench_config`].
pub fn second_snapshot(tree: &SyntheticTree, scope: ScopeSetting) -> Arc<ResourceMetricsSnapshot> {
    let config = ResourceMetricsConfig {
        root_pid: Some(ROOT_PID),
        ..bench_config(scope)
    };
    let mut collector = or_die(
        relay_metrics::internals::collector_with_roots(config, Roots::fixture(tree.path())),
        "creating the collector",
    );
    drop(collector.collect());
    collector.collect()
}

/// First pid of the tree; the root process.
pub const ROOT_PID: u32 = 1000;

/// Children per process: pid `ROOT_PID + i` has children `ROOT_PID + 8i + 1 ..= ROOT_PID + 8i + 8`.
pub const FAN_OUT: usize = 8;

/// The cgroup (path inside the v2 hierarchy) holding every process of the tree.
pub const CGROUP_PATH: &str = "/relay-bench.slice";

/// Open descriptors listed in each `proc/<pid>/fd/`.
const FDS_PER_PROCESS: usize = 4;

const SLEEP_STAT: &str = include_str!("../../relay-metrics/src/source/procfs/testdata/sleep_stat");
const SLEEP_STATUS: &str =
    include_str!("../../relay-metrics/src/source/procfs/testdata/sleep_status");
const SLEEP_SMAPS_ROLLUP: &[u8] =
    include_bytes!("../../relay-metrics/src/source/procfs/testdata/sleep_smaps_rollup");
const MEMINFO: &[u8] = include_bytes!("../../relay-metrics/src/source/system/testdata/meminfo");
const PROC_STAT: &[u8] = include_bytes!("../../relay-metrics/src/source/system/testdata/stat");
const PRESSURE_CPU: &[u8] =
    include_bytes!("../../relay-metrics/src/source/system/testdata/pressure_cpu");
const PRESSURE_MEMORY: &[u8] =
    include_bytes!("../../relay-metrics/src/source/system/testdata/pressure_memory");
const PRESSURE_IO: &[u8] =
    include_bytes!("../../relay-metrics/src/source/system/testdata/pressure_io");
const NET_DEV: &[u8] = include_bytes!("../../relay-metrics/src/source/net/testdata/net_dev");

/// The pure-v2 mount table of the VM test bed (as in `tests/fixtures/cgroup-v2`).
const MOUNTINFO: &str = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 22 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
25 24 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:8 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

const PSI_IDLE: &str = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                        full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";

/// A generated tree in a temporary directory, removed on drop.
pub struct SyntheticTree {
    base: PathBuf,
    processes: usize,
}

impl SyntheticTree {
    /// Writes a tree of `processes` processes (pids `ROOT_PID ..`) into a new temporary directory.
    pub fn generate(processes: usize) -> io::Result<Self> {
        let base = std::env::temp_dir().join(format!(
            "relay-bench-tree-{}-{processes}-{}",
            std::process::id(),
            unique()
        ));
        fs::create_dir(&base)?;
        let tree = Self { base, processes };
        tree.write_system()?;
        tree.write_cgroups()?;
        for index in 0..processes {
            tree.write_process(index)?;
        }
        Ok(tree)
    }

    /// The directory holding `proc/` and `sys/` (give it to `Roots::fixture`).
    pub fn path(&self) -> &Path {
        &self.base
    }

    /// Number of processes in the tree.
    pub fn processes(&self) -> usize {
        self.processes
    }

    fn proc(&self) -> PathBuf {
        self.base.join("proc")
    }

    fn cgroup_root(&self) -> PathBuf {
        self.base.join("sys/fs/cgroup")
    }

    fn write_system(&self) -> io::Result<()> {
        let proc = self.proc();
        fs::create_dir_all(proc.join("pressure"))?;
        fs::create_dir_all(proc.join("net"))?;
        fs::create_dir_all(proc.join("self"))?;
        fs::write(proc.join("meminfo"), MEMINFO)?;
        fs::write(proc.join("stat"), PROC_STAT)?;
        fs::write(proc.join("pressure/cpu"), PRESSURE_CPU)?;
        fs::write(proc.join("pressure/memory"), PRESSURE_MEMORY)?;
        fs::write(proc.join("pressure/io"), PRESSURE_IO)?;
        fs::write(proc.join("net/dev"), NET_DEV)?;
        fs::write(proc.join("self/mountinfo"), MOUNTINFO)?;
        fs::write(proc.join("self/cgroup"), "0::/\n")
    }

    fn write_cgroups(&self) -> io::Result<()> {
        let root = self.cgroup_root();
        fs::create_dir_all(&root)?;
        let files: &[(&str, &str)] = &[
            (
                "cgroup.controllers",
                "cpuset cpu io memory hugetlb pids rdma misc\n",
            ),
            ("cgroup.subtree_control", "cpuset cpu io memory pids\n"),
            ("cgroup.procs", ""),
            (
                "cpu.stat",
                "usage_usec 583912345\nuser_usec 401234567\nsystem_usec 182677778\n",
            ),
            ("cpuset.cpus.effective", "0-1\n"),
            ("cpuset.mems.effective", "0\n"),
            ("cpu.pressure", PSI_IDLE),
            ("memory.pressure", PSI_IDLE),
            ("io.pressure", PSI_IDLE),
        ];
        for (name, content) in files {
            fs::write(root.join(name), content)?;
        }

        let leaf = root.join(CGROUP_PATH.trim_start_matches('/'));
        fs::create_dir(&leaf)?;
        let mut procs = String::with_capacity(self.processes * 6);
        for index in 0..self.processes {
            let _ = writeln!(procs, "{}", pid_of(index));
        }
        let pids_current = self.processes.to_string() + "\n";
        let files: &[(&str, &str)] = &[
            ("cgroup.controllers", "cpuset cpu memory pids\n"),
            ("cgroup.subtree_control", "\n"),
            ("cgroup.type", "domain\n"),
            ("cgroup.events", "populated 1\nfrozen 0\n"),
            ("cgroup.procs", &procs),
            (
                "cpu.stat",
                "usage_usec 900000\nuser_usec 800000\nsystem_usec 100000\nnr_periods 40\n\
                 nr_throttled 2\nthrottled_usec 5000\nnr_bursts 0\nburst_usec 0\n",
            ),
            ("cpu.max", "150000 100000\n"),
            ("cpu.max.burst", "0\n"),
            ("cpu.weight", "100\n"),
            ("cpuset.cpus", "\n"),
            ("cpuset.cpus.effective", "0-1\n"),
            ("memory.max", "1073741824\n"),
            ("memory.high", "max\n"),
            ("memory.current", "52428800\n"),
            (
                "memory.events",
                "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
            ),
            ("pids.current", &pids_current),
            ("pids.max", "max\n"),
            ("pids.events", "max 0\n"),
            (
                "cpu.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=12345\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=2345\n",
            ),
            (
                "memory.pressure",
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=678\n\
                 full avg10=0.00 avg60=0.00 avg300=0.00 total=78\n",
            ),
            ("io.pressure", PSI_IDLE),
        ];
        for (name, content) in files {
            fs::write(leaf.join(name), content)?;
        }
        Ok(())
    }

    fn write_process(&self, index: usize) -> io::Result<()> {
        let pid = pid_of(index);
        let parent = if index == 0 {
            ROOT_PID - 1
        } else {
            pid_of((index - 1) / FAN_OUT)
        };
        let dir = self.proc().join(pid.to_string());
        let task = dir.join("task").join(pid.to_string());
        fs::create_dir_all(&task)?;
        fs::write(dir.join("stat"), stat(pid, parent, index))?;
        fs::write(dir.join("status"), status(pid, parent))?;
        fs::write(dir.join("io"), io_file(index))?;
        fs::write(
            dir.join("schedstat"),
            format!(
                "{} {} {}\n",
                701_341 + index * 17,
                687_110 + index * 3,
                1 + index % 7
            ),
        )?;
        fs::write(dir.join("smaps_rollup"), SLEEP_SMAPS_ROLLUP)?;
        fs::write(dir.join("cgroup"), format!("0::{CGROUP_PATH}\n"))?;

        let fd = dir.join("fd");
        fs::create_dir(&fd)?;
        for n in 0..FDS_PER_PROCESS {
            let target = match n {
                0..=2 => "/dev/pts/0".to_string(),
                _ => format!("socket:[{}]", 40_000 + index),
            };
            symlink(target, fd.join(n.to_string()))?;
        }

        // The kernel prints each child followed by a space, with no newline.
        let mut children = String::new();
        let first = index * FAN_OUT + 1;
        for child in first..(first + FAN_OUT).min(self.processes) {
            let _ = write!(children, "{} ", pid_of(child));
        }
        fs::write(task.join("children"), children)
    }
}

impl Drop for SyntheticTree {
    fn drop(&mut self) {
        if let Err(error) = fs::remove_dir_all(&self.base) {
            eprintln!("removing {}: {error}", self.base.display());
        }
    }
}

fn pid_of(index: usize) -> u32 {
    ROOT_PID + u32::try_from(index).unwrap_or(u32::MAX - ROOT_PID)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The captured `stat` with pid, comm, ppid, CPU times and start time rewritten.
fn stat(pid: u32, parent: u32, index: usize) -> String {
    let rest = SLEEP_STAT
        .rsplit_once(") ")
        .map_or("", |(_, rest)| rest)
        .trim_end();
    let mut fields: Vec<String> = rest.split(' ').map(str::to_owned).collect();
    // `fields[0]` is stat field 3 (state): field N is `fields[N - 3]`.
    let mut set = |field: usize, value: String| {
        if let Some(slot) = fields.get_mut(field - 3) {
            *slot = value;
        }
    };
    set(4, parent.to_string());
    set(5, ROOT_PID.to_string());
    set(14, (index % 50).to_string());
    set(15, (index % 13).to_string());
    set(22, (37_904 + index).to_string());
    format!("{pid} (bench-{index}) {}\n", fields.join(" "))
}

/// The captured `status` with the identity lines rewritten.
fn status(pid: u32, parent: u32) -> String {
    let mut out = String::with_capacity(SLEEP_STATUS.len() + 16);
    for line in SLEEP_STATUS.lines() {
        let key = line.split_once(':').map_or(line, |(key, _)| key);
        let _ = match key {
            "Name" => writeln!(out, "Name:\tbench-{pid}"),
            "Tgid" | "Pid" | "NStgid" | "NSpid" => writeln!(out, "{key}:\t{pid}"),
            "PPid" => writeln!(out, "PPid:\t{parent}"),
            _ => writeln!(out, "{line}"),
        };
    }
    out
}

fn io_file(index: usize) -> String {
    format!(
        "rchar: {}\nwchar: {}\nsyscr: {}\nsyscw: {}\nread_bytes: {}\nwrite_bytes: {}\n\
         cancelled_write_bytes: 0\n",
        6976 + index,
        512 * index,
        10 + index,
        index,
        4096 * (index % 17),
        4096 * (index % 5),
    )
}
