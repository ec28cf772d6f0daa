//! The `relay-metrics` binary end to end, on the live machine. (These live here rather than in
//! the top-level tests/ because cargo exposes a binary's path only to its own package's tests.)
//! Tests whose names end in `_as_root` create cgroups and fail, rather than skip, without root.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{assert_root, json_of, relay_metrics, Reaped};
use relay_metrics::snapshot::{ResourceMetricsSnapshot, Section};
use serde_json::Value;

fn spawn(script: &str) -> Reaped {
    Reaped(
        Command::new("sh")
            .args(["-c", script])
            .stdin(Stdio::null())
            .spawn()
            .expect("sh starts"),
    )
}

fn value(measurement: &Value) -> f64 {
    measurement["value"]
        .as_f64()
        .unwrap_or_else(|| panic!("not a measurement: {measurement}"))
}

const CATEGORY_FIELDS: [(&str, usize); 6] = [
    ("cpu", 9),
    ("memory", 14),
    ("process", 7),
    ("disk", 7),
    ("gpu", 2),
    ("network", 3),
];

#[test]
fn global_snapshot_has_relays_shape_and_default_units() {
    let output = relay_metrics(&["snapshot", "--scope", "global", "--pretty"]);
    let snapshot = json_of(&output);
    // serde_json's Value sorts keys, so Relay's key order is checked on the text itself.
    let text = String::from_utf8_lossy(&output.stdout);
    // The schema table's order (the fixture tier checks the table's order against Relay's).
    let top_level: Vec<&str> = ResourceMetricsSnapshot::INFO
        .fields
        .iter()
        .map(|field| field.name)
        .collect();
    let positions: Vec<usize> = top_level
        .iter()
        .map(|key| {
            text.find(&format!("\n  \"{key}\":"))
                .unwrap_or_else(|| panic!("{key} missing"))
        })
        .collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "key order: {positions:?}"
    );
    assert_eq!(snapshot.as_object().unwrap().len(), top_level.len());
    assert_eq!(snapshot["operating_system"], "linux");
    assert_eq!(snapshot["measurement_scope"], "global");
    for (category, fields) in CATEGORY_FIELDS {
        let object = snapshot[category]
            .as_object()
            .unwrap_or_else(|| panic!("{category} missing"));
        assert_eq!(object.len(), fields, "{category}: {object:?}");
    }
    assert_eq!(snapshot["memory"]["system_total"]["unit"], "kibibytes");
    assert_eq!(snapshot["cpu"]["user_time"]["unit"], "milliseconds");
    assert_eq!(snapshot["disk"]["read_data"]["unit"], "bytes");
    assert_eq!(
        snapshot["network"]["system"]["received_data"]["unit"],
        "bytes"
    );
    assert_eq!(snapshot["network"]["system"].as_object().unwrap().len(), 8);
    assert_eq!(snapshot["gpu"]["device_metrics"], Value::Array(vec![]));
    let sampling = &snapshot["process_sampling"];
    assert!(
        sampling["visible_processes"].as_u64().unwrap()
            >= sampling["sampled_processes"].as_u64().unwrap()
    );
    assert!(value(&snapshot["process"]["active_count"]) > 0.0);
    assert_eq!(snapshot["memory"]["resident"], Value::Null);
    let timestamp = snapshot["timestamp"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(timestamp).is_ok(),
        "{timestamp}"
    );
}

/// CPU time (utime + stime, in ticks) of one process, read independently of the collector.
fn cpu_ticks(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap()
}

/// Tests that measure CPU use run one at a time: on 2 cores they would skew each other.
static CPU_SENSITIVE: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn a_busy_child_consumes_one_processor_and_an_idle_tree_none() {
    let _serial = CPU_SENSITIVE.lock().unwrap_or_else(|e| e.into_inner());
    let busy = spawn("while :; do :; done");
    let pid = busy.0.id();
    std::thread::sleep(Duration::from_millis(100));
    let (ticks_before, started) = (cpu_ticks(pid), std::time::Instant::now());
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--pid",
        &pid.to_string(),
        "--interval-ms",
        "500",
    ]));
    let independent = (cpu_ticks(pid) - ticks_before) / 100.0 / started.elapsed().as_secs_f64();
    assert_eq!(snapshot["measurement_scope"], "process_tree");
    let rate = value(&snapshot["cpu"]["consumption_rate"]);
    eprintln!("busy loop: collector {rate} processors, kernel {independent}");
    // On an idle machine both are about 1.0; when other work shares the 2 cores the loop gets
    // less (0.17 was seen with the root tests and other builds running), so the collector is
    // held to the kernel's own accounting over about the same period, not to a fixed share.
    assert!(
        independent > 0.05,
        "the kernel counted only {independent} processors for the busy loop"
    );
    assert!(
        rate > independent / 2.0 && (rate - independent).abs() < 0.2,
        "collector {rate} vs kernel {independent}"
    );
    assert!(snapshot["disk"]["read_throughput"]["value"].is_number());
    assert_eq!(
        snapshot["process_sampling"]["field_sampled_processes"]["disk.read_throughput"],
        1
    );

    let idle = spawn("sleep 30 & sleep 30 & wait");
    std::thread::sleep(Duration::from_millis(200));
    let pid = idle.0.id().to_string();
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--pid",
        &pid,
        "--interval-ms",
        "500",
    ]));
    assert_eq!(value(&snapshot["process"]["active_count"]), 3.0);
    assert_eq!(value(&snapshot["process"]["descendant_count"]), 2.0);
    let rate = value(&snapshot["cpu"]["consumption_rate"]);
    assert!(rate < 0.05, "idle tree rate {rate}");
    assert_eq!(value(&snapshot["disk"]["read_throughput"]), 0.0);
}

/// A stopped child's counters do not move, so the snapshot must equal the kernel's files.
#[test]
fn process_values_agree_with_the_kernel_files() {
    let child = spawn("exec sleep 30");
    let pid = child.0.id();
    std::thread::sleep(Duration::from_millis(100));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    // Private memory counts pages only this process maps, so it moves when another process
    // sharing a page (another test's `sleep`) starts or exits: the snapshot is taken between
    // two equal reads of smaps_rollup.
    let private_kib = || {
        std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("Private_"))
            .map(|l| l.split_whitespace().nth(1).unwrap().parse::<f64>().unwrap())
            .sum::<f64>()
    };
    let (snapshot, private) = (0..20)
        .find_map(|_| {
            let before = private_kib();
            let snapshot = json_of(&relay_metrics(&[
                "snapshot",
                "--pid",
                &pid.to_string(),
                "--scope",
                "application_process",
            ]));
            (private_kib() == before).then_some((snapshot, before))
        })
        .expect("private memory settled within 20 tries");

    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let field = |n: usize| fields[n - 3].parse::<f64>().unwrap();
    let page_kib = 4.0; // x86-64 page size, checked below against VmRSS of the status file
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let status_kib = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<f64>()
            .unwrap()
    };
    // The exact resident size: statm and status agree; stat's rss field may lag behind.
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let statm_resident: f64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as f64;
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    let io_value = |key: &str| {
        io.lines().find(|l| l.starts_with(key)).unwrap()[key.len()..]
            .trim()
            .parse::<f64>()
            .unwrap()
    };
    let total = common::meminfo_total_kib();
    for (category, name, expected) in [
        ("process", "thread_count", field(20)),
        ("memory", "resident", statm_resident * page_kib),
        ("memory", "resident", status_kib("VmRSS:")),
        ("memory", "virtual_memory", status_kib("VmSize:")),
        ("memory", "peak_resident", status_kib("VmHWM:")),
        ("cpu", "user_time", field(14) * 10.0),
        ("process", "open_file_descriptor_count", fds),
        ("disk", "read_operations", io_value("syscr:")),
        ("disk", "write_data", io_value("write_bytes:")),
        ("memory", "system_total", total as f64),
        ("memory", "private", private),
    ] {
        assert_eq!(
            value(&snapshot[category][name]),
            expected,
            "{category}.{name}"
        );
    }
}

#[test]
fn watch_streams_fixed_rate_ndjson() {
    let output = relay_metrics(&[
        "watch",
        "--scope",
        "global",
        "--interval-ms",
        "50",
        "--count",
        "5",
    ]);
    common::assert_success(&output);
    let lines = common::json_lines(&output.stdout);
    assert_eq!(lines.len(), 5);
    let mut previous_index = None;
    for line in &lines {
        let sampler = &line["extensions"]["sampler"];
        assert_eq!(sampler["interval_usec"], 50_000);
        let index = sampler["tick_index"].as_u64().unwrap();
        assert!(
            previous_index.is_none_or(|p| index > p),
            "{index} after {previous_index:?}"
        );
        previous_index = Some(index);
    }
    assert!(lines[4]["network"]["system"]["receive_throughput"].is_object());
}

#[test]
fn run_measures_the_command_and_returns_its_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let stream = dir.path().join("stream.ndjson");
    let output = Command::new(env!("CARGO_BIN_EXE_relay-metrics"))
        .args(["run", "--no-cgroup", "--interval-ms", "50", "--output"])
        .arg(&stream)
        .args(["--", "sh", "-c", "sleep 0.3; exit 3"])
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = std::fs::read_to_string(&stream).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 4, "{} lines", lines.len());
    assert!(lines
        .iter()
        .all(|l| l["measurement_scope"] == "process_tree"));
    let last = lines.last().unwrap();
    assert!(
        last["cpu"]["total_time"].is_object(),
        "the final snapshot still sees the exited command: {last}"
    );

    let signalled = relay_metrics(&[
        "run",
        "--interval-ms",
        "20",
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]);
    assert_eq!(signalled.status.code(), Some(128 + 15));
}

#[test]
#[ignore = "root: counts creations with the eBPF programs"]
fn run_counts_every_process_the_command_creates_as_root() {
    assert_root("kernel event counters need root");
    // On the process tree: `process.lifetime_creation_count` is a tree's (in run's own cgroup
    // the same count is in `extensions.cumulative`, checked by the kernel_counts tests).
    let output = relay_metrics(&[
        "run",
        "--no-cgroup",
        "--interval-ms",
        "50",
        "--",
        "sh",
        "-c",
        "for i in $(seq 100); do /bin/true; done",
    ]);
    common::assert_success(&output);
    let last: Value = serde_json::from_slice(
        output
            .stdout
            .split(|b| *b == b'\n')
            .rfind(|l| !l.is_empty())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        last["extensions"]["kernel_events"]["active"], true,
        "{}",
        last["extensions"]["kernel_events"]
    );
    let created = value(&last["process"]["lifetime_creation_count"]);
    // 100 /bin/true plus the `seq` of the command substitution.
    assert!(created >= 100.0, "lifetime_creation_count {created}");
}

#[test]
#[ignore = "root: counts creations with the eBPF programs"]
fn global_scope_counts_processes_created_machine_wide_as_root() {
    assert_root("kernel event counters need root");
    // Starts its 20 processes once the collector has had time to attach.
    let _spawner = spawn("sleep 1.2; for i in $(seq 20); do /bin/true; done; sleep 30");
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--scope",
        "global",
        "--interval-ms",
        "2500",
    ]));
    let events = &snapshot["extensions"]["kernel_events"];
    let created = events["processes_created"].as_u64().unwrap();
    assert!(created >= 20, "processes_created {created}");
    let since = events["counting_since"].as_str().unwrap();
    chrono::DateTime::parse_from_rfc3339(since).unwrap();
    // No since-boot count of processes (threads excluded) exists: Relay's lifetime field
    // stays null rather than counting from the collector's start.
    assert_eq!(snapshot["process"]["lifetime_creation_count"], Value::Null);
}

/// Peak resident KiB of a live process that is not backed by files (heap, stacks, relocated
/// data): VmHWM less the current RssFile. File-backed pages are the binary's own code, which a
/// debug build with the agent's HTTP, OTLP and TLS dependencies maps at ~16 MiB and which the
/// page cache shares; they say nothing about where the eBPF load happened. File-backed pages
/// are not given back while the binary runs, so the difference bounds the anonymous peak.
/// `None` once the process has exited.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        line[name.len()..]
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse()
            .ok()
    };
    Some(field("VmHWM:")?.saturating_sub(field("RssFile:")?))
}

/// Runs `watch` at 1 ms for 1500 ticks on a sleeping process with `env` set; returns its peak
/// resident KiB, read from /proc until it exits (wait4's maxrss would include the reaped loader
/// child), and the last snapshot's `extensions.kernel_events`.
fn watch_peak_rss_kib(env: &[(&str, &str)]) -> (u64, Value) {
    let target = spawn("sleep 60");
    let mut watch = Command::new(env!("CARGO_BIN_EXE_relay-metrics"))
        .args(["watch", "--interval-ms", "1", "--count", "1500", "--pid"])
        .arg(target.0.id().to_string())
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let pid = watch.id();
    let mut stdout = watch.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut text).unwrap();
        text
    });
    let mut peak_kib = None;
    let mut readings = 0;
    let status = loop {
        if let Some(kib) = peak_rss_kib(pid) {
            peak_kib = Some(kib);
            readings += 1;
        }
        if let Some(status) = watch.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "watch exited with {status}");
    let text = reader.join().unwrap();
    let lines = common::json_lines(&text);
    assert_eq!(lines.len(), 1500);
    assert!(
        readings >= 10,
        "only {readings} readings of /proc/{pid}/status"
    );
    (
        peak_kib.unwrap(),
        lines[1499]["extensions"]["kernel_events"].clone(),
    )
}

/// The eBPF programs load in a short-lived child (aya parses the kernel BTF there, ~22 MiB at
/// its peak): the `watch` process's own memory peak stays under 8 MiB with kernel events on.
#[test]
#[ignore = "root: loads the eBPF programs in the loader child"]
fn watch_with_kernel_events_keeps_its_own_memory_under_8_mib_as_root() {
    assert_root("kernel event counters need root");
    let (peak_kib, events) = watch_peak_rss_kib(&[]);
    assert_eq!(events["active"], true, "{events}");
    assert!(
        peak_kib <= 8 * 1024,
        "watch peaked at {peak_kib} KiB resident beyond its file-backed pages"
    );
}

/// `RELAY_METRICS_EBPF_IN_PROCESS=1` keeps the load in the process (for tracing tools): its
/// peak then holds aya's BTF parse, which the child loader keeps out.
#[test]
#[ignore = "root: loads the eBPF programs in process"]
fn the_in_process_opt_out_loads_in_the_watch_process_as_root() {
    assert_root("kernel event counters need root");
    let (peak_kib, events) = watch_peak_rss_kib(&[("RELAY_METRICS_EBPF_IN_PROCESS", "1")]);
    assert_eq!(events["active"], true, "{events}");
    assert!(
        peak_kib > 15 * 1024,
        "watch peaked at only {peak_kib} KiB beyond its file-backed pages: was the load not in-process?"
    );
}

/// Runs the binary with `args` as nobody, with no capabilities (`setpriv`).
fn unprivileged(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(env!("CARGO_BIN_EXE_relay-metrics"))
        .args(args)
        .output()
        .expect("setpriv runs")
}

/// Without privileges the eBPF programs cannot load: the snapshot is produced all the same and
/// says why the kernel event counters are off.
#[test]
#[ignore = "root: drops to an unprivileged user"]
fn an_unprivileged_user_still_gets_a_snapshot_with_the_reason_as_root() {
    assert_root("this test drops from root to nobody");
    let output = unprivileged(&["snapshot", "--scope", "global", "--interval-ms", "100"]);
    let snapshot = json_of(&output);
    let events = &snapshot["extensions"]["kernel_events"];
    assert_eq!(events["active"], false);
    assert!(
        events["reason"]
            .as_str()
            .unwrap()
            .contains("not privileged"),
        "{events}"
    );
    assert!(value(&snapshot["process"]["active_count"]) > 0.0);
    assert!(snapshot["extensions"]["unavailable"]
        .as_array()
        .unwrap()
        .iter()
        .any(|u| u["field"] == "extensions.kernel_events"));
}

fn assert_clear_error(args: &[&str], expected: &str) {
    let output = relay_metrics(args);
    common::assert_refused(&output, expected);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stderr.lines().count(),
        1,
        "{args:?}: one line expected: {stderr}"
    );
}

#[test]
fn bad_input_gets_one_clear_error_line() {
    for (args, expected) in [
        (
            &["snapshot", "--pid", "999999999"][..],
            "process 999999999 does not exist",
        ),
        (
            &["snapshot", "--cgroup", "/relay-metrics-no-such-cgroup"],
            "does not exist",
        ),
        (
            &["snapshot", "--cgroup", "/a/../../etc"],
            "must not contain '..'",
        ),
        (
            &["snapshot", "--cgroup", "relative"],
            "cgroup_path must be absolute",
        ),
        (
            &["snapshot", "--scope", "global", "--pid", "1"],
            "drop --pid",
        ),
        (&["snapshot", "--scope", "process_tree"], "needs --pid"),
        (
            &["snapshot", "--config", "/nonexistent/relay.toml"],
            "cannot read config file",
        ),
        (
            &["run", "--", "/nonexistent/command"],
            "cannot run /nonexistent/command: command not found",
        ),
    ] {
        assert_clear_error(args, expected);
    }

    let dir = tempfile::tempdir().unwrap();
    for (name, text, expected) in [
        (
            "zero.json",
            r#"{"polling": {"interval_millis": 0}}"#,
            "invalid resource metrics config: invalid argument: resource_metrics.polling.interval_millis must be greater than zero",
        ),
        ("unknown.toml", "foo = 1\n", "unknown field `foo`"),
        (
            "family.json",
            r#"{"units": {"memory": {"resident": "seconds"}}}"#,
            "unknown variant `seconds`",
        ),
        ("garbage.conf", "{{{{", "is not valid JSON or TOML"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        assert_clear_error(&["snapshot", "--config", path.to_str().unwrap()], expected);
    }
}

#[test]
fn config_files_select_units_and_categories() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("relay.toml");
    std::fs::write(
        &path,
        "[[components]]\nkind = \"resource_metrics\"\n[components.config]\nmeasurement_scope = \"global\"\n[components.config.gpu]\nenabled = false\n[components.config.units.memory]\nsystem_total = \"mebibytes\"\n",
    )
    .unwrap();
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--config",
        path.to_str().unwrap(),
    ]));
    assert_eq!(snapshot["gpu"], Value::Null);
    assert_eq!(snapshot["memory"]["system_total"]["unit"], "mebibytes");
}

/// Removes the test's cgroups (after killing their processes) when dropped.
struct V1Cgroups(Vec<String>);

impl Drop for V1Cgroups {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

#[test]
#[ignore = "root: creates v1 cgroups under /sys/fs/cgroup"]
fn cgroup_scope_reports_v1_quota_throttling_and_memory_limit_as_root() {
    let _serial = CPU_SENSITIVE.lock().unwrap_or_else(|e| e.into_inner());
    assert_root("this test creates v1 cgroups and must run as root");
    let name = format!("relay-metrics-cli-test-{}", std::process::id());
    let cpu = format!("/sys/fs/cgroup/cpu/{name}");
    let memory = format!("/sys/fs/cgroup/memory/{name}");
    let cgroups = V1Cgroups(vec![cpu.clone(), memory.clone()]);
    std::fs::create_dir(&cpu).unwrap();
    std::fs::create_dir(&memory).unwrap();
    std::fs::write(format!("{cpu}/cpu.cfs_period_us"), "100000").unwrap();
    std::fs::write(format!("{cpu}/cpu.cfs_quota_us"), "20000").unwrap();
    std::fs::write(format!("{memory}/memory.limit_in_bytes"), "67108864").unwrap();
    let busy = spawn("while :; do :; done");
    let pid = busy.0.id().to_string();
    std::fs::write(format!("{cpu}/cgroup.procs"), &pid).unwrap();
    std::fs::write(format!("{memory}/cgroup.procs"), &pid).unwrap();
    std::thread::sleep(Duration::from_millis(500));

    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--cgroup",
        &format!("/{name}"),
        "--interval-ms",
        "500",
    ]));
    drop(busy);
    std::thread::sleep(Duration::from_millis(100));
    drop(cgroups);

    assert_eq!(snapshot["measurement_scope"], "cgroup");
    assert!(
        value(&snapshot["cpu"]["throttled_time"]) > 0.0,
        "{}",
        snapshot["cpu"]
    );
    let throttled = snapshot["cpu"]["limit_events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["resource"] == "cpu" && e["event"] == "throttled")
        .expect("a cpu/throttled event counter");
    assert!(value(&throttled["count"]) > 0.0);
    assert_eq!(value(&snapshot["cpu"]["effective_limit"]), 0.2);
    let rate = value(&snapshot["cpu"]["consumption_rate"]);
    assert!(
        (0.1..=0.3).contains(&rate),
        "a 20% quota allows about 0.2 LP, got {rate}"
    );
    assert_eq!(
        snapshot["memory"]["limit"],
        serde_json::json!({"value": 65536, "unit": "kibibytes"})
    );
    assert_eq!(value(&snapshot["process"]["active_count"]), 1.0);
    let report = &snapshot["extensions"]["cgroups"][0];
    assert_eq!(report["role"], "target");
    assert_eq!(report["cpu_version"], "v1");
}

/// `bench --process-source both` measures the task-iterator and procfs paths side by side; as
/// root on a kernel that allows it the iterator serves, and each path says which it was.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn bench_compares_the_iterator_and_procfs_paths_as_root() {
    assert_root("the task iterator needs root");
    let output = relay_metrics(&[
        "bench",
        "--scope",
        "global",
        "--iterations",
        "5",
        "--process-source",
        "both",
    ]);
    let report = json_of(&output);
    assert_eq!(report["bpf_iter"]["process_source"], "bpf_iter", "{report}");
    assert_eq!(report["bpf_iter"]["process_source_reason"], Value::Null);
    assert_eq!(report["procfs"]["process_source"], "procfs");
    assert!(report["procfs"]["process_source_reason"]
        .as_str()
        .unwrap()
        .contains("procfs"));
    for path in ["bpf_iter", "procfs"] {
        assert!(report[path]["median_us"].as_f64().unwrap() > 0.0);
        assert!(report[path]["processes"].as_u64().unwrap() > 1);
    }
}

/// Without privileges the iterator cannot load: procfs serves and the snapshot says why; forcing
/// the iterator is then a clear error.
#[test]
#[ignore = "root: drops to an unprivileged user"]
fn an_unprivileged_user_gets_procfs_with_the_reason_as_root() {
    assert_root("this test drops from root to nobody");
    let snapshot = json_of(&unprivileged(&["snapshot", "--scope", "global"]));
    let collector = &snapshot["extensions"]["collector"];
    assert_eq!(collector["process_source"], "procfs", "{collector}");
    assert!(
        collector["process_source_reason"]
            .as_str()
            .unwrap()
            .contains("not permitted"),
        "{collector}"
    );
    let forced = unprivileged(&[
        "bench",
        "--scope",
        "global",
        "--iterations",
        "1",
        "--process-source",
        "bpf_iter",
    ]);
    assert!(!forced.status.success());
    let stderr = String::from_utf8_lossy(&forced.stderr);
    assert!(
        stderr.contains("\"bpf_iter\"") && !stderr.contains("panicked"),
        "{stderr}"
    );
}

/// The descriptor count of the collector's own process is what the process opened itself: the
/// eBPF programs' descriptors (maps, programs, links: some 38) and the files held to read the
/// kernel are left out, as Relay, which holds none, does not count them. The process is started
/// with exactly five descriptors (stdin, stdout, stderr, and two more) and opens none of its
/// own; each snapshot must count five, with the programs loaded in the loader
/// child or in the process, and per-process values from procfs or the task iterator.
#[test]
#[ignore = "root: loads the eBPF programs"]
fn the_own_descriptor_count_leaves_out_the_collectors_descriptors_as_root() {
    assert_root("kernel event counters need root");
    let dir = tempfile::tempdir().unwrap();
    for (in_process, source) in [("0", "procfs"), ("1", "procfs"), ("0", "bpf_iter")] {
        let config = dir.path().join("config.json");
        std::fs::write(
            &config,
            format!(r#"{{"extensions": {{"process_source": "{source}"}}}}"#),
        )
        .unwrap();
        // bash closes whatever else it inherited (a build's jobserver pipes, say).
        let output = Command::new("bash")
            .args([
                "-c",
                r#"for fd in /proc/$$/fd/*; do
                     case ${fd##*/} in 0|1|2) ;; *) eval "exec ${fd##*/}>&-" ;; esac
                   done
                   exec 7</dev/null 8</dev/null
                   exec "$0" watch --config "$1" --scope process_tree --pid $$ --interval-ms 100 --count 5"#,
                env!("CARGO_BIN_EXE_relay-metrics"),
            ])
            .arg(&config)
            .env("RELAY_METRICS_EBPF_IN_PROCESS", in_process)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        common::assert_success(&output);
        let lines: Vec<Value> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert_eq!(lines.len(), 5);
        for snapshot in &lines {
            let extensions = &snapshot["extensions"];
            assert_eq!(extensions["kernel_events"]["active"], true, "{extensions}");
            assert_eq!(
                extensions["collector"]["process_source"], source,
                "{extensions}"
            );
            assert_eq!(
                snapshot["process"]["open_file_descriptor_count"]["value"], 5,
                "in process: {in_process}, {source}"
            );
        }
    }
}
