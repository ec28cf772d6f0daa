//! The collector: reads every source into a [`Sample`], then lets the pure model turn it into a
//! snapshot. Data flows one way: sources → sample → model → snapshot → outputs.
//!
//! ```
//! use relay_metrics::{Collector, ResourceMetricsConfig};
//!
//! // The calling process and its children (Relay's default scope), CPU and memory only.
//! let config = ResourceMetricsConfig::from_text(
//!     r#"{"disk": {"enabled": false}, "gpu": {"enabled": false}, "network": {"enabled": false}}"#,
//! )?;
//! let mut collector = Collector::new(config)?;
//! let first = collector.collect();
//! let second = collector.collect(); // rates are relative to `first`
//! let cpu = second.cpu.as_ref().expect("the cpu category is enabled");
//! assert!(cpu.total_time.is_some());
//! println!("{}", serde_json::to_string_pretty(&*second)?);
//! # drop(first);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cumulative;
mod environment;
mod gpu;
mod kernel_events;
mod lifetime;
pub(crate) mod processes;
#[cfg(test)]
pub(crate) use processes::{assert_paths_agree_on_stopped_processes, IterTestScope};
mod reasons;
mod system_wide;
mod target;
pub(crate) mod targets;
#[cfg(test)]
mod test_fixtures;

pub(crate) use target::Target;

use std::borrow::Cow;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;

use crate::config::{ConfigError, ResourceMetricsConfig};
use crate::model::{self, Baselines, Sample};
use crate::snapshot::{
    CollectorInfo, MeasurementScope, ResourceMetricsSnapshot, SamplerInfo, TargetInfo,
};
use crate::source::cgroup::{CgroupLayout, CgroupTarget};
use crate::source::system::{SystemFields, SystemReader, SystemSample};
use crate::source::Roots;

pub use cumulative::ReapedProcess;
use environment::Environment;
use gpu::GpuFeed;
use kernel_events::KernelEventFeed;
pub use kernel_events::KernelEventsPreload;
use lifetime::OomKillCount;
use processes::{ListingEpoch, ProcessPassReader};
use reasons::Reasons;
use system_wide::SystemWide;

/// A collector that cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The target (pid, cgroup) does not exist or cannot be read.
    #[error("{0}")]
    Target(String),
    /// An [`AsyncCollector`] whose previous collection panicked (its state is not trusted).
    #[error("a previous collection panicked")]
    Poisoned,
    /// An [`AsyncCollector`]'s collection task did not finish (the runtime shut down).
    #[error("collection task failed: {0}")]
    Task(String),
}

/// Collects snapshots of one target with one configuration. Rate baselines belong to the
/// collector: each collector is one series.
///
/// Steady state allocates nothing: files stay open, buffers and the sample are reused, and the
/// snapshot is rebuilt in place when the previous one is no longer shared.
pub struct Collector {
    config: ResourceMetricsConfig,
    target: Target,
    target_info: TargetInfo,
    processes: ProcessPassReader,
    system: SystemReader,
    system_sample: SystemSample,
    system_wide: SystemWide,
    cpu_mode_floor: processes::CpuModeFloor,
    environment: Environment,
    gpu: GpuFeed,
    kernel: KernelEventFeed,
    oom_kill_count: OomKillCount,
    accounting: cumulative::Accounting,
    targets: Option<targets::TargetSet>,
    reasons: Reasons,
    sample: Sample,
    baselines: Baselines,
    /// The last snapshot and the one before it, whose memory the next snapshot is written into
    /// once nobody else holds it: a consumer that keeps the last one until the next arrives
    /// (the agent's publication) leaves the one before it free.
    recent: [Option<Arc<ResourceMetricsSnapshot>>; 2],
    sequence: u64,
    /// CPUs online when the collector started.
    online_cpus: Option<u32>,
}

impl Collector {
    /// A collector of the running system, validated.
    pub fn new(config: ResourceMetricsConfig) -> Result<Self, CollectorError> {
        Self::with_roots(config, Roots::host())
    }

    /// Starts loading the eBPF programs of the kernel events that a collector of `config`
    /// needs, on a thread of its own, so that the caller can prepare its target meanwhile
    /// (`relay-metrics run` starts its command and cgroup while the programs load). Hand it to
    /// [`Self::with_preload`]. The programs count from the end of the load; a collector whose
    /// configuration needs them loaded otherwise loads its own.
    pub fn preload_kernel_events(config: &ResourceMetricsConfig) -> KernelEventsPreload {
        KernelEventsPreload::start(config, &Roots::host())
    }

    /// [`Self::new`], with the eBPF programs of `preload` (waits for their load to end).
    pub fn with_preload(
        config: ResourceMetricsConfig,
        preload: KernelEventsPreload,
    ) -> Result<Self, CollectorError> {
        Self::with_roots_and_preload(config, Roots::host(), Some(preload), None)
    }

    /// [`Self::with_preload`] for the cgroup `made` (the scope must be `cgroup`, its path
    /// `made`'s): only the directories made are read, whose paths may differ per hierarchy.
    pub fn with_preload_in(
        config: ResourceMetricsConfig,
        preload: KernelEventsPreload,
        made: &crate::internals::cgroup::NestedCgroup,
    ) -> Result<Self, CollectorError> {
        Self::with_roots_and_preload(config, Roots::host(), Some(preload), Some(made.target()))
    }

    /// A collector reading `/proc` and `/sys` from `roots` (fixture trees in tests).
    pub(crate) fn with_roots(
        config: ResourceMetricsConfig,
        roots: Roots,
    ) -> Result<Self, CollectorError> {
        Self::with_roots_and_preload(config, roots, None, None)
    }

    fn with_roots_and_preload(
        config: ResourceMetricsConfig,
        roots: Roots,
        preload: Option<KernelEventsPreload>,
        made: Option<CgroupTarget>,
    ) -> Result<Self, CollectorError> {
        config.validate()?;
        let layout = CgroupLayout::discover(&roots).ok();
        let target = match made {
            Some(resolved) => Target::made(&config, resolved)?,
            None => Target::resolve(&config, &roots, layout.as_ref())?,
        };
        let scope = target.scope();
        let wanted = model::Wanted::from_config(&config, scope);
        let processes = ProcessPassReader::new(&roots, &config, &target, wanted)?;
        let targets = targets::TargetSet::new(&config, &roots, layout.as_ref())
            .map_err(CollectorError::Target)?;
        let environment = Environment::new(&roots, layout.as_ref(), &target);
        let gpu = GpuFeed::start(&config, &roots);
        let kernel = KernelEventFeed::start(&config, &roots, &target, preload);
        let target_info = match &target {
            Target::Global => TargetInfo::default(),
            Target::Process { pid, .. } => TargetInfo {
                root_pid: Some(*pid),
                cgroup_path: None,
            },
            Target::Cgroup { path, .. } => TargetInfo {
                root_pid: None,
                cgroup_path: Some(Arc::from(path.as_str())),
            },
        };
        Ok(Self {
            system: SystemReader::new(&roots),
            system_sample: SystemSample::default(),
            system_wide: SystemWide::new(&config, &roots),
            cpu_mode_floor: Default::default(),
            online_cpus: crate::source::system::online_cpus(&roots),
            oom_kill_count: OomKillCount::new(&roots),
            accounting: cumulative::Accounting::new(&roots, &target),
            targets,
            sample: Sample::empty(scope),
            config,
            target,
            target_info,
            processes,
            environment,
            gpu,
            kernel,
            reasons: Reasons::default(),
            baselines: Baselines::default(),
            recent: [None, None],
            sequence: 0,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &ResourceMetricsConfig {
        &self.config
    }

    /// The scope this collector measures (the configured one, with `runtime_default` resolved).
    pub fn scope(&self) -> MeasurementScope {
        self.target.scope()
    }

    /// How many collects listed the target's processes. A process tree tracked by the eBPF
    /// programs is walked again only after the kernel counted a creation or exit in it (or a
    /// member vanished or changed parent); the other collects reuse the previous walk.
    pub(crate) fn process_listings(&self) -> u64 {
        self.processes.listings()
    }

    /// Declares that the root process has created no process yet: it was started stopped and
    /// is resumed only after this call (as `relay-metrics run` does). The kernel's counts of
    /// the tree since this collector started then cover the tree's whole life, and fill
    /// `process.lifetime_creation_count` and, without the cgroup's own counters, the tree's
    /// out-of-memory counts; otherwise those are `null` in process scopes (the counts from the
    /// collector's start stay in `extensions.kernel_events`). Has no effect in other scopes or
    /// without kernel events.
    pub fn count_from_root_start(&mut self) {
        self.kernel.count_from_root_start();
        self.accounting.count_from_start(Utc::now());
    }

    /// Declares that the target (a cgroup made for it, or a root process started stopped) has
    /// consumed nothing yet: `extensions.cumulative` then counts from zero since this call,
    /// instead of from the first snapshot. [`Self::count_from_root_start`] implies it.
    pub fn count_cumulative_from_start(&mut self) {
        self.accounting.count_from_start(Utc::now());
    }

    /// Declares that the caller adopts the tree's orphans (it is a child subreaper of the root)
    /// and reports each one it reaps with [`Self::add_reaped`]: the process-tree totals of
    /// `extensions.cumulative` then lose nothing to reparenting. The tree's walk then also
    /// starts from the caller's children outside its process group (the orphans it adopted;
    /// its own helpers stay in its group), so that an orphan is sampled, with its descendants,
    /// until it is reaped.
    pub fn reaps_orphans(&mut self) {
        self.accounting.reaps_orphans();
        self.processes.walk_adopted_orphans();
    }

    /// Adds a process of the tree that the caller reaped itself (an adopted orphan), as
    /// `wait4` reported it, to `extensions.cumulative`.
    pub fn add_reaped(&mut self, reaped: &ReapedProcess) {
        self.accounting.add_reaped(reaped);
    }

    /// Puts `note` first in `extensions.cumulative.reason` (e.g. why a cgroup of one's own
    /// could not be used).
    pub fn note_cumulative(&mut self, note: &str) {
        self.accounting.note(note);
    }

    /// Why the last snapshot has no target any more: its root process exited or its pid now
    /// belongs to another process. Such a snapshot is all `null`, and so will every later one
    /// be: the process is not looked for again.
    pub fn target_gone(&self) -> Option<&str> {
        match &self.sample.processes {
            model::ProcessPass::RootUnavailable(reason) => Some(reason),
            _ => None,
        }
    }

    /// Takes one snapshot. Never fails: whatever cannot be read becomes `null`, with a reason
    /// in `extensions.unavailable`.
    pub fn collect(&mut self) -> Arc<ResourceMetricsSnapshot> {
        self.collect_inner(None)
    }

    /// Takes one snapshot of a fixed-rate series, recording the tick in `extensions.sampler`.
    pub fn collect_with_sampler(&mut self, sampler: SamplerInfo) -> Arc<ResourceMetricsSnapshot> {
        self.collect_inner(Some(sampler))
    }

    /// Snapshots at a fixed rate: the first at once, then one per `period` on absolute
    /// deadlines (no drift). Ticks missed because a collection overran are skipped and counted
    /// in `extensions.sampler`, never fired in a burst. The iterator never ends.
    ///
    /// ```
    /// # use relay_metrics::{Collector, ResourceMetricsConfig};
    /// # let mut collector = Collector::new(ResourceMetricsConfig::default())?;
    /// for snapshot in collector.every(std::time::Duration::from_millis(10)).take(3) {
    ///     assert!(snapshot.extensions.sampler.is_some());
    /// }
    /// # Ok::<(), relay_metrics::CollectorError>(())
    /// ```
    pub fn every(&mut self, period: std::time::Duration) -> FixedRateSnapshots<'_> {
        FixedRateSnapshots {
            ticker: crate::sampler::FixedRate::new(Instant::now(), period),
            collector: self,
        }
    }

    fn collect_inner(&mut self, sampler: Option<SamplerInfo>) -> Arc<ResourceMetricsSnapshot> {
        let started = Instant::now();
        self.sample();
        let mut shared = take_reusable(&mut self.recent);
        self.sequence += 1;
        if let Some(snapshot) = Arc::get_mut(&mut shared) {
            model::derive_into(
                &self.config,
                &mut self.sample,
                &mut self.baselines,
                Utc::now(),
                snapshot,
            );
            let extensions = &mut snapshot.extensions;
            // Before the cost is taken: it is part of the collect.
            let cgroup_cpu = self
                .config
                .cpu
                .enabled
                .then_some(self.sample.cgroup.as_ref())
                .flatten()
                .map(|cgroup| (cgroup.usage_ns, cgroup.user_usec, cgroup.system_usec));
            self.accounting.fill(
                &self.sample,
                self.system_sample.stat.as_ref(),
                cgroup_cpu,
                self.environment.totals(),
                &mut extensions.cumulative,
            );
            // node_cpu_seconds_total (cAdvisor naming, global scope): every mode per CPU.
            let global = matches!(self.target, Target::Global);
            if global
                && self.config.cpu.enabled
                && self.config.extensions.metric_names == crate::config::MetricNames::Cadvisor
            {
                let hz = self.sample.clock_ticks_per_second;
                let ticks = self.cpu_mode_floor.apply(&self.system_sample.per_cpu, hz);
                let modes = extensions.cpu_modes.get_or_insert_with(Vec::new);
                processes::cpu_mode_seconds(ticks, hz, modes);
            }
            extensions.collector = self.collector_info(started);
            extensions.target.clone_from(&self.target_info);
            extensions.sampler = sampler;
        }
        self.recent[0] = Some(Arc::clone(&shared));
        shared
    }

    /// `extensions.collector` for a collection that began at `started`.
    fn collector_info(&self, started: std::time::Instant) -> CollectorInfo {
        let (process_source, process_source_reason) = self.processes.process_source();
        let rule = self
            .targets
            .as_ref()
            .map(targets::TargetSet::rule_counts)
            .unwrap_or_default();
        let cgroup_source = self.targets.as_ref().map(targets::TargetSet::cgroup_source);
        CollectorInfo {
            name: Cow::Borrowed("relay-metrics"),
            version: Cow::Borrowed(env!("CARGO_PKG_VERSION")),
            sequence: self.sequence,
            collect_duration_usec: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            online_cpus: self.online_cpus,
            process_source: Cow::Borrowed(process_source),
            process_source_reason: process_source_reason.cloned(),
            unchanged_rule_misses: rule.misses,
            unchanged_reused_reads: rule.reused_reads,
            cgroup_source: cgroup_source.map(|(source, _)| Cow::Borrowed(source)),
            cgroup_source_reason: cgroup_source.and_then(|(_, reason)| reason.cloned()),
        }
    }

    /// Reads every source once, into the reused sample.
    fn sample(&mut self) {
        let sample = &mut self.sample;
        let reasons = &mut self.reasons;
        reasons.begin();
        let previous = std::mem::take(&mut sample.processes);
        self.processes.recycle(previous);
        // Before the listing: a change counted after this read makes the next pass list again.
        let cgroup_epoch = self.kernel.cgroup_epoch();
        if let Some(targets) = &mut self.targets {
            // Before the task iterator's pass: an entry counted after it shows at the next one.
            targets.entries_before_pass(
                cgroup_epoch
                    .as_ref()
                    .map(environment::CgroupEpoch::cgroup_entries),
            );
            targets.dir_changes_before_walk(self.kernel.cgroup_dir_changes());
        }
        let listing_epoch = match self.target {
            Target::Process { tree: true, .. } => self.kernel.tree_epoch().map(ListingEpoch::Tree),
            Target::Cgroup { .. } => cgroup_epoch.map(ListingEpoch::Cgroup),
            Target::Global => self.kernel.machine_epoch().map(ListingEpoch::Machine),
            Target::Process { tree: false, .. } => None,
        };
        sample.processes = self.processes.read(&self.target, listing_epoch, reasons);
        sample.instant = Instant::now();
        sample.boottime_ns = boottime_ns();
        sample.clock_ticks_per_second = self.processes.clock_ticks_per_second();
        sample.private_memory_age_ms = self.processes.private_memory_age_ms();

        // Machine CPU and pressure feed only the global scope; system memory is machine-wide
        // (see `system_wide`).
        let global = matches!(self.target, Target::Global);
        let fields = SystemFields {
            meminfo: false,
            // Read in global scope even without the cpu category: `extensions.cumulative`.
            stat: global,
            psi: global && (self.config.cpu.enabled || self.config.memory.enabled),
        };
        self.system.read_into(fields, &mut self.system_sample);
        for error in &self.system_sample.errors {
            reasons.add("system", format_args!("{error}"));
        }
        processes::fill_system_values(&self.system_sample, &mut sample.system);

        self.environment.read(
            &self.config,
            &self.target,
            &sample.processes,
            cgroup_epoch,
            reasons,
            &mut sample.cgroup,
            &mut sample.cgroup_reports,
        );
        sample.cgroup_reports_age_ms = self.environment.report_age_ms();

        self.system_wide.read(&self.config, reasons, sample);

        if self.config.gpu.enabled {
            self.gpu.fill(&sample.processes, reasons, &mut sample.gpu);
        }

        self.read_kernel_events();
        self.read_targets();
        self.sample
            .unavailable
            .clone_from_slice_or_extend(self.reasons.as_slice());
    }

    /// The measured cgroups (`extensions.targets`), with their per-process sums and GPU records
    /// from this sample's pass.
    fn read_targets(&mut self) {
        let Some(targets) = &mut self.targets else {
            return;
        };
        let sample = &mut self.sample;
        // Per-process sums need the pass over every process: the global scope's.
        let global = matches!(self.target, Target::Global);
        let gpu = &sample.gpu;
        targets.fill(
            global.then_some(&sample.processes),
            self.processes.task_records().filter(|_| global),
            gpu.nvml_processes.then_some(gpu.processes.as_slice()),
            sample.clock_ticks_per_second,
            self.kernel.source(),
            sample.targets.get_or_insert_with(Default::default),
        );
    }

    /// The kernel's event counters of the sample's processes, and the lifetime counts from them.
    fn read_kernel_events(&mut self) {
        let (sample, reasons) = (&mut self.sample, &mut self.reasons);
        self.kernel
            .fill(&self.target, &sample.processes, &mut sample.kernel_events);
        sample.lifetime = lifetime::lifetime_counts(
            &self.target,
            self.config.memory.enabled,
            &sample.kernel_events,
            self.kernel.counts_whole_tree_life(),
            &mut self.oom_kill_count,
            reasons,
        );
        // Switched off in the config, the counters are absent by choice: not worth a reason.
        if let Some(reason) = sample
            .kernel_events
            .reason
            .as_ref()
            .filter(|_| self.config.extensions.kernel_events)
        {
            reasons.add("extensions.kernel_events", format_args!("{reason}"));
        }
    }
}

/// The iterator of [`Collector::every`].
pub struct FixedRateSnapshots<'c> {
    collector: &'c mut Collector,
    ticker: crate::sampler::FixedRate,
}

impl FixedRateSnapshots<'_> {
    /// The collector taking the snapshots (e.g. to ask [`Collector::target_gone`]).
    pub fn collector(&self) -> &Collector {
        self.collector
    }

    /// The collector, to act on between snapshots (e.g. [`Collector::add_reaped`]).
    pub fn collector_mut(&mut self) -> &mut Collector {
        self.collector
    }

    /// The next snapshot, like [`Iterator::next`], with the wait for its tick left to
    /// `sleep_until(deadline)` as in [`crate::sampler::FixedRate::next_unless`]: it returns
    /// `true` once the deadline has passed, or `false` to give up the tick (then no snapshot is
    /// taken and `None` is returned).
    pub fn next_unless(
        &mut self,
        sleep_until: impl FnOnce(Option<Instant>) -> bool,
    ) -> Option<Arc<ResourceMetricsSnapshot>> {
        let sampler = self.ticker.next_unless(sleep_until)?;
        Some(self.collector.collect_with_sampler(sampler))
    }
}

impl Iterator for FixedRateSnapshots<'_> {
    type Item = Arc<ResourceMetricsSnapshot>;

    fn next(&mut self) -> Option<Self::Item> {
        let tick = self.ticker.wait();
        let sampler = self.ticker.sampler_info(tick.index, tick.lateness);
        Some(self.collector.collect_with_sampler(sampler))
    }
}

/// `clone_from` for a vector from a slice: reuses the elements already there.
trait CloneFromSlice<T> {
    fn clone_from_slice_or_extend(&mut self, source: &[T]);
}

impl<T: Clone> CloneFromSlice<T> for Vec<T> {
    fn clone_from_slice_or_extend(&mut self, source: &[T]) {
        self.truncate(source.len());
        let (init, tail) = source.split_at(self.len());
        self.clone_from_slice(init);
        self.extend_from_slice(tail);
    }
}

/// `CLOCK_BOOTTIME` in ns: the clock process start times are counted on.
fn boottime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// A collector shared with async code: `collect` runs on tokio's blocking pool, so a slow read
/// never stalls the runtime's workers.
#[derive(Clone)]
pub struct AsyncCollector {
    inner: Arc<Mutex<Collector>>,
}

impl AsyncCollector {
    /// Wraps a collector.
    pub fn new(collector: Collector) -> Self {
        Self {
            inner: Arc::new(Mutex::new(collector)),
        }
    }

    /// Takes one snapshot without blocking the async runtime.
    pub async fn collect(&self) -> Result<Arc<ResourceMetricsSnapshot>, CollectorError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut collector = inner.lock().map_err(|_| CollectorError::Poisoned)?;
            Ok(collector.collect())
        })
        .await
        .map_err(|error| CollectorError::Task(error.to_string()))?
    }
}

/// How long ago `instant` was, in whole milliseconds.
pub(crate) fn age_ms(instant: Instant) -> u64 {
    u64::try_from(instant.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// The snapshot to write the next one into: of `recent` (the last snapshot and the one before
/// it), the older that nobody else holds, or a new one when both are held. `recent` then keeps
/// the last one second, unless it was taken.
fn take_reusable(
    recent: &mut [Option<Arc<ResourceMetricsSnapshot>>; 2],
) -> Arc<ResourceMetricsSnapshot> {
    let [last, before] = std::mem::take(recent);
    let free = |snapshot: &Arc<ResourceMetricsSnapshot>| {
        Arc::strong_count(snapshot) == 1 && Arc::weak_count(snapshot) == 0
    };
    let (reused, kept) = match (before, last) {
        (Some(before), last) if free(&before) => (before, last),
        (_, Some(last)) if free(&last) => (last, None),
        (_, last) => (Arc::new(ResourceMetricsSnapshot::default()), last),
    };
    recent[1] = kept;
    reused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ScopeSetting;

    fn own_tree_config() -> ResourceMetricsConfig {
        ResourceMetricsConfig {
            measurement_scope: ScopeSetting::ApplicationProcess,
            ..Default::default()
        }
    }

    #[test]
    fn the_async_collector_runs_on_the_blocking_pool_and_keeps_one_series() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let collector = AsyncCollector::new(Collector::new(own_tree_config()).unwrap());
        let (first, second) = runtime.block_on(async {
            let first = collector.collect().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            (first, collector.collect().await.unwrap())
        });
        assert_eq!(first.extensions.collector.sequence, 1);
        assert_eq!(second.extensions.collector.sequence, 2);
        assert_eq!(second.extensions.target.root_pid, Some(std::process::id()));
        assert!(first.cpu.as_ref().unwrap().consumption_rate.is_none());
        assert!(second.cpu.as_ref().unwrap().consumption_rate.is_some());
    }

    /// A consumer that holds each snapshot until the next one arrives (the agent's publication)
    /// leaves the one before it free: it is written into next. A snapshot still held is never
    /// written into: then the last is, if free, or a new one.
    #[test]
    fn a_snapshot_is_written_into_the_one_before_the_last_unless_it_is_held() {
        let marked = |sequence| {
            let mut snapshot = ResourceMetricsSnapshot::default();
            snapshot.extensions.collector.sequence = sequence;
            Some(Arc::new(snapshot))
        };
        let sequence =
            |snapshot: &Arc<ResourceMetricsSnapshot>| snapshot.extensions.collector.sequence;
        let mut recent = [marked(2), marked(1)];
        assert_eq!(sequence(&take_reusable(&mut recent)), 1);
        assert_eq!(recent[1].as_ref().map(sequence), Some(2));

        let mut recent = [marked(2), marked(1)];
        let held = recent[1].clone();
        assert_eq!(sequence(&take_reusable(&mut recent)), 2);
        assert!(recent[1].is_none());
        assert_eq!(held.as_ref().map(sequence), Some(1));

        let mut recent = [marked(2), marked(1)];
        // A weak reference holds it too: it could be upgraded while the snapshot is written.
        let held = (recent[0].clone(), recent[1].as_ref().map(Arc::downgrade));
        assert_eq!(sequence(&take_reusable(&mut recent)), 0);
        assert_eq!(recent[1].as_ref().map(sequence), Some(2));
        assert!(held.0.is_some() && held.1.is_some());

        // Through the collector: a consumer keeping the first snapshot and each last one.
        let mut collector = Collector::new(own_tree_config()).unwrap();
        let kept = collector.collect();
        let mut last = collector.collect();
        for _ in 0..4 {
            last = collector.collect();
        }
        assert_eq!(kept.extensions.collector.sequence, 1);
        assert_eq!(last.extensions.collector.sequence, 6);
    }

    #[test]
    fn an_invalid_config_is_refused_with_relays_message() {
        let mut config = own_tree_config();
        config.polling.interval_millis = 0;
        let error = Collector::new(config).err().unwrap().to_string();
        assert!(
            error.starts_with("invalid resource metrics config: invalid argument:"),
            "{error}"
        );
    }
}
