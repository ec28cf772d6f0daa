//! A cgroup's own cumulative files for `extensions.cumulative`: its memory high-water mark
//! (`memory.peak` / `memory.max_usage_in_bytes`) and its storage bytes per device (`io.stat` /
//! `blkio.throttle.io_service_bytes`), which include the tasks that exited.

use std::sync::Arc;

use super::target::CgroupTarget;
use super::CgroupVersion;
use crate::snapshot::DeviceIo;
use crate::source::file::{FileKind, HeldFile};
use crate::source::parse::{parse_u64, parse_u64_trimmed};

/// The cgroup's high-water mark and storage files, held open between reads.
#[derive(Debug)]
pub(crate) struct CgroupTotalsReader {
    peak: Option<HeldFile>,
    io: Option<(CgroupVersion, HeldFile)>,
    /// A v1 `blkio` that counts nothing on this kernel ([`super::blkio`]): no `io`.
    blkio_uncounted: bool,
    buf: Vec<u8>,
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
        let peak = match target.controller_dir("memory") {
            Some((CgroupVersion::V1, dir)) => Some(HeldFile::new(
                dir.dir.join("memory.max_usage_in_bytes"),
                FileKind::Whole,
            )),
            Some((CgroupVersion::V2, dir)) => {
                Some(HeldFile::new(dir.dir.join("memory.peak"), FileKind::Whole))
            }
            None => None,
        };
        let blkio_uncounted = matches!(
            target.controller_dir("blkio"),
            Some((CgroupVersion::V1, dir)) if !super::blkio::v1_blkio_counts(&dir.mount_point)
        );
        let io = match target.controller_dir("blkio") {
            // Counts nothing on this kernel: no totals rather than 0.
            Some((CgroupVersion::V1, _)) if blkio_uncounted => None,
            Some((CgroupVersion::V1, dir)) => {
                let recursive = dir.dir.join("blkio.throttle.io_service_bytes_recursive");
                let path = if recursive.exists() {
                    recursive
                } else {
                    dir.dir.join("blkio.throttle.io_service_bytes")
                };
                Some((CgroupVersion::V1, HeldFile::new(path, FileKind::Whole)))
            }
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
            io,
            blkio_uncounted,
            buf: Vec::with_capacity(4096),
        }
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
        let (read_bytes, write_bytes) = cgroup_io_totals(*version, bytes);
        devices_from(*version, bytes, devices);
        Some(IoTotals {
            version: *version,
            read_bytes,
            write_bytes,
        })
    }
}

/// Calls `each(device, read_bytes, write_bytes)` for every line of v2 `io.stat`
/// (`8:0 rbytes=… wbytes=… …`) or v1 `blkio.throttle.io_service_bytes` (`8:0 Read N`,
/// `8:0 Write N`, …, `Total N`).
fn for_each_device(version: CgroupVersion, bytes: &[u8], mut each: impl FnMut(&[u8], u64, u64)) {
    for line in bytes.split(|b| *b == b'\n') {
        let mut fields = line.split(|b| *b == b' ').filter(|f| !f.is_empty());
        let Some(device) = fields.next() else {
            continue;
        };
        if !device.contains(&b':') {
            continue;
        }
        match version {
            CgroupVersion::V2 => {
                let (mut read, mut write) = (0, 0);
                for field in fields {
                    if let Some(value) = field.strip_prefix(b"rbytes=") {
                        read = parse_u64(value).unwrap_or(0);
                    } else if let Some(value) = field.strip_prefix(b"wbytes=") {
                        write = parse_u64(value).unwrap_or(0);
                    }
                }
                each(device, read, write);
            }
            CgroupVersion::V1 => {
                let (Some(kind), Some(value)) = (fields.next(), fields.next().and_then(parse_u64))
                else {
                    continue;
                };
                match kind {
                    b"Read" => each(device, value, 0),
                    b"Write" => each(device, 0, value),
                    _ => {}
                }
            }
        }
    }
}

/// The bytes per device of a cgroup's io file, into `devices` in the file's order (entries of
/// devices already listed are reused: no allocation while the devices stay the same).
fn devices_from(version: CgroupVersion, bytes: &[u8], devices: &mut Vec<DeviceIo>) {
    let mut used = 0;
    for_each_device(version, bytes, |device, read, write| {
        if let Some(entry) = devices[..used]
            .iter_mut()
            .find(|d| d.device.as_bytes() == device)
        {
            entry.read_bytes = entry.read_bytes.saturating_add(read);
            entry.write_bytes = entry.write_bytes.saturating_add(write);
            return;
        }
        match devices[used..]
            .iter()
            .position(|d| d.device.as_bytes() == device)
        {
            Some(at) => devices.swap(used, used + at),
            None => devices.insert(
                used,
                DeviceIo {
                    device: Arc::from(String::from_utf8_lossy(device).as_ref()),
                    read_bytes: 0,
                    write_bytes: 0,
                },
            ),
        }
        let entry = &mut devices[used];
        entry.read_bytes = read;
        entry.write_bytes = write;
        used += 1;
    });
    devices.truncate(used);
}

fn cgroup_io_totals(version: CgroupVersion, bytes: &[u8]) -> (u64, u64) {
    let (mut read, mut write) = (0u64, 0u64);
    for_each_device(version, bytes, |_, r, w| {
        read = read.saturating_add(r);
        write = write.saturating_add(w);
    });
    (read, write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_v1_io_lines_sum_per_device_and_in_total() {
        let v2 = b"8:0 rbytes=4096 wbytes=512 rios=1 wios=1 dbytes=0 dios=0\n253:1 rbytes=10 wbytes=20\n";
        assert_eq!(cgroup_io_totals(CgroupVersion::V2, v2), (4106, 532));
        let v1 = b"8:0 Read 4096\n8:0 Write 512\n8:0 Sync 0\n8:0 Total 4608\nTotal 4608\n";
        assert_eq!(cgroup_io_totals(CgroupVersion::V1, v1), (4096, 512));
        let mut devices = Vec::new();
        for_each_device(CgroupVersion::V1, v1, |d, r, w| {
            devices.push((d.to_vec(), r, w))
        });
        assert_eq!(devices.len(), 2);
        assert!(devices.iter().all(|(d, _, _)| d == b"8:0"));
    }

    #[test]
    fn devices_are_listed_in_file_order_and_their_entries_reused() {
        let v1 = b"8:0 Read 4096\n8:0 Write 512\n8:16 Read 1\n8:16 Write 2\nTotal 4611\n";
        let mut devices = Vec::new();
        devices_from(CgroupVersion::V1, v1, &mut devices);
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
        devices_from(CgroupVersion::V2, v2, &mut devices);
        assert_eq!(listed(&devices), [("8:16".into(), 10, 20)]);
        assert!(Arc::ptr_eq(&first, &devices[0].device));
        devices_from(CgroupVersion::V2, b"", &mut devices);
        assert!(devices.is_empty());
    }
}
