//! The command line's conventions: `run`'s exit statuses for a command that cannot be run,
//! shell completions, man pages, `--version` with the commit, and `bench`'s rounded figures.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Output, Stdio};

use common::{json_of, relay_metrics};
use serde_json::Value;

/// `run`'s exit status and its one-line error.
fn refused_run(args: &[&str], code: i32, expected: &str) {
    let output = relay_metrics(&[&["run", "--"], args].concat());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(code),
        "{args:?}: stderr {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("relay-metrics: error: cannot run ") && stderr.contains(expected),
        "{args:?}: {stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "no snapshot for a command never started"
    );
}

#[test]
fn run_exits_127_for_a_command_not_found_and_126_for_one_not_executable() {
    refused_run(&["relay-metrics-no-such-command"], 127, "command not found");
    refused_run(
        &["/nonexistent/relay-metrics-test"],
        127,
        "command not found",
    );
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused_run(&[script.to_str().unwrap()], 126, "not executable");
    refused_run(&[dir.path().to_str().unwrap()], 126, "is a directory");
    // Found through $PATH but not executable: 126 as well, as execvp and the shells say.
    let output = Command::new(common::binary())
        .args(["run", "--", "not-executable"])
        .env("PATH", dir.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(126), "{output:?}");
    // The command's own status still comes back as is.
    let output = relay_metrics(&["run", "--output", "/dev/null", "--", "sh", "-c", "exit 3"]);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
}

fn completions(shell: &str) -> String {
    let output = relay_metrics(&["completions", shell]);
    assert!(output.status.success(), "{shell}: {output:?}");
    let script = String::from_utf8(output.stdout).unwrap();
    for command in ["snapshot", "watch", "serve", "bench", "run", "completions"] {
        assert!(script.contains(command), "{shell} completes {command}");
    }
    script
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish_and_bash_parses_its_script() {
    let bash = completions("bash");
    assert!(bash.contains("--interval-ms"), "options are completed too");
    let mut check = Command::new("bash")
        .arg("-n")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("bash runs");
    check
        .stdin
        .take()
        .unwrap()
        .write_all(bash.as_bytes())
        .unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "bash -n: {}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(completions("zsh").starts_with("#compdef relay-metrics"));
    assert!(completions("fish").contains("complete -c relay-metrics"));
    let output = relay_metrics(&["completions", "tcsh"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

#[test]
fn man_pages_are_written_for_the_command_and_each_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let output = relay_metrics(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    for name in [
        "",
        "-snapshot",
        "-watch",
        "-serve",
        "-bench",
        "-run",
        "-completions",
    ] {
        let page = std::fs::read_to_string(dir.path().join(format!("relay-metrics{name}.1")))
            .unwrap_or_else(|error| panic!("relay-metrics{name}.1: {error}"));
        assert!(page.contains(".TH relay-metrics"), "roff: {page}");
        assert!(page.contains(".SH SYNOPSIS"), "{name}: {page}");
    }
    let serve = std::fs::read_to_string(dir.path().join("relay-metrics-serve.1")).unwrap();
    assert!(
        serve.contains("otlp\\-endpoint"),
        "the flags are documented"
    );
    assert!(
        !dir.path().join("relay-metrics-man.1").exists(),
        "the hidden command has none"
    );
}

/// What `git rev-parse --short HEAD` says here, if git and a repository are there.
fn git_commit() -> Option<String> {
    let output: Output = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !commit.is_empty()).then_some(commit)
}

#[test]
fn version_names_the_commit_it_was_built_from() {
    let output = relay_metrics(&["--version"]);
    assert!(output.status.success(), "{output:?}");
    let version = String::from_utf8(output.stdout).unwrap();
    let commit = std::env::var("RELAY_METRICS_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        version.trim(),
        format!(
            "relay-metrics {} (commit {commit})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// Digits after the decimal point of a JSON number as printed.
fn decimals(number: &Value) -> usize {
    let text = number.to_string();
    text.split_once('.')
        .map_or(0, |(_, fraction)| fraction.len())
}

#[test]
fn bench_prints_figures_rounded_to_two_decimals() {
    let pid = std::process::id().to_string();
    let report = json_of(&relay_metrics(&[
        "bench",
        "--pid",
        &pid,
        "--iterations",
        "20",
    ]));
    for key in ["median_us", "p99_us", "max_us", "cpu_us_per_collect"] {
        let figure = &report[key];
        assert!(
            figure.as_f64().is_some_and(|us| us > 0.0),
            "{key}: {report}"
        );
        assert!(decimals(figure) <= 2, "{key} is rounded: {report}");
    }
}
