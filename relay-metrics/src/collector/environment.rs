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
    ScopeTotals,
};
use crate::source::Roots;

use super::reasons::Reasons;
use super::Target;

/// Machine-wide counts of the events that change a cgroup's membership: process creations
/// (a child joins its parent's cgroup before `task_newtask` counts it), exits, and moves
/// between cgroups (counted after the move). While they stand still, an exclusivity verdict
/// stays true.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct CgroupEpoch {
    pub(super) processes_created: u64,
    pub(super) processes_exited: u64,
    pub(super) cgroup_migrations: u64,
    pub(super) clone_into_cgroup: u64,
}

impl CgroupEpoch {
    /// Tasks that entered a cgroup other than by inheriting their parent's: moved, or created
    /// straight into one (clone3's `CLONE_INTO_CGROUP`).
    pub(super) fn cgroup_entries(&self) -> u64 {
        self.cgroup_migrations + self.clone_into_cgroup
    }
}

/// How long a reading of a cgroup's membership (an exclusivity verdict, a cgroup scope's
/// process listing) is reused while the [`CgroupEpoch`] stands still. An exit is counted just
/// before the process leaves `cgroup.procs`, so a reading taken in that window still shows a
/// process that is gone; this bounds how long such a reading lasts.
pub(super) const MEMBERSHIP_MAX_AGE: Duration = Duration::from_secs(1);

/// An exclusivity check's result and when it was made.
#[derive(Clone, Copy)]
struct ExclusivityVerdict {
    epoch: CgroupEpoch,
    exclusive: bool,
    checked_at: Instant,
}

/// The exclusivity check of process scopes, with its last verdict.
struct ExclusivityCheck {
    walker: cgroup::SubtreeWalker,
    verdict: Option<ExclusivityVerdict>,
    /// The measured pids (sorted) the verdict is about; kept apart to reuse its allocation.
    verdict_pids: Vec<u32>,
    recheck_after: Duration,
}

impl ExclusivityCheck {
    fn new() -> Self {
        Self {
            walker: cgroup::SubtreeWalker::new(),
            verdict: None,
            verdict_pids: Vec::new(),
            recheck_after: MEMBERSHIP_MAX_AGE,
        }
    }

    /// Whether `pids` (sorted) own `cgroup` exclusively: the last verdict while nothing can have
    /// changed the membership (same epoch and pids, checked less than a second ago), else a
    /// check of the cgroup's process lists.
    fn owns_exclusively(
        &mut self,
        cgroup: &CgroupTarget,
        pids: &[u32],
        epoch: Option<CgroupEpoch>,
    ) -> Result<bool, cgroup::CgroupError> {
        if let (Some(verdict), Some(epoch)) = (self.verdict, epoch) {
            if verdict.epoch == epoch
                && self.verdict_pids == pids
                && verdict.checked_at.elapsed() < self.recheck_after
            {
                return Ok(verdict.exclusive);
            }
        }
        let checked_at = Instant::now();
        self.verdict = None;
        let exclusive = self.walker.owns_exclusively(cgroup, pids)?;
        self.verdict = epoch.map(|epoch| ExclusivityVerdict {
            epoch,
            exclusive,
            checked_at,
        });
        self.verdict_pids.clear();
        self.verdict_pids.extend_from_slice(pids);
        Ok(exclusive)
    }
}

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
    exclusivity: ExclusivityCheck,
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
        // A cgroup scope's cumulative totals come from the same read of its files.
        let reader = match target {
            Target::Cgroup { .. } => CgroupReader::with_totals(roots),
            _ => CgroupReader::new(),
        };
        Self {
            cgroup,
            path: Arc::from(path.as_str()),
            reader,
            missing,
            pids: Vec::new(),
            exclusivity: ExclusivityCheck::new(),
            report_read_at: None,
        }
    }

    /// Reads the cgroup counters into `values` (the values behind Relay's fields, when they
    /// apply) and `reports` (for `extensions.cgroups`). `epoch`, read before this call, lets
    /// an unchanged membership skip the exclusivity check.
    #[expect(
        clippy::too_many_arguments,
        reason = "one pass's inputs and its two outputs, all distinct"
    )]
    pub(super) fn read(
        &mut self,
        config: &ResourceMetricsConfig,
        target: &Target,
        processes: &ProcessPass,
        epoch: Option<CgroupEpoch>,
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
                match self.exclusivity.owns_exclusively(cgroup, &self.pids, epoch) {
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

    /// The cumulative totals' values of this pass's read of a cgroup scope's cgroup.
    pub(super) fn totals(&self) -> Option<ScopeTotals<'_>> {
        self.reader.totals()
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
        memory_high_events: sample.memory.events.high,
        memory_max_events: sample.memory.events.max,
        memory_oom_events: sample.memory.events.oom,
        memory_oom_kills: sample.memory.events.oom_kill,
        pids_max_events: sample.pids.max_events,
        cpu_pressure: pressure(sample.pressure.cpu),
        memory_pressure: pressure(sample.pressure.memory),
        usage_ns: sample.cpu.usage_ns,
        user_usec: sample.cpu.user_usec,
        system_usec: sample.cpu.system_usec,
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
        memory_events: sample.memory.events,
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

#[cfg(test)]
mod tests {
    use super::super::test_fixtures::cgroup_v2_machine as fixture;
    use super::*;
    use std::path::Path;

    const MEASURED: [u32; 2] = [4242, 4243];

    fn epoch(processes_created: u64) -> Option<CgroupEpoch> {
        Some(CgroupEpoch {
            processes_created,
            processes_exited: 0,
            cgroup_migrations: 0,
            clone_into_cgroup: 0,
        })
    }

    /// A foreign process joins the cgroup without the epoch moving.
    fn add_foreign_process(dir: &Path) {
        let procs = dir.join("sys/fs/cgroup/relay-test/cgroup.procs");
        std::fs::write(procs, "4242\n77\n").unwrap();
    }

    #[test]
    fn a_verdict_is_reused_while_the_epoch_and_the_pids_stand_still() {
        let (dir, target) = fixture();
        let mut check = ExclusivityCheck::new();
        assert!(check
            .owns_exclusively(&target, &MEASURED, epoch(1))
            .unwrap());
        add_foreign_process(dir.path());
        // Nothing was counted, so nothing is read: the verdict stands.
        assert!(check
            .owns_exclusively(&target, &MEASURED, epoch(1))
            .unwrap());
        // A counted change: checked again.
        assert!(!check
            .owns_exclusively(&target, &MEASURED, epoch(2))
            .unwrap());
    }

    #[test]
    fn other_measured_pids_or_no_epoch_are_checked_again() {
        let (dir, target) = fixture();
        let mut check = ExclusivityCheck::new();
        assert!(check
            .owns_exclusively(&target, &MEASURED, epoch(1))
            .unwrap());
        // A third measured process that is not in the cgroup: not exclusive any more.
        assert!(!check
            .owns_exclusively(&target, &[4242, 4243, 5000], epoch(1))
            .unwrap());
        let mut without = ExclusivityCheck::new();
        assert!(without.owns_exclusively(&target, &MEASURED, None).unwrap());
        add_foreign_process(dir.path());
        assert!(!without.owns_exclusively(&target, &MEASURED, None).unwrap());
    }

    #[test]
    fn a_verdict_older_than_the_recheck_interval_is_checked_again() {
        let (dir, target) = fixture();
        let mut check = ExclusivityCheck::new();
        check.recheck_after = Duration::ZERO;
        assert!(check
            .owns_exclusively(&target, &MEASURED, epoch(1))
            .unwrap());
        add_foreign_process(dir.path());
        assert!(!check
            .owns_exclusively(&target, &MEASURED, epoch(1))
            .unwrap());
    }

    #[test]
    fn a_failed_check_is_not_remembered() {
        let (dir, target) = fixture();
        let mut check = ExclusivityCheck::new();
        assert!(check
            .owns_exclusively(&target, &MEASURED, epoch(1))
            .unwrap());
        std::fs::remove_dir_all(dir.path().join("sys/fs/cgroup/relay-test")).unwrap();
        // The held directory still reads on a fixture; a changed epoch checks, and the
        // removed cgroup's error is returned rather than the old verdict.
        assert!(check
            .owns_exclusively(&target, &MEASURED, epoch(2))
            .is_err());
        assert!(check.verdict.is_none());
    }
}
