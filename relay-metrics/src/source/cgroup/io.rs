//! The parsers of a cgroup's storage files, v2 `io.stat` and v1 `blkio.throttle.*`, into
//! counters per block device: the one home of their format for the per-cgroup values
//! ([`super::values`]), the cumulative totals ([`super::totals`]) and the `blkio` probe
//! ([`super::blkio`]).
//!
//! Each device appears once in a read's list. `io.stat` has one line per device; the v1 files
//! have one line per device and kind (`Read`, `Write`, `Sync`, `Async`, `Discard`, `Total`),
//! then `Total N` for all devices. A line therefore sets its field, never adds to it: a sum
//! would count a device twice if a file ever listed it twice.

use std::path::{Path, PathBuf};

use crate::source::parse::parse_u64_trimmed;

/// One block device's I/O counters while a read parses them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeviceCounters {
    /// Major device number.
    pub major: u32,
    /// Minor device number.
    pub minor: u32,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read operations.
    pub read_ops: u64,
    /// Write operations.
    pub write_ops: u64,
}

/// v1 `blkio.throttle.io_service_bytes`: bytes per device and kind.
pub(crate) const V1_BYTES: &str = "blkio.throttle.io_service_bytes";
/// v1 `blkio.throttle.io_serviced`: operations per device and kind.
pub(crate) const V1_OPS: &str = "blkio.throttle.io_serviced";

/// The v1 file `name` ([`V1_BYTES`], [`V1_OPS`]) of the cgroup at `dir`: its `_recursive`
/// form, which counts the cgroup's descendants too, where the kernel has it, and the cgroup's
/// own counts on kernels before it.
pub(crate) fn v1_file(dir: &Path, name: &str) -> PathBuf {
    let recursive = dir.join(format!("{name}_recursive"));
    if recursive.exists() {
        recursive
    } else {
        dir.join(name)
    }
}

/// The bytes read and written on all of `devices`.
#[cfg(test)]
pub(crate) fn total_bytes(devices: &[DeviceCounters]) -> (u64, u64) {
    devices.iter().fold((0u64, 0u64), |(read, write), device| {
        (
            read.saturating_add(device.read_bytes),
            write.saturating_add(device.write_bytes),
        )
    })
}

/// `major:minor` of a device field.
fn device_numbers(field: &[u8]) -> Option<(u32, u32)> {
    let text = std::str::from_utf8(field).ok()?;
    let (major, minor) = text.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The entry of the device `(major, minor)` in `devices`, added at the end if it is new.
fn device(devices: &mut Vec<DeviceCounters>, (major, minor): (u32, u32)) -> &mut DeviceCounters {
    let at = match devices
        .iter()
        .position(|d| d.major == major && d.minor == minor)
    {
        Some(at) => at,
        None => {
            devices.push(DeviceCounters {
                major,
                minor,
                ..DeviceCounters::default()
            });
            devices.len() - 1
        }
    };
    &mut devices[at]
}

/// v2 `io.stat`: `8:0 rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0`.
pub(crate) fn parse_io_stat(bytes: &[u8], devices: &mut Vec<DeviceCounters>) {
    for line in bytes.split(|&b| b == b'\n') {
        let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let Some(numbers) = fields.next().and_then(device_numbers) else {
            continue;
        };
        let entry = device(devices, numbers);
        for field in fields {
            let Some(at) = field.iter().position(|&b| b == b'=') else {
                continue;
            };
            let Some(value) = parse_u64_trimmed(&field[at + 1..]) else {
                continue;
            };
            match &field[..at] {
                b"rbytes" => entry.read_bytes = value,
                b"wbytes" => entry.write_bytes = value,
                b"rios" => entry.read_ops = value,
                b"wios" => entry.write_ops = value,
                _ => {}
            }
        }
    }
}

/// v1 [`V1_BYTES`] (`bytes`) or [`V1_OPS`], recursive or not: `8:0 Read 123`, `8:0 Write 4`,
/// …, `Total 127`.
pub(crate) fn parse_blkio(content: &[u8], devices: &mut Vec<DeviceCounters>, bytes: bool) {
    for line in content.split(|&b| b == b'\n') {
        let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
        let (Some(numbers), Some(kind), Some(value)) = (
            fields.next().and_then(device_numbers),
            fields.next(),
            fields.next().and_then(parse_u64_trimmed),
        ) else {
            continue;
        };
        let entry = device(devices, numbers);
        match (kind, bytes) {
            (b"Read", true) => entry.read_bytes = value,
            (b"Write", true) => entry.write_bytes = value,
            (b"Read", false) => entry.read_ops = value,
            (b"Write", false) => entry.write_ops = value,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_files_of_both_versions_parse_per_device() {
        let mut devices = Vec::new();
        parse_io_stat(
            b"8:0 rbytes=10 wbytes=20 rios=1 wios=2 dbytes=0 dios=0\n253:1 rbytes=5 wbytes=0 rios=1 wios=0\n",
            &mut devices,
        );
        assert_eq!(devices.len(), 2);
        assert_eq!(
            devices[0],
            DeviceCounters {
                major: 8,
                minor: 0,
                read_bytes: 10,
                write_bytes: 20,
                read_ops: 1,
                write_ops: 2
            }
        );
        assert_eq!(total_bytes(&devices), (15, 20));
        let mut v1 = Vec::new();
        parse_blkio(
            b"8:0 Read 100\n8:0 Write 50\n8:0 Sync 1\nTotal 150\n",
            &mut v1,
            true,
        );
        parse_blkio(b"8:0 Read 3\n8:0 Write 4\nTotal 7\n", &mut v1, false);
        assert_eq!(
            v1,
            vec![DeviceCounters {
                major: 8,
                minor: 0,
                read_bytes: 100,
                write_bytes: 50,
                read_ops: 3,
                write_ops: 4
            }]
        );
    }

    /// The kernel's v1 layout (one line per device and kind, `Sync`/`Async`/`Discard`/`Total`
    /// beside `Read`/`Write`, then the file's `Total`) gives one entry per device, in the
    /// file's order, and only `Read` and `Write` count.
    #[test]
    fn a_v1_file_of_two_devices_gives_each_device_once() {
        let text = b"8:16 Read 1\n8:16 Write 2\n8:16 Sync 3\n8:16 Async 0\n8:16 Discard 0\n\
8:16 Total 3\n8:0 Read 4096\n8:0 Write 512\n8:0 Sync 4608\n8:0 Async 0\n8:0 Discard 0\n\
8:0 Total 4608\nTotal 4611\n";
        let mut devices = Vec::new();
        parse_blkio(text, &mut devices, true);
        let listed: Vec<_> = devices
            .iter()
            .map(|d| (d.major, d.minor, d.read_bytes, d.write_bytes))
            .collect();
        assert_eq!(listed, [(8, 16, 1, 2), (8, 0, 4096, 512)]);
        assert_eq!(total_bytes(&devices), (4097, 514));
    }

    #[test]
    fn the_recursive_file_is_chosen_where_it_exists() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(v1_file(dir.path(), V1_BYTES), dir.path().join(V1_BYTES));
        let recursive = dir.path().join(format!("{V1_BYTES}_recursive"));
        std::fs::write(&recursive, "Total 0\n").unwrap();
        assert_eq!(v1_file(dir.path(), V1_BYTES), recursive);
    }
}
