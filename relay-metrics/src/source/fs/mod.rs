//! Filesystem capacity of configured paths via `statvfs(2)`, exactly as Relay computes it: block
//! size = `f_frsize` (or `f_bsize` when that is 0); total = `f_blocks`, available = `f_bavail`,
//! free = `f_bfree`, each times the block size.
//!
//! Paths are used as configured, not mapped through [`Roots`](crate::source::Roots): `statvfs`
//! asks the kernel about the mount that actually holds the path, which only exists in the real
//! mount namespace. A fixture tree has no mounts to stand in for, and a container agent sees a
//! host filesystem only where it is bind-mounted, so the user configures that path directly.
//! The calls never run in this process: a filesystem that does not answer would hold the calling
//! thread, and with it the process's exit, in the kernel. Each runs in a helper process
//! (the `helper` module), and a [`FilesystemRefresher`] keeps the latest answers for the collector.

use std::path::Path;

mod helper;
mod marker;
mod refresher;

pub(crate) use refresher::FilesystemRefresher;

/// Capacity of the filesystem holding one configured path, in bytes. On any failure (the call
/// failed, block size 0, a product overflowing `u64`) all three values are `None` and `error`
/// says why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FilesystemCapacity {
    /// Size of the filesystem (`f_blocks`).
    pub total_bytes: Option<u64>,
    /// Space an unprivileged caller can still use (`f_bavail`).
    pub available_bytes: Option<u64>,
    /// Free space including blocks reserved for root (`f_bfree`).
    pub free_bytes: Option<u64>,
    /// Why the values are `None`, naming the path.
    pub error: Option<String>,
}

impl FilesystemCapacity {
    fn failed(path: &Path, reason: impl std::fmt::Display) -> Self {
        Self {
            error: Some(format!("statvfs {}: {reason}", path.display())),
            ..Self::default()
        }
    }

    fn from_blocks(path: &Path, blocks: &StatvfsBlocks) -> Self {
        match blocks.capacity() {
            Ok((total_bytes, available_bytes, free_bytes)) => Self {
                total_bytes: Some(total_bytes),
                available_bytes: Some(available_bytes),
                free_bytes: Some(free_bytes),
                error: None,
            },
            Err(reason) => Self::failed(path, reason),
        }
    }
}

/// The raw `statvfs` numbers the capacity is computed from (kept separate so the arithmetic can
/// be tested on values no real filesystem returns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StatvfsBlocks {
    /// `f_frsize`: the fundamental block size, the unit of the block counts.
    pub fragment_size: u64,
    /// `f_bsize`: the preferred I/O size, used only when `f_frsize` is 0 (as Relay does).
    pub block_size: u64,
    /// `f_blocks`.
    pub blocks: u64,
    /// `f_bavail`.
    pub blocks_available: u64,
    /// `f_bfree`.
    pub blocks_free: u64,
}

impl StatvfsBlocks {
    /// Converts block counts to bytes; `Err` with the reason on a zero block size or overflow.
    pub(crate) fn capacity(&self) -> Result<(u64, u64, u64), &'static str> {
        let unit = match (self.fragment_size, self.block_size) {
            (0, 0) => return Err("block size is 0"),
            (0, block_size) => block_size,
            (fragment_size, _) => fragment_size,
        };
        let bytes = |blocks: u64| blocks.checked_mul(unit).ok_or("capacity overflows u64");
        Ok((
            bytes(self.blocks)?,
            bytes(self.blocks_available)?,
            bytes(self.blocks_free)?,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::sync::Arc;
    use std::time::Duration;

    /// One path's capacity, asked through a helper process as the collector does.
    fn filesystem_capacity(path: &Path) -> FilesystemCapacity {
        let path: Arc<str> = Arc::from(path.to_str().unwrap());
        let mut refresher = FilesystemRefresher::new(vec![path], Duration::from_secs(5));
        let mut out = Vec::new();
        refresher.read(&mut out);
        out.pop().unwrap()
    }

    fn blocks(fragment_size: u64, block_size: u64, blocks: u64) -> StatvfsBlocks {
        StatvfsBlocks {
            fragment_size,
            block_size,
            blocks,
            blocks_available: blocks / 4,
            blocks_free: blocks / 2,
        }
    }

    #[test]
    fn multiplies_by_the_fragment_size_first() {
        assert_eq!(
            blocks(1024, 4096, 100).capacity(),
            Ok((102_400, 25_600, 51_200))
        );
        assert_eq!(
            blocks(0, 4096, 100).capacity(),
            Ok((409_600, 102_400, 204_800))
        );
    }

    #[test]
    fn zero_block_size_and_overflow_are_errors() {
        assert_eq!(blocks(0, 0, 100).capacity(), Err("block size is 0"));
        assert_eq!(
            blocks(4096, 4096, u64::MAX / 1000).capacity(),
            Err("capacity overflows u64")
        );
        // Only one of the three overflowing still fails all three.
        let mut one_overflows = blocks(2, 2, 10);
        one_overflows.blocks_free = u64::MAX;
        assert!(one_overflows.capacity().is_err());
    }

    #[test]
    fn live_root_filesystem_is_consistent() {
        let root = filesystem_capacity(Path::new("/"));
        assert_eq!(root.error, None);
        let (total, available, free) = (
            root.total_bytes.unwrap(),
            root.available_bytes.unwrap(),
            root.free_bytes.unwrap(),
        );
        assert!(total > 0);
        assert!(total >= available, "{root:?}");
        assert!(free >= available, "{root:?}");
        assert!(total >= free, "{root:?}");
    }

    /// `df -B1 --output=size` runs statfs too: the totals of `/` must agree (the size of a mounted
    /// filesystem does not change between the two calls).
    #[test]
    fn live_total_agrees_with_df() {
        let output = Command::new("df")
            .args(["-B1", "--output=size", "/"])
            .output()
            .unwrap();
        assert!(output.status.success());
        let text = String::from_utf8(output.stdout).unwrap();
        let df_total: u64 = text.lines().nth(1).unwrap().trim().parse().unwrap();
        assert_eq!(
            filesystem_capacity(Path::new("/")).total_bytes,
            Some(df_total)
        );
    }

    #[test]
    fn a_missing_path_gives_three_nones_and_a_reason() {
        let path = Path::new("/nonexistent/relay-metrics-fs-test");
        let capacity = filesystem_capacity(path);
        assert_eq!(capacity.total_bytes, None);
        assert_eq!(capacity.available_bytes, None);
        assert_eq!(capacity.free_bytes, None);
        let error = capacity.error.unwrap();
        assert!(
            error.contains("/nonexistent/relay-metrics-fs-test"),
            "{error}"
        );
        assert!(error.contains("No such file"), "{error}");
    }
}
