//! Kernel events end to end, as root on this hybrid (cgroup v1) host: a process OOM-killed in a
//! v1 memory cgroup the test creates shows up as exactly one `memory/terminated` event with the
//! victim's pid, in the cgroup scope and in the process tree of its parent, and the kernel's own
//! `memory.oom_control` agrees. Every test here fails (never skips) without root.

#![expect(
    clippy::unwrap_used,
    reason = "a test fails loudly when its setup breaks"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use relay_metrics::config::{ResourceMetricsConfig, ScopeSetting};
use relay_metrics::snapshot::{
    ResourceLimitEventKind, ResourceLimitResource, ResourceMetricsSnapshot,
};
use relay_metrics::Collector;

/// A v1 memory cgroup with a limit, removed (after its processes are killed) when dropped.
struct MemoryCgroup {
    name: String,
    dir: PathBuf,
}

impl MemoryCgroup {
    fn create(tag: &str, limit_bytes: u64) -> Self {
        assert!(
            nix::unistd::geteuid().is_root(),
            "kernel event tests load eBPF programs and create cgroups: run as root"
        );
        let name = format!("relay-metrics-{tag}-{}", std::process::id());
        let dir = Path::new("/sys/fs/cgroup/memory").join(&name);
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("memory.limit_in_bytes"), limit_bytes.to_string()).unwrap();
        Self { name, dir }
    }

    fn oom_kills(&self) -> u64 {
        let control = std::fs::read_to_string(self.dir.join("memory.oom_control")).unwrap();
        control
            .lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if let Ok(procs) = std::fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.lines().filter_map(|l| l.parse::<i32>().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::fs::remove_dir(&self.dir).is_err() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Kills and reaps a child when dropped.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Python allocating and touching 256 MiB: far over the cgroup's 32 MiB.
const ALLOCATE_256_MIB: &str = "python3 -c 'x = b\"x\" * (256 << 20)'";

fn config(scope: ScopeSetting) -> ResourceMetricsConfig {
    let mut config = ResourceMetricsConfig {
        measurement_scope: scope,
        ..Default::default()
    };
    config.gpu.enabled = false;
    config.network.enabled = false;
    config
}

fn terminated(snapshot: &ResourceMetricsSnapshot) -> Option<u64> {
    let memory = snapshot.memory.as_ref().unwrap();
    memory
        .limit_events
        .iter()
        .find(|e| {
            e.resource == ResourceLimitResource::Memory
                && e.event == ResourceLimitEventKind::Terminated
        })
        .and_then(|e| e.count)
        .map(|c| c.value.as_f64() as u64)
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn victim_pids(snapshot: &ResourceMetricsSnapshot) -> Vec<u32> {
    snapshot
        .extensions
        .kernel_events
        .recent_oom_victims
        .iter()
        .map(|v| v.pid)
        .collect()
}

#[test]
#[ignore = "root: loads eBPF programs and creates cgroups"]
fn an_oom_kill_in_a_v1_cgroup_is_one_terminated_event_with_the_victim_as_root() {
    let cgroup = MemoryCgroup::create("oom", 32 << 20);
    let go = tempfile::NamedTempFile::new().unwrap().into_temp_path();
    let go_path = go.to_str().unwrap().to_string();
    std::fs::remove_file(&go).unwrap();
    // The child joins the cgroup, waits for the collector, then becomes the allocating python.
    let script = format!(
        "echo $$ > {}/cgroup.procs && while [ ! -e {go_path} ]; do sleep 0.02; done; exec {ALLOCATE_256_MIB}",
        cgroup.dir.display()
    );
    let mut child = Reaped(Command::new("sh").args(["-c", &script]).spawn().unwrap());
    let victim = child.0.id();
    wait_for("the child to join the cgroup", || {
        std::fs::read_to_string(cgroup.dir.join("cgroup.procs"))
            .unwrap()
            .lines()
            .any(|l| l == victim.to_string())
    });

    let mut scoped = config(ScopeSetting::Cgroup);
    scoped.cgroup_path = Some(format!("/{}", cgroup.name));
    let mut collector = Collector::new(scoped).unwrap();
    // The whole machine sees the kill too.
    let mut machine = Collector::new(config(ScopeSetting::Global)).unwrap();
    assert!(machine.collect().extensions.kernel_events.active);
    let before = collector.collect();
    assert!(
        before.extensions.kernel_events.active,
        "{:?}",
        before.extensions.kernel_events.reason
    );
    assert_eq!(terminated(&before), Some(0));
    // The waiting shell (and its short sleeps) are the cgroup's processes.
    assert!(
        before
            .process
            .as_ref()
            .unwrap()
            .active_count
            .unwrap()
            .value
            .as_f64()
            >= 1.0
    );

    std::fs::write(&go_path, b"go").unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9),
        "the child must be OOM-killed"
    );
    let after = collector.collect();

    assert_eq!(cgroup.oom_kills(), 1, "the kernel counted one OOM kill");
    let everywhere = machine.collect();
    // Other tests may OOM-kill in their own cgroups at the same time: at least this one.
    assert!(
        terminated(&everywhere).is_some_and(|kills| kills >= 1),
        "{:?}",
        everywhere.memory
    );
    assert!(victim_pids(&everywhere).contains(&victim));
    assert_eq!(terminated(&after), Some(1));
    assert_eq!(victim_pids(&after), [victim]);
    let recorded = &after.extensions.kernel_events.recent_oom_victims[0];
    assert_eq!(&*recorded.comm, "python3");
    assert!(
        recorded.rss_kib > 16 << 10,
        "the victim held most of its 32 MiB limit: {} KiB",
        recorded.rss_kib
    );
    let _ = std::fs::remove_file(&go_path);
}

#[test]
#[ignore = "root: loads eBPF programs and creates cgroups"]
fn a_process_tree_reports_the_oom_kill_of_a_child_as_root() {
    let cgroup = MemoryCgroup::create("tree-oom", 32 << 20);
    let go = std::env::temp_dir().join(format!("relay-metrics-tree-oom-go-{}", std::process::id()));
    let _ = std::fs::remove_file(&go);
    // The parent waits for the collector, then runs the allocating child, which moves itself into
    // the memory cgroup before it execs python (and is killed there), and lives on. The parent
    // stays outside the cgroup: in it, a second OOM kill could pick the parent itself when it
    // forks its `sleep` while the cgroup is still full (seen: python3, then sh 4 ms later).
    let script = format!(
        r#"while [ ! -e {go} ]; do sleep 0.02; done; sh -c 'echo $$ > "$MEMCG_PROCS" && eval "exec $ALLOCATE"'; sleep 30"#,
        go = go.display()
    );
    let parent = Reaped(
        Command::new("sh")
            .args(["-c", &script])
            .env("MEMCG_PROCS", cgroup.dir.join("cgroup.procs"))
            .env("ALLOCATE", ALLOCATE_256_MIB)
            .spawn()
            .unwrap(),
    );
    let parent_pid = parent.0.id();

    let mut tree = config(ScopeSetting::ProcessTree);
    tree.root_pid = Some(parent_pid);
    let mut collector = Collector::new(tree).unwrap();
    let before = collector.collect();
    // The tree existed (and forked) before the collector: its counts run from the collector's
    // start, which is not the tree's lifetime, so Relay's field stays null.
    assert_eq!(terminated(&before), None);
    assert_eq!(before.extensions.kernel_events.oom_kills, Some(0));
    assert!(before.extensions.kernel_events.counting_since.is_some());

    std::fs::write(&go, b"go").unwrap();
    wait_for("the OOM kill", || cgroup.oom_kills() == 1);
    // The kernel counts the kill in memory.oom_control just before it marks the victim (the
    // tracepoint), so the event can reach the maps a moment after the count.
    let mut after = collector.collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while after.extensions.kernel_events.oom_kills == Some(0) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        after = collector.collect();
    }
    let _ = std::fs::remove_file(&go);

    assert_eq!(terminated(&after), None);
    assert_eq!(
        after.extensions.kernel_events.oom_kills,
        Some(1),
        "memory: {:?}\nkernel events: {:?}\nunavailable: {:?}",
        after.memory,
        after.extensions.kernel_events,
        after.extensions.unavailable
    );
    let victims = victim_pids(&after);
    assert_eq!(victims.len(), 1, "{victims:?}");
    assert_ne!(
        victims[0], parent_pid,
        "the child, not the parent, was killed"
    );
    let events = &after.extensions.kernel_events;
    assert!(
        events.processes_created.unwrap() >= 1,
        "the python child was created in the tree"
    );
    drop(parent);
}

/// Kills a child's whole process group, then reaps the child, when dropped.
struct ProcessGroup(Reaped);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let group = nix::unistd::Pid::from_raw(self.0 .0.id() as i32);
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
    }
}

/// The tree's visible processes in a snapshot.
fn visible(snapshot: &ResourceMetricsSnapshot) -> u64 {
    snapshot
        .process_sampling
        .as_ref()
        .unwrap()
        .visible_processes
}

/// The tree is walked again exactly when the kernel counts a creation or an exit in it: a
/// steady tree reuses its walk, a new child and an exit (with its child reparented out of the
/// tree) are seen by the very next collect.
#[test]
#[ignore = "root: loads eBPF programs and creates cgroups"]
fn a_tracked_tree_is_walked_again_only_after_a_creation_or_exit_as_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test loads eBPF programs: run as root"
    );
    use std::os::unix::process::CommandExt as _;
    // In its own process group, killed whole at the end: the reparented grandchild included.
    let mut shell = Command::new("sh")
        .args(["-c", "while read -r line; do eval \"$line\"; done"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let mut commands = shell.stdin.take().unwrap();
    let shell = ProcessGroup(Reaped(shell));
    let sh = shell.0 .0.id();
    let children =
        || std::fs::read_to_string(format!("/proc/{sh}/task/{sh}/children")).unwrap_or_default();
    let mut run = |line: &str| {
        use std::io::Write as _;
        writeln!(commands, "{line}").unwrap();
    };

    let mut tree = config(ScopeSetting::ProcessTree);
    tree.root_pid = Some(sh);
    let mut collector = Collector::new(tree).unwrap();
    assert!(
        collector.collect().extensions.kernel_events.active,
        "kernel events must be on for this test"
    );
    // The first collects walk (and put the members under kernel tracking), then the walk is
    // reused while nothing happens.
    for _ in 0..3 {
        assert_eq!(visible(&collector.collect()), 1);
    }
    let steady = relay_metrics::internals::process_listings(&collector);
    for _ in 0..5 {
        assert_eq!(visible(&collector.collect()), 1);
    }
    assert_eq!(
        relay_metrics::internals::process_listings(&collector),
        steady,
        "a steady tree is not walked"
    );

    run("sleep 1000 &");
    wait_for("the sleep child", || !children().trim().is_empty());
    assert_eq!(
        visible(&collector.collect()),
        2,
        "the next collect sees the child"
    );

    // A middle process with a child of its own: when the middle exits, its child goes to
    // init and so leaves the tree.
    run("sh -c 'sleep 1001 & exec sleep 1002' &");
    // The middle is found once it has exec'd: before that it is a `sh` with its child already
    // started, and the tree already counts 4 (a CI run saw that instant).
    let middle = || {
        children()
            .split_whitespace()
            .map(|p| p.parse::<i32>().unwrap())
            .find(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c == "sleep\x001002\x00")
            })
    };
    wait_for("the grandchild", || {
        visible(&collector.collect()) == 4 && middle().is_some()
    });
    let middle = middle().expect("the middle has exec'd and is still the shell's child");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(middle),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    run(&format!("wait {middle}"));
    wait_for("the middle to be reaped", || {
        !std::path::Path::new(&format!("/proc/{middle}")).exists()
    });
    let after = collector.collect();
    assert_eq!(
        visible(&after),
        2,
        "sh and the first sleep; the reparented grandchild is out: {:?}",
        after.process_sampling
    );
    drop(shell);
}

/// The memory limit a snapshot reports, in KiB (`null` unless the tree owns its cgroup).
fn memory_limit_kib(snapshot: &ResourceMetricsSnapshot) -> Option<u64> {
    let memory = snapshot.memory.as_ref().unwrap();
    memory.limit.as_ref().map(|m| m.value.as_f64() as u64)
}

/// The exclusivity verdict follows processes moved in and out of the tree's cgroup at the very
/// next collect, although it is reused while the kernel counts no creation, exit or move.
#[test]
#[ignore = "root: loads eBPF programs and creates cgroups"]
fn a_process_moved_into_the_trees_cgroup_ends_its_exclusivity_at_once_as_root() {
    use std::os::unix::process::CommandExt as _;
    let cgroup = MemoryCgroup::create("exclusive", 256 << 20);
    let procs = cgroup.dir.join("cgroup.procs");
    let shell = ProcessGroup(Reaped(
        Command::new("sh")
            .args(["-c", "while read -r line; do eval \"$line\"; done"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap(),
    ));
    let sh = shell.0 .0.id();
    std::fs::write(&procs, sh.to_string()).unwrap();

    let mut tree = config(ScopeSetting::ProcessTree);
    tree.root_pid = Some(sh);
    let mut collector = Collector::new(tree).unwrap();
    assert!(collector.collect().extensions.kernel_events.active);
    for _ in 0..5 {
        assert_eq!(memory_limit_kib(&collector.collect()), Some(256 << 10));
    }

    let foreign = Reaped(
        Command::new("sleep")
            .arg("1000")
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::fs::write(&procs, foreign.0.id().to_string()).unwrap();
    let shared = collector.collect();
    assert_eq!(memory_limit_kib(&shared), None);
    assert!(
        shared
            .extensions
            .unavailable
            .iter()
            .any(|u| u.field == "cgroup" && u.reason.contains("exclusively")),
        "{:?}",
        shared.extensions.unavailable
    );

    std::fs::write(
        "/sys/fs/cgroup/memory/cgroup.procs",
        foreign.0.id().to_string(),
    )
    .unwrap();
    assert_eq!(memory_limit_kib(&collector.collect()), Some(256 << 10));
    drop(foreign);
    drop(shell);
}

/// A cgroup scope reuses its listing of `cgroup.procs` while the kernel counts no creation,
/// exit or cgroup move anywhere; a process moved in or out, or one that exits, is seen by the
/// very next collect.
#[test]
#[ignore = "root: loads eBPF programs and creates cgroups"]
fn a_cgroup_scope_lists_its_processes_again_after_a_move_or_an_exit_as_root() {
    let cgroup = MemoryCgroup::create("listing", 256 << 20);
    let procs = cgroup.dir.join("cgroup.procs");
    let sleeper = |seconds: &str| {
        Reaped(
            Command::new("sleep")
                .arg(seconds)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let first = sleeper("1000");
    std::fs::write(&procs, first.0.id().to_string()).unwrap();

    let mut scoped = config(ScopeSetting::Cgroup);
    scoped.cgroup_path = Some(format!("/{}", cgroup.name));
    let mut collector = Collector::new(scoped).unwrap();
    assert!(
        collector.collect().extensions.kernel_events.active,
        "kernel events must be on for this test"
    );
    // Other tests fork meanwhile (each fork anywhere lists again), so only ask that most
    // collects of a quick burst reused the listing.
    let before = relay_metrics::internals::process_listings(&collector);
    for _ in 0..50 {
        assert_eq!(visible(&collector.collect()), 1);
    }
    let listed = relay_metrics::internals::process_listings(&collector) - before;
    assert!(listed < 25, "{listed} listings in 50 collects");

    let second = sleeper("1001");
    std::fs::write(&procs, second.0.id().to_string()).unwrap();
    assert_eq!(visible(&collector.collect()), 2, "moved in");
    std::fs::write(
        "/sys/fs/cgroup/memory/cgroup.procs",
        second.0.id().to_string(),
    )
    .unwrap();
    assert_eq!(visible(&collector.collect()), 1, "moved out");
    let third = sleeper("1002");
    std::fs::write(&procs, third.0.id().to_string()).unwrap();
    assert_eq!(visible(&collector.collect()), 2, "moved in");
    drop(third);
    let after = collector.collect();
    assert_eq!(
        visible(&after),
        1,
        "the reaped process is gone: {:?}",
        after.process_sampling
    );
    drop(second);
    drop(first);
}

/// The cgroup scope's run-queue delay counts are the kernel's count of its members' waits: they
/// grow while a process is a member, never go down, and stop growing once it moved out.
#[test]
#[ignore = "root: loads eBPF programs and creates cgroups"]
fn a_cgroup_scope_counts_a_members_waits_until_it_moves_out_as_root() {
    let cgroup = MemoryCgroup::create("waits", 256 << 20);
    let mut scoped = config(ScopeSetting::Cgroup);
    scoped.cgroup_path = Some(format!("/{}", cgroup.name));
    let mut collector = Collector::new(scoped).unwrap();
    let waits = |collector: &mut Collector| {
        let snapshot = collector.collect();
        let events = &snapshot.extensions.kernel_events;
        assert!(
            events.active,
            "kernel events must be on: {:?}",
            events.reason
        );
        events.run_queue_delay_count.unwrap()
    };
    let empty = waits(&mut collector);

    // Wakes every 10 ms; its `sleep`s are in the cgroup while it is.
    let ticker = Reaped(
        Command::new("sh")
            .args(["-c", "while :; do sleep 0.01; done"])
            .spawn()
            .unwrap(),
    );
    std::fs::write(cgroup.dir.join("cgroup.procs"), ticker.0.id().to_string()).unwrap();
    let joined = waits(&mut collector);
    // About 30 waits in 300 ms on an idle machine; a loaded one runs the ticker less often.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let mut member = joined;
    while member < joined + 10 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
        member = waits(&mut collector);
    }
    eprintln!("run-queue waits of the scope: empty {empty}, joined {joined}, member {member}");
    assert!(member >= joined + 10, "{empty} -> {joined} -> {member}");

    std::fs::write(
        "/sys/fs/cgroup/memory/cgroup.procs",
        ticker.0.id().to_string(),
    )
    .unwrap();
    // This collect sees it gone; a `sleep` it started just before the move ends within 10 ms
    // (given time to be scheduled on a loaded machine).
    let left = waits(&mut collector);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let settled = waits(&mut collector);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let later = waits(&mut collector);
    assert!(
        left >= member && settled >= left,
        "{member} -> {left} -> {settled}"
    );
    assert_eq!(
        later, settled,
        "waits after the move out are not the scope's"
    );
}

/// A tree's creations counted by a collector of `config` built from `preload`: the root is
/// started stopped (as `relay-metrics run` does), resumed after the first snapshot, and
/// creates three processes.
fn creations_with_preload(
    mut config: ResourceMetricsConfig,
    preload: relay_metrics::KernelEventsPreload,
) -> (u64, ResourceMetricsSnapshot) {
    let root = Reaped(
        Command::new("sh")
            .args(["-c", "kill -STOP $$; true & true & true & wait"])
            .spawn()
            .unwrap(),
    );
    let pid = nix::unistd::Pid::from_raw(root.0.id() as i32);
    wait_for("the root to stop", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|s| s.trim_start().starts_with('T'))
        })
    });
    config.root_pid = Some(root.0.id());
    let mut collector = Collector::with_preload(config, preload).unwrap();
    collector.count_from_root_start();
    let _ = collector.collect();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let mut last = collector.collect();
    wait_for("the tree's three creations", || {
        last = collector.collect();
        last.extensions.kernel_events.processes_created >= Some(3)
    });
    let created = last.extensions.kernel_events.processes_created.unwrap();
    (created, (*last).clone())
}

#[test]
#[ignore = "root: loads eBPF programs"]
fn a_collector_takes_preloaded_programs_or_loads_its_own_as_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "kernel event tests load eBPF programs: run as root"
    );
    // Preloaded for this very configuration: taken.
    let tree = config(ScopeSetting::ProcessTree);
    let (created, snapshot) =
        creations_with_preload(tree.clone(), Collector::preload_kernel_events(&tree));
    assert_eq!(created, 3, "{:?}", snapshot.extensions.kernel_events);
    assert!(snapshot.extensions.kernel_events.active);
    // Preloaded for cgroups measured one by one (every process's scheduler counters): not the
    // programs a tree needs, so the collector loads its own and counts the same.
    let mut other = tree.clone();
    other.extensions.cgroup_depth = Some(1);
    let (created, snapshot) =
        creations_with_preload(tree, Collector::preload_kernel_events(&other));
    assert_eq!(created, 3, "{:?}", snapshot.extensions.kernel_events);
    assert!(snapshot.extensions.kernel_events.active);
}
