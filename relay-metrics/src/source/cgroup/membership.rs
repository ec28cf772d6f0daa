//! Which processes a cgroup subtree holds (`cgroup.procs` of the directory and every descendant).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

use super::target::CgroupTarget;
use super::CgroupError;
use crate::source::file::{is_gone, SourceError};
use crate::source::procfs::sys::{
    is_dot, open_dir_at, open_file_at, pread_all, DirentBuffer, DT_DIR,
};

/// Lists the processes of cgroup subtrees with reused buffers and directory descriptors
/// opened relative to their parent: after the first walk of a subtree, walking it again
/// allocates nothing.
#[derive(Debug, Default)]
pub struct SubtreeWalker {
    dirents: DirentBuffer,
    buf: Vec<u8>,
    /// Names of the subdirectories found in the directory being listed, NUL-separated.
    names: Vec<u8>,
    pending: Vec<OwnedFd>,
    members: Vec<u32>,
}

impl SubtreeWalker {
    /// A walker with empty buffers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fills `pids` (cleared first; sorted, without duplicates) with every process in
    /// `cgroup.procs` of the target's membership directory ([`CgroupTarget::membership_dir`])
    /// and of every descendant directory. Descendants removed during the walk are skipped; a
    /// removed target is [`CgroupError::Gone`].
    pub fn pids(&mut self, target: &CgroupTarget, pids: &mut Vec<u32>) -> Result<(), CgroupError> {
        self.walk(target, pids, |_| true).map(|_| ())
    }

    /// Relay's exclusivity rule: true when the target's subtree holds exactly the processes in
    /// `pids` (sorted, without duplicates), no more and no fewer. Stops at the first process
    /// that is not in `pids`, so a shared cgroup costs one `cgroup.procs` read, not a walk.
    pub fn owns_exclusively(
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
        let Some((_, top)) = target.membership_dir() else {
            return Err(CgroupError::NotFound {
                path: target.requested.clone().unwrap_or_default(),
            });
        };
        let gone = |error: &io::Error| is_gone(error) || error.raw_os_error() == Some(libc::ENODEV);
        let top_fd = match File::open(&top.dir) {
            Ok(file) => OwnedFd::from(file),
            Err(error) if gone(&error) => {
                return Err(CgroupError::Gone {
                    path: top.dir.clone(),
                })
            }
            Err(error) => return Err(SourceError::io(&top.dir, error).into()),
        };
        self.pending.clear();
        self.pending.push(top_fd);
        let mut is_top = true;
        while let Some(dir) = self.pending.pop() {
            let listed = pids.len();
            match self.walk_one(&dir, pids) {
                Ok(()) => {}
                // A descendant removed during the walk took its processes with it (or they
                // moved elsewhere in the subtree, which the walk still sees).
                Err(error) if gone(&error) && !is_top => {}
                Err(error) if gone(&error) => {
                    return Err(CgroupError::Gone {
                        path: top.dir.clone(),
                    });
                }
                Err(error) => return Err(SourceError::io(&top.dir, error).into()),
            }
            if !pids[listed..].iter().all(|&pid| keep(pid)) {
                self.pending.clear();
                return Ok(false);
            }
            is_top = false;
        }
        // A process that moved between two descendants during the walk can be listed twice.
        pids.sort_unstable();
        pids.dedup();
        Ok(true)
    }

    fn walk_one(&mut self, dir: &OwnedFd, pids: &mut Vec<u32>) -> io::Result<()> {
        let procs = open_file_at(dir, b"cgroup.procs")?;
        let content = pread_all(&procs, &mut self.buf)?;
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
        self.names.clear();
        let names = &mut self.names;
        self.dirents.for_each_typed(dir.as_fd(), |name, kind| {
            if kind == DT_DIR && !is_dot(name) {
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

/// [`SubtreeWalker::pids`] with a one-off walker.
pub fn subtree_pids(target: &CgroupTarget, pids: &mut Vec<u32>) -> Result<(), CgroupError> {
    SubtreeWalker::new().pids(target, pids)
}

/// [`SubtreeWalker::owns_exclusively`] with a one-off walker; `pids` in any order.
pub fn owns_exclusively(target: &CgroupTarget, pids: &[u32]) -> Result<bool, CgroupError> {
    let mut measured = pids.to_vec();
    measured.sort_unstable();
    measured.dedup();
    SubtreeWalker::new().owns_exclusively(target, &measured)
}
