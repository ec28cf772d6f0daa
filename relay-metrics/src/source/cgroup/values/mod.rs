//! The one reader of a cgroup's files, for every cgroup the collector reads: a measured cgroup
//! (the agent's per-container series), a cgroup scope's cumulative totals, and the scope's own
//! values (Relay's cgroup fields). Each value comes from the cheapest exact file of the
//! hierarchy that carries its controller, read through held descriptors (`pread` into one
//! reused buffer) and parsed in place.
//!
//! A measured cgroup's limits are its own settings (its `memory.max` / `memory.limit_in_bytes`,
//! `cpu.max` / CFS quota, `pids.max`), as container runtimes set them. The scope's are
//! effective, as Relay's: the minimum over the cgroup and its ancestors up to the mount, and for
//! the CPU also the CPUs of its cpuset.

mod files;
mod store;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::blkio::{v1_blkio_counting, BlkioCounting};
use super::io::DeviceCounters;
use super::sample::CgroupFields;
use super::target::CgroupTarget;
use super::{CgroupError, CgroupVersion};
use crate::snapshot::{CgroupTargetReport, TargetCpuSpec, TargetMemoryStat};
use crate::source::cgroup_iter::pass::KernelValues;
use crate::source::file::SourceError;
use crate::source::Roots;
use files::{File, Files, Group, Kind};
use store::{store_served, write_devices, Limits, Parsed};

/// What a measured cgroup's reader reads besides its counters and settings: `ticks_per_second`
/// converts v1 `cpuacct.stat`; with `cadvisor`, also `memory.stat`, v2 `memory.swap.current`
/// and the CPU shares or weight (what the cAdvisor naming exports and no other needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MeasuredFiles {
    pub ticks_per_second: u64,
    pub cadvisor: bool,
}

/// How often settings (limits) are read: at the first read, then once `every` reads have passed
/// or once `max_age` old, whichever comes first. Files found missing are tried again at the
/// same reads. Between them a read gives the settings as last read.
#[derive(Debug, Clone, Copy)]
struct Cadence {
    every: u64,
    max_age: Duration,
}

/// A measured cgroup's: at the agent's 1 s interval one read in ten reads them, and at 10 s or
/// slower every read does (a limit changed by `docker update` shows at the next snapshot).
const MEASURED_SETTINGS: Cadence = Cadence {
    every: SETTINGS_EVERY,
    max_age: Duration::from_secs(10),
};

/// The scope's: Relay reads its limits at every poll, and its polls are 200 ms or more apart,
/// so at those intervals every read still reads them. Below it (`run` samples every
/// millisecond) the limit levels are most of what a read would add, for values a person changes
/// by hand: a change shows within [`LIMITS_MAX_AGE`].
const SCOPE_SETTINGS: Cadence = Cadence {
    every: u64::MAX,
    max_age: LIMITS_MAX_AGE,
};

/// How many reads of a measured cgroup at most go by between two reads of its settings.
pub(crate) const SETTINGS_EVERY: u64 = 10;

/// How old the scope's limits may be at a read.
pub(crate) const LIMITS_MAX_AGE: Duration = Duration::from_millis(100);

impl Cadence {
    /// Whether a read at `now` reads the settings, given the reads since they were last read
    /// (counting that one) and when that was.
    fn due(self, last: Option<(u64, Instant)>, now: Instant) -> bool {
        last.is_none_or(|(reads, at)| {
            reads >= self.every || now.saturating_duration_since(at) >= self.max_age
        })
    }
}

/// The scope's values that a [`CgroupTargetReport`] has no field for.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ScopeValues {
    /// The hierarchy each value group came from; `None` when no file of the group was read.
    pub versions: GroupVersions,
    /// v1 `memory.oom_control under_oom`.
    pub under_oom: Option<bool>,
    /// `pids.events max`: forks refused because a limit was reached.
    pub pids_max_events: Option<u64>,
}

/// The hierarchy of each value group's files, as read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GroupVersions {
    pub usage: Option<CgroupVersion>,
    pub throttling: Option<CgroupVersion>,
    pub cpu_limit: Option<CgroupVersion>,
    pub memory: Option<CgroupVersion>,
    pub pids: Option<CgroupVersion>,
    pub pressure: Option<CgroupVersion>,
}

impl GroupVersions {
    fn saw(&mut self, group: Group, version: CgroupVersion) {
        let slots: &mut [&mut Option<CgroupVersion>] = match group {
            Group::Usage => &mut [&mut self.usage],
            Group::Throttling => &mut [&mut self.throttling],
            Group::UsageAndThrottling => &mut [&mut self.usage, &mut self.throttling],
            Group::CpuLimit => &mut [&mut self.cpu_limit],
            Group::Memory => &mut [&mut self.memory],
            Group::Pids => &mut [&mut self.pids],
            Group::Pressure => &mut [&mut self.pressure],
            Group::Other => &mut [],
        };
        for slot in slots {
            slot.get_or_insert(version);
        }
    }

    fn or(self, other: Self) -> Self {
        Self {
            usage: self.usage.or(other.usage),
            throttling: self.throttling.or(other.throttling),
            cpu_limit: self.cpu_limit.or(other.cpu_limit),
            memory: self.memory.or(other.memory),
            pids: self.pids.or(other.pids),
            pressure: self.pressure.or(other.pressure),
        }
    }

    fn any(&self) -> bool {
        *self != Self::default()
    }
}

/// Reads one cgroup's values into the fields of its [`CgroupTargetReport`] that come from its
/// files (CPU, memory, pids, pressure, devices, and the reason when a file cannot be read).
#[derive(Debug)]
pub(crate) struct CgroupValuesReader {
    files: Vec<File>,
    hold: bool,
    /// With `hold`, the settings' descriptors stay open too. They are read one time in ten,
    /// but an open costs a path walk through the cgroup filesystem, several times the read.
    hold_settings: bool,
    cadence: Cadence,
    /// The cgroup's directories, whose removal makes a read of the scope an error.
    leaves: Vec<PathBuf>,
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
    /// before the first read ([`Cadence::due`]).
    settings_read: Option<(u64, Instant)>,
    /// The settings as last read: CPU cores, memory bytes, pids, and the versions of their
    /// groups.
    settings: (Option<f64>, Option<u64>, Option<u64>),
    settings_versions: GroupVersions,
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

/// What one pass over the files found, besides the values.
#[derive(Debug, Default)]
struct Pass {
    /// A CPU usage or pressure file that exists could not be read.
    failed_usage: bool,
    /// A file gave no data (missing, removed or unreadable): the scope then checks that its
    /// cgroup still exists.
    vanished: bool,
    scope: ScopeValues,
}

impl CgroupValuesReader {
    /// A measured cgroup's reader: its own counters and settings, and the files `set` adds.
    /// With `hold`, their descriptors stay open between reads; otherwise each read opens and
    /// closes them (when the open-file budget is spent). `roots` tell which disks saw I/O
    /// (where v1 `blkio` may not count).
    pub(crate) fn measured(
        target: &CgroupTarget,
        hold: bool,
        set: MeasuredFiles,
        roots: &Roots,
    ) -> Self {
        let blkio = blkio_counting(target, roots);
        let files = Files::measured(target, set.cadvisor, blkio != BlkioCounting::Nothing);
        let mut reader = Self::with_files(target, files, hold, MEASURED_SETTINGS);
        reader.ticks_per_second = set.ticks_per_second.max(1);
        reader.cadvisor = set.cadvisor;
        reader.blkio_reason = blkio.reason();
        reader.blkio = blkio;
        reader
    }

    /// The scope's values in `want` (Relay's cgroup fields and their sources), all held open:
    /// effective limits, the cpuset, `pids.events`, v1's `under_oom` and exact user and system
    /// time, each group with the hierarchy it came from ([`Self::read_scope`]). With `totals`
    /// (the `roots` that tell which disks saw I/O), also the cumulative totals' files: the
    /// memory high-water mark and the storage bytes per device, which include the tasks that
    /// exited (a v1 `blkio` that does not count on every disk is not read: a sum without some
    /// disks would be too small).
    pub(crate) fn scope(target: &CgroupTarget, want: CgroupFields, totals: Option<&Roots>) -> Self {
        let blkio = totals.map_or(BlkioCounting::All, |roots| blkio_counting(target, roots));
        let totals = totals.map(|_| blkio == BlkioCounting::All);
        let files = Files::scope(target, want, totals);
        let mut reader = Self::with_files(target, files, true, SCOPE_SETTINGS);
        reader.hold_settings = true;
        if want != CgroupFields::NONE || totals.is_some() {
            let v1 = target.v1.iter().map(|d| d.dir.dir.clone());
            reader.leaves = target.v2.iter().map(|d| d.dir.clone()).chain(v1).collect();
        }
        reader.blkio_reason = blkio.reason();
        reader.blkio = blkio;
        reader
    }

    fn with_files(target: &CgroupTarget, files: Files, hold: bool, cadence: Cadence) -> Self {
        let memory_controller = match target.controller_dir("memory") {
            Some((CgroupVersion::V1, _)) => true,
            Some((CgroupVersion::V2, dir)) => dir.dir.join("memory.current").exists(),
            None => false,
        };
        Self {
            files: files.0,
            hold,
            hold_settings: false,
            cadence,
            leaves: Vec::new(),
            memory_controller,
            io_version: None,
            ticks_per_second: 1,
            quota: Vec::new(),
            settings_read: None,
            settings: (None, None, None),
            settings_versions: GroupVersions::default(),
            cpu_spec: None,
            cadvisor: false,
            devices: Vec::new(),
            blkio: BlkioCounting::All,
            blkio_reason: None,
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

    /// Whether it holds its files open between reads (else it opens them at every read).
    pub(crate) fn holds_files(&self) -> bool {
        self.hold
    }

    /// Descriptors this reader holds open between reads.
    pub(crate) fn held(&self) -> usize {
        if self.hold {
            self.files
                .iter()
                .filter(|f| !f.absent && (self.hold_settings || !f.kind.is_setting()))
                .count()
        } else {
            0
        }
    }

    /// Whether a reader that holds its files holds its settings' too; when it stops, their
    /// descriptors are closed at once.
    pub(crate) fn hold_settings(&mut self, hold: bool) {
        if self.hold_settings && !hold {
            for file in self.files.iter_mut().filter(|f| f.kind.is_setting()) {
                file.held.close();
            }
        }
        self.hold_settings = hold && self.hold;
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
        let reused = self.reusable().filter(|_| reuse);
        let pass = self.read_files(buf, out, reused.is_some(), kernel);
        match reused {
            Some(values) => values.write(out),
            None => self.last = (!pass.failed_usage).then(|| self.cpu_and_pressure(out)),
        }
        self.write_devices(out);
    }

    /// The devices of the pass into `out`, those v1 `blkio` does not count on left out.
    fn write_devices(&mut self, out: &mut CgroupTargetReport) {
        let blkio = &self.blkio;
        self.devices.retain(|d| blkio.counts(d.major, d.minor));
        write_devices(&self.devices, &mut out.devices);
        if out.reason.is_none() {
            out.reason.clone_from(&self.blkio_reason);
        }
    }

    /// Reads a [`Self::scope`] reader's files into `out` (its CPU, memory, pids and pressure fields, the
    /// limits effective) and returns the values `out` has no field for. Missing files and
    /// invalid contents give `None` values; a removed cgroup is [`CgroupError::Gone`].
    pub(crate) fn read_scope(
        &mut self,
        buf: &mut Vec<u8>,
        out: &mut CgroupTargetReport,
    ) -> Result<ScopeValues, CgroupError> {
        let pass = self.read_files(buf, out, false, None);
        self.write_devices(out);
        // Files found missing are not read between the settings' reads, so a removed cgroup
        // whose files were all missing would read as "all None" until then.
        if pass.vanished || !pass.scope.versions.any() {
            if let Some(gone) = self.leaves.iter().find(|leaf| !leaf.exists()) {
                self.settings_read = None;
                return Err(CgroupError::Gone { path: gone.clone() });
            }
        }
        Ok(pass.scope)
    }

    /// One pass over the files into `out`; with `skip_usage` the CPU usage and pressure files
    /// are left unread.
    fn read_files(
        &mut self,
        buf: &mut Vec<u8>,
        out: &mut CgroupTargetReport,
        skip_usage: bool,
        kernel: Option<&KernelValues>,
    ) -> Pass {
        let now = Instant::now();
        let settings = self.cadence.due(self.settings_read, now);
        self.settings_read = match self.settings_read {
            Some((reads, at)) if !settings => Some((reads + 1, at)),
            _ => Some((1, now)),
        };
        self.reset(out, settings);
        self.devices.clear();
        self.io_version = None;
        let mut pass = Pass::default();
        let mut limits = Limits::default();
        let mut settings_versions = GroupVersions::default();
        let mut cpuset_absent = false;
        for file in &mut self.files {
            let setting = file.kind.is_setting();
            if ((file.absent || setting) && !settings)
                || (skip_usage && file.kind.is_cpu_usage_or_pressure())
                || (file.kind == Kind::Cpuset { fallback: true } && !cpuset_absent)
            {
                continue;
            }
            if kernel.is_some_and(|kernel| store_served(file, kernel, out, &mut limits)) {
                continue;
            }
            if file.kind == Kind::V1CfsQuota {
                self.quota.clear();
            }
            let hold = self.hold && (self.hold_settings || !setting);
            let bytes = match read_file(file, hold, buf, &mut out.reason) {
                Read::Data(bytes) => bytes,
                Read::Missing { absent } => {
                    pass.vanished = true;
                    // A missing file reads as missing again until the settings' next read.
                    pass.failed_usage |= !absent && file.kind.is_cpu_usage_or_pressure();
                    cpuset_absent |= absent && file.kind == Kind::Cpuset { fallback: false };
                    // A level without the file does not bound the limit; a CFS quota without
                    // its period, or a file unreadable, leaves the limit unknown.
                    let unpaired = file.kind == Kind::V1CfsPeriod && !self.quota.is_empty();
                    if setting && (!absent || unpaired) {
                        limits.poison(file.kind);
                    }
                    continue;
                }
            };
            let versions = match setting {
                true => &mut settings_versions,
                false => &mut pass.scope.versions,
            };
            versions.saw(file.kind.group(), file.version);
            self.io_version = file.kind.io_version().or(self.io_version);
            let parsed = Parsed {
                out: &mut *out,
                scope: &mut pass.scope,
                limits: &mut limits,
                quota: &mut self.quota,
                devices: &mut self.devices,
                ticks_per_second: self.ticks_per_second,
            };
            parsed.store(file, bytes);
        }
        if settings {
            limits.write(out);
            self.settings = (out.cpu_limit_cores, out.memory_limit_bytes, out.pids_limit);
            self.settings_versions = settings_versions;
            self.cpu_spec = out.cpu_spec;
        }
        pass.scope.versions = pass.scope.versions.or(self.settings_versions);
        pass
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

/// The disks v1 `blkio` counts on for `target` (all where its io controller is on v2).
fn blkio_counting(target: &CgroupTarget, roots: &Roots) -> BlkioCounting {
    match target.controller_dir("blkio") {
        Some((CgroupVersion::V1, dir)) => v1_blkio_counting(&dir.mount_point, roots),
        _ => BlkioCounting::All,
    }
}

/// What reading one file gave.
enum Read<'b> {
    Data(&'b [u8]),
    /// No data: `absent` when the file does not exist (an older kernel, a controller not
    /// enabled, or a removed cgroup), else it could not be read.
    Missing {
        absent: bool,
    },
}

/// Reads `file` into `buf`, closing its descriptor after the read unless `hold`, with the first
/// unexpected failure said in `reason`.
fn read_file<'b>(
    file: &mut File,
    hold: bool,
    buf: &'b mut Vec<u8>,
    reason: &mut Option<String>,
) -> Read<'b> {
    let mut result = file.held.read(buf).map(<[u8]>::len);
    // ENODEV through a held descriptor: the cgroup was removed, or removed and made again
    // under the same name; the descriptor was dropped, so the retry reopens the path.
    if result
        .as_ref()
        .is_err_and(|error| errno(error) == Some(libc::ENODEV))
    {
        result = file.held.read(buf).map(<[u8]>::len);
    }
    if !hold {
        file.held.close();
    }
    match result {
        Ok(_) => {
            file.absent = false;
            Read::Data(buf.as_slice())
        }
        Err(error) => {
            let absent = errno(&error) == Some(libc::ENOENT);
            file.absent = absent;
            // A removed cgroup (ENODEV) leaves the next walk, which drops this reader, or is
            // the scope's error.
            if !absent && errno(&error) != Some(libc::ENODEV) && reason.is_none() {
                *reason = Some(error.to_string());
            }
            Read::Missing { absent }
        }
    }
}

fn errno(error: &SourceError) -> Option<i32> {
    match error {
        SourceError::Io { source, .. } => source.raw_os_error(),
        SourceError::Malformed { .. } => None,
    }
}

#[cfg(test)]
mod tests;
