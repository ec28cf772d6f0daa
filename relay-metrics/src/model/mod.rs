//! The pure part of the collector: a [`Sample`] of raw counters in, a snapshot out.
//!
//! Nothing here does I/O. `derive` sums per-process counters with Relay's coverage rules, computes
//! rates against the previous sample of the same series ([`Baselines`]), and converts every value
//! into the configured unit. A counter that went backwards gives `None`, never a wrapped number.

mod aggregate;
mod derive;
mod rates;

pub(crate) use derive::{derive_into, Wanted};
pub(crate) use rates::Baselines;

use std::sync::Arc;
use std::time::Instant;

use crate::snapshot::{CgroupReport, KernelEvents, MeasurementScope, Targets, Unavailable};

/// Raw counters of one collection pass, as read by the sources.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// The scope collected.
    pub scope: MeasurementScope,
    /// Monotonic instant of the pass (for rates).
    pub instant: Instant,
    /// `CLOCK_BOOTTIME` of the pass in ns: the clock of process start times, used to tell a
    /// process that started since the previous sample from one that only joined the scope.
    pub boottime_ns: u64,
    /// `sysconf(_SC_CLK_TCK)`.
    pub clock_ticks_per_second: u64,
    /// The per-process part.
    pub processes: ProcessPass,
    /// System-wide values.
    pub system: SystemValues,
    /// cgroup values behind Relay's cgroup fields: the cgroup of the `cgroup` scope, or the
    /// cgroup a process set owns exclusively; `None` otherwise.
    pub cgroup: Option<CgroupValues>,
    /// Every cgroup involved, for `extensions.cgroups`.
    pub cgroup_reports: Vec<CgroupReport>,
    /// The cgroups measured one by one, for `extensions.targets`; `None` when none is asked for.
    pub targets: Option<Box<Targets>>,
    /// When the machine-wide values (`system` memory, `filesystems`, `interfaces`) were read:
    /// earlier than `instant` when they are reused on a slower cadence; interface rates are
    /// taken between two such reads.
    pub system_wide_instant: Instant,
    /// Filesystem capacity per configured path, in configuration order.
    pub filesystems: Vec<FilesystemValues>,
    /// Interface counters, sorted by name (already filtered by the interface selection).
    pub interfaces: Vec<InterfaceValues>,
    /// GPU records (already filtered by device selection and scope).
    pub gpu: GpuValues,
    /// Kernel event counters for the scope.
    pub kernel_events: KernelEvents,
    /// Counts over the scope's whole life, the only ones Relay's lifetime fields carry.
    pub lifetime: LifetimeCounts,
    /// Age of the private-memory values, when they come from an earlier read.
    pub private_memory_age_ms: Option<u64>,
    /// Age of the cgroup reports.
    pub cgroup_reports_age_ms: Option<u64>,
    /// Age of the machine-wide values; `None` when none is enabled.
    pub system_wide_age_ms: Option<u64>,
    /// Age of the filesystem capacities (answered off the sampling path); `None` without any.
    pub filesystems_age_ms: Option<u64>,
    /// Reasons for missing values found while sampling.
    pub unavailable: Vec<Unavailable>,
}

impl Sample {
    /// A sample with nothing in it yet, for the first pass to fill.
    pub(crate) fn empty(scope: MeasurementScope) -> Self {
        Self {
            scope,
            instant: Instant::now(),
            boottime_ns: 0,
            clock_ticks_per_second: 0,
            processes: Default::default(),
            system: Default::default(),
            cgroup: None,
            cgroup_reports: Vec::new(),
            targets: None,
            system_wide_instant: Instant::now(),
            filesystems: Vec::new(),
            interfaces: Vec::new(),
            gpu: Default::default(),
            kernel_events: Default::default(),
            lifetime: Default::default(),
            private_memory_age_ms: None,
            cgroup_reports_age_ms: None,
            system_wide_age_ms: None,
            filesystems_age_ms: None,
            unavailable: Vec::new(),
        }
    }
}

/// Counts over the whole life of the scope: since boot in global scope, since the cgroup's
/// creation for a cgroup's own counters, since the root process started for a tree counted from
/// its start (`relay-metrics run`). A count that only runs from the collector's start is not one
/// (it stays in `extensions.kernel_events`), so its field is `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LifetimeCounts {
    /// Processes created (threads are not processes).
    pub processes_created: Option<u64>,
    /// Processes killed by the OOM killer.
    pub oom_kills: Option<u64>,
    /// Out-of-memory episodes (each ends in at most one kill; a kill is counted as one where no
    /// count of episodes exists).
    pub oom_events: Option<u64>,
}

/// The outcome of the per-process part of a pass.
#[derive(Debug, Clone, Default)]
pub(crate) enum ProcessPass {
    /// No per-process value was requested.
    #[default]
    NotRequested,
    /// The process list could not be obtained (system values are still reported; the reason is
    /// in the sample's `unavailable`).
    ListFailed,
    /// The root process is gone or changed identity (why): the snapshot is "unavailable".
    RootUnavailable(String),
    /// Processes were sampled.
    Sampled(ProcessSet),
}

/// The sampled processes of a pass.
#[derive(Debug, Clone, Default)]
pub(crate) struct ProcessSet {
    /// PIDs listed at the start of the pass.
    pub visible: u64,
    /// Why the pass is incomplete (a descendant that failed for another reason than exiting);
    /// tree and application scopes then report no process sums.
    pub incomplete: Option<String>,
    /// Per-process counters of the processes whose base query succeeded.
    pub processes: Vec<ProcessCounters>,
}

/// Raw counters of one process.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ProcessCounters {
    /// Process id.
    pub pid: u32,
    /// Start time (clock ticks since boot): with the pid, the process identity.
    pub start_time_ticks: u64,
    /// User CPU time (ticks).
    pub utime_ticks: u64,
    /// System CPU time (ticks).
    pub stime_ticks: u64,
    /// User CPU time of the waited-for children (ticks), where the source gives it (procfs).
    pub cutime_ticks: Option<u64>,
    /// System CPU time of the waited-for children (ticks), where the source gives it (procfs).
    pub cstime_ticks: Option<u64>,
    /// Threads.
    pub threads: u64,
    /// Resident set size (bytes).
    pub rss_bytes: u64,
    /// Virtual size (bytes).
    pub vsize_bytes: u64,
    /// `VmHWM` (KiB), when read.
    pub peak_resident_kib: Option<u64>,
    /// Private memory (KiB), when read.
    pub private_kib: Option<u64>,
    /// Open file descriptors, when read.
    pub open_fds: Option<u64>,
    /// I/O counters, when read.
    pub io: Option<IoValues>,
    /// Σ over threads of schedstat run time (ns), when read.
    pub run_time_ns: Option<u64>,
    /// Σ over threads of schedstat run-queue wait (ns), when read.
    pub run_queue_wait_ns: Option<u64>,
}

/// `/proc/<pid>/io` counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IoValues {
    /// Bytes read from storage.
    pub read_bytes: u64,
    /// Bytes written to storage.
    pub write_bytes: u64,
    /// Read system calls.
    pub read_syscalls: u64,
    /// Write system calls.
    pub write_syscalls: u64,
}

/// System-wide values.
#[derive(Debug, Clone, Default)]
pub(crate) struct SystemValues {
    /// `MemTotal` (KiB).
    pub memory_total_kib: Option<u64>,
    /// `MemAvailable` (KiB).
    pub memory_available_kib: Option<u64>,
    /// Per-CPU busy and total ticks from `/proc/stat` (global CPU rate).
    pub cpu_ticks: Vec<CpuTicks>,
    /// `/proc/pressure/cpu`.
    pub cpu_pressure: PressureValues,
    /// `/proc/pressure/memory`.
    pub memory_pressure: PressureValues,
}

/// Busy and total ticks of one CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CpuTicks {
    /// The CPU's number (`cpuN`): CPUs going off- and online change which lines there are.
    pub cpu: u32,
    /// user + nice + system + irq + softirq + steal.
    pub busy: u64,
    /// busy + idle + iowait.
    pub total: u64,
}

/// PSI `total=` values (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PressureValues {
    /// "some" stall time.
    pub some_usec: Option<u64>,
    /// "full" stall time.
    pub full_usec: Option<u64>,
}

/// The cgroup values behind Relay's cgroup fields, in raw units.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct CgroupValues {
    /// Throttled time (µs).
    pub throttled_usec: Option<u64>,
    /// Throttled periods (`cpu/throttled` events).
    pub throttled_periods: Option<u64>,
    /// Effective CPU limit (logical processors).
    pub effective_cpu_limit: Option<f64>,
    /// Effective memory limit (bytes).
    pub memory_limit_bytes: Option<u64>,
    /// Memory charged (bytes).
    pub memory_current_bytes: Option<u64>,
    /// `memory/high` events.
    pub memory_high_events: Option<u64>,
    /// `memory/maximum` events.
    pub memory_max_events: Option<u64>,
    /// `memory/out_of_memory` events.
    pub memory_oom_events: Option<u64>,
    /// `memory/terminated` events (OOM kills).
    pub memory_oom_kills: Option<u64>,
    /// `processes/maximum` events.
    pub pids_max_events: Option<u64>,
    /// cgroup CPU pressure.
    pub cpu_pressure: PressureValues,
    /// cgroup memory pressure.
    pub memory_pressure: PressureValues,
    /// CPU usage (ns), for the precise CPU extension.
    pub usage_ns: Option<u64>,
    /// User CPU time (µs): v2 `cpu.stat user_usec`, v1 `cpuacct.usage_user`.
    pub user_usec: Option<u64>,
    /// System CPU time (µs): v2 `cpu.stat system_usec`, v1 `cpuacct.usage_sys`.
    pub system_usec: Option<u64>,
}

/// Capacity of one configured path.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FilesystemValues {
    /// The path as configured.
    pub path: Arc<str>,
    /// Total bytes.
    pub total_bytes: Option<u64>,
    /// Bytes available to unprivileged users.
    pub available_bytes: Option<u64>,
    /// Free bytes including reserved blocks.
    pub free_bytes: Option<u64>,
}

/// Counters of one network interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct InterfaceValues {
    /// Interface name.
    pub name: Arc<str>,
    /// Its counters.
    pub counts: InterfaceCounts,
}

/// The counters of a network interface, as `/proc/net/dev` and sysfs `statistics/` give
/// them: Relay's six, and the drops cAdvisor exports. Each is `None` when unknown (a missing or
/// malformed column).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InterfaceCounts {
    /// Bytes received.
    pub rx_bytes: Option<u64>,
    /// Bytes transmitted.
    pub tx_bytes: Option<u64>,
    /// Packets received.
    pub rx_packets: Option<u64>,
    /// Packets transmitted.
    pub tx_packets: Option<u64>,
    /// Receive errors (`rx_errors`; drops and FIFO/frame errors are separate columns).
    pub rx_errors: Option<u64>,
    /// Transmit errors (`tx_errors`).
    pub tx_errors: Option<u64>,
    /// Received packets dropped (`rx_dropped`).
    pub rx_dropped: Option<u64>,
    /// Packets dropped on transmit (`tx_dropped`).
    pub tx_dropped: Option<u64>,
}

impl InterfaceCounts {
    /// Relay's six counters: bytes, packets and errors, each received then transmitted.
    pub fn to_array(self) -> [Option<u64>; 6] {
        [
            self.rx_bytes,
            self.tx_bytes,
            self.rx_packets,
            self.tx_packets,
            self.rx_errors,
            self.tx_errors,
        ]
    }
}

/// GPU records of a pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuValues {
    /// Device records.
    pub devices: Vec<GpuDeviceValues>,
    /// Per-process records (only processes in scope).
    pub processes: Vec<GpuProcessValues>,
    /// The NVML process records of this pass are complete: process metrics are on and the GPU
    /// thread's last query answered (with a process pass to match them against).
    pub nvml_processes: bool,
    /// Age of the GPU sample (ms), when it came from the GPU thread.
    pub age_ms: Option<u64>,
    /// `extensions.gpu`, built by the collector from the GPU thread's sample.
    pub extension: Option<crate::snapshot::GpuExtension>,
}

/// One GPU device.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuDeviceValues {
    /// Vendor.
    pub vendor: crate::snapshot::AcceleratorVendor,
    /// UUID / PCI address / `nvidia:<index>`.
    pub identifier: Arc<str>,
    /// NVML index.
    pub index: Option<u32>,
    /// Memory used (bytes).
    pub memory_used_bytes: Option<u64>,
    /// Utilisation (percent).
    pub utilization_percent: Option<f64>,
}

/// One process on one GPU device.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct GpuProcessValues {
    /// Vendor of the device.
    pub vendor: crate::snapshot::AcceleratorVendor,
    /// Device identifier.
    pub identifier: Arc<str>,
    /// NVML index of the device.
    pub index: Option<u32>,
    /// The process.
    pub pid: u32,
    /// Device memory used by the process (bytes).
    pub memory_used_bytes: Option<u64>,
    /// The process's utilisation of the device (percent; NVML: its SM utilisation).
    pub utilization_percent: Option<f64>,
    /// Its memory-controller utilisation of the device (percent; NVML only).
    pub memory_utilization_percent: Option<f64>,
}
