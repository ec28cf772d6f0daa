//! The processes `run` is responsible for, found without a cgroup: `run` is a child subreaper,
//! so every descendant of the command, whatever it did (`setsid`, a double fork), stays a
//! descendant of `run` while `run` lives. Used to name what the command left running, to end
//! it, and to tell the guard which processes left the command's process group (the guard
//! cannot find them by ancestry once `run` is gone: they are re-parented to init).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_metrics::internals::procfs::{
    children_of as children_of_pid, command_line, start_and_exited,
};
use relay_metrics::internals::{own_children, Roots};

/// How often the guard is told about processes that left the command's group.
pub(super) const TRACK_EVERY: Duration = Duration::from_millis(100);
/// At most this many leftovers are named one by one.
const NAMED: usize = 10;

/// The descendants of the processes in `roots` (not the roots), each once.
pub(super) fn descendants_of(roots: &[i32]) -> Vec<i32> {
    let mut found: Vec<i32> = Vec::new();
    let mut seen: HashSet<i32> = roots.iter().copied().collect();
    let mut next: Vec<i32> = roots.to_vec();
    while let Some(pid) = next.pop() {
        for child in children_of(pid) {
            if seen.insert(child) {
                found.push(child);
                next.push(child);
            }
        }
    }
    found
}

/// `run`'s own descendants, but for the processes in `exclude` (the guard) and theirs, and
/// `run`'s own helpers (the eBPF loader, `statfs` helpers), which stay in `run`'s process
/// group: the command and all it starts are in other groups (its own, or new ones).
pub(super) fn own_descendants(exclude: &[i32]) -> Vec<i32> {
    let ours = nix::unistd::getpgrp();
    let direct: Vec<i32> = own_children()
        .into_iter()
        .filter(|pid| !exclude.contains(pid))
        .filter(|&pid| nix::unistd::getpgid(Some(Pid::from_raw(pid))).is_ok_and(|g| g != ours))
        .collect();
    let mut all = direct.clone();
    all.extend(descendants_of(&direct));
    all
}

/// The children of every thread of `pid`.
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(pid) = u32::try_from(pid) else {
        return Vec::new();
    };
    children_of_pid(&Roots::host(), pid, &mut Vec::new())
        .into_iter()
        .filter_map(|pid| i32::try_from(pid).ok())
        .collect()
}

/// `pid`'s start time and whether it has exited; `None` when it is gone.
fn state_of(pid: i32) -> Option<(u64, bool)> {
    start_and_exited(&Roots::host(), u32::try_from(pid).ok()?, &mut Vec::new())
}

/// The start time of `pid` (clock ticks since boot), which with the pid names one process for
/// good.
pub(super) fn start_time(pid: i32) -> Option<u64> {
    state_of(pid).map(|(start, _)| start)
}

/// SIGKILL to each process (and SIGCONT, so that a stopped one dies at once).
pub(super) fn kill_all(pids: &[i32]) {
    for &pid in pids {
        // ESRCH: it exited meanwhile.
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
    }
}

/// Ends `run`'s descendants (but the guard) until none is left, or for at most a second:
/// a process may fork between the listing and the kill.
pub(super) fn end_own_descendants(guard: Option<i32>) {
    let exclude: Vec<i32> = guard.into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let alive: Vec<i32> = own_descendants(&exclude)
            .into_iter()
            .filter(|&pid| !is_zombie(pid))
            .collect();
        if alive.is_empty() || Instant::now() > deadline {
            return;
        }
        kill_all(&alive);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// True for a process that exited and waits to be reaped (or is gone).
pub(super) fn is_zombie(pid: i32) -> bool {
    state_of(pid).is_none_or(|(_, exited)| exited)
}

/// A process the command left running: its pid and command line.
pub(super) struct Leftover {
    pub(super) pid: i32,
    pub(super) command: String,
}

/// The live processes among `pids`, with their command lines.
pub(super) fn leftovers(pids: impl IntoIterator<Item = i32>) -> Vec<Leftover> {
    let mut left: Vec<Leftover> = pids
        .into_iter()
        .filter(|&pid| !is_zombie(pid))
        .map(|pid| Leftover {
            pid,
            command: command_line_of(pid),
        })
        .collect();
    left.sort_by_key(|l| l.pid);
    left
}

/// `pid`'s command line (its name in brackets when it has none), cut at 60 characters.
fn command_line_of(pid: i32) -> String {
    let line = u32::try_from(pid)
        .map(|pid| command_line(&Roots::host(), pid, &mut Vec::new()))
        .unwrap_or_default();
    match line.char_indices().nth(60) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line,
    }
}

/// One sentence naming the leftovers and what `run` did to them.
pub(super) fn describe(left: &[Leftover], what_run_did: &str) -> String {
    let named: Vec<String> = left
        .iter()
        .take(NAMED)
        .map(|l| format!("{} {}", l.pid, l.command))
        .collect();
    let more = match left.len().saturating_sub(NAMED) {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    let count = match left.len() {
        1 => "1 process".to_string(),
        n => format!("{n} processes"),
    };
    format!(
        "the command left {count} running ({}{more}): {what_run_did}",
        named.join("; ")
    )
}

/// Tells the guard (through `send`) about the processes that left the command's process
/// group, each once, at most every [`TRACK_EVERY`].
pub(super) struct Tracker {
    group: Pid,
    guard: Option<i32>,
    told: HashSet<(i32, u64)>,
    last: Option<Instant>,
}

impl Tracker {
    pub(super) fn new(group: Pid, guard: Option<i32>) -> Self {
        Self {
            group,
            guard,
            told: HashSet::new(),
            last: None,
        }
    }

    /// Lists `run`'s descendants outside the group (when due) and passes each new one to
    /// `send` as a `t<pid> <start time>\n` message.
    pub(super) fn track(&mut self, mut send: impl FnMut(&[u8])) {
        let now = Instant::now();
        if self
            .last
            .is_some_and(|last| now.duration_since(last) < TRACK_EVERY / 2)
        {
            return;
        }
        self.last = Some(now);
        let exclude: Vec<i32> = self.guard.into_iter().collect();
        for pid in own_descendants(&exclude) {
            if nix::unistd::getpgid(Some(Pid::from_raw(pid))) == Ok(self.group) {
                continue;
            }
            let Some(start) = start_time(pid) else {
                continue;
            };
            if self.told.insert((pid, start)) {
                send(format!("t{pid} {start}\n").as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_are_found_through_every_level_and_described() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut found = descendants_of(&[pid]);
        while found.len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            found = descendants_of(&[pid]);
        }
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(start_time(pid).is_some());
        let left = leftovers(found.iter().copied());
        let text = describe(&left, "ended");
        assert!(
            text.starts_with("the command left 2 processes running ("),
            "{text}"
        );
        assert!(text.contains("sleep 30"), "{text}");
        kill_all(&found);
        kill_all(&[pid]);
        child.wait().unwrap();
        assert!(descendants_of(&[pid]).is_empty());
    }
}
