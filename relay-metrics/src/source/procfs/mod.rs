//! Per-process counters from procfs (`/proc/<pid>/{stat,status,io,schedstat,smaps_rollup,fd}`)
//! and process discovery (all pids, or the tree below a root pid).
//!
//! Reading is built for high-rate sampling of a stable set of processes: [`ProcessReader`] holds
//! the descriptors of each pid's files and re-reads them with `pread` into one reused buffer, and
//! directories are listed with `getdents64` into a reused buffer, so the steady state performs no
//! `open` and no allocation. Parsers ([`parse`]) work on bytes and never panic.
//!
//! Process identity: each pid's files are opened relative to a held descriptor of `/proc/<pid>`.
//! Once that process is gone the kernel fails every lookup below that directory (ENOENT) and every
//! read of its held files (ESRCH), so counters of a new process that reuses the pid can never be
//! mixed with those of the old one; the reader then reports [`ProcessError::Gone`].

mod discover;
mod once;
#[cfg(feature = "agent")]
mod own;
pub(crate) mod parse;
mod reader;
pub(crate) mod sys;

pub(crate) use discover::{PidLister, ProcessTreeWalker};
pub use once::{children_of, command_line, start_and_exited};
pub(crate) use once::{io_of_same_process, is_kernel_thread, thread_group_id};
#[cfg(feature = "agent")]
pub(crate) use own::{open_fd_count, OwnProcess};
pub use reader::ProcessReader;
pub(crate) use reader::MAX_SCHEDSTAT_THREADS;

use std::path::PathBuf;

use nix::unistd::{sysconf, SysconfVar};

use super::SourceError;

/// `/proc/<pid>/schedstat`: scheduler statistics with ns precision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedStat {
    /// Time spent running on a CPU, ns.
    pub run_ns: u64,
    /// Time spent runnable but waiting on a run queue, ns.
    pub wait_ns: u64,
}

/// `/proc/<pid>/io`: storage-layer bytes and read/write syscall counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoCounters {
    /// `read_bytes`: bytes fetched from the storage layer.
    pub read_bytes: u64,
    /// `write_bytes`: bytes sent to the storage layer.
    pub write_bytes: u64,
    /// `syscr`: read-like syscalls.
    pub read_syscalls: u64,
    /// `syscw`: write-like syscalls.
    pub write_syscalls: u64,
}

/// Raw counters of one process at one instant. `None` means the field was not requested or its
/// file could not be read for a reason other than the process being gone (e.g. `/proc/1/io`
/// refused with EACCES, `smaps_rollup` of a kernel thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessSample {
    /// The process id.
    pub pid: u32,
    /// stat field 22: start time after boot in clock ticks; (pid, start time) identifies a process.
    pub start_time_ticks: u64,
    /// stat field 4: the parent's pid (0 for a process whose parent is outside its pid
    /// namespace).
    pub ppid: u32,
    /// stat field 14: user CPU time in clock ticks.
    pub utime_ticks: u64,
    /// stat field 15: system CPU time in clock ticks.
    pub stime_ticks: u64,
    /// stat field 16: user CPU time of the children the process waited for, in clock ticks
    /// (the base of cumulative process-tree accounting). `None` where the source does not give
    /// it: the task iterator's records do not carry it.
    pub cutime_ticks: Option<u64>,
    /// stat field 17: system CPU time of the waited-for children, in clock ticks; as
    /// [`ProcessSample::cutime_ticks`].
    pub cstime_ticks: Option<u64>,
    /// stat field 20: number of threads.
    pub num_threads: u64,
    /// Resident size: `statm` resident × page size when [`ProcessFields::exact_resident`] was
    /// asked and `statm` was readable, else stat field 24 × page size (the kernel's per-CPU
    /// approximation, which is also what Relay reports).
    pub rss_bytes: u64,
    /// stat field 23: virtual memory size (the same value as `VmSize` in `status`).
    pub vsize_bytes: u64,
    /// Scheduler statistics of the whole process: `/proc/<pid>/schedstat` for a single-threaded
    /// process, else the sum over its live threads' `task/<tid>/schedstat` (`None` above
    /// `reader::MAX_SCHEDSTAT_THREADS` threads).
    pub schedstat: Option<SchedStat>,
    /// The process's scheduler run time, ns, its exited threads included (the kernel's
    /// `signal->sum_sched_runtime` plus each live thread's `se.sum_exec_runtime`): from the task
    /// iterator's record only. No procfs file has it (`schedstat` covers the live threads, so a
    /// sum of them falls when a thread exits), so the procfs reader leaves it `None`.
    pub run_time_ns: Option<u64>,
    /// `VmHWM` of `/proc/<pid>/status`, KiB.
    pub peak_resident_kib: Option<u64>,
    /// `Private_Clean + Private_Dirty (+ Private_Hugetlb)` of `/proc/<pid>/smaps_rollup`, KiB.
    pub private_kib: Option<u64>,
    /// Entries of `/proc/<pid>/fd`.
    pub open_fd_count: Option<u64>,
    /// `/proc/<pid>/io`.
    pub io: Option<IoCounters>,
}

/// Which optional files [`ProcessReader::sample`] reads; `stat` is always read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessFields {
    /// Read `schedstat` (ns CPU time, run-queue wait).
    pub schedstat: bool,
    /// Read `status` for `VmHWM`.
    pub peak_resident: bool,
    /// Read `smaps_rollup` (expensive: about 90 µs, it walks every mapping).
    pub private_memory: bool,
    /// Count the entries of `fd/`.
    pub open_fds: bool,
    /// Read `io`.
    pub io: bool,
    /// Read `statm` for an exact resident size (stat's rss can lag behind on recent kernels).
    pub exact_resident: bool,
}

impl ProcessFields {
    /// Every optional file.
    pub const ALL: Self = Self {
        schedstat: true,
        peak_resident: true,
        private_memory: true,
        open_fds: true,
        io: true,
        exact_resident: true,
    };

    /// `stat` only.
    pub const STAT_ONLY: Self = Self {
        schedstat: false,
        peak_resident: false,
        private_memory: false,
        open_fds: false,
        io: false,
        exact_resident: false,
    };
}

/// Why a process could not be sampled.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The process exited (ENOENT/ESRCH); its handles were released. Expected during churn.
    #[error("process {pid} is gone")]
    Gone {
        /// The pid that vanished.
        pid: u32,
    },
    /// Access to the process's `stat` was refused (EACCES/EPERM).
    #[error("{path}: permission denied")]
    Denied {
        /// The file refused.
        path: PathBuf,
    },
    /// Any other I/O error, or malformed content.
    #[error(transparent)]
    Failed(#[from] SourceError),
}

impl ProcessError {
    /// True for [`ProcessError::Gone`].
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Gone { .. })
    }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of the tick counters in `stat`. `None` if sysconf fails;
/// the caller decides whether to fall back to 100 (and should say so), nothing here guesses.
pub(crate) fn clock_ticks_per_second() -> Option<u64> {
    positive_sysconf(SysconfVar::CLK_TCK)
}

/// `sysconf(_SC_PAGESIZE)`: the unit of `rss` in `stat`. `None` if sysconf fails; nothing here
/// falls back to 4096 silently.
pub(crate) fn page_size_bytes() -> Option<u64> {
    positive_sysconf(SysconfVar::PAGE_SIZE)
}

/// `sysconf` of a variable whose only valid values are positive (-1 means unknown).
fn positive_sysconf(variable: SysconfVar) -> Option<u64> {
    let value = sysconf(variable).ok().flatten()?;
    u64::try_from(value).ok().filter(|value| *value > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn getconf(name: &str) -> u64 {
        let out = std::process::Command::new("getconf")
            .arg(name)
            .output()
            .unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn sysconf_values_agree_with_getconf() {
        assert_eq!(clock_ticks_per_second(), Some(getconf("CLK_TCK")));
        assert_eq!(page_size_bytes(), Some(getconf("PAGESIZE")));
    }
}
