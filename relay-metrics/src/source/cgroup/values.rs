//! The values of one cgroup measured one by one (the agent's per-container series, and a cgroup
//! scope's cumulative totals): the cgroup's own counters and settings, each from the cheapest
//! exact file of the hierarchy that carries its controller, read through held descriptors
//! (`pread` into one reused buffer).
//!
//! Limits are the cgroup's own settings (its `memory.max` / `memory.limit_in_bytes`, `cpu.max` /
//! CFS quota, `pids.max`), as container runtimes set them, not the minimum over its ancestors.

use super::blkio::{v1_blkio_counting, BlkioCounting};
use super::io::{parse_blkio, parse_io_stat, v1_file, DeviceCounters, V1_BYTES, V1_OPS};
use super::parse::{
    keyed_u64, parse_cpu_max, parse_limit, parse_psi, parse_u64_trimmed, parse_v1_cpu_quota,
    parse_v1_memory_limit, CpuQuota, LimitValue,
};
use super::stat::{parse_cpu_max_raw, parse_memory_stat, parse_shares, parse_v1_quota_raw};
use super::target::CgroupTarget;
use super::CgroupVersion;
use crate::snapshot::{
    CgroupTargetReport, MemoryEventCounts, TargetCpuSpec, TargetDeviceIo, TargetMemoryStat,
};
use crate::source::cgroup_iter::pass::KernelValues;
use crate::source::file::{FileKind, HeldFile, SourceError};
use crate::source::Roots;
use std::time::{Duration, Instant};

/// Pressure resources, in [`Kind::Pressure`] order.
const PRESSURE_RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    V2CpuStat,
    V1CpuacctUsage,
    V1CpuacctStat,
    V1CpuStat,
    V2CpuMax,
    V1CfsQuota,
    V1CfsPeriod,
    MemoryCurrent,
    MemoryPeak,
    MemoryLimit(CgroupVersion),
    V2MemoryEvents,
    V1MemoryFailcnt,
    V1OomControl,
    PidsCurrent,
    PidsMax,
    V2IoStat,
    V1IoBytes,
    V1IoOps,
    Pressure(usize),
    /// The cAdvisor naming's files ([`CgroupValuesReader::new`]'s `cadvisor`).
    MemoryStat(CgroupVersion),
    V2SwapCurrent,
    CpuShares(CgroupVersion),
}

#[derive(Debug)]
struct File {
    kind: Kind,
    held: HeldFile,
    /// Missing at the last try: tried again only with the settings (every [`SETTINGS_EVERY`]
    /// reads), as a controller enabled later (systemd turning `io` on in the parent's
    /// `subtree_control`) or a cgroup re-created at its path brings the file back.
    absent: bool,
}

/// Which of a cgroup's files a [`CgroupValuesReader`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileSet {
    /// A measured cgroup's values. `ticks_per_second` converts v1 `cpuacct.stat`; with
    /// `cadvisor`, also `memory.stat`, v2 `memory.swap.current` and the CPU shares or weight
    /// (what the cAdvisor naming exports and no other needs).
    Measured {
        ticks_per_second: u64,
        cadvisor: bool,
    },
    /// A cgroup scope's cumulative totals: its memory high-water mark and its storage bytes
    /// per device, which include the tasks that exited. A v1 `blkio` that does not count on
    /// every disk is not read: a sum without some disks would be too small.
    Totals,
}

/// Reads one cgroup's values into the fields of its [`CgroupTargetReport`] that come from its
/// files (CPU, memory, pids, pressure, devices, and the reason when a file cannot be read).
#[derive(Debug)]
pub(crate) struct CgroupValuesReader {
    files: Vec<File>,
    hold: bool,
    /// The cgroup has the memory controller (its `memory.*` files): a v2 directory carries a
    /// controller's files only where the controller is enabled (below an occupied cgroup none
    /// can be).
    memory_controller: bool,
    /// The hierarchy of the io file the last read parsed; `None` when it read none.
    io_version: Option<CgroupVersion>,
    ticks_per_second: u64,
    /// The v1 CFS quota, kept until its period is read.
    quota: Vec<u8>,
    /// Reads since the settings were last read, counting that one, and when it was: `None`
    /// before the first read ([`settings_due`]).
    settings_read: Option<(u64, Instant)>,
    /// The settings as last read: CPU cores, memory bytes, pids.
    settings: (Option<f64>, Option<u64>, Option<u64>),
    /// The raw CPU settings as last read (cAdvisor naming only).
    cpu_spec: Option<TargetCpuSpec>,
    /// Whether the cAdvisor naming's files are read.
    cadvisor: bool,
    /// Scratch: the devices of one read.
    devices: Vec<DeviceCounters>,
    /// The disks v1 `blkio` counts on this kernel ([`super::blkio`]): none, and its files are
    /// not read; or not all, and the others are left out of the devices. Each read then says
    /// why in `blkio_reason`.
    blkio: BlkioCounting,
    blkio_reason: Option<String>,
    /// The CPU usage and pressure values of the last read that read their files without an
    /// error: what a read that reuses them gives ([`Self::read`]'s `reuse`).
    last: Option<CpuAndPressure>,
}

/// The values of a cgroup's v1 `cpuacct` usage files and its pressure files: what the
/// unchanged-cgroup rule (`collector/targets/unchanged.rs`) lets a read reuse. v2 `cpu.stat` is
/// not among them: its CFS counters move without any task running.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) struct CpuAndPressure {
    /// Usage, user and system ns from `cpuacct` (`None` where v2 `cpu.stat` serves them).
    cpuacct: Option<[Option<u64>; 3]>,
    pressure: crate::snapshot::PressureTotals,
}

/// Settings (limits) change rarely: they are read at the first read and then every this many
/// reads, or once [`SETTINGS_MAX_AGE`] old if that comes first, through descriptors opened for
/// the read and closed after it. Files found missing are tried again at the same reads.
pub(crate) const SETTINGS_EVERY: u64 = 10;

/// The oldest the settings may be at a read: at the agent's 1 s interval [`SETTINGS_EVERY`]
/// decides, and at 10 s or slower every read reads them (a limit changed by `docker update`
/// then shows at the next snapshot, not ten snapshots later).
pub(crate) const SETTINGS_MAX_AGE: Duration = Duration::from_secs(10);

/// Whether a read at `now` reads the settings, given the reads since they were last read
/// (counting that one) and when that was.
fn settings_due(last: Option<(u64, Instant)>, now: Instant) -> bool {
    last.is_none_or(|(reads, at)| {
        reads >= SETTINGS_EVERY || now.saturating_duration_since(at) >= SETTINGS_MAX_AGE
    })
}

impl Kind {
    /// A file of [`CpuAndPressure`].
    fn is_cpu_usage_or_pressure(self) -> bool {
        matches!(
            self,
            Self::V1CpuacctUsage | Self::V1CpuacctStat | Self::Pressure(_)
        )
    }

    /// The hierarchy of an io file.
    fn io_version(self) -> Option<CgroupVersion> {
        match self {
            Self::V2IoStat => Some(CgroupVersion::V2),
            Self::V1IoBytes | Self::V1IoOps => Some(CgroupVersion::V1),
            _ => None,
        }
    }

    /// A setting rather than a counter or a level.
    fn is_setting(self) -> bool {
        matches!(
            self,
            Self::V2CpuMax
                | Self::V1CfsQuota
                | Self::V1CfsPeriod
                | Self::MemoryLimit(_)
                | Self::PidsMax
                | Self::CpuShares(_)
        )
    }
}

impl CgroupValuesReader {
    /// The files of `target` in `set`. With `hold`, their descriptors stay open between reads;
    /// otherwise each read opens and closes them (when the open-file budget is spent). `roots`
    /// tell which disks saw I/O (where v1 `blkio` may not count).
    pub(crate) fn new(target: &CgroupTarget, hold: bool, set: FileSet, roots: &Roots) -> Self {
        let blkio = match target.controller_dir("blkio") {
            Some((CgroupVersion::V1, dir)) => v1_blkio_counting(&dir.mount_point, roots),
            _ => BlkioCounting::All,
        };
        // The order is the order of the reads: a v1 CFS quota comes before its period.
        let mut files = Files(Vec::with_capacity(20));
        let (ticks_per_second, cadvisor) = match set {
            FileSet::Measured {
                ticks_per_second,
                cadvisor,
            } => {
                files.cpu(target);
                if cadvisor {
                    files.cadvisor(target);
                }
                files.memory(target);
                files.pids(target);
                files.io(target, blkio != BlkioCounting::Nothing, true);
                files.pressure(target);
                (ticks_per_second, cadvisor)
            }
            FileSet::Totals => {
                files.memory_peak(target);
                files.io(target, blkio == BlkioCounting::All, false);
                (1, false)
            }
        };
        let memory_controller = match target.controller_dir("memory") {
            Some((CgroupVersion::V1, _)) => true,
            Some((CgroupVersion::V2, dir)) => dir.dir.join("memory.current").exists(),
            None => false,
        };
        Self {
            files: files.0,
            hold,
            memory_controller,
            io_version: None,
            ticks_per_second: ticks_per_second.max(1),
            quota: Vec::new(),
            settings_read: None,
            settings: (None, None, None),
            cpu_spec: None,
            cadvisor,
            devices: Vec::new(),
            blkio_reason: blkio.reason(),
            blkio,
            last: None,
        }
    }

    /// Whether the cgroup has the memory controller (then a missing high-water mark has
    /// another reason than its absence).
    pub(crate) fn has_memory_controller(&self) -> bool {
        self.memory_controller
    }

    /// Whether the cgroup's storage bytes are counted on every disk: false for a v1 `blkio`
    /// that counts nothing, or not on every disk, on this kernel ([`super::BLKIO_UNCOUNTED`]
    /// says why).
    pub(crate) fn counts_every_disk(&self) -> bool {
        self.blkio == BlkioCounting::All
    }

    /// The hierarchy of the io file (`io.stat`, `blkio`) the last read parsed: `None` when it
    /// read none (no such file, or its read failed).
    pub(crate) fn io_version(&self) -> Option<CgroupVersion> {
        self.io_version
    }

    /// The CPU usage and pressure values of the last read that read their files without an
    /// error.
    pub(crate) fn last_read(&self) -> Option<CpuAndPressure> {
        self.last
    }

    /// The CPU usage and pressure values a reusing read would give now; `None` when it would
    /// read them (no error-free read yet) or has none to skip.
    pub(crate) fn reusable(&self) -> Option<CpuAndPressure> {
        let has_files = self
            .files
            .iter()
            .any(|f| !f.absent && f.kind.is_cpu_usage_or_pressure());
        self.last.filter(|_| has_files)
    }

    /// Descriptors this reader holds open between reads.
    pub(crate) fn held(&self) -> usize {
        if self.hold {
            self.files
                .iter()
                .filter(|f| !f.absent && !f.kind.is_setting())
                .count()
        } else {
            0
        }
    }

    /// Reads every file into `out`: its file values are reset first (settings kept between
    /// their reads); its path, labels and the values of other sources are left as they are.
    /// With `reuse` (the cgroup is unchanged, and [`Self::reusable`] gave values), the CPU
    /// usage and pressure files are not read: their values are those of the last read. A file
    /// whose every value `kernel` (the cgroup's values from the cgroup iterator, each found
    /// equal to its file) holds is not read either: those values are taken instead.
    pub(crate) fn read(
        &mut self,
        buf: &mut Vec<u8>,
        out: &mut CgroupTargetReport,
        reuse: bool,
        kernel: Option<&KernelValues>,
    ) {
        let now = Instant::now();
        let settings = settings_due(self.settings_read, now);
        self.settings_read = match self.settings_read {
            Some((reads, at)) if !settings => Some((reads + 1, at)),
            _ => Some((1, now)),
        };
        self.reset(out, settings);
        let reused = self.reusable().filter(|_| reuse);
        let ticks_per_second = self.ticks_per_second;
        self.quota.clear();
        self.devices.clear();
        self.io_version = None;
        let mut failed = false;
        for file in &mut self.files {
            // Settings and files found missing are read every SETTINGS_EVERY reads.
            if ((file.absent || file.kind.is_setting()) && !settings)
                || (reused.is_some() && file.kind.is_cpu_usage_or_pressure())
            {
                continue;
            }
            if kernel.is_some_and(|kernel| store_served(file.kind, kernel, out)) {
                continue;
            }
            let Some(bytes) = read_file(file, self.hold, buf, &mut out.reason) else {
                failed |= file.kind.is_cpu_usage_or_pressure();
                continue;
            };
            self.io_version = file.kind.io_version().or(self.io_version);
            let parsed = Parsed {
                out: &mut *out,
                quota: &mut self.quota,
                devices: &mut self.devices,
                ticks_per_second,
            };
            parsed.store(file.kind, bytes);
        }
        if settings {
            self.settings = (out.cpu_limit_cores, out.memory_limit_bytes, out.pids_limit);
            self.cpu_spec = out.cpu_spec;
        }
        match reused {
            Some(values) => values.write(out),
            None => self.last = (!failed).then(|| self.cpu_and_pressure(out)),
        }
        let blkio = &self.blkio;
        self.devices.retain(|d| blkio.counts(d.major, d.minor));
        write_devices(&self.devices, &mut out.devices);
        if out.reason.is_none() {
            out.reason.clone_from(&self.blkio_reason);
        }
    }

    /// The CPU usage and pressure values of a read into `out`.
    fn cpu_and_pressure(&self, out: &CgroupTargetReport) -> CpuAndPressure {
        let cpuacct = self
            .files
            .iter()
            .any(|f| f.kind == Kind::V1CpuacctUsage && !f.absent);
        CpuAndPressure {
            cpuacct: cpuacct.then_some([out.cpu_usage_ns, out.cpu_user_ns, out.cpu_system_ns]),
            pressure: out.pressure,
        }
    }

    /// Resets the file values of `out`, keeping its path, labels, the values of other sources
    /// and, between the reads of the settings, the settings as last read.
    fn reset(&self, out: &mut CgroupTargetReport, settings: bool) {
        let devices = std::mem::take(&mut out.devices);
        *out = CgroupTargetReport {
            cgroup: std::mem::take(&mut out.cgroup),
            labels: std::mem::take(&mut out.labels),
            processes: out.processes.take(),
            gpus: out.gpus.take(),
            kernel_events: out.kernel_events.take(),
            devices,
            ..CgroupTargetReport::default()
        };
        if !settings {
            (out.cpu_limit_cores, out.memory_limit_bytes, out.pids_limit) = self.settings;
            out.cpu_spec = self.cpu_spec;
        } else if self.cadvisor {
            out.cpu_spec = Some(TargetCpuSpec::default());
        }
        if self.cadvisor {
            out.memory_stat = Some(TargetMemoryStat::default());
        }
    }
}

impl CpuAndPressure {
    fn write(self, out: &mut CgroupTargetReport) {
        if let Some([usage_ns, user_ns, system_ns]) = self.cpuacct {
            out.cpu_usage_ns = usage_ns;
            out.cpu_user_ns = user_ns;
            out.cpu_system_ns = system_ns;
        }
        out.pressure = self.pressure;
    }
}

/// The files of one cgroup, listed controller by controller.
struct Files(Vec<File>);

impl Files {
    fn add(&mut self, dir: &std::path::Path, name: &str, kind: Kind) {
        self.add_path(dir.join(name), kind);
    }

    fn add_path(&mut self, path: std::path::PathBuf, kind: Kind) {
        self.0.push(File {
            kind,
            held: HeldFile::new(path, FileKind::Whole),
            absent: false,
        });
    }

    /// CPU time (v1 `cpuacct`, else v2 `cpu.stat`), the CFS counters and the quota.
    fn cpu(&mut self, target: &CgroupTarget) {
        match target.controller_dir("cpuacct") {
            Some((CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "cpuacct.usage", Kind::V1CpuacctUsage);
                self.add(&dir.dir, "cpuacct.stat", Kind::V1CpuacctStat);
            }
            _ => {
                if let Some((CgroupVersion::V2, dir)) = target.controller_dir("cpu") {
                    self.add(&dir.dir, "cpu.stat", Kind::V2CpuStat);
                }
            }
        }
        match target.controller_dir("cpu") {
            Some((CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "cpu.stat", Kind::V1CpuStat);
                self.add(&dir.dir, "cpu.cfs_quota_us", Kind::V1CfsQuota);
                self.add(&dir.dir, "cpu.cfs_period_us", Kind::V1CfsPeriod);
            }
            Some((CgroupVersion::V2, dir)) => self.add(&dir.dir, "cpu.max", Kind::V2CpuMax),
            None => {}
        }
    }

    /// What the cAdvisor naming exports and no other needs: the CPU shares or weight,
    /// `memory.stat` and v2 `memory.swap.current`.
    fn cadvisor(&mut self, target: &CgroupTarget) {
        match target.controller_dir("cpu") {
            Some((CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "cpu.shares", Kind::CpuShares(CgroupVersion::V1));
            }
            Some((CgroupVersion::V2, dir)) => {
                self.add(&dir.dir, "cpu.weight", Kind::CpuShares(CgroupVersion::V2));
            }
            None => {}
        }
        if let Some((version, dir)) = target.controller_dir("memory") {
            self.add(&dir.dir, "memory.stat", Kind::MemoryStat(version));
            if version == CgroupVersion::V2 {
                self.add(&dir.dir, "memory.swap.current", Kind::V2SwapCurrent);
            }
        }
    }

    /// Memory in use, its peak and limit, and the limit's events.
    fn memory(&mut self, target: &CgroupTarget) {
        match target.controller_dir("memory") {
            Some((CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "memory.usage_in_bytes", Kind::MemoryCurrent);
                self.memory_peak(target);
                let limit = Kind::MemoryLimit(CgroupVersion::V1);
                self.add(&dir.dir, "memory.limit_in_bytes", limit);
                self.add(&dir.dir, "memory.failcnt", Kind::V1MemoryFailcnt);
                self.add(&dir.dir, "memory.oom_control", Kind::V1OomControl);
            }
            Some((CgroupVersion::V2, dir)) => {
                self.add(&dir.dir, "memory.current", Kind::MemoryCurrent);
                self.memory_peak(target);
                let limit = Kind::MemoryLimit(CgroupVersion::V2);
                self.add(&dir.dir, "memory.max", limit);
                self.add(&dir.dir, "memory.events", Kind::V2MemoryEvents);
            }
            None => {}
        }
    }

    /// The memory high-water mark.
    fn memory_peak(&mut self, target: &CgroupTarget) {
        match target.controller_dir("memory") {
            Some((CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "memory.max_usage_in_bytes", Kind::MemoryPeak);
            }
            Some((CgroupVersion::V2, dir)) => self.add(&dir.dir, "memory.peak", Kind::MemoryPeak),
            None => {}
        }
    }

    /// The pids count and limit.
    fn pids(&mut self, target: &CgroupTarget) {
        if let Some((_, dir)) = target.controller_dir("pids") {
            self.add(&dir.dir, "pids.current", Kind::PidsCurrent);
            self.add(&dir.dir, "pids.max", Kind::PidsMax);
        }
    }

    /// The bytes (and with `operations` the operations) per block device; v1 `blkio`'s only
    /// where `blkio_counts`.
    fn io(&mut self, target: &CgroupTarget, blkio_counts: bool, operations: bool) {
        match target.controller_dir("blkio") {
            Some((CgroupVersion::V1, _)) if !blkio_counts => {}
            Some((CgroupVersion::V1, dir)) => {
                self.add_path(v1_file(&dir.dir, V1_BYTES), Kind::V1IoBytes);
                if operations {
                    self.add_path(v1_file(&dir.dir, V1_OPS), Kind::V1IoOps);
                }
            }
            _ => {
                if let Some((CgroupVersion::V2, dir)) = target.controller_dir("io") {
                    self.add(&dir.dir, "io.stat", Kind::V2IoStat);
                }
            }
        }
    }

    /// PSI files exist in every cgroup of the unified hierarchy, controllers or not.
    fn pressure(&mut self, target: &CgroupTarget) {
        if let Some(dir) = &target.v2 {
            for (index, resource) in PRESSURE_RESOURCES.iter().enumerate() {
                let name = format!("{resource}.pressure");
                self.add(&dir.dir, &name, Kind::Pressure(index));
            }
        }
    }
}

/// Reads `file` into `buf`, closing its descriptor after the read unless it is held: `None`
/// when the read failed, with the first unexpected failure said in `reason`.
fn read_file<'b>(
    file: &mut File,
    hold: bool,
    buf: &'b mut Vec<u8>,
    reason: &mut Option<String>,
) -> Option<&'b [u8]> {
    let result = file.held.read(buf);
    if !hold || file.kind.is_setting() {
        file.held.close();
    }
    match result {
        Ok(bytes) => {
            file.absent = false;
            Some(bytes)
        }
        Err(error) => {
            match errno(&error) {
                // Absent file (an older kernel, a controller not enabled): tried again with
                // the settings. A removed cgroup (ENODEV through a held descriptor) leaves the
                // next walk, which drops this reader.
                Some(libc::ENOENT) => file.absent = true,
                Some(libc::ENODEV) => {}
                _ => {
                    if reason.is_none() {
                        *reason = Some(error.to_string());
                    }
                }
            }
            None
        }
    }
}

/// Where one read's files are parsed to.
struct Parsed<'r> {
    out: &'r mut CgroupTargetReport,
    /// The v1 CFS quota, kept until its period is read.
    quota: &'r mut Vec<u8>,
    devices: &'r mut Vec<DeviceCounters>,
    ticks_per_second: u64,
}

impl Parsed<'_> {
    /// Parses the content of a file of `kind` into its fields.
    fn store(self, kind: Kind, bytes: &[u8]) {
        let out = self.out;
        match kind {
            Kind::V2CpuStat => v2_cpu_stat(bytes, out),
            Kind::V1CpuacctUsage => out.cpu_usage_ns = parse_u64_trimmed(bytes),
            Kind::V1CpuacctStat => {
                let ns_per_tick = 1_000_000_000 / self.ticks_per_second;
                let ns = |key: &[u8]| {
                    keyed_u64(bytes, key).and_then(|ticks| ticks.checked_mul(ns_per_tick))
                };
                out.cpu_user_ns = ns(b"user");
                out.cpu_system_ns = ns(b"system");
            }
            Kind::V1CpuStat => {
                out.cpu_periods = keyed_u64(bytes, b"nr_periods");
                out.cpu_throttled_periods = keyed_u64(bytes, b"nr_throttled");
                out.cpu_throttled_ns = keyed_u64(bytes, b"throttled_time");
            }
            Kind::V2CpuMax => {
                out.cpu_limit_cores = cores(parse_cpu_max(bytes));
                if let Some(spec) = &mut out.cpu_spec {
                    parse_cpu_max_raw(bytes, spec);
                }
            }
            Kind::V1CfsQuota => self.quota.extend_from_slice(bytes),
            Kind::V1CfsPeriod => v1_cfs_period(self.quota, bytes, out),
            Kind::CpuShares(version) => {
                if let Some(spec) = &mut out.cpu_spec {
                    spec.shares = parse_shares(bytes, version);
                }
            }
            Kind::MemoryStat(version) => {
                if let Some(stat) = &mut out.memory_stat {
                    parse_memory_stat(bytes, version, stat);
                }
            }
            Kind::V2SwapCurrent => {
                if let Some(stat) = &mut out.memory_stat {
                    stat.swap_bytes = parse_u64_trimmed(bytes);
                }
            }
            Kind::MemoryCurrent => out.memory_current_bytes = parse_u64_trimmed(bytes),
            Kind::MemoryPeak => out.memory_peak_bytes = parse_u64_trimmed(bytes),
            Kind::MemoryLimit(version) => {
                let parsed = match version {
                    CgroupVersion::V1 => parse_v1_memory_limit(bytes),
                    CgroupVersion::V2 => parse_limit(bytes),
                };
                out.memory_limit_bytes = limit(parsed);
            }
            Kind::V2MemoryEvents => {
                out.memory_events =
                    MemoryEventCounts::from_names(|name| keyed_u64(bytes, name.as_bytes()));
            }
            Kind::V1MemoryFailcnt => out.memory_events.max = parse_u64_trimmed(bytes),
            Kind::V1OomControl => {
                let kills = keyed_u64(bytes, b"oom_kill");
                out.memory_events.oom = kills;
                out.memory_events.oom_kill = kills;
            }
            Kind::PidsCurrent => out.pids_current = parse_u64_trimmed(bytes),
            Kind::PidsMax => out.pids_limit = limit(parse_limit(bytes)),
            Kind::V2IoStat => parse_io_stat(bytes, self.devices),
            Kind::V1IoBytes => parse_blkio(bytes, self.devices, true),
            Kind::V1IoOps => parse_blkio(bytes, self.devices, false),
            Kind::Pressure(index) => pressure(index, bytes, out),
        }
    }
}

/// Stores the values of a file of `kind` from `kernel` where it holds them all: true, and the
/// file is left unread.
fn store_served(kind: Kind, kernel: &KernelValues, out: &mut CgroupTargetReport) -> bool {
    let set = |field: &mut Option<u64>, value: Option<u64>| {
        if value.is_some() {
            *field = value;
        }
        value.is_some()
    };
    match kind {
        Kind::MemoryCurrent => set(&mut out.memory_current_bytes, kernel.memory_usage_bytes),
        Kind::MemoryPeak => set(&mut out.memory_peak_bytes, kernel.memory_peak_bytes),
        Kind::V1MemoryFailcnt => set(&mut out.memory_events.max, kernel.memory_failcnt),
        Kind::V1OomControl => {
            set(&mut out.memory_events.oom, kernel.oom_kill);
            set(&mut out.memory_events.oom_kill, kernel.oom_kill)
        }
        Kind::PidsCurrent => set(&mut out.pids_current, kernel.pids_current),
        Kind::V1CpuStat => match kernel.cfs {
            Some((periods, throttled, throttled_ns)) => {
                out.cpu_periods = Some(periods);
                out.cpu_throttled_periods = Some(throttled);
                out.cpu_throttled_ns = Some(throttled_ns);
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// v2 `cpu.stat`: run time, user and system time (µs, kept in ns) and the CFS counters.
fn v2_cpu_stat(bytes: &[u8], out: &mut CgroupTargetReport) {
    let us = |key: &[u8]| keyed_u64(bytes, key).and_then(|v| v.checked_mul(1000));
    out.cpu_usage_ns = us(b"usage_usec");
    out.cpu_user_ns = us(b"user_usec");
    out.cpu_system_ns = us(b"system_usec");
    out.cpu_periods = keyed_u64(bytes, b"nr_periods");
    out.cpu_throttled_periods = keyed_u64(bytes, b"nr_throttled");
    out.cpu_throttled_ns = us(b"throttled_usec");
}

/// v1 `cpu.cfs_period_us`, with the quota read before it: the CPU limit, and the raw settings.
fn v1_cfs_period(quota: &[u8], bytes: &[u8], out: &mut CgroupTargetReport) {
    if !quota.is_empty() {
        out.cpu_limit_cores = cores(parse_v1_cpu_quota(quota, bytes));
    }
    if let Some(spec) = &mut out.cpu_spec {
        spec.quota_us = parse_v1_quota_raw(quota);
        spec.period_us = parse_u64_trimmed(bytes);
    }
}

/// `<resource>.pressure` of [`PRESSURE_RESOURCES`]`[index]`: the `some` and `full` totals.
fn pressure(index: usize, bytes: &[u8], out: &mut CgroupTargetReport) {
    let totals = parse_psi(bytes);
    let pressure = &mut out.pressure;
    let (some, full) = match index {
        0 => (&mut pressure.cpu_some_usec, &mut pressure.cpu_full_usec),
        1 => (
            &mut pressure.memory_some_usec,
            &mut pressure.memory_full_usec,
        ),
        _ => (&mut pressure.io_some_usec, &mut pressure.io_full_usec),
    };
    (*some, *full) = (totals.some_usec, totals.full_usec);
}

/// The devices of a read into the report's list, reusing its entries (and their text).
fn write_devices(devices: &[DeviceCounters], out: &mut Vec<TargetDeviceIo>) {
    out.truncate(devices.len());
    for (at, device) in devices.iter().enumerate() {
        if at == out.len() {
            out.push(TargetDeviceIo::default());
        }
        let entry = &mut out[at];
        entry.device.clear();
        use std::fmt::Write;
        let _ = write!(entry.device, "{}:{}", device.major, device.minor);
        entry.read_bytes = device.read_bytes;
        entry.write_bytes = device.write_bytes;
        entry.read_operations = device.read_ops;
        entry.write_operations = device.write_ops;
    }
}

fn errno(error: &SourceError) -> Option<i32> {
    match error {
        SourceError::Io { source, .. } => source.raw_os_error(),
        SourceError::Malformed { .. } => None,
    }
}

fn cores(quota: Option<CpuQuota>) -> Option<f64> {
    match quota {
        Some(CpuQuota::LogicalProcessors(cores)) => Some(cores),
        _ => None,
    }
}

fn limit(value: Option<LimitValue>) -> Option<u64> {
    match value {
        Some(LimitValue::Value(value)) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    #[test]
    fn settings_are_due_every_tenth_read_or_once_ten_seconds_old() {
        let start = Instant::now();
        assert!(settings_due(None, start), "the first read");
        let young = start + SETTINGS_MAX_AGE - Duration::from_nanos(1);
        assert!(!settings_due(Some((1, start)), young));
        assert!(!settings_due(Some((SETTINGS_EVERY - 1, start)), young));
        assert!(settings_due(Some((SETTINGS_EVERY, start)), young));
        assert!(settings_due(Some((1, start)), start + SETTINGS_MAX_AGE));
    }
}
