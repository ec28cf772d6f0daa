//! Which files of a cgroup a [`CgroupValuesReader`](super::CgroupValuesReader) reads, in the
//! order of the reads, and what each holds.

use std::path::{Path, PathBuf};

use super::super::io::{v1_file, V1_BYTES, V1_OPS};
use super::super::sample::CgroupFields;
use super::super::target::{CgroupDir, CgroupTarget};
use super::super::CgroupVersion;
use crate::source::file::{FileKind, HeldFile};

/// Pressure resources, in [`Kind::Pressure`] order.
pub(super) const PRESSURE_RESOURCES: [&str; 3] = ["cpu", "memory", "io"];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// v2 `cpu.stat` of a cgroup whose cpu controller is on v2: run time and CFS counters.
    V2CpuStat,
    /// v2 `cpu.stat` where the cpu controller is bound to v1 and no v1 `cpuacct` holds the
    /// cgroup: the cgroup core's run time only.
    V2CpuUsage,
    V1CpuacctUsage,
    /// v1 `cpuacct.stat`: user and system time in clock ticks (one file).
    V1CpuacctStat,
    /// v1 `cpuacct.usage_user` / `cpuacct.usage_sys`: user and system time in ns.
    V1CpuacctUser,
    V1CpuacctSys,
    V1CpuStat,
    V2CpuMax,
    V1CfsQuota,
    V1CfsPeriod,
    /// The CPUs of the cgroup's effective cpuset; the `fallback` (v1 `cpuset.cpus`) is read
    /// only where the kernel has no `cpuset.effective_cpus`.
    Cpuset {
        fallback: bool,
    },
    MemoryCurrent,
    MemoryPeak,
    MemoryLimit(CgroupVersion),
    V2MemoryEvents,
    V1MemoryFailcnt,
    V1OomControl,
    PidsCurrent,
    PidsMax,
    PidsEvents,
    V2IoStat,
    V1IoBytes,
    V1IoOps,
    Pressure(usize),
    /// The cAdvisor naming's files.
    MemoryStat(CgroupVersion),
    V2SwapCurrent,
    CpuShares(CgroupVersion),
}

/// The value group a file's values belong to, for the version each group reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Group {
    Usage,
    Throttling,
    UsageAndThrottling,
    CpuLimit,
    Memory,
    Pids,
    Pressure,
    Other,
}

impl Kind {
    /// A file of [`CpuAndPressure`](super::CpuAndPressure).
    pub(super) fn is_cpu_usage_or_pressure(self) -> bool {
        matches!(
            self,
            Self::V1CpuacctUsage | Self::V1CpuacctStat | Self::Pressure(_)
        )
    }

    /// The hierarchy of an io file.
    pub(super) fn io_version(self) -> Option<CgroupVersion> {
        match self {
            Self::V2IoStat => Some(CgroupVersion::V2),
            Self::V1IoBytes | Self::V1IoOps => Some(CgroupVersion::V1),
            _ => None,
        }
    }

    /// A setting rather than a counter or a level: read at the settings' cadence.
    pub(super) fn is_setting(self) -> bool {
        matches!(
            self,
            Self::V2CpuMax
                | Self::V1CfsQuota
                | Self::V1CfsPeriod
                | Self::Cpuset { .. }
                | Self::MemoryLimit(_)
                | Self::PidsMax
                | Self::CpuShares(_)
        )
    }

    pub(super) fn group(self) -> Group {
        match self {
            Self::V2CpuStat => Group::UsageAndThrottling,
            Self::V2CpuUsage
            | Self::V1CpuacctUsage
            | Self::V1CpuacctStat
            | Self::V1CpuacctUser
            | Self::V1CpuacctSys => Group::Usage,
            Self::V1CpuStat => Group::Throttling,
            Self::V2CpuMax | Self::V1CfsQuota | Self::V1CfsPeriod | Self::Cpuset { .. } => {
                Group::CpuLimit
            }
            Self::MemoryCurrent
            | Self::MemoryPeak
            | Self::MemoryLimit(_)
            | Self::V2MemoryEvents
            | Self::V1MemoryFailcnt
            | Self::V1OomControl
            | Self::MemoryStat(_)
            | Self::V2SwapCurrent => Group::Memory,
            Self::PidsCurrent | Self::PidsMax | Self::PidsEvents => Group::Pids,
            Self::Pressure(_) => Group::Pressure,
            Self::V2IoStat | Self::V1IoBytes | Self::V1IoOps | Self::CpuShares(_) => Group::Other,
        }
    }
}

#[derive(Debug)]
pub(super) struct File {
    pub(super) kind: Kind,
    /// The hierarchy the file is in.
    pub(super) version: CgroupVersion,
    /// A setting of an ancestor (a limit level of the scope's effective limits).
    pub(super) ancestor: bool,
    pub(super) held: HeldFile,
    /// Missing at the last try: tried again only with the settings, as a controller enabled
    /// later (systemd turning `io` on in the parent's `subtree_control`) or a cgroup re-created
    /// at its path brings the file back.
    pub(super) absent: bool,
}

/// The files of one cgroup, listed controller by controller.
pub(super) struct Files(pub(super) Vec<File>);

impl Files {
    fn add(&mut self, dir: &Path, name: &str, kind: Kind, version: CgroupVersion) {
        self.add_path(dir.join(name), kind, version, false);
    }

    fn add_path(&mut self, path: PathBuf, kind: Kind, version: CgroupVersion, ancestor: bool) {
        self.0.push(File {
            kind,
            version,
            ancestor,
            held: HeldFile::new(path, FileKind::Whole),
            absent: false,
        });
    }

    /// The setting `name` of `dir` and, with `chain`, of each ancestor that can hold a limit
    /// ([`limit_levels`]), leaf first.
    fn setting(
        &mut self,
        dir: &CgroupDir,
        name: &str,
        kind: Kind,
        version: CgroupVersion,
        chain: bool,
    ) {
        for (at, level) in setting_levels(dir, chain).into_iter().enumerate() {
            self.add_path(level.join(name), kind, version, at > 0);
        }
    }

    /// A measured cgroup's values: its own settings, and with `cadvisor` what the cAdvisor
    /// naming exports and no other needs.
    pub(super) fn measured(target: &CgroupTarget, cadvisor: bool, blkio_counts: bool) -> Self {
        let mut files = Self(Vec::with_capacity(20));
        files.cpu(target, false);
        if cadvisor {
            files.cadvisor(target);
        }
        files.memory(target, false);
        files.pids(target, false);
        files.io(target, blkio_counts, true);
        files.pressure(target);
        files
    }

    /// The scope's values in `want`: effective limits (each setting over the ancestors), the
    /// cpuset, the limits' events and v1's exact user and system time; with `totals`, also the
    /// cumulative totals' files (the memory high-water mark and the storage
    /// bytes; the storage bytes where `blkio_counts`).
    pub(super) fn scope(target: &CgroupTarget, want: CgroupFields, totals: Option<bool>) -> Self {
        let mut files = Self(Vec::with_capacity(28));
        if let Some(blkio_counts) = totals {
            files.memory_peak(target);
            files.io(target, blkio_counts, false);
        }
        if want.cpu {
            files.cpu(target, true);
        }
        if want.memory {
            files.memory(target, true);
        }
        if want.pids {
            files.pids(target, true);
        }
        if want.pressure {
            files.pressure(target);
        }
        files
    }

    /// CPU time (v1 `cpuacct`, else v2 `cpu.stat`), the CFS counters and the quota; for the
    /// `scope`, the exact user and system ns, the quota over the ancestors and the cpuset.
    fn cpu(&mut self, target: &CgroupTarget, scope: bool) {
        let cpu = target.controller_dir("cpu");
        match (target.controller_dir("cpuacct"), cpu) {
            (Some((CgroupVersion::V1, dir)), _) => {
                let v1 = CgroupVersion::V1;
                self.add(&dir.dir, "cpuacct.usage", Kind::V1CpuacctUsage, v1);
                if scope {
                    self.add(&dir.dir, "cpuacct.usage_user", Kind::V1CpuacctUser, v1);
                    self.add(&dir.dir, "cpuacct.usage_sys", Kind::V1CpuacctSys, v1);
                } else {
                    self.add(&dir.dir, "cpuacct.stat", Kind::V1CpuacctStat, v1);
                }
            }
            (_, Some((CgroupVersion::V2, _))) => {}
            _ => {
                if let Some(v2) = &target.v2 {
                    self.add(&v2.dir, "cpu.stat", Kind::V2CpuUsage, CgroupVersion::V2);
                }
            }
        }
        match cpu {
            Some((version @ CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "cpu.stat", Kind::V1CpuStat, version);
                for (at, level) in setting_levels(dir, scope).into_iter().enumerate() {
                    let ancestor = at > 0;
                    self.add_path(
                        level.join("cpu.cfs_quota_us"),
                        Kind::V1CfsQuota,
                        version,
                        ancestor,
                    );
                    self.add_path(
                        level.join("cpu.cfs_period_us"),
                        Kind::V1CfsPeriod,
                        version,
                        ancestor,
                    );
                }
            }
            Some((version @ CgroupVersion::V2, dir)) => {
                self.add(&dir.dir, "cpu.stat", Kind::V2CpuStat, version);
                self.setting(dir, "cpu.max", Kind::V2CpuMax, version, scope);
            }
            None => {}
        }
        if scope {
            self.cpuset(target);
        }
    }

    fn cpuset(&mut self, target: &CgroupTarget) {
        match target.controller_dir("cpuset") {
            Some((version @ CgroupVersion::V2, dir)) => {
                self.add(
                    &dir.dir,
                    "cpuset.cpus.effective",
                    Kind::Cpuset { fallback: false },
                    version,
                );
            }
            Some((version @ CgroupVersion::V1, dir)) => {
                self.add(
                    &dir.dir,
                    "cpuset.effective_cpus",
                    Kind::Cpuset { fallback: false },
                    version,
                );
                self.add(
                    &dir.dir,
                    "cpuset.cpus",
                    Kind::Cpuset { fallback: true },
                    version,
                );
            }
            None => {}
        }
    }

    /// What the cAdvisor naming exports and no other needs: the CPU shares or weight,
    /// `memory.stat` and v2 `memory.swap.current`.
    fn cadvisor(&mut self, target: &CgroupTarget) {
        match target.controller_dir("cpu") {
            Some((version @ CgroupVersion::V1, dir)) => {
                self.add(&dir.dir, "cpu.shares", Kind::CpuShares(version), version);
            }
            Some((version @ CgroupVersion::V2, dir)) => {
                self.add(&dir.dir, "cpu.weight", Kind::CpuShares(version), version);
            }
            None => {}
        }
        if let Some((version, dir)) = target.controller_dir("memory") {
            self.add(&dir.dir, "memory.stat", Kind::MemoryStat(version), version);
            if version == CgroupVersion::V2 {
                self.add(
                    &dir.dir,
                    "memory.swap.current",
                    Kind::V2SwapCurrent,
                    version,
                );
            }
        }
    }

    /// Memory in use, its limit and the limit's events; for a measured cgroup its peak, for
    /// the `scope` the limit over the ancestors.
    fn memory(&mut self, target: &CgroupTarget, scope: bool) {
        let Some((version, dir)) = target.controller_dir("memory") else {
            return;
        };
        let (current, limit) = match version {
            CgroupVersion::V1 => ("memory.usage_in_bytes", "memory.limit_in_bytes"),
            CgroupVersion::V2 => ("memory.current", "memory.max"),
        };
        self.add(&dir.dir, current, Kind::MemoryCurrent, version);
        if !scope {
            self.memory_peak(target);
        }
        self.setting(dir, limit, Kind::MemoryLimit(version), version, scope);
        match version {
            CgroupVersion::V1 => {
                self.add(&dir.dir, "memory.failcnt", Kind::V1MemoryFailcnt, version);
                self.add(&dir.dir, "memory.oom_control", Kind::V1OomControl, version);
            }
            CgroupVersion::V2 => {
                self.add(&dir.dir, "memory.events", Kind::V2MemoryEvents, version);
            }
        }
    }

    /// The memory high-water mark.
    fn memory_peak(&mut self, target: &CgroupTarget) {
        match target.controller_dir("memory") {
            Some((version @ CgroupVersion::V1, dir)) => {
                self.add(
                    &dir.dir,
                    "memory.max_usage_in_bytes",
                    Kind::MemoryPeak,
                    version,
                );
            }
            Some((version @ CgroupVersion::V2, dir)) => {
                self.add(&dir.dir, "memory.peak", Kind::MemoryPeak, version);
            }
            None => {}
        }
    }

    /// The pids count and limit; for the `scope` the limit over the ancestors and the forks
    /// the limit refused.
    fn pids(&mut self, target: &CgroupTarget, scope: bool) {
        if let Some((version, dir)) = target.controller_dir("pids") {
            self.add(&dir.dir, "pids.current", Kind::PidsCurrent, version);
            self.setting(dir, "pids.max", Kind::PidsMax, version, scope);
            if scope {
                self.add(&dir.dir, "pids.events", Kind::PidsEvents, version);
            }
        }
    }

    /// The bytes (and with `operations` the operations) per block device; v1 `blkio`'s only
    /// where `blkio_counts`.
    fn io(&mut self, target: &CgroupTarget, blkio_counts: bool, operations: bool) {
        match target.controller_dir("blkio") {
            Some((CgroupVersion::V1, _)) if !blkio_counts => {}
            Some((version @ CgroupVersion::V1, dir)) => {
                self.add_path(v1_file(&dir.dir, V1_BYTES), Kind::V1IoBytes, version, false);
                if operations {
                    self.add_path(v1_file(&dir.dir, V1_OPS), Kind::V1IoOps, version, false);
                }
            }
            _ => {
                if let Some((version @ CgroupVersion::V2, dir)) = target.controller_dir("io") {
                    self.add(&dir.dir, "io.stat", Kind::V2IoStat, version);
                }
            }
        }
    }

    /// PSI files exist in every cgroup of the unified hierarchy, controllers or not; some
    /// kernels (`psi_v1`) also have them in v1 `cpuacct` or `cpu` groups.
    fn pressure(&mut self, target: &CgroupTarget) {
        let source = target
            .v2
            .as_ref()
            .map(|d| (CgroupVersion::V2, d))
            .or_else(|| target.v1_dir("cpuacct").map(|d| (CgroupVersion::V1, d)))
            .or_else(|| target.v1_dir("cpu").map(|d| (CgroupVersion::V1, d)));
        if let Some((version, dir)) = source {
            for (index, resource) in PRESSURE_RESOURCES.iter().enumerate() {
                let name = format!("{resource}.pressure");
                self.add(&dir.dir, &name, Kind::Pressure(index), version);
            }
        }
    }
}

/// The levels of `dir` whose settings can be a limit, leaf first: each level up to the mount
/// point except the root of a v1 hierarchy (the only directory with `release_agent`). The kernel
/// refuses a memory limit or a CFS quota on the root cgroup (`EINVAL`, also for `-1`), so there
/// `memory.limit_in_bytes` is always unlimited and `cpu.cfs_quota_us` always -1, and `pids.max`
/// does not exist: reading them could not change a minimum. The unified hierarchy's root has
/// none of its limit files (`memory.max`, `cpu.max`, `pids.max`) and reads as absent. Each
/// level is checked once, when the reader is made.
pub(super) fn limit_levels(dir: &CgroupDir) -> impl Iterator<Item = &Path> {
    dir.levels()
        .filter(|level| !level.join("release_agent").exists())
}

/// The directories whose setting is read: with `chain` the [`limit_levels`], else `dir`'s own.
fn setting_levels(dir: &CgroupDir, chain: bool) -> Vec<&Path> {
    if chain {
        limit_levels(dir).collect()
    } else {
        vec![dir.dir.as_path()]
    }
}
