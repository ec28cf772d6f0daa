//! Which processes a cgroup subtree holds (`cgroup.procs` of the directory and every descendant).

use std::io;
use std::path::{Path, PathBuf};

use super::target::CgroupTarget;
use super::CgroupError;
use crate::source::file::{is_gone, read_once, SourceError};

/// Fills `pids` (cleared first; sorted, without duplicates) with every process in `cgroup.procs`
/// of the target's membership directory ([`CgroupTarget::membership_dir`]) and of every
/// descendant directory. Descendants removed during the walk are skipped; a removed target is
/// [`CgroupError::Gone`].
pub fn subtree_pids(target: &CgroupTarget, pids: &mut Vec<u32>) -> Result<(), CgroupError> {
    pids.clear();
    let Some((_, top)) = target.membership_dir() else {
        return Err(CgroupError::NotFound {
            path: target.requested.clone().unwrap_or_default(),
        });
    };
    let mut buf = Vec::new();
    let mut pending: Vec<PathBuf> = vec![top.dir.clone()];
    while let Some(dir) = pending.pop() {
        let is_top = dir == top.dir;
        match walk_one(&dir, &mut buf, pids, &mut pending) {
            Ok(()) => {}
            // A descendant removed during the walk took its processes with it (or they moved
            // elsewhere in the subtree, which the walk still sees).
            Err(error) if error.is_gone() && !is_top => {}
            Err(error) if error.is_gone() && !dir.exists() => {
                return Err(CgroupError::Gone { path: dir });
            }
            Err(error) => return Err(error.into()),
        }
    }
    // A process that moved between two descendants during the walk can be listed twice.
    pids.sort_unstable();
    pids.dedup();
    Ok(())
}

fn walk_one(
    dir: &Path,
    buf: &mut Vec<u8>,
    pids: &mut Vec<u32>,
    pending: &mut Vec<PathBuf>,
) -> Result<(), SourceError> {
    let procs = dir.join("cgroup.procs");
    let content = read_once(&procs, buf)?;
    for line in content.split(|&b| b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let pid = std::str::from_utf8(line)
            .ok()
            .and_then(|text| text.trim().parse::<u32>().ok())
            .ok_or_else(|| SourceError::malformed(&procs, "a line is not a process id"))?;
        pids.push(pid);
    }
    let entries = std::fs::read_dir(dir).map_err(|error| SourceError::io(dir, error))?;
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(error) if is_gone(&error) => continue,
            Err(error) => return Err(SourceError::io(dir, error)),
        };
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => pending.push(entry.path()),
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(SourceError::io(entry.path(), error)),
        }
    }
    Ok(())
}

/// Relay's exclusivity rule: true when the target's subtree holds exactly the processes in
/// `pids` (order and duplicates ignored), no more and no fewer.
pub fn owns_exclusively(target: &CgroupTarget, pids: &[u32]) -> Result<bool, CgroupError> {
    let mut members = Vec::new();
    subtree_pids(target, &mut members)?;
    let mut measured = pids.to_vec();
    measured.sort_unstable();
    measured.dedup();
    Ok(members == measured)
}
