//! The witness tier (issue 29): every number of `run`'s summary (JSON and text), of the last
//! line's `extensions.cumulative` and of the report's table is compared with an independent
//! witness of the same execution, on real workloads, in each mode: root in run's own cgroup,
//! `--no-cgroup`, and an ordinary user (`setpriv` to nobody).
//!
//! Witnesses: GNU `time -v` run inside `run` (CPU of the same processes), known bytes and a
//! writer that prints its own `/proc/self/io` before it exits (storage bytes), `nproc` (a bound
//! on cores), the number of processes a script starts, GNU `time -v` of the same command alone
//! and a child that prints its own `ru_maxrss` (max RSS of one process). docs/ACCURACY.md holds
//! the figures.
//! Each comparison is printed as `WITNESS | mode | workload | field | ours | witness | allowed`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

const MIB: f64 = 1024.0 * 1024.0;

/// A writer of 64 MiB (buffered, or with `O_DIRECT`), synced, that prints its own
/// `/proc/self/io` `write_bytes` on stdout (a pipe: printing it writes nothing to storage).
const WRITER: &str = r#"
import mmap, os, sys
flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
if sys.argv[1] == "direct":
    flags |= os.O_DIRECT
fd = os.open(sys.argv[2], flags, 0o644)
block = mmap.mmap(-1, 1 << 20)  # page-aligned, as O_DIRECT needs
block.write(b"x" * (1 << 20))
for _ in range(64):
    os.write(fd, block)
os.fsync(fd)
os.close(fd)
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
print(int(io["write_bytes"]), flush=True)
"#;

/// A process that leaves the command's session (started by `setsid`): 0.3 s of CPU, then 16 MiB
/// written and synced; prints what its own `/proc/self/io` and `times()` say it did.
const ORPHAN: &str = r#"
import os, sys, time
end = time.process_time() + 0.3
while time.process_time() < end:
    pass
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
for _ in range(16):
    os.write(fd, b"x" * (1 << 20))
os.fsync(fd)
os.close(fd)
io = dict(line.split(": ") for line in open("/proc/self/io").read().splitlines())
times = os.times()
print(int(io["write_bytes"]), times.user + times.system, flush=True)
"#;

/// Holds 64 MiB while it spins 1.2 s of CPU, then prints its own peak RSS (`ru_maxrss`, bytes)
/// and CPU time (`times()`, seconds).
const RESIDENT: &str = r#"
import os, resource, time
block = b"x" * (64 << 20)
end = time.process_time() + 1.2
while time.process_time() < end:
    pass
times = os.times()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, times.user + times.system, flush=True)
"#;

/// A spinner that runs until it is killed and writes its own CPU time (`times()`, seconds) to
/// the file it is given every 10 ms of it.
const SPINNER: &str = r#"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
mark = 0.0
while True:
    times = os.times()
    cpu = times.user + times.system
    if cpu >= mark:
        os.pwrite(fd, b"%-20.6f" % cpu, 0)
        mark = cpu + 0.01
"#;

/// Holds 96 MiB, writes its own peak RSS (bytes) to the file named by its argument, and sleeps:
/// a leftover for `run` to end.
const HOLDER: &str = r#"
import resource, sys, time
block = b"x" * (96 << 20)
with open(sys.argv[1], "w") as out:
    out.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))
time.sleep(60)
"#;

/// A pool of two workers over CPU-bound tasks.
const POOL: &str = r#"
from multiprocessing import Pool
def work(n):
    return sum(range(n))
if __name__ == "__main__":
    with Pool(2) as pool:
        pool.map(work, [3 * 10**6] * 8)
"#;

/// An allocator of 64 MiB (written, so resident) that prints its own `ru_maxrss` (bytes) just
/// before it exits.
const ALLOCATOR: &str = r#"
import resource
block = b"x" * (64 << 20)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, flush=True)
"#;

/// `make -j2` of 16 generated C files (each a few hundred functions: tens of ms to compile).
fn write_make_project(dir: &Path) {
    let mut makefile = String::from("all:");
    for i in 0..16 {
        let mut source = String::new();
        for f in 0..300 {
            source.push_str(&format!(
                "int f{f}(int x) {{ int s = 0; for (int i = 0; i < x; i++) s += i * {f} ^ {i}; return s; }}\n"
            ));
        }
        std::fs::write(dir.join(format!("c{i}.c")), source).unwrap();
        makefile.push_str(&format!(" c{i}.o"));
    }
    makefile.push_str("\n%.o: %.c\n\tcc -O2 -c $< -o $@\n");
    std::fs::write(dir.join("Makefile"), makefile).unwrap();
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Root, in run's own cgroup.
    Cgroup,
    /// Root, `--no-cgroup`.
    NoCgroup,
    /// The nobody user (no cgroup of its own: the process tree).
    Nobody,
    /// Root, `--no-cgroup`, `run` itself on CPU 0 only (`taskset -c 0`).
    OneCpu,
}

impl Mode {
    /// `program` run as this mode's user.
    fn command(self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        if self == Self::Nobody {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--no-new-privs",
            ])
            .arg(program);
            c
        } else if self == Self::OneCpu {
            let mut c = Command::new("taskset");
            c.args(["-c", "0"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Cgroup => "root, cgroup",
            Self::NoCgroup => "root, --no-cgroup",
            Self::Nobody => "nobody",
            Self::OneCpu => "root, --no-cgroup, run on CPU 0",
        }
    }
}

/// A directory on a disk file system (O_DIRECT and write accounting need a real one; /tmp
/// may be tmpfs) that nobody can use, with the binary and the scripts.
struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    fn new() -> Self {
        // /var/tmp: on the root file system, where nobody may make a directory.
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(dir.path().join("writer.py"), WRITER).unwrap();
        std::fs::write(dir.path().join("pool.py"), POOL).unwrap();
        std::fs::write(dir.path().join("orphan.py"), ORPHAN).unwrap();
        std::fs::write(dir.path().join("spinner.py"), SPINNER).unwrap();
        std::fs::write(dir.path().join("allocator.py"), ALLOCATOR).unwrap();
        std::fs::write(dir.path().join("holder.py"), HOLDER).unwrap();
        std::fs::write(dir.path().join("resident.py"), RESIDENT).unwrap();
        common::copy_binary(&dir.path().join("relay-metrics"));
        let make = dir.path().join("make");
        std::fs::create_dir(&make).unwrap();
        std::fs::set_permissions(&make, std::fs::Permissions::from_mode(0o777)).unwrap();
        write_make_project(&make);
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `relay-metrics run` of `command` in `mode`; what it and the report of its stream say.
    fn run(&self, mode: Mode, name: &str, command: &[&str]) -> Measured {
        self.run_with(mode, name, &["--interval-ms", "20"], command)
    }

    /// [`Self::run`] with these `options` of `run` (the interval among them).
    fn run_with(&self, mode: Mode, name: &str, options: &[&str], command: &[&str]) -> Measured {
        let stream = self.path(&format!("{name}.ndjson"));
        let binary = self.path("relay-metrics");
        let mut args: Vec<String> = vec![
            "run".into(),
            "--summary-format".into(),
            "json".into(),
            "--output".into(),
            stream.display().to_string(),
        ];
        if matches!(mode, Mode::NoCgroup | Mode::OneCpu) {
            args.push("--no-cgroup".into());
        }
        args.extend(options.iter().map(|s| (*s).to_owned()));
        args.push("--".into());
        args.extend(command.iter().map(|s| (*s).to_owned()));
        let output = mode
            .command(&binary)
            .args(&args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        common::assert_success(&output);
        let summary: Value = serde_json::from_slice(&output.stderr)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
        let lines = common::json_lines(&std::fs::read(&stream).unwrap());
        let last = lines.last().unwrap().clone();
        let html = self.path(&format!("{name}.html"));
        let report = common::relay_metrics(&[
            "report",
            stream.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ]);
        common::assert_success(&report);
        let table = table_of(&std::fs::read_to_string(&html).unwrap());
        Measured {
            mode,
            workload: name.to_owned(),
            summary,
            last,
            table,
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        }
    }
}

/// The report's table: label → value as printed.
fn table_of(page: &str) -> HashMap<String, String> {
    page.split("<tr><th>")
        .skip(1)
        .filter_map(|row| {
            let (label, rest) = row.split_once("</th><td class=\"value\">")?;
            let (value, _) = rest.split_once("</td>")?;
            Some((label.to_owned(), value.to_owned()))
        })
        .collect()
}

/// `64.01 MiB` → bytes, `1.234 s` → seconds, `0.32` → itself.
fn printed_number(text: &str) -> f64 {
    let (number, unit) = text.split_once(' ').unwrap_or((text, ""));
    let number: f64 = number
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {text}"));
    let factor = match unit {
        "" | "s" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => MIB,
        "GiB" => MIB * 1024.0,
        other => panic!("unit {other} in {text}"),
    };
    number * factor
}

/// What one run said.
struct Measured {
    mode: Mode,
    workload: String,
    summary: Value,
    last: Value,
    table: HashMap<String, String>,
    stdout: String,
}

impl Measured {
    fn summary_f64(&self, section: &str, key: &str) -> f64 {
        self.summary[section][key]
            .as_f64()
            .unwrap_or_else(|| panic!("{section}.{key}: {}", self.summary))
    }

    fn cumulative(&self, key: &str) -> f64 {
        let cumulative = &self.last["extensions"]["cumulative"];
        cumulative[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {cumulative}"))
    }

    fn table(&self, label: &str) -> f64 {
        printed_number(
            self.table
                .get(label)
                .unwrap_or_else(|| panic!("no {label} row: {:?}", self.table)),
        )
    }

    /// Asserts `|ours − witness| ≤ allowed` and prints the row.
    fn check(&self, field: &str, ours: f64, witness: f64, allowed: f64) {
        let ok = (ours - witness).abs() <= allowed;
        eprintln!(
            "WITNESS | {} | {} | {field} | {ours:.6} | {witness:.6} | ±{allowed:.6} | {}",
            self.mode.name(),
            self.workload,
            if ok { "ok" } else { "FAILED" }
        );
        assert!(
            ok,
            "{} / {}: {field}: ours {ours}, witness {witness}, allowed ±{allowed}; summary {}",
            self.mode.name(),
            self.workload,
            self.summary
        );
    }

    /// Every CPU rate of the summary is within the CPUs the machine has.
    fn check_cores(&self, nproc: f64) {
        for key in ["average_cores", "peak_cores"] {
            let cores = self.summary_f64("cpu", key);
            self.check(&format!("cpu.{key} ≤ nproc"), cores.min(nproc), cores, 0.0);
        }
        self.check(
            "report: peak cores ≤ nproc",
            self.table("peak cores").min(nproc),
            self.table("peak cores"),
            0.0,
        );
    }
}

fn nproc() -> f64 {
    let output = Command::new("nproc").output().unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap()
}

/// GNU time's user + system seconds of its child, from `-o` of `time -v`.
fn time_cpu_s(report: &Path) -> f64 {
    let text = std::fs::read_to_string(report).unwrap();
    let field = |name: &str| -> f64 {
        text.lines()
            .find_map(|line| line.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .trim()
            .parse()
            .unwrap()
    };
    field("User time (seconds):") + field("System time (seconds):")
}

/// Storage bytes: known (64 MiB) and the writer's own count, against the summary (JSON and
/// text's source), the last line and the report.
fn storage(work: &Work, mode: Mode) {
    for kind in ["buffered", "direct"] {
        let file = work.path(&format!("written-{kind}"));
        let _ = std::fs::remove_file(&file);
        let measured = work.run(
            mode,
            &format!("{kind}-write"),
            &["python3", "writer.py", kind, file.to_str().unwrap()],
        );
        let own: f64 = measured.stdout.trim().parse().unwrap();
        let known = 64.0 * MIB;
        let ours = measured.summary_f64("io", "written_bytes");
        // The writer's own count is the kernel's: exact. The known bytes: within 1 % buffered;
        // direct I/O is exact apart from the file system's metadata pages its process dirtied
        // (8 KiB seen).
        measured.check(
            "io.written_bytes vs the writer's /proc/self/io",
            ours,
            own,
            0.0,
        );
        let allowed = if kind == "direct" {
            64.0 * 1024.0
        } else {
            0.01 * known
        };
        measured.check("io.written_bytes vs 64 MiB", ours, known, allowed);
        measured.check(
            "extensions.cumulative.storage_write_bytes",
            measured.cumulative("storage_write_bytes"),
            own,
            0.0,
        );
        // Printed with two decimals of MiB.
        measured.check(
            "report: written",
            measured.table("written"),
            own,
            0.005 * MIB,
        );
        if mode == Mode::Cgroup && kind == "buffered" {
            // Names that say what they measure: the cgroup was charged the 64 MiB of page
            // cache, which no process has resident.
            let charged = measured.summary_f64("memory", "peak_charged_bytes");
            let resident = measured.summary_f64("memory", "peak_resident_bytes");
            measured.check(
                "memory.peak_charged_bytes ≥ 64 MiB",
                charged.max(known),
                charged,
                0.0,
            );
            measured.check(
                "memory.peak_resident_bytes < 64 MiB",
                resident.min(known),
                resident,
                0.0,
            );
        }
        measured.check_cores(nproc());
    }
}

/// CPU: GNU time inside run, on three workloads.
fn cpu(work: &Work, mode: Mode) {
    let workloads: [(&str, &[&str]); 3] = [
        ("make -j2", &["make", "-s", "-j2", "-C", "make", "-B"]),
        ("multiprocessing pool", &["python3", "pool.py"]),
        (
            "300 short processes",
            &[
                "sh",
                "-c",
                "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done",
            ],
        ),
    ];
    for (name, command) in workloads {
        let time_report = work.path(&format!("time-{}", name.replace(' ', "-")));
        let mut wrapped = vec!["/usr/bin/time", "-v", "-o", time_report.to_str().unwrap()];
        wrapped.extend_from_slice(command);
        let measured = work.run(mode, name, &wrapped);
        let witness = time_cpu_s(&time_report);
        // ±2 % or 20 ms, plus what GNU time itself costs (it is in run's count, not in its
        // own report): a few ms.
        let allowed = (0.02 * witness).max(0.020) + 0.005;
        measured.check(
            "cpu.total_s",
            measured.summary_f64("cpu", "total_s"),
            witness,
            allowed,
        );
        measured.check(
            "cpu.user_s + cpu.system_s",
            measured.summary_f64("cpu", "user_s") + measured.summary_f64("cpu", "system_s"),
            witness,
            allowed,
        );
        measured.check(
            "extensions.cumulative CPU",
            (measured.cumulative("cpu_user_ns") + measured.cumulative("cpu_system_ns")) / 1e9,
            witness,
            allowed,
        );
        measured.check(
            "report: total CPU",
            measured.table("total CPU"),
            witness,
            allowed + 0.0005,
        );
        measured.check_cores(nproc());
        if name == "300 short processes" {
            if let Some(created) = measured.summary["processes_created"].as_f64() {
                // sh, time and 300 children at least (threads are not processes here).
                measured.check("processes_created ≥ 300", created.max(300.0), created, 0.0);
            }
        }
    }
}

/// The median of `values` (the upper one of an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// GNU time's "Maximum resident set size" of `command` run alone as `mode`'s user (bytes).
fn time_max_rss_bytes(work: &Work, mode: Mode, command: &[&str]) -> f64 {
    let output = mode
        .command("/usr/bin/time")
        .args(["-f", "%M"])
        .args(command)
        .current_dir(work.dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stderr);
    let kib: f64 = text.trim().lines().last().unwrap().parse().unwrap();
    kib * 1024.0
}

/// How many times `run` runs each command for a max RSS comparison, and GNU time alone. The
/// peak of a small dynamically linked program differs from one execution to the next by more
/// than the tolerance (`/bin/true` alone under GNU time: 960–1,108 KiB over 30 runs here, in
/// clusters: where the libraries land decides how many pages each fault maps around it), so the
/// median of ours is compared with the range of GNU time's over many runs (cheap), widened by
/// 5 %.
const RSS_RUNS: usize = 5;
const RSS_WITNESS_RUNS: usize = 15;

/// Max RSS of one process: `/bin/true` and a 64 MiB Python allocator under `run`, against GNU
/// time of the same command alone (±5 %) and, for the allocator, its own `ru_maxrss` (±5 %,
/// in the same execution) and the 64 MiB it wrote.
fn max_rss(work: &Work, mode: Mode) {
    let workloads: [(&str, &[&str]); 2] = [
        ("true", &["/bin/true"]),
        ("allocator", &["python3", "allocator.py"]),
    ];
    for (name, command) in workloads {
        let runs: Vec<Measured> = (0..RSS_RUNS)
            .map(|_| work.run(mode, name, command))
            .collect();
        let field = |m: &Measured| m.summary_f64("memory", "max_single_process_rss_bytes");
        let alone: Vec<f64> = (0..RSS_WITNESS_RUNS)
            .map(|_| time_max_rss_bytes(work, mode, command))
            .collect();
        let low = alone.iter().copied().fold(f64::INFINITY, f64::min) * 0.95;
        let high = alone.iter().copied().fold(0.0, f64::max) * 1.05;
        // Printed as the middle of that range ± half of it, under the first run's names.
        runs[0].check(
            "memory.max_single_process_rss_bytes (median of 5) vs GNU time alone (15 runs) ±5 %",
            median(runs.iter().map(field).collect()),
            (low + high) / 2.0,
            (high - low) / 2.0,
        );
        if name != "allocator" {
            continue;
        }
        for measured in &runs {
            let own: f64 = measured.stdout.trim().parse().unwrap();
            let ours = field(measured);
            measured.check(
                "memory.max_single_process_rss_bytes vs the child's own ru_maxrss",
                ours,
                own,
                0.05 * own,
            );
            measured.check(
                "memory.max_single_process_rss_bytes ≥ 64 MiB",
                ours.max(64.0 * MIB),
                ours,
                0.0,
            );
        }
    }
}

/// The CPUs online (`nproc` counts only those of the caller's affinity).
fn online_cpus() -> usize {
    let output = Command::new("getconf")
        .arg("_NPROCESSORS_ONLN")
        .output()
        .unwrap();
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .unwrap()
}

/// `run` started on one CPU (`taskset -c 0`) of a command that widens the affinity it inherits
/// to every CPU online and keeps them busy for 3 s: its CPU is counted whole, as GNU time
/// counts it, not refused as more than `run`'s own CPUs could give.
fn widened_affinity(work: &Work) {
    let online = online_cpus();
    assert!(
        online >= 2,
        "{online} CPU online: no affinity of one CPU to widen"
    );
    let time_report = work.path("time-widened");
    let every_cpu = format!("0-{}", online - 1);
    let spin = format!(
        "import multiprocessing, time\n\
         def spin(_):\n    end = time.monotonic() + 3\n    while time.monotonic() < end: pass\n\
         if __name__ == '__main__':\n    multiprocessing.Pool({online}).map(spin, range({online}))"
    );
    let command = [
        "/usr/bin/time",
        "-v",
        "-o",
        time_report.to_str().unwrap(),
        "taskset",
        "-c",
        &every_cpu,
        "python3",
        "-c",
        &spin,
    ];
    let measured = work.run(Mode::OneCpu, "widened affinity", &command);
    let witness = time_cpu_s(&time_report);
    let wall = measured.summary["wall_time_s"].as_f64().unwrap();
    // The case at hand: more CPU time than one CPU gives in the wall time (the summary's
    // bound allows 1.25 times it and half a second).
    assert!(
        witness > 1.25 * wall + 0.5,
        "{witness} s of CPU in {wall} s: the machine was too busy for the workload to use more \
         than one CPU"
    );
    let allowed = (0.02 * witness).max(0.020) + 0.005;
    measured.check(
        "cpu.total_s",
        measured.summary_f64("cpu", "total_s"),
        witness,
        allowed,
    );
    measured.check_cores(online as f64);
}

/// A command whose child leaves its session (`setsid`) and outlives it, waited for with
/// `--wait-all`: the orphan's CPU time and written bytes are counted, as the orphan itself
/// counts them. Sampled once a second, so that the orphan (half a second) starts and ends
/// between two samples: what it did is known only by reaping it.
fn setsid_orphan(work: &Work, mode: Mode) {
    let file = work.path("written-by-orphan");
    let script = format!(
        "setsid python3 orphan.py {} & sleep 0.05",
        file.to_str().unwrap()
    );
    let measured = work.run_with(
        mode,
        "setsid orphan",
        &["--interval-ms", "1000", "--wait-all=20"],
        &["sh", "-c", &script],
    );
    let (written, cpu) = measured
        .stdout
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("the orphan printed {:?}", measured.stdout));
    let (written, cpu): (f64, f64) = (written.parse().unwrap(), cpu.parse().unwrap());
    assert!(written >= 16.0 * MIB, "{written}");
    measured.check(
        "io.written_bytes vs the orphan's /proc/self/io",
        measured.summary_f64("io", "written_bytes"),
        written,
        0.0,
    );
    // The orphan's CPU and its starters' (a shell, setsid, Python's start): at most 0.3 s more.
    let total = measured.summary_f64("cpu", "total_s");
    measured.check(
        "cpu.total_s vs the orphan's times() (+0.15 s for the others)",
        total,
        cpu + 0.15,
        0.15,
    );
}

/// A process the command leaves running is ended by `run` when the command exits (no
/// `--wait-all`): the CPU it used until then is counted, also for one that left the command's
/// process group and session (`setsid`). Its witness is the last CPU time it wrote, a lower
/// bound; above it are its last 10 ms, what it ran while `run` ended the command's stream, and
/// its starters (a shell, `setsid`, `sleep`): at most 0.12 s in all.
fn ended_leftover(work: &Work, mode: Mode) {
    let file = work.path("spinner-cpu");
    let script = format!(
        "setsid python3 spinner.py {} & sleep 1",
        file.to_str().unwrap()
    );
    let measured = work.run_with(
        mode,
        "ended leftover",
        &["--interval-ms", "200"],
        &["sh", "-c", &script],
    );
    let written = std::fs::read_to_string(&file).unwrap();
    let cpu: f64 = written.trim().parse().unwrap();
    assert!(cpu >= 0.5, "the spinner ran {cpu} s");
    measured.check(
        "cpu.total_s vs the leftover's last times() (0 to +0.12 s for the rest)",
        measured.summary_f64("cpu", "total_s"),
        cpu + 0.06,
        0.06,
    );
}

/// A leftover holding 96 MiB, ended by `run`: the largest process's peak RSS is the leftover's
/// own (it is reaped by `run`, its subreaper; with a cgroup it was killed unseen by the cgroup's
/// removal, and the summary gave the shell's 1.7 MB). Above its figure: what it touched after
/// writing it (a few pages).
fn ended_leftover_rss(work: &Work, mode: Mode) {
    let file = work.path("holder-rss");
    let script = format!(
        "setsid python3 holder.py {} & sleep 1",
        file.to_str().unwrap()
    );
    let measured = work.run_with(
        mode,
        "ended leftover's RSS",
        &["--interval-ms", "200"],
        &["sh", "-c", &script],
    );
    let written = std::fs::read_to_string(&file).unwrap();
    let own: f64 = written.trim().parse().unwrap();
    assert!(own >= 96.0 * MIB, "the holder's peak RSS is {own} B");
    measured.check(
        "memory.max_single_process_rss_bytes vs the leftover's own ru_maxrss (+0 to 1 MiB)",
        measured.summary_f64("memory", "max_single_process_rss_bytes"),
        own + 0.5 * MIB,
        0.5 * MIB,
    );
}

/// A command that exits at once, leaving a child that holds 64 MiB and spins for 1.2 s, waited
/// for with `--wait-all`: the orphan is sampled while it lives (`run` adopts it), so the peak
/// resident memory is its own and no interval's rate exceeds the one core it runs on.
/// Without a cgroup it was sampled nowhere before (peak 0.4 MiB: the shell alone), and its CPU
/// entered the totals in one step when `run` reaped it.
fn live_orphan(work: &Work, mode: Mode) {
    let measured = work.run_with(
        mode,
        "live orphan",
        &["--interval-ms", "200", "--wait-all=20"],
        &["sh", "-c", "python3 resident.py & exit 0"],
    );
    let (rss, cpu) = measured
        .stdout
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("the orphan printed {:?}", measured.stdout));
    let (rss, cpu): (f64, f64) = (rss.parse().unwrap(), cpu.parse().unwrap());
    assert!(rss >= 64.0 * MIB, "the orphan's peak RSS is {rss} B");
    measured.check(
        "memory.peak_resident_bytes vs the orphan's own ru_maxrss",
        measured.summary_f64("memory", "peak_resident_bytes"),
        rss,
        2.0 * MIB,
    );
    let peak = measured.summary_f64("cpu", "peak_cores");
    measured.check(
        "cpu.peak_cores ≤ 1.1 (one thread)",
        peak.min(1.1),
        peak,
        0.0,
    );
    measured.check(
        "cpu.total_s vs the orphan's times() (+0.15 s for the shell and Python's start)",
        measured.summary_f64("cpu", "total_s"),
        cpu + 0.15,
        0.15,
    );
}

/// One mode at a time: the workloads fill both CPUs, and two modes side by side (the test
/// harness runs tests in parallel) add per-process scheduling cost that the cgroup's count
/// sees and GNU time's does not.
static ONE_MODE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_mode_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_MODE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
#[ignore = "root: run makes its own cgroup; tools: GNU time, make, cc, python3"]
fn witnesses_agree_in_runs_own_cgroup() {
    common::assert_root("run makes its own cgroup");
    let _alone = one_mode_at_a_time();
    let work = Work::new();
    max_rss(&work, Mode::Cgroup);
    storage(&work, Mode::Cgroup);
    cpu(&work, Mode::Cgroup);
}

#[test]
#[ignore = "tools: GNU time, make, cc, python3"]
fn witnesses_agree_without_a_cgroup() {
    let _alone = one_mode_at_a_time();
    let work = Work::new();
    max_rss(&work, Mode::NoCgroup);
    storage(&work, Mode::NoCgroup);
    cpu(&work, Mode::NoCgroup);
}

#[test]
#[ignore = "root: run makes its own cgroup; tools: python3, setsid"]
fn a_setsid_orphans_cpu_and_writes_are_counted() {
    common::assert_root("run makes its own cgroup");
    let _alone = one_mode_at_a_time();
    let work = Work::new();
    setsid_orphan(&work, Mode::Cgroup);
    setsid_orphan(&work, Mode::NoCgroup);
}

#[test]
#[ignore = "root: run makes its own cgroup; tools: python3"]
fn a_live_orphan_is_sampled_until_it_exits() {
    common::assert_root("run makes its own cgroup");
    let _alone = one_mode_at_a_time();
    let work = Work::new();
    live_orphan(&work, Mode::Cgroup);
    live_orphan(&work, Mode::NoCgroup);
}

#[test]
#[ignore = "root: run makes its own cgroup; tools: python3"]
fn a_leftover_that_run_ends_is_counted_until_its_end() {
    common::assert_root("run makes its own cgroup");
    let _alone = one_mode_at_a_time();
    let work = Work::new();
    ended_leftover(&work, Mode::Cgroup);
    ended_leftover(&work, Mode::NoCgroup);
    ended_leftover_rss(&work, Mode::Cgroup);
    ended_leftover_rss(&work, Mode::NoCgroup);
}

#[test]
#[ignore = "tools: GNU time, taskset, python3"]
fn a_command_that_widens_its_affinity_is_counted_whole() {
    let _alone = one_mode_at_a_time();
    widened_affinity(&Work::new());
}

#[test]
#[ignore = "root: switches to the nobody user with setpriv; tools: GNU time, make, cc, python3"]
fn witnesses_agree_as_an_ordinary_user() {
    common::assert_root("it switches to an ordinary user");
    let _alone = one_mode_at_a_time();
    let work = Work::new();
    max_rss(&work, Mode::Nobody);
    storage(&work, Mode::Nobody);
    cpu(&work, Mode::Nobody);
}
