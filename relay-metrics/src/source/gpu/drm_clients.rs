//! Per-process GPU use of AMD, Intel and other DRM devices, from the `fdinfo` of every DRM file
//! descriptor of every process.
//!
//! Finding them means listing every fd of every process (Relay pays ~5 ms per global snapshot for
//! it on a 70-process machine), so [`DrmClientScanner`] runs on the GPU thread
//! ([`super::GpuSampler`]), never on the sampling path; snapshots take the latest scan, with its
//! age. A scan first looks for a DRM device in `/sys/class/drm` and walks no process when there
//! is none (on a machine without one the walk found nothing, at ~70 µs a process). A DRM fd is a character device with major number 226; its fdinfo is parsed by
//! [`super::fdinfo`]. Clients of `nouveau` and NVIDIA's own DRM driver are left out (NVML reports
//! those processes). Utilisation needs two scans: a client's counters are paired with its previous
//! reading by (pid, process start time, device, `drm-client-id`), so a reused pid or a reopened
//! device never pairs with a stranger's counters.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::Instant;

use crate::source::file::{read_once, SourceError};
use crate::source::procfs::parse::parse_stat;
use crate::source::Roots;

use super::device_selected;
use super::drm::DrmVendor;
use super::fdinfo::{parse_drm_fdinfo, utilization_percent, DrmFdinfo};

/// The major number of DRM character devices (`DRM_MAJOR`).
pub(super) const DRM_MAJOR: u32 = 226;

/// How a file descriptor is recognised as a DRM device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrmFdCheck {
    /// `stat` through `/proc/<pid>/fd/<fd>`: a character device with major [`DRM_MAJOR`]. What
    /// the host uses. Only descriptors whose path lies under `/dev/` are `stat`ed: a `stat` of a
    /// file on a FUSE mount whose daemon hangs would hang the scan, and sockets, pipes and other
    /// files cannot be DRM devices (a DRM node opened from outside `/dev` is not seen).
    DeviceNumber,
    /// The link's target names `/dev/dri/card<N>` or `/dev/dri/renderD<N>`. For fixture trees,
    /// which cannot hold device nodes; a renamed device node escapes it.
    LinkName,
}

impl DrmFdCheck {
    /// The device's minor number when `fd_link` (a `/proc/<pid>/fd/<fd>` entry) is a DRM device.
    pub fn drm_minor(self, fd_link: &Path) -> Option<u32> {
        match self {
            Self::DeviceNumber => {
                // readlink renders the path without asking the file's filesystem anything.
                let target = std::fs::read_link(fd_link).ok()?;
                if !target.starts_with("/dev/") {
                    return None;
                }
                let metadata = std::fs::metadata(fd_link).ok()?;
                if !metadata.file_type().is_char_device() {
                    return None;
                }
                drm_device_minor(metadata.rdev())
            }
            Self::LinkName => {
                let target = std::fs::read_link(fd_link).ok()?;
                let name = target.to_str()?.strip_prefix("/dev/dri/")?;
                let digits = name
                    .strip_prefix("renderD")
                    .or_else(|| name.strip_prefix("card"))?;
                if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                    return None;
                }
                digits.parse().ok()
            }
        }
    }
}

/// Whether `/sys/class/drm` (under `sys`) lists a DRM device node, `card<N>` or `renderD<N>`
/// (connectors such as `card0-DP-1` belong to a card). Asked on every scan, so a device whose
/// driver loads later is seen at the next one.
fn has_drm_device(sys: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(sys.join("class/drm")) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let name = name.as_encoded_bytes();
        let digits = name
            .strip_prefix(b"renderD")
            .or_else(|| name.strip_prefix(b"card"));
        digits.is_some_and(|d| !d.is_empty() && d.iter().all(u8::is_ascii_digit))
    })
}

/// The minor number of a DRM device number (major 226, any minor).
pub(super) fn drm_device_minor(rdev: u64) -> Option<u32> {
    (libc::major(rdev) == DRM_MAJOR).then(|| libc::minor(rdev))
}

/// One process's use of one DRM device.
#[derive(Debug, Clone, PartialEq)]
pub struct DrmProcessSample {
    /// From the driver: `amdgpu`/`radeon` → AMD, `i915`/`xe` → Intel, anything else → other.
    pub vendor: DrmVendor,
    /// `drm-pdev` (the PCI address, as the device records name it); without it the PCI address
    /// of the device node in sysfs, else `drm-minor-<N>`.
    pub identifier: String,
    /// The process.
    pub pid: u32,
    /// The process's start time (clock ticks after boot): with the pid, its identity, so a
    /// record is never attributed to a later process that got the same pid.
    pub start_time_ticks: u64,
    /// Resident memory of the process's clients on the device, `None` when any client's is unknown.
    pub memory_used_bytes: Option<u64>,
    /// Busiest engine's utilisation since the previous scan (0–100), `None` on a client's first
    /// scan, after a counter reset, or when the driver prints no engine counters.
    pub utilization_percent: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ClientKey {
    pid: u32,
    start_ticks: u64,
    device: String,
    client_id: u64,
}

#[derive(Debug)]
struct Reading {
    info: DrmFdinfo,
    vendor: DrmVendor,
    at: Instant,
}

/// Scans `/proc` for DRM clients and keeps each client's previous reading for utilisation.
#[derive(Debug)]
pub struct DrmClientScanner {
    roots: Roots,
    check: DrmFdCheck,
    selectors: Vec<String>,
    previous: HashMap<ClientKey, Reading>,
    buf: Vec<u8>,
}

impl DrmClientScanner {
    /// A scanner of the processes under `roots`, keeping devices that pass `selectors` (the
    /// `gpu.devices` list; DRM devices match by identifier only).
    pub fn new(roots: &Roots, check: DrmFdCheck, selectors: &[String]) -> Self {
        Self {
            roots: roots.clone(),
            check,
            selectors: selectors.to_vec(),
            previous: HashMap::new(),
            buf: Vec::new(),
        }
    }

    /// One scan of every process: `out` gets one record per (process, device), sorted by device
    /// and pid. Processes that exit or whose fds cannot be read (another user's, without
    /// `CAP_SYS_PTRACE`) are skipped; only an unreadable `/proc` is an error.
    pub fn scan(&mut self, out: &mut Vec<DrmProcessSample>) -> Result<(), SourceError> {
        out.clear();
        if !has_drm_device(&self.roots.sys) {
            self.previous.clear();
            return Ok(());
        }
        let proc = &self.roots.proc;
        let mut pids: Vec<u32> = std::fs::read_dir(proc)
            .map_err(|error| SourceError::io(proc, error))?
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        let mut current: HashMap<ClientKey, Reading> = HashMap::with_capacity(self.previous.len());
        let mut clients: Vec<ClientKey> = Vec::new();
        for pid in pids {
            clients.clear();
            self.scan_process(pid, &mut clients, &mut current);
            clients.sort_unstable_by(|a, b| a.device.cmp(&b.device));
            for group in clients.chunk_by(|a, b| a.device == b.device) {
                out.push(self.record(pid, group, &current));
            }
        }
        out.sort_by(|a, b| a.identifier.cmp(&b.identifier).then(a.pid.cmp(&b.pid)));
        self.previous = current;
        Ok(())
    }

    /// Reads the DRM clients of one process into `current`, their keys into `clients`.
    fn scan_process(
        &mut self,
        pid: u32,
        clients: &mut Vec<ClientKey>,
        current: &mut HashMap<ClientKey, Reading>,
    ) {
        let dir = self.roots.proc.join(pid.to_string());
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            return;
        };
        let mut start_ticks = None;
        for entry in fds.flatten() {
            let name = entry.file_name();
            let Some(fd) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            let Some(minor) = self.check.drm_minor(&entry.path()) else {
                continue;
            };
            let Ok(bytes) = read_once(&dir.join("fdinfo").join(fd), &mut self.buf) else {
                continue;
            };
            let at = Instant::now();
            let Some(info) = parse_drm_fdinfo(bytes) else {
                continue;
            };
            let Some(vendor) = vendor_of(&info.driver) else {
                continue;
            };
            let device = match &info.pdev {
                Some(pdev) => pdev.clone(),
                None => self.device_of_minor(minor),
            };
            if !device_selected(&self.selectors, &device, None) {
                continue;
            }
            if start_ticks.is_none() {
                // The start time tells a reused pid from the process seen before.
                let stat = read_once(&dir.join("stat"), &mut self.buf).ok();
                match stat.and_then(parse_stat) {
                    Some(stat) => start_ticks = Some(stat.start_time_ticks),
                    None => return,
                }
            }
            let key = ClientKey {
                pid,
                start_ticks: start_ticks.unwrap_or(0),
                device,
                client_id: info.client_id,
            };
            // Duplicated descriptors share one client: count it once.
            if current.contains_key(&key) {
                continue;
            }
            clients.push(key.clone());
            current.insert(key, Reading { info, vendor, at });
        }
    }

    /// The record of one process on one device, from its clients there (`group`, non-empty).
    fn record(
        &self,
        pid: u32,
        group: &[ClientKey],
        current: &HashMap<ClientKey, Reading>,
    ) -> DrmProcessSample {
        let readings: Vec<(&ClientKey, &Reading)> = group
            .iter()
            .filter_map(|key| Some((key, current.get(key)?)))
            .collect();
        let memory_used_bytes = readings.iter().try_fold(0u64, |sum, (_, reading)| {
            sum.checked_add(reading.info.resident_bytes?)
        });
        let pairs: Option<Vec<(&DrmFdinfo, &DrmFdinfo, u64)>> = readings
            .iter()
            .map(|(key, reading)| {
                let previous = self.previous.get(*key)?;
                let elapsed = reading.at.saturating_duration_since(previous.at);
                let elapsed_ns = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
                Some((&previous.info, &reading.info, elapsed_ns))
            })
            .collect();
        let (identifier, vendor, start_time_ticks) = match readings.first() {
            Some((key, reading)) => (key.device.clone(), reading.vendor, key.start_ticks),
            None => (String::new(), DrmVendor::Other, 0),
        };
        DrmProcessSample {
            vendor,
            identifier,
            pid,
            start_time_ticks,
            memory_used_bytes,
            utilization_percent: pairs.and_then(utilization_percent),
        }
    }

    /// The PCI address of DRM minor `minor` from sysfs, for drivers that print no `drm-pdev`.
    fn device_of_minor(&self, minor: u32) -> String {
        let link = self
            .roots
            .sys
            .join(format!("dev/char/{DRM_MAJOR}:{minor}/device"));
        std::fs::canonicalize(link)
            .ok()
            .and_then(|path| Some(path.file_name()?.to_str()?.to_string()))
            .unwrap_or_else(|| format!("drm-minor-{minor}"))
    }
}

/// The vendor a driver's clients are reported under; `None` for the drivers NVML covers.
fn vendor_of(driver: &str) -> Option<DrmVendor> {
    match driver {
        "amdgpu" | "radeon" => Some(DrmVendor::Amd),
        "i915" | "xe" => Some(DrmVendor::Intel),
        "nouveau" => None,
        _ if driver.starts_with("nvidia") => None,
        _ => Some(DrmVendor::Other),
    }
}

#[cfg(test)]
mod tests;
