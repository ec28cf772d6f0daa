//! The run summary: what a run cost, computed from its snapshots (pure: snapshots in, summary
//! out), as `perf stat` and GNU `time -v` users expect it.
//!
//! [`SummaryBuilder::observe`] takes each snapshot of a series (O(1), no allocation in steady
//! state: it runs on `run`'s sampling path); [`SummaryBuilder::finish`] adds what only the end
//! knows (wall time, the command's exit status, the reaped tree's `rusage`) and gives the
//! [`RunSummary`]. It serialises as one JSON object and renders as an aligned text table
//! ([`RunSummary::to_text`]).
//!
//! Totals come from `extensions.cumulative` when the snapshots carry it. Without it, a value is
//! taken only from a source that is exact for the scope (the single process of
//! `application_process`, the cgroup's own counters, the reaped tree's `rusage`); anything else
//! is `null`, with the reason in [`RunSummary::unknown`]. A sampled sum over the live processes
//! would miss whatever exited between samples, so it is never given as a total.

mod rates;
mod text;

use rates::{Oddities, RateWindow, Step, CPU_BOUND_SLACK};

use std::borrow::Cow;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::snapshot::{
    CumulativeMethod, MeasurementScope, OomVictim, ResourceLimitEventCount, ResourceLimitEventKind,
    ResourceLimitResource, ResourceMetricsSnapshot, Unavailable,
};
use crate::units::{
    BandwidthUnit, CapacityUnit, CpuUnit, DataUnit, DurationUnit, Measurement, MeasurementUnit,
    UnitFamily, UtilizationUnit,
};

/// Where the series' counters start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Baseline {
    /// The counters of the first snapshot are the start: totals are last − first (a recording
    /// around a block of code in a process that existed before).
    #[default]
    FirstSample,
    /// The counters count from zero at the start of what is summed up (`run`: the command's
    /// tree is counted from its start).
    Zero,
}

/// How the measured command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ExitStatus {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that killed it, when one did.
    pub signal: Option<i32>,
}

impl ExitStatus {
    /// The status of a command that exited with `code`.
    pub fn exited(code: i32) -> Self {
        Self {
            code: Some(code),
            signal: None,
        }
    }

    /// The status of a command killed by `signal`.
    pub fn killed(signal: i32) -> Self {
        Self {
            code: None,
            signal: Some(signal),
        }
    }
}

/// Resource usage of a reaped process tree, as `wait4`/`getrusage(RUSAGE_CHILDREN)` give it:
/// what GNU `time -v` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReapedUsage {
    /// User CPU time.
    pub user: Duration,
    /// System CPU time.
    pub system: Duration,
    /// `ru_maxrss`: the largest resident size of a single process of the tree (bytes).
    pub max_rss_bytes: u64,
}

/// What only the end of a run knows.
#[derive(Debug, Clone, Default)]
pub struct RunEnd {
    /// The command, as shown in the summary's title.
    pub command: Option<String>,
    /// Wall time from the command's start to its exit; without it, the span of the snapshots.
    pub wall_time: Option<Duration>,
    /// How the command ended; `None` when there was no command (a recording, a stream).
    pub exit_status: Option<ExitStatus>,
    /// The reaped tree's resource usage, when the caller reaped it.
    pub reaped: Option<ReapedUsage>,
}

/// A resource-limit counter over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LimitEventTotal {
    /// The resource (`cpu`, `memory`, `processes`).
    pub resource: ResourceLimitResource,
    /// The event (`throttled`, `high`, `maximum`, `out_of_memory`, `terminated`).
    pub event: ResourceLimitEventKind,
    /// How many times it happened during the run.
    pub count: u64,
}

/// Where the peak resident memory comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PeakSource {
    /// The highest resident sum seen in a sample: a peak between two samples is not seen.
    HighestSampledSum,
}

/// CPU use over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CpuSummary {
    /// User CPU time (s).
    pub user_s: Option<f64>,
    /// System CPU time (s).
    pub system_s: Option<f64>,
    /// User + system (s).
    pub total_s: Option<f64>,
    /// Where the totals come from: `cumulative:<method>`, `rusage`, `process`, `cgroup`.
    pub source: Option<Cow<'static, str>>,
    /// Total CPU time over wall time (logical processors).
    pub average_cores: Option<f64>,
    /// The highest rate over a window of at least one sampling period, from the same source
    /// as the totals where the snapshots carry it (logical processors); never above the CPUs
    /// the processes may use (see [`RunSummary::warnings`]).
    pub peak_cores: Option<f64>,
}

/// Memory over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemorySummary {
    /// Peak memory charged to the run's cgroup (bytes): its high-water mark (v2 `memory.peak`,
    /// v1 `max_usage_in_bytes`), every page charged between samples too, page cache and
    /// kernel memory included; `null` without a memory cgroup of the run's own.
    pub peak_charged_bytes: Option<u64>,
    /// The first sample that saw the high-water mark at its final value.
    pub peak_charged_at: Option<DateTime<Utc>>,
    /// Peak resident memory (bytes): the highest sum of the processes' resident sets seen in
    /// a sample (page cache not included; a peak between two samples is not seen).
    pub peak_resident_bytes: Option<u64>,
    /// Where it comes from.
    pub peak_source: Option<PeakSource>,
    /// When it was reached (the sample that saw it).
    pub peak_at: Option<DateTime<Utc>>,
    /// The largest resident size of a single process (bytes), as GNU `time -v` reports it.
    pub max_single_process_rss_bytes: Option<u64>,
}

/// Storage I/O over the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IoSummary {
    /// Bytes read.
    pub read_bytes: Option<u64>,
    /// Bytes written.
    pub written_bytes: Option<u64>,
    /// Where they come from.
    pub source: Option<Cow<'static, str>>,
}

/// GPU use over the run (only where a GPU was seen).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuSummary {
    /// Devices seen.
    pub devices: u32,
    /// The highest compute utilisation of any device in any sample (%).
    pub peak_utilization_percent: Option<f64>,
    /// The highest device memory in use, summed over the devices, in any sample (bytes).
    pub peak_memory_bytes: Option<u64>,
    /// GPU limit events during the run (`extensions.gpu.limit_events`), per device.
    pub limit_events: Vec<GpuLimitEventTotal>,
}

/// One GPU limit event of one device during a run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GpuLimitEventTotal {
    /// `power_cap`, `thermal`, `hw_slowdown` or `xid`.
    pub event: String,
    /// The device's UUID (or PCI address).
    pub uuid: String,
    /// Sampling periods with the event active, or XID errors, during the run.
    pub count: u64,
    /// Seconds throttled during the run, from NVML's violation times, where it has one.
    pub throttled_s: Option<f64>,
}

/// A GPU limit event's first and last values in the run.
#[derive(Debug, Clone, PartialEq)]
struct GpuEventSpan {
    event: String,
    uuid: String,
    /// The count and throttled seconds last seen.
    last: u64,
    last_s: Option<f64>,
    /// What was counted since the first snapshot, over the restarts of the counts (a device
    /// lost and back, a violation counter reset).
    counted: u64,
    counted_s: Option<f64>,
}

impl GpuEventSpan {
    /// Takes the next values: their increase, or the whole value after a restart.
    fn observe(&mut self, count: u64, seconds: Option<f64>) {
        self.counted += count.checked_sub(self.last).unwrap_or(count);
        self.last = count;
        if let Some(now) = seconds {
            let gained = match self.last_s {
                Some(before) if now >= before => now - before,
                _ => now,
            };
            self.counted_s = Some(self.counted_s.unwrap_or(0.0) + gained);
            self.last_s = Some(now);
        }
    }
}

/// The sampling itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SamplingSummary {
    /// Snapshots taken.
    pub samples: u64,
    /// Ticks skipped because a collection overran them.
    pub missed_ticks: u64,
    /// The sampling period (µs), where the series was fixed-rate.
    pub interval_usec: Option<u64>,
}

/// The end-of-run summary. Every `null` value has its reason in [`RunSummary::unknown`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    /// The command, when one was run.
    pub command: Option<String>,
    /// The scope the snapshots measured.
    pub measurement_scope: Option<MeasurementScope>,
    /// The first snapshot's time.
    pub started: Option<DateTime<Utc>>,
    /// The last snapshot's time.
    pub ended: Option<DateTime<Utc>>,
    /// Wall time (s).
    pub wall_time_s: Option<f64>,
    /// CPU.
    pub cpu: CpuSummary,
    /// Memory.
    pub memory: MemorySummary,
    /// Storage I/O.
    pub io: IoSummary,
    /// Processes created during the run.
    pub processes_created: Option<u64>,
    /// Time the scope's cgroup was CPU-throttled (s).
    pub throttled_s: Option<f64>,
    /// Every limit counter that moved during the run.
    pub limit_events: Vec<LimitEventTotal>,
    /// OOM kills during the run (eBPF), with their victims.
    pub oom_kills: Option<u64>,
    /// The victims seen (bounded to the collector's recent list per sample).
    pub oom_victims: Vec<OomVictim>,
    /// GPU use; `null` when no GPU was seen.
    pub gpu: Option<GpuSummary>,
    /// Samples and missed ticks.
    pub sampling: SamplingSummary,
    /// How the command ended.
    pub exit_status: Option<ExitStatus>,
    /// What the cumulative totals could not see (`extensions.cumulative.reason`), if anything.
    pub cumulative_reason: Option<String>,
    /// Why values are `null` (one entry per value).
    pub unknown: Vec<Unavailable>,
    /// What was odd in the series and what was done about it: timestamps that went
    /// backwards, counters that fell, CPU rates above the CPUs the processes may use.
    pub warnings: Vec<String>,
}

/// CPU seconds a total may exceed what the CPUs could give in the wall time by before it is
/// called impossible.
const IMPOSSIBLE_CPU_SLACK_S: f64 = 0.5;

/// The shortest window of a CPU rate from clock-tick totals (ns).
const TICK_WINDOW_NS: i64 = 100_000_000;

/// User, system and total CPU seconds, and where they come from.
type CpuTotals = (
    Option<f64>,
    Option<f64>,
    Option<f64>,
    Option<Cow<'static, str>>,
);

/// Most OOM victims kept (the collector's own list is bounded the same way).
const MAX_VICTIMS: usize = 64;

/// The limit counters, one slot per (resource, event).
const RESOURCES: [ResourceLimitResource; 3] = [
    ResourceLimitResource::Cpu,
    ResourceLimitResource::Memory,
    ResourceLimitResource::Processes,
];
const EVENTS: [ResourceLimitEventKind; 5] = [
    ResourceLimitEventKind::Throttled,
    ResourceLimitEventKind::High,
    ResourceLimitEventKind::Maximum,
    ResourceLimitEventKind::OutOfMemory,
    ResourceLimitEventKind::Terminated,
];

/// A counter's first and last value in the series.
#[derive(Debug, Clone, Copy, Default)]
struct Counter {
    first: Option<f64>,
    last: Option<f64>,
    /// It went down at least once.
    fell: bool,
}

impl Counter {
    fn observe(&mut self, value: Option<f64>) {
        if let Some(value) = value {
            self.first.get_or_insert(value);
            if self.last.is_some_and(|last| value < last) {
                self.fell = true;
            }
            self.last = Some(value);
        }
    }

    /// last − start; counters that went backwards (a restarted source) give `None`.
    fn total(&self, baseline: Baseline) -> Option<f64> {
        let last = self.last?;
        let start = match baseline {
            Baseline::Zero => 0.0,
            Baseline::FirstSample => self.first?,
        };
        (last >= start).then_some(last - start)
    }
}

/// A maximum and when it was seen.
#[derive(Debug, Clone, Copy, Default)]
struct Peak {
    value: Option<f64>,
    at: Option<DateTime<Utc>>,
}

impl Peak {
    fn observe(&mut self, value: Option<f64>, at: DateTime<Utc>) {
        if let Some(value) = value {
            if self.value.is_none_or(|peak| value > peak) {
                self.value = Some(value);
                self.at = Some(at);
            }
        }
    }
}

/// Accumulates a series of snapshots into a [`RunSummary`].
#[derive(Debug, Clone, Default)]
pub struct SummaryBuilder {
    baseline: Baseline,
    samples: u64,
    scope: Option<MeasurementScope>,
    first: Option<DateTime<Utc>>,
    last: Option<DateTime<Utc>>,
    missed_ticks: u64,
    interval_usec: Option<u64>,
    // CPU, µs, per source.
    cpu_user: Counter,
    cpu_system: Counter,
    cgroup_cpu_ns: Counter,
    peak_cores: Peak,
    // Memory, bytes.
    resident: Peak,
    process_peak_rss: Peak,
    // Storage, bytes.
    read: Counter,
    written: Counter,
    processes_created: Counter,
    processes_reason: Option<std::sync::Arc<str>>,
    throttled_usec: Counter,
    limits: [[Counter; 5]; 3],
    oom_kills: Counter,
    victims: Vec<OomVictim>,
    gpu_devices: u32,
    gpu_utilization: Peak,
    gpu_memory: Peak,
    gpu_events: Vec<GpuEventSpan>,
    // extensions.cumulative: whole-scope totals, exited processes included.
    cum_method: Option<CumulativeMethod>,
    cum_reason: Option<std::sync::Arc<str>>,
    cum_user_ns: Counter,
    cum_system_ns: Counter,
    cum_read: Counter,
    cum_written: Counter,
    cum_created: Counter,
    cum_memory_peak: Peak,
    /// The high-water mark in the first snapshot that had one: a stream that never rose above
    /// it may not have made it.
    cum_memory_peak_first: Option<f64>,
    /// The cumulative totals count from before the first snapshot (`run`'s, from the command's
    /// start in a cgroup of its own): the mark is the stream's, risen or not.
    cum_from_before: bool,
    /// The window of the CPU rate (cumulative ns) and the storage rates (cumulative bytes).
    cpu_window: RateWindow,
    read_window: RateWindow,
    write_window: RateWindow,
    /// Where the window of a snapshot's own rate began (no cumulative CPU).
    rate_from: Option<DateTime<Utc>>,
    /// The CPUs online where the processes run here (`run`, a recording).
    local_cpus: Option<f64>,
    /// The most CPUs online a stream's collectors recorded.
    recorded_cpus: Option<f64>,
    /// A stream recorded elsewhere: bounded by its recorded CPUs, not this machine's.
    stream: bool,
    /// The timestamp of the previous snapshot, as observed.
    previous_at: Option<DateTime<Utc>>,
    oddities: Oddities,
    last_rates: Rates,
}

/// The rates a snapshot closed a window for: what the report's charts plot, from the same
/// source as the summary's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Rates {
    /// CPU (logical processors).
    pub(crate) cores: Option<f64>,
    /// Storage read and write (bytes/s).
    pub(crate) read: Option<f64>,
    pub(crate) write: Option<f64>,
}

/// A measurement in its family's base unit (µs, bytes, bits/s, millicores, percent).
fn base<U: UnitFamily>(
    measurement: Option<&Measurement>,
    family: fn(MeasurementUnit) -> Option<U>,
) -> Option<f64> {
    let measurement = measurement?;
    let unit = family(measurement.unit)?;
    Some(measurement.value.as_f64() * unit.factor() as f64)
}

fn micros(measurement: Option<&Measurement>) -> Option<f64> {
    base(measurement, DurationUnit::from_measurement_unit)
}

fn capacity_bytes(measurement: Option<&Measurement>) -> Option<f64> {
    base(measurement, CapacityUnit::from_measurement_unit)
}

fn data_bytes(measurement: Option<&Measurement>) -> Option<f64> {
    base(measurement, DataUnit::from_measurement_unit)
}

/// A rate in logical processors.
fn cores(measurement: Option<&Measurement>) -> Option<f64> {
    base(measurement, CpuUnit::from_measurement_unit).map(|millicores| millicores / 1000.0)
}

fn percent(measurement: Option<&Measurement>) -> Option<f64> {
    base(measurement, UtilizationUnit::from_measurement_unit)
}

/// A rate in bytes per second (for the report's charts).
pub(crate) fn bytes_per_second(measurement: Option<&Measurement>) -> Option<f64> {
    base(measurement, BandwidthUnit::from_measurement_unit).map(|bits| bits / 8.0)
}

/// Public conversions shared with the report: values of a snapshot in base units.
pub mod values {
    use super::*;

    /// CPU rate of the scope in logical processors: the nanosecond run-time rate
    /// (`extensions.precise_cpu`), else the cgroup's usage rate, else Relay's
    /// `consumption_rate` (clock ticks: coarse at short intervals).
    pub fn cpu_cores(snapshot: &ResourceMetricsSnapshot) -> Option<f64> {
        let precise = snapshot.extensions.precise_cpu.as_ref();
        precise
            .and_then(|precise| precise.run_rate_logical_processors)
            .or_else(|| precise.and_then(|precise| precise.cgroup_usage_rate_logical_processors))
            .or_else(|| {
                let cpu = snapshot.cpu.as_ref();
                cores(cpu.and_then(|cpu| cpu.consumption_rate.as_ref()))
            })
    }

    /// Resident memory summed over the scope (bytes).
    pub fn resident_bytes(snapshot: &ResourceMetricsSnapshot) -> Option<f64> {
        capacity_bytes(snapshot.memory.as_ref()?.resident.as_ref())
    }

    /// Memory charged to the cgroup (bytes).
    pub fn cgroup_memory_bytes(snapshot: &ResourceMetricsSnapshot) -> Option<f64> {
        capacity_bytes(snapshot.memory.as_ref()?.environment_accounted.as_ref())
    }

    /// Storage read and write rates (bytes/s).
    pub fn disk_rates(snapshot: &ResourceMetricsSnapshot) -> (Option<f64>, Option<f64>) {
        match snapshot.disk.as_ref() {
            Some(disk) => (
                bytes_per_second(disk.read_throughput.as_ref()),
                bytes_per_second(disk.write_throughput.as_ref()),
            ),
            None => (None, None),
        }
    }

    /// Network receive and transmit rates over the selected interfaces (bytes/s).
    pub fn network_rates(snapshot: &ResourceMetricsSnapshot) -> (Option<f64>, Option<f64>) {
        match snapshot.network.as_ref() {
            Some(network) => (
                bytes_per_second(network.system.receive_throughput.as_ref()),
                bytes_per_second(network.system.transmit_throughput.as_ref()),
            ),
            None => (None, None),
        }
    }

    /// The highest device utilisation (%) and the device memory in use summed over the
    /// devices (bytes); `None` when no GPU device is in the snapshot.
    pub fn gpu(snapshot: &ResourceMetricsSnapshot) -> Option<(Option<f64>, Option<f64>)> {
        let devices = snapshot.gpu.as_ref()?.device_metrics.as_ref()?;
        if devices.is_empty() {
            return None;
        }
        let mut utilization: Option<f64> = None;
        let mut memory: Option<f64> = None;
        for device in devices {
            if let Some(value) = percent(device.compute_utilization.as_ref()) {
                utilization = Some(utilization.map_or(value, |u| u.max(value)));
            }
            if let Some(value) = capacity_bytes(device.memory_used.as_ref()) {
                memory = Some(memory.unwrap_or(0.0) + value);
            }
        }
        Some((utilization, memory))
    }

    /// Processes in scope.
    pub fn process_count(snapshot: &ResourceMetricsSnapshot) -> Option<f64> {
        snapshot
            .process
            .as_ref()?
            .active_count
            .as_ref()
            .map(|count| count.value.as_f64())
    }

    /// A limit counter's value (events).
    pub fn limit_count(event: &ResourceLimitEventCount) -> Option<f64> {
        event.count.as_ref().map(|count| count.value.as_f64())
    }

    /// Cumulative CPU throttling (µs).
    pub fn throttled_usec(snapshot: &ResourceMetricsSnapshot) -> Option<f64> {
        micros(snapshot.cpu.as_ref()?.throttled_time.as_ref())
    }

    /// Cumulative PSI "some" stall time of CPU and of memory (µs), each as far as known.
    pub fn pressure_some_usec(snapshot: &ResourceMetricsSnapshot) -> [Option<f64>; 2] {
        let cpu = snapshot
            .cpu
            .as_ref()
            .and_then(|cpu| micros(cpu.some_pressure_stall_time.as_ref()));
        let memory = snapshot
            .memory
            .as_ref()
            .and_then(|memory| micros(memory.some_pressure_stall_time.as_ref()));
        [cpu, memory]
    }
}

impl SummaryBuilder {
    /// A builder whose totals start at `baseline`, for snapshots of processes that run on
    /// this machine (`run`, a recording): CPU rates are bounded by its CPUs online.
    pub fn new(baseline: Baseline) -> Self {
        Self {
            baseline,
            victims: Vec::with_capacity(8),
            local_cpus: rates::cpus_online(),
            ..Self::default()
        }
    }

    /// The sampling period, known before any snapshot says it: a rate is taken over one
    /// period at least even where the command ends before its first timed sample (only the
    /// first and the last snapshot, which carry no sampler: a 1 ms window read as the peak).
    pub fn with_interval(mut self, period: std::time::Duration) -> Self {
        self.interval_usec = Some(u64::try_from(period.as_micros()).unwrap_or(u64::MAX));
        self
    }

    /// A builder for a stream recorded elsewhere (a report of a file): CPU rates are bounded
    /// by the CPUs online that its collectors recorded (not at all in a recording without
    /// them).
    pub fn for_stream(baseline: Baseline) -> Self {
        Self {
            stream: true,
            ..Self::new(baseline)
        }
    }

    /// The rates the last observed snapshot closed a window for.
    #[cfg_attr(
        not(feature = "report"),
        expect(dead_code, reason = "the report's charts read it")
    )]
    pub(crate) fn last_rates(&self) -> Rates {
        self.last_rates
    }

    /// The CPUs the measured processes may use, and where that comes from: for processes
    /// measured here, this machine's CPUs online; for a stream, those of the machine that
    /// recorded it. Not a CPU quota: a cgroup under one runs on every CPU it may until the
    /// period's quota is spent, so a rate over a period shorter than the quota's exceeds it.
    fn cpu_bound(&self) -> Option<(f64, &'static str)> {
        if self.stream {
            self.recorded_cpus
                .map(|cpus| (cpus, "the recording machine's"))
        } else {
            self.local_cpus.map(|cpus| (cpus, "this machine's"))
        }
    }

    /// A CPU rate within the bound (clamped up to [`CPU_BOUND_SLACK`] above it, left out and
    /// counted beyond).
    fn bounded(&mut self, cores: f64) -> Option<f64> {
        if !cores.is_finite() || cores < 0.0 {
            return None;
        }
        match self.cpu_bound().map(|(bound, _)| bound) {
            Some(bound) if cores > bound * CPU_BOUND_SLACK => {
                self.oddities.over_bound += 1;
                self.oddities.highest_over = self.oddities.highest_over.max(cores);
                None
            }
            Some(bound) => Some(cores.min(bound)),
            None => Some(cores),
        }
    }

    /// Snapshots observed so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Takes one snapshot of the series into account: O(1), no allocation (except the first
    /// time an OOM victim appears).
    pub fn observe(&mut self, snapshot: &ResourceMetricsSnapshot) {
        let at = snapshot.timestamp;
        self.samples += 1;
        self.scope = Some(snapshot.measurement_scope);
        self.observe_timing(snapshot);
        if let Some(cpu) = &snapshot.cpu {
            self.cpu_user.observe(micros(cpu.user_time.as_ref()));
            self.cpu_system.observe(micros(cpu.system_time.as_ref()));
            self.throttled_usec
                .observe(micros(cpu.throttled_time.as_ref()));
            self.observe_limits(&cpu.limit_events);
        }
        if let Some(precise) = &snapshot.extensions.precise_cpu {
            self.cgroup_cpu_ns
                .observe(precise.cgroup_usage_ns.map(|ns| ns as f64));
        }
        if let Some(memory) = &snapshot.memory {
            self.resident
                .observe(capacity_bytes(memory.resident.as_ref()), at);
            self.process_peak_rss
                .observe(capacity_bytes(memory.peak_resident.as_ref()), at);
            self.observe_limits(&memory.limit_events);
        }
        if let Some(process) = &snapshot.process {
            self.observe_limits(&process.limit_events);
        }
        if let Some(disk) = &snapshot.disk {
            self.read.observe(data_bytes(disk.read_data.as_ref()));
            self.written.observe(data_bytes(disk.write_data.as_ref()));
        }
        let events = &snapshot.extensions.kernel_events;
        self.processes_created
            .observe(events.processes_created.map(|n| n as f64));
        if events.processes_created.is_none() && self.processes_reason.is_none() {
            self.processes_reason.clone_from(&events.reason);
        }
        self.oom_kills.observe(events.oom_kills.map(|n| n as f64));
        for victim in &events.recent_oom_victims {
            let known = self
                .victims
                .iter()
                .any(|seen| seen.pid == victim.pid && seen.time_ns == victim.time_ns);
            if !known && self.victims.len() < MAX_VICTIMS {
                self.victims.push(victim.clone());
            }
        }
        if let Some(cumulative) = &snapshot.extensions.cumulative {
            self.observe_cumulative(cumulative, at);
        }
        self.observe_rates(snapshot);
        if let Some((utilization, memory)) = values::gpu(snapshot) {
            if let Some(devices) = snapshot
                .gpu
                .as_ref()
                .and_then(|g| g.device_metrics.as_ref())
            {
                self.gpu_devices = self
                    .gpu_devices
                    .max(u32::try_from(devices.len()).unwrap_or(u32::MAX));
            }
            self.gpu_utilization.observe(utilization, at);
            self.gpu_memory.observe(memory, at);
        }
        if let Some(gpu) = &snapshot.extensions.gpu {
            self.observe_gpu_events(&gpu.limit_events);
        }
    }

    /// When the snapshot was taken, its sampler's figures and the CPUs its collector recorded.
    fn observe_timing(&mut self, snapshot: &ResourceMetricsSnapshot) {
        let at = snapshot.timestamp;
        // The span runs from the first snapshot to the latest: one that went back in time
        // (warned about) neither starts nor ends it.
        self.first.get_or_insert(at);
        self.last = Some(self.last.map_or(at, |last| last.max(at)));
        if let Some(previous) = self.previous_at.filter(|previous| at < *previous) {
            self.oddities.backwards += 1;
            self.oddities.first_backwards.get_or_insert((previous, at));
        }
        self.previous_at = Some(at);
        if let Some(sampler) = &snapshot.extensions.sampler {
            self.missed_ticks = self.missed_ticks.max(sampler.missed_ticks_total);
            self.interval_usec = Some(sampler.interval_usec);
        }
        if let Some(cpus) = snapshot.extensions.collector.online_cpus.filter(|&c| c > 0) {
            let cpus = f64::from(cpus);
            self.recorded_cpus = Some(self.recorded_cpus.map_or(cpus, |seen| seen.max(cpus)));
        }
    }

    /// `extensions.cumulative`: whole-scope totals, exited processes included.
    fn observe_cumulative(&mut self, cumulative: &crate::snapshot::Cumulative, at: DateTime<Utc>) {
        self.cum_method = Some(cumulative.method);
        self.cum_reason.clone_from(&cumulative.reason);
        let ns = |value: Option<u64>| value.map(|v| v as f64);
        self.cum_user_ns.observe(ns(cumulative.cpu_user_ns));
        self.cum_system_ns.observe(ns(cumulative.cpu_system_ns));
        self.cum_read.observe(ns(cumulative.storage_read_bytes));
        self.cum_written.observe(ns(cumulative.storage_write_bytes));
        self.cum_created.observe(ns(cumulative.processes_created));
        let peak = ns(cumulative.memory_peak_bytes);
        if self.cum_memory_peak_first.is_none() {
            self.cum_memory_peak_first = peak;
            self.cum_from_before = cumulative
                .since
                .zip(self.first)
                .is_some_and(|(since, first)| since < first);
        }
        self.cum_memory_peak.observe(peak, at);
    }

    /// The CPU and storage rates of the windows this snapshot closes: from
    /// `extensions.cumulative` where it has the counter (the summary's source), else the
    /// snapshot's own rates, each over at least one sampling period.
    fn observe_rates(&mut self, snapshot: &ResourceMetricsSnapshot) {
        let at = snapshot.timestamp;
        let min_ns = self.interval_usec.map_or(0, |us| {
            i64::try_from(us.saturating_mul(1000)).unwrap_or(i64::MAX)
        });
        let cumulative = snapshot.extensions.cumulative.as_ref();
        // Process and machine totals count clock ticks (10 ms at the usual 100 Hz): over a
        // window of 10 ms, one tick more made a one-thread loop read 2 cores. A window of at
        // least 100 ms keeps a tick within a tenth of a core.
        let ticks = cumulative.is_some_and(|c| {
            matches!(
                c.method,
                CumulativeMethod::ProcessTree
                    | CumulativeMethod::Process
                    | CumulativeMethod::ProcStat
            )
        });
        let cpu_min_ns = if ticks {
            min_ns.max(TICK_WINDOW_NS)
        } else {
            min_ns
        };
        let cpu_ns = cumulative
            .and_then(|c| c.cpu_user_ns.zip(c.cpu_system_ns))
            .map(|(user, system)| user.saturating_add(system) as f64);
        // A snapshot's own rates cover the interval since the collector's previous pass: they
        // are taken only once a period has passed since the last one taken.
        let own_window_closed = match self.rate_from {
            Some(from) if at < from => {
                self.rate_from = Some(at);
                false
            }
            Some(from) => {
                let closed = (at - from).num_nanoseconds().unwrap_or(i64::MAX) >= min_ns.max(1);
                if closed {
                    self.rate_from = Some(at);
                }
                closed
            }
            None => {
                self.rate_from = Some(at);
                false
            }
        };
        let cores = match cpu_ns {
            Some(cpu) => match self.cpu_window.step(cpu, at, cpu_min_ns) {
                Step::Rate(ns_per_s) => Some(ns_per_s / 1e9),
                _ => None,
            },
            None => own_window_closed
                .then(|| values::cpu_cores(snapshot))
                .flatten(),
        };
        let cores = cores.and_then(|cores| self.bounded(cores));
        self.peak_cores.observe(cores, at);
        let rate = |window: &mut RateWindow, value: Option<u64>| match value {
            Some(value) => match window.step(value as f64, at, min_ns) {
                Step::Rate(rate) => Some(rate),
                _ => None,
            },
            None => None,
        };
        let (own_read, own_write) = if own_window_closed {
            values::disk_rates(snapshot)
        } else {
            (None, None)
        };
        let read = match cumulative.and_then(|c| c.storage_read_bytes) {
            Some(bytes) => rate(&mut self.read_window, Some(bytes)),
            None => own_read,
        };
        let write = match cumulative.and_then(|c| c.storage_write_bytes) {
            Some(bytes) => rate(&mut self.write_window, Some(bytes)),
            None => own_write,
        };
        self.last_rates = Rates { cores, read, write };
    }

    /// The counters that fell, by name. The snapshots' CPU times and disk bytes are sums over
    /// the live processes except in a single-process scope: they fall when one exits.
    fn fallen(&self) -> Vec<&'static str> {
        let single = self.scope == Some(MeasurementScope::ApplicationProcess);
        let sums = [
            ("cpu.user_time", &self.cpu_user),
            ("cpu.system_time", &self.cpu_system),
            ("disk.read_data", &self.read),
            ("disk.write_data", &self.written),
        ];
        let named = [
            (
                "extensions.precise_cpu.cgroup_usage_ns",
                &self.cgroup_cpu_ns,
            ),
            ("cpu.throttled_time", &self.throttled_usec),
            (
                "extensions.kernel_events.processes_created",
                &self.processes_created,
            ),
            ("extensions.kernel_events.oom_kills", &self.oom_kills),
            ("extensions.cumulative.cpu_user_ns", &self.cum_user_ns),
            ("extensions.cumulative.cpu_system_ns", &self.cum_system_ns),
            ("extensions.cumulative.storage_read_bytes", &self.cum_read),
            (
                "extensions.cumulative.storage_write_bytes",
                &self.cum_written,
            ),
            ("extensions.cumulative.processes_created", &self.cum_created),
        ];
        sums.into_iter()
            .filter(|_| single)
            .chain(named)
            .filter(|(_, counter)| counter.fell)
            .map(|(name, _)| name)
            .collect()
    }

    fn observe_gpu_events(&mut self, events: &[crate::snapshot::GpuLimitEvent]) {
        for event in events {
            let known = self
                .gpu_events
                .iter_mut()
                .find(|span| span.event == *event.event && span.uuid == *event.uuid);
            match known {
                Some(span) => span.observe(event.count, event.throttled_seconds),
                None => self.gpu_events.push(GpuEventSpan {
                    event: event.event.to_string(),
                    uuid: event.uuid.to_string(),
                    last: event.count,
                    last_s: event.throttled_seconds,
                    counted: 0,
                    counted_s: event.throttled_seconds.map(|_| 0.0),
                }),
            }
        }
    }

    fn observe_limits(&mut self, events: &[ResourceLimitEventCount]) {
        for event in events {
            let resource = RESOURCES.iter().position(|r| *r == event.resource);
            let kind = EVENTS.iter().position(|e| *e == event.event);
            if let (Some(resource), Some(kind)) = (resource, kind) {
                self.limits[resource][kind].observe(values::limit_count(event));
            }
        }
    }

    /// User, system and total CPU seconds and their source: an exact source for the scope,
    /// else null.
    fn cpu_totals(&self, reaped: Option<ReapedUsage>) -> CpuTotals {
        let single_process = self.scope == Some(MeasurementScope::ApplicationProcess);
        if let (Some(user), Some(system), Some(method)) = (
            self.cum_user_ns.total(self.baseline),
            self.cum_system_ns.total(self.baseline),
            self.cum_method,
        ) {
            let (user, system) = (user / 1e9, system / 1e9);
            (
                Some(user),
                Some(system),
                Some(user + system),
                Some(format!("cumulative:{}", method.as_str()).into()),
            )
        } else if let Some(reaped) = reaped {
            let user = reaped.user.as_secs_f64();
            let system = reaped.system.as_secs_f64();
            (
                Some(user),
                Some(system),
                Some(user + system),
                Some("rusage".into()),
            )
        } else if single_process {
            let user = self.cpu_user.total(self.baseline).map(|us| us / 1e6);
            let system = self.cpu_system.total(self.baseline).map(|us| us / 1e6);
            let total = user.zip(system).map(|(u, s)| u + s);
            (user, system, total, Some("process".into()))
        } else if let Some(ns) = self.cgroup_cpu_ns.total(self.baseline) {
            (None, None, Some(ns / 1e9), Some("cgroup".into()))
        } else {
            (None, None, None, None)
        }
    }

    /// Why a CPU total is impossible: more than the CPUs could give in the wall time, the
    /// counters not being one series (a source restarted and jumped); no total is better than
    /// that one. Half a second of slack: a command of a millisecond is counted from before its
    /// start (the starter's process that stops itself), which can read as a few cores.
    fn impossible_cpu(&self, total_s: Option<f64>, wall_time_s: Option<f64>) -> Option<String> {
        let (total, wall, (bound, _)) = (total_s?, wall_time_s?, self.cpu_bound()?);
        (total > bound * CPU_BOUND_SLACK * wall + IMPOSSIBLE_CPU_SLACK_S).then(|| {
            format!(
                "{total:.3} s of CPU in {wall:.3} s of wall time is more than {bound} CPUs can \
                 give: the CPU counters are not one series"
            )
        })
    }

    /// CPU over the run: totals from an exact source for the scope (else null, with the
    /// reason given to `missing`), the average and the peak; and a warning when the totals
    /// are impossible.
    fn cpu_summary(
        &self,
        reaped: Option<ReapedUsage>,
        wall_time_s: Option<f64>,
        missing: &mut impl FnMut(&'static str, String),
    ) -> (CpuSummary, Option<String>) {
        // CPU: an exact source for the scope, else null.
        let single_process = self.scope == Some(MeasurementScope::ApplicationProcess);
        let (user_s, system_s, total_s, source) = self.cpu_totals(reaped);
        let lost = "the snapshots' CPU times are sums over the live processes (exited ones are \
                    not in them) and no exact source (extensions.cumulative, the cgroup's usage, \
                    the reaped tree's rusage) was available";
        if user_s.is_none() {
            missing(
                "cpu.user_s",
                if single_process {
                    "no user time in the snapshots".into()
                } else {
                    lost.into()
                },
            );
        }
        if system_s.is_none() {
            missing(
                "cpu.system_s",
                if single_process {
                    "no system time in the snapshots".into()
                } else {
                    lost.into()
                },
            );
        }
        if total_s.is_none() {
            missing("cpu.total_s", lost.into());
        }
        let mut average_cores = total_s
            .zip(wall_time_s)
            .and_then(|(cpu, wall)| (wall > 0.0).then_some(cpu / wall));
        if average_cores.is_none() && total_s.is_some() {
            missing("cpu.average_cores", "the wall time is zero".into());
        }
        let cpu_warning = self.impossible_cpu(total_s, wall_time_s);
        let (mut user_s, mut system_s, mut total_s, mut source) =
            (user_s, system_s, total_s, source);
        if let Some(why) = &cpu_warning {
            for field in [
                "cpu.user_s",
                "cpu.system_s",
                "cpu.total_s",
                "cpu.average_cores",
            ] {
                missing(field, why.clone());
            }
            (user_s, system_s, total_s, source, average_cores) = (None, None, None, None, None);
        }
        // The whole run is a window too: a peak below the average (a short run whose only
        // closed window came before most of its CPU) would be impossible, and a run shorter
        // than one window has its average as its peak.
        let peak_cores = match (self.peak_cores.value, average_cores) {
            (Some(peak), Some(average)) => Some(peak.max(average)),
            (peak, average) => peak.or(average),
        };
        if peak_cores.is_none() {
            missing(
                "cpu.peak_cores",
                "no CPU rate in the snapshots (a rate needs two samples at least one sampling \
                 period apart)"
                    .into(),
            );
        }

        (
            CpuSummary {
                user_s,
                system_s,
                total_s,
                source,
                average_cores,
                peak_cores,
            },
            cpu_warning,
        )
    }

    /// The summary, with what only the end knows.
    pub fn finish(&self, end: RunEnd) -> RunSummary {
        let mut unknown = Vec::new();
        let mut missing = |field: &'static str, reason: String| {
            unknown.push(Unavailable {
                field: Cow::Borrowed(field),
                reason: reason.into(),
            });
        };
        let scope = self.scope;
        let no_samples = self.samples == 0;
        if no_samples {
            missing("samples", "no snapshot was taken".to_owned());
        }

        let wall_time_s = end.wall_time.map(|d| d.as_secs_f64()).or_else(|| {
            let (first, last) = (self.first?, self.last?);
            (last - first).to_std().ok().map(|span| span.as_secs_f64())
        });
        if wall_time_s.is_none() {
            missing(
                "wall_time_s",
                "no wall time was given and no snapshot taken".into(),
            );
        }

        let (cpu, cpu_warning) = self.cpu_summary(end.reaped, wall_time_s, &mut missing);

        let memory = self.memory_summary(end.reaped, &mut missing);
        let io = self.io_summary(&mut missing);
        let (processes_created, throttled_s, oom_kills) = self.counts(&mut missing);
        RunSummary {
            command: end.command,
            measurement_scope: scope,
            started: self.first,
            ended: self.last,
            wall_time_s,
            cpu,
            memory,
            io,
            processes_created,
            throttled_s,
            limit_events: self.limit_events(),
            oom_kills,
            oom_victims: self.victims.clone(),
            gpu: self.gpu_summary(),
            sampling: SamplingSummary {
                samples: self.samples,
                missed_ticks: self.missed_ticks,
                interval_usec: self.interval_usec,
            },
            exit_status: end.exit_status,
            cumulative_reason: self.cum_reason.as_deref().map(str::to_owned),
            unknown,
            warnings: self.warnings().into_iter().chain(cpu_warning).collect(),
        }
    }

    /// Memory over the run: the cgroup's charged peak, the processes' resident peak and the
    /// largest single process (from the reaped tree's rusage, or the one process sampled).
    fn memory_summary(
        &self,
        reaped: Option<ReapedUsage>,
        missing: &mut impl FnMut(&'static str, String),
    ) -> MemorySummary {
        let single_process = self.scope == Some(MeasurementScope::ApplicationProcess);
        // A high-water mark counts from the cgroup's start: one that did not rise after the
        // first snapshot of a stream of an older cgroup may be from before the stream.
        let rose = self.baseline == Baseline::Zero
            || self.cum_from_before
            || self.cum_memory_peak.value > self.cum_memory_peak_first;
        let (peak_charged_bytes, peak_charged_at) = match self.cum_memory_peak.value {
            Some(bytes) if rose => (Some(bytes as u64), self.cum_memory_peak.at),
            Some(bytes) => {
                missing(
                    "memory.peak_charged_bytes",
                    format!(
                        "the cgroup's high-water mark ({}) did not rise during the stream: it \
                         may be from before its first snapshot",
                        text::format_bytes(bytes)
                    ),
                );
                (None, None)
            }
            None => {
                missing("memory.peak_charged_bytes", self.no_charged_peak().into());
                (None, None)
            }
        };
        let (peak_resident_bytes, peak_source, peak_at) = match self.resident.value {
            Some(bytes) => (
                Some(bytes as u64),
                Some(PeakSource::HighestSampledSum),
                self.resident.at,
            ),
            None => {
                missing(
                    "memory.peak_resident_bytes",
                    "no resident memory in the snapshots".into(),
                );
                (None, None, None)
            }
        };
        let max_single_process_rss_bytes = match (reaped, single_process) {
            (Some(reaped), _) => Some(reaped.max_rss_bytes),
            (None, true) => self.process_peak_rss.value.map(|b| b as u64),
            (None, false) => None,
        };
        if max_single_process_rss_bytes.is_none() {
            missing(
                "memory.max_single_process_rss_bytes",
                "needs the reaped tree's rusage (run) or a single-process scope".into(),
            );
        }

        MemorySummary {
            peak_charged_bytes,
            peak_charged_at,
            peak_resident_bytes,
            peak_source,
            peak_at,
            max_single_process_rss_bytes,
        }
    }

    /// Storage I/O over the run.
    fn io_summary(&self, missing: &mut impl FnMut(&'static str, String)) -> IoSummary {
        let single_process = self.scope == Some(MeasurementScope::ApplicationProcess);
        // Storage I/O: exact for one process only without cumulative accounting.
        let cumulative_io = self
            .cum_read
            .total(self.baseline)
            .zip(self.cum_written.total(self.baseline));
        let (read_bytes, written_bytes, io_source) =
            if let (Some((read, written)), Some(method)) = (cumulative_io, self.cum_method) {
                (
                    Some(read as u64),
                    Some(written as u64),
                    Some(format!("cumulative:{}", method.as_str()).into()),
                )
            } else if single_process {
                (
                    self.read.total(self.baseline).map(|b| b as u64),
                    self.written.total(self.baseline).map(|b| b as u64),
                    Some("process".into()),
                )
            } else {
                (None, None, None)
            };
        let io_reason: String = if single_process {
            "no disk counters in the snapshots (disk category off, or /proc/<pid>/io unreadable)"
                .into()
        } else if self.cum_method.is_some() {
            // The totals were kept but had no storage bytes: their own reason says why.
            format!(
                "the cumulative totals have no storage bytes ({})",
                self.cum_reason.as_deref().unwrap_or("no reason given")
            )
        } else {
            "the snapshots' disk counters are sums over the live processes (exited ones are not \
             in them) and extensions.cumulative was not available"
                .into()
        };
        if read_bytes.is_none() {
            missing("io.read_bytes", io_reason.clone());
        }
        if written_bytes.is_none() {
            missing("io.written_bytes", io_reason);
        }

        IoSummary {
            read_bytes,
            written_bytes,
            source: io_source,
        }
    }

    /// Processes created, CPU throttled (s) and OOM kills over the run.
    fn counts(
        &self,
        missing: &mut impl FnMut(&'static str, String),
    ) -> (Option<u64>, Option<f64>, Option<u64>) {
        let processes_created = self
            .cum_created
            .total(self.baseline)
            .or_else(|| self.processes_created.total(self.baseline))
            .map(|n| n as u64);
        if processes_created.is_none() {
            missing(
                "processes_created",
                self.processes_reason.as_deref().map_or_else(
                    || "the kernel event source gave no creation count".to_owned(),
                    |reason| format!("kernel events are off: {reason}"),
                ),
            );
        }
        let throttled_s = self.throttled_usec.total(self.baseline).map(|us| us / 1e6);
        if throttled_s.is_none() {
            missing(
                "throttled_s",
                "no CPU throttling counter in the snapshots (no cgroup CPU controller, or \
                 the cpu category is off)"
                    .into(),
            );
        }
        let oom_kills = self.oom_kills.total(self.baseline).map(|n| n as u64);
        if oom_kills.is_none() {
            missing(
                "oom_kills",
                self.processes_reason.as_deref().map_or_else(
                    || "the kernel event source gave no OOM-kill count".to_owned(),
                    |reason| format!("kernel events are off: {reason}"),
                ),
            );
        }

        (processes_created, throttled_s, oom_kills)
    }

    /// Every limit counter that moved during the run.
    fn limit_events(&self) -> Vec<LimitEventTotal> {
        let mut limit_events = Vec::new();
        for (r, resource) in RESOURCES.iter().enumerate() {
            for (e, event) in EVENTS.iter().enumerate() {
                if let Some(count) = self.limits[r][e].total(self.baseline) {
                    if count > 0.0 {
                        limit_events.push(LimitEventTotal {
                            resource: *resource,
                            event: *event,
                            count: count as u64,
                        });
                    }
                }
            }
        }
        limit_events
    }

    /// GPU use over the run; `None` when no GPU was seen.
    fn gpu_summary(&self) -> Option<GpuSummary> {
        (self.gpu_devices > 0 || !self.gpu_events.is_empty()).then(|| GpuSummary {
            devices: self.gpu_devices,
            peak_utilization_percent: self.gpu_utilization.value,
            peak_memory_bytes: self.gpu_memory.value.map(|b| b as u64),
            limit_events: self
                .gpu_events
                .iter()
                .map(|span| GpuLimitEventTotal {
                    event: span.event.clone(),
                    uuid: span.uuid.clone(),
                    count: span.counted,
                    throttled_s: span.counted_s,
                })
                .collect(),
        })
    }
}

impl SummaryBuilder {
    /// Why the summary has no peak charged memory.
    fn no_charged_peak(&self) -> &'static str {
        let cgroup_totals = matches!(
            self.cum_method,
            Some(CumulativeMethod::CgroupV1 | CumulativeMethod::CgroupV2)
        );
        if cgroup_totals {
            // A v2 cgroup nested below an occupied one has no controller of its own.
            "the run's cgroup has no memory controller (no memory.peak; \
             extensions.cumulative.reason says why): peak_resident_bytes, from its processes, \
             is the peak"
        } else {
            "no cgroup high-water mark in the snapshots (the run has no memory cgroup of its own)"
        }
    }

    fn warnings(&self) -> Vec<String> {
        let mut oddities = self.oddities.clone();
        for name in self.fallen() {
            oddities.fell(name);
        }
        oddities.warnings(self.cpu_bound())
    }
}

impl RunSummary {
    /// The summary as one JSON object (`--summary-format json`).
    pub fn to_json(&self) -> String {
        // Serialising plain data to a String cannot fail; an empty object would hide a bug.
        serde_json::to_string(self).unwrap_or_else(|error| {
            format!(
                "{{\"error\":{}}}",
                serde_json::Value::String(error.to_string())
            )
        })
    }
}

#[cfg(test)]
mod tests;
