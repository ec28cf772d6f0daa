//! On which disks cgroup v1 `blkio` counts bytes on this kernel.
//!
//! Since Linux 6.9 the v1 throttle counters (`blkio.throttle.io_service_bytes*`,
//! `blkio.throttle.io_serviced*`) count only the I/O to disks whose queue has had a throttle rule
//! set: elsewhere they read 0 whatever the cgroup did (measured on 6.18: 16 MiB written with
//! `O_DIRECT` by a task of the cgroup left `Total 0`), and a 0 there would be a wrong number.
//! Where the counters work, the hierarchy's root counts the I/O of every task since boot, so a
//! root that read no byte at all says they do not (a host whose tasks never touched a block
//! device reads `null` too, with the reason, rather than a 0 that cannot be told apart). A root
//! that counted bytes on some disks and none on others has a throttle rule on the former only:
//! the others are left out of each cgroup's devices, with the reason. Since 6.9 the root does
//! not even list a disk without a rule, so the disks `/proc/diskstats` saw I/O on are the list
//! to check: one of them the root does not list, or lists at 0, is not counted.
//!
//! The root is probed once per hierarchy and [`REPROBE_AFTER`], not once per cgroup.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::io::{parse_blkio, DeviceCounters, V1_BYTES};
use crate::source::file::{FileKind, HeldFile};
use crate::source::system::disks_with_io;
use crate::source::Roots;

/// What a reader of v1 `blkio` says where the counters count nothing, or not on every disk.
pub(crate) const UNCOUNTED: &str = "storage: cgroup v1 blkio counted no byte since boot, not even \
     at its root, on all or some disks (since Linux 6.9 it counts only on disks that have a \
     throttle rule)";

/// How long a probe's answer stands: a throttle rule set later makes the root count on its
/// disk, and cgroups found after this long see it.
const REPROBE_AFTER: Duration = Duration::from_secs(60);

/// What the root of a v1 `blkio` hierarchy says its counters count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BlkioCounting {
    /// Every disk (or it cannot be told: an older kernel's layout without the root's file).
    All,
    /// No disk: the root counted no byte.
    Nothing,
    /// Every disk but these (`major`, `minor`): the root counted no byte on them while it
    /// counted some on others (since Linux 6.9, disks without a throttle rule).
    AllBut(Vec<(u32, u32)>),
}

impl BlkioCounting {
    /// Whether the counters of the disk `major:minor` count.
    pub(crate) fn counts(&self, major: u32, minor: u32) -> bool {
        match self {
            Self::All => true,
            Self::Nothing => false,
            Self::AllBut(uncounted) => !uncounted.contains(&(major, minor)),
        }
    }

    /// Why a cgroup's per-device list misses disks; `None` where it misses none.
    pub(crate) fn reason(&self) -> Option<String> {
        match self {
            Self::All => None,
            Self::Nothing => Some(UNCOUNTED.to_owned()),
            Self::AllBut(uncounted) => {
                let disks: Vec<String> = uncounted
                    .iter()
                    .map(|(major, minor)| format!("{major}:{minor}"))
                    .collect();
                Some(format!(
                    "storage: cgroup v1 blkio counted no byte since boot on {}, not even at its \
                     root, while it counted some on other disks (since Linux 6.9 it counts only \
                     on disks that have a throttle rule): left out",
                    disks.join(", ")
                ))
            }
        }
    }
}

/// What the v1 `blkio` hierarchy mounted at `mount_point` counts: its root's answer beside the
/// disks of `roots`' `/proc/diskstats`, probed again after [`REPROBE_AFTER`] (every new cgroup's
/// readers ask; the files are read once for all of them).
pub(crate) fn v1_blkio_counting(mount_point: &Path, roots: &Roots) -> BlkioCounting {
    static PROBES: Mutex<Vec<(PathBuf, Instant, BlkioCounting)>> = Mutex::new(Vec::new());
    let mut probes = PROBES.lock().unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    if let Some((_, at, counting)) = probes.iter().find(|(path, _, _)| path == mount_point) {
        if now.duration_since(*at) < REPROBE_AFTER {
            return counting.clone();
        }
    }
    let counting = probe(mount_point, disks_with_io(roots).as_deref());
    probes.retain(|(path, _, _)| path != mount_point);
    probes.push((mount_point.to_path_buf(), now, counting.clone()));
    counting
}

/// Reads the root's recursive byte counters; `with_io` are the whole disks that saw I/O since
/// boot (`None`: not known).
fn probe(mount_point: &Path, with_io: Option<&[(u32, u32)]>) -> BlkioCounting {
    let mut file = HeldFile::new(
        mount_point.join(format!("{V1_BYTES}_recursive")),
        FileKind::Whole,
    );
    let mut buf = Vec::new();
    let Ok(bytes) = file.read(&mut buf) else {
        return BlkioCounting::All;
    };
    let mut devices = Vec::new();
    parse_blkio(bytes, &mut devices, true);
    counting_of(&devices, with_io)
}

/// What the root's counters per device say, beside the disks that saw I/O (`with_io`, when
/// known): a disk that saw I/O and that the root lists at 0 or not at all is not counted; one
/// listed at 0 that saw none is idle, and counts. Without `with_io`, every disk listed at 0 is
/// taken as not counted and an unlisted one as counted (nothing to tell by).
fn counting_of(root: &[DeviceCounters], with_io: Option<&[(u32, u32)]>) -> BlkioCounting {
    let counted = |device: &&DeviceCounters| device.read_bytes > 0 || device.write_bytes > 0;
    if !root.iter().any(|device| counted(&device)) {
        return BlkioCounting::Nothing;
    }
    let mut uncounted: Vec<(u32, u32)> = root
        .iter()
        .filter(|device| !counted(device))
        .map(|device| (device.major, device.minor))
        .collect();
    if let Some(with_io) = with_io {
        uncounted.retain(|disk| with_io.contains(disk));
        let listed = |&&(major, minor): &&(u32, u32)| {
            root.iter().any(|d| (d.major, d.minor) == (major, minor))
        };
        uncounted.extend(with_io.iter().filter(|disk| !listed(disk)));
    }
    if uncounted.is_empty() {
        BlkioCounting::All
    } else {
        BlkioCounting::AllBut(uncounted)
    }
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
        assert_eq!(probe(counted.path(), None), BlkioCounting::All);
        assert_eq!(probe(counted.path(), Some(&[(254, 0)])), BlkioCounting::All);
        assert_eq!(
            probe(root_with("Total 0\n").path(), None),
            BlkioCounting::Nothing
        );
        let zeros = "254:0 Read 0\n254:0 Write 0\n254:0 Sync 0\n254:0 Total 0\nTotal 0\n";
        assert_eq!(probe(root_with(zeros).path(), None), BlkioCounting::Nothing);
        assert_eq!(
            BlkioCounting::Nothing.reason().as_deref(),
            Some(UNCOUNTED),
            "the whole hierarchy's reason"
        );
        // Nothing to tell by: as before.
        let bare = tempfile::tempdir().unwrap();
        assert_eq!(probe(bare.path(), None), BlkioCounting::All);
        assert_eq!(BlkioCounting::All.reason(), None);
    }

    /// Linux 6.9+ with a throttle rule on one disk (8:0) only: the root counts that disk, the
    /// other (8:16) reads 0 however much it was written to.
    #[test]
    fn a_root_that_counts_one_disk_only_leaves_the_others_out() {
        let root = root_with(
            "8:16 Read 0\n8:16 Write 0\n8:16 Sync 0\n8:16 Async 0\n8:16 Discard 0\n8:16 Total 0\n\
             8:0 Read 4096\n8:0 Write 16777216\n8:0 Sync 16781312\n8:0 Async 0\n8:0 Discard 0\n\
             8:0 Total 16781312\nTotal 16781312\n",
        );
        let counting = probe(root.path(), None);
        assert_eq!(counting, BlkioCounting::AllBut(vec![(8, 16)]));
        assert!(counting.counts(8, 0));
        assert!(!counting.counts(8, 16));
        // Without /proc/diskstats a disk the root does not list is not known to be uncounted.
        assert!(counting.counts(253, 1));
        let reason = counting.reason().unwrap();
        assert!(reason.contains("on 8:16,"), "{reason}");
        assert!(!reason.contains("8:0"), "{reason}");
        // With it: 8:16 saw no I/O (idle, and counted); 253:1 saw I/O and is not listed.
        let counting = probe(root.path(), Some(&[(8, 0), (253, 1)]));
        assert_eq!(counting, BlkioCounting::AllBut(vec![(253, 1)]));
        assert!(counting.counts(8, 16));
    }

    /// Linux 6.9+ lists only the disks with a throttle rule at the root: the other disks that
    /// saw I/O (from `/proc/diskstats`) are the uncounted ones.
    #[test]
    fn a_disk_the_root_does_not_list_is_left_out_where_it_saw_io() {
        let root = root_with("8:0 Read 4096\n8:0 Write 512\n8:0 Total 4608\nTotal 4608\n");
        let base = tempfile::tempdir().unwrap();
        let proc = base.path().join("proc");
        std::fs::create_dir_all(&proc).unwrap();
        std::fs::create_dir_all(base.path().join("sys/dev/block/8:1/partition")).unwrap();
        std::fs::write(
            proc.join("diskstats"),
            "   8       0 sda 10 0 800 5 4 0 64 2 0 7 7 0 0 0 0\n\
                8       1 sda1 10 0 800 5 4 0 64 2 0 7 7 0 0 0 0\n\
                8      16 sdb 3 0 24 1 0 0 0 0 0 1 1 0 0 0 0\n\
                7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
        )
        .unwrap();
        let roots = Roots::fixture(base.path());
        assert_eq!(disks_with_io(&roots), Some(vec![(8, 0), (8, 16)]));
        let counting = v1_blkio_counting(root.path(), &roots);
        assert_eq!(counting, BlkioCounting::AllBut(vec![(8, 16)]));
        assert!(counting.counts(8, 0) && !counting.counts(8, 16));
    }

    /// The answer stands for [`REPROBE_AFTER`]: the root's file is not read again for each
    /// cgroup.
    #[test]
    fn the_probe_is_read_once_per_mount_point_within_its_interval() {
        let root = root_with("Total 0\n");
        let none = Roots::fixture(root.path().join("none"));
        assert_eq!(
            v1_blkio_counting(root.path(), &none),
            BlkioCounting::Nothing
        );
        std::fs::write(
            root.path().join(format!("{V1_BYTES}_recursive")),
            "8:0 Read 1\n8:0 Write 0\nTotal 1\n",
        )
        .unwrap();
        assert_eq!(
            v1_blkio_counting(root.path(), &none),
            BlkioCounting::Nothing
        );
        assert_eq!(probe(root.path(), None), BlkioCounting::All);
        let other = root_with("8:0 Read 1\n8:0 Write 0\nTotal 1\n");
        assert_eq!(v1_blkio_counting(other.path(), &none), BlkioCounting::All);
    }

    /// The probe against a real cgroup: 16 MiB written with `O_DIRECT` by a task of a new v1
    /// blkio cgroup show in its counter exactly where the probe says the hierarchy counts.
    #[test]
    #[ignore = "root: makes a v1 blkio cgroup and writes 16 MiB with O_DIRECT in it"]
    fn the_probe_says_whether_a_cgroups_direct_writes_are_counted() {
        assert!(nix::unistd::geteuid().is_root(), "run as root");
        let root = Path::new("/sys/fs/cgroup/blkio");
        assert!(root.is_dir(), "this test needs the hybrid host's v1 blkio");
        let counting = probe(root, disks_with_io(&Roots::host()).as_deref());
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
        let written = |counted: bool| -> u64 {
            devices
                .iter()
                .filter(|d| counting.counts(d.major, d.minor) == counted)
                .map(|device| device.write_bytes)
                .sum()
        };
        eprintln!(
            "probe: {counting:?}; the cgroup's counter: {} B written on counted disks, {} B on others",
            written(true),
            written(false)
        );
        // What the probe leaves out reads 0 in the cgroup too.
        assert_eq!(written(false), 0, "{text}");
        match counting {
            BlkioCounting::All => assert!(written(true) >= 16 << 20, "{text}"),
            BlkioCounting::Nothing => assert_eq!(written(true), 0, "{text}"),
            // The file's disk may be either.
            BlkioCounting::AllBut(_) => {}
        }
    }
}
