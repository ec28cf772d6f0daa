//! The `relay_metrics_cgroup_*` families: one series set per cgroup measured one by one
//! (`extensions.targets`), labelled `cgroup` and, where known, `unit`, `container_id`,
//! `container_runtime`, `container_name`, `container_image`, `pod_uid`, `pod_name`,
//! `pod_namespace`, `qos_class` (the `relay_metrics_cgroup_gpu_*` families also `device` and
//! `uuid`, the `relay_metrics_cgroup_network_*` families `interface`); plus `relay_metrics_targets` and `relay_metrics_targets_dropped`. Counters are the
//! cgroup's own kernel counters (they never decrease while the cgroup exists; a cgroup removed
//! and made again under the same path starts from zero, which Prometheus reads as a reset).

mod cadvisor;
mod table;

pub(crate) use cadvisor::is_cadvisor_name;

use super::metrics::{Family, Histogram, Kind, Label, Number, Sink, Unit, CGROUP_SERIES_LABELS};
use crate::snapshot::{CgroupTargetReport, TargetGpuUse, TargetInterface, Targets};

use table::plain;

const RUN_QUEUE: Family = Family::relay_metrics(
    "relay_metrics_cgroup_run_queue_delay_seconds",
    Kind::Histogram,
    Unit::Seconds,
    "Time the cgroup's threads waited runnable for a CPU (eBPF, since the agent started).",
);

/// The log2 buckets exported: waits up to 2^k ns, k = 10 (about 1 µs) to 30 (about 1 s), every
/// second power.
const RUN_QUEUE_BOUNDS: [u32; 11] = [10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30];

type DeviceGetter = fn(&crate::snapshot::TargetDeviceIo) -> u64;

const DEVICES: &[(Family, DeviceGetter)] = &[
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_io_read_bytes_total",
            Kind::Counter,
            Unit::Bytes,
            "Bytes the cgroup read from a block device.",
        ),
        |d| d.read_bytes,
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_io_written_bytes_total",
            Kind::Counter,
            Unit::Bytes,
            "Bytes the cgroup wrote to a block device.",
        ),
        |d| d.write_bytes,
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_io_read_operations_total",
            Kind::Counter,
            Unit::Count,
            "Read operations of the cgroup on a block device.",
        ),
        |d| d.read_operations,
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_io_write_operations_total",
            Kind::Counter,
            Unit::Count,
            "Write operations of the cgroup on a block device.",
        ),
        |d| d.write_operations,
    ),
];

type GpuGetter = fn(&TargetGpuUse) -> Option<f64>;

/// Per device a cgroup's processes use (NVML per-process records summed over its subtree).
const GPUS: &[(Family, GpuGetter)] = &[
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_gpu_processes",
            Kind::Gauge,
            Unit::Count,
            "Processes of the cgroup's subtree on the GPU.",
        ),
        |g| Some(g.processes as f64),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_gpu_memory_used_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "GPU memory used by the processes of the cgroup's subtree.",
        ),
        |g| plain(g.memory_used_bytes),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_gpu_sm_utilization_ratio",
            Kind::Gauge,
            Unit::Ratio,
            "SM utilisation of the GPU by the processes of the cgroup's subtree (0-1, summed).",
        ),
        |g| g.sm_utilization_percent.map(|p| p / 100.0),
    ),
    (
        Family::relay_metrics(
            "relay_metrics_cgroup_gpu_memory_utilization_ratio",
            Kind::Gauge,
            Unit::Ratio,
            "GPU memory-controller utilisation by the processes of the cgroup's subtree (0-1, summed).",
        ),
        |g| g.memory_utilization_percent.map(|p| p / 100.0),
    ),
];

type InterfaceGetter = fn(&TargetInterface) -> Option<u64>;

/// Per interface of the network namespace a cgroup's processes share.
#[rustfmt::skip]
const NETWORK: &[(Family, InterfaceGetter)] = &[
    (Family::relay_metrics("relay_metrics_cgroup_network_received_bytes_total", Kind::Counter, Unit::Bytes,
        "Bytes received on the interface of the cgroup's network namespace."), |i| i.receive_bytes),
    (Family::relay_metrics("relay_metrics_cgroup_network_transmitted_bytes_total", Kind::Counter, Unit::Bytes,
        "Bytes transmitted on the interface of the cgroup's network namespace."), |i| i.transmit_bytes),
    (Family::relay_metrics("relay_metrics_cgroup_network_received_packets_total", Kind::Counter, Unit::Count,
        "Packets received on the interface of the cgroup's network namespace."), |i| i.receive_packets),
    (Family::relay_metrics("relay_metrics_cgroup_network_transmitted_packets_total", Kind::Counter, Unit::Count,
        "Packets transmitted on the interface of the cgroup's network namespace."), |i| i.transmit_packets),
    (Family::relay_metrics("relay_metrics_cgroup_network_receive_errors_total", Kind::Counter, Unit::Count,
        "Receive errors on the interface of the cgroup's network namespace."), |i| i.receive_errors),
    (Family::relay_metrics("relay_metrics_cgroup_network_transmit_errors_total", Kind::Counter, Unit::Count,
        "Transmit errors on the interface of the cgroup's network namespace."), |i| i.transmit_errors),
    (Family::relay_metrics("relay_metrics_cgroup_network_receive_dropped_packets_total", Kind::Counter, Unit::Count,
        "Received packets dropped on the interface of the cgroup's network namespace."), |i| i.receive_dropped),
    (Family::relay_metrics("relay_metrics_cgroup_network_transmit_dropped_packets_total", Kind::Counter, Unit::Count,
        "Packets dropped on transmit on the interface of the cgroup's network namespace."), |i| i.transmit_dropped),
];

/// Which cgroups report their network, and which of its interfaces are listed.
type NetworkFilter = (fn(&CgroupTargetReport) -> bool, fn(&str) -> bool);

/// Emits each family of `table` per interface of each cgroup's network namespace, for the
/// cgroups and the interfaces the filter keeps.
fn emit_network<S: Sink>(
    sink: &mut S,
    table: &[(Family, InterfaceGetter)],
    targets: &Targets,
    style: Style,
    (reports, keep): NetworkFilter,
) {
    for (family, get) in table {
        emit_family(sink, family, targets, style, |report, emit| {
            let network = report.network.as_ref().filter(|_| reports(report));
            let interfaces = network.iter().flat_map(|n| &n.interfaces);
            for interface in interfaces.filter(|i| keep(&i.name)) {
                if let Some(value) = get(interface) {
                    emit(&[("interface", Label::Str(&interface.name))], value as f64);
                }
            }
        });
    }
}

const TARGETS: Family = Family::relay_metrics(
    "relay_metrics_targets",
    Kind::Gauge,
    Unit::Count,
    "Cgroups measured one by one.",
);

const DROPPED: Family = Family::relay_metrics(
    "relay_metrics_targets_dropped",
    Kind::Gauge,
    Unit::Count,
    "Cgroups selected but not measured because max_targets was reached.",
);

/// How a cgroup's series are labelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Style {
    /// `cgroup`, `unit`, `container_id`, … (the `relay_metrics` and `otel` namings).
    RelayMetrics,
    /// cAdvisor's `container`, `id`, `image`, `name`, `namespace`, `pod`.
    Cadvisor,
}

/// The labels of one cgroup into `labels`; returns how many.
fn cgroup_labels<'r>(
    report: &'r CgroupTargetReport,
    style: Style,
    labels: &mut [(&'static str, Label<'r>); CGROUP_SERIES_LABELS],
) -> usize {
    let l = &report.labels;
    let mut count = 0;
    let mut push = |key: &'static str, value: Option<&'r str>| {
        if let Some(value) = value {
            labels[count] = (key, Label::Str(value));
            count += 1;
        }
    };
    if style == Style::Cadvisor {
        push("container", l.kubernetes_container.as_deref());
        push("id", Some(&report.cgroup));
        push("image", l.container_image.as_deref());
        push("name", l.container_name.as_deref());
        push("namespace", l.pod_namespace.as_deref());
        push("pod", l.pod_name.as_deref());
        return count;
    }
    push("cgroup", Some(&report.cgroup));
    push("unit", l.unit.as_deref());
    push("container_id", l.container_id.as_deref());
    push("container_runtime", l.container_runtime.as_deref());
    push("container_name", l.container_name.as_deref());
    push("container_image", l.container_image.as_deref());
    push("pod_uid", l.pod_uid.as_deref());
    push("pod_name", l.pod_name.as_deref());
    push("pod_namespace", l.pod_namespace.as_deref());
    push("qos_class", l.qos_class.as_deref());
    count
}

/// Emits one family over every cgroup; `each` hands `(extra labels, value)` pairs to `emit`
/// from the cgroup's report alone (a sink may copy a cgroup's lines from its last walk instead,
/// [`Sink::cgroup_lines`]).
fn emit_family<S: Sink>(
    sink: &mut S,
    family: &Family,
    targets: &Targets,
    style: Style,
    each: impl Fn(&CgroupTargetReport, &mut dyn FnMut(&[(&'static str, Label<'_>)], f64)),
) {
    emit_values(sink, family, targets, style, true, each);
}

/// [`emit_family`]; with `reusable` false (values that do not come from the report alone) no
/// line is copied.
fn emit_values<S: Sink>(
    sink: &mut S,
    family: &Family,
    targets: &Targets,
    style: Style,
    reusable: bool,
    each: impl Fn(&CgroupTargetReport, &mut dyn FnMut(&[(&'static str, Label<'_>)], f64)),
) {
    let mut started = false;
    for (index, report) in targets.cgroups.iter().enumerate() {
        if reusable && sink.cgroup_lines(family, index, started) {
            started = true;
            continue;
        }
        let mut labels = [("", Label::Int(0)); CGROUP_SERIES_LABELS];
        let base = cgroup_labels(report, style, &mut labels);
        each(report, &mut |extra, value| {
            if !value.is_finite() {
                return;
            }
            if !started {
                started = true;
                sink.begin(family);
            }
            sink.cgroup_point(family, index, &labels[..base], extra, Number::F64(value));
        });
    }
}

/// Hands the per-cgroup families of `targets` to `sink`.
pub(crate) fn walk<S: Sink>(targets: &Targets, sink: &mut S) {
    walk_styled(targets, Style::RelayMetrics, sink);
}

/// The per-cgroup families in cAdvisor's naming: cAdvisor's families ([`cadvisor`]), then the
/// `relay_metrics_cgroup_*` families cAdvisor has no equivalent of, all with cAdvisor's labels.
/// `last_seen`: the snapshot's time, seconds since the epoch.
pub(crate) fn walk_cadvisor<S: Sink>(targets: &Targets, last_seen: f64, sink: &mut S) {
    cadvisor::walk(targets, last_seen, sink);
    walk_styled(targets, Style::Cadvisor, sink);
}

fn walk_styled<S: Sink>(targets: &Targets, style: Style, sink: &mut S) {
    sink.begin(&TARGETS);
    sink.point(&TARGETS, &[], Number::F64(targets.cgroups.len() as f64));
    sink.begin(&DROPPED);
    sink.point(&DROPPED, &[], Number::F64(targets.dropped as f64));
    for (family, entry, divisor) in table::families() {
        if style == Style::Cadvisor && cadvisor::COVERED.contains(&family.name) {
            continue;
        }
        emit_family(sink, &family, targets, style, |report, emit| {
            for series in entry.series {
                if let Some(value) = (series.read)(report) {
                    let mut labels = [("", Label::Int(0)); 2];
                    for (slot, &(key, text)) in labels.iter_mut().zip(series.labels) {
                        *slot = (key, Label::Str(text));
                    }
                    emit(&labels[..series.labels.len().min(2)], value / divisor);
                }
            }
        });
    }
    emit_extras(targets, style, sink);
}

/// The families with labels of their own: the run-queue histogram, per device, per GPU, per
/// interface.
fn emit_extras<S: Sink>(targets: &Targets, style: Style, sink: &mut S) {
    emit_run_queue(targets, style, sink);
    // cAdvisor's `container_fs_*` and `container_network_*` families carry the per-device and
    // per-interface counters in its naming.
    if style == Style::RelayMetrics {
        emit_network(sink, NETWORK, targets, style, (|_| true, |_| true));
    }
    for (family, get) in DEVICES.iter().filter(|_| style == Style::RelayMetrics) {
        emit_family(sink, family, targets, style, |report, emit| {
            for device in &report.devices {
                emit(
                    &[("device", Label::Str(&device.device))],
                    get(device) as f64,
                );
            }
        });
    }
    for (family, get) in GPUS {
        emit_family(sink, family, targets, style, |report, emit| {
            for gpu in report.gpus.iter().flatten() {
                if let Some(value) = get(gpu) {
                    let labels = [
                        ("device", Label::Int(u64::from(gpu.index))),
                        ("uuid", Label::Str(&gpu.uuid)),
                    ];
                    emit(&labels, value);
                }
            }
        });
    }
}

/// The run-queue delay histogram of every cgroup with kernel events.
fn emit_run_queue<S: Sink>(targets: &Targets, style: Style, sink: &mut S) {
    let mut started = false;
    for (index, report) in targets.cgroups.iter().enumerate() {
        let Some(kernel) = &report.kernel_events else {
            continue;
        };
        if sink.cgroup_lines(&RUN_QUEUE, index, started) {
            started = true;
            continue;
        }
        // Bucket i of the kernel's histogram holds waits of 2^i ..< 2^(i+1) ns.
        let buckets = RUN_QUEUE_BOUNDS
            .iter()
            .map(|&k| {
                let upto = kernel
                    .run_queue_histogram
                    .iter()
                    .take(k as usize)
                    .sum::<u64>();
                ((1u64 << k) as f64 / 1e9, upto)
            })
            .collect();
        let histogram = Histogram {
            buckets,
            count: kernel.run_queue_count,
            sum: kernel.run_queue_total_ns as f64 / 1e9,
        };
        if !started {
            started = true;
            sink.begin(&RUN_QUEUE);
        }
        let mut labels = [("", Label::Int(0)); CGROUP_SERIES_LABELS];
        let count = cgroup_labels(report, style, &mut labels);
        sink.cgroup_histogram(&RUN_QUEUE, index, &labels[..count], &histogram);
    }
}

#[cfg(test)]
mod tests;
