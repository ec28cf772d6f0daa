//! `otel` naming: the `relay_metrics` families under OpenTelemetry's semantic conventions
//! (`system.*` in global scope, `process.*` for a process tree or one process, `container.*` for
//! a cgroup, and `system.memory.*` / `system.network.*` for the machine-wide values of every
//! scope), with UCUM units (`s`, `By`, `{process}`, …), the conventions' attribute keys
//! (`cpu.mode`, `system.memory.state`, `disk.io.direction`, `network.io.direction`,
//! `network.interface.name`, `process.pid`, `container.id`, `k8s.pod.uid`) and their instrument
//! kinds (an `updowncounter` is a non-monotonic sum in OTLP, a gauge in Prometheus). Where no
//! convention exists, names and attribute keys sit in the `relay_metrics.*` namespace. Series
//! the conventions split by an attribute (`cpu.mode`, directions) are one family here, merged
//! from adjacent `relay_metrics` families.
//!
//! The tests check every name, unit, instrument kind, attribute key and enumerated value against
//! PyPI's `opentelemetry-semantic-conventions` (`relay-metrics/tests/otel_names.rs`).

use std::sync::{Mutex, OnceLock, PoisonError};

use super::{Family, Histogram, Kind, Label, Number, Sink, Unit};
use crate::config::MetricNames;

/// How one `relay_metrics` family is named under the conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mapping {
    name: &'static str,
    kind: Kind,
    /// UCUM.
    unit: &'static str,
    /// The attribute that tells this family's series apart from the others merged into the
    /// same name (`cpu.mode="user"`).
    attribute: Option<(&'static str, &'static str)>,
}

const fn m(name: &'static str, kind: Kind, unit: &'static str) -> Mapping {
    Mapping {
        name,
        kind,
        unit,
        attribute: None,
    }
}

const fn with(
    name: &'static str,
    kind: Kind,
    unit: &'static str,
    key: &'static str,
    value: &'static str,
) -> Mapping {
    Mapping {
        name,
        kind,
        unit,
        attribute: Some((key, value)),
    }
}

/// What a scope is under the conventions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Subject {
    System,
    Process,
    Container,
}

impl Subject {
    fn of(scope: &str) -> Self {
        match scope {
            "process_tree" | "application_process" => Self::Process,
            "cgroup" => Self::Container,
            _ => Self::System,
        }
    }

    /// `system.X`, `process.X` or `container.X`.
    fn pick(
        self,
        system: &'static str,
        process: &'static str,
        container: &'static str,
    ) -> &'static str {
        match self {
            Self::System => system,
            Self::Process => process,
            Self::Container => container,
        }
    }
}

use Kind::{Counter, Gauge, UpDownCounter};

/// The conventional name of a `relay_metrics` family in `scope`, if it has one here.
#[rustfmt::skip]
fn mapping(name: &str, subject: Subject) -> Option<Mapping> {
    use Subject::{Container, Process, System};
    let cpu_time = subject.pick("system.cpu.time", "process.cpu.time", "container.cpu.time");
    let disk_io = subject.pick("system.disk.io", "process.disk.io", "container.disk.io");
    Some(match name {
        "relay_metrics_cpu_user_seconds_total" => with(cpu_time, Counter, "s", "cpu.mode", "user"),
        "relay_metrics_cpu_system_seconds_total" => with(cpu_time, Counter, "s", "cpu.mode", "system"),
        "relay_metrics_cpu_consumption_cores" if subject == Container => m("container.cpu.usage", Gauge, "{cpu}"),
        "relay_metrics_cpu_consumption_cores" => m("relay_metrics.cpu.usage", Gauge, "{cpu}"),
        "relay_metrics_cpu_throttled_seconds_total" => m("relay_metrics.cpu.throttled_time", Counter, "s"),
        "relay_metrics_cpu_effective_limit_cores" => m("relay_metrics.cpu.limit", Gauge, "{cpu}"),
        "relay_metrics_cpu_pressure_stall_seconds_total" => m("relay_metrics.cpu.pressure.stall_time", Counter, "s"),
        "relay_metrics_memory_system_used_bytes" => with("system.memory.usage", UpDownCounter, "By", "system.memory.state", "used"),
        "relay_metrics_memory_system_total_bytes" => m("system.memory.limit", UpDownCounter, "By"),
        "relay_metrics_memory_system_available_bytes" => m("system.memory.linux.available", UpDownCounter, "By"),
        "relay_metrics_memory_resident_bytes" if subject == Process => m("process.memory.usage", UpDownCounter, "By"),
        "relay_metrics_memory_resident_bytes" => m("relay_metrics.memory.resident", Gauge, "By"),
        "relay_metrics_memory_private_bytes" => m("relay_metrics.memory.private", Gauge, "By"),
        "relay_metrics_memory_virtual_bytes" if subject == Process => m("process.memory.virtual", UpDownCounter, "By"),
        "relay_metrics_memory_virtual_bytes" => m("relay_metrics.memory.virtual", Gauge, "By"),
        "relay_metrics_memory_peak_resident_bytes" => m("relay_metrics.memory.peak_resident", Gauge, "By"),
        "relay_metrics_memory_limit_bytes" => m("relay_metrics.memory.limit", Gauge, "By"),
        "relay_metrics_memory_cgroup_charged_bytes" if subject == Container => m("container.memory.usage", UpDownCounter, "By"),
        "relay_metrics_memory_cgroup_charged_bytes" => m("relay_metrics.memory.cgroup_charged", Gauge, "By"),
        "relay_metrics_memory_pressure_stall_seconds_total" => m("relay_metrics.memory.pressure.stall_time", Counter, "s"),
        "relay_metrics_limit_events_total" => m("relay_metrics.limit_events", Counter, "{event}"),
        "relay_metrics_processes" if subject == System => m("system.process.count", UpDownCounter, "{process}"),
        "relay_metrics_processes" => m("relay_metrics.process.count", Gauge, "{process}"),
        "relay_metrics_threads" if subject == Process => m("process.thread.count", UpDownCounter, "{thread}"),
        "relay_metrics_threads" => m("relay_metrics.thread.count", Gauge, "{thread}"),
        "relay_metrics_open_file_descriptors" if subject == Process => m("process.unix.file_descriptor.count", UpDownCounter, "{file_descriptor}"),
        "relay_metrics_open_file_descriptors" => m("relay_metrics.file_descriptor.count", Gauge, "{file_descriptor}"),
        "relay_metrics_processes_created_total" if subject == System => m("system.process.created", Counter, "{process}"),
        "relay_metrics_processes_created_total" => m("relay_metrics.process.created", Counter, "{process}"),
        "relay_metrics_disk_read_bytes_total" => with(disk_io, Counter, "By", "disk.io.direction", "read"),
        "relay_metrics_disk_written_bytes_total" => with(disk_io, Counter, "By", "disk.io.direction", "write"),
        "relay_metrics_disk_read_bytes_per_second" => with("relay_metrics.disk.io.rate", Gauge, "By/s", "disk.io.direction", "read"),
        "relay_metrics_disk_write_bytes_per_second" => with("relay_metrics.disk.io.rate", Gauge, "By/s", "disk.io.direction", "write"),
        "relay_metrics_disk_read_syscalls" => with("relay_metrics.disk.syscalls", Gauge, "{operation}", "disk.io.direction", "read"),
        "relay_metrics_disk_write_syscalls" => with("relay_metrics.disk.syscalls", Gauge, "{operation}", "disk.io.direction", "write"),
        "relay_metrics_filesystem_bytes" => m("relay_metrics.filesystem.capacity", Gauge, "By"),
        "relay_metrics_network_received_bytes_total" => with("system.network.io", Counter, "By", "network.io.direction", "receive"),
        "relay_metrics_network_transmitted_bytes_total" => with("system.network.io", Counter, "By", "network.io.direction", "transmit"),
        "relay_metrics_network_receive_bytes_per_second" => with("relay_metrics.network.io.rate", Gauge, "By/s", "network.io.direction", "receive"),
        "relay_metrics_network_transmit_bytes_per_second" => with("relay_metrics.network.io.rate", Gauge, "By/s", "network.io.direction", "transmit"),
        "relay_metrics_network_received_packets_total" => with("system.network.packet.count", Counter, "{packet}", "network.io.direction", "receive"),
        "relay_metrics_network_transmitted_packets_total" => with("system.network.packet.count", Counter, "{packet}", "network.io.direction", "transmit"),
        "relay_metrics_network_receive_errors_total" => with("system.network.errors", Counter, "{error}", "network.io.direction", "receive"),
        "relay_metrics_network_transmit_errors_total" => with("system.network.errors", Counter, "{error}", "network.io.direction", "transmit"),
        "relay_metrics_sampling_visible_processes" => m("relay_metrics.sampling.visible_processes", Gauge, "{process}"),
        "relay_metrics_sampling_sampled_processes" => m("relay_metrics.sampling.sampled_processes", Gauge, "{process}"),
        "relay_metrics_collect_duration_seconds" => m("relay_metrics.collect.duration", Gauge, "s"),
        "relay_metrics_snapshots_total" => m("relay_metrics.snapshots", Counter, "{snapshot}"),
        // The cgroups measured one by one (`--cgroups`): a container's series, told apart by
        // their `container.id` / `relay_metrics.cgroup` attributes.
        "relay_metrics_cgroup_cpu_user_seconds_total" => with("container.cpu.time", Counter, "s", "cpu.mode", "user"),
        "relay_metrics_cgroup_cpu_system_seconds_total" => with("container.cpu.time", Counter, "s", "cpu.mode", "system"),
        "relay_metrics_cgroup_memory_usage_bytes" => m("container.memory.usage", UpDownCounter, "By"),
        "relay_metrics_cgroup_io_read_bytes_total" => with("container.disk.io", Counter, "By", "disk.io.direction", "read"),
        "relay_metrics_cgroup_io_written_bytes_total" => with("container.disk.io", Counter, "By", "disk.io.direction", "write"),
        "relay_metrics_cgroup_network_received_bytes_total" => with("container.network.io", Counter, "By", "network.io.direction", "receive"),
        "relay_metrics_cgroup_network_transmitted_bytes_total" => with("container.network.io", Counter, "By", "network.io.direction", "transmit"),
        // GPUs: the hardware conventions' hw.* (hw.id is the UUID, hw.type "gpu").
        "relay_metrics_gpu_power_watts" => with("hw.power", Gauge, "W", "hw.type", "gpu"),
        "relay_metrics_gpu_energy_joules_total" => with("hw.energy", Counter, "J", "hw.type", "gpu"),
        "relay_metrics_gpu_temperature_celsius" => with("hw.temperature", Gauge, "Cel", "hw.type", "gpu"),
        // A whole device's memory and busy fraction: the conventions' hw.gpu.* (a process's or
        // a container's share of a device has no conventional name: relay_metrics.*).
        "relay_metrics_gpu_memory_used_bytes" => m("hw.gpu.memory.usage", UpDownCounter, "By"),
        "relay_metrics_gpu_utilization_ratio" => m("hw.gpu.utilization", Gauge, "1"),
        _ => return None,
    })
}

/// The help of a name several `relay_metrics` families are merged into (theirs each describe
/// one of its series).
fn merged_help(name: &str) -> Option<&'static str> {
    Some(match name {
        "system.cpu.time" | "process.cpu.time" | "container.cpu.time" => {
            "CPU time of the scope since the agent started, exited processes included, by cpu.mode."
        }
        "system.disk.io" | "process.disk.io" | "container.disk.io" => {
            "Storage bytes of the scope since the agent started, exited processes included, by disk.io.direction."
        }
        "relay_metrics.disk.io.rate" => "Storage rate since the previous snapshot, by disk.io.direction.",
        "relay_metrics.disk.syscalls" => {
            "Read and write system calls of the processes alive in scope (a sum over the live processes: it drops when one exits)."
        }
        "system.network.io" => "Bytes on the interface, by network.io.direction.",
        "container.network.io" => "Bytes on the interface of the container's network namespace, by network.io.direction.",
        "relay_metrics.network.io.rate" => "Rate on the interface since the previous snapshot, by network.io.direction.",
        "system.network.packet.count" => "Packets on the interface, by network.io.direction.",
        "system.network.errors" => "Errors on the interface, by network.io.direction.",
        _ => return None,
    })
}

/// The attribute key of a `relay_metrics` label.
fn attribute_key(label: &str) -> &'static str {
    match label {
        "scope" => "relay_metrics.scope",
        "interface" => "network.interface.name",
        "pid" => "process.pid",
        "container_id" => "container.id",
        "container_runtime" => "container.runtime.name",
        "container_name" => "container.name",
        "container_image" => "container.image.name",
        "pod_uid" => "k8s.pod.uid",
        "pod_name" => "k8s.pod.name",
        "pod_namespace" => "k8s.namespace.name",
        "qos_class" => "relay_metrics.k8s.qos_class",
        "unit" => "relay_metrics.systemd.unit",
        "cgroup" => "relay_metrics.cgroup",
        "resource" => "relay_metrics.resource",
        "event" => "relay_metrics.event",
        "path" => "relay_metrics.filesystem.path",
        "kind" => "relay_metrics.kind",
        "device" => "relay_metrics.device",
        "uuid" => "hw.id",
        other => interned("relay_metrics.", other, ""),
    }
}

/// A family without a mapping (one added later, e.g. by another source): `relay_metrics.` and
/// its Prometheus name without the prefix, the unit suffix and `_total`; same kind, the unit's
/// UCUM form.
fn fallback(family: &Family) -> Mapping {
    let name = family.name;
    let bare = name.strip_prefix("relay_metrics_").unwrap_or(name);
    let bare = bare.strip_suffix("_total").unwrap_or(bare);
    let bare = family
        .unit
        .suffix()
        .and_then(|suffix| bare.strip_suffix(suffix)?.strip_suffix('_'))
        .unwrap_or(bare);
    Mapping {
        name: interned("relay_metrics.", bare, ""),
        kind: family.kind,
        unit: family.unit.otlp(),
        attribute: None,
    }
}

/// `prefix + text + suffix` as a `&'static str`, made once per distinct text (names and label
/// keys: a bounded set).
fn interned(prefix: &str, text: &str, suffix: &str) -> &'static str {
    static TABLE: Mutex<Vec<(String, &'static str)>> = Mutex::new(Vec::new());
    let key = format!("{prefix}{text}{suffix}");
    let mut table = TABLE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, made)) = table.iter().find(|(k, _)| *k == key) {
        return made;
    }
    let made: &'static str = Box::leak(key.clone().into_boxed_str());
    table.push((key, made));
    made
}

/// Most attributes a point gets: a measured cgroup's eight labels, two of its family's, and the
/// merged family's own.
const MAX_ATTRIBUTES: usize = 12;

/// Renames the `relay_metrics` families handed to it, then hands them to the sink inside.
pub(super) struct Renamer<'s, S> {
    inner: &'s mut S,
    subject_scope: &'static str,
    /// The family handed on last.
    current: Option<Family>,
    /// The names announced so far: a name met again after another family (the scope's
    /// `container.cpu.time` and a measured cgroup's) takes the fallback name instead, so that
    /// a family's series stay together.
    announced: Vec<&'static str>,
    attribute: Option<(&'static str, &'static str)>,
}

impl<'s, S: Sink> Renamer<'s, S> {
    pub(super) fn new(inner: &'s mut S, scope: &'static str) -> Self {
        Self {
            inner,
            subject_scope: scope,
            current: None,
            attribute: None,
            announced: Vec::new(),
        }
    }
}

impl<S: Sink> Sink for Renamer<'_, S> {
    fn begin(&mut self, family: &Family) {
        let current = self.current.map(|current| current.name);
        let mapped = mapping(family.name, Subject::of(self.subject_scope))
            .filter(|m| Some(m.name) == current || !self.announced.contains(&m.name))
            .unwrap_or_else(|| fallback(family));
        let renamed = Family {
            name: mapped.name,
            kind: mapped.kind,
            help: merged_help(mapped.name).unwrap_or(family.help),
            unit: Unit::Ucum(mapped.unit),
            names: MetricNames::Otel,
        };
        self.attribute = mapped.attribute;
        // Adjacent families merged into one name are announced once.
        if current != Some(mapped.name) {
            self.inner.begin(&renamed);
            self.announced.push(mapped.name);
        }
        self.current = Some(renamed);
    }

    fn point(&mut self, _family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        let Some(family) = self.current else {
            return;
        };
        let mut renamed = [("", Label::Int(0)); MAX_ATTRIBUTES];
        let count = self.rename_labels(labels, &mut renamed);
        self.inner.point(&family, &renamed[..count], value);
    }

    fn histogram(&mut self, _family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram) {
        let Some(family) = self.current else {
            return;
        };
        let mut renamed = [("", Label::Int(0)); MAX_ATTRIBUTES];
        let count = self.rename_labels(labels, &mut renamed);
        self.inner.histogram(&family, &renamed[..count], histogram);
    }
}

impl<S> Renamer<'_, S> {
    /// `labels` under the conventions' attribute keys, plus the family's own attribute.
    fn rename_labels<'l>(
        &self,
        labels: &[(&str, Label<'l>)],
        renamed: &mut [(&'static str, Label<'l>); MAX_ATTRIBUTES],
    ) -> usize {
        let mut count = 0;
        for (key, label) in labels.iter().copied() {
            if count < renamed.len() {
                renamed[count] = (attribute_key(key), label);
                count += 1;
            }
        }
        if let Some((key, text)) = self.attribute {
            if count < renamed.len() {
                renamed[count] = (key, Label::Str(text));
                count += 1;
            }
        }
        count
    }
}

/// The resource attributes of this agent under the conventions: `host.name`, `os.type`,
/// `service.name`, `service.version` and `service.instance.id` (a UUID drawn once per process,
/// from the kernel's `/proc/sys/kernel/random/uuid`, as the conventions recommend where no
/// stable identity exists).
pub(crate) fn resource_attributes() -> &'static [(&'static str, String)] {
    static ATTRIBUTES: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();
    ATTRIBUTES.get_or_init(|| {
        let mut attributes = Vec::with_capacity(5);
        if let Some(host) = crate::source::system::hostname() {
            attributes.push(("host.name", host));
        }
        attributes.push(("os.type", "linux".to_owned()));
        attributes.push(("service.name", "relay-metrics".to_owned()));
        attributes.push(("service.version", env!("CARGO_PKG_VERSION").to_owned()));
        if let Some(uuid) = crate::source::system::random_uuid() {
            attributes.push(("service.instance.id", uuid));
        }
        attributes
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_named_by_its_scope_and_unmapped_ones_get_our_namespace() {
        let cpu =
            |scope| mapping("relay_metrics_cpu_user_seconds_total", Subject::of(scope)).unwrap();
        assert_eq!(cpu("global").name, "system.cpu.time");
        assert_eq!(cpu("process_tree").name, "process.cpu.time");
        assert_eq!(cpu("application_process").name, "process.cpu.time");
        assert_eq!(cpu("cgroup").name, "container.cpu.time");
        assert_eq!(cpu("cgroup").attribute, Some(("cpu.mode", "user")));
        // A whole device's memory and busy fraction: the hardware conventions' names, kinds
        // and units.
        let gpu = |name| mapping(name, Subject::of("global")).unwrap();
        let memory = gpu("relay_metrics_gpu_memory_used_bytes");
        assert_eq!(
            (memory.name, memory.kind, memory.unit),
            ("hw.gpu.memory.usage", Kind::UpDownCounter, "By")
        );
        let busy = gpu("relay_metrics_gpu_utilization_ratio");
        assert_eq!(
            (busy.name, busy.kind, busy.unit),
            ("hw.gpu.utilization", Kind::Gauge, "1")
        );
        let family = Family {
            name: "relay_metrics_gpu_memory_used_bytes",
            kind: Kind::Gauge,
            help: "",
            unit: Unit::Bytes,
            names: MetricNames::RelayMetrics,
        };
        let mapped = fallback(&family);
        assert_eq!(mapped.name, "relay_metrics.gpu_memory_used");
        assert_eq!(mapped.unit, "By");
        let counter = Family {
            name: "relay_metrics_oom_kills_total",
            kind: Kind::Counter,
            unit: Unit::Count,
            ..family
        };
        assert_eq!(fallback(&counter).name, "relay_metrics.oom_kills");
        assert_eq!(attribute_key("interface"), "network.interface.name");
        assert_eq!(attribute_key("new_label"), "relay_metrics.new_label");
        assert!(std::ptr::eq(
            attribute_key("new_label"),
            attribute_key("new_label")
        ));
    }
}

#[cfg(test)]
mod renamer_tests {
    use super::*;

    #[derive(Default)]
    struct Names(Vec<&'static str>, Vec<usize>);

    impl Sink for Names {
        fn begin(&mut self, family: &Family) {
            self.0.push(family.name);
        }
        fn point(&mut self, _family: &Family, labels: &[(&str, Label<'_>)], _value: Number) {
            self.1.push(labels.len());
        }
        fn histogram(
            &mut self,
            _family: &Family,
            labels: &[(&str, Label<'_>)],
            _histogram: &Histogram,
        ) {
            self.1.push(labels.len());
        }
    }

    fn family(name: &'static str) -> Family {
        Family {
            name,
            kind: Kind::Counter,
            help: "",
            unit: Unit::Seconds,
            names: MetricNames::RelayMetrics,
        }
    }

    #[test]
    fn a_name_is_announced_once_and_every_label_is_kept() {
        let mut names = Names::default();
        let mut renamer = Renamer::new(&mut names, "cgroup");
        let labels: Vec<(&str, Label<'_>)> =
            (0..10).map(|_| ("cgroup", Label::Str("/a"))).collect();
        for name in [
            "relay_metrics_cpu_user_seconds_total",
            "relay_metrics_cpu_system_seconds_total",
            "relay_metrics_snapshots_total",
            "relay_metrics_cgroup_cpu_user_seconds_total",
            "relay_metrics_cgroup_cpu_system_seconds_total",
        ] {
            renamer.begin(&family(name));
            renamer.point(&family(name), &labels, Number::F64(1.0));
        }
        // The measured cgroup's CPU time cannot join the scope's, announced two families
        // before: it keeps a name of its own.
        assert_eq!(
            names.0,
            [
                "container.cpu.time",
                "relay_metrics.snapshots",
                "relay_metrics.cgroup_cpu_user",
                "relay_metrics.cgroup_cpu_system"
            ]
        );
        // Ten labels and the merged family's cpu.mode.
        assert_eq!(names.1[0], 11);
    }
}
