//! The scope's cgroup read as a [`CgroupSample`]: [`CgroupValuesReader::scope`]'s values, each group
//! tagged with the hierarchy it came from.

use super::parse::PsiTotals;
use super::sample::{
    CgroupFields, CgroupSample, CpuSample, MemorySample, PidsSample, PressureSample,
};
use super::target::CgroupTarget;
use super::values::{CgroupValuesReader, ScopeValues};
use super::{CgroupError, CgroupVersion};
use crate::snapshot::{CgroupTargetReport, TargetDeviceIo};
use crate::source::Roots;

/// Reads [`CgroupSample`]s of one target at a time, keeping its files open between reads.
#[derive(Debug, Default)]
pub(crate) struct CgroupReader {
    /// The target and groups last read, and their reader.
    current: Option<(CgroupTarget, CgroupFields, CgroupValuesReader)>,
    /// With the cumulative totals' files, where disks are looked up.
    totals: Option<Roots>,
    buf: Vec<u8>,
    /// The values as read, reused between reads.
    report: CgroupTargetReport,
}

/// The cumulative totals' values of a read of the scope's cgroup.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScopeTotals<'a> {
    /// The memory high-water mark.
    pub memory_peak_bytes: Option<u64>,
    /// Whether the cgroup has the memory controller (then a missing high-water mark has
    /// another reason than its absence).
    pub memory_controller: bool,
    /// The hierarchy of the io file read; `None` when none was.
    pub io_version: Option<CgroupVersion>,
    /// Whether the storage bytes are counted on every disk (false for a v1 `blkio` that does
    /// not count on some, which is then not read).
    pub counts_every_disk: bool,
    /// The storage bytes per device.
    pub devices: &'a [TargetDeviceIo],
}

impl CgroupReader {
    /// A reader with nothing open yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A reader that also reads the cumulative totals' files ([`Self::totals`]); `roots` tell
    /// which disks saw I/O.
    pub(crate) fn with_totals(roots: &Roots) -> Self {
        Self {
            totals: Some(roots.clone()),
            ..Self::default()
        }
    }

    /// Reads the groups in `want` for `target`. Use one reader per target: a different target
    /// (or other groups) than last time makes a new reader (and reopens every file).
    ///
    /// Missing files and invalid contents give `None` values. A removed cgroup gives
    /// [`CgroupError::Gone`]; other I/O errors (EACCES …) make the affected value `None`.
    pub(crate) fn read(
        &mut self,
        target: &CgroupTarget,
        want: CgroupFields,
    ) -> Result<CgroupSample, CgroupError> {
        let stale = self
            .current
            .as_ref()
            .is_none_or(|(last, fields, _)| last != target || *fields != want);
        if stale {
            let reader = CgroupValuesReader::scope(target, want, self.totals.as_ref());
            self.current = Some((target.clone(), want, reader));
        }
        let Some((_, _, reader)) = &mut self.current else {
            return Ok(CgroupSample::default());
        };
        let scope = reader.read_scope(&mut self.buf, &mut self.report)?;
        Ok(sample(&self.report, &scope))
    }

    /// The cumulative totals' values of the last read (made [`Self::with_totals`]): a failed
    /// read leaves none of them.
    pub(crate) fn totals(&self) -> Option<ScopeTotals<'_>> {
        self.totals.as_ref()?;
        let (_, _, reader) = self.current.as_ref()?;
        Some(ScopeTotals {
            memory_peak_bytes: self.report.memory_peak_bytes,
            memory_controller: reader.has_memory_controller(),
            io_version: reader.io_version(),
            counts_every_disk: reader.counts_every_disk(),
            devices: &self.report.devices,
        })
    }
}

fn sample(report: &CgroupTargetReport, scope: &ScopeValues) -> CgroupSample {
    let versions = &scope.versions;
    let usec = |ns: Option<u64>| ns.map(|ns| ns / 1000);
    let pressure = &report.pressure;
    CgroupSample {
        cpu: CpuSample {
            usage_version: versions.usage,
            usage_ns: report.cpu_usage_ns,
            user_usec: usec(report.cpu_user_ns),
            system_usec: usec(report.cpu_system_ns),
            throttling_version: versions.throttling,
            nr_periods: report.cpu_periods,
            nr_throttled: report.cpu_throttled_periods,
            throttled_usec: usec(report.cpu_throttled_ns),
            limit_version: versions.cpu_limit,
            effective_cpu_limit_lp: report.cpu_limit_cores,
        },
        memory: MemorySample {
            version: versions.memory,
            limit_bytes: report.memory_limit_bytes,
            current_bytes: report.memory_current_bytes,
            events: report.memory_events,
            under_oom: scope.under_oom,
        },
        pids: PidsSample {
            version: versions.pids,
            current: report.pids_current,
            limit: report.pids_limit,
            max_events: scope.pids_max_events,
        },
        pressure: PressureSample {
            version: versions.pressure,
            cpu: PsiTotals {
                some_usec: pressure.cpu_some_usec,
                full_usec: pressure.cpu_full_usec,
            },
            memory: PsiTotals {
                some_usec: pressure.memory_some_usec,
                full_usec: pressure.memory_full_usec,
            },
            io: PsiTotals {
                some_usec: pressure.io_some_usec,
                full_usec: pressure.io_full_usec,
            },
        },
    }
}
