//! The cgroup environment of a pass: the measured cgroup (cgroup scope) or the cgroups that
//! contain the root process (process scopes).
//!
//! Relay fills its cgroup fields in process scopes only when the measured processes own their
//! cgroup exclusively; we keep that rule (on v1 hierarchies too) because otherwise a limit or an
//! event count would describe other processes. The containing cgroups are always reported,
//! with their raw counters, under `extensions.cgroups`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::ResourceMetricsConfig;
use crate::model::{CgroupValues, PressureValues, ProcessPass};
use crate::snapshot::{CgroupReport, CgroupRole, CgroupVersionName, PressureTotals};
use crate::source::cgroup::{
    self, CgroupFields, CgroupLayout, CgroupReader, CgroupSample, CgroupTarget, CgroupVersion,
};
use crate::source::Roots;

use super::reasons::Reasons;
use super::Target;

pub(super) struct Environment {
    /// The cgroup whose counters are read: the target, or the root process's cgroups.
    cgroup: Option<CgroupTarget>,
    /// Its path, shared with every snapshot that reports it.
    path: Arc<str>,
    reader: CgroupReader,
    /// Why there is no cgroup to read, when there is none.
    missing: Option<String>,
    /// Scratch list of the measured pids, for the exclusivity check.
    pids: Vec<u32>,
    walker: cgroup::SubtreeWalker,
    /// When the cgroup's counters were last read.
    report_read_at: Option<Instant>,
}

impl Environment {
    pub(super) fn new(roots: &Roots, layout: Option<&CgroupLayout>, target: &Target) -> Self {
        let (cgroup, missing) = match (target, layout) {
            (Target::Global, _) => (None, None),
            (_, None) => (None, Some("no cgroup file system is mounted".to_string())),
            (Target::Cgroup { resolved, .. }, Some(_)) => (Some((**resolved).clone()), None),
            (Target::Process { pid, .. }, Some(layout)) => {
                match cgroup::resolve_for_pid(layout, roots, *pid) {
                    Ok(resolved) => (Some(resolved), None),
                    Err(error) => (None, Some(format!("cgroups of process {pid}: {error}"))),
                }
            }
        };
        let path = cgroup
            .as_ref()
            .and_then(|c| {
                c.requested
                    .clone()
                    .or_else(|| c.membership_dir().map(|(_, dir)| dir.path.clone()))
            })
            .unwrap_or_default();
        Self {
            cgroup,
            path: Arc::from(path.as_str()),
            reader: CgroupReader::new(),
            missing,
            pids: Vec::new(),
            walker: cgroup::SubtreeWalker::new(),
            report_read_at: None,
        }
    }

    /// Reads the cgroup counters into `values` (the values behind Relay's fields, when they
    /// apply) and `reports` (for `extensions.cgroups`).
    pub(super) fn read(
        &mut self,
        config: &ResourceMetricsConfig,
        target: &Target,
        processes: &ProcessPass,
        reasons: &mut Reasons,
        values: &mut Option<CgroupValues>,
        reports: &mut Vec<CgroupReport>,
    ) {
        *values = None;
        if matches!(target, Target::Global) {
            reports.clear();
            return;
        }
        let Some(cgroup) = &self.cgroup else {
            if let Some(reason) = &self.missing {
                reasons.add("cgroup", format_args!("{reason}"));
            }
            reports.clear();
            return;
        };
        // Exclusivity first: it decides whether the counters feed Relay's fields (read every
        // pass) or only the containing-cgroup report (refreshed at most once per
        // CONTAINING_REFRESH: a dozen files per read, for context that changes slowly).
        let applies = match (target, processes) {
            (Target::Cgroup { .. }, _) => true,
            (Target::Process { .. }, ProcessPass::Sampled(set)) if set.incomplete.is_none() => {
                self.pids.clear();
                self.pids.extend(set.processes.iter().map(|p| p.pid));
                self.pids.sort_unstable();
                self.pids.dedup();
                match self.walker.owns_exclusively(cgroup, &self.pids) {
                    Ok(true) => true,
                    Ok(false) => {
                        reasons.add(
                            "cgroup",
                            format_args!(
                                "the measured processes do not own their cgroup {} exclusively, so its limits and events would describe other processes too (use the cgroup scope to measure it)",
                                self.path
                            ),
                        );
                        false
                    }
                    Err(error) => {
                        reasons.add("cgroup", format_args!("{error}"));
                        false
                    }
                }
            }
            _ => false,
        };
        let fresh = self
            .report_read_at
            .is_some_and(|at| at.elapsed() < CONTAINING_REFRESH);
        if !applies && fresh && !reports.is_empty() {
            return;
        }
        let fields = CgroupFields {
            cpu: config.cpu.enabled,
            memory: config.memory.enabled,
            pids: config.process.enabled,
            pressure: config.cpu.enabled || config.memory.enabled,
        };
        let sample = match self.reader.read(cgroup, fields) {
            Ok(sample) => sample,
            Err(error) => {
                reasons.add("cgroup", format_args!("{error}"));
                reports.clear();
                return;
            }
        };
        self.report_read_at = Some(Instant::now());
        let role = match target {
            Target::Cgroup { .. } => CgroupRole::Target,
            _ => CgroupRole::Containing,
        };
        reports.resize_with(1, CgroupReport::default);
        fill_report(&mut reports[0], role, &self.path, &sample);
        if applies {
            *values = Some(cgroup_values(&sample));
        }
    }

    /// Age of the cgroup report, when it was not read in this pass.
    pub(super) fn report_age_ms(&self) -> Option<u64> {
        self.report_read_at.map(super::age_ms)
    }
}

/// How long the containing cgroup's report may be reused when it does not feed Relay's fields.
const CONTAINING_REFRESH: Duration = Duration::from_secs(1);

fn cgroup_values(sample: &CgroupSample) -> CgroupValues {
    let pressure = |totals: cgroup::PsiTotals| PressureValues {
        some_usec: totals.some_usec,
        full_usec: totals.full_usec,
    };
    CgroupValues {
        throttled_usec: sample.cpu.throttled_usec,
        throttled_periods: sample.cpu.nr_throttled,
        effective_cpu_limit: sample.cpu.effective_cpu_limit_lp,
        memory_limit_bytes: sample.memory.limit_bytes,
        memory_current_bytes: sample.memory.current_bytes,
        memory_high_events: sample.memory.high_events,
        memory_max_events: sample.memory.max_events,
        memory_oom_events: sample.memory.oom_events,
        memory_oom_kills: sample.memory.oom_kill_events,
        pids_max_events: sample.pids.max_events,
        cpu_pressure: pressure(sample.pressure.cpu),
        memory_pressure: pressure(sample.pressure.memory),
        usage_ns: sample.cpu.usage_ns,
    }
}

fn fill_report(
    report: &mut CgroupReport,
    role: CgroupRole,
    path: &Arc<str>,
    sample: &CgroupSample,
) {
    let version = |v: Option<CgroupVersion>| {
        v.map(|v| match v {
            CgroupVersion::V1 => CgroupVersionName::V1,
            CgroupVersion::V2 => CgroupVersionName::V2,
        })
    };
    *report = CgroupReport {
        role,
        path: Arc::clone(path),
        cpu_version: version(sample.cpu.throttling_version.or(sample.cpu.usage_version)),
        memory_version: version(sample.memory.version),
        pids_version: version(sample.pids.version),
        cpu_usage_ns: sample.cpu.usage_ns,
        cpu_periods: sample.cpu.nr_periods,
        cpu_throttled_periods: sample.cpu.nr_throttled,
        cpu_throttled_usec: sample.cpu.throttled_usec,
        cpu_effective_limit_logical_processors: sample.cpu.effective_cpu_limit_lp,
        memory_limit_bytes: sample.memory.limit_bytes,
        memory_current_bytes: sample.memory.current_bytes,
        memory_high_events: sample.memory.high_events,
        memory_max_events: sample.memory.max_events,
        memory_oom_events: sample.memory.oom_events,
        memory_oom_kill_events: sample.memory.oom_kill_events,
        pids_current: sample.pids.current,
        pids_max: sample.pids.limit,
        pids_max_events: sample.pids.max_events,
        pressure: sample.pressure.version.map(|_| PressureTotals {
            cpu_some_usec: sample.pressure.cpu.some_usec,
            cpu_full_usec: sample.pressure.cpu.full_usec,
            memory_some_usec: sample.pressure.memory.some_usec,
            memory_full_usec: sample.pressure.memory.full_usec,
            io_some_usec: sample.pressure.io.some_usec,
            io_full_usec: sample.pressure.io.full_usec,
        }),
    };
}
