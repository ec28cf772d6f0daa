//! `cadvisor` naming: what dashboards and alerts written for the kubelet's `/metrics/cadvisor`
//! and node_exporter select, under their names.
//!
//! - The cgroups measured one by one: cAdvisor's `container_*` families with its labels
//!   (`container`, `id`, `image`, `name`, `namespace`, `pod`), then the
//!   `relay_metrics_cgroup_*` families cAdvisor has no equivalent of (run-queue delay, OOM and
//!   memory events, reclaim stalls, pressure, preemptions, GPU use) with the same labels.
//! - The machine: node_exporter's `node_cpu_seconds_total{cpu,mode}`, `node_memory_*`, `node_network_*`, `node_filesystem_*` and
//!   (global scope) `node_pressure_*` families, unlabelled by scope as node_exporter's are.
//! - Everything else in the `relay_metrics` naming, with its `scope` label.

use super::table;
use super::{walk_relay_metrics, Family, Histogram, Kind, Label, Number, Sink, Unit, Writer};
use crate::config::MetricNames;
use crate::snapshot::{CpuModeSeconds, MeasurementScope, ResourceMetricsSnapshot};

/// Hands every metric of `snapshot` to `sink` in the `cadvisor` naming.
pub(super) fn walk<S: Sink>(snapshot: &ResourceMetricsSnapshot, sink: &mut S) {
    let global = snapshot.measurement_scope == MeasurementScope::Global;
    if let Some(modes) = &snapshot.extensions.cpu_modes {
        cpu_seconds(modes, sink);
    }
    let mut w = Writer {
        sink: &mut *sink,
        scope: None,
        names: MetricNames::Cadvisor,
    };
    if let Some(memory) = &snapshot.memory {
        w.single(table::NODE_MEMORY, memory);
        if global {
            w.single(table::NODE_MEMORY_PRESSURE, memory);
        }
    }
    if let (Some(cpu), true) = (&snapshot.cpu, global) {
        w.single(table::NODE_CPU_PRESSURE, cpu);
    }
    if let Some(network) = &snapshot.network {
        for def in table::NODE_NETWORK {
            w.family(def, &network.interfaces, |interface| {
                (
                    &interface.traffic,
                    [("device", Label::Str(&interface.name))],
                )
            });
        }
    }
    if let Some(disk) = &snapshot.disk {
        w.section(table::NODE_FILESYSTEM, &disk.filesystems, |fs| {
            [("mountpoint", Label::Str(&fs.path))]
        });
    }
    let mut rest = Without {
        sink,
        skip: table::NODE_COVERED,
    };
    walk_relay_metrics(snapshot, &mut rest, true);
}

const NODE_CPU: Family = Family {
    name: "node_cpu_seconds_total",
    kind: Kind::Counter,
    unit: Unit::Seconds,
    help: "Seconds the CPUs spent in each mode.",
    names: MetricNames::Cadvisor,
};

/// node_exporter's `node_cpu_seconds_total{cpu, mode}`: every mode of `/proc/stat` per CPU.
fn cpu_seconds<S: Sink>(modes: &[CpuModeSeconds], sink: &mut S) {
    if modes.is_empty() {
        return;
    }
    sink.begin(&NODE_CPU);
    for cpu in modes {
        for (mode, seconds) in [
            ("idle", cpu.idle),
            ("iowait", cpu.iowait),
            ("irq", cpu.irq),
            ("nice", cpu.nice),
            ("softirq", cpu.softirq),
            ("steal", cpu.steal),
            ("system", cpu.system),
            ("user", cpu.user),
        ] {
            let labels = [
                ("cpu", Label::Int(u64::from(cpu.cpu))),
                ("mode", Label::Str(mode)),
            ];
            sink.point(&NODE_CPU, &labels, Number::F64(seconds));
        }
    }
}

/// A sink that drops the families named in `skip` (carried by another family in this naming).
struct Without<'s, S> {
    sink: &'s mut S,
    skip: &'static [&'static str],
}

impl<S: Sink> Sink for Without<'_, S> {
    fn begin(&mut self, family: &Family) {
        if !self.skip.contains(&family.name) {
            self.sink.begin(family);
        }
    }

    fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        if !self.skip.contains(&family.name) {
            self.sink.point(family, labels, value);
        }
    }

    fn cgroup_point<'l>(
        &mut self,
        family: &Family,
        cgroup: usize,
        base: &[(&'l str, Label<'l>)],
        extra: &[(&'l str, Label<'l>)],
        value: Number,
    ) {
        if !self.skip.contains(&family.name) {
            self.sink.cgroup_point(family, cgroup, base, extra, value);
        }
    }

    fn cgroup_lines(&mut self, family: &Family, cgroup: usize, announced: bool) -> bool {
        !self.skip.contains(&family.name) && self.sink.cgroup_lines(family, cgroup, announced)
    }

    fn histogram(&mut self, family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram) {
        if !self.skip.contains(&family.name) {
            self.sink.histogram(family, labels, histogram);
        }
    }

    fn cgroup_histogram(
        &mut self,
        family: &Family,
        cgroup: usize,
        labels: &[(&str, Label<'_>)],
        histogram: &Histogram,
    ) {
        if !self.skip.contains(&family.name) {
            self.sink
                .cgroup_histogram(family, cgroup, labels, histogram);
        }
    }
}
