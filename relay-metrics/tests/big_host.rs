//! The big-host tier. NEEDS ROOT: each test builds part of a large host on this machine (300
//! veth pairs, 5,000 processes in one cgroup, 2,000 cgroups, 1,000 mounts, a process with a
//! long command line and many threads), takes snapshots, `serve` scrapes and a `run`, and
//! compares every value with an oracle that reads the whole kernel file independently (a few
//! lines of Python, reading until the end of file). Each compared value prints one table row:
//! `ROW | what | ours | oracle | equal`. Values that move while the test runs (a counter with
//! traffic) are bracketed by an oracle read before and one after.

#![expect(
    clippy::expect_used,
    reason = "the tier fails loudly when the host cannot be built or the binary's output is broken"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{assert_root, assert_success, json_of, relay_metrics, Reaped};
use serde_json::Value;

/// `/proc/net/dev` read to its end: interface → the six counters Relay reports, in the order
/// of [`COUNTERS`].
const NET_DEV_ORACLE: &str = r#"
import json
counters = {}
with open("/proc/net/dev") as f:
    for line in f.read().splitlines()[2:]:
        name, data = line.split(":", 1)
        v = [int(x) for x in data.split()]
        counters[name.strip()] = [v[0], v[1], v[2], v[8], v[9], v[10]]
print(json.dumps(counters))
"#;

/// Relay's names of the counters in [`NET_DEV_ORACLE`]'s order.
const COUNTERS: [&str; 6] = [
    "received_data",
    "received_packets",
    "receive_errors",
    "transmitted_data",
    "transmitted_packets",
    "transmit_errors",
];

/// The Prometheus families of the same counters, in the same order.
const FAMILIES: [&str; 6] = [
    "relay_metrics_network_received_bytes_total",
    "relay_metrics_network_received_packets_total",
    "relay_metrics_network_receive_errors_total",
    "relay_metrics_network_transmitted_bytes_total",
    "relay_metrics_network_transmitted_packets_total",
    "relay_metrics_network_transmit_errors_total",
];

fn python(script: &str) -> Value {
    let output = Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3");
    assert_success(&output);
    serde_json::from_slice(&output.stdout).expect("the oracle prints JSON")
}

type NetCounters = BTreeMap<String, Vec<u64>>;

fn net_dev_oracle() -> NetCounters {
    serde_json::from_value(python(NET_DEV_ORACLE)).expect("oracle shape")
}

fn row(what: &str, ours: impl std::fmt::Display, oracle: impl std::fmt::Display, equal: bool) {
    println!(
        "ROW | {what} | {ours} | {oracle} | {}",
        if equal { "yes" } else { "NO" }
    );
}

/// `ours` lists every interface the oracle saw both before and after (none it saw neither
/// time: the machine may gain or lose an interface meanwhile), and `before <= ours <= after`
/// for every counter of those.
fn assert_bracketed(source: &str, ours: &NetCounters, before: &NetCounters, after: &NetCounters) {
    let stable: BTreeSet<&String> = before.keys().filter(|n| after.contains_key(*n)).collect();
    let listed: BTreeSet<&String> = ours.keys().collect();
    let missing: Vec<_> = stable.difference(&listed).collect();
    let unknown: Vec<_> = listed
        .iter()
        .filter(|n| !before.contains_key(**n) && !after.contains_key(**n))
        .collect();
    row(
        &format!("{source}: interfaces"),
        listed.len(),
        stable.len(),
        missing.is_empty() && unknown.is_empty(),
    );
    assert!(missing.is_empty(), "{source}: missing {missing:?}");
    assert!(unknown.is_empty(), "{source}: unknown {unknown:?}");
    let mut compared = 0;
    let mut off = Vec::new();
    for name in stable {
        for (i, value) in ours[name].iter().enumerate() {
            let (low, high) = (before[name][i], after[name][i]);
            compared += 1;
            if !(low <= *value && *value <= high) {
                off.push(format!(
                    "{name} {}: {low} <= {value} <= {high}",
                    COUNTERS[i]
                ));
            }
        }
    }
    row(
        &format!("{source}: counters within [before, after]"),
        compared - off.len(),
        compared,
        off.is_empty(),
    );
    assert!(off.is_empty(), "{source}: {off:?}");
}

/// 300 veth pairs: one end of each (`rmbhN`) in this namespace, the other in a network
/// namespace of the test's; the first four pairs carry addresses and UDP traffic.
struct VethPairs {
    netns: String,
}

const PAIRS: usize = 300;
const BUSY_PAIRS: usize = 4;

impl VethPairs {
    fn new() -> Self {
        let netns = format!("relay-big-{}", std::process::id());
        run_ok("ip", &["netns", "add", &netns]);
        let this = Self { netns };
        let mut batch = String::new();
        for i in 0..PAIRS {
            batch.push_str(&format!(
                "link add rmbh{i} type veth peer name p{i} netns {}\n",
                this.netns
            ));
        }
        for i in 0..BUSY_PAIRS {
            batch.push_str(&format!(
                "addr add 10.211.{i}.1/24 dev rmbh{i}\nlink set rmbh{i} up\n"
            ));
        }
        let file = tempfile::NamedTempFile::new().expect("batch file");
        fs::write(file.path(), batch).expect("batch");
        run_ok("ip", &["-batch", &file.path().to_string_lossy()]);
        let mut peer = String::new();
        for i in 0..BUSY_PAIRS {
            peer.push_str(&format!(
                "addr add 10.211.{i}.2/24 dev p{i}\nlink set p{i} up\n"
            ));
        }
        fs::write(file.path(), peer).expect("batch");
        run_ok(
            "ip",
            &["-n", &this.netns, "-batch", &file.path().to_string_lossy()],
        );
        this
    }

    /// Sends `count` UDP datagrams of 1,000 bytes to each busy pair's far end.
    fn traffic(&self, count: usize) {
        let socket = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp socket");
        for _ in 0..count {
            for i in 0..BUSY_PAIRS {
                let _ = socket.send_to(&[7u8; 1000], format!("10.211.{i}.2:9"));
            }
        }
    }
}

impl Drop for VethPairs {
    fn drop(&mut self) {
        // Deleting the namespace deletes the peers, and with them the pairs.
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
        for _ in 0..100 {
            if !Path::new("/sys/class/net/rmbh0").exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn run_ok(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().expect(program);
    assert!(status.success(), "{program} {args:?}: {status}");
}

fn snapshot_interfaces(snapshot: &Value) -> NetCounters {
    snapshot["network"]["interfaces"]
        .as_array()
        .expect("network.interfaces")
        .iter()
        .map(|interface| {
            let values = COUNTERS
                .iter()
                .map(|c| interface["traffic"][c]["value"].as_u64().expect(c))
                .collect();
            (
                interface["name"].as_str().expect("name").to_string(),
                values,
            )
        })
        .collect()
}

/// The per-interface counters of a Prometheus exposition.
fn scraped_interfaces(exposition: &str) -> NetCounters {
    let mut out: NetCounters = BTreeMap::new();
    for line in exposition.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Some(index) = FAMILIES
            .iter()
            .position(|f| series.starts_with(&format!("{f}{{")))
        else {
            continue;
        };
        let Some(name) = label(series, "interface") else {
            continue;
        };
        let values = out.entry(name).or_insert_with(|| vec![0; 6]);
        values[index] = value.parse::<f64>().expect("a number") as u64;
    }
    out
}

fn label(series: &str, name: &str) -> Option<String> {
    let start = series.find(&format!("{name}=\""))? + name.len() + 2;
    let end = series[start..].find('"')? + start;
    Some(series[start..end].to_string())
}

#[test]
#[ignore = "root: makes 300 veth pairs and a network namespace"]
fn three_hundred_veth_pairs_are_every_one_reported() {
    assert_root("the test makes veth pairs");
    let pairs = VethPairs::new();
    pairs.traffic(20);

    let before = net_dev_oracle();
    assert!(before.len() > PAIRS, "{} interfaces", before.len());
    let snapshot = json_of(&relay_metrics(&["snapshot", "--scope", "global"]));
    pairs.traffic(20);
    let after = net_dev_oracle();
    let ours = snapshot_interfaces(&snapshot);
    assert_bracketed("snapshot", &ours, &before, &after);
    // Traffic moved the busy pairs' counters (a packet sent while its neighbour is still being
    // resolved can be dropped before it is counted, so not every one of the 20 shows).
    let busy: u64 = (0..BUSY_PAIRS).map(|i| ours[&format!("rmbh{i}")][3]).sum();
    assert!(busy >= (BUSY_PAIRS * 1000) as u64, "{busy} bytes sent");

    let agent = common::start_agent(&["--scope", "global", "--interval-ms", "500"]);
    common::wait_ready(&agent.address);
    let before = net_dev_oracle();
    let first = common::sequence(&common::snapshot(&agent));
    let _ = common::snapshot_from(&agent, first + 2);
    let exposition = common::get(&agent.address, "/metrics").text();
    let after = net_dev_oracle();
    assert_bracketed(
        "serve /metrics",
        &scraped_interfaces(&exposition),
        &before,
        &after,
    );

    // run's compact line (the default without --config): the machine totals are the sums of
    // every interface's counters.
    let before = net_dev_oracle();
    let output = relay_metrics(&["run", "--interval-ms", "100", "--", "sleep", "0.3"]);
    let after = net_dev_oracle();
    assert_success(&output);
    let lines = common::json_lines(&output.stdout);
    let last = lines.last().expect("run printed lines");
    let total = last["network"]["system"]["received_data"]["value"]
        .as_u64()
        .expect("run's network total");
    let low: u64 = before.values().map(|v| v[0]).sum();
    let high: u64 = after.values().map(|v| v[0]).sum();
    let within = low <= total && total <= high;
    row(
        "run: received bytes, all interfaces",
        total,
        format!("[{low}, {high}]"),
        within,
    );
    assert!(within, "{low} <= {total} <= {high}");

    // With a config that asks for them, every interface is listed.
    let config = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("config");
    fs::write(config.path(), "[extensions]\nnetwork_interfaces = true\n").expect("config");
    let before = net_dev_oracle();
    let output = relay_metrics(&[
        "run",
        "--interval-ms",
        "100",
        "--config",
        &config.path().to_string_lossy(),
        "--",
        "sleep",
        "0.3",
    ]);
    let after = net_dev_oracle();
    assert_success(&output);
    let lines = common::json_lines(&output.stdout);
    let last = lines.last().expect("run printed lines");
    assert_bracketed(
        "run, last line",
        &snapshot_interfaces(last),
        &before,
        &after,
    );
    drop(pairs);
}

/// A shell in `cgroups` (one directory per v1 hierarchy) with `count` sleeping children.
struct Sleepers {
    shell: Reaped,
}

impl Sleepers {
    fn new(cgroups: &[PathBuf], count: usize) -> Self {
        let enter: String = cgroups
            .iter()
            .map(|dir| format!("echo $$ > {}/cgroup.procs || exit 1; ", dir.display()))
            .collect();
        let script = format!(
            "{enter}i=0; while [ $i -lt {count} ]; do sleep 900 & i=$((i+1)); done; echo ready; wait"
        );
        let mut child = Command::new("sh")
            .args(["-c", &script])
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready");
        let shell = Reaped(child);
        assert_eq!(line.trim(), "ready");
        Self { shell }
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.shell.0.id().to_string()])
            .status();
    }
}

/// Directories made by the test, removed deepest first when dropped (waiting for members).
struct Dirs(Vec<PathBuf>);

impl Drop for Dirs {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            for _ in 0..250 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn count_lines(path: &Path) -> u64 {
    let script = format!(
        "import json; print(json.dumps(sum(1 for _ in open({:?}).read().splitlines())))",
        path.display()
    );
    python(&script).as_u64().expect("a count")
}

/// Every value of `family` by its `cgroup` label.
fn by_cgroup(exposition: &str, family: &str) -> BTreeMap<String, f64> {
    exposition
        .lines()
        .filter(|line| line.starts_with(&format!("{family}{{")))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((label(series, "cgroup")?, value.parse().ok()?))
        })
        .collect()
}

const PROCESSES: usize = 5000;
const CGROUPS: usize = 2000;

#[test]
#[ignore = "root: makes 2,000 cgroups and 5,000 processes"]
fn five_thousand_processes_in_one_of_two_thousand_cgroups() {
    assert_root("the test makes cgroups");
    let parent_name = format!("relay-big-{}", std::process::id());
    // Discovery walks the v1 memory hierarchy on this hybrid host; the pids values come from
    // the v1 pids hierarchy: each cgroup exists in both.
    let hierarchies = ["memory", "pids"].map(|h| Path::new("/sys/fs/cgroup").join(h));
    let mut dirs = Dirs(Vec::new());
    for hierarchy in &hierarchies {
        let parent = hierarchy.join(&parent_name);
        fs::create_dir(&parent).expect("parent cgroup");
        dirs.0.push(parent.clone());
        for i in 0..CGROUPS {
            let dir = parent.join(format!("c{i:04}"));
            fs::create_dir(&dir).expect("cgroup");
            dirs.0.push(dir);
        }
    }
    let busy_path = format!("/{parent_name}/c0000");
    let [memory, pids_hierarchy] = hierarchies.map(|h| h.join(&busy_path[1..]));
    let sleepers = Sleepers::new(&[memory, pids_hierarchy.clone()], PROCESSES);
    let busy = pids_hierarchy;
    let procs = count_lines(&busy.join("cgroup.procs"));
    assert_eq!(procs, PROCESSES as u64 + 1);

    // The cgroup scope: its processes are the members of cgroup.procs.
    let snapshot = json_of(&relay_metrics(&["snapshot", "--cgroup", &busy_path]));
    let active = snapshot["process"]["active_count"]["value"]
        .as_u64()
        .expect("active_count");
    row(
        "snapshot --cgroup: processes",
        active,
        procs,
        active == procs,
    );
    assert_eq!(active, procs);

    let agent = common::start_agent(&["--cgroup", &busy_path, "--interval-ms", "1000"]);
    common::wait_ready(&agent.address);
    let exposition = common::get(&agent.address, "/metrics").text();
    let scraped: f64 = common::sample(&exposition, "relay_metrics_processes")
        .parse()
        .expect("number");
    row(
        "serve --cgroup: relay_metrics_processes",
        scraped,
        procs,
        scraped as u64 == procs,
    );
    assert_eq!(scraped as u64, procs);
    drop(agent);

    // 2,000 cgroups measured one by one, with processes counted from procfs.
    let config = tempfile::Builder::new()
        .suffix(".toml")
        .tempfile()
        .expect("config");
    fs::write(config.path(), "[extensions]\nprocess_source = \"procfs\"\n").expect("config");
    let pattern = format!("/{parent_name}/*");
    let agent = common::start_agent(&[
        "--scope",
        "global",
        "--interval-ms",
        "2000",
        "--cgroups",
        &pattern,
        "--max-targets",
        "2500",
        "--config",
        &config.path().to_string_lossy(),
    ]);
    common::wait_ready(&agent.address);
    let first = common::sequence(&common::snapshot(&agent));
    let _ = common::snapshot_from(&agent, first + 1);
    let exposition = common::get(&agent.address, "/metrics").text();
    let pids = by_cgroup(&exposition, "relay_metrics_cgroup_pids");
    let processes = by_cgroup(&exposition, "relay_metrics_cgroup_processes");
    row(
        "serve --cgroups: cgroups",
        pids.len(),
        CGROUPS,
        pids.len() == CGROUPS,
    );
    assert_eq!(
        pids.len(),
        CGROUPS,
        "cgroups with relay_metrics_cgroup_pids"
    );
    // One oracle read of every cgroup's pids.current (and the busy one's cgroup.procs).
    let script = format!(
        "import json, glob\nprint(json.dumps({{p[len('/sys/fs/cgroup/pids'):-len('/pids.current')]: int(open(p).read()) for p in glob.glob('/sys/fs/cgroup/pids/{parent_name}/*/pids.current')}}))"
    );
    let oracle: BTreeMap<String, u64> =
        serde_json::from_value(python(&script)).expect("oracle shape");
    assert_eq!(oracle.len(), CGROUPS);
    let mut off = Vec::new();
    for (path, value) in &pids {
        match oracle.get(path) {
            Some(expected) if *expected == *value as u64 => {}
            expected => off.push(format!("{path}: pids {value}, oracle {expected:?}")),
        }
    }
    let busy_processes = processes.get(&busy_path).copied().unwrap_or(-1.0);
    row(
        "serve --cgroups: pids per cgroup",
        CGROUPS - off.len(),
        CGROUPS,
        off.is_empty(),
    );
    row(
        "serve --cgroups: processes of the busy cgroup",
        busy_processes,
        procs,
        busy_processes as u64 == procs,
    );
    assert!(off.is_empty(), "{off:?}");
    assert_eq!(busy_processes as u64, procs);
    drop(agent);
    drop(sleepers);
}

/// A command line of ~100 KB and 400 threads: `ps`-style oracles from `/proc/<pid>/status`.
#[test]
#[ignore = "root: mounts 1,000 tmpfs in a mount namespace of its own"]
fn a_thousand_mounts_a_long_command_line_and_many_threads() {
    assert_root("the test mounts tmpfs");
    let cgroup = common::TestCgroup::new("big-mounts", &["pids"]);
    // The pids hierarchy is mounted again after 1,000 tmpfs mounts, so its mountinfo line is
    // ~15 pages in: `--cgroup` is found through it or not at all.
    let script = format!(
        "set -e; i=0; while [ $i -lt 1000 ]; do mount -t tmpfs -o size=4k relay-big /mnt; i=$((i+1)); done; \
         umount /sys/fs/cgroup/pids; mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids; \
         wc -c < /proc/self/mountinfo >&2; exec {} snapshot --cgroup {}",
        common::binary(),
        cgroup.path
    );
    let output = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare");
    assert_success(&output);
    let snapshot = json_of(&output);
    let scope = snapshot["measurement_scope"].as_str().unwrap_or_default();
    row(
        "1,000 mounts: --cgroup found past them",
        scope,
        "cgroup",
        scope == "cgroup",
    );
    assert_eq!(scope, "cgroup");

    let args: Vec<String> = (0..1000).map(|i| format!("{i:0>99}")).collect();
    let mut threads = Command::new("python3")
        .args(["-c", "import threading,sys,time\nfor _ in range(400): threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\nprint('ready', flush=True); time.sleep(600)"])
        .args(&args)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    BufReader::new(threads.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("ready");
    let threads = Reaped(threads);
    let pid = threads.0.id();
    let cmdline = python(&format!(
        "print(len(open('/proc/{pid}/cmdline','rb').read()))"
    ));
    assert!(cmdline.as_u64().expect("length") > 100_000, "{cmdline}");
    let status = python(&format!(
        "import json; print(json.dumps(int([l for l in open('/proc/{pid}/status').read().splitlines() if l.startswith('Threads:')][0].split()[1])))"
    ))
    .as_u64()
    .expect("threads");
    let snapshot = json_of(&relay_metrics(&[
        "snapshot",
        "--scope",
        "application_process",
        "--pid",
        &pid.to_string(),
    ]));
    let ours = snapshot["process"]["thread_count"]["value"]
        .as_u64()
        .expect("thread_count");
    row("long command line: threads", ours, status, ours == status);
    assert_eq!(ours, status);
    assert_eq!(status, 401);
}
