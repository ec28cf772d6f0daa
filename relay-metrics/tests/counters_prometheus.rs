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

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_address, start_agent, wait_ready, Reaped};
use serde_json::Value;

/// How long Prometheus scrapes the churn.
const CHURN: Duration = Duration::from_secs(120);

/// A cgroup of the test's own in every v1 hierarchy the counters read (or on v2), removed at
/// the end.
struct TestCgroup {
    dirs: Vec<PathBuf>,
    path: String,
}

impl TestCgroup {
    fn new() -> Self {
        let path = format!("/relay-metrics-test-counters-{}", std::process::id());
        let root = std::path::Path::new("/sys/fs/cgroup");
        let mut dirs = Vec::new();
        if root.join("cgroup.controllers").exists() {
            dirs.push(root.join(&path[1..]));
        } else {
            for hierarchy in ["cpuacct", "memory", "blkio", "pids"] {
                if root.join(hierarchy).join("cgroup.procs").exists() {
                    dirs.push(root.join(hierarchy).join(&path[1..]));
                }
            }
        }
        for dir in &dirs {
            std::fs::create_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        Self { dirs, path }
    }

    fn enter(&self, pid: u32) {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            for _ in 0..250 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The `data.result` of an instant query, retried until Prometheus answers (up to 30 s).
fn query(web: &str, promql: &str) -> Vec<Value> {
    let path = format!("/api/v1/query?query={}", encode(promql));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut stream) = TcpStream::connect(web) {
            stream
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            let _ = write!(
                stream,
                "GET {path} HTTP/1.1\r\nHost: {web}\r\nConnection: close\r\n\r\n"
            );
            let mut response = String::new();
            let _ = stream.read_to_string(&mut response);
            if let Some((_, body)) = response.split_once("\r\n\r\n") {
                if let (Some(start), Some(end)) = (body.find('{'), body.rfind('}')) {
                    let answer: Value =
                        serde_json::from_str(&body[start..=end]).unwrap_or(Value::Null);
                    if answer["status"] == "success" {
                        return answer["data"]["result"].as_array().cloned().unwrap();
                    }
                }
            }
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus did not answer {promql}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
#[ignore = "root: creates a cgroup; tools: prometheus (Debian package prometheus); ~2.5 min"]
fn no_counter_family_resets_under_process_churn() {
    common::assert_root("it creates a cgroup");
    let cgroup = TestCgroup::new();
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

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    let targets: Vec<String> = agents.iter().map(|a| format!("'{}'", a.address)).collect();
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: relay\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .unwrap();
    let web = free_address();
    let _prometheus = Reaped(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus, installed by scripts/install-deps.sh)"),
    );
    // Scraping has begun once every agent is up.
    let deadline = Instant::now() + Duration::from_secs(60);
    while query(&web, "sum(up)")
        .first()
        .and_then(|r| r["value"][1].as_str())
        != Some("3")
    {
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped the three agents"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(CHURN);

    // The churn did move the live values (else the check below proves nothing).
    let spread = query(
        &web,
        "max_over_time(relay_metrics_processes{scope=\"process_tree\"}[10m]) \
         - min_over_time(relay_metrics_processes{scope=\"process_tree\"}[10m])",
    );
    let spread: f64 = spread[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(
        spread >= 2.0,
        "the process tree never grew: spread {spread}"
    );

    let mut problems = Vec::new();
    for name in &counters {
        let samples = query(&web, &format!("sum(count_over_time({name}[10m]))"));
        let samples: f64 = samples
            .first()
            .and_then(|r| r["value"][1].as_str())
            .map_or(0.0, |v| v.parse().unwrap());
        // Two minutes at one scrape a second: at least half of them, even on a loaded machine.
        if samples < 60.0 {
            problems.push(format!("{name}: only {samples} samples scraped"));
        }
        for series in query(&web, &format!("resets({name}[10m]) > 0")) {
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
