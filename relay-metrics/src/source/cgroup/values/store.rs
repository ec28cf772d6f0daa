//! What each file's content is stored as: the fields of a [`CgroupTargetReport`], the scope's
//! own values, and the limits folded over their levels.

use super::super::io::{parse_blkio, parse_io_stat, DeviceCounters};
use super::super::parse::{
    cpu_quota_of, keyed_u64, limit_of, parse_cpu_list_count, parse_cpu_max, parse_limit, parse_psi,
    parse_u64_trimmed, parse_v1_cpu_quota, parse_v1_memory_limit, v1_memory_limit_of, CpuQuota,
    LimitValue,
};
use super::super::stat::{parse_cpu_max_raw, parse_memory_stat, parse_shares, parse_v1_quota_raw};
use super::super::CgroupVersion;
use super::files::{File, Kind};
use super::ScopeValues;
use crate::snapshot::{CgroupTargetReport, MemoryEventCounts, TargetCpuSpec, TargetDeviceIo};
use crate::source::cgroup_iter::pass::KernelValues;

/// The minimum of a limit over its levels. An unlimited level does not bound it; an unreadable
/// or invalid level makes it `None`, as in Relay: a partial minimum could be a wrong number.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fold<T> {
    min: Option<T>,
    poisoned: bool,
}

impl<T> Default for Fold<T> {
    fn default() -> Self {
        Self {
            min: None,
            poisoned: false,
        }
    }
}

impl<T: PartialOrd + Copy> Fold<T> {
    pub(super) fn add(&mut self, value: T) {
        if self.min.is_none_or(|min| value < min) {
            self.min = Some(value);
        }
    }

    pub(super) fn poison(&mut self) {
        self.poisoned = true;
    }

    pub(super) fn get(&self) -> Option<T> {
        self.min.filter(|_| !self.poisoned)
    }
}

/// The limits of one read of the settings, each folded over its levels (one level for a
/// measured cgroup's own settings).
#[derive(Debug, Default)]
pub(super) struct Limits {
    pub(super) cpu: Fold<f64>,
    pub(super) memory: Fold<u64>,
    pub(super) pids: Fold<u64>,
}

impl Limits {
    /// Makes the limit a setting of `kind` bounds unknown (its file could not be read).
    pub(super) fn poison(&mut self, kind: Kind) {
        match kind {
            Kind::V2CpuMax | Kind::V1CfsQuota | Kind::V1CfsPeriod | Kind::Cpuset { .. } => {
                self.cpu.poison();
            }
            Kind::MemoryLimit(_) => self.memory.poison(),
            Kind::PidsMax => self.pids.poison(),
            _ => {}
        }
    }

    pub(super) fn write(&self, out: &mut CgroupTargetReport) {
        out.cpu_limit_cores = self.cpu.get();
        out.memory_limit_bytes = self.memory.get();
        out.pids_limit = self.pids.get();
    }
}

/// Where one read's files are parsed to.
pub(super) struct Parsed<'r> {
    pub(super) out: &'r mut CgroupTargetReport,
    pub(super) scope: &'r mut ScopeValues,
    pub(super) limits: &'r mut Limits,
    /// The v1 CFS quota of the level being read, kept until its period is read.
    pub(super) quota: &'r mut Vec<u8>,
    pub(super) devices: &'r mut Vec<DeviceCounters>,
    pub(super) ticks_per_second: u64,
}

impl Parsed<'_> {
    /// Parses the content of `file` into its fields.
    pub(super) fn store(self, file: &File, bytes: &[u8]) {
        let out = self.out;
        // The raw settings the cAdvisor naming exports are the cgroup's own.
        let spec = out.cpu_spec.as_mut().filter(|_| !file.ancestor);
        match file.kind {
            Kind::V2CpuStat => v2_cpu_stat(bytes, out),
            Kind::V2CpuUsage => {
                let us = |key: &[u8]| keyed_u64(bytes, key).and_then(|v| v.checked_mul(1000));
                out.cpu_usage_ns = us(b"usage_usec");
                out.cpu_user_ns = us(b"user_usec");
                out.cpu_system_ns = us(b"system_usec");
            }
            Kind::V1CpuacctUsage => out.cpu_usage_ns = parse_u64_trimmed(bytes),
            Kind::V1CpuacctStat => {
                let ns_per_tick = 1_000_000_000 / self.ticks_per_second;
                let ns = |key: &[u8]| {
                    keyed_u64(bytes, key).and_then(|ticks| ticks.checked_mul(ns_per_tick))
                };
                out.cpu_user_ns = ns(b"user");
                out.cpu_system_ns = ns(b"system");
            }
            Kind::V1CpuacctUser => out.cpu_user_ns = parse_u64_trimmed(bytes),
            Kind::V1CpuacctSys => out.cpu_system_ns = parse_u64_trimmed(bytes),
            Kind::V1CpuStat => {
                out.cpu_periods = keyed_u64(bytes, b"nr_periods");
                out.cpu_throttled_periods = keyed_u64(bytes, b"nr_throttled");
                out.cpu_throttled_ns = keyed_u64(bytes, b"throttled_time");
            }
            Kind::V2CpuMax
            | Kind::V1CfsQuota
            | Kind::V1CfsPeriod
            | Kind::Cpuset { .. }
            | Kind::CpuShares(_) => cpu_setting(file.kind, bytes, spec, self.limits, self.quota),
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
                fold_limit(&mut self.limits.memory, parsed);
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
                self.scope.under_oom = keyed_u64(bytes, b"under_oom").map(|flag| flag != 0);
            }
            Kind::PidsCurrent => out.pids_current = parse_u64_trimmed(bytes),
            Kind::PidsMax => fold_limit(&mut self.limits.pids, parse_limit(bytes)),
            Kind::PidsEvents => self.scope.pids_max_events = keyed_u64(bytes, b"max"),
            Kind::V2IoStat => parse_io_stat(bytes, self.devices),
            Kind::V1IoBytes => parse_blkio(bytes, self.devices, true),
            Kind::V1IoOps => parse_blkio(bytes, self.devices, false),
            Kind::Pressure(index) => pressure(index, bytes, out),
        }
    }
}

/// A CPU setting of `kind` into the CPU limit's fold and, for the cgroup's own (`spec`), the raw
/// settings the cAdvisor naming exports. `quota` keeps a v1 level's quota until its period.
fn cpu_setting(
    kind: Kind,
    bytes: &[u8],
    spec: Option<&mut TargetCpuSpec>,
    limits: &mut Limits,
    quota: &mut Vec<u8>,
) {
    match kind {
        Kind::V2CpuMax => {
            fold_quota(&mut limits.cpu, parse_cpu_max(bytes));
            if let Some(spec) = spec {
                parse_cpu_max_raw(bytes, spec);
            }
        }
        Kind::V1CfsQuota => quota.extend_from_slice(bytes),
        Kind::V1CfsPeriod => {
            if !quota.is_empty() {
                fold_quota(&mut limits.cpu, parse_v1_cpu_quota(quota, bytes));
            }
            if let Some(spec) = spec {
                spec.quota_us = parse_v1_quota_raw(quota);
                spec.period_us = parse_u64_trimmed(bytes);
            }
        }
        Kind::Cpuset { .. } => match parse_cpu_list_count(bytes) {
            Some(count) => limits.cpu.add(f64::from(count)),
            None => limits.cpu.poison(),
        },
        Kind::CpuShares(version) => {
            if let Some(spec) = spec {
                spec.shares = parse_shares(bytes, version);
            }
        }
        _ => {}
    }
}

fn fold_limit(fold: &mut Fold<u64>, value: Option<LimitValue>) {
    match value {
        None => fold.poison(),
        Some(LimitValue::Unlimited) => {}
        Some(LimitValue::Value(value)) => fold.add(value),
    }
}

fn fold_quota(fold: &mut Fold<f64>, quota: Option<CpuQuota>) {
    match quota {
        None => fold.poison(),
        Some(CpuQuota::Unlimited) => {}
        Some(CpuQuota::LogicalProcessors(cores)) => fold.add(cores),
    }
}

/// Stores the values of `file` from `kernel` where it holds them all: true, and the file is
/// left unread. A setting goes into `limits` (and the cAdvisor naming's raw CPU settings) as
/// its file's text would; `kernel` holds the cgroup's own, so an ancestor's are read.
pub(super) fn store_served(
    file: &File,
    kernel: &KernelValues,
    out: &mut CgroupTargetReport,
    limits: &mut Limits,
) -> bool {
    if file.kind.is_setting() {
        return !file.ancestor && store_served_setting(file.kind, kernel, out, limits);
    }
    let set = |field: &mut Option<u64>, value: Option<u64>| {
        if value.is_some() {
            *field = value;
        }
        value.is_some()
    };
    match file.kind {
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

/// [`store_served`] for a setting of the cgroup itself.
fn store_served_setting(
    kind: Kind,
    kernel: &KernelValues,
    out: &mut CgroupTargetReport,
    limits: &mut Limits,
) -> bool {
    match kind {
        Kind::MemoryLimit(version) => kernel.memory_limit_bytes.is_some_and(|value| {
            let limit = match version {
                CgroupVersion::V1 => v1_memory_limit_of(value),
                CgroupVersion::V2 => limit_of(value),
            };
            fold_limit(&mut limits.memory, Some(limit));
            true
        }),
        Kind::PidsMax => kernel.pids_limit.is_some_and(|value| {
            fold_limit(&mut limits.pids, Some(limit_of(value)));
            true
        }),
        // Both v1 files are served or neither: the period's folds the pair.
        Kind::V1CfsQuota => kernel.cfs_limit.is_some(),
        Kind::V1CfsPeriod | Kind::V2CpuMax => kernel.cfs_limit.is_some_and(|(quota, period)| {
            let quota = (quota != u64::MAX).then_some(quota);
            fold_quota(&mut limits.cpu, cpu_quota_of(quota, period));
            if let Some(spec) = out.cpu_spec.as_mut() {
                spec.quota_us = quota.filter(|&quota| quota > 0);
                spec.period_us = Some(period);
            }
            true
        }),
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

/// `<resource>.pressure` of [`PRESSURE_RESOURCES`](super::files::PRESSURE_RESOURCES)`[index]`:
/// the `some` and `full` totals.
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
pub(super) fn write_devices(devices: &[DeviceCounters], out: &mut Vec<TargetDeviceIo>) {
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
