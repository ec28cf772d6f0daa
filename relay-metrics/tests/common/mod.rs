//! Helpers shared by the binary's tests: run `relay-metrics`, reap children, read this
//! machine's facts, find the test virtualenv, start an agent and talk HTTP/1.1 to it
//! ([`agent`]), receive its OTLP exports ([`otlp`]), scrape it with Prometheus
//! ([`prometheus`]), make a cgroup of the test's own ([`cgroup`]).

#![allow(
    dead_code,
    unused_imports,
    reason = "each test binary uses its own subset of the helpers"
)]

mod agent;
mod cgroup;
mod otlp;
mod prometheus;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use serde_json::Value;

pub use agent::*;
pub use cgroup::{own_path, Below, TestCgroup};
pub use otlp::{receive_requests, OtlpReceiver};
pub use prometheus::Prometheus;

/// Kills and reaps a child when dropped, also when an assertion fails.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary under test.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_relay-metrics")
}

/// Copies the binary to `path`, executable by anyone, and returns once it can be executed.
/// While the copy is open for writing, a child that another test's thread forks holds it open
/// too until that child execs its own program, and executing the copy fails meanwhile with
/// "Text file busy" (ETXTBSY). Once one execution of the copy succeeds, no process holds it
/// open for writing and none can come to.
pub fn copy_binary(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::copy(binary(), path)
        .unwrap_or_else(|error| panic!("copy to {}: {error}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|error| panic!("chmod {}: {error}", path.display()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match Command::new(path).arg("--version").output() {
            Ok(output) if output.status.success() => return,
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => panic!("{} --version: {other:?}", path.display()),
        }
    }
}

/// Runs the binary with `args` (stdin closed) to completion.
pub fn relay_metrics(args: &[&str]) -> Output {
    Command::new(binary())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("the binary runs: {error}"))
}

/// Asserts that the command succeeded, showing its exit status and stderr if not.
pub fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The NDJSON lines of a successful `relay-metrics run OPTIONS -- sh -c SCRIPT` (stdin closed).
pub fn run_script(options: &[&str], script: &str) -> Vec<Value> {
    let mut args = vec!["run"];
    args.extend_from_slice(options);
    args.extend(["--", "sh", "-c", script]);
    let output = relay_metrics(&args);
    assert_success(&output);
    json_lines(&output.stdout)
}

/// The JSON document a successful run printed.
pub fn json_of(output: &Output) -> Value {
    assert_success(output);
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("stdout is one JSON document: {error}"))
}

/// The JSON documents of an NDJSON stream (empty lines skipped); fails on any other line.
pub fn json_lines(stdout: &[u8]) -> Vec<Value> {
    stdout
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| {
            serde_json::from_slice(line).unwrap_or_else(|error| {
                panic!("{error} in line {:?}", String::from_utf8_lossy(line))
            })
        })
        .collect()
}

/// Asserts a failure with no output and no panic, whose stderr contains `expected`.
pub fn assert_refused(output: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "succeeded: {stderr}");
    assert!(
        output.stdout.is_empty(),
        "printed: {}",
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(
        stderr.contains(expected),
        "expected {expected:?} in {stderr}"
    );
}

/// Fails the test unless it runs as root; `why` says what needs root.
pub fn assert_root(why: &str) {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root ({why}): run it as root with `cargo test -- --include-ignored`"
    );
}

/// `MemTotal` of `/proc/meminfo`, in KiB.
pub fn meminfo_total_kib() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_else(|error| panic!("/proc/meminfo: {error}"));
    meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.trim().strip_suffix("kB"))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no MemTotal in /proc/meminfo"))
}

/// The value of the first series of `name` in a Prometheus exposition.
pub fn sample<'a>(exposition: &'a str, name: &str) -> &'a str {
    exposition
        .lines()
        .find(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .and_then(|line| line.rsplit(' ').next())
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// `promtool check metrics` on `exposition`: whether it passed, and what it printed
/// (`promtool` comes from Debian's `prometheus`, which `scripts/install-deps.sh` installs).
pub fn promtool_check(exposition: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("promtool (Debian package prometheus: run scripts/install-deps.sh): {error}")
        });
    child
        .stdin
        .take()
        .unwrap_or_else(|| unreachable!())
        .write_all(exposition.as_bytes())
        .unwrap_or_else(|error| panic!("writing to promtool: {error}"));
    let output = child
        .wait_with_output()
        .unwrap_or_else(|error| panic!("promtool: {error}"));
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

/// The Python of the virtualenv `scripts/install-deps.sh` makes in `target/otlp-venv`
/// (opentelemetry-proto, grpcio, kubernetes-validate); fails the test when it is missing.
pub fn venv_python() -> PathBuf {
    venv_bin("python")
}

/// A program of that virtualenv; fails the test when it is missing.
pub fn venv_bin(name: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/otlp-venv/bin")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-deps.sh as root (it creates the test virtualenv)",
        path.display()
    );
    path
}
