//! Whether cgroup v1 `blkio` counts bytes on this kernel.
//!
//! Since Linux 6.9 the v1 throttle counters (`blkio.throttle.io_service_bytes*`,
//! `blkio.throttle.io_serviced*`) count only the I/O to disks whose queue has had a throttle rule
//! set: elsewhere they read 0 whatever the cgroup did (measured on 6.18: 16 MiB written with
//! `O_DIRECT` by a task of the cgroup left `Total 0`), and a 0 there would be a wrong number.
//! Where the counters work, the hierarchy's root counts the I/O of every task since boot, so a
//! root that read no byte at all says they do not (a host whose tasks never touched a block
//! device reads `null` too, with the reason, rather than a 0 that cannot be told apart).

use std::path::Path;

use super::values::parse_blkio;
use crate::source::file::{FileKind, HeldFile};

/// What a reader of v1 `blkio` says where the counters count nothing.
pub(crate) const UNCOUNTED: &str = "storage: cgroup v1 blkio counted no byte since boot, not even \
     at its root (since Linux 6.9 it counts only on disks that have a throttle rule)";

/// Whether the v1 `blkio` hierarchy mounted at `mount_point` counts bytes: its root has counted
/// some. `true` where that cannot be told (no such file: an older kernel's layout).
pub(crate) fn v1_blkio_counts(mount_point: &Path) -> bool {
    let mut file = HeldFile::new(
        mount_point.join("blkio.throttle.io_service_bytes_recursive"),
        FileKind::Whole,
    );
    let mut buf = Vec::new();
    let Ok(bytes) = file.read(&mut buf) else {
        return true;
    };
    let mut devices = Vec::new();
    parse_blkio(bytes, &mut devices, true);
    devices
        .iter()
        .any(|device| device.read_bytes > 0 || device.write_bytes > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root_with(content: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("blkio.throttle.io_service_bytes_recursive"),
            content,
        )
        .unwrap();
        dir
    }

    #[test]
    fn a_root_that_counted_bytes_counts_and_one_that_counted_none_does_not() {
        let counted = root_with("254:0 Read 4096\n254:0 Write 0\n254:0 Total 4096\nTotal 4096\n");
        assert!(v1_blkio_counts(counted.path()));
        assert!(!v1_blkio_counts(root_with("Total 0\n").path()));
        let zeros = "254:0 Read 0\n254:0 Write 0\n254:0 Sync 0\n254:0 Total 0\nTotal 0\n";
        assert!(!v1_blkio_counts(root_with(zeros).path()));
        // Nothing to tell by: as before.
        assert!(v1_blkio_counts(tempfile::tempdir().unwrap().path()));
    }

    /// The probe against a real cgroup: 16 MiB written with `O_DIRECT` by a task of a new v1
    /// blkio cgroup show in its counter exactly where the probe says the hierarchy counts.
    #[test]
    #[ignore = "root: makes a v1 blkio cgroup and writes 16 MiB with O_DIRECT in it"]
    fn the_probe_says_whether_a_cgroups_direct_writes_are_counted() {
        assert!(nix::unistd::geteuid().is_root(), "run as root");
        let root = Path::new("/sys/fs/cgroup/blkio");
        assert!(root.is_dir(), "this test needs the hybrid host's v1 blkio");
        let counts = v1_blkio_counts(root);
        let cgroup = root.join(format!("relay-blkio-probe-{}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap();
        let file = std::env::temp_dir().join(format!("relay-blkio-probe-{}", std::process::id()));
        let script = format!(
            "echo $$ > {}/cgroup.procs && dd if=/dev/zero of={} bs=1M count=16 oflag=direct 2>/dev/null",
            cgroup.display(),
            file.display()
        );
        let status = std::process::Command::new("sh")
            .args(["-c", &script])
            .status();
        let text =
            std::fs::read_to_string(cgroup.join("blkio.throttle.io_service_bytes_recursive"));
        let _ = std::fs::remove_file(&file);
        std::fs::remove_dir(&cgroup).unwrap();
        assert!(status.unwrap().success());
        let text = text.unwrap();
        let mut devices = Vec::new();
        parse_blkio(text.as_bytes(), &mut devices, true);
        let written: u64 = devices.iter().map(|device| device.write_bytes).sum();
        eprintln!("probe: counts = {counts}; the cgroup's counter: {written} B written");
        if counts {
            assert!(written >= 16 << 20, "{text}");
        } else {
            assert_eq!(written, 0, "{text}");
        }
    }
}
