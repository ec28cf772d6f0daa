//! Process discovery: every pid of the proc root ([`PidLister`]), or the tree below a root pid
//! ([`ProcessTreeWalker`]). Both fill a caller-provided `Vec<u32>` and reuse their buffers.

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::parse::{parse_children, parse_u32};
use super::sys::{open_dir_at, open_file_at, pread_all, DirentBuffer, PathName};
use crate::source::file::is_gone;
use crate::source::{Roots, SourceError};

fn open_proc_root(roots: &Roots) -> Result<(PathBuf, OwnedFd), SourceError> {
    let proc_root = roots.proc.clone();
    let proc_dir = File::open(&proc_root)
        .map(OwnedFd::from)
        .map_err(|error| SourceError::io(&proc_root, error))?;
    Ok((proc_root, proc_dir))
}

/// Lists every process of the proc root: its numeric entries, sorted, pid 0 excluded.
#[derive(Debug)]
pub struct PidLister {
    proc_root: PathBuf,
    proc_dir: OwnedFd,
    dirents: DirentBuffer,
}

impl PidLister {
    /// Opens (and keeps open) the proc root of `roots`.
    pub fn new(roots: &Roots) -> Result<Self, SourceError> {
        let (proc_root, proc_dir) = open_proc_root(roots)?;
        Ok(Self {
            proc_root,
            proc_dir,
            dirents: DirentBuffer::default(),
        })
    }

    /// Replaces the content of `pids` with the pids now present. An empty listing is an error:
    /// a proc root without processes is not procfs.
    pub fn list(&mut self, pids: &mut Vec<u32>) -> Result<(), SourceError> {
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

/// Lists a process tree: breadth-first from a root pid over the `children` file of **every
/// thread** (`/proc/<pid>/task/<tid>/children`; a child hangs below the thread that forked it).
/// Needs `CONFIG_PROC_CHILDREN`.
///
/// A process or thread that vanishes during the walk (ENOENT/ESRCH) is skipped: a vanished child
/// stays in the list (its sample then reports it gone) but contributes no descendants. Any other
/// error (EACCES, ...) fails the listing, since a partial tree would give wrong sums.
#[derive(Debug)]
pub struct ProcessTreeWalker {
    proc_root: PathBuf,
    proc_dir: OwnedFd,
    dirents: DirentBuffer,
    buf: Vec<u8>,
    tids: Vec<u32>,
    seen: HashSet<u32>,
}

impl ProcessTreeWalker {
    /// Opens (and keeps open) the proc root of `roots`.
    pub fn new(roots: &Roots) -> Result<Self, SourceError> {
        let (proc_root, proc_dir) = open_proc_root(roots)?;
        Ok(Self {
            proc_root,
            proc_dir,
            dirents: DirentBuffer::default(),
            buf: Vec::with_capacity(4096),
            tids: Vec::new(),
            seen: HashSet::new(),
        })
    }

    /// Replaces the content of `pids` with `root` followed by its descendants in breadth-first
    /// order. Each pid appears once, even if pid reuse during the walk made a cycle.
    pub fn walk(&mut self, root: u32, pids: &mut Vec<u32>) -> Result<(), SourceError> {
        let Self {
            proc_root,
            proc_dir,
            dirents,
            buf,
            tids,
            seen,
        } = self;
        pids.clear();
        seen.clear();
        pids.push(root);
        seen.insert(root);
        let mut next = 0;
        while let Some(&pid) = pids.get(next) {
            next += 1;
            if !list_threads(proc_dir, dirents, pid, tids)
                .map_err(|error| SourceError::io(task_path(proc_root, pid, None), error))?
            {
                continue;
            }
            for &tid in tids.iter() {
                let children = PathName::new()
                    .number(pid)
                    .text(b"/task/")
                    .number(tid)
                    .text(b"/children");
                let bytes = match read_at(proc_dir, children.as_bytes(), buf) {
                    Ok(bytes) => bytes,
                    Err(error) if is_gone(&error) => continue,
                    Err(error) => {
                        return Err(SourceError::io(task_path(proc_root, pid, Some(tid)), error))
                    }
                };
                let before = pids.len();
                parse_children(bytes, pids).ok_or_else(|| {
                    SourceError::malformed(
                        task_path(proc_root, pid, Some(tid)),
                        "unparsable children list",
                    )
                })?;
                // Drop the pids already listed, keeping the order of the new ones.
                let mut kept = before;
                for index in before..pids.len() {
                    let child = pids[index];
                    if seen.insert(child) {
                        pids[kept] = child;
                        kept += 1;
                    }
                }
                pids.truncate(kept);
            }
        }
        Ok(())
    }
}

/// Fills `tids` with the threads of `pid`; `Ok(false)` if the process is gone.
fn list_threads(
    proc_dir: &OwnedFd,
    dirents: &mut DirentBuffer,
    pid: u32,
    tids: &mut Vec<u32>,
) -> io::Result<bool> {
    tids.clear();
    let task = PathName::new().number(pid).text(b"/task");
    let dir = match open_dir_at(proc_dir, task.as_bytes()) {
        Ok(dir) => dir,
        Err(error) if is_gone(&error) => return Ok(false),
        Err(error) => return Err(error),
    };
    match dirents.for_each(dir.as_fd(), |name| {
        if let Some(tid) = parse_u32(name) {
            tids.push(tid);
        }
    }) {
        Ok(()) => Ok(true),
        Err(error) if is_gone(&error) => Ok(false),
        Err(error) => Err(error),
    }
}

/// Opens `name` below the proc root, reads it whole into `buf` and closes it.
fn read_at<'b>(proc_dir: &OwnedFd, name: &[u8], buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    pread_all(&open_file_at(proc_dir, name)?, buf)
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
#[path = "discover_tests.rs"]
mod tests;
