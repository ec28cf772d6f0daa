//! Cgroup paths by kernfs id: the id the iterator reports is the inode number of the cgroup's
//! directory (on 64-bit kernels, `kernfs_ino` is the whole id).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Every cgroup directory below `root` (and `root` itself, as `""`) by inode number. A cgroup
/// removed during the walk is simply missing.
pub(super) fn by_inode(root: &Path) -> HashMap<u64, PathBuf> {
    let mut paths = HashMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let dir = root.join(&relative);
        let Ok(meta) = std::fs::metadata(&dir) else {
            continue;
        };
        paths.insert(meta.ino(), relative.clone());
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                pending.push(relative.join(entry.file_name()));
            }
        }
    }
    paths
}
