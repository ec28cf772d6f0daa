//! Where the kernel's pseudo file systems are found. Every path the collector reads is built from a
//! `Roots`, so tests run the same code over fixture trees (`tests/fixtures/<name>/{proc,sys}`).

use std::path::{Path, PathBuf};

/// The directories that stand in for `/proc` and `/sys`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    /// Stands in for `/proc`.
    pub proc: PathBuf,
    /// Stands in for `/sys` (cgroup hierarchies are normally mounted below `/sys/fs/cgroup`).
    pub sys: PathBuf,
}

impl Default for Roots {
    fn default() -> Self {
        Self::host()
    }
}

impl Roots {
    /// The running system's `/proc` and `/sys`.
    pub fn host() -> Self {
        Self {
            proc: PathBuf::from("/proc"),
            sys: PathBuf::from("/sys"),
        }
    }

    /// A fixture tree holding `proc/` and `sys/` directories.
    pub fn fixture(base: impl AsRef<Path>) -> Self {
        let base = base.as_ref();
        Self {
            proc: base.join("proc"),
            sys: base.join("sys"),
        }
    }

    /// Maps an absolute host path (as found in `/proc/self/mountinfo`, say) into these roots:
    /// `/proc/...` goes below `proc`, `/sys/...` below `sys`; any other path is returned unchanged,
    /// which is only meaningful for the host roots.
    pub fn map(&self, absolute: &Path) -> PathBuf {
        if let Ok(rest) = absolute.strip_prefix("/proc") {
            return self.proc.join(rest);
        }
        if let Ok(rest) = absolute.strip_prefix("/sys") {
            return self.sys.join(rest);
        }
        absolute.to_path_buf()
    }
}

/// Copies a fixture tree (directories, files, symlinks as symlinks) into `to`: the writable copy
/// that tests editing a tree work on.
pub fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path())?, &target)?;
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_proc_and_sys_into_a_fixture() {
        let roots = Roots::fixture("/fx");
        assert_eq!(
            roots.map(Path::new("/sys/fs/cgroup/memory")),
            PathBuf::from("/fx/sys/fs/cgroup/memory")
        );
        assert_eq!(
            roots.map(Path::new("/proc/self/mountinfo")),
            PathBuf::from("/fx/proc/self/mountinfo")
        );
        assert_eq!(roots.map(Path::new("/other")), PathBuf::from("/other"));
    }
}
