//! procfs files read once or rarely (open, read, close), outside the per-process pass and its
//! held descriptors: what kind of task a pid is, a zombie's storage bytes, the CPUs this process
//! may run on.

use super::parse::{parse_children, parse_io, parse_stat, parse_status_tgid, PF_KTHREAD};
use super::IoCounters;
use crate::source::file::read_once;
use crate::source::roots::Roots;

/// The process `pid` belongs to (`Tgid` of its `status`): another id for a thread, which opens
/// as `/proc/<tid>` too. `None` when the file cannot be read or parsed.
pub(crate) fn thread_group_id(roots: &Roots, pid: u32, buf: &mut Vec<u8>) -> Option<u32> {
    let path = roots.proc.join(pid.to_string()).join("status");
    read_once(&path, buf).ok().and_then(parse_status_tgid)
}

/// Whether `pid` is a kernel thread (`PF_KTHREAD` in the flags of its `stat`). `None` when the
/// file cannot be read or parsed.
pub(crate) fn is_kernel_thread(roots: &Roots, pid: u32, buf: &mut Vec<u8>) -> Option<bool> {
    let path = roots.proc.join(pid.to_string()).join("stat");
    let stat = read_once(&path, buf).ok().and_then(parse_stat)?;
    Some(stat.flags & PF_KTHREAD != 0)
}

/// `/proc/<pid>/io` of `pid` if it is still the process that started at `start_time_ticks`
/// (clock ticks after boot, stat field 22): a zombie's files stay readable until it is reaped,
/// and a pid reused since is another process. `None` when either file cannot be read.
pub(crate) fn io_of_same_process(
    roots: &Roots,
    pid: u32,
    start_time_ticks: u64,
    buf: &mut Vec<u8>,
) -> Option<IoCounters> {
    let dir = roots.proc.join(pid.to_string());
    let stat = read_once(&dir.join("stat"), buf)
        .ok()
        .and_then(parse_stat)?;
    if stat.start_time_ticks != start_time_ticks {
        return None;
    }
    read_once(&dir.join("io"), buf).ok().and_then(parse_io)
}

/// The children of every thread of `pid` (`/proc/<pid>/task/<tid>/children`); empty when `pid`
/// is gone. A malformed token ends that thread's list; the pids before it stay.
pub fn children_of(roots: &Roots, pid: u32, buf: &mut Vec<u8>) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(roots.proc.join(pid.to_string()).join("task")) else {
        return Vec::new();
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        if let Ok(listed) = read_once(&task.path().join("children"), buf) {
            let _ = parse_children(listed, &mut children);
        }
    }
    children
}

/// `pid`'s start time (clock ticks after boot, stat field 22) and whether it has exited
/// (state `Z` or `X`); `None` when it is gone or its `stat` cannot be parsed.
pub fn start_and_exited(roots: &Roots, pid: u32, buf: &mut Vec<u8>) -> Option<(u64, bool)> {
    let path = roots.proc.join(pid.to_string()).join("stat");
    let stat = read_once(&path, buf).ok().and_then(parse_stat)?;
    Some((stat.start_time_ticks, matches!(stat.state, b'Z' | b'X')))
}

/// `pid`'s command line (its arguments joined by spaces), or its name in brackets when it has
/// none (a kernel thread, a zombie); empty when it is gone.
pub fn command_line(roots: &Roots, pid: u32, buf: &mut Vec<u8>) -> String {
    let dir = roots.proc.join(pid.to_string());
    let line = read_once(&dir.join("cmdline"), buf)
        .map(|bytes| {
            String::from_utf8_lossy(bytes)
                .split('\0')
                .filter(|arg| !arg.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    if !line.is_empty() {
        return line;
    }
    let comm = read_once(&dir.join("comm"), buf)
        .map(|bytes| String::from_utf8_lossy(bytes).trim().to_owned())
        .unwrap_or_default();
    format!("[{comm}]")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(proc_dir: &std::path::Path, pid: u32, stat: &[u8], io: &[u8]) {
        let dir = proc_dir.join(pid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("stat"), stat).unwrap();
        std::fs::write(dir.join("io"), io).unwrap();
    }

    #[test]
    fn a_zombie_is_read_by_pid_and_start_time() {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots::fixture(dir.path());
        // comm with a space and a parenthesis; starttime (field 22) is 777.
        let stat = b"42 (a) b) Z 1 42 42 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0 18446744073709551615 0 0\n";
        let io = b"rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 67108864\ncancelled_write_bytes: 0\n";
        process(&roots.proc, 42, stat, io);
        let mut buf = Vec::new();
        let read = io_of_same_process(&roots, 42, 777, &mut buf).unwrap();
        assert_eq!((read.read_bytes, read.write_bytes), (4096, 67108864));
        // Another process with the same pid, or none.
        assert_eq!(io_of_same_process(&roots, 42, 778, &mut buf), None);
        assert_eq!(io_of_same_process(&roots, 43, 777, &mut buf), None);
        // A real zombie's files.
        process(
            &roots.proc,
            8759,
            include_bytes!("testdata/zombie_stat"),
            include_bytes!("testdata/zombie_io"),
        );
        let zombie = io_of_same_process(&roots, 8759, 38264, &mut buf).unwrap();
        assert_eq!((zombie.read_bytes, zombie.write_bytes), (0, 0));
    }

    #[test]
    fn a_thread_and_a_kernel_thread_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let roots = Roots::fixture(dir.path());
        let mut buf = Vec::new();
        assert_eq!(thread_group_id(&roots, 7, &mut buf), None);
        assert_eq!(is_kernel_thread(&roots, 7, &mut buf), None);
        let pid = roots.proc.join("7");
        std::fs::create_dir_all(&pid).unwrap();
        std::fs::write(pid.join("status"), "Name:\tx\nTgid:\t5\nPid:\t7\n").unwrap();
        std::fs::write(pid.join("stat"), include_bytes!("testdata/kthread_stat")).unwrap();
        assert_eq!(thread_group_id(&roots, 7, &mut buf), Some(5));
        assert_eq!(is_kernel_thread(&roots, 7, &mut buf), Some(true));
        std::fs::write(pid.join("stat"), include_bytes!("testdata/sleep_stat")).unwrap();
        assert_eq!(is_kernel_thread(&roots, 7, &mut buf), Some(false));
    }

    #[test]
    fn a_child_its_command_line_and_its_exit_are_read_from_procfs() {
        let roots = Roots::host();
        let mut buf = Vec::new();
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exec sleep 30", "label"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let own = std::process::id();
        assert!(children_of(&roots, own, &mut buf).contains(&pid));
        // Until its execs the child is a copy of this test, then a shell: wait for `sleep`'s
        // command line.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while command_line(&roots, pid, &mut buf) != "sleep 30" {
            assert!(
                std::time::Instant::now() < deadline,
                "never exec'd: {:?}",
                command_line(&roots, pid, &mut buf)
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let (start, exited) = start_and_exited(&roots, pid, &mut buf).unwrap();
        assert!(start > 0 && !exited);
        child.kill().unwrap();
        // Killed but not reaped: a zombie, same start time, no command line but its name.
        while start_and_exited(&roots, pid, &mut buf) != Some((start, true)) {
            assert!(std::time::Instant::now() < deadline, "not a zombie");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(command_line(&roots, pid, &mut buf), "[sleep]");
        child.wait().unwrap();
        assert_eq!(start_and_exited(&roots, pid, &mut buf), None);
        assert!(!children_of(&roots, own, &mut buf).contains(&pid));
    }
}
