//! The guard: a process that ends the command's group if `run` dies without releasing it.
//! `run` holds the write end of a pipe whose read end is the guard's stdin: the kernel closes
//! it whatever ends `run`, and the guard reads end-of-file instead of the release byte. The
//! guard is this executable re-run (shown as `relay-metrics-run-guard`), started before
//! anything else that could fork, and it holds nothing of `run`'s but that pipe.
//!
//! Messages on the pipe: `g` (the group is reaped: leave it alone), `c` (the cgroup is removed),
//! `t<pid> <start time>\n` (a process that left the command's group, e.g. by `setsid`: once
//! `run` is gone it is re-parented to init, where nothing else would find it).

use std::io::{BufRead as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

use super::{cgroup, tree, ABORT_GRACE};

/// Set in the guard process's environment, to the command's process group.
const GUARD_ENV: &str = "RELAY_METRICS_RUN_GUARD";
/// Set in the guard process's environment: the directories of `run`'s cgroup, one a line.
const GUARD_CGROUP_ENV: &str = "RELAY_METRICS_RUN_GUARD_CGROUP";

pub(super) struct Guard {
    release: std::fs::File,
    process: Child,
}

impl Guard {
    pub(super) fn start(group: Pid, cgroup_dirs: &[PathBuf]) -> Result<Self> {
        let dirs: Vec<String> = cgroup_dirs
            .iter()
            .map(|dir| dir.display().to_string())
            .collect();
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .context("cannot make the guard's pipe")?;
        let process = std::process::Command::new("/proc/self/exe")
            .arg0("relay-metrics-run-guard")
            .env(GUARD_ENV, group.as_raw().to_string())
            .env(GUARD_CGROUP_ENV, dirs.join("\n"))
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start the guard process")?;
        Ok(Self {
            release: std::fs::File::from(write),
            process,
        })
    }

    /// The guard's pid (not one of the command's processes).
    pub(super) fn pid(&self) -> i32 {
        i32::try_from(self.process.id()).unwrap_or(0)
    }

    /// Sends a message (see the module's comment).
    pub(super) fn tell(&self, what: &[u8]) {
        // A guard that is gone already (killed by someone) fails the write: nothing to do.
        let _ = (&self.release).write_all(what);
    }

    /// Closes the pipe (the guard does what it was not released from) and reaps the guard.
    pub(super) fn finish(mut self) {
        drop(self.release);
        let _ = self.process.wait();
    }
}

/// What the guard was told.
#[derive(Default)]
struct Told {
    group_released: bool,
    cgroup_released: bool,
    /// Processes outside the group, with their start times.
    tracked: Vec<(i32, u64)>,
}

/// The guard's body, when this executable runs as one; returns at once otherwise. Call it first
/// thing in `main`.
pub(crate) fn guard_if_requested() {
    let Some(group) = std::env::var_os(GUARD_ENV) else {
        return;
    };
    let group = match group.to_str().and_then(|g| g.parse::<i32>().ok()) {
        Some(group) if group > 1 => Pid::from_raw(group),
        _ => {
            eprintln!("relay-metrics: {GUARD_ENV} is not a process group id");
            std::process::exit(2);
        }
    };
    // Only the pipe decides: signals meant for `run`'s own group do not end the guard (SIGKILL
    // still does).
    let _ = SigSet::all().thread_block();
    let cgroup_dirs: Vec<PathBuf> = std::env::var(GUARD_CGROUP_ENV)
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.is_empty())
        .map(PathBuf::from)
        .collect();
    let told = read_until_closed(cgroup_dirs.is_empty());
    if !told.group_released {
        end_group(group, Signal::SIGTERM);
        let deadline = Instant::now() + ABORT_GRACE;
        // Signal 0 probes the group: ESRCH once nobody is left.
        while killpg(group, None).is_ok() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        end_group(group, Signal::SIGKILL);
    }
    end_tracked(&told.tracked);
    if !told.cgroup_released {
        // Members that left the process group are still in the cgroup: removal ends them.
        let _ = cgroup::remove_dirs(&cgroup_dirs);
    }
    std::process::exit(0);
}

/// Reads the pipe until `run` closes it (or dies).
fn read_until_closed(no_cgroup: bool) -> Told {
    let mut told = Told {
        cgroup_released: no_cgroup,
        ..Told::default()
    };
    let mut stdin = std::io::stdin().lock();
    let mut message = Vec::new();
    loop {
        message.clear();
        match stdin.read_until(b'\n', &mut message) {
            Ok(0) => break,
            Ok(_) => {}
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(&message);
        // `g` and `c` come without a newline: one read may hold several messages.
        for part in text.split_inclusive(['g', 'c', '\n']) {
            match part {
                "g" => told.group_released = true,
                "c" => told.cgroup_released = true,
                _ => told.tracked.extend(parse_tracked(part)),
            }
        }
    }
    told
}

/// A `t<pid> <start time>\n` message.
fn parse_tracked(message: &str) -> Option<(i32, u64)> {
    let (pid, start) = message.trim().strip_prefix('t')?.split_once(' ')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// Ends the tracked processes that are still the ones `run` saw (same start time) and
/// everything below them.
fn end_tracked(tracked: &[(i32, u64)]) {
    let alive: Vec<i32> = tracked
        .iter()
        .filter(|(pid, start)| tree::start_time(*pid) == Some(*start))
        .map(|(pid, _)| *pid)
        .collect();
    if alive.is_empty() {
        return;
    }
    let mut all = tree::descendants_of(&alive);
    all.extend(&alive);
    tree::kill_all(&all);
}

/// Sends `signal` to the group, and SIGCONT so that stopped members see it.
pub(super) fn end_group(group: Pid, signal: Signal) {
    // ESRCH: nobody left in the group.
    let _ = killpg(group, signal);
    let _ = killpg(group, Signal::SIGCONT);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracked_messages_are_parsed_and_bad_ones_ignored() {
        assert_eq!(parse_tracked("t123 456\n"), Some((123, 456)));
        assert_eq!(parse_tracked("t123\n"), None);
        assert_eq!(parse_tracked("x1 2\n"), None);
        let parts: Vec<&str> = "gt12 34\nc".split_inclusive(['g', 'c', '\n']).collect();
        assert_eq!(parts, ["g", "t12 34\n", "c"]);
    }
}
