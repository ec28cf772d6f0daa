//! Starting the command stopped, from a small process rather than from `run`'s address space.
//!
//! `execve` records the exiting image's peak RSS in the process's `ru_maxrss`, and a child
//! spawned by `run` (std spawns with `CLONE_VM`, sharing `run`'s memory until it execs) carries
//! `run`'s own peak into the command's: `/bin/true` reported 6.5–7.3 MB against GNU time's
//! 1.0 MB. So a shell started by `run` forks the command's shell in the background and exits:
//! the command's process is a fork of that shell (its peak, not `run`'s), and as `run` is a
//! child subreaper it becomes `run`'s child again, in the process group of the exited shell.
//! That shell stops itself, so the collector attaches before the command creates anything.
//!
//! A shell's background job starts with SIGINT and SIGQUIT ignored (POSIX, without job
//! control) and its stdin on `/dev/null`: `env --default-signal` restores the signals `run`
//! did not find ignored, and the job's stdin is `run`'s. Where that cannot be done (no subreaper,
//! an `env` without `--default-signal`, no stdin), `run` starts the command's shell itself.

use std::os::fd::AsFd as _;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// The shell that stops itself, then becomes the command.
const STOP_THEN_EXEC: &str = "kill -STOP $$ && exec \"$0\" \"$@\"";

/// The command, started and stopped (or already exited).
pub(super) struct Started {
    /// The command's pid.
    pub(super) pid: Pid,
    /// Its process group.
    pub(super) group: Pid,
}

/// Starts `program` stopped in a process group of its own.
pub(super) fn start_stopped(
    program: &str,
    arguments: &[String],
    subreaper: bool,
) -> Result<Started> {
    match forked_from_a_shell(subreaper) {
        Some(reset) => start_in_background(program, arguments, &reset),
        None => start_directly(program, arguments),
    }
}

/// The `env` prefix that restores the signals a background job has ignored, when the command
/// can be started by a shell's background job.
fn forked_from_a_shell(subreaper: bool) -> Option<String> {
    let stdin_open = nix::fcntl::fcntl(std::io::stdin().as_fd(), nix::fcntl::F_GETFD).is_ok();
    if !subreaper || !stdin_open {
        return None;
    }
    let ignored = ignored_signals();
    let reset: Vec<&str> = [("INT", libc::SIGINT), ("QUIT", libc::SIGQUIT)]
        .into_iter()
        .filter(|(_, signal)| !ignored.contains(signal))
        .map(|(name, _)| name)
        .collect();
    if reset.is_empty() {
        return Some(String::new());
    }
    let option = format!("--default-signal={}", reset.join(","));
    let works = std::process::Command::new("env")
        .args([option.as_str(), "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success());
    works.then(|| format!("env {option} "))
}

/// The signals this process ignores (`SigIgn` of `/proc/self/status`).
fn ignored_signals() -> Vec<i32> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    (1..=64)
        .filter(|signal| mask & (1u64 << (signal - 1)) != 0)
        .collect()
}

/// A shell forks the command's shell (`reset` prefixes it) in the background and exits; the
/// command's shell, `run`'s child once re-parented, stops itself.
fn start_in_background(program: &str, arguments: &[String], reset: &str) -> Result<Started> {
    let script = format!("exec 3<&0; {reset}/bin/sh -c '{STOP_THEN_EXEC}' \"$@\" <&3 3<&- &");
    let mut starter = std::process::Command::new("/bin/sh")
        .args(["-c", &script, "relay-metrics-run"])
        .arg(program)
        .args(arguments)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let group = Pid::from_raw(i32::try_from(starter.id()).context("pid out of range")?);
    let status = starter
        .wait()
        .context("cannot wait for the starting shell")?;
    if !status.success() {
        bail!("cannot start {program}: the starting shell exited with {status}");
    }
    // Its background job is `run`'s child now (`run` is a subreaper), alone in the group.
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    let pid = loop {
        match waitid(Id::PGid(group), flags) {
            Ok(WaitStatus::Stopped(pid, _) | WaitStatus::Exited(pid, _))
            | Ok(WaitStatus::Signaled(pid, _, _)) => break pid,
            Ok(other) => bail!("cannot start {program}: unexpected state {other:?}"),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(error) => bail!("cannot start {program}: its shell is not run's child ({error})"),
        }
    };
    Ok(Started { pid, group })
}

/// `run` starts the command's shell itself (its `ru_maxrss` then starts at `run`'s peak).
fn start_directly(program: &str, arguments: &[String]) -> Result<Started> {
    let child = std::process::Command::new("/bin/sh")
        .args(["-c", STOP_THEN_EXEC, program])
        .args(arguments)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let pid = Pid::from_raw(i32::try_from(child.id()).context("pid out of range")?);
    Ok(Started { pid, group: pid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ignored_signals_are_read_from_the_status_file() {
        // The test runner's SIGPIPE is ignored by Rust's runtime.
        assert!(ignored_signals().contains(&libc::SIGPIPE));
        assert!(!ignored_signals().contains(&libc::SIGKILL));
    }
}
