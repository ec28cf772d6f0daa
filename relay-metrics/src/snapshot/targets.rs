//! `extensions.targets`: the cgroups measured one by one (`serve --cgroups`, the config's
//! `extensions.cgroups`), each with its labels and values. Raw values keep their unit in the
//! field name; counters are the kernel's own and never decrease while the cgroup exists.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Every cgroup measured one by one, and what discovery saw.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Targets {
    /// The patterns given (empty: every cgroup holding processes down to `depth`).
    pub patterns: Vec<String>,
    /// The deepest level selected, if bounded.
    pub depth: Option<u32>,
    /// The hierarchy discovery walks (`v1 memory` on hybrid hosts), with its mount point.
    pub hierarchy: String,
    /// Cgroups selected by the last walk, before `max_targets`.
    pub matched: u64,
    /// Selected cgroups left out because `max_targets` was reached (the last in path order).
    pub dropped: u64,
    /// Why there is less than asked for: a pattern matching nothing, a part of the tree that
    /// cannot be walked, a runtime API that does not answer. One line per cause.
    pub reasons: Vec<String>,
    /// The measured cgroups, in path order.
    pub cgroups: Vec<CgroupTargetReport>,
}

/// One measured cgroup.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CgroupTargetReport {
    /// Its path (`/system.slice/nginx.service`).
    pub cgroup: Arc<str>,
    /// What the path and the runtime say it is.
    pub labels: TargetLabels,
    /// CPU time, ns (v2 `cpu.stat usage_usec`, v1 `cpuacct.usage`).
    pub cpu_usage_ns: Option<u64>,
    /// User CPU time, ns (v2 `user_usec`, v1 `cpuacct.stat`, tick resolution).
    pub cpu_user_ns: Option<u64>,
    /// System CPU time, ns.
    pub cpu_system_ns: Option<u64>,
    /// CFS enforcement periods.
    pub cpu_periods: Option<u64>,
    /// Periods throttled.
    pub cpu_throttled_periods: Option<u64>,
    /// Time throttled, ns.
    pub cpu_throttled_ns: Option<u64>,
    /// Its own CPU quota ÷ period, in cores (`null`: no quota).
    pub cpu_limit_cores: Option<f64>,
    /// Memory charged now.
    pub memory_current_bytes: Option<u64>,
    /// Highest memory charged.
    pub memory_peak_bytes: Option<u64>,
    /// Its own memory limit (`null`: none).
    pub memory_limit_bytes: Option<u64>,
    /// Memory events, one counter per event ([`super::MemoryEventCounts`]).
    pub memory_events: super::MemoryEventCounts,
    /// Processes (and threads on v2) the pids controller counts.
    pub pids_current: Option<u64>,
    /// Its own `pids.max` (`null`: none).
    pub pids_limit: Option<u64>,
    /// Pressure stall totals, µs (`null` without the unified hierarchy's PSI files).
    pub pressure: super::PressureTotals,
    /// Storage I/O per block device.
    pub devices: Vec<TargetDeviceIo>,
    /// Summed over the processes of its subtree, from the collector's one pass over all
    /// processes (`null` when the pass has no per-process values).
    pub processes: Option<ProcessSums>,
    /// GPU use of the processes of its subtree, per NVIDIA device, from the GPU thread's last
    /// per-process records (`null` when there are none to join: the GPU category or its process
    /// metrics off, NVML not answering, or no pass over all processes).
    pub gpus: Option<Vec<TargetGpuUse>>,
    /// Kernel events of its processes (eBPF), `null` without them.
    pub kernel_events: Option<TargetKernelEvents>,
    /// Its `memory.stat` breakdown (and v2 `memory.swap.current`), read only where the
    /// cAdvisor naming asks for it (one more file per cgroup); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_stat: Option<TargetMemoryStat>,
    /// Its own CPU settings as the files give them, read only where the cAdvisor naming asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_spec: Option<TargetCpuSpec>,
    /// When the cgroup was made, seconds since the epoch, as cAdvisor tells a container's
    /// creation time (the earliest modification time of its directories and their
    /// `cgroup.clone_children` / `cgroup.events`, never before boot); never before the
    /// creation, later where nothing looked the cgroup up as it was made (docs/METRICS.md);
    /// absent when unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_seconds: Option<f64>,
    /// The counters of the network namespace its processes share, read from one member
    /// process's `/proc/<pid>/net/dev`; absent when they share none of their own (see
    /// docs/METRICS.md: processes in the host's namespace or in several), when it cannot be
    /// read, or with the network category off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<TargetNetwork>,
    /// Why values are missing (a file that cannot be read).
    pub reason: Option<String>,
}

/// The network namespace of a measured cgroup's processes and its interfaces' counters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetNetwork {
    /// The namespace: the inode number of `/proc/<pid>/ns/net`.
    pub namespace_inode: u64,
    /// Its interfaces, sorted by name, `lo` included.
    pub interfaces: Vec<TargetInterface>,
}

/// One interface's counters, as `/proc/<pid>/net/dev` gives them (`null`: a missing column).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetInterface {
    /// Its name in the namespace (`eth0`, `lo`).
    pub name: String,
    /// Bytes received.
    pub receive_bytes: Option<u64>,
    /// Bytes transmitted.
    pub transmit_bytes: Option<u64>,
    /// Packets received.
    pub receive_packets: Option<u64>,
    /// Packets transmitted.
    pub transmit_packets: Option<u64>,
    /// Receive errors.
    pub receive_errors: Option<u64>,
    /// Transmit errors.
    pub transmit_errors: Option<u64>,
    /// Received packets dropped.
    pub receive_dropped: Option<u64>,
    /// Packets dropped on transmit.
    pub transmit_dropped: Option<u64>,
}

/// A cgroup's `memory.stat` figures, bytes, as cAdvisor reads them: v1's hierarchical `total_*`
/// keys, v2's `anon`, `file`, `file_mapped`, `inactive_file` and `memory.swap.current`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetMemoryStat {
    /// Anonymous memory (v1 `total_rss`, v2 `anon`).
    pub rss_bytes: Option<u64>,
    /// Page cache (v1 `total_cache`, v2 `file`).
    pub cache_bytes: Option<u64>,
    /// Swap in use (v1 `total_swap`, v2 `memory.swap.current`).
    pub swap_bytes: Option<u64>,
    /// Mapped files (v1 `total_mapped_file`, v2 `file_mapped`).
    pub mapped_file_bytes: Option<u64>,
    /// Inactive page cache (v1 `total_inactive_file`, v2 `inactive_file`): what the working set
    /// leaves out.
    pub inactive_file_bytes: Option<u64>,
}

/// A cgroup's own CPU settings, raw, as cAdvisor's `container_spec_cpu_*` give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetCpuSpec {
    /// CFS quota, µs per period (`null`: none).
    pub quota_us: Option<u64>,
    /// CFS period, µs.
    pub period_us: Option<u64>,
    /// v1 `cpu.shares`; v2 `cpu.weight` converted to shares as cAdvisor does
    /// (`2 + (weight - 1) × 262142 / 9999`).
    pub shares: Option<u64>,
}

/// Labels of a measured cgroup; `null` where nothing says.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetLabels {
    /// The systemd unit.
    pub unit: Option<String>,
    /// The container id.
    pub container_id: Option<String>,
    /// `docker`, `podman`, `containerd`, `cri-o`.
    pub container_runtime: Option<String>,
    /// The container's name, from the runtime's API (`--docker-socket`, else `--cri-endpoint`).
    pub container_name: Option<String>,
    /// The container's image, from the runtime's API.
    pub container_image: Option<String>,
    /// The Kubernetes pod UID.
    pub pod_uid: Option<String>,
    /// The pod's name, from the CRI (`--cri-endpoint`).
    pub pod_name: Option<String>,
    /// The pod's namespace, from the CRI.
    pub pod_namespace: Option<String>,
    /// `Guaranteed`, `Burstable`, `BestEffort`.
    pub qos_class: Option<String>,
    /// The Kubernetes container name, from the CRI or a Docker-API runtime's
    /// `io.kubernetes.container.name` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_container: Option<String>,
}

/// One block device's I/O counters.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetDeviceIo {
    /// `major:minor`.
    pub device: String,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read operations.
    pub read_operations: u64,
    /// Write operations.
    pub write_operations: u64,
}

/// Per-process values summed over a cgroup's subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ProcessSums {
    /// Processes.
    pub count: u64,
    /// Threads.
    pub threads: u64,
    /// Resident memory, bytes.
    pub resident_bytes: u64,
    /// Open file descriptors (`null` when some process's could not be counted).
    pub open_file_descriptors: Option<u64>,
}

/// One NVIDIA device's use by the processes of a measured cgroup's subtree (sums over NVML's
/// per-process records).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct TargetGpuUse {
    /// NVML index of the device.
    pub index: u32,
    /// Its UUID (`nvidia:<index>` when NVML gave none), as in `extensions.gpu.devices`.
    pub uuid: Arc<str>,
    /// Processes of the subtree NVML lists on the device.
    pub processes: u64,
    /// Device memory they use (`null` when the driver does not know some process's).
    pub memory_used_bytes: Option<u64>,
    /// Sum of their SM utilisation, percent of the device, over the processes with a sample
    /// since the previous query (`null` when none had one: the first query, an unsupported
    /// query, or all of them idle).
    pub sm_utilization_percent: Option<f64>,
    /// Sum of their memory-controller utilisation, percent (`null` likewise).
    pub memory_utilization_percent: Option<f64>,
}

/// Kernel events of a cgroup's processes, counted by the eBPF programs per process and
/// accumulated here from the agent's start (never decreasing).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetKernelEvents {
    /// Run-queue waits measured.
    pub run_queue_count: u64,
    /// Total ns waited.
    pub run_queue_total_ns: u64,
    /// Log2 histogram: bucket `i` counts waits of `2^i ..< 2^(i+1)` ns.
    pub run_queue_histogram: Vec<u64>,
    /// Involuntary context switches.
    pub preemptions: u64,
    /// Memory-reclaim stalls.
    pub reclaim_stalls: u64,
    /// ns stalled in reclaim.
    pub reclaim_stall_ns: u64,
    /// Processes its processes created.
    pub processes_created: u64,
    /// Its processes seen exiting.
    pub processes_exited: u64,
    /// Recent OOM victims that were its processes.
    pub oom_victims: Vec<TargetOomVictim>,
}

/// An OOM victim of a measured cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct TargetOomVictim {
    /// Its pid.
    pub pid: u32,
    /// Its command name.
    pub comm: String,
    /// When it was killed (ns since boot).
    pub time_boot_ns: u64,
    /// Its anonymous resident memory when killed, KiB.
    pub anon_rss_kib: u64,
}
