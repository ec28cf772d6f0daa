//! Full `collect()` cost in steady state (one warm-up collect first): every category but GPU, two
//! filesystem paths (`/` and `/tmp`).
//!
//! - `collect_synthetic/<scope>/<N>`: synthetic fixture trees of 10, 1,000 and 10,000 processes
//!   (`support::SyntheticTree`), in `global`, `process_tree` (root of the tree) and `cgroup` (the
//!   pure-v2 cgroup holding every process) scope.
//! - `collect_live/<scope>`: this machine. `process_tree` of a `sh` with two sleeping children;
//!   `global`; `cgroup` scope of a v1 cgroup the bench creates in the cpu, cpuacct, memory and
//!   pids hierarchies, moves another such family into, and removes at the end. NEEDS ROOT: it
//!   fails loudly (panics) when it cannot create its cgroups.
//!
//! Run with `cargo bench -p relay-metrics-suite --bench collect`.

mod support;

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use relay_metrics::config::ScopeSetting;
use relay_metrics::internals::Roots;
use relay_metrics::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};

use support::{bench_config as config, or_die, SyntheticTree, CGROUP_PATH, ROOT_PID};

/// The tree sizes of the synthetic benches.
const SIZES: [usize; 3] = [10, 1_000, 10_000];

/// The v1 hierarchies the live cgroup bench creates its cgroup in.
const V1_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];

/// A collector after its warm-up collect, checked to sample what it should.
fn warmed_up(
    config: ResourceMetricsConfig,
    roots: Roots,
    expect_processes: Option<u64>,
) -> Collector {
    let scope = config.measurement_scope;
    let mut collector = or_die(
        relay_metrics::internals::collector_with_roots(config, roots),
        "creating the collector",
    );
    let snapshot = collector.collect();
    check(&snapshot, scope, expect_processes);
    collector
}

/// Fails the bench when the warm-up snapshot shows that the collect is not the one measured:
/// processes not sampled, or a source that failed.
fn check(snapshot: &ResourceMetricsSnapshot, scope: ScopeSetting, expect_processes: Option<u64>) {
    let sampling = snapshot.process_sampling.as_ref();
    let sampled = sampling.map(|s| s.sampled_processes);
    if let Some(expected) = expect_processes {
        assert_eq!(
            sampled,
            Some(expected),
            "{scope:?}: sampled processes; unavailable: {:?}",
            snapshot.extensions.unavailable
        );
    }
    // A process scope on a shared cgroup legitimately reports that its cgroup is not exclusive.
    let failures: Vec<_> = snapshot
        .extensions
        .unavailable
        .iter()
        .filter(|u| !(u.field == "cgroup" && u.reason.contains("exclusively")))
        .collect();
    assert!(failures.is_empty(), "{scope:?}: unavailable {failures:?}");
}

/// Descriptors a held process may use: `/proc/<pid>`, `stat`, `status`, `io`, `schedstat`,
/// `smaps_rollup`, `fd/`.
const FDS_PER_HELD_PROCESS: u64 = 7;

/// Descriptors left for everything else (criterion, the system and cgroup readers).
const FD_RESERVE: u64 = 1024;

/// Raises the soft `RLIMIT_NOFILE` to the hard one and returns how many processes a collector may
/// hold open within it. The default `max_held_processes` (4,096 processes, up to 7 descriptors
/// each) does not fit this machine's hard limit of 20,000 (no `CAP_SYS_RESOURCE` to raise it), and
/// running out of descriptors mid-collect makes processes unreadable; the 10,000-process tree
/// would hit that.
fn held_process_cap() -> usize {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = or_die(getrlimit(Resource::RLIMIT_NOFILE), "getrlimit(NOFILE)");
    if soft < hard {
        or_die(
            setrlimit(Resource::RLIMIT_NOFILE, hard, hard),
            "raising the soft RLIMIT_NOFILE to the hard one",
        );
    }
    let fit = hard.saturating_sub(FD_RESERVE) / FDS_PER_HELD_PROCESS;
    let cap = usize::try_from(fit).unwrap_or(usize::MAX).min(4096);
    eprintln!("RLIMIT_NOFILE {hard}: max_held_processes {cap}");
    cap
}

fn synthetic(c: &mut Criterion) {
    let held_cap = held_process_cap();
    let mut group = c.benchmark_group("collect_synthetic");
    for size in SIZES {
        let started = Instant::now();
        let tree = or_die(SyntheticTree::generate(size), "generating the tree");
        eprintln!(
            "generated {} processes in {:?} at {}",
            tree.processes(),
            started.elapsed(),
            tree.path().display()
        );
        if size >= 1_000 {
            group.sampling_mode(SamplingMode::Flat);
            group.sample_size(10);
            group.warm_up_time(Duration::from_secs(1));
            group.measurement_time(Duration::from_secs(if size >= 10_000 { 8 } else { 3 }));
        } else {
            group.sampling_mode(SamplingMode::Auto);
            group.sample_size(30);
            group.warm_up_time(Duration::from_secs(1));
            group.measurement_time(Duration::from_secs(2));
        }
        let n = size as u64;
        let scopes = [
            ("global", ScopeSetting::Global, None::<String>),
            ("process_tree", ScopeSetting::ProcessTree, None),
            (
                "cgroup",
                ScopeSetting::Cgroup,
                Some(CGROUP_PATH.to_string()),
            ),
        ];
        for (name, scope, cgroup_path) in scopes {
            let mut config = config(scope);
            config.cgroup_path = cgroup_path;
            config.extensions.max_held_processes = held_cap;
            if scope == ScopeSetting::ProcessTree {
                config.root_pid = Some(ROOT_PID);
            }
            // One collector at a time: each holds its own descriptors.
            let mut collector = warmed_up(config, Roots::fixture(tree.path()), Some(n));
            group.bench_with_input(BenchmarkId::new(name, size), &size, |b, _| {
                b.iter(|| collector.collect())
            });
        }
    }
    group.finish();
}

/// A `sh` with two sleeping children, in its own process group; killed (whole group) on drop.
struct Family {
    child: Child,
}

impl Family {
    fn spawn() -> Self {
        use std::os::unix::process::CommandExt;
        let child = or_die(
            Command::new("sh")
                .args(["-c", "sleep 3600 & sleep 3600 & wait"])
                .process_group(0)
                .spawn(),
            "spawning sh with two sleeping children",
        );
        let family = Self { child };
        let deadline = Instant::now() + Duration::from_secs(5);
        while family.children().len() < 2 {
            assert!(Instant::now() < deadline, "the two sleeps did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        family
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn children(&self) -> Vec<u32> {
        let path = format!("/proc/{0}/task/{0}/children", self.pid());
        fs::read_to_string(path)
            .unwrap_or_default()
            .split_ascii_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect()
    }

    fn all_pids(&self) -> Vec<u32> {
        let mut pids = vec![self.pid()];
        pids.extend(self.children());
        pids
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        if let Ok(pgid) = i32::try_from(self.pid()) {
            if let Err(error) = killpg(Pid::from_raw(pgid), Signal::SIGKILL) {
                eprintln!("killing process group {pgid}: {error}");
            }
        }
        if let Err(error) = self.child.wait() {
            eprintln!("waiting for {}: {error}", self.pid());
        }
    }
}

/// Our own v1 cgroup in each of [`V1_CONTROLLERS`]; removed on drop (after its processes die).
struct OwnCgroup {
    name: String,
    dirs: Vec<PathBuf>,
    family: Option<Family>,
}

impl OwnCgroup {
    fn create() -> Self {
        let name = format!("relay-metrics-bench-{}", std::process::id());
        let mut cgroup = Self {
            name,
            dirs: Vec::new(),
            family: None,
        };
        for controller in V1_CONTROLLERS {
            let dir = PathBuf::from("/sys/fs/cgroup")
                .join(controller)
                .join(&cgroup.name);
            or_die(
                fs::create_dir(&dir),
                &format!(
                    "creating {} (the live cgroup bench needs root and v1 hierarchies)",
                    dir.display()
                ),
            );
            cgroup.dirs.push(dir);
        }
        let family = Family::spawn();
        for dir in &cgroup.dirs {
            for pid in family.all_pids() {
                or_die(
                    fs::write(dir.join("cgroup.procs"), pid.to_string()),
                    &format!("moving {pid} into {}", dir.display()),
                );
            }
        }
        cgroup.family = Some(family);
        cgroup
    }

    fn path(&self) -> String {
        format!("/{}", self.name)
    }
}

impl Drop for OwnCgroup {
    fn drop(&mut self) {
        drop(self.family.take());
        for dir in self.dirs.drain(..) {
            // A killed task leaves its cgroup shortly after it is reaped; retry briefly.
            let mut result = fs::remove_dir(&dir);
            for _ in 0..50 {
                if result.is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
                result = fs::remove_dir(&dir);
            }
            if let Err(error) = result {
                eprintln!("removing {}: {error}", dir.display());
            }
        }
    }
}

fn live(c: &mut Criterion) {
    let mut group = c.benchmark_group("collect_live");
    group.sample_size(50);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));

    let family = Family::spawn();
    let mut config_tree = config(ScopeSetting::ProcessTree);
    config_tree.root_pid = Some(family.pid());
    let mut collector = warmed_up(config_tree, Roots::host(), Some(3));
    group.bench_function("process_tree", |b| b.iter(|| collector.collect()));
    drop(collector);
    drop(family);

    let mut collector = warmed_up(config(ScopeSetting::Global), Roots::host(), None);
    group.bench_function("global", |b| b.iter(|| collector.collect()));
    drop(collector);

    let cgroup = OwnCgroup::create();
    let mut config_cgroup = config(ScopeSetting::Cgroup);
    config_cgroup.cgroup_path = Some(cgroup.path());
    let mut collector = warmed_up(config_cgroup, Roots::host(), Some(3));
    group.bench_function("cgroup_v1", |b| b.iter(|| collector.collect()));
    drop(collector);
    drop(cgroup);

    group.finish();
}

criterion_group!(benches, synthetic, live);
criterion_main!(benches);
