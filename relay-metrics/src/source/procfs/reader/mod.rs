//! [`ProcessReader`]: per-pid held descriptors and reused buffers for sampling processes.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::stat::fstat;

use super::parse::{self, Stat};
use super::sys::{
    is_dot, is_procfs, open_dir_at, open_file_at, open_proc_root, pread_whole, DirentBuffer,
    PathName,
};
use super::{page_size_bytes, ProcessError, ProcessFields, ProcessSample, SchedStat};
use crate::source::file::is_gone;
use crate::source::held::{self, Published};
use crate::source::{Roots, SourceError};

/// Above this many threads, per-thread schedstat is not read (see `thread_schedstat`).
pub(crate) const MAX_SCHEDSTAT_THREADS: u64 = 256;

/// The files of `/proc/<pid>/` the reader may hold, indexing `PidFiles::files`.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Stat = 0,
    Status = 1,
    Io = 2,
    Schedstat = 3,
    SmapsRollup = 4,
    Statm = 5,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Self::Stat => "stat",
            Self::Status => "status",
            Self::Io => "io",
            Self::Schedstat => "schedstat",
            Self::SmapsRollup => "smaps_rollup",
            Self::Statm => "statm",
        }
    }
}

/// The open descriptors of one process: its `/proc/<pid>` directory, which pins the identity
/// (files are opened relative to it), and each file opened on first use.
#[derive(Debug)]
struct PidFiles {
    dir: OwnedFd,
    files: [Option<File>; 6],
    fd_dir: Option<OwnedFd>,
    /// `task/`, for per-thread schedstat of multi-threaded processes.
    task_dir: Option<OwnedFd>,
    /// Thread ids of the last listing (reused).
    tids: Vec<u32>,
}

impl PidFiles {
    fn open(proc_dir: &OwnedFd, pid: u32) -> io::Result<Self> {
        Ok(Self {
            dir: open_dir_at(proc_dir, PathName::new().number(pid).as_bytes())?,
            files: [None, None, None, None, None, None],
            fd_dir: None,
            task_dir: None,
            tids: Vec::new(),
        })
    }

    /// Reads one file into `buf`. A descriptor that failed is dropped and reopened next time,
    /// except on EACCES/EPERM: there the access check fails at read time while the open was fine.
    fn read<'b>(&mut self, kind: Kind, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
        let slot = &mut self.files[kind as usize];
        let file = match slot.take() {
            Some(file) => file,
            None => open_file_at(&self.dir, kind.name().as_bytes())?,
        };
        // Every file of `Kind` is printed whole by one `show` (FileKind::Whole).
        let result = pread_whole(&file, buf);
        if result.as_ref().map_or_else(is_denied, |_| true) {
            *slot = Some(file);
        }
        result
    }

    /// Counts the entries of `fd/`, keeping the directory open.
    ///
    /// On procfs since Linux 6.2, `fstat` of the directory reports the number of open
    /// descriptors as its size, a few hundred ns against several µs for listing (the kernel builds
    /// a dentry per listed fd). Older kernels report 0, and 0 is also what a process without
    /// descriptors shows, so a size of 0 is confirmed by listing with `getdents64` (rewinding the
    /// held directory), as is everything on a fixture tree.
    fn count_fds(&mut self, dirents: &mut DirentBuffer, size_is_count: bool) -> io::Result<u64> {
        let dir = match self.fd_dir.take() {
            Some(dir) => dir,
            None => open_dir_at(&self.dir, b"fd")?,
        };
        let result = count_entries(&dir, dirents, size_is_count);
        if result.as_ref().map_or_else(is_denied, |_| true) {
            self.fd_dir = Some(dir);
        }
        result
    }

    /// CPU time of the whole process at ns precision: the sum of `task/<tid>/schedstat` over its
    /// live threads (`/proc/<pid>/schedstat` describes the main thread only). Threads that exit
    /// take their time with them, so the sum can fall; a thread that exits during the listing
    /// is skipped. `None` above [`MAX_SCHEDSTAT_THREADS`] threads, where the reads would cost
    /// more than the precision is worth.
    fn thread_schedstat(
        &mut self,
        num_threads: u64,
        dirents: &mut DirentBuffer,
        buf: &mut Vec<u8>,
    ) -> io::Result<Option<SchedStat>> {
        if num_threads > MAX_SCHEDSTAT_THREADS {
            return Ok(None);
        }
        let dir = match self.task_dir.take() {
            Some(dir) => dir,
            None => open_dir_at(&self.dir, b"task")?,
        };
        let tids = &mut self.tids;
        tids.clear();
        dirents.for_each(dir.as_fd(), |name| {
            if let Some(tid) = parse::parse_u32(name) {
                tids.push(tid);
            }
        })?;
        let mut total = SchedStat {
            run_ns: 0,
            wait_ns: 0,
        };
        let mut threads_read = 0u64;
        for &tid in tids.iter() {
            let name = PathName::new().number(tid).text(b"/schedstat");
            let thread = match open_file_at(&dir, name.as_bytes()) {
                Ok(file) => pread_whole(&file, buf).map(parse::parse_schedstat),
                Err(error) => Err(error),
            };
            match thread {
                Ok(Some(stat)) => {
                    total.run_ns = total.run_ns.saturating_add(stat.run_ns);
                    total.wait_ns = total.wait_ns.saturating_add(stat.wait_ns);
                    threads_read += 1;
                }
                Ok(None) => return Ok(None),
                Err(error) if is_gone(&error) => continue,
                Err(error) => return Err(error),
            }
        }
        self.task_dir = Some(dir);
        // Every thread vanishing while the process lives would make the sum 0: not a value.
        Ok((threads_read > 0).then_some(total))
    }

    /// After an optional file failed with ENOENT/ESRCH: is the process itself gone? Some files
    /// give ESRCH for a live process (`smaps_rollup` of a kernel thread or a zombie has no mm),
    /// so only `stat`, which every live process has, decides.
    fn is_gone(&mut self, buf: &mut Vec<u8>) -> bool {
        matches!(self.read(Kind::Stat, buf), Err(error) if is_gone(&error))
    }

    fn held_descriptor_count(&self) -> usize {
        1 + self.files.iter().filter(|file| file.is_some()).count()
            + usize::from(self.fd_dir.is_some())
            + usize::from(self.task_dir.is_some())
    }
}

fn count_entries(
    dir: &OwnedFd,
    dirents: &mut DirentBuffer,
    size_is_count: bool,
) -> io::Result<u64> {
    if size_is_count {
        let size = fstat(dir.as_fd()).map_err(io::Error::from)?.st_size;
        if let Ok(count @ 1..) = u64::try_from(size) {
            return Ok(count);
        }
    }
    let mut count = 0u64;
    dirents.for_each(dir.as_fd(), |name| {
        if !is_dot(name) {
            count += 1;
        }
    })?;
    Ok(count)
}

/// The process vanished while being read.
struct Gone;

/// Samples processes from procfs, keeping each pid's files open between samples.
///
/// Up to `max_held_pids` processes keep their descriptors (up to 7 each: the `/proc/<pid>`
/// directory, `stat`, `status`, `io`, `schedstat`, `smaps_rollup`, `fd/`; size the cap against
/// `RLIMIT_NOFILE`). Further pids are read with open/read/close on every call: slower, equally
/// correct. Sampling a fixed set of held pids performs no `open` and no allocation.
#[derive(Debug)]
pub struct ProcessReader {
    proc_root: PathBuf,
    proc_dir: OwnedFd,
    page_size_bytes: u64,
    /// The proc root is a real procfs, whose `fd/` directories report their entry count as size.
    fd_size_is_count: bool,
    max_held_pids: usize,
    held: HashMap<u32, PidFiles>,
    /// Descriptors held: the proc root's and every held pid's.
    held_fds: usize,
    /// `held_fds` in the process-wide count of held descriptors (see [`crate::source::held`]).
    published: Published,
    /// This process's pid as the proc root numbers it (`self`), when it has one: its descriptor
    /// count leaves out the descriptors the readers hold.
    own_pid: Option<u32>,
    buf: Vec<u8>,
    dirents: DirentBuffer,
}

impl ProcessReader {
    /// Opens the proc root of `roots`. Fails if it cannot be opened or the page size is unknown.
    pub fn new(roots: &Roots, max_held_pids: usize) -> Result<Self, SourceError> {
        let (proc_root, proc_dir) = open_proc_root(roots)?;
        let page_size_bytes = page_size_bytes().ok_or_else(|| {
            SourceError::io(
                "sysconf(_SC_PAGESIZE)",
                io::Error::other("the page size is unknown"),
            )
        })?;
        let fd_size_is_count = is_procfs(&proc_dir);
        let own_pid = std::fs::read_link(proc_root.join("self"))
            .ok()
            .and_then(|target| target.to_str()?.parse().ok());
        let published = Published::holding(1);
        Ok(Self {
            proc_root,
            proc_dir,
            page_size_bytes,
            fd_size_is_count,
            max_held_pids,
            held: HashMap::with_capacity(max_held_pids.min(4096)),
            held_fds: 1,
            published,
            own_pid,
            buf: Vec::with_capacity(4096),
            dirents: DirentBuffer::default(),
        })
    }

    /// Reads `stat` and the optional files chosen by `fields` for `pid`.
    ///
    /// An optional file that cannot be read while the process lives (EACCES on `/proc/1/io`,
    /// `smaps_rollup` of a kernel thread, malformed content) gives `None` for its field. If the
    /// process exits during the call, its handles are released and the result is
    /// [`ProcessError::Gone`]: values of one call always come from one process.
    pub fn sample(
        &mut self,
        pid: u32,
        fields: &ProcessFields,
    ) -> Result<ProcessSample, ProcessError> {
        let page_size_bytes = self.page_size_bytes;
        let fd_size_is_count = self.fd_size_is_count;
        let own = self.own_pid == Some(pid);
        self.with_files(pid, |files, buf, dirents, proc_root, published_for_pid| {
            let stat = read_stat(files, buf, pid, proc_root)?;
            let rss_bytes = stat.rss_pages.checked_mul(page_size_bytes).ok_or_else(|| {
                malformed(proc_root, pid, Kind::Stat, "rss in bytes overflows u64")
            })?;
            let gone = |Gone| ProcessError::Gone { pid };
            let schedstat = if fields.schedstat {
                read_schedstat(files, buf, dirents, pid, stat.num_threads)?
            } else {
                None
            };
            let peak_resident_kib = optional_if(
                fields.peak_resident,
                files,
                Kind::Status,
                buf,
                parse::parse_status_vm_hwm_kib,
            )
            .map_err(gone)?;
            // stat's rss comes from per-CPU counters that can lag by hundreds of KiB on
            // recent kernels; statm sums them exactly and costs about as little.
            let (statm_resident_bytes, private_kib) = read_memory(
                files,
                buf,
                fields.exact_resident,
                fields.private_memory,
                page_size_bytes,
            )
            .map_err(gone)?;
            let io = optional_if(fields.io, files, Kind::Io, buf, parse::parse_io).map_err(gone)?;
            let open_fd_count = if !fields.open_fds {
                None
            } else if stat.flags & parse::PF_KTHREAD != 0 {
                // Kernel threads have no file table: 0 without listing `fd/` (its size reads 0
                // and would be confirmed by a listing, three syscalls, for each of them).
                Some(0)
            } else {
                let own_published = own.then_some(published_for_pid);
                count_open_fds(files, buf, dirents, pid, fd_size_is_count, own_published)?
            };
            Ok(ProcessSample {
                pid,
                ppid: stat.ppid,
                start_time_ticks: stat.start_time_ticks,
                utime_ticks: stat.utime_ticks,
                stime_ticks: stat.stime_ticks,
                cutime_ticks: Some(stat.cutime_ticks),
                cstime_ticks: Some(stat.cstime_ticks),
                num_threads: stat.num_threads,
                rss_bytes: statm_resident_bytes.unwrap_or(rss_bytes),
                vsize_bytes: stat.vsize_bytes,
                schedstat,
                run_time_ns: None,
                peak_resident_kib,
                private_kib,
                open_fd_count,
                io,
            })
        })
    }

    /// Only the memory files of a process whose other values came from elsewhere (the task
    /// iterator): `statm`'s resident size in bytes when `statm`, `smaps_rollup`'s private KiB
    /// when `private`. When `pid`'s directory was not held yet, `stat` is read once to check
    /// that it is still the process that started at `start_time_ticks`; a held directory
    /// already pins that identity (see the module documentation).
    pub fn memory(
        &mut self,
        pid: u32,
        start_time_ticks: u64,
        statm: bool,
        private: bool,
    ) -> Result<(Option<u64>, Option<u64>), ProcessError> {
        let page_size_bytes = self.page_size_bytes;
        let fresh = !self.held.contains_key(&pid);
        self.with_files(pid, |files, buf, _, proc_root, _| {
            if fresh && read_stat(files, buf, pid, proc_root)?.start_time_ticks != start_time_ticks
            {
                return Err(ProcessError::Gone { pid });
            }
            read_memory(files, buf, statm, private, page_size_bytes)
                .map_err(|Gone| ProcessError::Gone { pid })
        })
    }

    /// The start time (stat field 22, clock ticks) of `pid`: with the pid, its identity.
    pub fn start_time_ticks(&mut self, pid: u32) -> Result<u64, ProcessError> {
        self.with_files(pid, |files, buf, _, proc_root, _| {
            read_stat(files, buf, pid, proc_root).map(|stat| stat.start_time_ticks)
        })
    }

    /// Releases the handles of every pid for which `keep` is false.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        let mut released = 0;
        self.held.retain(|pid, files| {
            let kept = keep(*pid);
            if !kept {
                released += files.held_descriptor_count();
            }
            kept
        });
        self.held_fds -= released;
        self.published.set(self.held_fds);
    }

    /// Releases the handles of `pid`.
    pub fn forget(&mut self, pid: u32) {
        if let Some(files) = self.held.remove(&pid) {
            self.held_fds -= files.held_descriptor_count();
            self.published.set(self.held_fds);
        }
    }

    /// Number of pids whose handles are held (at most `max_held_pids`).
    pub fn held_pids(&self) -> usize {
        self.held.len()
    }

    /// Number of descriptors currently held for all pids (excluding the proc root's).
    pub fn held_descriptors(&self) -> usize {
        self.held
            .values()
            .map(PidFiles::held_descriptor_count)
            .sum()
    }

    /// The cap given to [`ProcessReader::new`].
    pub fn max_held_pids(&self) -> usize {
        self.max_held_pids
    }

    /// Runs `read` on the handles of `pid`: the held ones, new held ones while under the cap, or
    /// transient ones dropped at the end. A `Gone` result releases the pid's held handles.
    /// `read` also gets how many of the handles' descriptors are already published as held.
    fn with_files<R>(
        &mut self,
        pid: u32,
        read: impl FnOnce(
            &mut PidFiles,
            &mut Vec<u8>,
            &mut DirentBuffer,
            &Path,
            usize,
        ) -> Result<R, ProcessError>,
    ) -> Result<R, ProcessError> {
        let mut transient = None;
        let (files, published_for_pid, is_held) = match self.held.get_mut(&pid) {
            Some(files) => {
                let count = files.held_descriptor_count();
                (files, count, true)
            }
            None => {
                let files = PidFiles::open(&self.proc_dir, pid)
                    .map_err(|error| classify(&self.proc_root, pid, None, error))?;
                if self.held.len() < self.max_held_pids {
                    (self.held.entry(pid).or_insert(files), 0, true)
                } else {
                    (transient.insert(files), 0, false)
                }
            }
        };
        let result = read(
            files,
            &mut self.buf,
            &mut self.dirents,
            &self.proc_root,
            published_for_pid,
        );
        let now_held = if !is_held {
            0
        } else if matches!(result, Err(ProcessError::Gone { .. })) {
            self.held.remove(&pid);
            0
        } else {
            files.held_descriptor_count()
        };
        if now_held != published_for_pid {
            self.held_fds = self.held_fds + now_held - published_for_pid;
            self.published.set(self.held_fds);
        }
        result
    }
}

/// `schedstat`'s totals for `pid`, summed over its threads when it has more than one; `None`
/// when they cannot be read while the process lives.
fn read_schedstat(
    files: &mut PidFiles,
    buf: &mut Vec<u8>,
    dirents: &mut DirentBuffer,
    pid: u32,
    num_threads: u64,
) -> Result<Option<SchedStat>, ProcessError> {
    if num_threads <= 1 {
        return optional(files, Kind::Schedstat, buf, parse::parse_schedstat)
            .map_err(|Gone| ProcessError::Gone { pid });
    }
    match files.thread_schedstat(num_threads, dirents, buf) {
        Ok(total) => Ok(total),
        Err(error) if is_gone(&error) && files.is_gone(buf) => Err(ProcessError::Gone { pid }),
        Err(_) => Ok(None),
    }
}

/// How many descriptors `pid` has open; `None` when they cannot be counted while it lives.
/// `own_published` is given for this process's own pid: the share of the held descriptors
/// already published for it (what its files hold beyond that share is in flight).
fn count_open_fds(
    files: &mut PidFiles,
    buf: &mut Vec<u8>,
    dirents: &mut DirentBuffer,
    pid: u32,
    fd_size_is_count: bool,
    own_published: Option<usize>,
) -> Result<Option<u64>, ProcessError> {
    match files.count_fds(dirents, fd_size_is_count) {
        Ok(count) => Ok(Some(match own_published {
            Some(published) => held::own_fd_count(
                count,
                files.held_descriptor_count().saturating_sub(published),
            ),
            None => count,
        })),
        Err(error) if is_gone(&error) && files.is_gone(buf) => Err(ProcessError::Gone { pid }),
        Err(_) => Ok(None),
    }
}

fn read_stat(
    files: &mut PidFiles,
    buf: &mut Vec<u8>,
    pid: u32,
    proc_root: &Path,
) -> Result<Stat, ProcessError> {
    let bytes = files
        .read(Kind::Stat, buf)
        .map_err(|error| classify(proc_root, pid, Some(Kind::Stat), error))?;
    let stat = parse::parse_stat(bytes)
        .ok_or_else(|| malformed(proc_root, pid, Kind::Stat, "unparsable stat line"))?;
    if stat.pid != pid {
        return Err(malformed(
            proc_root,
            pid,
            Kind::Stat,
            "the stat line is about another pid",
        ));
    }
    Ok(stat)
}

/// Reads and parses an optional file: `Ok(None)` unless it is readable and well-formed, `Err`
/// only when the process itself is gone.
///
/// ENOENT/ESRCH from a live process gets one retry on a fresh descriptor: `smaps_rollup` is bound
/// to the address space of the moment it was opened, which an `exec` replaces (the held
/// descriptor then answers ESRCH, never stale numbers). Kernel threads and zombies have no
/// address space at all and stay `None`.
/// [`optional`] when the value is `wanted`; `None` without reading otherwise.
/// `statm`'s resident size in bytes when `statm`, `smaps_rollup`'s private KiB when `private`.
fn read_memory(
    files: &mut PidFiles,
    buf: &mut Vec<u8>,
    statm: bool,
    private: bool,
    page_size_bytes: u64,
) -> Result<(Option<u64>, Option<u64>), Gone> {
    let private_kib = optional_if(
        private,
        files,
        Kind::SmapsRollup,
        buf,
        parse::parse_smaps_rollup_private_kib,
    )?;
    let resident_bytes = optional_if(
        statm,
        files,
        Kind::Statm,
        buf,
        parse::parse_statm_resident_pages,
    )?
    .and_then(|pages| pages.checked_mul(page_size_bytes));
    Ok((resident_bytes, private_kib))
}

fn optional_if<T>(
    wanted: bool,
    files: &mut PidFiles,
    kind: Kind,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Option<T>,
) -> Result<Option<T>, Gone> {
    if wanted {
        optional(files, kind, buf, parse)
    } else {
        Ok(None)
    }
}

fn optional<T>(
    files: &mut PidFiles,
    kind: Kind,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Option<T>,
) -> Result<Option<T>, Gone> {
    for _attempt in 0..2 {
        match files.read(kind, buf).map(parse) {
            Ok(value) => return Ok(value),
            Err(error) if is_gone(&error) => {
                if files.is_gone(buf) {
                    return Err(Gone);
                }
                // The failed descriptor was dropped: the next attempt reopens the file.
            }
            Err(_) => return Ok(None),
        }
    }
    Ok(None)
}

fn is_denied(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

/// The path of `kind` for `pid` (or of the pid's directory); only built on error paths.
fn path_of(proc_root: &Path, pid: u32, kind: Option<Kind>) -> PathBuf {
    let dir = proc_root.join(pid.to_string());
    match kind {
        Some(kind) => dir.join(kind.name()),
        None => dir,
    }
}

fn classify(proc_root: &Path, pid: u32, kind: Option<Kind>, error: io::Error) -> ProcessError {
    if is_gone(&error) {
        ProcessError::Gone { pid }
    } else if is_denied(&error) {
        ProcessError::Denied {
            path: path_of(proc_root, pid, kind),
        }
    } else {
        ProcessError::Failed(SourceError::io(path_of(proc_root, pid, kind), error))
    }
}

fn malformed(proc_root: &Path, pid: u32, kind: Kind, reason: &str) -> ProcessError {
    ProcessError::Failed(SourceError::malformed(
        path_of(proc_root, pid, Some(kind)),
        reason,
    ))
}

#[cfg(test)]
pub(crate) mod tests;
