//! cAdvisor's per-container families as the kubelet's `/metrics/cadvisor` exposes them: the
//! same names, types, units (seconds, bytes, raw CFS microseconds and shares) and labels
//! (`container`, `id`, `image`, `name`, `namespace`, `pod`; `cpu="total"` on the usage,
//! `device` on the `container_fs_*` counters, `interface` on the `container_network_*` ones),
//! from the same cgroup files cAdvisor reads and the container's `/proc/<pid>/net/dev`.
//! docs/METRICS.md maps each to its file and says where a meaning differs.

use super::table::{ns, plain};
use super::{emit_family, emit_values, Style, Targets};
use crate::output::metrics::{Family, Kind, Label, Unit};
use crate::snapshot::{CgroupTargetReport, TargetDeviceIo};

type Getter = fn(&CgroupTargetReport) -> Option<f64>;

/// The `relay_metrics_cgroup_*` families a cAdvisor family below carries: not exported again
/// in this naming.
pub(super) const COVERED: &[&str] = &[
    "relay_metrics_cgroup_cpu_usage_seconds_total",
    "relay_metrics_cgroup_cpu_user_seconds_total",
    "relay_metrics_cgroup_cpu_system_seconds_total",
    "relay_metrics_cgroup_cpu_periods_total",
    "relay_metrics_cgroup_cpu_throttled_periods_total",
    "relay_metrics_cgroup_cpu_throttled_seconds_total",
    "relay_metrics_cgroup_cpu_limit_cores",
    "relay_metrics_cgroup_memory_usage_bytes",
    "relay_metrics_cgroup_memory_peak_bytes",
    "relay_metrics_cgroup_memory_limit_bytes",
    "relay_metrics_cgroup_pids_limit",
    "relay_metrics_cgroup_processes",
    "relay_metrics_cgroup_threads",
    "relay_metrics_cgroup_open_file_descriptors",
    "relay_metrics_cgroup_start_time_seconds",
];

const fn family(name: &'static str, kind: Kind, unit: Unit, help: &'static str) -> Family {
    Family {
        name,
        kind,
        unit,
        help,
        names: crate::config::MetricNames::Cadvisor,
    }
}

/// `container_cpu_usage_seconds_total`, labelled `cpu="total"` as cAdvisor does without
/// per-CPU usage.
const CPU_USAGE: Family = family(
    "container_cpu_usage_seconds_total",
    Kind::Counter,
    Unit::Seconds,
    "Cumulative cpu time consumed in seconds.",
);

/// Families of one series per container, in cAdvisor's help text.
#[rustfmt::skip]
const SIMPLE: &[(Family, Getter)] = &[
    (family("container_cpu_user_seconds_total", Kind::Counter, Unit::Seconds, "Cumulative user cpu time consumed in seconds."),
        |r| ns(r.cpu_user_ns)),
    (family("container_cpu_system_seconds_total", Kind::Counter, Unit::Seconds, "Cumulative system cpu time consumed in seconds."),
        |r| ns(r.cpu_system_ns)),
    (family("container_cpu_cfs_periods_total", Kind::Counter, Unit::Count, "Number of elapsed enforcement period intervals."),
        |r| plain(r.cpu_periods)),
    (family("container_cpu_cfs_throttled_periods_total", Kind::Counter, Unit::Count, "Number of throttled period intervals."),
        |r| plain(r.cpu_throttled_periods)),
    (family("container_cpu_cfs_throttled_seconds_total", Kind::Counter, Unit::Seconds, "Total time duration the container has been throttled."),
        |r| ns(r.cpu_throttled_ns)),
    (family("container_memory_usage_bytes", Kind::Gauge, Unit::Bytes, "Current memory usage in bytes, including all memory regardless of when it was accessed"),
        |r| plain(r.memory_current_bytes)),
    (family("container_memory_working_set_bytes", Kind::Gauge, Unit::Bytes, "Current working set in bytes."),
        |r| {
            let stat = r.memory_stat.as_ref()?;
            let usage = r.memory_current_bytes?;
            Some(crate::source::cgroup::working_set(usage, stat) as f64)
        }),
    (family("container_memory_rss", Kind::Gauge, Unit::Bytes, "Size of RSS in bytes."),
        |r| plain(r.memory_stat.and_then(|s| s.rss_bytes))),
    (family("container_memory_cache", Kind::Gauge, Unit::Bytes, "Number of bytes of page cache memory."),
        |r| plain(r.memory_stat.and_then(|s| s.cache_bytes))),
    (family("container_memory_swap", Kind::Gauge, Unit::Bytes, "Container swap usage in bytes."),
        |r| plain(r.memory_stat.and_then(|s| s.swap_bytes))),
    (family("container_memory_mapped_file", Kind::Gauge, Unit::Bytes, "Size of memory mapped files in bytes."),
        |r| plain(r.memory_stat.and_then(|s| s.mapped_file_bytes))),
    (family("container_memory_max_usage_bytes", Kind::Gauge, Unit::Bytes, "Maximum memory usage recorded in bytes"),
        |r| plain(r.memory_peak_bytes)),
    (family("container_memory_failcnt", Kind::Counter, Unit::Count, "Number of memory usage hits limits"),
        |r| plain(r.memory_events.max)),
    (family("container_oom_events_total", Kind::Counter, Unit::Count, "Count of out of memory events observed for the container"),
        |r| plain(r.memory_events.oom_kill)),
    (family("container_processes", Kind::Gauge, Unit::Count, "Number of processes running inside the container."),
        |r| r.processes.map(|p| p.count as f64)),
    (family("container_threads", Kind::Gauge, Unit::Count, "Number of threads running inside the container"),
        |r| r.processes.map(|p| p.threads as f64)),
    (family("container_threads_max", Kind::Gauge, Unit::Count, "Maximum number of threads allowed inside the container, infinity if value is zero"),
        |r| r.pids_current.map(|_| r.pids_limit.unwrap_or(0) as f64)),
    (family("container_file_descriptors", Kind::Gauge, Unit::Count, "Number of open file descriptors for the container."),
        |r| plain(r.processes.and_then(|p| p.open_file_descriptors))),
    (family("container_spec_cpu_quota", Kind::Gauge, Unit::Count, "CPU quota of the container."),
        |r| plain(r.cpu_spec.and_then(|s| s.quota_us))),
    (family("container_spec_cpu_period", Kind::Gauge, Unit::Count, "CPU period of the container."),
        |r| plain(r.cpu_spec.and_then(|s| s.period_us))),
    (family("container_spec_cpu_shares", Kind::Gauge, Unit::Count, "CPU share of the container."),
        |r| plain(r.cpu_spec.and_then(|s| s.shares))),
    // cAdvisor's 0 for no limit, where the memory controller answers.
    (family("container_start_time_seconds", Kind::Gauge, Unit::Seconds, "Start time of the container since unix epoch in seconds."),
        |r| r.created_seconds),
    (family("container_spec_memory_limit_bytes", Kind::Gauge, Unit::Bytes, "Memory limit for the container."),
        |r| r.memory_current_bytes.map(|_| r.memory_limit_bytes.unwrap_or(0) as f64)),
];

const LAST_SEEN: Family = family(
    "container_last_seen",
    Kind::Gauge,
    Unit::Seconds,
    "Last time a container was seen by the exporter",
);

type DeviceGetter = fn(&TargetDeviceIo) -> u64;

/// Per block device (`device` is `major:minor`: cAdvisor gives the device node's path).
#[rustfmt::skip]
const DEVICES: &[(Family, DeviceGetter)] = &[
    (family("container_fs_reads_bytes_total", Kind::Counter, Unit::Bytes, "Cumulative count of bytes read"), |d| d.read_bytes),
    (family("container_fs_writes_bytes_total", Kind::Counter, Unit::Bytes, "Cumulative count of bytes written"), |d| d.write_bytes),
    (family("container_fs_reads_total", Kind::Counter, Unit::Count, "Cumulative count of reads completed"), |d| d.read_operations),
    (family("container_fs_writes_total", Kind::Counter, Unit::Count, "Cumulative count of writes completed"), |d| d.write_operations),
];

/// Per interface of the container's network namespace, in cAdvisor's help text.
#[rustfmt::skip]
const NETWORK: &[(Family, super::InterfaceGetter)] = &[
    (family("container_network_receive_bytes_total", Kind::Counter, Unit::Bytes, "Cumulative count of bytes received"), |i| i.receive_bytes),
    (family("container_network_receive_packets_total", Kind::Counter, Unit::Count, "Cumulative count of packets received"), |i| i.receive_packets),
    (family("container_network_receive_packets_dropped_total", Kind::Counter, Unit::Count, "Cumulative count of packets dropped while receiving"), |i| i.receive_dropped),
    (family("container_network_receive_errors_total", Kind::Counter, Unit::Count, "Cumulative count of errors encountered while receiving"), |i| i.receive_errors),
    (family("container_network_transmit_bytes_total", Kind::Counter, Unit::Bytes, "Cumulative count of bytes transmitted"), |i| i.transmit_bytes),
    (family("container_network_transmit_packets_total", Kind::Counter, Unit::Count, "Cumulative count of packets transmitted"), |i| i.transmit_packets),
    (family("container_network_transmit_packets_dropped_total", Kind::Counter, Unit::Count, "Cumulative count of packets dropped while transmitting"), |i| i.transmit_dropped),
    (family("container_network_transmit_errors_total", Kind::Counter, Unit::Count, "Cumulative count of errors encountered while transmitting"), |i| i.transmit_errors),
];

/// Whether cAdvisor reports the network of a cgroup whose processes share a namespace of their
/// own: not for a pod's own cgroup (a raw cgroup to it) nor for a container of a pod, which
/// shares the namespace of the pod's sandbox (its `pause` container, the one reported), so
/// that a sum over a pod counts its traffic once. A pod's containers are told from its sandbox
/// by their Kubernetes container name (the CRI's, or the Docker API's label, `POD` for the
/// sandbox); without one (no runtime API) the sandbox cannot be told and all report it.
fn owns_its_network(report: &CgroupTargetReport) -> bool {
    let labels = &report.labels;
    let in_a_pod = labels.pod_uid.is_some() || labels.pod_name.is_some();
    let pods_own_cgroup = in_a_pod && labels.container_id.is_none();
    let a_pods_container = in_a_pod
        && labels
            .kubernetes_container
            .as_deref()
            .is_some_and(|name| name != "POD");
    !pods_own_cgroup && !a_pods_container
}

/// Whether cAdvisor lists an interface of a container's namespace: it leaves out the names
/// starting (case aside) with `lo`, `veth`, `docker` or `nerdctl` (`isIgnoredDevice` of its
/// libcontainer handler).
pub(super) fn lists_interface(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !["lo", "veth", "docker", "nerdctl"]
        .iter()
        .any(|prefix| lower.starts_with(prefix))
}

/// Whether `name` is the name of one of cAdvisor's per-container families.
pub(crate) fn is_cadvisor_name(name: &str) -> bool {
    name.starts_with("container_")
        && (name == CPU_USAGE.name
            || name == LAST_SEEN.name
            || SIMPLE.iter().any(|(f, _)| f.name == name)
            || DEVICES.iter().any(|(f, _)| f.name == name)
            || NETWORK.iter().any(|(f, _)| f.name == name))
}

/// Hands cAdvisor's families of `targets` to `sink`.
pub(super) fn walk<S: crate::output::metrics::Sink>(
    targets: &Targets,
    last_seen: f64,
    sink: &mut S,
) {
    let style = Style::Cadvisor;
    emit_family(sink, &CPU_USAGE, targets, style, |report, emit| {
        if let Some(value) = ns(report.cpu_usage_ns) {
            emit(&[("cpu", Label::Str("total"))], value);
        }
    });
    for (family, get) in SIMPLE {
        emit_family(sink, family, targets, style, |report, emit| {
            if let Some(value) = get(report) {
                emit(&[], value);
            }
        });
    }
    for (family, get) in DEVICES {
        emit_family(sink, family, targets, style, |report, emit| {
            for device in &report.devices {
                emit(
                    &[("device", Label::Str(&device.device))],
                    get(device) as f64,
                );
            }
        });
    }
    super::emit_network(
        sink,
        NETWORK,
        targets,
        style,
        (owns_its_network, lists_interface),
    );
    // The snapshot's time, not the report's: never copied from the last text.
    emit_values(sink, &LAST_SEEN, targets, style, false, |_, emit| {
        emit(&[], last_seen)
    });
}
