//! Process discovery: every pid of the proc root ([`PidLister`]), or the tree below a root pid
//! ([`ProcessTreeWalker`]). Both fill a caller-provided `Vec<u32>` and reuse their buffers.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::stat::fstat;

use super::parse::{parse_children, parse_u32};
use super::sys::{
    is_procfs, open_dir_at, open_file_at, open_proc_root, pread_all, DirentBuffer, PathName,
};
use crate::source::file::is_gone;
use crate::source::held::Published;
use crate::source::{Roots, SourceError};

/// Lists every process of the proc root: its numeric entries, sorted, pid 0 excluded.
#[derive(Debug)]
pub(crate) struct PidLister {
    proc_root: PathBuf,
    proc_dir: OwnedFd,
    dirents: DirentBuffer,
    /// The proc root's descriptor in the process-wide count of held ones.
    _published: Published,
}

impl PidLister {
    /// Opens (and keeps open) the proc root of `roots`.
    pub(crate) fn new(roots: &Roots) -> Result<Self, SourceError> {
        let (proc_root, proc_dir) = open_proc_root(roots)?;
        Ok(Self {
            proc_root,
            proc_dir,
            dirents: DirentBuffer::default(),
            _published: Published::holding(1),
        })
    }

    /// Replaces the content of `pids` with the pids now present. An empty listing is an error:
    /// a proc root without processes is not procfs.
    pub(crate) fn list(&mut self, pids: &mut Vec<u32>) -> Result<(), SourceError> {
        pids.clear();
        self.dirents
            .for_each(self.proc_dir.as_fd(), |name| {
                if let Some(pid) = parse_u32(name).filter(|pid| *pid != 0) {
                    pids.push(pid);
                }
            })
            .map_err(|error| SourceError::io(&self.proc_root, error))?;
        if pids.is_empty() {
            return Err(SourceError::malformed(
                &self.proc_root,
                "no process entries",
            ));
        }
        pids.sort_unstable();
        Ok(())
    }
}

/// Default cap on the descriptors a [`ProcessTreeWalker`] holds (task directories and `children`
/// files together).
pub(super) const DEFAULT_MAX_HELD_TREE_FILES: usize = 4096;

/// Lists a process tree: breadth-first from a root pid over the `children` file of **every
/// thread** (`/proc/<pid>/task/<tid>/children`; a child hangs below the thread that forked it).
/// Needs `CONFIG_PROC_CHILDREN`.
///
/// A process or thread that vanishes during the walk (ENOENT/ESRCH) is skipped: a vanished child
/// stays in the list (its sample then reports it gone) but contributes no descendants. Any other
/// error (EACCES, ...) fails the listing, since a partial tree would give wrong sums.
///
/// Between walks the walker keeps each process's `task/` directory and each thread's `children`
/// file open (up to a cap on descriptors; beyond it they are opened and closed per walk), so
/// re-walking a stable tree costs an `fstat` per single-threaded process (else a rewind and
/// `getdents64` of `task/`) and a `pread` per thread. Handles of
/// processes that left the tree are closed at the end of each walk. A held `task/` directory of
/// a process that exited reports ENOENT and is reopened, so a reused pid is listed afresh. A
/// `children` file is bound to its thread; a dead thread lists no children. (A thread id reused
/// inside the same process between two walks would be missed until that thread is replaced,
/// which takes a full wrap of the pid space while the process lives.)
#[derive(Debug)]
pub(crate) struct ProcessTreeWalker {
    proc_root: PathBuf,
    proc_dir: OwnedFd,
    dirents: DirentBuffer,
    buf: Vec<u8>,
    tids: Vec<u32>,
    seen: HashSet<u32>,
    held: HashMap<u32, HeldTask>,
    held_files: usize,
    /// The proc root and `held_files` in the process-wide count of held descriptors.
    published: Published,
    max_held_files: usize,
    /// The proc root is procfs (not a fixture tree): `task/` link counts count threads.
    on_procfs: bool,
}

/// The open `task/` directory of one process and the `children` files of its threads, sorted by
/// thread id.
#[derive(Debug)]
struct HeldTask {
    dir: OwnedFd,
    threads: Vec<(u32, File)>,
}

impl HeldTask {
    fn files(&self) -> usize {
        1 + self.threads.len()
    }
}

impl ProcessTreeWalker {
    /// Opens (and keeps open) the proc root of `roots`; holds up to
    /// [`DEFAULT_MAX_HELD_TREE_FILES`] descriptors between walks.
    pub(crate) fn new(roots: &Roots) -> Result<Self, SourceError> {
        Self::with_max_held_files(roots, DEFAULT_MAX_HELD_TREE_FILES)
    }

    /// Like [`ProcessTreeWalker::new`] with a cap on held descriptors (0: hold nothing).
    pub(crate) fn with_max_held_files(
        roots: &Roots,
        max_held_files: usize,
    ) -> Result<Self, SourceError> {
        let (proc_root, proc_dir) = open_proc_root(roots)?;
        let on_procfs = is_procfs(&proc_dir);
        Ok(Self {
            proc_root,
            proc_dir,
            on_procfs,
            dirents: DirentBuffer::default(),
            buf: Vec::with_capacity(4096),
            tids: Vec::new(),
            seen: HashSet::new(),
            held: HashMap::new(),
            held_files: 0,
            published: Published::holding(1),
            max_held_files,
        })
    }

    /// Number of descriptors held between walks (at most the cap).
    #[cfg(test)]
    pub(crate) fn held_files(&self) -> usize {
        self.held_files
    }

    /// Replaces the content of `pids` with `root` followed by its descendants in breadth-first
    /// order. Each pid appears once, even if pid reuse during the walk made a cycle.
    #[cfg(test)]
    pub(crate) fn walk(&mut self, root: u32, pids: &mut Vec<u32>) -> Result<(), SourceError> {
        self.walk_from(root, Vec::new, pids)
    }

    /// [`Self::walk`], then on from the roots `later` gives once the root's descendants are
    /// listed (each pid still once): a process that leaves the root's subtree while it is
    /// walked (reparented to the caller) is in one of the two listings.
    pub(crate) fn walk_from(
        &mut self,
        root: u32,
        later: impl FnOnce() -> Vec<u32>,
        pids: &mut Vec<u32>,
    ) -> Result<(), SourceError> {
        pids.clear();
        self.seen.clear();
        pids.push(root);
        self.seen.insert(root);
        let mut later = Some(later);
        let mut next = 0;
        let mut result = Ok(());
        loop {
            let Some(&pid) = pids.get(next) else {
                let Some(later) = later.take() else {
                    break;
                };
                for root in later() {
                    if self.seen.insert(root) {
                        pids.push(root);
                    }
                }
                continue;
            };
            next += 1;
            if let Err(error) = self.push_children(pid, pids) {
                result = Err(error);
                break;
            }
        }
        let seen = &self.seen;
        let mut released = 0;
        self.held.retain(|pid, task| {
            let keep = result.is_ok() && seen.contains(pid);
            if !keep {
                released += task.files();
            }
            keep
        });
        self.held_files -= released;
        self.published.set(1 + self.held_files);
        result
    }

    /// Appends the children of every thread of `pid` that are not listed yet.
    fn push_children(&mut self, pid: u32, pids: &mut Vec<u32>) -> Result<(), SourceError> {
        let Some(mut task) = self.task_with_threads(pid)? else {
            return Ok(());
        };
        // Threads that exited since the last walk. (The task is out of `held`, so its
        // descriptors are not in `held_files` until `keep` puts it back.)
        let tids = &self.tids;
        task.threads
            .retain(|(tid, _)| tids.binary_search(tid).is_ok());
        let mut result = Ok(());
        for &tid in &self.tids {
            let bytes = match task.threads.binary_search_by_key(&tid, |(tid, _)| *tid) {
                Ok(index) => match pread_all(&task.threads[index].1, &mut self.buf) {
                    Ok(bytes) => Ok(bytes),
                    Err(error) => {
                        task.threads.remove(index);
                        Err(error)
                    }
                },
                Err(index) => {
                    let name = PathName::new().number(tid).text(b"/children");
                    match open_file_at(&task.dir, name.as_bytes()) {
                        Ok(file) => {
                            let read = pread_all(&file, &mut self.buf).map(|bytes| bytes.len());
                            if read.is_ok() && self.held_files + task.files() < self.max_held_files
                            {
                                task.threads.insert(index, (tid, file));
                            }
                            read.map(|len| &self.buf[..len])
                        }
                        Err(error) => Err(error),
                    }
                }
            };
            let bytes = match bytes {
                Ok(bytes) => bytes,
                Err(error) if is_gone(&error) => continue,
                Err(error) => {
                    result = Err(SourceError::io(
                        task_path(&self.proc_root, pid, Some(tid)),
                        error,
                    ));
                    break;
                }
            };
            let before = pids.len();
            if parse_children(bytes, pids).is_none() {
                result = Err(SourceError::malformed(
                    task_path(&self.proc_root, pid, Some(tid)),
                    "unparsable children list",
                ));
                break;
            }
            // Drop the pids already listed, keeping the order of the new ones.
            let mut kept = before;
            for index in before..pids.len() {
                let child = pids[index];
                if self.seen.insert(child) {
                    pids[kept] = child;
                    kept += 1;
                }
            }
            pids.truncate(kept);
        }
        self.keep(pid, task);
        result
    }

    /// The `task/` directory of `pid` with its thread ids listed (sorted) into `self.tids`;
    /// `None` if the process is gone. A held directory of a process that exited is reopened
    /// once, in case the pid now belongs to a new process.
    fn task_with_threads(&mut self, pid: u32) -> Result<Option<HeldTask>, SourceError> {
        if let Some(task) = self.held.remove(&pid) {
            self.held_files -= task.files();
            if self
                .list_tids(&task.dir, pid)
                .map_err(|error| SourceError::io(task_path(&self.proc_root, pid, None), error))?
            {
                return Ok(Some(task));
            }
        }
        let name = PathName::new().number(pid).text(b"/task");
        let dir = match open_dir_at(&self.proc_dir, name.as_bytes()) {
            Ok(dir) => dir,
            Err(error) if is_gone(&error) => return Ok(None),
            Err(error) => {
                return Err(SourceError::io(
                    task_path(&self.proc_root, pid, None),
                    error,
                ))
            }
        };
        let listed = self
            .list_tids(&dir, pid)
            .map_err(|error| SourceError::io(task_path(&self.proc_root, pid, None), error))?;
        Ok(listed.then_some(HeldTask {
            dir,
            threads: Vec::new(),
        }))
    }

    /// Lists the thread ids of `pid`'s open `task/` directory into `self.tids`, sorted;
    /// `Ok(false)` if the process is gone.
    ///
    /// On procfs the directory's link count is 2 + the process's thread count (`nr_threads`,
    /// which counts a zombie leader too), and the leader, whose id is the pid, is listed as long
    /// as the process exists: a link count of 3 means the leader alone. So most processes need
    /// one `fstat` instead of a rewind and two `getdents64`. A dead process reports 2 and is
    /// listed (which says it is gone).
    fn list_tids(&mut self, dir: &OwnedFd, pid: u32) -> io::Result<bool> {
        if self.on_procfs && fstat(dir.as_fd()).is_ok_and(|stat| stat.st_nlink == 3) {
            self.tids.clear();
            self.tids.push(pid);
            return Ok(true);
        }
        list_threads(dir, &mut self.dirents, &mut self.tids)
    }

    /// Holds `task` for the next walk if the cap allows; otherwise its descriptors close here.
    fn keep(&mut self, pid: u32, mut task: HeldTask) {
        let room = self.max_held_files.saturating_sub(self.held_files);
        if room == 0 {
            return;
        }
        // The directory needs one descriptor; drop thread files that do not fit.
        task.threads.truncate(room - 1);
        self.held_files += task.files();
        self.held.insert(pid, task);
    }
}

/// Lists the thread ids of an open `task/` directory into `tids`, sorted; `Ok(false)` if the
/// process is gone.
fn list_threads(
    dir: &OwnedFd,
    dirents: &mut DirentBuffer,
    tids: &mut Vec<u32>,
) -> io::Result<bool> {
    tids.clear();
    match dirents.for_each(dir.as_fd(), |name| {
        if let Some(tid) = parse_u32(name) {
            tids.push(tid);
        }
    }) {
        Ok(()) => {
            tids.sort_unstable();
            Ok(true)
        }
        Err(error) if is_gone(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// `<proc>/<pid>/task` or `<proc>/<pid>/task/<tid>/children`, for error messages.
fn task_path(proc_root: &Path, pid: u32, tid: Option<u32>) -> PathBuf {
    let task = proc_root.join(pid.to_string()).join("task");
    match tid {
        Some(tid) => task.join(tid.to_string()).join("children"),
        None => task,
    }
}

#[cfg(test)]
mod tests;
