//! Process values of every process from one BPF task-iterator read.
//!
//! The program (`relay-metrics-ebpf/iter/task_iter.bpf.c`, C with CO-RE, built by clang into the
//! committed [`OBJECT`]) visits every task and writes one binary record per thread-group leader
//! with the kernel fields `/proc/<pid>/{stat,statm,io}` and `fd/` compute their values from:
//! thread-summed CPU times and the kernel's clamp state for the utime/stime split, thread count,
//! start time, virtual size, rss counters, I/O totals (dead threads plus live ones) and the
//! population count of the fd table. [`TaskRecord`] turns a record into the values procfs would
//! print for the same process; `docs/PROCESS_SOURCE.md` says which value comes from where.
//!
//! Why C with CO-RE rather than Rust: Rust eBPF has no CO-RE relocations, so a Rust program
//! would need every offset (task, signal, mm, files, fdtable, io accounting, thread list) passed
//! in from a user-side BTF parse, and the 6.1/6.2 `rss_stat` change (an atomic array, then
//! per-CPU counters) would need two code paths chosen by hand. clang's CO-RE reads let the
//! loader (aya) relocate each access to the running kernel and pick the `rss_stat` layout with
//! a field-existence check.
//!
//! Loading needs root (or CAP_BPF + CAP_PERFMON), kernel BTF, and a kernel not locked down for
//! confidentiality (the program reads kernel memory). [`TaskIter::load`] checks what it can
//! before loading and reads once to prove the records describe this process as procfs does;
//! every refusal is a reason the collector reports while it falls back to procfs.

mod child;
mod sample;
#[cfg(test)]
pub(crate) mod tests;

pub(crate) use child::serve_if_child;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::source::held::{self, Published};
use crate::source::{procfs, Roots};

/// The task-iterator object, committed so that a plain `cargo build` needs no clang.
static OBJECT: &[u8] = aya::include_bytes_aligned!("task_iter.bpf.o");

/// The program's name in [`OBJECT`].
const PROGRAM: &str = "task_leaders";

/// Fields of one record (`struct task_record`, whose layout the program's source defines and
/// checks against this count), each a little-endian 64-bit value.
const RECORD_FIELDS: usize = 32;

/// Size of one record.
pub(crate) const RECORD_BYTES: usize = RECORD_FIELDS * 8;

/// Descriptors a [`TaskIter::read`] holds while the program runs (the iterator's own): for the
/// collector's own process, in flight in the sense of `source::held::own_fd_count`.
pub(crate) const READ_DESCRIPTORS: usize = 1;

/// `task_record.status` bits, as the program sets them.
const STATUS_THREADS_TRUNCATED: u64 = 1;
const STATUS_FDS_TRUNCATED: u64 = 2;
const STATUS_HAS_MM: u64 = 4;
const STATUS_RSS_ATOMIC: u64 = 8;
const STATUS_RSS_PERCPU: u64 = 16;
const STATUS_RSS_SUMMED: u64 = 64;
const STATUS_SPLIT_CGROUPS: u64 = 128;
const STATUS_ACTIVITY: u64 = 256;
const STATUS_TORN: u64 = 512;

/// `PF_KTHREAD` in `task_struct.flags`.
const PF_KTHREAD: u64 = 0x0020_0000;

/// One thread-group leader as the iterator saw it: raw kernel values, ns and pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TaskRecord {
    /// Process id as the reading process's PID namespace sees it.
    pub tgid: u32,
    /// The real parent's process id in that namespace (0 for children of the idle task, and
    /// where the parent is outside the namespace), as `stat` prints it.
    pub ppid: u32,
    /// `task->flags`.
    pub flags: u64,
    /// Program status bits (truncated walks, which `rss_stat` layout was read).
    pub status: u64,
    /// `task->start_boottime`, ns.
    pub start_boottime_ns: u64,
    /// Tick-sampled user time summed over dead and live threads, ns.
    pub utime_ns: u64,
    /// Tick-sampled system time summed over dead and live threads, ns.
    pub stime_ns: u64,
    /// Scheduler run time summed over dead and live threads, ns.
    pub runtime_ns: u64,
    /// `signal->prev_cputime.utime`: the last whole-process utime the kernel reported.
    pub prev_utime_ns: u64,
    /// `signal->prev_cputime.stime`.
    pub prev_stime_ns: u64,
    /// `(utime, stime)`, ns, as `/proc/<pid>/stat` would print them to this reader: set by
    /// [`TaskIter::read`] (see [`Splits`]); `(0, 0)` in a record only parsed.
    pub split_ns: (u64, u64),
    /// `signal->nr_threads`.
    pub nr_threads: u64,
    /// `mm->total_vm`, pages.
    pub total_vm_pages: u64,
    /// rss counters (file, anon, shmem): the atomic values (Linux ≤ 6.1) or the per-CPU
    /// counters' central counts (6.2+), pages, unclamped.
    pub rss_pages: [i64; 3],
    /// `read_bytes`, `write_bytes`, `syscr`, `syscw` of the whole process.
    pub io: [u64; 4],
    /// Open descriptors (bits set in the fd table's open bitmap).
    pub open_fds: u64,
    /// Default-hierarchy (v2) cgroup id.
    pub cgroup_id: u64,
    /// Scheduler run time of the live threads, ns (the sum of `task/<tid>/schedstat`'s first
    /// field).
    pub live_runtime_ns: u64,
    /// Run-queue wait of the live threads, ns (the sum of `task/<tid>/schedstat`'s second field).
    pub run_delay_ns: u64,
    /// Linux 6.2+: the rss counters (file, anon, shmem) as `percpu_counter_sum` computes them
    /// (central count plus every CPU's part), pages, unclamped; `None` where the program could
    /// not add the parts up (more CPUs than it sums, older layout).
    pub rss_sum_pages: Option<[i64; 3]>,
    /// The cgroup id (the inode number of its directory) in the v1 hierarchy of controller
    /// [`V1_CONTROLLERS`]`[n]` for `v1_controller` `Some(n)`: the first of them mounted as v1
    /// when the program was loaded ([`membership_controller`]); `None` where there is none.
    pub v1_cgroup_id: u64,
    /// See [`Self::v1_cgroup_id`].
    pub v1_controller: Option<usize>,
    /// Context switches (voluntary and involuntary) of the dead and the live threads.
    pub switches: u64,
    /// Live threads on a CPU, on a run queue, in iowait or in a memstall when the program
    /// passed them (the others can be charged no CPU time and add to no pressure).
    pub busy_threads: u64,
    /// The cgroup id in the v1 `cpuacct` hierarchy, 0 where `cpuacct` is not on v1.
    pub cpuacct_cgroup_id: u64,
    /// The network namespace: the inode number of `/proc/<pid>/ns/net`
    /// (`nsproxy->net_ns->ns.inum`); `None` where the task had none (exiting).
    pub net_ns_inode: Option<u64>,
}

/// The controllers whose v1 hierarchy can define membership, in the order the first mounted one
/// is chosen (by the program for [`TaskRecord::v1_cgroup_id`], by `serve --cgroups` for its
/// walk).
pub(crate) const V1_CONTROLLERS: [&str; 4] = ["memory", "cpu", "cpuacct", "pids"];

/// The first of [`V1_CONTROLLERS`] that `layout` has on a v1 hierarchy, by index.
pub(crate) fn membership_controller(layout: &crate::source::cgroup::CgroupLayout) -> Option<usize> {
    V1_CONTROLLERS
        .iter()
        .position(|controller| layout.v1_hierarchy(controller).is_some())
}

/// Where a record's resident size can come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ResidentSource {
    /// The record's counters are what `statm` and `stat` print (Linux ≤ 6.1: atomics).
    Exact,
    /// Linux 6.16+: the per-CPU counters summed as `statm` sums them ([`TaskRecord::rss_sum_pages`]).
    Summed,
    /// The record has only the per-CPU counters' central counts (Linux 6.2+): equal to `stat`'s
    /// rss, not necessarily to `statm`. `statm` must be read.
    CentralCountOnly,
    /// No address space (kernel thread, zombie): 0.
    None,
}

impl TaskRecord {
    /// Parses one record; `None` unless `bytes` is exactly [`RECORD_BYTES`] long.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != RECORD_BYTES {
            return None;
        }
        let mut fields = [0u64; RECORD_FIELDS];
        for (field, chunk) in fields.iter_mut().zip(bytes.chunks_exact(8)) {
            *field = u64::from_le_bytes(chunk.try_into().ok()?);
        }
        let signed = |value: u64| i64::from_ne_bytes(value.to_ne_bytes());
        Some(Self {
            tgid: u32::try_from(fields[0]).ok()?,
            ppid: u32::try_from(fields[1]).ok()?,
            flags: fields[2],
            status: fields[3],
            start_boottime_ns: fields[4],
            utime_ns: fields[5],
            stime_ns: fields[6],
            runtime_ns: fields[7],
            prev_utime_ns: fields[8],
            prev_stime_ns: fields[9],
            split_ns: (0, 0),
            nr_threads: fields[10],
            total_vm_pages: fields[11],
            rss_pages: [signed(fields[12]), signed(fields[13]), signed(fields[14])],
            io: [fields[15], fields[16], fields[17], fields[18]],
            open_fds: fields[19],
            cgroup_id: fields[20],
            live_runtime_ns: fields[21],
            run_delay_ns: fields[22],
            rss_sum_pages: (fields[3] & STATUS_RSS_SUMMED != 0)
                .then(|| [signed(fields[23]), signed(fields[24]), signed(fields[25])]),
            v1_cgroup_id: fields[26],
            v1_controller: usize::try_from(fields[27])
                .ok()
                .and_then(|slot| slot.checked_sub(1))
                .filter(|&at| at < V1_CONTROLLERS.len()),
            switches: fields[28],
            busy_threads: fields[29],
            cpuacct_cgroup_id: fields[30],
            net_ns_inode: Some(fields[31]).filter(|&inode| inode != 0),
        })
    }

    /// A kernel thread (no address space, no file table of its own).
    pub(crate) fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0
    }

    /// The record holds the whole process: the program walked every thread and the whole fd
    /// bitmap (it stops at its bounds), and no thread exited while it read the process (such a
    /// thread's counters may be in neither the dead threads' totals nor the live threads'
    /// sums). Otherwise CPU time, I/O or the fd count could be short, and this process must be
    /// read through procfs.
    pub(crate) fn is_complete(&self) -> bool {
        self.status & (STATUS_THREADS_TRUNCATED | STATUS_FDS_TRUNCATED | STATUS_TORN) == 0
    }

    /// A thread exited while the program read the process (see [`Self::is_complete`]).
    pub(crate) fn is_torn(&self) -> bool {
        self.status & STATUS_TORN != 0
    }

    /// The program walked every live thread (it stops at its bound).
    pub(crate) fn walked_every_thread(&self) -> bool {
        self.status & STATUS_THREADS_TRUNCATED == 0
    }

    /// The program read the unchanged-cgroup rule's fields (`switches`, `busy_threads`,
    /// `cpuacct_cgroup_id`, the split bit): see [`tries_activity_fields`].
    pub(crate) fn has_activity_fields(&self) -> bool {
        self.status & STATUS_ACTIVITY != 0
    }

    /// Some live thread sits in other cgroups than the leader (its `css_set` differs).
    pub(crate) fn has_split_cgroups(&self) -> bool {
        self.status & STATUS_SPLIT_CGROUPS != 0
    }

    /// What the resident size can be taken from (see [`ResidentSource`]). `statm_sums` says
    /// whether this kernel's `statm` sums the per-CPU parts ([`statm_sums_per_cpu_parts`]).
    pub(crate) fn resident_source(&self, statm_sums: bool) -> ResidentSource {
        if self.status & STATUS_HAS_MM == 0 {
            ResidentSource::None
        } else if self.status & STATUS_RSS_ATOMIC != 0 {
            ResidentSource::Exact
        } else if statm_sums && self.rss_sum_pages.is_some() {
            ResidentSource::Summed
        } else if self.status & STATUS_RSS_PERCPU != 0 {
            ResidentSource::CentralCountOnly
        } else {
            // Neither layout matched: nothing in the record can be trusted for memory.
            ResidentSource::CentralCountOnly
        }
    }

    /// `stat`'s rss in pages: the sum of each counter clamped at 0 (`get_mm_rss`). On 6.2+
    /// this is the central counts' sum, as `stat` prints it; `statm` may differ there.
    pub(crate) fn stat_rss_pages(&self) -> u64 {
        self.rss_pages
            .iter()
            .map(|&pages| u64::try_from(pages).unwrap_or(0))
            .fold(0, u64::saturating_add)
    }

    /// `statm`'s resident size in pages from the summed counters (each clamped at 0, as
    /// `get_mm_counter_sum` does); `None` without them.
    pub(crate) fn summed_rss_pages(&self) -> Option<u64> {
        self.rss_sum_pages.map(|pages| {
            pages
                .iter()
                .map(|&pages| u64::try_from(pages).unwrap_or(0))
                .fold(0, u64::saturating_add)
        })
    }

    /// `(utime, stime)` in ns as `/proc/<pid>/stat` would compute them now after a read that
    /// reported `prev` (`cputime_adjust`).
    fn split_after(&self, prev: (u64, u64)) -> (u64, u64) {
        cputime_adjust(
            self.utime_ns,
            self.stime_ns,
            self.runtime_ns,
            prev.0,
            prev.1,
        )
    }
}

/// The whole-process utime/stime split this reader last gave each process, which later splits
/// start from as `stat`'s do.
///
/// The kernel splits a process's precise run time in the ratio of its tick-sampled user and
/// system time and keeps the last split it printed (`signal->prev_cputime`): no later read of
/// `stat` gives less user or system time than an earlier one. Only a read of `stat` advances
/// that state, and the iterator does not read `stat`, so a split recomputed from the kernel's
/// state alone can go back from one record to the next (a timer-driven process whose few ticks
/// moved from system to user time: 20 ms of system time, then 11). As a reader of `stat` would,
/// each record's split starts from the one this reader gave the process last, or from the
/// kernel's state for a process it has not seen.
#[derive(Debug, Default)]
struct Splits {
    /// The last read's processes in its order (ascending pid): pid, start time, split.
    last: Vec<(u32, u64, (u64, u64))>,
    next: Vec<(u32, u64, (u64, u64))>,
}

impl Splits {
    /// Sets each of `records`' [`TaskRecord::split_ns`] and keeps them for the next read. A
    /// torn record's split is not kept: its run time may be short.
    fn apply(&mut self, records: &mut [TaskRecord]) {
        self.next.clear();
        let mut last = self.last.iter().peekable();
        for record in records {
            // Both lists ascend by pid: a process missed here (were the order ever broken)
            // only starts from the kernel's state.
            while last.next_if(|(pid, ..)| *pid < record.tgid).is_some() {}
            let known = last
                .next_if(|(pid, start, _)| {
                    *pid == record.tgid && *start == record.start_boottime_ns
                })
                .map(|&(_, _, split)| split);
            let kernel = (record.prev_utime_ns, record.prev_stime_ns);
            record.split_ns = record.split_after(known.unwrap_or(kernel));
            let kept = match known {
                Some(split) if record.is_torn() => Some(split),
                _ if record.is_torn() => None,
                _ => Some(record.split_ns),
            };
            if let Some(split) = kept {
                self.next
                    .push((record.tgid, record.start_boottime_ns, split));
            }
        }
        std::mem::swap(&mut self.last, &mut self.next);
    }
}

/// The kernel's `cputime_adjust` (kernel/sched/cputime.c, unchanged from 5.9 to 6.18): splits the
/// precise run time `rtime` in the ratio of the tick-sampled `utime`/`stime`, never letting
/// either go below what was last reported (`prev_*`), and never going back when `rtime` did.
/// Returns `(utime, stime)`.
pub(crate) fn cputime_adjust(
    utime: u64,
    stime: u64,
    rtime: u64,
    prev_utime: u64,
    prev_stime: u64,
) -> (u64, u64) {
    if prev_stime.wrapping_add(prev_utime) >= rtime {
        return (prev_utime, prev_stime);
    }
    let mut stime = if stime == 0 {
        0
    } else if utime == 0 {
        rtime
    } else {
        // mul_u64_u64_div_u64: exact 128-bit product, truncating division.
        let scaled =
            u128::from(stime) * u128::from(rtime) / (u128::from(stime) + u128::from(utime));
        u64::try_from(scaled).unwrap_or(u64::MAX)
    };
    if stime < prev_stime {
        stime = prev_stime;
    }
    let mut utime = rtime.wrapping_sub(stime);
    if utime < prev_utime {
        utime = prev_utime;
        stime = rtime.wrapping_sub(utime);
    }
    (utime, stime)
}

/// Whether `/proc/<pid>/statm` on the kernel `release` (`uname -r`) prints the per-CPU rss
/// counters' full sums (`get_mm_counter_sum`, Linux 6.16 and later) rather than their central
/// counts (6.2 to 6.15; before 6.2 the counters are plain atomics and this does not matter).
/// Unknown releases say `false`, so `statm` is read.
pub(crate) fn statm_sums_per_cpu_parts(release: &str) -> bool {
    release_at_least(release, (6, 16))
}

/// Whether the program is loaded with the unchanged-cgroup rule's per-thread reads on the
/// kernel `release`: 6.18's verifier takes them, 6.1's gives up after a million instructions
/// (tens of seconds of its CPU). From 6.6 (the LTS after 6.1) they are tried, and the load
/// falls back to the program without them where they are refused; before, the program loads
/// without them and the rule reads every cgroup.
pub(crate) fn tries_activity_fields(release: &str) -> bool {
    release_at_least(release, (6, 6))
}

/// `uname -r`'s `major.minor` is at least `version`; `false` when it cannot be read.
fn release_at_least(release: &str, version: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= version,
        _ => false,
    }
}

/// Whether the program's per-CPU sums can be trusted on this machine: it adds up CPUs
/// `0..nr_cpu_ids`, which are exactly the possible CPUs when those are numbered without gaps
/// (`/sys/devices/system/cpu/possible` is `0` or `0-N`).
pub(crate) fn possible_cpus_are_contiguous(possible: &str) -> bool {
    let possible = possible.trim();
    possible == "0"
        || possible
            .strip_prefix("0-")
            .is_some_and(|last| last.parse::<u32>().is_ok())
}

/// `nsec_to_clock_t`: ns to clock ticks as procfs prints them. `None` when the tick rate does
/// not divide a second (the kernel then scales differently; no such rate exists on Linux
/// today, but nothing here guesses).
pub(crate) fn ns_to_ticks(ns: u64, ticks_per_second: u64) -> Option<u64> {
    const NSEC_PER_SEC: u64 = 1_000_000_000;
    if ticks_per_second == 0 || !NSEC_PER_SEC.is_multiple_of(ticks_per_second) {
        return None;
    }
    Some(ns / (NSEC_PER_SEC / ticks_per_second))
}

/// Why the iterator is not used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unavailable(pub String);

/// A loaded, attached task iterator: each [`TaskIter::read`] runs the program over every task.
#[derive(Debug)]
pub(crate) struct TaskIter {
    /// The iterator link; it holds the program.
    link: OwnedFd,
    /// The link in the process-wide count of descriptors held to read kernel data, which the
    /// collector's own descriptor count leaves out (see `source::held`).
    _published: Published,
    buf: Vec<u8>,
    /// Whether the records' summed rss counters are what `statm` prints here: the kernel sums
    /// the per-CPU parts in `statm` and the program's sums cover every possible CPU. The
    /// `statm_sums` argument of [`TaskRecord::resident_source`].
    statm_sums: bool,
    /// The units of the records' ns and pages as procfs prints them.
    ticks_per_second: u64,
    page_size_bytes: u64,
    /// Whether the kernel keeps scheduler statistics (`CONFIG_SCHED_INFO`): without them
    /// `schedstat` prints zeros, which the iterator's values must then be too.
    sched_info_on: bool,
    /// Descriptors the readers held when the last records were taken (see `source::held`).
    held_at_read: usize,
    /// This process's id (`getpid` once, not once per record).
    own_pid: u32,
    splits: Splits,
}

impl TaskIter {
    /// Loads and attaches the program, after the checks that give a clear reason, and proves on
    /// a first read that its records describe this process as `/proc/self/stat` does (pid and
    /// parent pid as this namespace sees them, start time). With `sum_rss` the program adds up
    /// the per-CPU rss parts ([`TaskRecord::rss_sum_pages`]): a dozen more reads per process,
    /// worth it only where the exact resident size is wanted.
    pub(crate) fn load(roots: &Roots, sum_rss: bool) -> Result<Self, Unavailable> {
        let (ticks_per_second, page_size_bytes) = preconditions(roots)?;
        let link = match crate::source::ebpf::spawn::command() {
            Some(command) => child::load_in_child(command, sum_rss),
            None => load_and_attach(sum_rss),
        }
        .map_err(Unavailable)?;
        let mut iter = Self {
            link,
            _published: Published::holding(1),
            buf: Vec::with_capacity(64 * 1024),
            statm_sums: statm_sums_per_cpu_parts(
                &std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default(),
            ) && possible_cpus_are_contiguous(
                &std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default(),
            ),
            ticks_per_second,
            page_size_bytes,
            sched_info_on: sched_info_on(roots),
            held_at_read: 0,
            own_pid: std::process::id(),
            splits: Splits::default(),
        };
        let mut records = Vec::new();
        iter.read(&mut records)
            .map_err(|error| Unavailable(format!("reading the task iterator: {error}")))?;
        verify_own_record(&roots.proc, &records)?;
        Ok(iter)
    }

    /// See the field `statm_sums`.
    #[cfg(test)]
    pub(crate) fn statm_sums(&self) -> bool {
        self.statm_sums
    }

    /// Runs the iterator once, replacing `out` with one record per thread-group leader, in the
    /// kernel's order (ascending pid). The records' descriptor counts include the one the read
    /// itself holds ([`READ_DESCRIPTORS`]).
    pub(crate) fn read(&mut self, out: &mut Vec<TaskRecord>) -> io::Result<()> {
        out.clear();
        self.held_at_read = held::held_descriptors();
        let iter = iter_create(self.link.as_fd())?;
        self.buf.clear();
        loop {
            if self.buf.capacity() - self.buf.len() < 16 * 1024 {
                self.buf.reserve(64 * 1024);
            }
            // Straight into the spare capacity: rustix sets the length to what the kernel wrote.
            match rustix::io::read(&iter, rustix::buffer::spare_capacity(&mut self.buf)) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
        if !self.buf.len().is_multiple_of(RECORD_BYTES) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "task iterator output of {} bytes is not a whole number of {RECORD_BYTES}-byte records",
                    self.buf.len()
                ),
            ));
        }
        for chunk in self.buf.chunks_exact(RECORD_BYTES) {
            if let Some(record) = TaskRecord::parse(chunk) {
                out.push(record);
            }
        }
        self.splits.apply(out);
        Ok(())
    }
}

/// What can be known before loading: each a reason procfs serves instead. Gives the clock tick
/// rate and the page size, the units procfs prints the records' values in.
pub(crate) fn preconditions(roots: &Roots) -> Result<(u64, u64), Unavailable> {
    let fail = |reason: &str| Err(Unavailable(reason.to_owned()));
    if roots.proc != Path::new("/proc") {
        return fail("the proc root is not /proc (fixture tree)");
    }
    let ticks_per_second = procfs::clock_ticks_per_second().unwrap_or(0);
    if ns_to_ticks(0, ticks_per_second).is_none() {
        return fail("the clock tick rate is unknown or does not divide a second");
    }
    let Some(page_size_bytes) = procfs::page_size_bytes() else {
        return fail("the page size is unknown");
    };
    if let Ok(lockdown) = std::fs::read_to_string("/sys/kernel/security/lockdown") {
        if lockdown.contains("[confidentiality]") {
            return fail(
                "kernel lockdown is 'confidentiality': BPF programs may not read kernel memory",
            );
        }
    }
    if !Path::new("/sys/kernel/btf/vmlinux").exists() {
        return fail("the kernel has no BTF (/sys/kernel/btf/vmlinux is missing)");
    }
    let offsets =
        std::fs::read_to_string(roots.proc.join("self/timens_offsets")).unwrap_or_default();
    if offsets
        .lines()
        .filter(|line| line.starts_with("boottime"))
        .any(|line| line.split_whitespace().skip(1).any(|field| field != "0"))
    {
        return fail("the collector runs in a time namespace with a boot-time offset");
    }
    let nohz = std::fs::read_to_string("/sys/devices/system/cpu/nohz_full").unwrap_or_default();
    let nohz = nohz.trim();
    if !nohz.is_empty() && nohz != "(null)" {
        return fail("nohz_full CPUs account CPU time in pending vtime the iterator cannot see");
    }
    Ok((ticks_per_second, page_size_bytes))
}

/// `schedstat` of this process: a live process has run, so zeros mean the kernel keeps no
/// scheduler statistics and prints `0 0 0` for every task.
fn sched_info_on(roots: &Roots) -> bool {
    std::fs::read(roots.proc.join("self/schedstat"))
        .ok()
        .and_then(|bytes| procfs::parse::parse_schedstat(&bytes))
        .is_none_or(|stat| stat.run_ns != 0)
}

/// Loads the object with aya (which relocates its CO-RE reads against the kernel's BTF), then
/// creates the iterator link itself: aya 0.14 exposes no link descriptor that can be re-read.
/// In this process, or in the loader child when the program enabled it (see `child`).
fn load_and_attach(sum_rss: bool) -> Result<OwnedFd, String> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    if tries_activity_fields(&release) {
        if let Ok(link) = load_and_attach_with(sum_rss, true) {
            return Ok(link);
        }
    }
    load_and_attach_with(sum_rss, false)
}

/// [`load_and_attach`] with or without the unchanged-cgroup rule's per-thread reads.
fn load_and_attach_with(sum_rss: bool, activity_fields: bool) -> Result<OwnedFd, String> {
    let btf = aya::Btf::from_sys_fs().map_err(|error| format!("kernel BTF: {error}"))?;
    let sum_rss = u32::from(sum_rss);
    let activity_fields = u32::from(activity_fields);
    // The program names each process's cgroup in the hierarchy the agent walks (only that one:
    // each costs a few reads per process).
    let membership_v1 = crate::source::cgroup::CgroupLayout::discover(&Roots::host())
        .ok()
        .and_then(|layout| membership_controller(&layout))
        .map_or(0, |at| u32::try_from(at + 1).unwrap_or(0));
    let mut ebpf = aya::EbpfLoader::new()
        .btf(Some(&btf))
        .override_global("sum_rss", &sum_rss, true)
        .override_global("membership_v1", &membership_v1, true)
        .override_global("read_activity_fields", &activity_fields, true)
        .load(OBJECT)
        .map_err(|error| format!("loading the task iterator object: {}", describe(&error)))?;
    let program: &mut aya::programs::Iter = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| format!("the object has no program {PROGRAM}"))?
        .try_into()
        .map_err(|error| format!("{PROGRAM}: {error}"))?;
    program
        .load("task", &btf)
        .map_err(|error| format!("loading the task iterator: {}", describe(&error)))?;
    let fd = program
        .fd()
        .map_err(|error| format!("{PROGRAM}: {error}"))?;
    link_create(fd.as_fd()).map_err(|error| format!("attaching the task iterator: {error}"))
}

/// The error and its sources, so a verifier or permission refusal keeps its cause.
pub(crate) fn describe(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // A verifier log is long: its last lines say why.
        let cause_text = cause.to_string();
        let mut tail: Vec<&str> = cause_text.lines().rev().take(3).collect();
        tail.reverse();
        text.push_str(": ");
        text.push_str(&tail.join(" / "));
        source = cause.source();
    }
    text
}

/// The record of this very process must carry the pid procfs shows and the same start time:
/// otherwise pids are another namespace's or the layout is not what the program expects.
fn verify_own_record(proc_root: &Path, records: &[TaskRecord]) -> Result<(), Unavailable> {
    let pid = std::process::id();
    let stat = std::fs::read(proc_root.join("self/stat"))
        .map_err(|error| Unavailable(format!("reading /proc/self/stat: {error}")))?;
    let stat = procfs::parse::parse_stat(&stat)
        .ok_or_else(|| Unavailable("unparsable /proc/self/stat".to_owned()))?;
    let ticks = procfs::clock_ticks_per_second().unwrap_or(0);
    let Some(own) = records.iter().find(|record| record.tgid == pid) else {
        return Err(Unavailable(format!(
            "the task iterator's {} records do not include this process (pid {pid}): pids are \
             not this namespace's",
            records.len()
        )));
    };
    match ns_to_ticks(own.start_boottime_ns, ticks) {
        Some(start)
            if start == stat.start_time_ticks && stat.pid == pid && own.ppid == stat.ppid =>
        {
            Ok(())
        }
        Some(_) if own.ppid != stat.ppid => Err(Unavailable(format!(
            "the task iterator's parent pid of this process ({}) differs from /proc/self/stat's \
             ({}): pids are not this namespace's",
            own.ppid, stat.ppid
        ))),
        Some(start) => Err(Unavailable(format!(
            "the task iterator's start time of this process ({start} ticks) differs from \
             /proc/self/stat's ({})",
            stat.start_time_ticks
        ))),
        None => Err(Unavailable(format!(
            "clock tick rate {ticks} does not divide a second"
        ))),
    }
}

pub(crate) const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
pub(crate) const BPF_TRACE_ITER: u32 = 28;

/// `bpf(BPF_LINK_CREATE)` for an iterator program without parameters (all tasks).
fn link_create(program: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    // union bpf_attr's link_create: prog_fd, target_fd, attach_type, flags, then zeroes (no
    // iterator parameters).
    let mut attr = [0u32; 16];
    attr[0] = u32::try_from(program.as_raw_fd()).map_err(io::Error::other)?;
    attr[2] = BPF_TRACE_ITER;
    bpf_fd(BPF_LINK_CREATE, &mut attr)
}

/// `bpf(BPF_ITER_CREATE)`: a new readable iterator (one pass) from the link.
pub(crate) fn iter_create(link: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let mut attr = [0u32; 2];
    attr[0] = u32::try_from(link.as_raw_fd()).map_err(io::Error::other)?;
    bpf_fd(BPF_ITER_CREATE, &mut attr)
}

/// A `bpf(2)` command that returns a new descriptor (the task and cgroup iterators' links and
/// walks).
pub(crate) fn bpf_fd<const N: usize>(
    command: libc::c_long,
    attr: &mut [u32; N],
) -> io::Result<OwnedFd> {
    // No safe wrapper for bpf(2) exists in our dependencies (aya keeps these calls private).
    // SAFETY: `attr` is a live, initialised buffer of the size passed; for these commands the
    // kernel only reads it (and, for a BPF_LINK_CREATE with iterator parameters, the buffer it
    // points to, which the caller keeps alive across the call); the result is a new descriptor
    // we own or -1.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            command,
            attr.as_mut_ptr(),
            std::mem::size_of_val(attr),
        )
    };
    let fd = i32::try_from(fd).map_err(|_| io::Error::other("bpf(2) returned no descriptor"))?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
