//! Churn soak: `watch --interval-ms 1` in global, process-tree and cgroup scope and `serve` with
//! scrapes, while a bounded fork/exit storm, thread churn and cgroup create/remove cycles run.
//!
//! Asserts: every line is valid JSON with no reason in `extensions.unavailable` that the first
//! line did not have; creation counts are exact in the tree and cgroup scopes (forks made, the
//! churned threads not counted) and at least the forks made in global scope; descriptor and
//! memory growth of each collector within [`FD_GROWTH`] and [`RSS_GROWTH_KIB`]; every skipped
//! tick is reported (`missed_ticks_total`) and none fires late in a burst.
//!
//! The CI size takes about a minute. `RELAY_METRICS_SOAK_SCALE=N` multiplies the storm, the
//! thread churn and the cgroup cycles by N for a longer run by hand; the figures are printed
//! (`-- --nocapture`).

#![expect(
    clippy::unwrap_used,
    reason = "the soak fails loudly when its environment or the binary misbehaves"
)]

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Reaped;
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_relay-metrics");

/// Forks of each storm (tree and cgroup) at scale 1.
const FORKS: u64 = 400;
/// Threads started and joined one after another by each storm's thread churner at scale 1.
const THREADS: u64 = 400;
/// Child cgroups created and removed at scale 1.
const CGROUP_CYCLES: u64 = 100;
/// Descriptors a collector may gain between the end of its warm-up and the end of the soak,
/// beyond [`FDS_PER_PROCESS`] for each process more in its scope (other work on the machine
/// changes the global scope's size).
const FD_GROWTH: i64 = 16;
/// Descriptors held per process (`/proc/<pid>` and up to six of its files).
const FDS_PER_PROCESS: i64 = 7;
/// Resident memory (KiB) a collector may gain over the same span.
const RSS_GROWTH_KIB: i64 = 4096;

fn scale() -> u64 {
    std::env::var("RELAY_METRICS_SOAK_SCALE")
        .ok()
        .and_then(|scale| scale.parse().ok())
        .unwrap_or(1)
}

/// What the soak keeps of one NDJSON line.
#[derive(Debug, Clone)]
struct Line {
    tick_index: u64,
    missed_total: u64,
    interval_usec: u64,
    processes_created: Option<u64>,
    visible_processes: u64,
    kernel_reason: Option<String>,
    unavailable: BTreeSet<String>,
}

/// A `watch` process whose stdout is parsed line by line as it comes.
struct Watch {
    name: &'static str,
    process: Reaped,
    lines: Arc<Mutex<Vec<Line>>>,
    invalid: Arc<AtomicU64>,
    /// (descriptors, resident KiB, processes in scope) at the end of the warm-up.
    warm: Option<(i64, i64, i64)>,
    /// Before the process was spawned: no tick of its sampler is due earlier.
    spawned: Instant,
}

impl Watch {
    fn start(name: &'static str, args: &[&str]) -> Self {
        let spawned = Instant::now();
        let mut process = Reaped(
            Command::new(BIN)
                .arg("watch")
                .args(args)
                .args(["--interval-ms", "1"])
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap(),
        );
        let stdout = BufReader::new(process.0.stdout.take().unwrap());
        let lines = Arc::new(Mutex::new(Vec::new()));
        let invalid = Arc::new(AtomicU64::new(0));
        let (kept, bad) = (Arc::clone(&lines), Arc::clone(&invalid));
        std::thread::spawn(move || {
            for text in stdout.lines().map_while(Result::ok) {
                match serde_json::from_str::<Value>(&text) {
                    Ok(value) => kept.lock().unwrap().push(parse_line(&value)),
                    Err(_) => {
                        bad.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let watch = Self {
            name,
            process,
            lines,
            invalid,
            warm: None,
            spawned,
        };
        watch.wait_for_lines(1, Duration::from_secs(30));
        watch
    }

    fn count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    fn wait_for_lines(&self, count: usize, limit: Duration) {
        let deadline = Instant::now() + limit;
        while self.count() < count {
            assert!(
                Instant::now() < deadline,
                "{}: fewer than {count} lines",
                self.name
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn last(&self) -> Line {
        self.lines.lock().unwrap().last().cloned().unwrap()
    }

    fn mark_warm(&mut self) {
        let (fds, rss) = usage(self.process.0.id());
        self.warm = Some((fds, rss, self.last().visible_processes as i64));
    }

    /// Processes more in scope than at the end of the warm-up.
    fn more_processes(&self) -> i64 {
        let (_, _, warm) = self.warm.unwrap();
        (self.last().visible_processes as i64 - warm).max(0)
    }
}

fn parse_line(value: &Value) -> Line {
    let sampler = &value["extensions"]["sampler"];
    let events = &value["extensions"]["kernel_events"];
    Line {
        tick_index: sampler["tick_index"].as_u64().unwrap(),
        missed_total: sampler["missed_ticks_total"].as_u64().unwrap(),
        interval_usec: sampler["interval_usec"].as_u64().unwrap(),
        processes_created: events["processes_created"].as_u64(),
        visible_processes: value["process_sampling"]["visible_processes"]
            .as_u64()
            .unwrap_or(0),
        kernel_reason: events["reason"].as_str().map(str::to_string),
        unavailable: value["extensions"]["unavailable"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| format!("{}: {}", u["field"], u["reason"]))
            .collect(),
    }
}

/// (open descriptors, resident KiB) of `pid`.
fn usage(pid: u32) -> (i64, i64) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as i64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    (fds, rss)
}

/// A writable cgroup for the soak: on the unified hierarchy when it is mounted at
/// `/sys/fs/cgroup` (pure v2), else in the v1 `pids` hierarchy. Removed when dropped.
struct SoakCgroup {
    dir: PathBuf,
    relative: String,
}

impl SoakCgroup {
    fn create() -> Self {
        let base = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
            PathBuf::from("/sys/fs/cgroup")
        } else {
            PathBuf::from("/sys/fs/cgroup/pids")
        };
        let relative = format!("/relay-metrics-soak-{}", std::process::id());
        let dir = base.join(&relative[1..]);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        Self { dir, relative }
    }
}

impl Drop for SoakCgroup {
    fn drop(&mut self) {
        for _ in 0..200 {
            if std::fs::read_dir(&self.dir)
                .map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.path().is_dir())
                        .for_each(|e| {
                            let _ = std::fs::remove_dir(e.path());
                        })
                })
                .is_err()
                || std::fs::remove_dir(&self.dir).is_ok()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A shell that blocks until `go` is written, then forks `forks` times, runs one Python process
/// that starts and joins `threads` threads one by one, writes `done`, and waits for `end`.
fn storm(dir: &Path, name: &str, forks: u64, threads: u64) -> (Reaped, PathBuf, PathBuf, PathBuf) {
    let fifo = |suffix: &str| {
        let path = dir.join(format!("{name}-{suffix}"));
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        path
    };
    let (go, end) = (fifo("go"), fifo("end"));
    let done = dir.join(format!("{name}-done"));
    // `read` from a FIFO, `[`, arithmetic and `>` are shell built-ins: the only forks are the
    // /bin/true ones and the Python process. Debian's python3 itself (a version-manager shim
    // on $PATH may fork to find it).
    let script = format!(
        "read x < {go}; i=0; while [ $i -lt {forks} ]; do /bin/true; i=$((i+1)); done; \
         /usr/bin/python3 -c 'import threading\nfor _ in range({threads}):\n    t = threading.Thread(target=int); t.start(); t.join()'; \
         : > {done}; read y < {end}",
        go = go.display(),
        done = done.display(),
        end = end.display(),
    );
    let shell = Reaped(
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    (shell, go, done, end)
}

fn release(fifo: &Path) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(fifo)
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
}

fn wait_for_file(path: &Path, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Checks the tick accounting of one stream: indexes strictly increase, every skipped index is
/// counted in `missed_ticks_total`, and no more snapshots came than deadlines passed.
fn check_ticks(watch: &Watch) -> (u64, u64) {
    let lines = watch.lines.lock().unwrap();
    let elapsed = watch.spawned.elapsed();
    let (first, last) = (lines.first().unwrap(), lines.last().unwrap());
    let mut skipped = 0;
    for pair in lines.windows(2) {
        assert!(
            pair[1].tick_index > pair[0].tick_index,
            "{}: tick {} after {}",
            watch.name,
            pair[1].tick_index,
            pair[0].tick_index
        );
        skipped += pair[1].tick_index - pair[0].tick_index - 1;
        assert_eq!(pair[1].interval_usec, 1000);
    }
    assert_eq!(
        skipped,
        last.missed_total - first.missed_total,
        "{}: skipped ticks must all be reported",
        watch.name
    );
    let deadlines = elapsed.as_millis() as u64 + 1;
    assert!(
        (lines.len() as u64) <= deadlines,
        "{}: {} snapshots for {deadlines} deadlines: ticks fired in a burst",
        watch.name,
        lines.len()
    );
    (lines.len() as u64, skipped)
}

#[test]
#[ignore = "root: counts processes with eBPF and creates a cgroup"]
fn churn_soak_as_root() {
    common::assert_root("the soak loads eBPF programs and creates a cgroup");
    let scale = scale();
    let (forks, threads, cycles) = (FORKS * scale, THREADS * scale, CGROUP_CYCLES * scale);
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();

    let mut global = Watch::start("global", &["--scope", "global"]);
    let first_global = global
        .last()
        .processes_created
        .expect("global counts creations");

    let serve = common::start_agent(&["--scope", "global", "--interval-ms", "1"]);
    let address = serve.address.clone();

    let (tree_shell, tree_go, tree_done, tree_end) = storm(dir.path(), "tree", forks, threads);
    let mut tree = Watch::start("process_tree", &["--pid", &tree_shell.0.id().to_string()]);

    let cgroup = SoakCgroup::create();
    let (cgroup_shell, cgroup_go, cgroup_done, cgroup_end) =
        storm(dir.path(), "cgroup", forks, threads);
    std::fs::write(
        cgroup.dir.join("cgroup.procs"),
        cgroup_shell.0.id().to_string(),
    )
    .unwrap();
    let mut scoped = Watch::start("cgroup", &["--cgroup", &cgroup.relative]);

    // Warm-up: buffers and held files reach their size before growth is measured.
    std::thread::sleep(Duration::from_millis(500));
    for watch in [&mut global, &mut tree, &mut scoped] {
        watch.mark_warm();
    }
    let serve_warm = usage(serve.child.0.id());
    let tree_before = tree.last().processes_created.unwrap();
    let cgroup_before = scoped.last().processes_created.unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let scrapes = Arc::new(AtomicU64::new(0));
    let scraper = {
        let (stop, scrapes, address) = (Arc::clone(&stop), Arc::clone(&scrapes), address.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let metrics = common::get(&address, "/metrics");
                assert_eq!(metrics.status, 200);
                assert!(metrics.text().contains("relay_metrics_"));
                let snapshot = common::get(&address, "/snapshot");
                assert_eq!(snapshot.status, 200);
                let snapshot: Value =
                    serde_json::from_slice(&snapshot.body).expect("/snapshot is JSON");
                assert_eq!(snapshot["measurement_scope"], "global");
                scrapes.fetch_add(2, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let cycler = {
        let (stop, parent) = (Arc::clone(&stop), cgroup.dir.clone());
        std::thread::spawn(move || {
            let mut done = 0;
            while done < cycles && !stop.load(Ordering::Relaxed) {
                let child = parent.join(format!("cycle-{done}"));
                std::fs::create_dir(&child).unwrap();
                std::fs::remove_dir(&child).unwrap();
                done += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            done
        })
    };

    let storm_started = Instant::now();
    release(&tree_go);
    release(&cgroup_go);
    let limit = Duration::from_secs(60 * scale);
    wait_for_file(&tree_done, limit);
    wait_for_file(&cgroup_done, limit);
    let storm_took = storm_started.elapsed();
    let cycles_done = cycler.join().unwrap();
    // Lets every collector take a few snapshots after the last exit.
    let settle = [&global, &tree, &scoped].map(|w| w.count() + 50);
    for (watch, count) in [&global, &tree, &scoped].into_iter().zip(settle) {
        watch.wait_for_lines(count, Duration::from_secs(30));
    }
    stop.store(true, Ordering::Relaxed);
    scraper.join().expect("every scrape succeeded");
    let elapsed = started.elapsed();

    // Growth, measured before anything is stopped.
    let mut growth = Vec::new();
    for watch in [&global, &tree, &scoped] {
        let (fds, rss) = usage(watch.process.0.id());
        let (warm_fds, warm_rss, _) = watch.warm.unwrap();
        let fds = fds - warm_fds - FDS_PER_PROCESS * watch.more_processes();
        growth.push((watch.name, fds, rss - warm_rss, rss));
    }
    // The agent measures the same global scope as the global watch.
    let (fds, rss) = usage(serve.child.0.id());
    let fds = fds - serve_warm.0 - FDS_PER_PROCESS * global.more_processes();
    growth.push(("serve", fds, rss - serve_warm.1, rss));
    release(&tree_end);
    release(&cgroup_end);
    drop((tree_shell, cgroup_shell));

    let tree_created = tree.last().processes_created.unwrap() - tree_before;
    let cgroup_created = scoped.last().processes_created.unwrap() - cgroup_before;
    let global_created = global.last().processes_created.unwrap() - first_global;
    let mut streams = Vec::new();
    for watch in [&global, &tree, &scoped] {
        let (lines, skipped) = check_ticks(watch);
        streams.push((watch.name, lines, skipped));
    }
    let forks_made = forks + 1;
    eprintln!(
        "soak (scale {scale}): {elapsed:?} in all, storms {storm_took:?}: {forks_made} processes \
         and {threads} threads per storm ({:.0} forks/s per storm), {cycles_done} cgroup \
         create/remove cycles, {} HTTP scrapes; created counted: tree {tree_created}, cgroup \
         {cgroup_created}, global {global_created}; streams (name, lines, skipped ticks): \
         {streams:?}; growth (name, fds beyond 7 per process more in scope, RSS KiB, final RSS \
         KiB): {growth:?}",
        forks_made as f64 / storm_took.as_secs_f64(),
        scrapes.load(Ordering::Relaxed),
    );

    for watch in [&global, &tree, &scoped] {
        assert_eq!(
            watch.invalid.load(Ordering::Relaxed),
            0,
            "{}: invalid JSON",
            watch.name
        );
        let lines = watch.lines.lock().unwrap();
        let baseline = &lines.first().unwrap().unavailable;
        for line in lines.iter() {
            assert_eq!(line.kernel_reason, None, "{}", watch.name);
            let new: Vec<&String> = line.unavailable.difference(baseline).collect();
            assert!(new.is_empty(), "{}: new reasons {new:?}", watch.name);
        }
    }
    assert_eq!(
        tree_created, forks_made,
        "tree: forks counted = forks made, threads not"
    );
    assert_eq!(
        cgroup_created, forks_made,
        "cgroup: forks counted = forks made, threads not"
    );
    assert!(
        global_created >= 2 * forks_made,
        "global counted {global_created} creations, the storms alone made {}",
        2 * forks_made
    );
    assert_eq!(cycles_done, cycles);
    for (name, fds, rss, _) in &growth {
        assert!(*fds <= FD_GROWTH, "{name}: {fds} more descriptors");
        assert!(
            *rss <= RSS_GROWTH_KIB,
            "{name}: {rss} KiB more resident memory"
        );
    }
}
