//! Counters never go down: a real Prometheus server (Debian's `prometheus`, installed by
//! scripts/install-deps.sh) scrapes three agents every second for two minutes (global scope
//! with the test's cgroup also measured one by one, the process tree of a shell that keeps
//! starting and reaping short CPU-bound processes, and a cgroup of the test's own that holds
//! that shell), then is asked for `resets()` over every family the agents type `counter`. Each
//! must have been scraped, and none may have reset. (Main before the counter audit, under the
//! same churn: 22 resets of `relay_metrics_cpu_user_seconds_total` in global scope and 49 in
//! the process tree in two minutes.)
//!
//! This is the suite's one long test (about 2.5 minutes).

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{start_agent, wait_ready, Prometheus, Reaped, TestCgroup};

/// How long Prometheus scrapes the churn.
const CHURN: Duration = Duration::from_secs(120);

#[test]
#[ignore = "root: creates a cgroup; tools: prometheus (Debian package prometheus); ~2.5 min"]
fn no_counter_family_resets_under_process_churn() {
    common::assert_root("it creates a cgroup");
    let cgroup = TestCgroup::new("counters", &["cpuacct", "memory", "blkio", "pids"]);
    // Four short CPU-bound processes at a time, started and reaped over and over: the live sums
    // of the processes in scope rise and fall with them.
    let churn = Reaped(
        Command::new("sh")
            .args([
                "-c",
                "while :; do for k in 1 2 3 4; do \
                 sh -c 'i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done' & done; wait; done",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let shell = churn.0.id();
    cgroup.enter(shell);
    let shell_pid = shell.to_string();
    let agents = [
        // With the test's cgroup measured one by one too (`relay_metrics_cgroup_*`).
        start_agent(&[
            "--scope",
            "global",
            "--interval-ms",
            "500",
            "--cgroups",
            &cgroup.path,
        ]),
        start_agent(&["--pid", &shell_pid, "--interval-ms", "500"]),
        start_agent(&["--cgroup", &cgroup.path, "--interval-ms", "500"]),
    ];
    let mut counters = BTreeSet::new();
    for agent in &agents {
        wait_ready(&agent.address);
        let metrics = common::get(&agent.address, "/metrics").text();
        for line in metrics.lines() {
            if let Some(name) = line
                .strip_prefix("# TYPE ")
                .and_then(|rest| rest.strip_suffix(" counter"))
            {
                counters.insert(name.to_owned());
            }
        }
    }
    for expected in [
        "relay_metrics_cpu_user_seconds_total",
        "relay_metrics_cpu_system_seconds_total",
        "relay_metrics_snapshots_total",
        "relay_metrics_cgroup_cpu_usage_seconds_total",
        "process_cpu_seconds_total",
    ] {
        assert!(
            counters.contains(expected),
            "{expected} is not a counter: {counters:?}"
        );
    }

    let addresses: Vec<&str> = agents.iter().map(|a| a.address.as_str()).collect();
    let prometheus = Prometheus::start(&addresses);
    // Scraping has begun once every agent is up.
    let deadline = Instant::now() + Duration::from_secs(60);
    while prometheus.first_value("sum(up)") != Some(3.0) {
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped the three agents"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(CHURN);

    // The churn did move the live values (else the check below proves nothing).
    let spread = prometheus
        .first_value(
            "max_over_time(relay_metrics_processes{scope=\"process_tree\"}[10m]) \
             - min_over_time(relay_metrics_processes{scope=\"process_tree\"}[10m])",
        )
        .unwrap();
    assert!(
        spread >= 2.0,
        "the process tree never grew: spread {spread}"
    );

    let mut problems = Vec::new();
    for name in &counters {
        let samples = prometheus
            .first_value(&format!("sum(count_over_time({name}[10m]))"))
            .unwrap_or(0.0);
        // Two minutes at one scrape a second: at least half of them, even on a loaded machine.
        if samples < 60.0 {
            problems.push(format!("{name}: only {samples} samples scraped"));
        }
        for series in prometheus.query(&format!("resets({name}[10m]) > 0")) {
            problems.push(format!(
                "{name}{} reset {} times",
                series["metric"],
                series["value"][1].as_str().unwrap_or("?")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    drop(churn);
}

#[test]
fn every_family_on_metrics_is_in_the_audit_with_its_type() {
    let audit = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/METRICS.md"),
    )
    .unwrap();
    let mut missing = Vec::new();
    let own = std::process::id().to_string();
    for scope in [
        &["--scope", "global", "--cgroup-depth", "2"][..],
        &["--pid", own.as_str()][..],
    ] {
        let agent = start_agent(scope);
        wait_ready(&agent.address);
        let metrics = common::get(&agent.address, "/metrics").text();
        let mut families = 0;
        for line in metrics.lines() {
            let Some((name, kind)) = line
                .strip_prefix("# TYPE ")
                .and_then(|rest| rest.split_once(' '))
            else {
                continue;
            };
            families += 1;
            if !audit.contains(&format!("| `{name}` | {kind} |")) {
                missing.push(format!("{name} ({kind})"));
            }
        }
        assert!(families > 20, "{metrics}");
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "families on /metrics without their line in docs/METRICS.md's audit: {missing:?}"
    );
}
