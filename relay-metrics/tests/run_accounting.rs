//! `relay-metrics run` accounts for the whole run: checked against GNU `time -v` on a tree of
//! short-lived CPU-bound children, an orphaned grandchild and a 300 MiB child (as root, in
//! run's own cgroup; as an ordinary user, on the process-tree fallback), and run's cgroup is
//! gone after a normal exit, after SIGTERM and after SIGKILL of `run`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The workload: three CPU-bound children one after another, a grandchild orphaned by its
/// parent, and a child that touches 300 MiB. The orphan is GNU time around a CPU-bound child,
/// writing that child's whole CPU time to `$1`: the outer GNU time cannot see it, its reaper
/// being `run` (a child subreaper). (A process's own `os.times()` before it exits misses the ~50 ms its exit costs.)
const TREE: &str = r#"
orphan_report="$1"
for i in 1 2 3; do python3 -c 'sum(range(4 * 10**6))'; done
sh -c '/usr/bin/time -f "%U %S" -o "$0" python3 -c "sum(range(4 * 10**6))" &' "$orphan_report"
python3 -c 'x = bytearray(300 << 20); x[::4096] = b"\1" * len(range(0, 300 << 20, 4096))'
while [ ! -s "$orphan_report" ]; do sleep 0.02; done
"#;

/// What one measurement of the tree found.
#[derive(Debug)]
struct Measured {
    cpu_s: f64,
    max_rss_bytes: f64,
}

struct Workdir {
    dir: tempfile::TempDir,
}

impl Workdir {
    /// A directory an ordinary user can read and write, holding the script and the binary.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(dir.path().join("tree.sh"), TREE).unwrap();
        std::fs::set_permissions(
            dir.path().join("tree.sh"),
            std::fs::Permissions::from_mode(0o755),
        )
        .unwrap();
        common::copy_binary(&dir.path().join("relay-metrics"));
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A command, as nobody (`setpriv`, no new privileges) unless `as_root`.
    fn command(&self, as_root: bool, program: &str) -> Command {
        let mut command = if as_root {
            Command::new(program)
        } else {
            let mut command = Command::new("setpriv");
            command.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--no-new-privs",
                program,
            ]);
            command
        };
        command.current_dir(self.dir.path()).stdin(Stdio::null());
        command
    }

    /// The orphan's user and system seconds, as its own GNU time wrote them.
    fn orphan_cpu_s(&self, report: &Path) -> f64 {
        std::fs::read_to_string(report)
            .unwrap()
            .split_whitespace()
            .map(|seconds| seconds.parse::<f64>().unwrap())
            .sum()
    }

    /// One execution of the tree, measured twice: `run` around GNU time around the tree. GNU
    /// time's rusage of its child (plus the orphan, which its reaper `run` holds and time cannot
    /// see) is the reference for the same processes `run` counts, so the two figures share every
    /// cost of that execution (memory-cgroup charging, a busy neighbour) and need no pairing.
    /// Returns (GNU time's figures, run's figures, run's JSON summary, run's last NDJSON line).
    fn measure(&self, as_root: bool, round: usize) -> (Measured, Measured, Value, Value) {
        let orphan_report = self.path(&format!("orphan-{round}"));
        let time_report = self.path(&format!("time-{round}"));
        let stream = self.path(&format!("run-{round}.ndjson"));
        let output = self
            .command(as_root, self.path("relay-metrics").to_str().unwrap())
            .args([
                "run",
                "--interval-ms",
                "50",
                "--summary-format",
                "json",
                "--output",
            ])
            .arg(&stream)
            .args(["--", "/usr/bin/time", "-v", "-o"])
            .arg(&time_report)
            .arg("sh")
            .arg(self.path("tree.sh"))
            .arg(&orphan_report)
            .output()
            .unwrap();
        common::assert_success(&output);
        let summary: Value = serde_json::from_slice(&output.stderr)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
        let lines = common::json_lines(&std::fs::read(&stream).unwrap());
        let last = lines.last().unwrap().clone();
        let cpu = &summary["cpu"];
        let under_run = Measured {
            cpu_s: cpu["user_s"].as_f64().unwrap() + cpu["system_s"].as_f64().unwrap(),
            max_rss_bytes: summary["memory"]["max_single_process_rss_bytes"]
                .as_f64()
                .unwrap(),
        };

        let text = std::fs::read_to_string(&time_report).unwrap();
        let field = |name: &str| -> f64 {
            text.lines()
                .find_map(|line| line.trim().strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {text}"))
                .trim()
                .parse()
                .unwrap()
        };
        let under_time = Measured {
            cpu_s: field("User time (seconds):")
                + field("System time (seconds):")
                + self.orphan_cpu_s(&orphan_report),
            max_rss_bytes: field("Maximum resident set size (kbytes):") * 1024.0,
        };
        (under_time, under_run, summary, last)
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Compares paired measurements of the same executions: the median of the differences must be
/// within `relative` of the median GNU time figure, or `absolute`.
fn assert_close(what: &str, pairs: &[(f64, f64)], relative: f64, absolute: f64) {
    let time = median(pairs.iter().map(|(_, time)| *time).collect());
    let difference = median(pairs.iter().map(|(run, time)| run - time).collect());
    let allowed = (time * relative).max(absolute);
    assert!(
        difference.abs() <= allowed,
        "{what}: median difference {difference} from GNU time's median {time} (allowed ±{allowed}); \
         pairs (run, time): {pairs:?}"
    );
}

/// Seven executions of the tree, each measured by `run` and by GNU time inside it, compared on
/// the median of their differences: CPU within 5 % or 30 ms, max RSS within 5 %. Returns the
/// last NDJSON line of each run for the caller's checks.
fn compare_with_time(as_root: bool) -> Vec<Value> {
    let work = Workdir::new();
    let (mut cpu, mut rss, mut cumulative_cpu) = (vec![], vec![], vec![]);
    let mut lasts = Vec::new();
    for round in 0..7 {
        let (timed, measured, summary, last) = work.measure(as_root, round);
        eprintln!("round {round}: time {timed:?}, run {measured:?}");
        cpu.push((measured.cpu_s, timed.cpu_s));
        rss.push((measured.max_rss_bytes, timed.max_rss_bytes));
        let cumulative = &last["extensions"]["cumulative"];
        let ns = |key: &str| {
            cumulative[key]
                .as_f64()
                .unwrap_or_else(|| panic!("{key}: {cumulative}"))
        };
        cumulative_cpu.push(((ns("cpu_user_ns") + ns("cpu_system_ns")) / 1e9, timed.cpu_s));
        assert_eq!(summary["exit_status"]["code"], 0, "{summary}");
        assert!(timed.max_rss_bytes > 300.0 * 1024.0 * 1024.0, "{timed:?}");
        lasts.push(last);
    }
    assert_close("summary CPU", &cpu, 0.05, 0.030);
    assert_close("extensions.cumulative CPU", &cumulative_cpu, 0.05, 0.030);
    assert_close("max single-process RSS", &rss, 0.05, 0.0);
    lasts
}

#[test]
#[ignore = "root: run makes its own cgroup; tools: GNU time (/usr/bin/time, Debian time)"]
fn run_matches_gnu_time_in_its_own_cgroup() {
    common::assert_root("run makes its own cgroup");
    for last in compare_with_time(true) {
        let cumulative = &last["extensions"]["cumulative"];
        assert_eq!(last["measurement_scope"], "cgroup", "{last}");
        assert!(
            cumulative["method"]
                .as_str()
                .unwrap()
                .starts_with("cgroup_"),
            "{cumulative}"
        );
        // The cgroup's high-water mark covers the 300 MiB child.
        let peak = cumulative["memory_peak_bytes"].as_f64().unwrap();
        assert!(peak >= 300.0 * 1024.0 * 1024.0, "{cumulative}");
    }
}

#[test]
#[ignore = "root: switches to the nobody user with setpriv; tools: GNU time (/usr/bin/time, Debian time)"]
fn run_matches_gnu_time_as_an_ordinary_user_on_the_process_tree() {
    common::assert_root("it switches to an ordinary user");
    for last in compare_with_time(false) {
        let cumulative = &last["extensions"]["cumulative"];
        assert_eq!(last["measurement_scope"], "process_tree", "{last}");
        assert_eq!(cumulative["method"], "process_tree", "{cumulative}");
        let reason = cumulative["reason"].as_str().unwrap();
        assert!(reason.contains("not a cgroup of its own"), "{reason}");
        assert!(reason.contains("Permission denied"), "{reason}");
    }
}

/// Every directory `run` (pid `pid`, started by this process) may have made: below this
/// process's own cgroup in each hierarchy (the v2 line `0::` for `unified` and a pure v2 host).
fn run_cgroup_dirs(pid: u32) -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let own_path = |field: &str| {
        own.lines()
            .find_map(|line| {
                let mut parts = line.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                (controllers == field).then(|| path.trim_start_matches('/').to_string())
            })
            .unwrap_or_default()
    };
    ["cpuacct", "cpu", "memory", "blkio", "pids", "unified", ""]
        .iter()
        .map(|hierarchy| {
            let field = if hierarchy.is_empty() || *hierarchy == "unified" {
                ""
            } else {
                hierarchy
            };
            Path::new("/sys/fs/cgroup")
                .join(hierarchy)
                .join(own_path(field))
                .join(format!("relay-metrics-run-{pid}"))
        })
        .collect()
}

fn wait_for(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `run -- sleep 30`, waits until its cgroup holds the command, sends `signal` to `run`
/// (none: lets a short command end by itself), and checks that every directory is gone.
fn cgroup_is_removed(signal: Option<nix::sys::signal::Signal>) {
    common::assert_root("run makes its own cgroup");
    let seconds = if signal.is_some() { "30" } else { "0.5" };
    let mut run = Command::new(env!("CARGO_BIN_EXE_relay-metrics"))
        .args(["run", "--interval-ms", "20", "--", "sleep", seconds])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let dirs = run_cgroup_dirs(run.id());
    let memory = dirs[2].clone();
    wait_for(
        "run's memory cgroup holds the command",
        Duration::from_secs(10),
        || std::fs::read_to_string(memory.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty()),
    );
    if let Some(signal) = signal {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(run.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
    }
    let status = run.wait().unwrap();
    if signal.is_none() {
        assert!(status.success(), "{status:?}");
    }
    // After SIGKILL the guard removes it: give it its grace period.
    wait_for("run's cgroup is removed", Duration::from_secs(5), || {
        dirs.iter().all(|dir| !dir.exists())
    });
}

#[test]
#[ignore = "root: run makes its own cgroup"]
fn run_removes_its_cgroup_after_a_normal_exit() {
    cgroup_is_removed(None);
}

#[test]
#[ignore = "root: run makes its own cgroup"]
fn run_removes_its_cgroup_after_sigterm() {
    cgroup_is_removed(Some(nix::sys::signal::Signal::SIGTERM));
}

#[test]
#[ignore = "root: run makes its own cgroup"]
fn run_removes_its_cgroup_after_sigkill() {
    cgroup_is_removed(Some(nix::sys::signal::Signal::SIGKILL));
}

#[test]
fn no_cgroup_measures_the_process_tree_and_says_why() {
    let lines = common::run_script(
        &["--no-cgroup", "--interval-ms", "20"],
        "for i in 1 2 3 4 5; do sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'; done",
    );
    let mut previous = 0.0;
    for line in &lines {
        let cumulative = &line["extensions"]["cumulative"];
        assert_eq!(cumulative["method"], "process_tree", "{cumulative}");
        assert!(cumulative["reason"]
            .as_str()
            .unwrap()
            .contains("--no-cgroup"));
        let cpu = cumulative["cpu_user_ns"].as_f64().unwrap()
            + cumulative["cpu_system_ns"].as_f64().unwrap();
        assert!(
            cpu >= previous,
            "cumulative CPU went down: {previous} then {cpu}"
        );
        previous = cpu;
    }
    // The children exited one after another: the last line, after the exit, still holds them
    // (Relay's own fields, sums over the live processes, lose them).
    let last = lines.last().unwrap();
    assert!(previous > 0.0, "{last}");
    let total = &last["cpu"]["total_time"];
    let per_second = match total["unit"].as_str().unwrap() {
        "seconds" => 1.0,
        "milliseconds" => 1e3,
        "microseconds" => 1e6,
        "nanoseconds" => 1e9,
        other => panic!("unit {other}"),
    };
    let live_s = total["value"].as_f64().unwrap_or(0.0) / per_second;
    assert!(
        previous / 1e9 > live_s,
        "cumulative {previous} ns, live sum {live_s} s"
    );
}

/// `max_single_process_rss_bytes` and GNU time's "Maximum resident set size" of one command.
fn max_rss_kib(options: &[&str], command: &[&str]) -> (f64, f64) {
    let output = Command::new(common::binary())
        .arg("run")
        .args(options)
        .args(["--summary-format", "json", "--"])
        .args(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let summary: Value = serde_json::from_slice(&output.stderr).unwrap();
    let ours = summary["memory"]["max_single_process_rss_bytes"]
        .as_f64()
        .unwrap()
        / 1024.0;
    let timed = Command::new("/usr/bin/time")
        .args(["-f", "%M"])
        .args(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&timed.stderr);
    let theirs: f64 = text.trim().lines().last().unwrap().parse().unwrap();
    (ours, theirs)
}

#[test]
fn max_rss_of_one_process_is_the_commands_own_not_runs() {
    // Until run started the command from a small, freshly executed starter, the command's
    // ru_maxrss began at run's own peak (execve keeps it: /bin/true said 6.5-7.3 MB against GNU
    // time's 1.0 MB), then at the peak of the shell and `env` that started it (1.6-1.7 MB).
    // /bin/true's own peak differs by up to 20 % from one execution to the next (912-1,108 KiB
    // here; one CI run saw 912 against GNU time's 1,084): one run each is compared loosely
    // here, against the inherited peaks above, and medians within 5 % in tests/witness.rs.
    for options in [&[][..], &["--no-cgroup"][..]] {
        let (ours, theirs) = max_rss_kib(options, &["/bin/true"]);
        assert!(
            ours >= theirs * 0.7 && ours <= theirs * 1.2,
            "{options:?}: /bin/true: run {ours} KiB, GNU time {theirs} KiB"
        );
    }
    // A bigger command: its own peak, as GNU time has it.
    let big = ["python3", "-c", "x = b'x' * (64 << 20)"];
    let (ours, theirs) = max_rss_kib(&[], &big);
    assert!(
        (ours - theirs).abs() <= theirs * 0.05,
        "64 MiB python: run {ours} KiB, GNU time {theirs} KiB"
    );
}

#[test]
fn a_run_line_lists_the_interfaces_only_where_a_config_asks() {
    // Issue 29, item 12: each interface was 81 % of a 19 KB line on a machine with 31 of them.
    let compact = common::run_script(&["--no-cgroup", "--interval-ms", "50"], "sleep 0.1");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("relay.toml");
    std::fs::write(&config, "[extensions]\nnetwork_interfaces = true\n").unwrap();
    let listed = common::run_script(
        &[
            "--no-cgroup",
            "--interval-ms",
            "50",
            "--config",
            config.to_str().unwrap(),
        ],
        "sleep 0.1",
    );
    // Interfaces come and go on a shared machine (another test's veths): the listed line has
    // at least the loopback one, the compact none.
    for (lines, listed) in [(&compact, false), (&listed, true)] {
        let last = lines.last().unwrap();
        let network = &last["network"];
        let count = network["interfaces"].as_array().unwrap().len();
        assert_eq!(count > 0, listed, "{network}");
        // The totals over every interface are there either way.
        assert!(
            network["system"]["received_data"]["value"].is_u64(),
            "{network}"
        );
    }
    let size = |lines: &[Value]| lines.last().unwrap().to_string().len();
    assert!(size(&compact) < size(&listed));
}
