//! Host tests, as root (they fail loudly otherwise): load and attach every program, real forks, a
//! real OOM kill in an own v1 memory cgroup, run-queue delay under CPU competition, and the
//! programs' run statistics. They run one at a time (they measure the machine).

use super::*;
use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(super) static SERIAL: Mutex<()> = Mutex::new(());
const CHILD_MODE: &str = "RELAY_METRICS_EBPF_TEST_CHILD";

fn load_as_root() -> EbpfSource {
    assert!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() } == 0,
        "this eBPF test needs root (CAP_BPF, tracefs, cgroup writes); run it as root as CI does"
    );
    EbpfSource::load(&EbpfOptions::default()).expect("loading the eBPF programs")
}

/// Re-runs this test binary as a child doing `mode` (see [`run_child_if_requested`]).
fn child_command(mode: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    command.env(CHILD_MODE, mode).stdout(Stdio::null());
    command
}

/// The body of the children the tests spawn (this module's and the loader's), when this test
/// binary runs as one (`crate::test_children`); returns at once without their variables.
pub(crate) fn run_child_if_requested() {
    super::loader::tests::run_child_if_requested();
    match std::env::var(CHILD_MODE).as_deref() {
        Ok("oom") => {
            // Touch every page of 256 MiB: far above the 32 MiB limit of the test cgroup.
            let memory = vec![1u8; 256 << 20];
            std::hint::black_box(&memory);
            std::process::exit(0);
        }
        Ok("spin-sleep") => {
            for _ in 0..300 {
                let start = Instant::now();
                while start.elapsed() < Duration::from_micros(300) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_millis(1));
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

#[test]
fn an_unprivileged_process_is_told_why() {
    let dir = super::loader::tests::fixture("0000000000000000");
    let options = EbpfOptions {
        roots: Roots::fixture(dir.path()),
        ..EbpfOptions::default()
    };
    let error = EbpfSource::load(&options).expect_err("must not load");
    assert!(
        matches!(error, EbpfUnavailable::NotPrivileged { cap_eff: 0, .. }),
        "{error}"
    );
    assert!(error.to_string().contains("not privileged"), "{error}");
}

#[test]
fn a_missing_tracefs_is_reported_with_its_path() {
    let dir = super::loader::tests::fixture("000001ffffffffff");
    let options = EbpfOptions {
        roots: Roots::fixture(dir.path()),
        ..EbpfOptions::default()
    };
    // The fixture has no sys/kernel/tracing directory, so mounting there fails too.
    let error = EbpfSource::load(&options).expect_err("must not load");
    assert!(
        matches!(error, EbpfUnavailable::NoTracefs { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("sys/kernel/tracing"), "{error}");
}

#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn loads_and_attaches_every_program_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let source = load_as_root();
    for status in source.status() {
        assert_eq!(
            status.state,
            ProgramState::Attached,
            "{}",
            status.spec.program
        );
    }
    assert_eq!(source.status().len(), PROGRAMS.len());
    let config = source.config();
    assert_ne!(config.switch_next_pid, relay_metrics_common::NO_FIELD);
    assert_ne!(config.victim_pid, relay_metrics_common::NO_FIELD);
    // The scheduler is always busy: within a moment this process's threads have been counted.
    std::thread::sleep(Duration::from_millis(50));
    assert!(source.global().is_ok());
    // Dropping the source detaches and unloads every program.
    assert_drop_unloads_every_program(source);
}

/// Drops `source` and checks that each of its programs, loaded before, is gone from the kernel.
pub(super) fn assert_drop_unloads_every_program(source: EbpfSource) {
    let ids: Vec<u32> = source.program_run_stats().iter().map(|p| p.id).collect();
    assert_eq!(ids.len(), PROGRAMS.len());
    let loaded = || -> Vec<u32> {
        aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .map(|info| info.id())
            .collect()
    };
    assert!(ids.iter().all(|id| loaded().contains(id)), "{ids:?}");
    drop(source);
    // Freeing may lag the last close by an RCU grace period.
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut after = loaded();
    while ids.iter().any(|id| after.contains(id)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        after = loaded();
    }
    assert!(
        ids.iter().all(|id| !after.contains(id)),
        "{ids:?} in {after:?}"
    );
}

/// `sh -c SCRIPT`, held at a `read` of its stdin until [`release_and_wait`], so that a test can
/// track it before it creates anything.
pub(crate) fn held_shell(script: &str) -> Child {
    Command::new("sh")
        .args(["-c", &format!("read go; {script}")])
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawning sh")
}

/// Lets a [`held_shell`] run (its `read` ends at the closed stdin) and waits for its success.
pub(crate) fn release_and_wait(shell: &mut Child) {
    drop(shell.stdin.take());
    assert!(shell.wait().expect("waiting for sh").success());
}

#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn counts_a_hundred_creations_in_a_process_tree_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut source = load_as_root();
    let mut shell = held_shell("i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done");
    let root = shell.id();
    let scope = source.track_tree(&[root]).expect("tracking the tree");
    release_and_wait(&mut shell);

    let mut counters = EbpfCounters::default();
    source
        .scope_counters(scope, &mut counters)
        .expect("reading counters");
    assert!(counters.processes_created >= 100, "{counters:?}");
    assert!(counters.processes_exited >= 100, "{counters:?}");
    // The scope is read from the mapped array, and the mapping shows what a lookup returns.
    assert!(source.counters_mapped());
    assert_eq!(
        source.scope(scope).expect("mapped read"),
        source.scope_by_lookup(scope).expect("lookup")
    );
    assert!(source.global().expect("mapped read").processes_created >= 100);
    let shell_stats = source.tgid(root).expect("lookup").expect("sh has counters");
    assert!(shell_stats.processes_created >= 100, "{shell_stats:?}");
    // The created-by map links the shell to this test process.
    assert_eq!(
        source.created_by(root).expect("lookup"),
        Some(std::process::id())
    );
    source.untrack(scope).expect("untracking");
    let after = source.track_tree(&[]).expect("slot reused");
    assert_eq!(source.scope(after).expect("scope").processes_created, 0);
}

/// An own memory cgroup (v1 where the host has the v1 memory hierarchy, else v2), removed on
/// drop after killing anything left in it.
struct TestMemcg {
    path: PathBuf,
    /// The file whose `oom_kill` line counts this cgroup's OOM kills.
    events_file: &'static str,
}

impl TestMemcg {
    fn create(limit_bytes: u64) -> Self {
        let name = format!("relay-metrics-ebpf-test-{}", std::process::id());
        let v1 = Roots::host().map(Path::new("/sys/fs/cgroup/memory"));
        let v2 = Roots::host().map(Path::new("/sys/fs/cgroup"));
        let v2_has_memory = std::fs::read_to_string(v2.join("cgroup.controllers"))
            .is_ok_and(|controllers| controllers.split_whitespace().any(|c| c == "memory"));
        let memcg = if v1.join("memory.limit_in_bytes").exists() {
            let memcg = Self {
                path: v1.join(name),
                events_file: "memory.oom_control",
            };
            std::fs::create_dir(&memcg.path).expect("creating the test memory cgroup");
            std::fs::write(
                memcg.path.join("memory.limit_in_bytes"),
                limit_bytes.to_string(),
            )
            .expect("setting memory.limit_in_bytes");
            memcg
        } else if v2_has_memory {
            let subtree = std::fs::read_to_string(v2.join("cgroup.subtree_control"))
                .expect("reading cgroup.subtree_control");
            if !subtree.split_whitespace().any(|c| c == "memory") {
                // Only on a machine of our own (the test VM): a host delegates it already.
                std::fs::write(v2.join("cgroup.subtree_control"), "+memory")
                    .expect("enabling the memory controller");
            }
            let memcg = Self {
                path: v2.join(name),
                events_file: "memory.events",
            };
            std::fs::create_dir(&memcg.path).expect("creating the test memory cgroup");
            std::fs::write(memcg.path.join("memory.max"), limit_bytes.to_string())
                .expect("setting memory.max");
            let _ = std::fs::write(memcg.path.join("memory.swap.max"), "0");
            memcg
        } else {
            panic!(
                "this test needs a memory cgroup hierarchy: v1 at {} or v2 at {}",
                v1.display(),
                v2.display()
            );
        };
        memcg
    }

    /// The cgroup's event file, whose `oom_kill` line counts its OOM kills.
    fn oom_events(&self) -> String {
        std::fs::read_to_string(self.path.join(self.events_file)).expect("reading OOM events")
    }
}

impl Drop for TestMemcg {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.path.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.path.display());
    }
}

/// Spawns `command` moved into the cgroup of `procs_file` (its `cgroup.procs`) before it execs,
/// so everything it allocates or forks is charged there.
pub(crate) fn spawn_in_cgroup(mut command: Command, procs_file: &Path) -> Child {
    let procs = std::ffi::CString::new(procs_file.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: the closure only calls async-signal-safe functions (open, write, close) on data
    // prepared before the fork.
    unsafe {
        command.pre_exec(move || {
            let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // "0" moves the writing process itself, before it execs and allocates.
            let written = libc::write(fd, c"0".as_ptr().cast(), 1);
            let error = std::io::Error::last_os_error();
            libc::close(fd);
            if written != 1 {
                return Err(error);
            }
            Ok(())
        });
    }
    command.spawn().expect("spawning the child")
}

#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn reports_an_oom_kill_in_an_own_memory_cgroup_as_root() {
    use std::os::unix::process::ExitStatusExt as _;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut source = load_as_root();
    source.drain_oom_victims();
    let before = source.global().expect("global").oom_kills;
    let memcg = TestMemcg::create(32 << 20);
    // Serialised with the other tests and with its own maps: this scope holds just the child.
    let scope = source
        .track_tree(&[std::process::id()])
        .expect("tracking this process");
    let mut child = spawn_in_cgroup(child_command("oom"), &memcg.path.join("cgroup.procs"));
    let pid = child.id();
    // Drain before reaping the child, as a collector sees a victim: its /proc entry still exists.
    let deadline = Instant::now() + Duration::from_secs(20);
    while source.recent_oom_victims().all(|v| v.pid != pid) && Instant::now() < deadline {
        source.drain_oom_victims();
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait().expect("waiting for the child");
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "child was not OOM-killed: {status:?}"
    );
    source.drain_oom_victims();
    let victims: Vec<&OomVictim> = source
        .recent_oom_victims()
        .filter(|v| v.pid == pid)
        .collect();
    assert_eq!(victims.len(), 1, "{victims:?}");
    let victim = victims[0];
    assert!(victim.anon_rss_bytes >= 16 << 20, "{victim:?}");
    assert!(victim.anon_rss_bytes <= 40 << 20, "{victim:?}");
    assert!(victim.total_vm_bytes >= victim.anon_rss_bytes, "{victim:?}");
    // The test binary's file name, cut to 15 bytes by the kernel.
    let exe = std::env::current_exe().expect("test binary path");
    let exe_name = exe.file_name().expect("file name").to_string_lossy();
    assert_eq!(
        victim.comm_str(),
        &exe_name[..exe_name.len().min(15)],
        "{victim:?}"
    );
    assert_eq!(victim.uid, 0);
    let now_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    assert!(
        now_ns.abs_diff(victim.time_unix_ns) < 60_000_000_000,
        "{victim:?}"
    );
    assert!(source.global().expect("global").oom_kills > before);

    let scope_stats = source.scope(scope).expect("scope");
    assert_eq!(scope_stats.oom_kills, 1, "{scope_stats:?}");
    // Under its limit the child reclaimed memory before the kill.
    let child_stats = source.tgid(pid).expect("lookup").expect("child counters");
    assert!(child_stats.events.reclaim_count >= 1, "{child_stats:?}");
    assert!(child_stats.events.reclaim_total_ns > 0, "{child_stats:?}");

    let events = memcg.oom_events();
    assert!(events.lines().any(|line| line == "oom_kill 1"), "{events}");
    drop(memcg);
}

/// Restricts the command's process to CPU 0, so that the competition is on one known CPU
/// whatever else the machine runs.
fn on_cpu0(command: &mut Command) -> &mut Command {
    // SAFETY: the closure only calls sched_setaffinity (async-signal-safe) on a local set.
    unsafe {
        command.pre_exec(|| {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

fn busy_loop_on_cpu0() -> Child {
    on_cpu0(Command::new("sh").args(["-c", "while :; do :; done"]))
        .spawn()
        .expect("spawning a busy loop")
}

/// Mean run-queue delay (ns) of a spin-and-sleep child on CPU 0; with `first_in_line`, the
/// child runs under SCHED_FIFO, so no ordinary task on CPU 0 (this binary's other tests, a
/// build beside it) can hold it in the queue once it wakes.
fn spin_sleep_runq_mean_ns(source: &EbpfSource, first_in_line: bool) -> (u64, TgidStats) {
    let mut command = child_command("spin-sleep");
    on_cpu0(&mut command);
    if first_in_line {
        // SAFETY: the closure only calls sched_setscheduler (async-signal-safe) on a local value.
        unsafe {
            command.pre_exec(|| {
                let param = libc::sched_param { sched_priority: 1 };
                if libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = command.spawn().expect("spawning");
    let pid = child.id();
    assert!(child.wait().expect("waiting").success());
    let stats = source
        .tgid(pid)
        .expect("lookup")
        .expect("child has counters");
    // About one wait per sleep; a wakeup racing with the sleep itself is not a wait.
    assert!(stats.events.runq_count >= 250, "{stats:?}");
    (stats.events.runq_total_ns / stats.events.runq_count, stats)
}

#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn run_queue_delay_grows_under_cpu_competition_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let source = load_as_root();
    // The reference is the child with nothing ahead of it, not the child "alone": whatever else
    // ran on CPU 0 queued an ordinary child too, and with a 2-thread load beside the tests the
    // reference mean reached 577 us against 994 us with the two busy loops (2 of 4 runs failed).
    let (idle_ns, idle) = spin_sleep_runq_mean_ns(&source, true);
    let mut hogs = [busy_loop_on_cpu0(), busy_loop_on_cpu0()];
    std::thread::sleep(Duration::from_millis(200));
    let (busy_ns, busy) = spin_sleep_runq_mean_ns(&source, false);
    for hog in &mut hogs {
        let _ = hog.kill();
        let _ = hog.wait();
    }
    // Waits of a millisecond or more (buckets from 2^20 ns).
    let long_waits = |stats: &TgidStats| stats.events.runq_hist[20..].iter().sum::<u64>();
    let (idle_long, busy_long) = (long_waits(&idle), long_waits(&busy));
    eprintln!(
        "run-queue delay mean on CPU 0: first in line {idle_ns} ns ({idle_long} waits >= 1 ms), \
         behind two busy loops {busy_ns} ns ({busy_long} waits >= 1 ms)"
    );
    assert!(
        busy_ns > 2 * idle_ns,
        "idle {idle_ns} ns {idle:?}\nbusy {busy_ns} ns {busy:?}"
    );
    let histogram_total: u64 = busy.events.runq_hist.iter().sum();
    assert_eq!(histogram_total, busy.events.runq_count);
}

/// Two threads ping-ponging one byte over a pair of pipes: two context switches per round trip.
fn ping_pong(round_trips: usize) {
    // Close-on-exec: other tests count the descriptors their spawned children inherit.
    let (ping_read, ping_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let (pong_read, pong_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
    let mut ping_read = std::fs::File::from(ping_read);
    let mut ping_write = std::fs::File::from(ping_write);
    let mut pong_read = std::fs::File::from(pong_read);
    let mut pong_write = std::fs::File::from(pong_write);
    let echo = std::thread::spawn(move || {
        let mut byte = [0u8; 1];
        for _ in 0..round_trips {
            ping_read.read_exact(&mut byte).expect("ping");
            pong_write.write_all(&byte).expect("pong");
        }
    });
    let mut byte = [7u8; 1];
    for _ in 0..round_trips {
        ping_write.write_all(&byte).expect("ping");
        pong_read.read_exact(&mut byte).expect("pong");
    }
    echo.join().expect("echo thread");
}

/// The statistics the per-event cost bench reads (`benches/ebpf_event_cost.rs`) are there: the
/// scheduler hook runs on every context switch of a pipe ping-pong, and its run time counts.
#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn sched_switch_runs_on_every_context_switch_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let source = load_as_root();
    let _stats = EbpfSource::enable_run_time_stats().expect("enabling BPF stats");
    let switch_stats = |source: &EbpfSource| {
        source
            .program_run_stats()
            .into_iter()
            .find(|stats| stats.spec.program == "sched_switch")
            .expect("sched_switch attached")
    };
    let before = switch_stats(&source);
    let round_trips = 10_000;
    ping_pong(round_trips);
    let after = switch_stats(&source);
    let runs = after.run_count - before.run_count;
    assert!(runs >= 2 * round_trips as u64, "{runs} switches");
    assert!(
        after.run_time_ns > before.run_time_ns,
        "{before:?} {after:?}"
    );
}

/// A scope counts the events of its members (and of the processes they create) as they happen:
/// the counts stay after the members exit, and stop growing for a process removed from it.
#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn a_scope_counts_its_members_events_until_they_leave_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut source = load_as_root();
    let mut shell = held_shell("i=0; while [ $i -lt 100 ]; do sleep 0.001; i=$((i+1)); done");
    let scope = source.track_tree(&[shell.id()]).expect("tracking the tree");
    release_and_wait(&mut shell);
    let mut exited = EbpfCounters::default();
    source.scope_counters(scope, &mut exited).expect("reading");
    // Each of the 100 `sleep`s, and the shell after each, waits on a run queue when it wakes.
    assert!(exited.runq_delay.count >= 100, "{exited:?}");
    assert_eq!(
        exited.runq_delay.hist.iter().sum::<u64>(),
        exited.runq_delay.count
    );
    assert!(exited.processes_exited >= 100, "{exited:?}");
    source.untrack(scope).expect("untracking");

    let mut ticker = Command::new("sh")
        .args(["-c", "while :; do sleep 0.01; done"])
        .spawn()
        .expect("spawning sh");
    let scope = source.track_tree(&[ticker.id()]).expect("tracking");
    let counted = |source: &EbpfSource| {
        let mut counters = EbpfCounters::default();
        source
            .scope_counters(scope, &mut counters)
            .expect("reading");
        counters.runq_delay.count
    };
    std::thread::sleep(Duration::from_millis(300));
    assert!(counted(&source) > 10, "the member's waits are counted");
    source
        .remove_from_scope(&[ticker.id()])
        .expect("removing the member");
    // Lets an event that raced with the removal land.
    std::thread::sleep(Duration::from_millis(50));
    let after_removal = counted(&source);
    std::thread::sleep(Duration::from_millis(300));
    let later = counted(&source);
    let _ = ticker.kill();
    let _ = ticker.wait();
    assert_eq!(later, after_removal, "a removed process no longer counts");
    source.untrack(scope).expect("untracking");
}

#[test]
#[ignore = "root: loads eBPF programs"]
fn removing_a_process_the_kernel_already_forgot_is_not_an_error_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut source = load_as_root();
    let scope = source
        .track_tree(&[std::process::id()])
        .expect("tracking the tree");
    // The kernel deletes an exited member itself; deleting it again gives ENOENT.
    let never_tracked = u32::MAX - 1;
    source
        .remove_from_scope(&[never_tracked, std::process::id(), std::process::id()])
        .expect("a member that is already gone is not an error");
    source.untrack(scope).expect("untracking");
}

/// With [`EbpfOptions::tracked_only`], the scheduler programs skip untracked threads (this test
/// process's ping-pong counts nothing) and count a tracked tree exactly as the programs that
/// count every thread do: both sources are attached at once, so they see the same events.
#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn tracked_only_skips_untracked_threads_and_counts_tracked_ones_as_before_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut every = load_as_root();
    let mut tracked_only = EbpfSource::load(&EbpfOptions {
        tracked_only: true,
        ..EbpfOptions::default()
    })
    .expect("loading the eBPF programs");
    assert!(tracked_only.tracks_only_scopes() && !every.tracks_only_scopes());
    let _stats = EbpfSource::enable_run_time_stats().expect("enabling BPF stats");

    let mut shell = held_shell("i=0; while [ $i -lt 100 ]; do sleep 0.001; i=$((i+1)); done");
    // A wait that started before tracking is counted by the programs that time every thread,
    // not by the others: track the shell only once it sleeps waiting for its stdin.
    let syscall = format!("/proc/{}/syscall", shell.id());
    let waits_for_stdin = |text: &str| {
        let mut fields = text.split_whitespace();
        // x86-64 numbers: read(0, …); poll and ppoll, where busybox's `read` waits first.
        matches!(
            (fields.next(), fields.next()),
            (Some("0"), Some("0x0")) | (Some("7" | "271"), _)
        )
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = String::new();
    while !waits_for_stdin(&last) {
        assert!(
            Instant::now() < deadline,
            "sh never blocked waiting for stdin: {syscall}: {last:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
        last = std::fs::read_to_string(&syscall).unwrap_or_default();
    }
    let scopes = [
        every.track_tree(&[shell.id()]).expect("tracking"),
        tracked_only.track_tree(&[shell.id()]).expect("tracking"),
    ];
    release_and_wait(&mut shell);
    let counted = |source: &EbpfSource, scope| {
        let mut counters = EbpfCounters::default();
        source
            .scope_counters(scope, &mut counters)
            .expect("reading");
        counters
    };
    let (all, only) = (
        counted(&every, scopes[0]),
        counted(&tracked_only, scopes[1]),
    );
    assert!(all.runq_delay.count >= 100, "{all:?}");
    assert_eq!(
        only.runq_delay.count, all.runq_delay.count,
        "{only:?}\n{all:?}"
    );
    assert_eq!(
        only.runq_delay.hist.iter().sum::<u64>(),
        only.runq_delay.count
    );
    assert_eq!(only.involuntary_switches, all.involuntary_switches);
    assert_eq!(only.processes_created, all.processes_created);
    assert_eq!(only.processes_exited, all.processes_exited);

    let switch_runs = |source: &EbpfSource| {
        source
            .program_run_stats()
            .into_iter()
            .find(|stats| stats.spec.program == "sched_switch")
            .expect("sched_switch attached")
            .run_count
    };
    let runq_count = |source: &EbpfSource| {
        source
            .tgid(std::process::id())
            .expect("lookup")
            .map_or(0, |stats| stats.events.runq_count)
    };
    let (runs_before, every_before) = (switch_runs(&tracked_only), runq_count(&every));
    let round_trips = 10_000;
    ping_pong(round_trips);
    assert!(switch_runs(&tracked_only) - runs_before >= 2 * round_trips as u64);
    assert!(runq_count(&every) - every_before >= round_trips as u64);
    assert_eq!(
        runq_count(&tracked_only),
        0,
        "an untracked process was counted"
    );
}

#[test]
fn lockdown_confidentiality_is_the_reason_given() {
    let dir = super::loader::tests::fixture("000001ffffffffff");
    let security = dir.path().join("sys/kernel/security");
    std::fs::create_dir_all(&security).expect("creating the fixture");
    std::fs::write(
        security.join("lockdown"),
        "none integrity [confidentiality]\n",
    )
    .expect("writing the fixture");
    let options = EbpfOptions {
        roots: Roots::fixture(dir.path()),
        ..EbpfOptions::default()
    };
    let error = EbpfSource::load(&options).expect_err("must not load");
    assert!(
        matches!(error, EbpfUnavailable::TracingDisabled { .. }),
        "{error}"
    );
    assert!(
        error.to_string().starts_with(
            "tracing is disabled by the kernel (kernel lockdown is 'confidentiality')"
        ),
        "{error}"
    );
    // Integrity mode refuses nothing the programs need: the next step (tracefs) is reached.
    std::fs::write(
        security.join("lockdown"),
        "none [integrity] confidentiality\n",
    )
    .expect("writing the fixture");
    let error = EbpfSource::load(&options).expect_err("must not load");
    assert!(
        matches!(error, EbpfUnavailable::NoTracefs { .. }),
        "{error}"
    );
}

/// The machine-wide counts the unchanged-cgroup rule relies on: a process moved into a cgroup
/// (`cgroup_migrations`) and one created straight into a cgroup by clone3's
/// `CLONE_INTO_CGROUP` (`clone_into_cgroup`), each seen.
#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates a cgroup"]
fn counts_moves_into_a_cgroup_and_clones_into_one_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let source = load_as_root();
    let layout = crate::source::cgroup::CgroupLayout::discover(&crate::source::Roots::host())
        .expect("cgroup layout");
    let unified = layout
        .v2
        .expect("this test needs a cgroup2 mount")
        .mount_point;
    let dir = unified.join(format!("relay-metrics-test-moves-{}", std::process::id()));
    std::fs::create_dir(&dir).expect("making the test cgroup");
    let before = source.global().expect("global counters");

    let mut sleeper = Command::new("sleep").arg("30").spawn().expect("sleep");
    std::fs::write(dir.join("cgroup.procs"), sleeper.id().to_string()).expect("moving sleep");
    let moved = source.global().expect("global counters");
    let _ = sleeper.kill();
    let _ = sleeper.wait();

    let cgroup = std::fs::File::open(&dir).expect("opening the cgroup directory");
    let child = clone_into_cgroup(&cgroup);
    let cloned = source.global().expect("global counters");
    let _ = std::fs::remove_dir(&dir);

    assert!(
        moved.cgroup_migrations > before.cgroup_migrations,
        "{moved:?}"
    );
    assert!(
        child > 0,
        "clone3 failed: {}",
        std::io::Error::last_os_error()
    );
    assert!(
        cloned.clone_into_cgroup > moved.clone_into_cgroup,
        "{cloned:?}"
    );
}

/// The count the walk of measured cgroups is reused by: a cgroup directory made, renamed (v1
/// only: cgroup2 refuses renames) or removed, on the unified hierarchy and on a v1 one where
/// the host has one, each moves it (other processes may move it too, so each step is at least one).
#[test]
#[ignore = "root: loads eBPF programs (CAP_BPF, tracefs) and creates cgroups"]
fn counts_cgroup_directories_made_renamed_and_removed_as_root() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let source = load_as_root();
    let layout = crate::source::cgroup::CgroupLayout::discover(&crate::source::Roots::host())
        .expect("cgroup layout");
    let unified = layout.v2.clone().expect("this test needs a cgroup2 mount");
    // A pure v2 host (the VM) has no v1 hierarchy, and no cgroup rename either.
    let v1 = layout
        .v1_hierarchy("memory")
        .map(|h| (&h.mount.mount_point, true));
    let count = || source.global().expect("global counters").cgroup_dir_changes;
    for (mount, renames) in [(&unified.mount_point, false)].into_iter().chain(v1) {
        let name = format!("relay-metrics-test-dirs-{}", std::process::id());
        let mut dir = mount.join(&name);
        let before = count();
        std::fs::create_dir(&dir).expect("making the test cgroup");
        let made = count();
        let mut renamed = made;
        if renames {
            let new_name = mount.join(format!("{name}-renamed"));
            if let Err(error) = std::fs::rename(&dir, &new_name) {
                let _ = std::fs::remove_dir(&dir);
                panic!("renaming a cgroup under {}: {error}", mount.display());
            }
            dir = new_name;
            renamed = count();
        }
        std::fs::remove_dir(&dir).expect("removing the test cgroup");
        let removed = count();
        assert!(made > before, "{}: mkdir not counted", mount.display());
        if renames {
            assert!(renamed > made, "{}: rename not counted", mount.display());
        }
        assert!(removed > renamed, "{}: rmdir not counted", mount.display());
    }
}

/// Starts a child with clone3 into `cgroup` (an open cgroup2 directory); the child exits at
/// once. Returns its pid after reaping it, or -1.
fn clone_into_cgroup(cgroup: &std::fs::File) -> libc::pid_t {
    use std::os::fd::AsRawFd as _;
    const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
    // struct clone_args (CLONE_ARGS_SIZE_VER2): flags, pidfd, child_tid, parent_tid,
    // exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup.
    let mut args = [0u64; 11];
    args[0] = CLONE_INTO_CGROUP;
    args[4] = libc::SIGCHLD as u64;
    args[10] = cgroup.as_raw_fd() as u64;
    // SAFETY: clone3 without CLONE_VM is a fork; the child only calls _exit, which is
    // async-signal-safe, so the other threads of this process do not matter to it.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            args.as_mut_ptr(),
            std::mem::size_of_val(&args),
        )
    };
    if pid == 0 {
        // SAFETY: see above.
        unsafe { libc::_exit(0) };
    }
    let pid = pid as libc::pid_t;
    if pid > 0 {
        let mut status = 0;
        // SAFETY: reaping the child just created.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
    pid
}
