//! The `extensions` object: what relay-metrics reports beyond Relay's schema. Raw values keep
//! their native unit in the field name (`_ns`, `_usec`, `_bytes`), so no unit option applies.

use std::borrow::Cow;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// Everything beyond Relay's schema, under the snapshot's `extensions` key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Extensions {
    /// Which collector produced the snapshot, and what the collection cost.
    pub collector: CollectorInfo,
    /// What was measured: root process or cgroup path.
    pub target: TargetInfo,
    /// CPU time at nanosecond precision (`/proc/<pid>/schedstat`, cgroup usage).
    pub precise_cpu: Option<PreciseCpu>,
    /// The cgroup involved: the target cgroup (cgroup scope) or the cgroups that contain the
    /// root process (process scopes), values merged over the v2 and v1 hierarchies.
    pub cgroups: Vec<CgroupReport>,
    /// Kernel event counters from the eBPF programs, or why they are off.
    pub kernel_events: KernelEvents,
    /// Age of values that are refreshed off the sampling path.
    pub sample_ages: SampleAges,
    /// Fixed-rate sampling details (`watch`, `run`); `null` for on-demand snapshots.
    pub sampler: Option<SamplerInfo>,
    /// Why values are `null` (one entry per cause, not per field).
    pub unavailable: Vec<Unavailable>,
    /// Totals of the scope since counting began, including the processes that exited (which
    /// Relay's fields, sums over the live processes, lose). `null` only in snapshots written
    /// before this field existed.
    #[serde(default)]
    pub cumulative: Option<Cumulative>,
    /// The cgroups measured one by one (`serve --cgroups`); absent when none are asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub targets: Option<Box<super::Targets>>,
    /// GPU device values beyond Relay's schema (power, temperatures, clocks, throttling, errors)
    /// and GPU limit events; absent when no GPU source reported a device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<GpuExtension>,
    /// `/proc/stat`'s time per CPU and mode since boot, read in global scope for the `cadvisor`
    /// naming's `node_cpu_seconds_total` only; absent otherwise. A mode never goes back between
    /// snapshots (node_exporter's rule: `iowait` can fall under NO_HZ) unless the CPU's idle time
    /// fell by 3 s or more, a CPU brought back online.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_modes: Option<Vec<CpuModeSeconds>>,
}

/// One CPU's time in each mode of `/proc/stat`, seconds since boot (`USER_HZ` resolution).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct CpuModeSeconds {
    /// The CPU's number.
    pub cpu: u32,
    /// User mode.
    pub user: f64,
    /// Niced user mode.
    pub nice: f64,
    /// Kernel mode.
    pub system: f64,
    /// Idle.
    pub idle: f64,
    /// Idle with I/O outstanding.
    pub iowait: f64,
    /// Hard interrupts.
    pub irq: f64,
    /// Soft interrupts.
    pub softirq: f64,
    /// Taken by the hypervisor.
    pub steal: f64,
}

/// `extensions.gpu`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuExtension {
    /// One entry per device, NVIDIA devices first (NVML index order), then DRM devices.
    pub devices: Vec<GpuDeviceReport>,
    /// GPU limit events (resource `gpu`): throttling and XID errors per device.
    pub limit_events: Vec<GpuLimitEvent>,
}

/// One device's values. Every `null` value has a reason in `extensions.unavailable` (field
/// `extensions.gpu.devices.<name>`, the reason naming the device).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuDeviceReport {
    /// `nvidia`, `amd`, `intel`.
    pub vendor: Cow<'static, str>,
    /// NVML index (NVIDIA only).
    pub index: Option<u32>,
    /// NVML UUID (`GPU-…`), `nvidia:<index>` when NVML gave none, or the PCI address of a DRM
    /// device.
    pub uuid: Arc<str>,
    /// The device could not be opened in the last query (fallen off the bus …): every value is
    /// `null`.
    pub lost: bool,
    /// Active clock-event (throttle) reasons: `gpu_idle`, `applications_clocks_setting`,
    /// `sw_power_cap`, `hw_slowdown`, `sync_boost`, `sw_thermal_slowdown`,
    /// `hw_thermal_slowdown`, `hw_power_brake_slowdown`, `display_clock_setting`.
    pub throttle_reasons: Option<Vec<Cow<'static, str>>>,
    /// Cumulative time clocks were held down by the power limit (s, since the driver loaded).
    pub violation_power_seconds: Option<f64>,
    /// … by thermal limits (s).
    pub violation_thermal_seconds: Option<f64>,
    /// … by the board limit (s).
    pub violation_board_limit_seconds: Option<f64>,
    /// … by the reliability limit (s).
    pub violation_reliability_seconds: Option<f64>,
    /// Busy percent of a DRM device (`gpu_busy_percent`), or NVML's utilisation.
    pub utilization_percent: Option<f64>,
    /// XID errors received since the collector started, per code.
    pub xid_errors: Vec<XidErrorCount>,
    /// The values reported as the driver (or hwmon) gives them.
    #[serde(flatten)]
    pub readings: GpuReadings,
}

/// A device's values reported as the driver gives them, in base units: the NVML source fills
/// them and the snapshot carries them unchanged (flattened into [`GpuDeviceReport`]).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuReadings {
    /// Power draw (W).
    pub power_watts: Option<f64>,
    /// Enforced power limit (W).
    pub power_limit_watts: Option<f64>,
    /// Energy since the driver loaded (J); a counter.
    pub energy_joules: Option<f64>,
    /// GPU temperature (°C).
    pub temperature_celsius: Option<f64>,
    /// Memory temperature (°C).
    pub memory_temperature_celsius: Option<f64>,
    /// SM clock (Hz).
    pub sm_clock_hz: Option<u64>,
    /// Memory clock (Hz).
    pub memory_clock_hz: Option<u64>,
    /// Graphics clock (Hz).
    pub graphics_clock_hz: Option<u64>,
    /// Maximum SM clock (Hz).
    pub sm_clock_max_hz: Option<u64>,
    /// Maximum memory clock (Hz).
    pub memory_clock_max_hz: Option<u64>,
    /// Maximum graphics clock (Hz).
    pub graphics_clock_max_hz: Option<u64>,
    /// Corrected ECC errors since the driver loaded.
    pub ecc_corrected_volatile: Option<u64>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Corrected ECC errors over the device's life.
    pub ecc_corrected_aggregate: Option<u64>,
    /// Uncorrected ECC errors over the device's life.
    pub ecc_uncorrected_aggregate: Option<u64>,
    /// Rows remapped after correctable errors.
    pub remapped_rows_correctable: Option<u64>,
    /// Rows remapped after uncorrectable errors.
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A remapping waits for the next reset.
    pub remapping_pending: Option<bool>,
    /// A remapping failed.
    pub remapping_failed: Option<bool>,
    /// PCIe transmit throughput (bytes/s).
    pub pcie_tx_bytes_per_second: Option<u64>,
    /// PCIe receive throughput (bytes/s).
    pub pcie_rx_bytes_per_second: Option<u64>,
    /// PCIe replays since the driver loaded.
    pub pcie_replays: Option<u64>,
    /// Video encoder utilisation (percent).
    pub encoder_utilization_percent: Option<f64>,
    /// Video decoder utilisation (percent).
    pub decoder_utilization_percent: Option<f64>,
    /// MIG mode is on.
    pub mig_enabled: Option<bool>,
    /// Memory of each MIG instance, when MIG mode is on.
    pub mig_instances: Vec<MigInstanceReport>,
}

/// One MIG GPU instance.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MigInstanceReport {
    /// Position among the device's MIG devices.
    pub index: u32,
    /// Memory in use (bytes).
    pub memory_used_bytes: Option<u64>,
    /// Memory of the instance (bytes).
    pub memory_total_bytes: Option<u64>,
}

/// XID errors of one code.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct XidErrorCount {
    /// The XID code (e.g. 79: fallen off the bus; 48: double-bit ECC error).
    pub xid: u64,
    /// Errors received.
    pub count: u64,
}

/// A GPU limit event in Relay's model (`resource`, `event`, `count`), per device, with what
/// throttling cost.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuLimitEvent {
    /// Always `gpu`.
    pub resource: Cow<'static, str>,
    /// `power_cap`, `thermal`, `hw_slowdown` (sampling periods with the reason active) or
    /// `xid` (XID errors received).
    pub event: Cow<'static, str>,
    /// NVML index of the device.
    pub index: Option<u32>,
    /// UUID of the device.
    pub uuid: Arc<str>,
    /// Periods in which the reason was active, or XID errors.
    pub count: u64,
    /// GPU sampling periods in which the reasons could be read (`null` for `xid`).
    pub sampled_periods: Option<u64>,
    /// Seconds throttled since counting began, from NVML's violation times (`power_cap`:
    /// power, `thermal`: thermal); `null` for `hw_slowdown` (NVML has no violation time for
    /// it) and `xid`.
    pub throttled_seconds: Option<f64>,
}

/// What a scope consumed since [`Cumulative::since`], alive or exited, from the kernel's own
/// accounting. These values never decrease while the collector runs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Cumulative {
    /// When counting began (RFC 3339): the collector's first snapshot, or the start of the
    /// command under `run` (whose counts cover its whole life).
    pub since: Option<DateTime<Utc>>,
    /// Which kernel source gave the values.
    pub method: CumulativeMethod,
    /// What these totals cannot see, when a share is missing (other users' processes without
    /// privilege, orphans reparented out of a tree, a counter the source does not have).
    pub reason: Option<Arc<str>>,
    /// User-mode CPU time (ns).
    pub cpu_user_ns: Option<u64>,
    /// Kernel-mode CPU time (ns).
    pub cpu_system_ns: Option<u64>,
    /// Bytes read from storage (block devices).
    pub storage_read_bytes: Option<u64>,
    /// Bytes written to storage.
    pub storage_write_bytes: Option<u64>,
    /// Bytes passed to read-like system calls (`rchar`).
    pub syscall_read_bytes: Option<u64>,
    /// Bytes passed to write-like system calls (`wchar`).
    pub syscall_write_bytes: Option<u64>,
    /// Processes created in the scope.
    pub processes_created: Option<u64>,
    /// Processes of the scope that exited.
    pub processes_exited: Option<u64>,
    /// Highest memory charged to the cgroup (v2 `memory.peak`, v1 `memory.max_usage_in_bytes`),
    /// bytes; `null` outside the cgroup method.
    pub memory_peak_bytes: Option<u64>,
    /// Storage I/O per block device (cgroup `io.stat` / `blkio`), where the source has it.
    pub devices: Vec<DeviceIo>,
}

/// The kernel source of [`Cumulative`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CumulativeMethod {
    /// Machine-wide counters: `/proc/stat` (CPU, forks), `/proc/diskstats` (storage).
    #[default]
    ProcStat,
    /// The cgroup's own counters on the unified hierarchy (`cpu.stat`, `io.stat`,
    /// `memory.peak`), which include exited tasks.
    CgroupV2,
    /// The cgroup's own counters on v1 hierarchies (`cpuacct`, `blkio`, `memory`).
    CgroupV1,
    /// The live processes' own times plus their `cutime`/`cstime` (reaped descendants), and the
    /// collector's `RUSAGE_CHILDREN` where it is the parent.
    ProcessTree,
    /// One process's own times (application_process: its children are not in scope).
    Process,
}

impl CumulativeMethod {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProcStat => "proc_stat",
            Self::CgroupV2 => "cgroup_v2",
            Self::CgroupV1 => "cgroup_v1",
            Self::ProcessTree => "process_tree",
            Self::Process => "process",
        }
    }
}

/// Storage I/O of a cgroup on one block device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceIo {
    /// `major:minor`.
    pub device: Arc<str>,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
}

/// Collector identity and cost.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CollectorInfo {
    /// Always `relay-metrics`.
    pub name: Cow<'static, str>,
    /// Crate version.
    pub version: Cow<'static, str>,
    /// Snapshots taken by this collector so far, this one included.
    pub sequence: u64,
    /// Wall time this collection took.
    pub collect_duration_usec: u64,
    /// CPUs online on the collecting machine when the collector started: the bound of a
    /// recording's CPU rates wherever it is read (`null` when unreadable, and in recordings
    /// older than this value).
    #[serde(default)]
    pub online_cpus: Option<u32>,
    /// Where the per-process values came from: `"bpf_iter"` (one BPF task-iterator read, with
    /// procfs for what it cannot give exactly) or `"procfs"`.
    pub process_source: Cow<'static, str>,
    /// Why procfs served although the configuration allowed the iterator (or that it was
    /// configured); `null` when the iterator served or no process was sampled by choice.
    pub process_source_reason: Option<Arc<str>>,
    /// Measured cgroups whose CPU usage and pressure files were read in full by the backstop
    /// and found changed although the unchanged-cgroup rule said they could not be: a bug in
    /// the rule, so always 0 (since the collector started).
    pub unchanged_rule_misses: u64,
    /// Measured cgroup reads that reused the CPU usage and pressure values of the last read,
    /// the rule having proved them unchanged (since the collector started).
    pub unchanged_reused_reads: u64,
    /// Where the measured cgroups' (`extensions.targets`) exact kernel values came from:
    /// `"bpf_iter"` (one BPF cgroup-iterator read per hierarchy) or `"files"`; `null` when no
    /// cgroup is measured.
    pub cgroup_source: Option<Cow<'static, str>>,
    /// Why the files served, wholly or for some kinds (each named, with its check's verdict)
    /// or cgroups; `null` when the iterator served every kind.
    pub cgroup_source_reason: Option<Arc<str>>,
}

/// Where a snapshot sits in a fixed-rate series.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SamplerInfo {
    /// The sampling period (µs).
    pub interval_usec: u64,
    /// Index of this tick since the series started (skipped ticks consume indices).
    pub tick_index: u64,
    /// How late this tick woke up relative to its deadline (µs).
    pub tick_lateness_usec: u64,
    /// Ticks skipped so far because the previous collection overran them.
    pub missed_ticks_total: u64,
}

/// What the snapshot measured.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TargetInfo {
    /// Root process of `process_tree` / `application_process`.
    pub root_pid: Option<u32>,
    /// Cgroup path of the `cgroup` scope (as configured).
    pub cgroup_path: Option<Arc<str>>,
}

/// Nanosecond CPU time, summed over the processes in scope.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct PreciseCpu {
    /// Σ each process's scheduler run time (user + system, ns), its exited threads included:
    /// from the task iterator only (`null` on procfs, whose `schedstat` covers live threads).
    pub run_time_ns: Option<u64>,
    /// Σ time spent runnable but waiting for a CPU (ns).
    pub run_queue_wait_ns: Option<u64>,
    /// Rate of `run_time_ns` since the previous sample, in logical processors.
    pub run_rate_logical_processors: Option<f64>,
    /// Cgroup CPU usage (v2 `cpu.stat` `usage_usec`, v1 `cpuacct.usage`), ns.
    pub cgroup_usage_ns: Option<u64>,
    /// Rate of `cgroup_usage_ns` since the previous sample, in logical processors.
    pub cgroup_usage_rate_logical_processors: Option<f64>,
}

/// One cgroup in one hierarchy, with its raw counters. Each number is a row of the scope's
/// values table (`snapshot/scope_values.rs`), which says its unit and source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CgroupReport {
    /// `target` (the measured cgroup) or `containing` (contains the root process).
    pub role: CgroupRole,
    /// Path relative to the hierarchy's root, e.g. `/system.slice/foo.service`.
    pub path: Arc<str>,
    /// Where the CPU values came from: `v2`, `v1`, or `null` when not read.
    pub cpu_version: Option<CgroupVersionName>,
    /// Where the memory values came from.
    pub memory_version: Option<CgroupVersionName>,
    /// Where the pids values came from.
    pub pids_version: Option<CgroupVersionName>,
    /// CPU usage (ns).
    pub cpu_usage_ns: Option<u64>,
    /// CFS periods elapsed.
    pub cpu_periods: Option<u64>,
    /// CFS periods throttled.
    pub cpu_throttled_periods: Option<u64>,
    /// Time throttled (µs).
    pub cpu_throttled_usec: Option<u64>,
    /// Effective CPU limit (logical processors) from quotas up the ancestors and the cpuset.
    pub cpu_effective_limit_logical_processors: Option<f64>,
    /// Effective memory limit (min over ancestors), bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Memory charged (bytes).
    pub memory_current_bytes: Option<u64>,
    /// The memory events, each under its flat key `memory_<event>_events` (`memory_low_events`).
    #[serde(flatten, with = "super::scope_values::flat_memory_events")]
    pub memory_events: super::MemoryEventCounts,
    /// Processes (pids.current).
    pub pids_current: Option<u64>,
    /// Process limit (pids.max); `null` when unlimited.
    pub pids_max: Option<u64>,
    /// `pids.events` `max`.
    pub pids_max_events: Option<u64>,
    /// PSI totals (µs), where the hierarchy has pressure files.
    pub pressure: Option<PressureTotals>,
}

/// How a cgroup relates to the measured processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupRole {
    /// The cgroup of the `cgroup` scope.
    #[default]
    Target,
    /// The cgroup that contains the root process of a process scope.
    Containing,
}

impl CgroupRole {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Target => "target",
            Self::Containing => "containing",
        }
    }
}

/// A cgroup hierarchy version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupVersionName {
    /// The unified hierarchy.
    V2,
    /// A legacy per-controller hierarchy.
    V1,
}

impl CgroupVersionName {
    /// The wire name, as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2 => "v2",
            Self::V1 => "v1",
        }
    }
}

/// PSI `total=` values (µs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PressureTotals {
    /// CPU some.
    pub cpu_some_usec: Option<u64>,
    /// CPU full.
    pub cpu_full_usec: Option<u64>,
    /// Memory some.
    pub memory_some_usec: Option<u64>,
    /// Memory full.
    pub memory_full_usec: Option<u64>,
    /// I/O some.
    pub io_some_usec: Option<u64>,
    /// I/O full.
    pub io_full_usec: Option<u64>,
}

/// Kernel event counters (eBPF), scoped to the measured processes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KernelEvents {
    /// True when the programs are loaded and attached.
    pub active: bool,
    /// Why they are not (or which programs failed), when applicable.
    pub reason: Option<Arc<str>>,
    /// Since when the counters below count (RFC 3339): when the programs were loaded, or when
    /// a tracked tree or cgroup started being tracked. `null` when inactive.
    pub counting_since: Option<DateTime<Utc>>,
    /// Processes created in scope since the collector started.
    pub processes_created: Option<u64>,
    /// Processes of the scope that exited since the collector started.
    pub processes_exited: Option<u64>,
    /// Involuntary context switches (preemptions) in scope.
    pub involuntary_switches: Option<u64>,
    /// Run-queue delays observed in scope.
    pub run_queue_delay_count: Option<u64>,
    /// Their total (ns).
    pub run_queue_delay_total_ns: Option<u64>,
    /// Their log2 histogram: bucket `i` counts delays in `[2^i, 2^(i+1))` ns.
    pub run_queue_delay_log2_ns: Option<Vec<u64>>,
    /// Memory-reclaim stalls in scope.
    pub reclaim_stall_count: Option<u64>,
    /// Their total time (ns).
    pub reclaim_stall_total_ns: Option<u64>,
    /// OOM kills of processes in scope.
    pub oom_kills: Option<u64>,
    /// The most recent OOM victims in scope (bounded list).
    pub recent_oom_victims: Vec<OomVictim>,
    /// Events lost because the ring buffer was full.
    pub ring_buffer_drops: Option<u64>,
}

/// One process killed by the OOM killer.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct OomVictim {
    /// Victim pid.
    pub pid: u32,
    /// Victim command name.
    pub comm: Arc<str>,
    /// Anonymous + file + shmem resident memory at the kill (KiB).
    pub rss_kib: u64,
    /// When (ns since boot, CLOCK_MONOTONIC).
    pub time_ns: u64,
}

/// Ages of values refreshed off the sampling path.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct SampleAges {
    /// Age of `memory.private` (read on a slower cadence), ms.
    pub private_memory_ms: Option<u64>,
    /// Age of the GPU values (NVML runs on its own thread), ms.
    pub gpu_ms: Option<u64>,
    /// Age of `extensions.cgroups` (a containing cgroup that does not feed Relay's fields is
    /// re-read at most once a second), ms.
    pub cgroups_ms: Option<u64>,
    /// Age of the machine-wide values (system memory, filesystem capacities, network
    /// interfaces), re-read at most every `extensions.system_wide_interval_millis`, ms; `null`
    /// when none of them is enabled.
    pub system_wide_ms: Option<u64>,
    /// Age of the filesystem capacities, ms: they are asked off the sampling path, in helper
    /// processes, at most once a second while snapshots are taken; `null` without any.
    pub filesystems_ms: Option<u64>,
}

/// Why some values are `null`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Unavailable {
    /// The field or group concerned, e.g. `gpu`, `memory.limit`, `disk.filesystems`.
    pub field: Cow<'static, str>,
    /// The cause, e.g. `libnvidia-ml.so.1: cannot open shared object file`.
    pub reason: Arc<str>,
}
