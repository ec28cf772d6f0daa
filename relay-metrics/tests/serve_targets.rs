//! `serve --cgroups`: cgroups measured one by one, on the live host as root. The tests make
//! their own cgroups (named with the test process's pid, in every hierarchy they need: v1
//! `memory`, `cpu`, `cpuacct`, `pids` on hybrid hosts, the unified one on pure v2 hosts) and
//! remove them when done.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{
    assert_quiet, assert_root, fake_api_socket, sequence, snapshot, snapshot_from, start_agent,
    start_command, wait_ready, Agent,
};
use serde_json::Value;

const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// The hierarchies a test cgroup is made in.
fn hierarchies() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    let v1: Vec<PathBuf> = ["memory", "cpu", "cpuacct", "pids"]
        .iter()
        .map(|c| base.join(c))
        .filter(|p| p.join("cgroup.procs").exists())
        .collect();
    if v1.is_empty() {
        vec![base.to_path_buf()]
    } else {
        v1
    }
}

/// A cgroup made in every hierarchy, removed (with its children, their processes killed) on
/// drop.
struct TestCgroup {
    path: String,
    children: Vec<Child>,
}

impl TestCgroup {
    fn new(path: &str) -> Self {
        for hierarchy in hierarchies() {
            std::fs::create_dir_all(hierarchy.join(&path[1..]))
                .unwrap_or_else(|error| panic!("mkdir {path}: {error}"));
        }
        Self {
            path: path.to_owned(),
            children: Vec::new(),
        }
    }

    fn dir(&self, hierarchy: &str) -> PathBuf {
        Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .join(&self.path[1..])
    }

    /// Starts `sleep 600` inside (it joins before `exec`, so its memory is charged here).
    fn spawn_sleep(&mut self) -> u32 {
        self.spawn_shell("exec sleep 600")
    }

    /// Starts `sh -c SCRIPT` inside (it joins first); returns its pid.
    fn spawn_shell(&mut self, script: &str) -> u32 {
        let joins: Vec<String> = hierarchies()
            .iter()
            .map(|h| {
                format!(
                    "echo $$ > {}/cgroup.procs",
                    h.join(&self.path[1..]).display()
                )
            })
            .collect();
        let script = format!("{} && {script}", joins.join(" && "));
        let child = Command::new("sh").args(["-c", &script]).spawn().unwrap();
        let pid = child.id();
        self.children.push(child);
        // Joined once the cgroup lists it (or it already ended).
        let procs = hierarchies()[0].join(&self.path[1..]).join("cgroup.procs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(&procs)
            .unwrap()
            .lines()
            .any(|line| line == pid.to_string())
            && Path::new(&format!("/proc/{pid}")).exists()
        {
            assert!(Instant::now() < deadline, "{pid} never joined {procs:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(100));
        pid
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for hierarchy in hierarchies() {
            remove_tree(&hierarchy.join(&self.path[1..]));
        }
    }
}

/// Removes a cgroup directory and its subdirectories, deepest first.
fn remove_tree(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_tree(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

fn measured(snapshot: &Value) -> Vec<String> {
    snapshot["extensions"]["targets"]["cgroups"]
        .as_array()
        .expect("extensions.targets.cgroups")
        .iter()
        .map(|c| c["cgroup"].as_str().unwrap().to_owned())
        .collect()
}

/// The value of the series `name{labels}` (labels exactly as written).
fn series(exposition: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map(|value| value.parse().unwrap())
}

#[test]
#[ignore = "root: makes cgroups; tools: promtool (Debian package prometheus)"]
fn each_matching_cgroup_gets_labelled_series_and_discovery_follows_changes() {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let container_path = format!("{parent_path}/docker-{ID}.scope");
    let mut container = TestCgroup::new(&container_path);
    let v1 = container.dir("memory").exists();
    if v1 {
        std::fs::write(
            container.dir("memory").join("memory.limit_in_bytes"),
            "67108864",
        )
        .unwrap();
        std::fs::write(container.dir("cpu").join("cpu.cfs_quota_us"), "50000").unwrap();
        std::fs::write(container.dir("cpu").join("cpu.cfs_period_us"), "100000").unwrap();
    } else {
        std::fs::write(container.dir("").join("memory.max"), "67108864").unwrap();
        std::fs::write(container.dir("").join("cpu.max"), "50000 100000").unwrap();
    }
    container.spawn_sleep();
    let plain = TestCgroup::new(&format!("{parent_path}/plain"));

    let pattern = format!("{parent_path}/*");
    let agent = start_agent(&["--cgroups", &pattern, "/relay-no-such-cgroup-*"]);
    wait_ready(&agent.address);
    let first = snapshot_from(&agent, 2);
    assert_eq!(
        measured(&first),
        vec![container_path.clone(), format!("{parent_path}/plain")]
    );
    let reasons = first["extensions"]["targets"]["reasons"].clone();
    assert!(
        reasons.as_array().unwrap().iter().any(|r| r
            .as_str()
            .unwrap()
            .contains("\"/relay-no-such-cgroup-*\" matches no cgroup")),
        "{reasons}"
    );

    let metrics = common::get(&agent.address, "/metrics").text();
    let labels = format!(
        "cgroup=\"{container_path}\",unit=\"docker-{ID}.scope\",container_id=\"{ID}\",container_runtime=\"docker\""
    );
    assert_eq!(
        series(&metrics, "relay_metrics_cgroup_memory_limit_bytes", &labels),
        Some(67_108_864.0),
        "{metrics}"
    );
    assert_eq!(
        series(&metrics, "relay_metrics_cgroup_cpu_limit_cores", &labels),
        Some(0.5)
    );
    assert_eq!(
        series(&metrics, "relay_metrics_cgroup_processes", &labels),
        Some(1.0)
    );
    assert!(series(&metrics, "relay_metrics_cgroup_memory_usage_bytes", &labels).unwrap() > 0.0);
    assert!(
        series(
            &metrics,
            "relay_metrics_cgroup_resident_memory_bytes",
            &labels
        )
        .unwrap()
            > 0.0
    );
    assert_eq!(
        series(
            &metrics,
            "relay_metrics_cgroup_memory_events_total",
            &format!("{labels},event=\"oom_kill\"")
        ),
        Some(0.0)
    );
    assert_eq!(series(&metrics, "relay_metrics_targets", ""), None);
    assert!(metrics.contains("\nrelay_metrics_targets 2\n"));
    assert!(metrics.contains("\nrelay_metrics_targets_dropped 0\n"));
    let (passed, printed) = common::promtool_check(&metrics);
    assert!(passed && printed.is_empty(), "promtool: {printed}");

    // A new cgroup is in the first snapshot taken after it was made; a removed one is gone
    // from the first snapshot taken after its removal.
    let before = sequence(&snapshot(&agent));
    let late = TestCgroup::new(&format!("{parent_path}/late"));
    let after = snapshot_from(&agent, before + 2);
    assert!(
        measured(&after).contains(&late.path),
        "{:?}",
        measured(&after)
    );
    let plain_path = plain.path.clone();
    drop(plain);
    let before = sequence(&snapshot(&agent));
    let after = snapshot_from(&agent, before + 2);
    assert!(!measured(&after).contains(&plain_path));
    let metrics = common::get(&agent.address, "/metrics").text();
    assert!(!metrics.contains(&format!("cgroup=\"{plain_path}\"")));
    assert_quiet(&agent);
}

#[test]
#[ignore = "root: makes cgroups"]
fn max_targets_drops_the_last_in_path_order_with_a_warning_and_a_gauge() {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-max-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let _children: Vec<TestCgroup> = (0..5)
        .map(|i| TestCgroup::new(&format!("{parent_path}/c{i}")))
        .collect();
    let pattern = format!("{parent_path}/*");
    let agent = start_agent(&["--cgroups", &pattern, "--max-targets", "3"]);
    let snapshot = snapshot_from(&agent, 2);
    assert_eq!(
        measured(&snapshot),
        (0..3)
            .map(|i| format!("{parent_path}/c{i}"))
            .collect::<Vec<_>>()
    );
    assert_eq!(snapshot["extensions"]["targets"]["dropped"], 2);
    agent.expect_line("more cgroups match than --max-targets");
    let metrics = common::get(&agent.address, "/metrics").text();
    assert!(
        metrics.contains("\nrelay_metrics_targets_dropped 2\n"),
        "{metrics}"
    );
}

/// The processes' count of each measured cgroup in `snapshot`, by path.
fn process_counts(snapshot: &Value) -> Vec<(String, u64)> {
    snapshot["extensions"]["targets"]["cgroups"]
        .as_array()
        .expect("extensions.targets.cgroups")
        .iter()
        .map(|c| {
            let count = c["processes"]["count"].as_u64().expect("processes.count");
            (c["cgroup"].as_str().unwrap().to_owned(), count)
        })
        .collect()
}

/// Membership comes from the task iterator's records (each names the process's cgroup in the
/// walked hierarchy); a process moved to another measured cgroup, or into a child of one, is
/// grouped there from the first snapshot taken after the move.
#[test]
#[ignore = "root: makes cgroups, loads the BPF task iterator"]
fn a_process_moved_between_measured_cgroups_is_regrouped_in_the_next_snapshot() {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-move-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let mut a = TestCgroup::new(&format!("{parent_path}/a"));
    let b = TestCgroup::new(&format!("{parent_path}/b"));
    let inner = TestCgroup::new(&format!("{parent_path}/b/inner"));
    let pid = a.spawn_sleep();
    a.spawn_sleep();
    let agent = start_agent(&[
        "--cgroups",
        &format!("{parent_path}/*"),
        "--interval-ms",
        "200",
    ]);
    wait_ready(&agent.address);
    let first = snapshot_from(&agent, 2);
    assert_eq!(
        first["extensions"]["collector"]["process_source"], "bpf_iter",
        "{}",
        first["extensions"]["collector"]
    );
    assert_eq!(
        process_counts(&first),
        [(a.path.clone(), 2), (b.path.clone(), 0)]
    );
    let move_to = |cgroup: &TestCgroup| {
        for hierarchy in hierarchies() {
            std::fs::write(
                hierarchy.join(&cgroup.path[1..]).join("cgroup.procs"),
                pid.to_string(),
            )
            .unwrap();
        }
    };
    move_to(&b);
    let after = snapshot_from(&agent, sequence(&snapshot(&agent)) + 2);
    assert_eq!(
        process_counts(&after),
        [(a.path.clone(), 1), (b.path.clone(), 1)]
    );
    // Into a child of a measured cgroup: still in its subtree.
    move_to(&inner);
    let after = snapshot_from(&agent, sequence(&snapshot(&agent)) + 2);
    assert_eq!(
        process_counts(&after),
        [(a.path.clone(), 1), (b.path.clone(), 1)]
    );
    move_to(&a);
    let after = snapshot_from(&agent, sequence(&snapshot(&agent)) + 2);
    assert_eq!(
        process_counts(&after),
        [(a.path.clone(), 2), (b.path.clone(), 0)]
    );
    drop(inner);
    assert_quiet(&agent);
}

#[test]
#[ignore = "root: makes cgroups"]
fn without_patterns_the_depth_selects_cgroups_holding_processes() {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-depth-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let mut busy = TestCgroup::new(&format!("{parent_path}/busy"));
    busy.spawn_sleep();
    let _empty = TestCgroup::new(&format!("{parent_path}/empty"));
    let agent = start_agent(&["--cgroup-depth", "2", "--interval-ms", "1000"]);
    let snapshot = snapshot_from(&agent, 2);
    let cgroups = measured(&snapshot);
    // The parent holds a process below it; the empty cgroup none.
    assert!(cgroups.contains(&parent_path), "{cgroups:?}");
    assert!(cgroups.contains(&busy.path), "{cgroups:?}");
    assert!(!cgroups.contains(&format!("{parent_path}/empty")));
    assert!(cgroups.iter().all(|c| c.matches('/').count() <= 2));
}

#[test]
fn an_invalid_pattern_is_a_usage_error() {
    let output = Command::new(common::binary())
        .args(["serve", "--cgroups", "system.slice/*"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("must be absolute"), "{stderr}");
}

#[test]
#[ignore = "root: makes cgroups and runs the agent as nobody"]
fn an_unreadable_cgroup_is_reported_and_the_others_are_measured() {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-unreadable-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let _open = TestCgroup::new(&format!("{parent_path}/open"));
    let closed = TestCgroup::new(&format!("{parent_path}/closed"));
    let _inner = TestCgroup::new(&format!("{parent_path}/closed/inner"));
    for hierarchy in hierarchies() {
        let dir = hierarchy.join(&closed.path[1..]);
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .unwrap();
    }
    let pattern = format!("{parent_path}/**");
    let mut command = Command::new("setpriv");
    command.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        common::binary(),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--interval-ms",
        "200",
        "--cgroups",
        &pattern,
    ]);
    let agent = start_command(command);
    let first = snapshot_from(&agent, 2);
    let later = snapshot_from(&agent, sequence(&first) + 3);
    let cgroups = measured(&later);
    assert!(
        cgroups.contains(&format!("{parent_path}/open")),
        "{cgroups:?}"
    );
    let reasons = later["extensions"]["targets"]["reasons"].to_string();
    assert!(
        reasons.contains(&format!("{parent_path}/closed")) && reasons.contains("ermission denied"),
        "{reasons}"
    );
    // Reported in the snapshot, not logged every period.
    assert_quiet(&agent);
}

#[test]
#[ignore = "root: makes cgroups; tools: promtool (Debian package prometheus)"]
fn churn_of_a_thousand_cgroups_leaves_valid_scrapes_no_leaked_descriptors_and_no_errors() {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-churn-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let pattern = format!("{parent_path}/**");
    let agent = start_agent(&["--cgroups", &pattern, "--interval-ms", "50"]);
    wait_ready(&agent.address);
    snapshot_from(&agent, 3);
    let fd_dir = format!("/proc/{}/fd", agent.child.0.id());
    let fds = || std::fs::read_dir(&fd_dir).unwrap().count();
    let fds_before = fds();

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let stop = std::sync::Arc::clone(&stop);
        let address = agent.address.clone();
        std::thread::spawn(move || {
            let mut bodies = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                bodies.push(common::get(&address, "/metrics").text());
                std::thread::sleep(Duration::from_millis(40));
            }
            bodies
        })
    };
    let hierarchies = hierarchies();
    let started = Instant::now();
    for cycle in 0..1000 {
        let relative = format!("{}/c{cycle}", &parent_path[1..]);
        for hierarchy in &hierarchies {
            std::fs::create_dir(hierarchy.join(&relative)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
        for hierarchy in &hierarchies {
            std::fs::remove_dir(hierarchy.join(&relative)).unwrap();
        }
    }
    let churn = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let bodies = scraper.join().unwrap();
    assert!(bodies.len() >= 10, "only {} scrapes", bodies.len());
    for body in &bodies {
        let (passed, printed) = common::promtool_check(body);
        assert!(passed && printed.is_empty(), "promtool: {printed}\n{body}");
    }
    // The churned cgroups are gone from the series, and so are their descriptors.
    let settled = snapshot_from(&agent, sequence(&snapshot(&agent)) + 2);
    assert_eq!(measured(&settled), vec![parent_path.clone()]);
    let fds_after = fds();
    assert!(
        fds_after <= fds_before + 2,
        "descriptors: {fds_before} before the churn, {fds_after} after"
    );
    eprintln!("{} scrapes during {churn:?} of churn", bodies.len());
    assert_quiet(&agent);
}

#[test]
#[ignore = "root: makes cgroups"]
fn a_docker_socket_that_hangs_answers_garbage_or_is_missing_gives_a_reason_and_never_stalls_sampling(
) {
    assert_root("makes cgroups");
    let parent_path = format!("/relay-targets-docker-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let _container = TestCgroup::new(&format!("{parent_path}/docker-{ID}.scope"));
    let dir = tempfile::tempdir().unwrap();
    let hang = dir.path().join("hang.sock");
    fake_api_socket(&hang, None);
    let garbage = dir.path().join("garbage.sock");
    fake_api_socket(
        &garbage,
        Some("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nnot json!!!"),
    );
    let not_http = dir.path().join("not-http.sock");
    fake_api_socket(&not_http, Some("\x00\x01garbage\r\n\r\n"));
    let missing = dir.path().join("missing.sock");
    let pattern = format!("{parent_path}/*");
    let cases = [
        (&hang, "no complete answer within 5s"),
        (&garbage, "the answer is not a container list"),
        (&not_http, "no valid HTTP answer"),
        (&missing, "cannot connect"),
    ];
    let agents: Vec<(Agent, &str)> = cases
        .iter()
        .map(|(socket, expected)| {
            let agent = start_agent(&[
                "--cgroups",
                &pattern,
                "--interval-ms",
                "100",
                "--docker-socket",
                socket.to_str().unwrap(),
            ]);
            (agent, *expected)
        })
        .collect();
    for (agent, expected) in &agents {
        let deadline = Instant::now() + Duration::from_secs(60);
        let snapshot = loop {
            let snapshot = snapshot_from(agent, 1);
            let reasons = snapshot["extensions"]["targets"]["reasons"].to_string();
            if reasons.contains(expected) {
                break snapshot;
            }
            assert!(
                Instant::now() < deadline,
                "no reason {expected:?}: {reasons}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        // The container is measured, labelled from its path, without a name.
        let container = &snapshot["extensions"]["targets"]["cgroups"][0];
        assert_eq!(container["labels"]["container_id"], ID);
        assert_eq!(container["labels"]["container_name"], Value::Null);
    }
    // Sampling goes on while the API is asked again (every second; a hung answer takes 5 s):
    // over 6 s each agent takes snapshots throughout, not one after a stall.
    let agents: Vec<(&Agent, &str)> = agents.iter().map(|(a, e)| (a, *e)).collect();
    common::assert_sampling_goes_on(&agents);
}

#[test]
#[ignore = "root: makes cgroups, loads eBPF; tools: promtool (Debian package prometheus)"]
fn kernel_events_are_keyed_by_cgroup_with_a_run_queue_histogram_and_oom_victims() {
    assert_root("makes cgroups and loads eBPF");
    let parent_path = format!("/relay-targets-events-{}", std::process::id());
    let _parent = TestCgroup::new(&parent_path);
    let mut busy = TestCgroup::new(&format!("{parent_path}/busy"));
    let mut oom = TestCgroup::new(&format!("{parent_path}/oom"));
    let v1 = oom.dir("memory").exists();
    let memory_dir = if v1 { oom.dir("memory") } else { oom.dir("") };
    if v1 {
        std::fs::write(memory_dir.join("memory.limit_in_bytes"), "33554432").unwrap();
        let memsw = memory_dir.join("memory.memsw.limit_in_bytes");
        if memsw.exists() {
            std::fs::write(memsw, "33554432").unwrap();
        }
    } else {
        std::fs::write(memory_dir.join("memory.max"), "33554432").unwrap();
        let _ = std::fs::write(memory_dir.join("memory.swap.max"), "0");
    }
    let pattern = format!("{parent_path}/*");
    let agent = start_agent(&["--cgroups", &pattern]);
    snapshot_from(&agent, 2);
    // Short processes and run-queue waits in `busy`.
    busy.spawn_shell("for i in $(seq 200); do /bin/true; done; exec sleep 600");
    // A process of `oom` that lives through a few snapshots (victims are attributed by the
    // membership seen at a snapshot), then allocates past the limit and is killed.
    let victim_script =
        "exec python3 -c 'import time; time.sleep(1); b = bytearray(256 << 20); time.sleep(60)'";
    let victim = oom.spawn_shell(victim_script);
    let deadline = Instant::now() + Duration::from_secs(30);
    let (busy_events, oom_report) = loop {
        let snapshot = snapshot(&agent);
        let cgroups = snapshot["extensions"]["targets"]["cgroups"]
            .as_array()
            .unwrap()
            .clone();
        let find = |path: &str| cgroups.iter().find(|c| c["cgroup"] == path).cloned();
        if let (Some(b), Some(o)) = (find(&busy.path), find(&oom.path)) {
            let created = b["kernel_events"]["processes_created"]
                .as_u64()
                .unwrap_or(0);
            let victims = o["kernel_events"]["oom_victims"]
                .as_array()
                .map_or(0, Vec::len);
            if created >= 100 && victims >= 1 {
                break (b["kernel_events"].clone(), o);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no events within 30 s: {snapshot}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        busy_events["run_queue_count"].as_u64().unwrap() > 0,
        "{busy_events}"
    );
    let victim_record = &oom_report["kernel_events"]["oom_victims"][0];
    assert_eq!(victim_record["pid"].as_u64(), Some(u64::from(victim)));
    assert!(oom_report["memory_events"]["oom_kill"].as_u64().unwrap() >= 1);

    let metrics = common::get(&agent.address, "/metrics").text();
    let busy_labels = format!("cgroup=\"{}\"", busy.path);
    assert!(
        series(
            &metrics,
            "relay_metrics_cgroup_processes_created_total",
            &busy_labels
        )
        .unwrap()
            >= 100.0
    );
    let count = series(
        &metrics,
        "relay_metrics_cgroup_run_queue_delay_seconds_count",
        &busy_labels,
    )
    .unwrap();
    let inf = series(
        &metrics,
        "relay_metrics_cgroup_run_queue_delay_seconds_bucket",
        &format!("{busy_labels},le=\"+Inf\""),
    )
    .unwrap();
    assert!(count > 0.0 && inf == count, "{count} {inf}");
    assert!(
        series(
            &metrics,
            "relay_metrics_cgroup_memory_events_total",
            &format!("cgroup=\"{}\",event=\"oom_kill\"", oom.path)
        )
        .unwrap()
            >= 1.0
    );
    let (passed, printed) = common::promtool_check(&metrics);
    assert!(passed && printed.is_empty(), "promtool: {printed}");
}
