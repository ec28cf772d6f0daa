//! The `relay_metrics_cgroup_*` families of one series per cgroup.

use crate::output::metrics::{Family, Kind, Unit};
use crate::snapshot::CgroupTargetReport;

type Getter = fn(&CgroupTargetReport) -> Option<f64>;

pub(super) fn ns(value: Option<u64>) -> Option<f64> {
    value.map(|ns| ns as f64 / 1e9)
}

pub(super) fn plain(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// Families of one series per cgroup.
pub(super) const SIMPLE: &[(Family, Getter)] = &[
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_usage_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "CPU time of the cgroup (its own counter).",
        ),
        |r| ns(r.cpu_usage_ns),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_user_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "User-mode CPU time of the cgroup (its own counter).",
        ),
        |r| ns(r.cpu_user_ns),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_system_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "Kernel-mode CPU time of the cgroup (its own counter).",
        ),
        |r| ns(r.cpu_system_ns),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_periods_total",
            Kind::Counter,
            Unit::Count,
            "CPU bandwidth enforcement periods of the cgroup.",
        ),
        |r| plain(r.cpu_periods),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_throttled_periods_total",
            Kind::Counter,
            Unit::Count,
            "Enforcement periods in which the cgroup was throttled.",
        ),
        |r| plain(r.cpu_throttled_periods),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_throttled_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "Time the cgroup was throttled by its CPU quota.",
        ),
        |r| ns(r.cpu_throttled_ns),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_cpu_limit_cores",
            Kind::Gauge,
            Unit::Cores,
            "The cgroup's own CPU quota divided by its period.",
        ),
        |r| r.cpu_limit_cores,
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_memory_usage_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "Memory charged to the cgroup.",
        ),
        |r| plain(r.memory_current_bytes),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_memory_peak_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "Highest memory charged to the cgroup.",
        ),
        |r| plain(r.memory_peak_bytes),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_memory_limit_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "The cgroup's own memory limit.",
        ),
        |r| plain(r.memory_limit_bytes),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_pids",
            Kind::Gauge,
            Unit::Count,
            "Tasks the cgroup's pids controller counts.",
        ),
        |r| plain(r.pids_current),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_pids_limit",
            Kind::Gauge,
            Unit::Count,
            "The cgroup's own pids.max.",
        ),
        |r| plain(r.pids_limit),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_start_time_seconds",
            Kind::Gauge,
            Unit::Seconds,
            "When the cgroup was made, seconds since the epoch (cAdvisor's container creation time).",
        ),
        |r| r.created_seconds,
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_processes",
            Kind::Gauge,
            Unit::Count,
            "Processes in the cgroup's subtree.",
        ),
        |r| r.processes.map(|p| p.count as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_threads",
            Kind::Gauge,
            Unit::Count,
            "Threads of the processes in the cgroup's subtree.",
        ),
        |r| r.processes.map(|p| p.threads as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_resident_memory_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "Resident memory summed over the processes in the cgroup's subtree.",
        ),
        |r| r.processes.map(|p| p.resident_bytes as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_open_file_descriptors",
            Kind::Gauge,
            Unit::Count,
            "Open file descriptors of the processes in the cgroup's subtree.",
        ),
        |r| plain(r.processes.and_then(|p| p.open_file_descriptors)),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_preemptions_total",
            Kind::Counter,
            Unit::Count,
            "Involuntary context switches of the cgroup's processes (eBPF, since the agent started).",
        ),
        |r| r.kernel_events.as_ref().map(|k| k.preemptions as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_reclaim_stalls_total",
            Kind::Counter,
            Unit::Count,
            "Memory-reclaim stalls of the cgroup's processes (eBPF).",
        ),
        |r| r.kernel_events.as_ref().map(|k| k.reclaim_stalls as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_reclaim_stall_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "Time the cgroup's processes stalled in memory reclaim (eBPF).",
        ),
        |r| r.kernel_events.as_ref().map(|k| k.reclaim_stall_ns as f64 / 1e9),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_processes_created_total",
            Kind::Counter,
            Unit::Count,
            "Processes created by the cgroup's processes (eBPF).",
        ),
        |r| r.kernel_events.as_ref().map(|k| k.processes_created as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_processes_exited_total",
            Kind::Counter,
            Unit::Count,
            "Processes of the cgroup seen exiting (eBPF membership).",
        ),
        |r| r.kernel_events.as_ref().map(|k| k.processes_exited as f64),
    ),
];
