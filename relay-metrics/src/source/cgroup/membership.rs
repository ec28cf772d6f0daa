//! Which processes a cgroup subtree holds (`cgroup.procs` of the directory and every descendant).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use super::target::CgroupTarget;
use super::{CgroupError, CgroupVersion};
use crate::source::file::{is_gone, SourceError};
use crate::source::held::Published;
use crate::source::procfs::sys::{is_dot, open_dir_at, open_file_at, pread_all, DirentBuffer};

/// Lists the processes of cgroup subtrees with reused buffers and directory descriptors
/// opened relative to their parent: after the first walk of a subtree, walking it again
/// allocates nothing. The top directory (and on v2 its `cgroup.procs`) stays open between walks
/// (the collector checks exclusivity every snapshot); descendants are opened per walk because
/// they come and go.
#[derive(Debug, Default)]
pub(crate) struct SubtreeWalker {
    top: Option<HeldTop>,
    dirents: DirentBuffer,
    buf: Vec<u8>,
    /// Names of the subdirectories found in the directory being listed, NUL-separated.
    names: Vec<u8>,
    pending: Vec<OwnedFd>,
    members: Vec<u32>,
}

/// The walked subtree's top directory, held open, and on cgroup v2 its `cgroup.procs`.
#[derive(Debug)]
struct HeldTop {
    path: PathBuf,
    dir: OwnedFd,
    /// Held on v2 only, which lists the cgroup afresh when read from position 0. v1 builds a
    /// pid list at the first read after `open` and serves that list to every later read of the
    /// same descriptor while they come less than a second apart (the kernel's
    /// `CGROUP_PIDLIST_DESTROY_DELAY`): a held v1 file read every tick never changes.
    procs: Option<File>,
    /// Both in the process-wide count the collector's own descriptor count leaves out (see
    /// `source::held`).
    _published: Published,
}

impl HeldTop {
    fn open(path: &Path, version: CgroupVersion) -> io::Result<Self> {
        let dir = OwnedFd::from(File::open(path)?);
        let procs = match version {
            CgroupVersion::V2 => Some(open_file_at(&dir, b"cgroup.procs")?),
            CgroupVersion::V1 => None,
        };
        Ok(Self {
            path: path.to_owned(),
            dir,
            _published: Published::holding(1 + usize::from(procs.is_some())),
            procs,
        })
    }

    fn read_procs(&self, buf: &mut Vec<u8>, pids: &mut Vec<u32>) -> io::Result<()> {
        match &self.procs {
            Some(procs) => read_procs(procs, buf, pids),
            None => read_procs(&open_file_at(&self.dir, b"cgroup.procs")?, buf, pids),
        }
    }
}

impl SubtreeWalker {
    /// A walker with empty buffers.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Fills `pids` (cleared first; sorted, without duplicates) with every process in
    /// `cgroup.procs` of the target's membership directory ([`CgroupTarget::membership_dir`])
    /// and of every descendant directory. Descendants removed during the walk are skipped; a
    /// removed target is [`CgroupError::Gone`].
    pub(crate) fn pids(
        &mut self,
        target: &CgroupTarget,
        pids: &mut Vec<u32>,
    ) -> Result<(), CgroupError> {
        self.walk(target, pids, |_| true).map(|_| ())
    }

    /// Relay's exclusivity rule: true when the target's subtree holds exactly the processes in
    /// `pids` (sorted, without duplicates), no more and no fewer. Stops at the first process
    /// that is not in `pids`, so a shared cgroup costs one `cgroup.procs` read, not a walk.
    pub(crate) fn owns_exclusively(
        &mut self,
        target: &CgroupTarget,
        pids: &[u32],
    ) -> Result<bool, CgroupError> {
        let mut members = std::mem::take(&mut self.members);
        let result = self
            .walk(target, &mut members, |pid| pids.binary_search(&pid).is_ok())
            .map(|complete| complete && members == pids);
        self.members = members;
        result
    }

    /// Walks the subtree into `pids`; returns false (early) as soon as `keep` rejects a pid.
    fn walk(
        &mut self,
        target: &CgroupTarget,
        pids: &mut Vec<u32>,
        mut keep: impl FnMut(u32) -> bool,
    ) -> Result<bool, CgroupError> {
        pids.clear();
        let Some((version, top)) = target.membership_dir() else {
            return Err(CgroupError::NotFound {
                path: target.requested.clone().unwrap_or_default(),
            });
        };
        let gone = |error: &io::Error| is_gone(error) || error.raw_os_error() == Some(libc::ENODEV);
        let gone_top = || CgroupError::Gone {
            path: top.dir.clone(),
        };
        // The held top: a cgroup removed since the last walk reads as gone (ENODEV) through
        // its old descriptors, and one recreated under the same path is a new directory, so a
        // gone read reopens once before the cgroup counts as gone.
        let mut reopened = false;
        loop {
            if self.top.as_ref().is_none_or(|held| held.path != top.dir) {
                self.top = None;
                reopened = true;
                match HeldTop::open(&top.dir, version) {
                    Ok(held) => self.top = Some(held),
                    Err(error) if gone(&error) => return Err(gone_top()),
                    Err(error) => return Err(SourceError::io(&top.dir, error).into()),
                }
            }
            let Some(held) = &self.top else {
                return Err(gone_top());
            };
            match held.read_procs(&mut self.buf, pids) {
                Ok(()) => break,
                Err(error) if gone(&error) && !reopened => {
                    pids.clear();
                    self.top = None;
                }
                Err(error) if gone(&error) => {
                    self.top = None;
                    return Err(gone_top());
                }
                Err(error) => return Err(SourceError::io(&top.dir, error).into()),
            }
        }
        // Checked before listing descendants: a shared cgroup costs one `cgroup.procs` read.
        if !pids.iter().all(|&pid| keep(pid)) {
            return Ok(false);
        }
        self.pending.clear();
        if let Some(held) = self.top.take() {
            match self.list_children(&held.dir) {
                Ok(()) => self.top = Some(held),
                Err(error) if gone(&error) => return Err(gone_top()),
                Err(error) => return Err(SourceError::io(&top.dir, error).into()),
            }
        }
        while let Some(dir) = self.pending.pop() {
            let listed = pids.len();
            match self.walk_one(&dir, pids) {
                Ok(()) => {}
                // A descendant removed during the walk took its processes with it (or they
                // moved elsewhere in the subtree, which the walk still sees).
                Err(error) if gone(&error) => {}
                Err(error) => return Err(SourceError::io(&top.dir, error).into()),
            }
            if !pids[listed..].iter().all(|&pid| keep(pid)) {
                self.pending.clear();
                return Ok(false);
            }
        }
        // A process that moved between two descendants during the walk can be listed twice.
        pids.sort_unstable();
        pids.dedup();
        Ok(true)
    }

    fn walk_one(&mut self, dir: &OwnedFd, pids: &mut Vec<u32>) -> io::Result<()> {
        let procs = open_file_at(dir, b"cgroup.procs")?;
        read_procs(&procs, &mut self.buf, pids)?;
        self.list_children(dir)
    }

    /// Opens the subdirectories of `dir` onto `pending`.
    fn list_children(&mut self, dir: &OwnedFd) -> io::Result<()> {
        // A directory's link count is 2 + its subdirectories on cgroupfs (kernfs), ext4 and
        // tmpfs: 2 means a leaf cgroup, and listing its few dozen control files (the costliest
        // call of a walk) can be skipped. Any other count (including file systems that report
        // 1 for directories) is listed.
        if nix::sys::stat::fstat(dir.as_fd()).is_ok_and(|stat| stat.st_nlink == 2) {
            return Ok(());
        }
        self.names.clear();
        let names = &mut self.names;
        self.dirents.for_each_typed(dir.as_fd(), |name, is_dir| {
            if is_dir && !is_dot(name) {
                names.extend_from_slice(name);
                names.push(0);
            }
        })?;
        for name in self
            .names
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
        {
            match open_dir_at(dir, name) {
                Ok(child) => self.pending.push(child),
                Err(error) if is_gone(&error) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }
}

/// Appends the process ids of a `cgroup.procs` file to `pids`.
pub(super) fn read_procs(procs: &File, buf: &mut Vec<u8>, pids: &mut Vec<u32>) -> io::Result<()> {
    let content = pread_all(procs, buf)?;
    for line in content.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let pid = std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a cgroup.procs line is not a process id",
                )
            })?;
        pids.push(pid);
    }
    Ok(())
}

/// The kernfs id of the cgroup directory `dir` (its inode number: what the task iterator's
/// records and `cgroup.id` name it by); `Ok(None)` when it was removed.
pub(crate) fn cgroup_id(dir: &Path) -> Result<Option<u64>, SourceError> {
    use std::os::unix::fs::MetadataExt as _;
    match std::fs::metadata(dir) {
        Ok(metadata) => Ok(Some(metadata.ino())),
        Err(error) if is_gone(&error) => Ok(None),
        Err(error) => Err(SourceError::io(dir, error)),
    }
}

/// [`SubtreeWalker::pids`] with a one-off walker.
#[cfg(test)]
pub(crate) fn subtree_pids(target: &CgroupTarget, pids: &mut Vec<u32>) -> Result<(), CgroupError> {
    SubtreeWalker::new().pids(target, pids)
}

/// [`SubtreeWalker::owns_exclusively`] with a one-off walker; `pids` in any order.
#[cfg(test)]
pub(crate) fn owns_exclusively(target: &CgroupTarget, pids: &[u32]) -> Result<bool, CgroupError> {
    let mut measured = pids.to_vec();
    measured.sort_unstable();
    measured.dedup();
    SubtreeWalker::new().owns_exclusively(target, &measured)
}
