//! A cgroup's own cumulative files for `extensions.cumulative`: its memory high-water mark
//! (`memory.peak` / `memory.max_usage_in_bytes`) and its storage bytes per device (`io.stat` /
//! `blkio.throttle.io_service_bytes`), which include the tasks that exited.

use std::sync::Arc;

use super::blkio::{v1_blkio_counting, BlkioCounting};
use super::io::{parse_blkio, parse_io_stat, total_bytes, v1_file, DeviceCounters, V1_BYTES};
use super::target::CgroupTarget;
use super::CgroupVersion;
use crate::snapshot::DeviceIo;
use crate::source::file::{FileKind, HeldFile};
use crate::source::parse::parse_u64_trimmed;

/// The cgroup's high-water mark and storage files, held open between reads.
#[derive(Debug)]
pub(crate) struct CgroupTotalsReader {
    /// The cgroup has the memory controller (its `memory.*` files).
    memory_controller: bool,
    peak: Option<HeldFile>,
    io: Option<(CgroupVersion, HeldFile)>,
    /// A v1 `blkio` that counts nothing, or not on every disk, on this kernel
    /// ([`super::blkio`]): no `io`, since a sum without some disks would be too small.
    blkio_uncounted: bool,
    buf: Vec<u8>,
    /// Scratch: the devices of one read.
    counters: Vec<DeviceCounters>,
    /// Scratch: one device's name.
    name: String,
}

/// The storage bytes of one read of a cgroup's io file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IoTotals {
    /// The hierarchy the file is of: v1 `blkio` misses buffered writes.
    pub version: CgroupVersion,
    /// Bytes read, all devices.
    pub read_bytes: u64,
    /// Bytes written, all devices.
    pub write_bytes: u64,
}

impl CgroupTotalsReader {
    /// The files of `target`'s memory and blkio (v1) or io (v2) controllers; opened on the first
    /// read.
    pub(crate) fn new(target: &CgroupTarget) -> Self {
        // A v2 directory carries a controller's files only where the controller is enabled
        // (below an occupied cgroup none can be): no high-water mark to read there.
        let (peak, memory_controller) = match target.controller_dir("memory") {
            Some((CgroupVersion::V1, dir)) => {
                let peak = dir.dir.join("memory.max_usage_in_bytes");
                (Some(HeldFile::new(peak, FileKind::Whole)), true)
            }
            Some((CgroupVersion::V2, dir)) if dir.dir.join("memory.current").exists() => {
                let peak = dir.dir.join("memory.peak");
                (Some(HeldFile::new(peak, FileKind::Whole)), true)
            }
            _ => (None, false),
        };
        let blkio_uncounted = matches!(
            target.controller_dir("blkio"),
            Some((CgroupVersion::V1, dir))
                if v1_blkio_counting(&dir.mount_point) != BlkioCounting::All
        );
        let io = match target.controller_dir("blkio") {
            // Counts nothing on this kernel, or not on every disk: no totals rather than a
            // number too small.
            Some((CgroupVersion::V1, _)) if blkio_uncounted => None,
            Some((CgroupVersion::V1, dir)) => Some((
                CgroupVersion::V1,
                HeldFile::new(v1_file(&dir.dir, V1_BYTES), FileKind::Whole),
            )),
            _ => match target.controller_dir("io") {
                Some((CgroupVersion::V2, dir)) => Some((
                    CgroupVersion::V2,
                    HeldFile::new(dir.dir.join("io.stat"), FileKind::Whole),
                )),
                _ => None,
            },
        };
        Self {
            peak,
            memory_controller,
            io,
            blkio_uncounted,
            buf: Vec::with_capacity(4096),
            counters: Vec::new(),
            name: String::new(),
        }
    }

    /// Whether the cgroup has the memory controller (then a missing high-water mark has
    /// another reason than its absence).
    pub(crate) fn has_memory_controller(&self) -> bool {
        self.memory_controller
    }

    /// Whether the cgroup's v1 `blkio` counts nothing on this kernel (then [`Self::io`] is
    /// always `None`; [`super::BLKIO_UNCOUNTED`] says why).
    pub(crate) fn blkio_uncounted(&self) -> bool {
        self.blkio_uncounted
    }

    /// The memory high-water mark, bytes; `None` without the file or when it cannot be read.
    pub(crate) fn memory_peak_bytes(&mut self) -> Option<u64> {
        let file = self.peak.as_mut()?;
        let bytes = file.read(&mut self.buf).ok()?;
        parse_u64_trimmed(bytes)
    }

    /// The storage bytes of all devices, with each device's into `devices` (in the file's
    /// order, entries reused); `None` without an io file or when it cannot be read (`devices`
    /// is then emptied).
    pub(crate) fn io(&mut self, devices: &mut Vec<DeviceIo>) -> Option<IoTotals> {
        let (version, file) = self.io.as_mut()?;
        let Ok(bytes) = file.read(&mut self.buf) else {
            devices.clear();
            return None;
        };
        parse(*version, bytes, &mut self.counters);
        let (read_bytes, write_bytes) = total_bytes(&self.counters);
        devices_from(&self.counters, devices, &mut self.name);
        Some(IoTotals {
            version: *version,
            read_bytes,
            write_bytes,
        })
    }
}

/// The counters per device of a cgroup's io file (`counters` emptied first).
fn parse(version: CgroupVersion, bytes: &[u8], counters: &mut Vec<DeviceCounters>) {
    counters.clear();
    match version {
        CgroupVersion::V1 => parse_blkio(bytes, counters, true),
        CgroupVersion::V2 => parse_io_stat(bytes, counters),
    }
}

/// The bytes per device of one read, named `major:minor`, into `devices` in the file's order
/// (entries of devices already listed are reused: no allocation while the devices stay the
/// same). `name` is scratch.
fn devices_from(counters: &[DeviceCounters], devices: &mut Vec<DeviceIo>, name: &mut String) {
    for (used, counter) in counters.iter().enumerate() {
        name.clear();
        use std::fmt::Write;
        let _ = write!(name, "{}:{}", counter.major, counter.minor);
        match devices[used..]
            .iter()
            .position(|d| d.device.as_ref() == name.as_str())
        {
            Some(at) => devices.swap(used, used + at),
            None => devices.insert(
                used,
                DeviceIo {
                    device: Arc::from(name.as_str()),
                    read_bytes: 0,
                    write_bytes: 0,
                },
            ),
        }
        let entry = &mut devices[used];
        entry.read_bytes = counter.read_bytes;
        entry.write_bytes = counter.write_bytes;
    }
    devices.truncate(counters.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(version: CgroupVersion, bytes: &[u8]) -> (u64, u64) {
        let mut counters = Vec::new();
        parse(version, bytes, &mut counters);
        total_bytes(&counters)
    }

    #[test]
    fn v2_and_v1_io_lines_sum_per_device_and_in_total() {
        let v2 = b"8:0 rbytes=4096 wbytes=512 rios=1 wios=1 dbytes=0 dios=0\n253:1 rbytes=10 wbytes=20\n";
        assert_eq!(totals(CgroupVersion::V2, v2), (4106, 532));
        let v1 = b"8:0 Read 4096\n8:0 Write 512\n8:0 Sync 0\n8:0 Total 4608\nTotal 4608\n";
        assert_eq!(totals(CgroupVersion::V1, v1), (4096, 512));
        let mut counters = Vec::new();
        parse(CgroupVersion::V1, v1, &mut counters);
        assert_eq!(counters.len(), 1, "one entry for the device's lines");
        // A second read replaces the first.
        parse(CgroupVersion::V2, v2, &mut counters);
        assert_eq!(counters.len(), 2);
    }

    #[test]
    fn devices_are_listed_in_file_order_and_their_entries_reused() {
        let (mut counters, mut name) = (Vec::new(), String::new());
        let mut read = |version, bytes: &[u8], devices: &mut Vec<DeviceIo>| {
            parse(version, bytes, &mut counters);
            devices_from(&counters, devices, &mut name);
        };
        let v1 = b"8:0 Read 4096\n8:0 Write 512\n8:16 Read 1\n8:16 Write 2\nTotal 4611\n";
        let mut devices = Vec::new();
        read(CgroupVersion::V1, v1, &mut devices);
        let listed = |devices: &[DeviceIo]| -> Vec<(String, u64, u64)> {
            devices
                .iter()
                .map(|d| (d.device.to_string(), d.read_bytes, d.write_bytes))
                .collect()
        };
        assert_eq!(
            listed(&devices),
            [("8:0".into(), 4096, 512), ("8:16".into(), 1, 2)]
        );
        let first = Arc::clone(&devices[1].device);
        // Values replaced, not added; a device gone from the file is gone from the list; the
        // entry of a device listed before is the same allocation.
        let v2 = b"8:16 rbytes=10 wbytes=20\n";
        read(CgroupVersion::V2, v2, &mut devices);
        assert_eq!(listed(&devices), [("8:16".into(), 10, 20)]);
        assert!(Arc::ptr_eq(&first, &devices[0].device));
        read(CgroupVersion::V2, b"", &mut devices);
        assert!(devices.is_empty());
    }
}
