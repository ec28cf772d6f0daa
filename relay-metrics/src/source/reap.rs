//! `wait4`: reaping a child together with its resource usage (what GNU `time` reports), which
//! neither nix nor rustix wraps; and the list of this process's children, to reap.

use std::io;
use std::time::Duration;

use crate::source::file::{FileKind, HeldFile};

/// A reaped child and what it (with its own reaped descendants) used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reaped {
    /// Its pid.
    pub pid: i32,
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub system: Duration,
    /// The largest resident size of a single process of it (bytes; `ru_maxrss` is KiB).
    pub max_rss_bytes: u64,
    /// Blocks read from storage (`ru_inblock`, 512-byte units).
    pub in_blocks: u64,
    /// Blocks written to storage (`ru_oublock`).
    pub out_blocks: u64,
}

/// Reaps the child `pid` (any child in process group `-pid` when negative), waiting for it
/// unless `nohang`; `Ok(None)` when `nohang` and it has not exited yet. Retries on EINTR.
pub fn wait4(pid: i32, nohang: bool) -> io::Result<Option<Reaped>> {
    let options = if nohang { libc::WNOHANG } else { 0 };
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: all-zero is a valid `rusage` (plain integers and timevals).
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both pointers are to live, writable locals of the right types.
        let reaped = unsafe { libc::wait4(pid, &mut status, options, &mut usage) };
        if reaped < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        if reaped == 0 {
            return Ok(None);
        }
        let time = |t: libc::timeval| {
            Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
                + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
        };
        let count = |n: libc::c_long| u64::try_from(n).unwrap_or(0);
        let exited = libc::WIFEXITED(status);
        let signaled = libc::WIFSIGNALED(status);
        return Ok(Some(Reaped {
            pid: reaped,
            code: exited.then(|| libc::WEXITSTATUS(status)),
            signal: signaled.then(|| libc::WTERMSIG(status)),
            user: time(usage.ru_utime),
            system: time(usage.ru_stime),
            max_rss_bytes: count(usage.ru_maxrss).saturating_mul(1024),
            in_blocks: count(usage.ru_inblock),
            out_blocks: count(usage.ru_oublock),
        }));
    }
}

/// This process's children (pids), from every thread's `/proc/self/task/<tid>/children`;
/// empty where they cannot be read.
pub fn own_children() -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|children| {
            children
                .split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

/// The list of this process's main thread's children, held open: the kernel reparents an orphan
/// to a child subreaper's first live thread, its leader while it lives (`find_alive_thread`),
/// so that one file lists the orphans it adopted.
pub(crate) fn main_thread_children() -> HeldFile {
    let leader = std::process::id();
    HeldFile::new(
        format!("/proc/self/task/{leader}/children"),
        FileKind::Records,
    )
}

/// The children listed by `children` ([`main_thread_children`]) outside this process's own
/// process group: where it is a child subreaper whose helpers stay in its group, the processes
/// it adopted (and any it started in groups of their own). Empty where the list cannot be read.
pub(crate) fn adopted_children(children: &mut HeldFile, buf: &mut Vec<u8>) -> Vec<u32> {
    let own_group = nix::unistd::getpgrp();
    let Ok(listed) = children.read(buf) else {
        return Vec::new();
    };
    listed
        .split(u8::is_ascii_whitespace)
        .filter_map(|pid| std::str::from_utf8(pid).ok()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(raw) = i32::try_from(pid) else {
                return false;
            };
            nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(raw)))
                .is_ok_and(|group| group != own_group)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_children_lists_a_child_until_it_is_reaped() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        assert!(own_children().contains(&pid), "{:?}", own_children());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!own_children().contains(&pid));
    }

    #[test]
    #[expect(
        clippy::zombie_processes,
        reason = "the child is reaped by the wait4 under test"
    )]
    fn a_reaped_child_brings_its_status_and_cpu() {
        let child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; exit 3",
            ])
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let reaped = wait4(pid, false).unwrap().unwrap();
        assert_eq!(
            (reaped.pid, reaped.code, reaped.signal),
            (pid, Some(3), None)
        );
        assert!(reaped.user + reaped.system > Duration::ZERO);
        assert!(reaped.max_rss_bytes > 0);
        assert!(wait4(pid, true).is_err(), "ECHILD once reaped");
    }
}
