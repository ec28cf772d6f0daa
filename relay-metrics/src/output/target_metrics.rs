//! The `relay_metrics_cgroup_*` families: one series set per cgroup measured one by one
//! (`extensions.targets`), labelled `cgroup` and, where known, `unit`, `container_id`,
//! `container_runtime`, `container_name`, `container_image`, `pod_uid`, `qos_class`; plus
//! `relay_metrics_targets` and `relay_metrics_targets_dropped`. Counters are the cgroup's own
//! kernel counters (they never decrease while the cgroup exists; a cgroup removed and made
//! again under the same path starts from zero, which Prometheus reads as a reset).

use super::metrics::{Family, Kind, Label, Number, Sink, Unit};
use crate::config::MetricNames;
use crate::snapshot::{CgroupTargetReport, Targets};

/// Most labels a series has: the cgroup's eight and two of its family.
const MAX_LABELS: usize = 10;

const fn family(name: &'static str, kind: Kind, unit: Unit, help: &'static str) -> Family {
    Family {
        name,
        kind,
        help,
        unit,
        names: MetricNames::RelayMetrics,
    }
}

type Getter = fn(&CgroupTargetReport) -> Option<f64>;

fn ns(value: Option<u64>) -> Option<f64> {
    value.map(|ns| ns as f64 / 1e9)
}

fn plain(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// Families of one series per cgroup.
const SIMPLE: &[(Family, Getter)] = &[
    (
        family(
            "relay_metrics_cgroup_cpu_usage_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "CPU time of the cgroup (its own counter).",
        ),
        |r| ns(r.cpu_usage_ns),
    ),
    (
        family(
            "relay_metrics_cgroup_cpu_user_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "User-mode CPU time of the cgroup (its own counter).",
        ),
        |r| ns(r.cpu_user_ns),
    ),
    (
        family(
            "relay_metrics_cgroup_cpu_system_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "Kernel-mode CPU time of the cgroup (its own counter).",
        ),
        |r| ns(r.cpu_system_ns),
    ),
    (
        family(
            "relay_metrics_cgroup_cpu_periods_total",
            Kind::Counter,
            Unit::Count,
            "CPU bandwidth enforcement periods of the cgroup.",
        ),
        |r| plain(r.cpu_periods),
    ),
    (
        family(
            "relay_metrics_cgroup_cpu_throttled_periods_total",
            Kind::Counter,
            Unit::Count,
            "Enforcement periods in which the cgroup was throttled.",
        ),
        |r| plain(r.cpu_throttled_periods),
    ),
    (
        family(
            "relay_metrics_cgroup_cpu_throttled_seconds_total",
            Kind::Counter,
            Unit::Seconds,
            "Time the cgroup was throttled by its CPU quota.",
        ),
        |r| ns(r.cpu_throttled_ns),
    ),
    (
        family(
            "relay_metrics_cgroup_cpu_limit_cores",
            Kind::Gauge,
            Unit::Cores,
            "The cgroup's own CPU quota divided by its period.",
        ),
        |r| r.cpu_limit_cores,
    ),
    (
        family(
            "relay_metrics_cgroup_memory_usage_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "Memory charged to the cgroup.",
        ),
        |r| plain(r.memory_current_bytes),
    ),
    (
        family(
            "relay_metrics_cgroup_memory_peak_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "Highest memory charged to the cgroup.",
        ),
        |r| plain(r.memory_peak_bytes),
    ),
    (
        family(
            "relay_metrics_cgroup_memory_limit_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "The cgroup's own memory limit.",
        ),
        |r| plain(r.memory_limit_bytes),
    ),
    (
        family(
            "relay_metrics_cgroup_pids",
            Kind::Gauge,
            Unit::Count,
            "Tasks the cgroup's pids controller counts.",
        ),
        |r| plain(r.pids_current),
    ),
    (
        family(
            "relay_metrics_cgroup_pids_limit",
            Kind::Gauge,
            Unit::Count,
            "The cgroup's own pids.max.",
        ),
        |r| plain(r.pids_limit),
    ),
    (
        family(
            "relay_metrics_cgroup_processes",
            Kind::Gauge,
            Unit::Count,
            "Processes in the cgroup's subtree.",
        ),
        |r| r.processes.map(|p| p.count as f64),
    ),
    (
        family(
            "relay_metrics_cgroup_threads",
            Kind::Gauge,
            Unit::Count,
            "Threads of the processes in the cgroup's subtree.",
        ),
        |r| r.processes.map(|p| p.threads as f64),
    ),
    (
        family(
            "relay_metrics_cgroup_resident_memory_bytes",
            Kind::Gauge,
            Unit::Bytes,
            "Resident memory summed over the processes in the cgroup's subtree.",
        ),
        |r| r.processes.map(|p| p.resident_bytes as f64),
    ),
    (
        family(
            "relay_metrics_cgroup_open_file_descriptors",
            Kind::Gauge,
            Unit::Count,
            "Open file descriptors of the processes in the cgroup's subtree.",
        ),
        |r| plain(r.processes.and_then(|p| p.open_file_descriptors)),
    ),
];

const MEMORY_EVENTS: Family = family(
    "relay_metrics_cgroup_memory_events_total",
    Kind::Counter,
    Unit::Count,
    "Memory events of the cgroup: high, max (limit hit; v1 failcnt), oom, oom_kill.",
);

const PRESSURE: Family = family(
    "relay_metrics_cgroup_pressure_stall_seconds_total",
    Kind::Counter,
    Unit::Seconds,
    "PSI stall time of the cgroup, by resource and kind.",
);

type DeviceGetter = fn(&crate::snapshot::TargetDeviceIo) -> u64;

const DEVICES: &[(Family, DeviceGetter)] = &[
    (
        family(
            "relay_metrics_cgroup_io_read_bytes_total",
            Kind::Counter,
            Unit::Bytes,
            "Bytes the cgroup read from a block device.",
        ),
        |d| d.read_bytes,
    ),
    (
        family(
            "relay_metrics_cgroup_io_written_bytes_total",
            Kind::Counter,
            Unit::Bytes,
            "Bytes the cgroup wrote to a block device.",
        ),
        |d| d.write_bytes,
    ),
    (
        family(
            "relay_metrics_cgroup_io_read_operations_total",
            Kind::Counter,
            Unit::Count,
            "Read operations of the cgroup on a block device.",
        ),
        |d| d.read_operations,
    ),
    (
        family(
            "relay_metrics_cgroup_io_write_operations_total",
            Kind::Counter,
            Unit::Count,
            "Write operations of the cgroup on a block device.",
        ),
        |d| d.write_operations,
    ),
];

const TARGETS: Family = family(
    "relay_metrics_targets",
    Kind::Gauge,
    Unit::Count,
    "Cgroups measured one by one.",
);

const DROPPED: Family = family(
    "relay_metrics_targets_dropped",
    Kind::Gauge,
    Unit::Count,
    "Cgroups selected but not measured because max_targets was reached.",
);

/// The labels of one cgroup into `labels`; returns how many.
fn cgroup_labels<'r>(
    report: &'r CgroupTargetReport,
    labels: &mut [(&'static str, Label<'r>); MAX_LABELS],
) -> usize {
    let l = &report.labels;
    let mut count = 0;
    let mut push = |key: &'static str, value: Option<&'r str>| {
        if let Some(value) = value {
            labels[count] = (key, Label::Str(value));
            count += 1;
        }
    };
    push("cgroup", Some(&report.cgroup));
    push("unit", l.unit.as_deref());
    push("container_id", l.container_id.as_deref());
    push("container_runtime", l.container_runtime.as_deref());
    push("container_name", l.container_name.as_deref());
    push("container_image", l.container_image.as_deref());
    push("pod_uid", l.pod_uid.as_deref());
    push("qos_class", l.qos_class.as_deref());
    count
}

/// Emits one family over every cgroup; `each` hands `(extra labels, value)` pairs to `emit`.
fn emit_family<S: Sink>(
    sink: &mut S,
    family: &Family,
    targets: &Targets,
    each: impl Fn(&CgroupTargetReport, &mut dyn FnMut(&[(&'static str, &str)], f64)),
) {
    let mut started = false;
    for report in &targets.cgroups {
        let mut labels = [("", Label::Int(0)); MAX_LABELS];
        let base = cgroup_labels(report, &mut labels);
        each(report, &mut |extra, value| {
            if !value.is_finite() {
                return;
            }
            if !started {
                started = true;
                sink.begin(family);
            }
            let mut all = [("", Label::Int(0)); MAX_LABELS];
            all[..base].copy_from_slice(&labels[..base]);
            let mut count = base;
            for &(key, text) in extra {
                if count < MAX_LABELS {
                    all[count] = (key, Label::Str(text));
                    count += 1;
                }
            }
            sink.point(family, &all[..count], Number::F64(value));
        });
    }
}

/// Hands the per-cgroup families of `targets` to `sink`.
pub(crate) fn walk<S: Sink>(targets: &Targets, sink: &mut S) {
    sink.begin(&TARGETS);
    sink.point(&TARGETS, &[], Number::F64(targets.cgroups.len() as f64));
    sink.begin(&DROPPED);
    sink.point(&DROPPED, &[], Number::F64(targets.dropped as f64));
    for (family, get) in SIMPLE {
        emit_family(sink, family, targets, |report, emit| {
            if let Some(value) = get(report) {
                emit(&[], value);
            }
        });
    }
    emit_family(sink, &MEMORY_EVENTS, targets, |report, emit| {
        let events = &report.memory_events;
        for (event, value) in [
            ("high", events.high),
            ("max", events.max),
            ("oom", events.oom),
            ("oom_kill", events.oom_kill),
        ] {
            if let Some(value) = value {
                emit(&[("event", event)], value as f64);
            }
        }
    });
    emit_family(sink, &PRESSURE, targets, |report, emit| {
        let p = &report.pressure;
        for (resource, kind, value) in [
            ("cpu", "some", p.cpu_some_usec),
            ("cpu", "full", p.cpu_full_usec),
            ("memory", "some", p.memory_some_usec),
            ("memory", "full", p.memory_full_usec),
            ("io", "some", p.io_some_usec),
            ("io", "full", p.io_full_usec),
        ] {
            if let Some(usec) = value {
                emit(&[("resource", resource), ("kind", kind)], usec as f64 / 1e6);
            }
        }
    });
    for (family, get) in DEVICES {
        emit_family(sink, family, targets, |report, emit| {
            for device in &report.devices {
                emit(&[("device", &device.device)], get(device) as f64);
            }
        });
    }
}
