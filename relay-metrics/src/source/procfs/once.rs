//! procfs files read once or rarely (open, read, close), outside the per-process pass and its
//! held descriptors: what kind of task a pid is, a zombie's storage bytes, the CPUs this process
//! may run on.

use super::parse::{
    parse_io, parse_stat, parse_status_cpus_allowed_count, parse_status_tgid, PF_KTHREAD,
};
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

/// How many CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`, its
/// affinity), which the processes it starts inherit.
pub(crate) fn own_allowed_cpu_count(roots: &Roots) -> Option<u32> {
    let mut buf = Vec::new();
    let status = read_once(&roots.proc.join("self/status"), &mut buf).ok()?;
    parse_status_cpus_allowed_count(status)
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
    fn this_process_may_use_at_least_one_cpu() {
        let cpus = own_allowed_cpu_count(&Roots::host()).unwrap();
        assert!((1..=4096).contains(&cpus), "{cpus}");
    }
}
