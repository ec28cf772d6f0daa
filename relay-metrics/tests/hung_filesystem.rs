//! A filesystem that never answers: `tests/hung_fuse.py` mounts a FUSE filesystem, answers the
//! kernel's INIT, then reads every request and never answers it. A `statvfs` of it blocks in the
//! kernel, and once the daemon has read the request not even SIGKILL ends that wait. Every
//! command configured with that path must still answer (`null` and a reason for it) and exit
//! in its normal time; the helper processes stuck on the mount must not keep it alive. Every
//! process started here carries a unique environment mark (forked helpers inherit it), so the
//! test can find what is left of ours in `/proc`: a helper stuck in D state while the daemon
//! runs, and nothing once the daemon is gone (which aborts the connection and frees the calls).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

const MARK_NAME: &str = "RELAY_METRICS_HUNG_FS_TEST";

/// A mount served by `hung_fuse.py`; the daemon is killed and the mount detached when dropped.
struct HungMount {
    dir: tempfile::TempDir,
    daemon: Child,
}

impl HungMount {
    fn new() -> Self {
        common::assert_root("this test mounts a FUSE filesystem");
        let dir = tempfile::tempdir().unwrap();
        let mut daemon = Command::new("python3")
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/hung_fuse.py"))
            .arg(dir.path())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(daemon.stdout.take().unwrap())
            .read_line(&mut ready)
            .unwrap();
        assert_eq!(ready.trim(), "ready", "the FUSE daemon did not start");
        Self { dir, daemon }
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }

    /// Ends the daemon, which aborts the connection: calls waiting on it return, and later
    /// ones fail at once ("Transport endpoint is not connected") until the mount is detached.
    fn abort(&mut self) {
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        // The daemon holds the last descriptor of the connection: its end aborts every pending
        // request, and the calls waiting on them return.
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// A mark unique to one test of one run, for the processes it starts.
fn mark(test: &str) -> String {
    format!("{test}-{}", std::process::id())
}

/// The processes carrying `mark` (the started ones and every helper they forked), with their
/// state letter from `/proc/<pid>/stat`.
fn marked_processes(mark: &str) -> Vec<(u32, char)> {
    let entry = format!("{MARK_NAME}={mark}");
    let mut found = Vec::new();
    for dir in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = dir.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(environ) = std::fs::read(dir.path().join("environ")) else {
            continue;
        };
        if !environ.split(|b| *b == 0).any(|e| e == entry.as_bytes()) {
            continue;
        }
        let stat = std::fs::read_to_string(dir.path().join("stat")).unwrap_or_default();
        let state = stat
            .rsplit_once(") ")
            .and_then(|(_, rest)| rest.chars().next())
            .unwrap_or('?');
        found.push((pid, state));
    }
    found
}

/// While the daemon runs, a helper of ours is stuck on the mount (this proves the test reached
/// the uninterruptible wait), and nothing else of ours is alive once what was ending has ended:
/// a helper for a healthy path, orphaned by the command's exit, can still be returning from its
/// last system call (seen running in `task_work_run` under load), so whatever is not stuck gets
/// up to 5 s to end.
fn assert_only_a_stuck_helper_is_left(mark: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left = marked_processes(mark);
        if left.iter().all(|(_, state)| matches!(state, 'D' | 'Z')) || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        left.iter().any(|(_, state)| *state == 'D'),
        "no helper stuck in D state: {left:?}"
    );
    assert!(
        left.iter().all(|(_, state)| matches!(state, 'D' | 'Z')),
        "a process of ours is still running: {left:?}"
    );
}

/// Once the mount is gone, within 5 s no process of ours is left (zombies included: an
/// orphaned helper is reaped by init).
fn assert_none_left(mount: HungMount, mark: &str) {
    drop(mount);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = marked_processes(mark);
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "processes of ours left: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A config file named after its paths (several can live in one directory).
fn config_of(dir: &tempfile::TempDir, paths: &[&str]) -> String {
    let path = dir.path().join(format!("config-{}.json", paths.len()));
    std::fs::write(
        &path,
        serde_json::json!({
            "disk": {"filesystem_paths": paths},
            "gpu": {"enabled": false},
            "extensions": {"kernel_events": false}
        })
        .to_string(),
    )
    .unwrap();
    path.display().to_string()
}

/// Runs `relay-metrics ARGS` with `mark`; its exit status, stdout and the time it took, or a
/// failure past `limit` (the process is killed then).
fn run_within(args: &[&str], mark: &str, limit: Duration) -> (String, Duration) {
    let started = Instant::now();
    let mut child = Command::new(common::binary())
        .args(args)
        .env(MARK_NAME, mark)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("relay-metrics {args:?} did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let took = started.elapsed();
    assert!(status.success(), "{args:?}: {status}");
    // Stdout ends with the process: a stuck helper holds none of our descriptors.
    (reader.join().unwrap(), took)
}

/// The reason given for `path` in a snapshot.
fn reason_for(snapshot: &Value, path: &str) -> String {
    let reasons = snapshot["extensions"]["unavailable"].as_array().unwrap();
    reasons
        .iter()
        .find(|r| r["field"] == "disk.filesystems" && r["reason"].as_str().unwrap().contains(path))
        .unwrap_or_else(|| panic!("no reason for {path} in {reasons:?}"))["reason"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn capacity_of<'a>(snapshot: &'a Value, path: &str) -> &'a Value {
    let filesystems = snapshot["disk"]["filesystems"].as_array().unwrap();
    let entry = filesystems
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {filesystems:?}"));
    &entry["total_capacity"]
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn snapshot_with_a_hung_path_answers_and_exits_within_3_s() {
    let mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    let config = config_of(&dir, &[&hung, "/"]);
    let mark = mark("snapshot");
    // Its normal time, on this machine now: the same snapshot without the hung path.
    let (_, normal) = run_within(
        &[
            "snapshot",
            "--scope",
            "global",
            "--config",
            &config_of(&dir, &["/"]),
        ],
        &mark,
        Duration::from_secs(30),
    );
    let (text, took) = run_within(
        &["snapshot", "--scope", "global", "--config", &config],
        &mark,
        Duration::from_secs(30),
    );
    eprintln!("snapshot took {took:?}, {normal:?} without the hung path");
    // 3 s, or on a loaded machine its normal time plus the 1 s deadline (and 0.5 s to fork
    // the helpers and schedule the refresher).
    let limit = Duration::from_secs(3).max(normal + Duration::from_millis(1500));
    assert!(
        took <= limit,
        "snapshot took {took:?}, {normal:?} without the hung path"
    );
    let snapshot: Value = serde_json::from_str(&text).unwrap();
    assert!(capacity_of(&snapshot, &hung).is_null());
    assert!(capacity_of(&snapshot, "/")["value"].as_u64().unwrap() > 0);
    let reason = reason_for(&snapshot, &hung);
    assert!(reason.contains("no answer within 1000 ms"), "{reason}");
    // The values come from the one round the snapshot waited for.
    let age = snapshot["extensions"]["sample_ages"]["filesystems_ms"]
        .as_u64()
        .unwrap();
    assert!(age < 3000, "{age}");
    assert_only_a_stuck_helper_is_left(&mark);
    assert_none_left(mount, &mark);
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn watch_with_a_hung_path_ends_after_its_count() {
    let mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    let config = config_of(&dir, &["/", &hung]);
    let mark = mark("watch");
    let (text, took) = run_within(
        &[
            "watch",
            "--count",
            "3",
            "--interval-ms",
            "200",
            "--scope",
            "global",
            "--config",
            &config,
        ],
        &mark,
        Duration::from_secs(30),
    );
    eprintln!("watch --count 3 took {took:?}");
    // One deadline for the first round, then two periods.
    assert!(took <= Duration::from_secs(4), "watch took {took:?}");
    let snapshots = common::json_lines(text.as_bytes());
    assert_eq!(snapshots.len(), 3, "{text}");
    for snapshot in &snapshots {
        assert!(capacity_of(snapshot, &hung).is_null());
        assert!(capacity_of(snapshot, "/")["value"].as_u64().unwrap() > 0);
        assert!(reason_for(snapshot, &hung).contains("no answer within"));
    }
    assert_only_a_stuck_helper_is_left(&mark);
    assert_none_left(mount, &mark);
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn serve_with_a_hung_path_keeps_sampling_and_exits_within_6_s_of_sigterm() {
    let mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    let config = config_of(&dir, &["/", &hung]);
    let mark = mark("serve");
    let mut command = common::agent_command(&["--scope", "global", "--config", &config]);
    command.env(MARK_NAME, &mark);
    let mut agent = common::start_command(command);
    let snapshot = |address: &str| -> Value {
        serde_json::from_slice(&common::get(address, "/snapshot").body).unwrap()
    };
    let sequence = |snapshot: &Value| snapshot["extensions"]["collector"]["sequence"].as_u64();
    common::wait_ready(&agent.address);
    let first = sequence(&snapshot(&agent.address)).unwrap();
    // Well past the first round's deadline and past the gap between rounds.
    std::thread::sleep(Duration::from_secs(3));
    let later = snapshot(&agent.address);
    assert!(
        sequence(&later).unwrap() >= first + 5,
        "sampling stalled: {first} -> {later}"
    );
    assert_eq!(common::get(&agent.address, "/healthz").status, 200);
    assert!(common::get(&agent.address, "/metrics")
        .text()
        .contains("path=\"/\""));
    assert!(capacity_of(&later, "/")["value"].as_u64().unwrap() > 0);
    // Asked once: later rounds report the call still pending instead of asking again.
    let reason = reason_for(&later, &hung);
    assert!(reason.contains("has not returned"), "{reason}");
    let helpers = marked_processes(&mark);
    assert_eq!(
        helpers.iter().filter(|(_, state)| *state == 'D').count(),
        1,
        "one stuck helper, not one per round: {helpers:?}"
    );

    let asked = Instant::now();
    let pid = Pid::from_raw(i32::try_from(agent.child.0.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let status = agent.wait_exit(Duration::from_secs(6));
    eprintln!("serve exited {:?} after SIGTERM", asked.elapsed());
    assert!(status.is_some(), "serve still running 6 s after SIGTERM");
    assert_only_a_stuck_helper_is_left(&mark);
    assert_none_left(mount, &mark);
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn a_hung_path_is_asked_again_once_its_helper_returns() {
    let mut mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    let config = config_of(&dir, &["/", &hung]);
    let mark = mark("recovery");
    let mut command = common::agent_command(&["--scope", "global", "--config", &config]);
    command.env(MARK_NAME, &mark);
    let mut agent = common::start_command(command);
    common::wait_ready(&agent.address);
    let reason = || {
        let snapshot: Value =
            serde_json::from_slice(&common::get(&agent.address, "/snapshot").body).unwrap();
        reason_for(&snapshot, &hung)
    };
    std::thread::sleep(Duration::from_millis(1500));
    assert!(reason().contains("no answer within"), "{}", reason());
    mount.abort();
    // The stuck call returns; the next round (at most a second later) asks the path again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !reason().contains("not connected") {
        assert!(Instant::now() < deadline, "never asked again: {}", reason());
        std::thread::sleep(Duration::from_millis(100));
    }
    // The returned helper was reaped: only the agent itself is left.
    let pid = agent.child.0.id();
    let left = marked_processes(&mark);
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, pid, "{left:?}");
    kill(Pid::from_raw(i32::try_from(pid).unwrap()), Signal::SIGTERM).unwrap();
    assert!(agent.wait_exit(Duration::from_secs(6)).is_some());
    assert_none_left(mount, &mark);
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn ten_snapshots_of_a_hung_mount_leave_one_helper_and_it_is_reaped_when_the_mount_recovers() {
    let mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    // Two paths on the hung mount: still one helper for the mount.
    let inner = format!("{hung}/inner");
    let config = config_of(&dir, &["/", &hung, &inner]);
    let mark = mark("ten-snapshots");
    // The slowest of three snapshots without the hung mount: a loaded machine spreads them by
    // hundreds of ms, and one that waited for the mount takes its whole 1 s timeout more.
    let normal_config = config_of(&dir, &["/"]);
    let normal = (0..3)
        .map(|_| {
            run_within(
                &["snapshot", "--scope", "global", "--config", &normal_config],
                &mark,
                Duration::from_secs(30),
            )
            .1
        })
        .max()
        .unwrap();
    for run in 0..10 {
        let (text, took) = run_within(
            &["snapshot", "--scope", "global", "--config", &config],
            &mark,
            Duration::from_secs(30),
        );
        let snapshot: Value = serde_json::from_str(&text).unwrap();
        assert!(capacity_of(&snapshot, &hung).is_null());
        assert!(capacity_of(&snapshot, &inner).is_null());
        assert!(capacity_of(&snapshot, "/")["value"].as_u64().unwrap() > 0);
        let reason = reason_for(&snapshot, &hung);
        assert!(reason.contains("no answer within"), "{reason}");
        if run > 0 {
            // Found the first one's helper stuck: asked nothing, waited for nothing.
            assert!(reason.contains("has been stuck on this mount"), "{reason}");
            assert!(
                took < normal + Duration::from_millis(800),
                "snapshot {run} took {took:?}, {normal:?} without the hung mount"
            );
        }
    }
    let stuck: Vec<_> = marked_processes(&mark)
        .into_iter()
        .filter(|(_, state)| *state == 'D')
        .collect();
    // Before the marker, each snapshot left one helper per hung path: 20 here.
    assert_eq!(stuck.len(), 1, "one stuck helper for the mount: {stuck:?}");
    assert_only_a_stuck_helper_is_left(&mark);
    // The mount recovers (its daemon ends): the helper returns and init reaps it.
    assert_none_left(mount, &mark);
    // And the next snapshot asks the path again instead of trusting the stale marker.
    let (text, _) = run_within(
        &["snapshot", "--scope", "global", "--config", &config],
        &mark,
        Duration::from_secs(30),
    );
    let snapshot: Value = serde_json::from_str(&text).unwrap();
    assert!(capacity_of(&snapshot, "/")["value"].as_u64().unwrap() > 0);
    if let Some(reason) = snapshot["extensions"]["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["reason"].as_str())
        .find(|r| r.contains(&hung))
    {
        assert!(!reason.contains("stuck on this mount"), "{reason}");
    }
}
