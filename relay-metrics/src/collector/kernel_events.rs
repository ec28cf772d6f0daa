//! Kernel event counters for the measured processes, from the eBPF programs.
//!
//! The programs are loaded once per collector. Process trees and cgroups are tracked in the
//! kernel as scopes (every process a member creates joins the scope; processes that joined or
//! left between two listings are added or removed), so the scope's creations, exits, OOM kills,
//! run-queue delay, preemptions and reclaim stalls are counted as they happen, even for processes
//! that live between two snapshots, and never go down when a member exits. They are read from a
//! memory-mapped array: no syscall per tick, however many processes the scope has. A single
//! process is read from its own per-process counters.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::ResourceMetricsConfig;
use crate::model::ProcessPass;
use crate::snapshot::{KernelEvents, OomVictim};
use crate::source::ebpf::{
    EbpfCounters, EbpfOptions, EbpfReadError, EbpfSource, EbpfUnavailable, GlobalStats, ScopeId,
};
use crate::source::Roots;

use super::environment::CgroupEpoch;
use super::processes::{MachineEpoch, TreeEpoch};
use super::Target;

/// Recent OOM victims kept per snapshot.
const RECENT_VICTIMS: usize = 16;

pub(super) struct KernelEventFeed {
    source: Option<EbpfSource>,
    /// Why the event source is off, when it is.
    off_reason: Option<Arc<str>>,
    /// When the programs started counting (the maps are created with the collector).
    loaded_at: DateTime<Utc>,
    tracking: ScopeTracking,
    /// The tree has been tracked since the collector started, without a failure since.
    tracked_throughout: bool,
    /// Userspace vouched that the root had created nothing before (see
    /// [`KernelEventFeed::count_from_root_start`]).
    root_fresh: bool,
    counters: EbpfCounters,
    /// Pids of the previous pass (sorted): an OOM victim is in scope if it was one of them or
    /// is one of the current ones.
    previous_pids: Vec<u32>,
    current_pids: Vec<u32>,
    victims: Vec<OomVictim>,
    victims_seen: u64,
}

/// The eBPF programs of a collector's kernel events, being loaded on a thread of their own (see
/// [`crate::Collector::preload_kernel_events`]).
pub struct KernelEventsPreload {
    options: Option<EbpfOptions>,
    thread: Option<std::thread::JoinHandle<Loaded>>,
}

/// A load's outcome, and when it ended (the programs count from then on).
type Loaded = (Result<EbpfSource, EbpfUnavailable>, DateTime<Utc>);

impl std::fmt::Debug for KernelEventsPreload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelEventsPreload")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl KernelEventsPreload {
    pub(super) fn start(config: &ResourceMetricsConfig, roots: &Roots) -> Self {
        let options = ebpf_options(
            config,
            roots,
            !matches!(
                config.measurement_scope,
                crate::config::ScopeSetting::ApplicationProcess
            ),
        );
        let thread = options.clone().and_then(|options| {
            std::thread::Builder::new()
                .name("relay-metrics-ebpf-load".into())
                .spawn(move || (EbpfSource::load(&options), Utc::now()))
                .inspect_err(|error| {
                    tracing::debug!("eBPF programs not preloaded (no thread: {error})");
                })
                .ok()
        });
        Self { options, thread }
    }

    /// The load's outcome when it was made with `options` (a load for other options is
    /// dropped: its programs are detached).
    fn take(mut self, options: &EbpfOptions) -> Option<Loaded> {
        let made = self.options.as_ref()?;
        let same = made.roots == options.roots
            && made.tracked_only == options.tracked_only
            && made.max_recent_oom_victims == options.max_recent_oom_victims;
        let loaded = self.thread.take()?.join().ok()?;
        same.then_some(loaded)
    }
}

/// What the eBPF programs are loaded with for a collector of `config`, or `None` when its
/// kernel events are off. `tree_or_wider`: the target is not a single process.
fn ebpf_options(
    config: &ResourceMetricsConfig,
    roots: &Roots,
    tree_or_wider: bool,
) -> Option<EbpfOptions> {
    config.extensions.kernel_events.then(|| EbpfOptions {
        roots: roots.clone(),
        max_recent_oom_victims: 64,
        // Only a single process is read from its own per-process counters; a tree or a
        // cgroup is read from its scope, and global reads no scheduler counter.
        // Cgroups measured one by one read every member process's counters.
        tracked_only: tree_or_wider
            && config.extensions.cgroups.is_empty()
            && config.extensions.cgroup_depth.is_none(),
    })
}

impl KernelEventFeed {
    /// Loads the programs for `target`, or takes them from `preload` when it loaded them
    /// with the same options.
    pub(super) fn start(
        config: &ResourceMetricsConfig,
        roots: &Roots,
        target: &Target,
        preload: Option<KernelEventsPreload>,
    ) -> Self {
        let options = ebpf_options(
            config,
            roots,
            !matches!(target, Target::Process { tree: false, .. }),
        );
        let (mut source, off_reason, loaded_at) = match options {
            None => (
                None,
                Some(Arc::from("off: extensions.kernel_events = false (also set by the CLI for a single snapshot without --interval-ms, which would only count from its own start)")),
                Utc::now(),
            ),
            Some(options) => {
                let (loaded, loaded_at) = preload
                    .and_then(|preload| preload.take(&options))
                    .unwrap_or_else(|| (EbpfSource::load(&options), Utc::now()));
                match loaded {
                    Ok(source) => {
                        let failed: Vec<String> = source
                            .status()
                            .iter()
                            .filter(|status| {
                                !matches!(
                                    status.state,
                                    crate::source::ebpf::ProgramState::Attached
                                )
                            })
                            .map(|status| format!("{}: {:?}", status.spec.program, status.state))
                            .collect();
                        let reason = (!failed.is_empty()).then(|| {
                            Arc::from(format!("some programs are off: {}", failed.join("; ")))
                        });
                        (Some(source), reason, loaded_at)
                    }
                    Err(error) => (None, Some(Arc::from(error.to_string())), loaded_at),
                }
            }
        };
        let mut tracking = ScopeTracking::default();
        // A tree is tracked from its root right away, so processes it creates before the first
        // snapshot are counted too.
        if let (
            Some(source),
            Target::Process {
                pid, tree: true, ..
            },
        ) = (&mut source, target)
        {
            tracking.update(source, &[*pid], true);
        }
        let tracked_throughout = tracking.scope.is_some();
        Self {
            source,
            off_reason,
            loaded_at,
            tracking,
            tracked_throughout,
            root_fresh: false,
            counters: EbpfCounters::default(),
            previous_pids: Vec::new(),
            current_pids: Vec::new(),
            victims: Vec::new(),
            victims_seen: 0,
        }
    }

    /// The loaded programs, if any.
    pub(super) fn source(&self) -> Option<&EbpfSource> {
        self.source.as_ref()
    }

    /// Declares that the tree's root has created no process yet (it was started stopped), so
    /// that the tree's counts since the collector started are its lifetime counts.
    pub(super) fn count_from_root_start(&mut self) {
        self.root_fresh = true;
    }

    /// True while the kernel's counts of the tree cover its whole life: the root was fresh
    /// when tracking started, and tracking has never missed a member since.
    pub(super) fn counts_whole_tree_life(&self) -> bool {
        self.root_fresh && self.tracked_throughout
    }

    /// The tracked tree's epoch (see [`TreeEpoch`]), when the kernel counts every change of its
    /// membership: the scope is tracked without error and both the creation and the exit
    /// program run with the fields they need. Reads mapped memory: no syscall.
    pub(super) fn tree_epoch(&self) -> Option<TreeEpoch> {
        let (Some(source), Some(scope)) = (&self.source, self.tracking.scope) else {
            return None;
        };
        if self.off_reason.is_some()
            || self.tracking.reason.is_some()
            || !counts_creations_and_exits(source)
        {
            return None;
        }
        let stats = source.scope(scope).ok()?;
        let global = source.global().ok()?;
        Some(TreeEpoch {
            processes_created: stats.processes_created,
            processes_exited: stats.processes_exited,
            members_added: self.tracking.members_added,
            insert_failures: global.map_insert_failures,
        })
    }

    /// The machine-wide counts of the events that change any cgroup's membership (see
    /// [`CgroupEpoch`]), when the programs that count them all run. Reads mapped memory.
    pub(super) fn cgroup_epoch(&self) -> Option<CgroupEpoch> {
        let source = self.source.as_ref()?;
        if !counts_creations_and_exits(source) || !source.is_attached("cgroup_attach_task") {
            return None;
        }
        let global = source.global().ok()?;
        Some(CgroupEpoch {
            processes_created: global.processes_created,
            processes_exited: global.processes_exited,
            cgroup_migrations: global.cgroup_migrations,
            clone_into_cgroup: global.clone_into_cgroup,
        })
    }

    /// The machine-wide counts of processes created and exited (see [`MachineEpoch`]), when
    /// the programs that count them run. Reads mapped memory.
    pub(super) fn machine_epoch(&self) -> Option<MachineEpoch> {
        let source = self.source.as_ref()?;
        if !counts_creations_and_exits(source) {
            return None;
        }
        let global = source.global().ok()?;
        Some(MachineEpoch {
            processes_created: global.processes_created,
            processes_exited: global.processes_exited,
        })
    }

    /// The machine-wide count of cgroup directories made, removed or renamed, when the programs
    /// that count them all run. Reads mapped memory.
    pub(super) fn cgroup_dir_changes(&self) -> Option<u64> {
        let source = self.source.as_ref()?;
        let counted = ["cgroup_mkdir", "cgroup_rmdir", "cgroup_rename"]
            .iter()
            .all(|program| source.is_attached(program));
        counted
            .then(|| source.global().ok())
            .flatten()
            .map(|global| global.cgroup_dir_changes)
    }

    /// Fills `out` with the counters of the processes of this pass.
    pub(super) fn fill(
        &mut self,
        target: &Target,
        processes: &ProcessPass,
        out: &mut KernelEvents,
    ) {
        if self.source.is_none() {
            *out = KernelEvents {
                active: false,
                reason: self.off_reason.clone(),
                ..Default::default()
            };
            return;
        };
        out.active = true;
        self.take_pids(processes);
        let tracked = matches!(
            target,
            Target::Process { tree: true, .. } | Target::Cgroup { .. }
        );
        // A listing that missed processes must not make them leave.
        let complete = matches!(processes, ProcessPass::Sampled(set) if set.incomplete.is_none());
        if tracked {
            self.update_members(complete);
        }
        out.reason.clone_from(match &self.off_reason {
            Some(_) => &self.off_reason,
            None => &self.tracking.reason,
        });
        // A count that missed events once no longer covers the tree's whole life.
        self.tracked_throughout &= out.reason.is_none();
        out.counting_since = Some(match self.tracking.since {
            Some(since) if tracked => since,
            _ => self.loaded_at,
        });
        let source = match &mut self.source {
            Some(source) => source,
            None => return,
        };
        // Global scope: summing every process's counters would cost a lookup per process
        // per snapshot; machine-wide counts come from the programs' global map instead.
        let scope = self.tracking.scope;
        let read = match (target, scope) {
            (Target::Global, _) => Ok(()),
            (_, Some(scope)) => source.scope_counters(scope, &mut self.counters),
            (_, None) => source.tgid_counters(&self.current_pids, &mut self.counters),
        };
        if let Err(error) = read {
            out.active = false;
            out.reason = Some(Arc::from(error.to_string()));
            return;
        }
        // Untracked processes' scheduler events are not counted when the programs count only
        // tracked ones: without a scope (tracking failed, with its reason), the per-process
        // sums would read zeros.
        let scheduler_counted = !matches!(target, Target::Global)
            && (scope.is_some() || !source.tracks_only_scopes() || self.current_pids.is_empty());
        fill_counts(
            out,
            target,
            scope,
            &self.counters,
            source.global().ok(),
            scheduler_counted,
        );
        if source.drain_oom_victims() > 0 || self.victims_seen != source.oom_victims_drained() {
            self.victims_seen = source.oom_victims_drained();
            // The kernel tags a victim with its tracked scope; a victim that was never tracked
            // is in scope if this pass or the previous one saw it.
            let in_scope = |victim: &crate::source::ebpf::OomVictim| {
                matches!(target, Target::Global)
                    || (victim.scope.is_some() && victim.scope == scope)
                    || self.previous_pids.binary_search(&victim.pid).is_ok()
                    || self.current_pids.binary_search(&victim.pid).is_ok()
            };
            let in_scope = source.recent_oom_victims().filter(|v| in_scope(v));
            remember_victims(in_scope, &mut self.victims);
        }
        out.recent_oom_victims.clone_from(&self.victims);
    }

    /// The pids of this pass, sorted; the previous pass's kept in `previous_pids`.
    fn take_pids(&mut self, processes: &ProcessPass) {
        std::mem::swap(&mut self.previous_pids, &mut self.current_pids);
        self.current_pids.clear();
        if let ProcessPass::Sampled(set) = processes {
            self.current_pids
                .extend(set.processes.iter().map(|p| p.pid));
            self.current_pids.sort_unstable();
        }
    }

    /// Keeps the kernel's scope in step with the listing (see [`ScopeTracking::update`]).
    fn update_members(&mut self, complete: bool) {
        if let Some(source) = &mut self.source {
            self.tracking.update(source, &self.current_pids, complete);
        }
    }
}

/// The event counts of `target` in `out`: from `counters` (its processes' or its scope's) or,
/// machine-wide, from the programs' global map (`global_stats`).
fn fill_counts(
    out: &mut KernelEvents,
    target: &Target,
    scope: Option<ScopeId>,
    counters: &EbpfCounters,
    global_stats: Option<GlobalStats>,
    scheduler_counted: bool,
) {
    let per_process = !matches!(target, Target::Global);
    out.processes_created = match target {
        // The maps are created with the collector: the count starts at its start.
        Target::Global => global_stats.map(|stats| stats.processes_created),
        // One process: the processes it created.
        Target::Process { tree: false, .. } => Some(counters.processes_created),
        _ => scope.map(|_| counters.processes_created),
    };
    out.processes_exited = match target {
        Target::Global => global_stats.map(|stats| stats.processes_exited),
        _ => scope.map(|_| counters.processes_exited),
    };
    out.oom_kills = match target {
        Target::Global => global_stats.map(|stats| stats.oom_kills),
        _ => scope.map(|_| counters.oom_kills),
    };
    out.involuntary_switches = scheduler_counted.then_some(counters.involuntary_switches);
    out.run_queue_delay_count = scheduler_counted.then_some(counters.runq_delay.count);
    out.run_queue_delay_total_ns = scheduler_counted.then_some(counters.runq_delay.total_ns);
    match (&mut out.run_queue_delay_log2_ns, scheduler_counted) {
        (Some(histogram), true) => {
            histogram.clear();
            histogram.extend_from_slice(&counters.runq_delay.hist);
        }
        (slot, true) => *slot = Some(counters.runq_delay.hist.to_vec()),
        (slot, false) => *slot = None,
    }
    out.reclaim_stall_count = per_process.then_some(counters.reclaim.count);
    out.reclaim_stall_total_ns = per_process.then_some(counters.reclaim.total_ns);
    out.ring_buffer_drops = global_stats.map(|g| g.oom_ringbuf_drops);
}

/// Adds the OOM victims in scope not yet in `victims`, which keeps the last [`RECENT_VICTIMS`].
fn remember_victims<'a>(
    in_scope: impl Iterator<Item = &'a crate::source::ebpf::OomVictim>,
    victims: &mut Vec<OomVictim>,
) {
    for victim in in_scope {
        if victims
            .iter()
            .any(|known| known.pid == victim.pid && known.time_ns == victim.time_boot_ns)
        {
            continue;
        }
        if victims.len() == RECENT_VICTIMS {
            victims.remove(0);
        }
        victims.push(OomVictim {
            pid: victim.pid,
            comm: Arc::from(victim.comm_str()),
            rss_kib: (victim.anon_rss_bytes + victim.file_rss_bytes + victim.shmem_rss_bytes)
                / 1024,
            time_ns: victim.time_boot_ns,
        });
    }
}

/// The kernel side of scope tracking: the eBPF maps, or a fake in tests.
trait ScopeMaps {
    fn track(&mut self, members: &[u32]) -> Result<ScopeId, EbpfReadError>;
    fn add(&mut self, scope: ScopeId, tgids: &[u32]) -> Result<(), EbpfReadError>;
    fn remove(&mut self, tgids: &[u32]) -> Result<(), EbpfReadError>;
}

impl ScopeMaps for EbpfSource {
    fn track(&mut self, members: &[u32]) -> Result<ScopeId, EbpfReadError> {
        self.track_tree(members)
    }

    fn add(&mut self, scope: ScopeId, tgids: &[u32]) -> Result<(), EbpfReadError> {
        self.add_to_scope(scope, tgids)
    }

    fn remove(&mut self, tgids: &[u32]) -> Result<(), EbpfReadError> {
        self.remove_from_scope(tgids)
    }
}

/// The kernel's scope of a tree or cgroup and what userspace knows of it.
#[derive(Default)]
struct ScopeTracking {
    scope: Option<ScopeId>,
    members: ScopeMembers,
    /// Processes put under kernel tracking by userspace so far (part of the tree epoch).
    members_added: u64,
    /// Why the kernel's scope does not match the listing, while it does not; cleared once the
    /// condition is gone.
    reason: Option<Arc<str>>,
    /// Listed processes that could not be added to the kernel's scope (not retried, so a full
    /// map costs no failing syscall per tick); the reason stays while one of them is listed.
    untracked: Vec<u32>,
    /// Processes that left the scope but could not be taken out of the kernel's (retried).
    pending_removals: Vec<u32>,
    /// When the kernel started counting the scope.
    since: Option<DateTime<Utc>>,
}

impl ScopeTracking {
    /// Keeps the kernel's scope in step with the sorted `listed` pids: the first pass's
    /// processes start the scope; later newcomers (processes moved into a measured cgroup) are
    /// added, and, after a `complete` listing, processes that are no longer listed (moved out,
    /// re-parented out of the tree) are removed. Exited processes were removed by the kernel
    /// already.
    fn update(&mut self, maps: &mut impl ScopeMaps, listed: &[u32], complete: bool) {
        let Some(scope) = self.scope else {
            // Tracking starts with the first listing that has members.
            if listed.is_empty() {
                return;
            }
            match maps.track(listed) {
                Ok(scope) => {
                    self.scope = Some(scope);
                    self.since = Some(Utc::now());
                    self.members.started(listed);
                    self.members_added += listed.len() as u64;
                    self.reason = None;
                }
                Err(error) => {
                    self.reason = Some(Arc::from(format!(
                        "cannot track the scope in the kernel: {error}"
                    )))
                }
            }
            return;
        };
        self.members.reconcile(listed, complete);
        let members = &self.members;
        let mut reason = None;
        if !members.joiners.is_empty() {
            self.members_added += members.joiners.len() as u64;
            if let Err(error) = maps.add(scope, &members.joiners) {
                self.untracked.extend_from_slice(&members.joiners);
                self.untracked.sort_unstable();
                self.untracked.dedup();
                reason = Some(format!("cannot track new processes in the kernel: {error}"));
            }
        }
        // A process that failed to join no longer matters once it is not listed any more.
        self.untracked
            .retain(|pid| listed.binary_search(pid).is_ok());
        if reason.is_none() && !self.untracked.is_empty() {
            reason = Some(format!(
                "{} listed processes could not be tracked in the kernel: their events are not counted",
                self.untracked.len()
            ));
        }
        self.pending_removals.extend_from_slice(&members.leavers);
        if !self.pending_removals.is_empty() {
            match maps.remove(&self.pending_removals) {
                Ok(()) => self.pending_removals.clear(),
                Err(error) => {
                    reason.get_or_insert_with(|| {
                        format!("cannot stop tracking processes that left the scope: {error}")
                    });
                }
            }
        }
        match (reason, &self.reason) {
            (None, _) => self.reason = None,
            // Unchanged: no new allocation per tick while a condition lasts.
            (Some(reason), Some(previous)) if **previous == *reason => {}
            (Some(reason), _) => self.reason = Some(Arc::from(reason)),
        }
    }
}

/// The processes userspace put into the kernel's scope and has not taken out, kept apart from
/// the previous pass's pids: after a pass whose listing was incomplete (a failed `cgroup.procs`
/// read, an unreadable root), a process that left during it is still removed after the next
/// complete listing. A failed add or remove is not retried (its reason is reported), so a full
/// map cannot cost a failing syscall per tick.
#[derive(Default)]
struct ScopeMembers {
    /// Sorted.
    pids: Vec<u32>,
    /// Listed in this pass but not members before it.
    joiners: Vec<u32>,
    /// Members before this pass that a complete listing no longer shows.
    leavers: Vec<u32>,
}

impl ScopeMembers {
    fn started(&mut self, pids: &[u32]) {
        self.pids.clear();
        self.pids.extend_from_slice(pids);
        self.pids.sort_unstable();
    }

    /// Computes this pass's joiners and leavers from its sorted `listed` pids, and takes them
    /// into the membership. An incomplete listing only adds: it cannot show who left.
    fn reconcile(&mut self, listed: &[u32], complete: bool) {
        missing_from(listed, &self.pids, &mut self.joiners);
        self.leavers.clear();
        if complete {
            missing_from(&self.pids, listed, &mut self.leavers);
            self.pids.clear();
            self.pids.extend_from_slice(listed);
        } else if !self.joiners.is_empty() {
            self.pids.extend_from_slice(&self.joiners);
            self.pids.sort_unstable();
        }
    }
}

/// Replaces `out` with the pids of `pids` that are not in `sorted`.
fn missing_from(pids: &[u32], sorted: &[u32], out: &mut Vec<u32>) {
    out.clear();
    out.extend(pids.iter().filter(|pid| sorted.binary_search(pid).is_err()));
}

/// True when the creation and exit programs run with the record fields they need, so that
/// every process creation and exit is counted.
fn counts_creations_and_exits(source: &EbpfSource) -> bool {
    let config = source.config();
    source.is_attached("task_newtask")
        && source.is_attached("sched_process_exit")
        && config.newtask_pid != relay_metrics_common::NO_FIELD
        && config.newtask_clone_flags != relay_metrics_common::NO_FIELD
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{EbpfReadError, ScopeId, ScopeMaps, ScopeMembers, ScopeTracking};

    /// The kernel's TRACKED map, with failures on demand.
    #[derive(Default)]
    struct FakeMaps {
        tracked: BTreeSet<u32>,
        fail_add: bool,
        fail_remove: bool,
        removals: usize,
    }

    impl ScopeMaps for FakeMaps {
        fn track(&mut self, members: &[u32]) -> Result<ScopeId, EbpfReadError> {
            self.tracked.extend(members);
            Ok(ScopeId::for_tests(0))
        }

        fn add(&mut self, _: ScopeId, tgids: &[u32]) -> Result<(), EbpfReadError> {
            if self.fail_add {
                return Err(EbpfReadError::MissingMap("TRACKED"));
            }
            self.tracked.extend(tgids);
            Ok(())
        }

        fn remove(&mut self, tgids: &[u32]) -> Result<(), EbpfReadError> {
            self.removals += 1;
            if self.fail_remove {
                return Err(EbpfReadError::MissingMap("TRACKED"));
            }
            for tgid in tgids {
                self.tracked.remove(tgid);
            }
            Ok(())
        }
    }

    fn reason(tracking: &ScopeTracking) -> String {
        tracking.reason.as_deref().unwrap_or_default().to_string()
    }

    #[test]
    fn a_failed_removal_is_retried_and_its_reason_clears_once_it_succeeds() {
        let mut maps = FakeMaps::default();
        let mut tracking = ScopeTracking::default();
        tracking.update(&mut maps, &[1, 2, 3], true);
        assert_eq!(reason(&tracking), "");
        maps.fail_remove = true;
        tracking.update(&mut maps, &[1, 3], true);
        assert!(
            reason(&tracking).starts_with("cannot stop tracking processes that left the scope"),
            "{}",
            reason(&tracking)
        );
        // Still failing: the same reason, retried each pass.
        tracking.update(&mut maps, &[1, 3], true);
        assert_eq!(maps.removals, 2);
        assert!(tracking.reason.is_some());
        maps.fail_remove = false;
        tracking.update(&mut maps, &[1, 3], true);
        assert_eq!(tracking.reason, None);
        assert_eq!(maps.tracked, BTreeSet::from([1, 3]));
        // Nothing pending any more: no removal call without leavers.
        tracking.update(&mut maps, &[1, 3], true);
        assert_eq!(maps.removals, 3);
    }

    #[test]
    fn a_process_that_could_not_join_keeps_the_reason_until_it_is_no_longer_listed() {
        let mut maps = FakeMaps::default();
        let mut tracking = ScopeTracking::default();
        tracking.update(&mut maps, &[1], true);
        maps.fail_add = true;
        tracking.update(&mut maps, &[1, 5], true);
        assert!(
            reason(&tracking).starts_with("cannot track new processes in the kernel"),
            "{}",
            reason(&tracking)
        );
        maps.fail_add = false;
        // Not retried (a full map would fail every tick), so it is still not counted.
        tracking.update(&mut maps, &[1, 5], true);
        assert!(
            reason(&tracking).contains("1 listed processes could not be tracked"),
            "{}",
            reason(&tracking)
        );
        tracking.update(&mut maps, &[1], true);
        assert_eq!(tracking.reason, None);
    }

    #[test]
    fn a_scope_that_empties_stops_tracking_its_last_members() {
        let mut maps = FakeMaps::default();
        let mut tracking = ScopeTracking::default();
        // Nothing is tracked before the scope has a member.
        tracking.update(&mut maps, &[], true);
        assert!(tracking.scope.is_none());
        tracking.update(&mut maps, &[4], true);
        assert_eq!(maps.tracked, BTreeSet::from([4]));
        // Its last member moved out: an empty listing takes it out of the kernel's scope.
        tracking.update(&mut maps, &[], true);
        assert_eq!(maps.tracked, BTreeSet::new());
        assert_eq!(tracking.reason, None);
    }

    const NONE: Vec<u32> = Vec::new();

    fn reconciled(members: &mut ScopeMembers, listed: &[u32], complete: bool) -> [Vec<u32>; 2] {
        members.reconcile(listed, complete);
        [members.joiners.clone(), members.leavers.clone()]
    }

    #[test]
    fn a_complete_listing_adds_the_newcomers_and_removes_the_unlisted() {
        let mut members = ScopeMembers::default();
        members.started(&[10, 3]);
        assert_eq!(reconciled(&mut members, &[3, 7, 10], true), [vec![7], NONE]);
        assert_eq!(
            reconciled(&mut members, &[7, 12], true),
            [vec![12], vec![3, 10]]
        );
        assert_eq!(members.pids, [7, 12]);
        assert_eq!(reconciled(&mut members, &[7, 12], true), [NONE, NONE]);
    }

    #[test]
    fn a_process_that_leaves_during_an_incomplete_listing_is_removed_after_the_next_complete_one() {
        let mut members = ScopeMembers::default();
        members.started(&[1, 2, 3]);
        // Process 2 left and 4 joined, but the listing missed processes: it can only add.
        assert_eq!(reconciled(&mut members, &[1, 4], false), [vec![4], NONE]);
        assert_eq!(members.pids, [1, 2, 3, 4]);
        // The next complete listing no longer shows 2 (compared with the previous pass's
        // pids, [1, 4], it would look like 2 was never there).
        assert_eq!(reconciled(&mut members, &[1, 3, 4], true), [NONE, vec![2]]);
        assert_eq!(members.pids, [1, 3, 4]);
    }
}
