//! Tests that need a pure cgroup v2 kernel with the cpu, memory and pids controllers: marked
//! `#[ignore = "vm: …"]` and named `…_in_vm`, skipped by the host's test command
//! (`--skip _in_vm`) and run as root inside the VM by `cargo xtask vm-test`.
//!
//! Each test creates its own cgroup directly under the v2 root, drives a real limit (OOM kill,
//! CPU quota, pids limit) with a child process, takes a `cgroup`-scope snapshot through the public
//! API and checks it against the cgroup's own event files read right after.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{CategoryConfig, DiskConfig, GpuConfig, NetworkConfig, ScopeSetting};
use crate::snapshot::{ResourceLimitEventKind, ResourceLimitResource};
use crate::source::Roots;
use crate::units::{Measurement, MeasurementValue};
use crate::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};
use watchdog::Watchdog;

mod cgroup_iter;
mod live_v2;
mod lockdown;
mod many_cpus;
mod nesting;
mod nesting_limits;
mod task_iter;
mod watchdog;

const VM_ONLY: &str = "needs a pure cgroup v2 kernel: cargo xtask vm-test runs it";
const CHILD_MODE: &str = "RELAY_METRICS_VM_TEST_CHILD";
/// Forks the `fork` child attempts under its pids limit.
const FORK_ATTEMPTS: u32 = 8;
/// Each test takes a few seconds under TCG; past this its watchdog reports what hangs.
const TEST_LIMIT: Duration = Duration::from_secs(180);

/// The body of the children the tests spawn, when this test binary runs as one
/// (`crate::test_children`); returns at once without the variable.
pub(crate) fn run_child_if_requested() {
    match std::env::var(CHILD_MODE).as_deref() {
        Ok("oom") => {
            wait_for_go();
            // Touch every page of 256 MiB: far above the 32 MiB limit of the test cgroup.
            let mut memory = vec![0u8; 256 << 20];
            for page in memory.chunks_mut(4096) {
                page[0] = 1;
            }
            std::hint::black_box(&memory);
            std::process::exit(0);
        }
        Ok("hold") => {
            wait_for_go();
            hold_memory_after_writing();
        }
        Ok("idle") => {
            wait_for_go();
            std::process::exit(0);
        }
        Ok("spin") => loop {
            std::hint::spin_loop();
        },
        Ok("fork") => {
            wait_for_go();
            let (children, failures) = fork_sleepers(FORK_ATTEMPTS);
            println!("fork-failures {failures}");
            for pid in children {
                // SAFETY: kill and waitpid on our own children, no memory is shared.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
            }
            std::process::exit(0);
        }
        Ok(other) => {
            eprintln!("{CHILD_MODE}: unknown mode {other:?}");
            std::process::exit(2);
        }
        Err(_) => {}
    }
}

/// Allocates [`HELD_BYTES`] (every page touched), writes [`WRITTEN_BYTES`] to a file (synced),
/// prints `held <write_bytes> <wchar>` from its own `/proc/self/io`, and exits on the next line
/// of its stdin, holding the memory until then.
fn hold_memory_after_writing() -> ! {
    let mut memory = vec![0u8; HELD_BYTES];
    for page in memory.chunks_mut(4096) {
        page[0] = 1;
    }
    let path = std::env::temp_dir().join(format!("relay-metrics-vm-hold-{}", std::process::id()));
    let mut file = std::fs::File::create(&path).expect("creating the written file");
    for _ in 0..WRITTEN_BYTES >> 20 {
        file.write_all(&[7u8; 1 << 20]).expect("writing");
    }
    file.sync_all().expect("syncing");
    drop(file);
    let _ = std::fs::remove_file(&path);
    let io = std::fs::read_to_string("/proc/self/io").expect("reading /proc/self/io");
    let field = |name: &str| {
        io.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().to_owned())
            .expect("a /proc/self/io field")
    };
    println!("held {} {}", field("write_bytes:"), field("wchar:"));
    std::hint::black_box(&memory);
    wait_for_go();
    std::process::exit(0);
}

/// What the `hold` child allocates and writes.
const HELD_BYTES: usize = 64 << 20;
const WRITTEN_BYTES: usize = 8 << 20;

fn wait_for_go() {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("reading go");
}

/// Forks `attempts` children that sleep until killed; returns their pids and the failed forks.
fn fork_sleepers(attempts: u32) -> (Vec<libc::pid_t>, u32) {
    let mut children = Vec::new();
    let mut failures = 0;
    for _ in 0..attempts {
        // SAFETY: the child only calls async-signal-safe functions (pause, _exit), as required
        // after forking a multi-threaded process.
        match unsafe { libc::fork() } {
            0 => loop {
                // SAFETY: async-signal-safe; the parent kills this process.
                unsafe { libc::pause() };
            },
            pid if pid > 0 => children.push(pid),
            _ => {
                let error = std::io::Error::last_os_error();
                assert_eq!(error.raw_os_error(), Some(libc::EAGAIN), "fork: {error}");
                failures += 1;
            }
        }
    }
    (children, failures)
}

/// Re-runs this test binary as a child doing `mode` (see [`run_child_if_requested`]), moved into
/// `cgroup` before it execs, so everything it allocates or forks is charged there.
fn spawn_child(mode: &str, cgroup: &TestCgroup) -> Child {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command
        .env(CHILD_MODE, mode)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    crate::source::ebpf::tests::spawn_in_cgroup(command, &cgroup.path.join("cgroup.procs"))
}

fn go(child: &mut Child) {
    let mut stdin = child.stdin.take().expect("child stdin");
    writeln!(stdin, "go").expect("starting the child");
}

/// An own cgroup directly under the v2 root, removed on drop after killing what is left in it.
struct TestCgroup {
    /// Path relative to the cgroup mount, as the collector's `cgroup_path` takes it.
    relative: String,
    path: PathBuf,
}

impl TestCgroup {
    /// Creates the cgroup with `controller` enabled, failing loudly on a host that is not pure
    /// cgroup v2 or not root.
    fn create(test: &str, controller: &str) -> Self {
        assert!(
            // SAFETY: geteuid has no preconditions.
            unsafe { libc::geteuid() } == 0,
            "this VM test needs root (cgroup writes, eBPF)"
        );
        let root = Roots::host().map(Path::new("/sys/fs/cgroup"));
        let controllers =
            std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_else(|error| {
                panic!(
                    "{} is not a cgroup v2 root ({error}): {VM_ONLY}",
                    root.display()
                )
            });
        assert!(
            controllers.split_whitespace().any(|c| c == controller),
            "the v2 root has no {controller} controller ({controllers:?}): {VM_ONLY}"
        );
        let relative = format!("/relay-metrics-vm-{test}-{}", std::process::id());
        let cgroup = Self {
            path: root.join(relative.trim_start_matches('/')),
            relative,
        };
        std::fs::create_dir(&cgroup.path)
            .unwrap_or_else(|error| panic!("creating {}: {error}", cgroup.path.display()));
        let enabled = cgroup.read("cgroup.controllers");
        assert!(
            enabled.split_whitespace().any(|c| c == controller),
            "{controller} is not enabled for {} ({enabled:?}); the VM init enables it in the \
             root's cgroup.subtree_control",
            cgroup.path.display()
        );
        cgroup
    }

    /// A [`Watchdog`] for the test `test`, reporting this cgroup's files if it fires.
    fn watchdog(&self, test: &'static str) -> Watchdog {
        Watchdog::arm(test, TEST_LIMIT, self.path.clone())
    }

    fn write(&self, file: &str, value: &str) {
        std::fs::write(self.path.join(file), value)
            .unwrap_or_else(|error| panic!("writing {value:?} to {file}: {error}"));
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.path.join(file))
            .unwrap_or_else(|error| panic!("reading {}/{file}: {error}", self.path.display()))
    }

    /// The value of `key` in a flat-keyed file (`memory.events`, `cpu.stat`, `pids.events`).
    fn keyed(&self, file: &str, key: &str) -> u64 {
        let text = self.read(file);
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {key} in {file}: {text:?}"))
    }

    /// A `cgroup`-scope collector of this cgroup, with kernel events on and GPU, network and
    /// disk off.
    fn collector(&self) -> Collector {
        let config = ResourceMetricsConfig {
            cgroup_path: Some(self.relative.clone()),
            memory: CategoryConfig { enabled: true },
            ..quiet_config(ScopeSetting::Cgroup)
        };
        Collector::new(config).expect("a cgroup-scope collector of the test cgroup")
    }
}

/// A configuration of `scope` with kernel events on and the GPU, network and disk categories
/// off: what the VM tests measure, without the values the VM does not have.
pub(super) fn quiet_config(scope: ScopeSetting) -> ResourceMetricsConfig {
    ResourceMetricsConfig {
        measurement_scope: scope,
        gpu: GpuConfig {
            enabled: false,
            ..GpuConfig::default()
        },
        network: NetworkConfig {
            enabled: false,
            ..NetworkConfig::default()
        },
        disk: DiskConfig {
            enabled: false,
            ..DiskConfig::default()
        },
        ..ResourceMetricsConfig::default()
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        for _ in 0..250 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.path.display());
    }
}

fn integer(measurement: Option<&Measurement>, what: &str) -> u64 {
    match measurement.map(|m| m.value) {
        Some(MeasurementValue::Integer(value)) => value,
        other => panic!("{what}: expected an integer, got {other:?}"),
    }
}

/// The count of the one `resource`/`event` limit event of the snapshot (fails if it is missing
/// or listed twice).
fn limit_event(
    snapshot: &ResourceMetricsSnapshot,
    resource: ResourceLimitResource,
    event: ResourceLimitEventKind,
) -> u64 {
    let lists = [
        snapshot.cpu.as_ref().map(|c| &c.limit_events),
        snapshot.memory.as_ref().map(|m| &m.limit_events),
        snapshot.process.as_ref().map(|p| &p.limit_events),
    ];
    let matching: Vec<_> = lists
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.resource == resource && e.event == event)
        .collect();
    assert_eq!(
        matching.len(),
        1,
        "{resource:?}/{event:?} limit events: {matching:?}\n{}",
        json(snapshot)
    );
    integer(matching[0].count.as_ref(), "limit event count")
}

fn json(snapshot: &ResourceMetricsSnapshot) -> String {
    serde_json::to_string_pretty(snapshot).unwrap_or_else(|error| error.to_string())
}

fn assert_cgroup_scope(snapshot: &Arc<ResourceMetricsSnapshot>, cgroup: &TestCgroup) {
    assert_eq!(
        snapshot.measurement_scope,
        crate::snapshot::MeasurementScope::Cgroup
    );
    assert_eq!(
        snapshot.extensions.target.cgroup_path.as_deref(),
        Some(cgroup.relative.as_str())
    );
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn an_oom_kill_in_a_v2_memory_cgroup_is_one_terminated_event_with_its_victim_in_vm() {
    let cgroup = TestCgroup::create("oom", "memory");
    let _watchdog = cgroup.watchdog("oom");
    cgroup.write("memory.max", &(32u64 << 20).to_string());
    if cgroup.path.join("memory.swap.max").exists() {
        cgroup.write("memory.swap.max", "0");
    }
    let mut child = spawn_child("oom", &cgroup);
    let pid = child.id();
    let mut collector = cgroup.collector();
    // The first snapshot puts the waiting child under kernel tracking.
    let first = collector.collect();
    assert_cgroup_scope(&first, &cgroup);
    assert!(
        first.extensions.kernel_events.active,
        "kernel events are off: {:?}",
        first.extensions.kernel_events.reason
    );
    assert_eq!(
        first
            .memory
            .as_ref()
            .and_then(|m| m.limit.as_ref())
            .map(|limit| limit.value),
        Some(MeasurementValue::Integer(32 << 10)),
        "memory.limit (KiB)\n{}",
        json(&first)
    );
    drop(first);
    go(&mut child);
    let status = child.wait().expect("waiting for the child");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "the child was not OOM-killed: {status:?}"
    );

    let snapshot = collector.collect();
    let oom_kill = cgroup.keyed("memory.events", "oom_kill");
    let oom = cgroup.keyed("memory.events", "oom");
    let max = cgroup.keyed("memory.events", "max");
    let text = json(&snapshot);
    assert_cgroup_scope(&snapshot, &cgroup);
    assert_eq!(oom_kill, 1, "{}", cgroup.read("memory.events"));
    let terminated = limit_event(
        &snapshot,
        ResourceLimitResource::Memory,
        ResourceLimitEventKind::Terminated,
    );
    assert_eq!(terminated, 1, "{text}");
    let victims = &snapshot.extensions.kernel_events.recent_oom_victims;
    assert_eq!(victims.len(), 1, "{text}");
    assert_eq!(victims[0].pid, pid, "{text}");
    assert!(victims[0].rss_kib > 0, "{text}");
    assert_eq!(
        snapshot.extensions.kernel_events.oom_kills,
        Some(1),
        "{text}"
    );
    let out_of_memory = limit_event(
        &snapshot,
        ResourceLimitResource::Memory,
        ResourceLimitEventKind::OutOfMemory,
    );
    assert!(oom >= 1, "{}", cgroup.read("memory.events"));
    assert_eq!(out_of_memory, oom, "{text}");
    let memory = snapshot.memory.as_ref().expect("memory category");
    assert_eq!(
        integer(
            memory.out_of_memory_event_count.as_ref(),
            "out_of_memory_event_count"
        ),
        oom,
        "{text}"
    );
    let maximum = limit_event(
        &snapshot,
        ResourceLimitResource::Memory,
        ResourceLimitEventKind::Maximum,
    );
    assert!(max >= 1, "{}", cgroup.read("memory.events"));
    assert_eq!(maximum, max, "{text}");
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn a_cpu_max_quota_on_a_busy_loop_is_reported_as_throttling_in_vm() {
    let cgroup = TestCgroup::create("cpu", "cpu");
    let _watchdog = cgroup.watchdog("cpu");
    cgroup.write("cpu.max", "20000 100000");
    let mut child = spawn_child("spin", &cgroup);
    let mut collector = cgroup.collector();
    // Wait until the quota has bitten a few times (under emulation the child starts slowly).
    let deadline = Instant::now() + Duration::from_secs(60);
    while cgroup.keyed("cpu.stat", "nr_throttled") < 5 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().expect("killing the busy loop");
    child.wait().expect("waiting for the busy loop");
    // The dying task's last switch-out, after it woke us, can still throttle the group once
    // (seen: a snapshot with 18, cpu.stat with 19 right after). Once cpu.stat stands still for
    // more than two 100 ms periods nothing runs in the cgroup any more.
    let mut stat = cgroup.read("cpu.stat");
    loop {
        std::thread::sleep(Duration::from_millis(250));
        let again = cgroup.read("cpu.stat");
        if again == stat {
            break;
        }
        stat = again;
    }

    let snapshot = collector.collect();
    let nr_throttled = cgroup.keyed("cpu.stat", "nr_throttled");
    let throttled_usec = cgroup.keyed("cpu.stat", "throttled_usec");
    let text = json(&snapshot);
    assert_cgroup_scope(&snapshot, &cgroup);
    assert!(nr_throttled >= 5, "{}", cgroup.read("cpu.stat"));
    let throttled = limit_event(
        &snapshot,
        ResourceLimitResource::Cpu,
        ResourceLimitEventKind::Throttled,
    );
    assert!(throttled > 0, "{text}");
    assert_eq!(throttled, nr_throttled, "{text}");
    let cpu = snapshot.cpu.as_ref().expect("cpu category");
    let throttled_ms = integer(cpu.throttled_time.as_ref(), "cpu.throttled_time");
    assert!(throttled_ms > 0, "{text}");
    // Relay's unit: whole milliseconds, truncated.
    assert_eq!(throttled_ms, throttled_usec / 1000, "{text}");
    let limit = cpu
        .effective_limit
        .as_ref()
        .unwrap_or_else(|| panic!("no cpu.effective_limit\n{text}"));
    assert!(
        (limit.value.as_f64() - 0.2).abs() < 1e-9,
        "effective limit {limit:?}\n{text}"
    );
    let report = snapshot
        .extensions
        .cgroups
        .first()
        .unwrap_or_else(|| panic!("no cgroup report\n{text}"));
    assert_eq!(report.cpu_throttled_periods, Some(nr_throttled), "{text}");
    assert_eq!(report.cpu_throttled_usec, Some(throttled_usec), "{text}");
}

#[test]
#[ignore = "vm: needs a pure cgroup v2 kernel: cargo xtask vm-test runs it"]
fn forks_beyond_pids_max_are_reported_as_process_maximum_events_in_vm() {
    let cgroup = TestCgroup::create("pids", "pids");
    let _watchdog = cgroup.watchdog("pids");
    cgroup.write("pids.max", "3");
    let mut child = spawn_child("fork", &cgroup);
    let mut collector = cgroup.collector();
    go(&mut child);
    let stdout = child.stdout.take().expect("child stdout");
    let output: Vec<String> = BufReader::new(stdout)
        .lines()
        .map(|line| line.expect("child output"))
        .collect();
    let status = child.wait().expect("waiting for the forking child");
    assert!(status.success(), "{status:?}: {output:?}");
    let failures: u64 = output
        .iter()
        .find_map(|line| line.split_once("fork-failures ").map(|(_, n)| n))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the child reported no fork failures: {output:?}"));

    let snapshot = collector.collect();
    let events_max = cgroup.keyed("pids.events", "max");
    let text = json(&snapshot);
    assert_cgroup_scope(&snapshot, &cgroup);
    assert!(failures > 0, "pids.max did not stop a fork: {output:?}");
    assert_eq!(events_max, failures, "{}", cgroup.read("pids.events"));
    let maximum = limit_event(
        &snapshot,
        ResourceLimitResource::Processes,
        ResourceLimitEventKind::Maximum,
    );
    assert!(maximum > 0, "{text}");
    assert_eq!(maximum, events_max, "{text}");
}
