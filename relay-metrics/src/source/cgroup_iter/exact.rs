//! "Exact or not at all": each kind of value is taken from the iterator only after it was found
//! equal to its file on live cgroups. Counters are bracketed (file before ≤ iterator ≤ file
//! after), limits must be equal, and gauges (usage, pids current) must equal the two file reads
//! where those agree (a gauge that moved between them, as a busy cgroup's memory does, can go
//! up and down and says nothing either way; it is left out of that attempt). A kind that fails
//! is tried again, and after [`ATTEMPTS`] failures its files serve; a kind with no file to
//! compare with is not used.

use std::path::Path;

use super::{CgroupIter, CgroupRecord};

/// Tries per kind before it is left to its file.
const ATTEMPTS: usize = 3;

/// `PID_MAX_LIMIT` on 64-bit kernels: `pids.max` prints `max` for a limit above it.
const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;

/// A value the iterator can read, each compared with the file that holds it.
#[cfg_attr(
    not(test),
    expect(
        dead_code,
        reason = "the memsw kinds are checked in tests only: the collector reads no memsw value"
    )
)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    MemoryUsage,
    MemoryPeak,
    MemoryLimit,
    MemoryFailcnt,
    MemswUsage,
    MemswPeak,
    MemswLimit,
    MemswFailcnt,
    OomKill,
    PidsCurrent,
    PidsLimit,
    CfsPeriods,
    CfsThrottledPeriods,
    CfsThrottledTime,
    CfsQuota,
    CfsPeriod,
}

/// Where in its file a kind's value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    /// The whole file.
    Whole,
    /// The value after this key on its line (`cpu.stat`, `memory.events`).
    Keyed(&'static str),
    /// The nth whitespace-separated value (v2 `cpu.max`: quota, then period).
    Column(usize),
}

/// How a kind is compared with its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compare {
    /// Only grows: file before ≤ iterator ≤ file after.
    Counter,
    /// Moves both ways: between the two file reads.
    Gauge,
    /// Set by a writer: equal to both file reads.
    Limit,
}

impl Kind {
    #[cfg(test)]
    pub(crate) const ALL: [Kind; 16] = [
        Kind::MemoryUsage,
        Kind::MemoryPeak,
        Kind::MemoryLimit,
        Kind::MemoryFailcnt,
        Kind::MemswUsage,
        Kind::MemswPeak,
        Kind::MemswLimit,
        Kind::MemswFailcnt,
        Kind::OomKill,
        Kind::PidsCurrent,
        Kind::PidsLimit,
        Kind::CfsPeriods,
        Kind::CfsThrottledPeriods,
        Kind::CfsThrottledTime,
        Kind::CfsQuota,
        Kind::CfsPeriod,
    ];

    /// The file holding this kind and where in it, on a v1 or v2 hierarchy; `None` where that
    /// version has no such file.
    fn file(self, v2: bool) -> Option<(&'static str, Field)> {
        use Field::*;
        use Kind::*;
        Some(match (self, v2) {
            (MemoryUsage, false) => ("memory.usage_in_bytes", Whole),
            (MemoryUsage, true) => ("memory.current", Whole),
            (MemoryPeak, false) => ("memory.max_usage_in_bytes", Whole),
            (MemoryPeak, true) => ("memory.peak", Whole),
            (MemoryLimit, false) => ("memory.limit_in_bytes", Whole),
            (MemoryLimit, true) => ("memory.max", Whole),
            (MemoryFailcnt, false) => ("memory.failcnt", Whole),
            (MemswUsage, false) => ("memory.memsw.usage_in_bytes", Whole),
            (MemswPeak, false) => ("memory.memsw.max_usage_in_bytes", Whole),
            (MemswLimit, false) => ("memory.memsw.limit_in_bytes", Whole),
            (MemswFailcnt, false) => ("memory.memsw.failcnt", Whole),
            (OomKill, false) => ("memory.oom_control", Keyed("oom_kill")),
            (OomKill, true) => ("memory.events", Keyed("oom_kill")),
            (PidsCurrent, _) => ("pids.current", Whole),
            (PidsLimit, _) => ("pids.max", Whole),
            (CfsPeriods, _) => ("cpu.stat", Keyed("nr_periods")),
            (CfsThrottledPeriods, _) => ("cpu.stat", Keyed("nr_throttled")),
            (CfsThrottledTime, false) => ("cpu.stat", Keyed("throttled_time")),
            (CfsThrottledTime, true) => ("cpu.stat", Keyed("throttled_usec")),
            (CfsQuota, false) => ("cpu.cfs_quota_us", Whole),
            (CfsQuota, true) => ("cpu.max", Column(0)),
            (CfsPeriod, false) => ("cpu.cfs_period_us", Whole),
            (CfsPeriod, true) => ("cpu.max", Column(1)),
            _ => return None,
        })
    }

    /// The kind's name in `extensions.collector.cgroup_source_reason`.
    pub(crate) fn name(self) -> &'static str {
        use Kind::*;
        match self {
            MemoryUsage => "memory_usage",
            MemoryPeak => "memory_peak",
            MemoryLimit => "memory_limit",
            MemoryFailcnt => "memory_failcnt",
            MemswUsage => "memsw_usage",
            MemswPeak => "memsw_peak",
            MemswLimit => "memsw_limit",
            MemswFailcnt => "memsw_failcnt",
            OomKill => "oom_kill",
            PidsCurrent => "pids_current",
            PidsLimit => "pids_limit",
            CfsPeriods => "cfs_periods",
            CfsThrottledPeriods => "cfs_throttled_periods",
            CfsThrottledTime => "cfs_throttled_time",
            CfsQuota => "cfs_quota",
            CfsPeriod => "cfs_period",
        }
    }

    fn compare(self) -> Compare {
        use Kind::*;
        match self {
            MemoryUsage | MemswUsage | PidsCurrent => Compare::Gauge,
            MemoryLimit | MemswLimit | PidsLimit | CfsQuota | CfsPeriod => Compare::Limit,
            _ => Compare::Counter,
        }
    }

    /// The record's value in the file's unit (bytes, µs on v2's `throttled_usec` and on the
    /// CFS quota and period), `u64::MAX` for a limit the file prints as `max` (or v1's CFS quota
    /// as `-1`).
    pub(crate) fn value(self, record: &CgroupRecord, page_bytes: u64, v2: bool) -> Option<u64> {
        use Kind::*;
        let bytes = |pages: u64| pages.checked_mul(page_bytes);
        // PAGE_COUNTER_MAX (LONG_MAX / PAGE_SIZE) is "max" on v2; v1 prints it as a number.
        let limit = |pages: u64| {
            if v2 && pages >= (i64::MAX as u64) / page_bytes.max(1) {
                Some(u64::MAX)
            } else {
                bytes(pages)
            }
        };
        match self {
            MemoryUsage => bytes(record.memory?.usage),
            MemoryPeak => bytes(record.memory?.watermark),
            MemoryLimit => limit(record.memory?.max),
            MemoryFailcnt => Some(record.memory?.failcnt),
            MemswUsage => bytes(record.memsw?.usage),
            MemswPeak => bytes(record.memsw?.watermark),
            MemswLimit => limit(record.memsw?.max),
            MemswFailcnt => Some(record.memsw?.failcnt),
            OomKill => record.oom_kill,
            PidsCurrent => Some(record.pids?.0),
            PidsLimit => Some(record.pids?.1).map(|limit| {
                if limit > PID_MAX_LIMIT {
                    u64::MAX
                } else {
                    limit
                }
            }),
            CfsPeriods => Some(record.cfs?.0),
            CfsThrottledPeriods => Some(record.cfs?.1),
            CfsThrottledTime if v2 => Some(record.cfs?.2 / 1000),
            CfsThrottledTime => Some(record.cfs?.2),
            // The files print the ns values divided by 1000 (`do_div` by NSEC_PER_USEC).
            CfsQuota => Some(record.cfs_bandwidth?.0).map(|quota_ns| {
                if quota_ns == u64::MAX {
                    u64::MAX
                } else {
                    quota_ns / 1000
                }
            }),
            CfsPeriod => Some(record.cfs_bandwidth?.1 / 1000),
        }
    }
}

/// Where a kind's values come from, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Iterator,
    File,
}

/// The outcome of the check for one kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub kind: Kind,
    pub source: Source,
    /// Why: the number of cgroups that agreed, or the first disagreement, or the missing file.
    pub reason: String,
}

/// Checks every kind on the cgroups below the iterator's hierarchy root (the root itself is
/// left out: its files are computed from global counters or absent).
#[cfg(test)]
pub(crate) fn check(iter: &mut CgroupIter) -> Vec<Verdict> {
    check_skewed(iter, None)
}

/// [`check`], with `skew` added to the iterator's values of one kind: the test hook that shows a
/// kind which disagrees falls back to its file.
#[cfg(test)]
pub(crate) fn check_skewed(iter: &mut CgroupIter, skew: Option<(Kind, u64)>) -> Vec<Verdict> {
    check_kinds(iter, &Kind::ALL, skew)
}

/// Checks `kinds` on the cgroups below the iterator's hierarchy root (the root itself is left
/// out: its files are computed from global counters or absent), with `skew` added to the
/// iterator's values of one kind (the tests' hook; `None` in the collector).
pub(crate) fn check_kinds(
    iter: &mut CgroupIter,
    kinds: &[Kind],
    skew: Option<(Kind, u64)>,
) -> Vec<Verdict> {
    let v2 = iter.root().join("cgroup.controllers").exists();
    let page_bytes = crate::source::procfs::page_size_bytes().unwrap_or(4096);
    let verdicts = kinds
        .iter()
        .map(|&kind| {
            let skew = skew
                .filter(|(skewed, _)| *skewed == kind)
                .map_or(0, |(_, by)| by);
            let mut outcome = Err(String::new());
            for _ in 0..ATTEMPTS {
                outcome = attempt(iter, kind, v2, page_bytes, skew);
                if outcome.is_ok() {
                    break;
                }
            }
            match outcome {
                Ok(compared) => Verdict {
                    kind,
                    source: Source::Iterator,
                    reason: format!("equal to its file on {compared} cgroups (bracketed)"),
                },
                Err(reason) => Verdict {
                    kind,
                    source: Source::File,
                    reason,
                },
            }
        })
        .collect();
    peaks_with_their_usage(verdicts)
}

/// A peak is read where its usage is: the iterator's walk and the files are read at different
/// moments of a pass (up to the whole pass apart), and a peak from the walk with a usage read
/// later from its file could show the usage above the peak (a busy cgroup's usage moves, and
/// fails its check, more often than its peak).
pub(super) fn peaks_with_their_usage(mut verdicts: Vec<Verdict>) -> Vec<Verdict> {
    for (peak, usage) in [
        (Kind::MemoryPeak, Kind::MemoryUsage),
        (Kind::MemswPeak, Kind::MemswUsage),
    ] {
        let usage_from_file = verdicts
            .iter()
            .any(|v| v.kind == usage && v.source == Source::File);
        if let Some(verdict) = verdicts
            .iter_mut()
            .find(|v| v.kind == peak && v.source == Source::Iterator)
            .filter(|_| usage_from_file)
        {
            verdict.source = Source::File;
            verdict.reason = format!(
                "read with {}, which its file serves ({})",
                usage.name(),
                verdict.reason
            );
        }
    }
    verdicts
}

/// One bracketed comparison of `kind` on every cgroup that has its file: the number compared,
/// or the first disagreement.
fn attempt(
    iter: &mut CgroupIter,
    kind: Kind,
    v2: bool,
    page_bytes: u64,
    skew: u64,
) -> Result<usize, String> {
    let Some((file, field)) = kind.file(v2) else {
        return Err(format!(
            "no file holds it on a cgroup v{}",
            if v2 { 2 } else { 1 }
        ));
    };
    let mut records = Vec::new();
    iter.read(&mut records)
        .map_err(|error| format!("reading the iterator: {error}"))?;
    let root = iter.root().to_owned();
    let mut paths = Vec::new();
    for record in records.iter().filter(|record| record.level > 0) {
        if let Some(path) = iter.path_of(record.id) {
            paths.push(root.join(path).join(file));
        }
    }
    let before: Vec<Option<u64>> = paths.iter().map(|path| read_value(path, field)).collect();
    iter.read(&mut records)
        .map_err(|error| format!("reading the iterator: {error}"))?;
    let after: Vec<Option<u64>> = paths.iter().map(|path| read_value(path, field)).collect();
    let by_path: std::collections::HashMap<_, _> = records
        .iter()
        .filter(|record| record.level > 0)
        .filter_map(|record| Some((root.join(iter.path_of(record.id)?).join(file), record)))
        .collect();
    let mut compared = 0;
    for ((path, before), after) in paths.iter().zip(before).zip(after) {
        let (Some(before), Some(after), Some(record)) = (before, after, by_path.get(path)) else {
            continue;
        };
        let Some(value) = kind.value(record, page_bytes, v2) else {
            return Err(format!(
                "{} exists but the iterator has no value",
                path.display()
            ));
        };
        let value = value.saturating_add(skew);
        if kind.compare() == Compare::Gauge && before != after {
            continue;
        }
        let agrees = match kind.compare() {
            Compare::Counter => before <= value && value <= after,
            Compare::Gauge => before.min(after) <= value && value <= before.max(after),
            Compare::Limit => before == value && value == after,
        };
        if !agrees {
            return Err(format!(
                "{}: iterator {value}, file {before} before and {after} after",
                path.display()
            ));
        }
        compared += 1;
    }
    if compared == 0 {
        return Err(format!(
            "no cgroup below {} has {file} to compare with (or each one moved between the reads)",
            root.display()
        ));
    }
    Ok(compared)
}

/// A file's value at `field`; `max` (and v1's CFS quota `-1`) as `u64::MAX`.
pub(crate) fn read_value(path: &Path, field: Field) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    let value = match field {
        Field::Whole => text.trim(),
        Field::Keyed(key) => text.lines().find_map(|line| {
            let (name, value) = line.split_once(' ')?;
            (name == key).then_some(value.trim())
        })?,
        Field::Column(at) => text.split_ascii_whitespace().nth(at)?,
    };
    if value == "max" || value == "-1" {
        Some(u64::MAX)
    } else {
        value.parse().ok()
    }
}
