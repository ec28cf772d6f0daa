//! The metric view of a snapshot, shared by the Prometheus and OTLP encodings: which families
//! exist, their kind, help text and labels, and every value converted to base units whatever the
//! configured output units: seconds, bytes, bytes per second, cores (logical processors) and
//! ratios (0–1). Family names are Prometheus's (cumulative counters end in `_total`); per-item
//! series carry their item (`interface`, `path`, `device`, `pid`, `resource`/`event`, `kind`).
//! A `null` value is simply not exported, as Relay's marks do, and a family without any value is
//! never announced.

use crate::snapshot::{
    MeasurementScope, ResourceLimitEventCount, ResourceLimitEventKind, ResourceLimitResource,
    ResourceMetricsSnapshot,
};
use crate::units::{Measurement, MeasurementUnit};

/// Whether a family holds point-in-time values or cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
    Counter,
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Family {
    /// The Prometheus name (counters end in `_total`).
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

/// Receives the metrics of a snapshot.
pub(crate) trait Sink {
    /// Announces `family`, before its first point.
    fn begin(&mut self, family: &Family);
    /// One finite value of `family` with its item labels (the scope is the sink's to add).
    fn point(&mut self, family: &Family, labels: &[(&str, &str)], value: f64);
}

struct Metrics<'s, S> {
    sink: &'s mut S,
}

impl<S: Sink> Metrics<'_, S> {
    fn family(&mut self, name: &'static str, kind: Kind, help: &'static str) -> Series<'_, S> {
        Series {
            sink: self.sink,
            family: Family { name, kind, help },
            started: false,
        }
    }
}

/// The series of one family being handed to the sink.
struct Series<'s, S> {
    sink: &'s mut S,
    family: Family,
    started: bool,
}

impl<S: Sink> Series<'_, S> {
    /// Adds one series with item labels; `None` (a `null` value) and non-finite values add
    /// nothing.
    fn series(&mut self, labels: &[(&str, &str)], value: Option<f64>) {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return;
        };
        if !self.started {
            self.started = true;
            self.sink.begin(&self.family);
        }
        self.sink.point(&self.family, labels, value);
    }

    fn value(&mut self, value: Option<f64>) {
        self.series(&[], value);
    }
}

/// A measurement in its base unit (seconds, bytes, bytes/s, cores, ratio); counts as
/// they are.
fn base(measurement: &Option<Measurement>) -> Option<f64> {
    let measurement = measurement.as_ref()?;
    let value = measurement.value.as_f64();
    let factor = match measurement.unit {
        MeasurementUnit::Microseconds => 1e-6,
        MeasurementUnit::Milliseconds => 1e-3,
        MeasurementUnit::Seconds => 1.0,
        MeasurementUnit::Minutes => 60.0,
        MeasurementUnit::Bytes => 1.0,
        MeasurementUnit::Kilobytes => 1e3,
        MeasurementUnit::Megabytes => 1e6,
        MeasurementUnit::Gigabytes => 1e9,
        MeasurementUnit::Terabytes => 1e12,
        MeasurementUnit::Kibibytes => 1024.0,
        MeasurementUnit::Mebibytes => 1024.0 * 1024.0,
        MeasurementUnit::Gibibytes => 1024.0 * 1024.0 * 1024.0,
        MeasurementUnit::Tebibytes => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        MeasurementUnit::BytesPerSecond => 1.0,
        MeasurementUnit::KibibytesPerSecond => 1024.0,
        MeasurementUnit::MebibytesPerSecond => 1024.0 * 1024.0,
        MeasurementUnit::GibibytesPerSecond => 1024.0 * 1024.0 * 1024.0,
        MeasurementUnit::BitsPerSecond => 0.125,
        MeasurementUnit::MegabitsPerSecond => 125_000.0,
        MeasurementUnit::GigabitsPerSecond => 125_000_000.0,
        MeasurementUnit::LogicalProcessors => 1.0,
        MeasurementUnit::Millicores => 1e-3,
        MeasurementUnit::Percentage => 0.01,
        MeasurementUnit::Fraction => 1.0,
        MeasurementUnit::Processes
        | MeasurementUnit::Threads
        | MeasurementUnit::FileDescriptors
        | MeasurementUnit::Handles
        | MeasurementUnit::Events
        | MeasurementUnit::Operations
        | MeasurementUnit::Packets
        | MeasurementUnit::Errors => 1.0,
    };
    Some(value * factor)
}

/// The scope's name, as the `scope` label or attribute.
pub(crate) fn scope_name(scope: MeasurementScope) -> &'static str {
    match scope {
        MeasurementScope::Global => "global",
        MeasurementScope::ApplicationProcess => "application_process",
        MeasurementScope::ProcessTree => "process_tree",
        MeasurementScope::Cgroup => "cgroup",
    }
}

fn limit_event_labels(event: &ResourceLimitEventCount) -> [(&'static str, &'static str); 2] {
    let resource = match event.resource {
        ResourceLimitResource::Cpu => "cpu",
        ResourceLimitResource::Memory => "memory",
        ResourceLimitResource::Processes => "processes",
    };
    let kind = match event.event {
        ResourceLimitEventKind::Throttled => "throttled",
        ResourceLimitEventKind::High => "high",
        ResourceLimitEventKind::Maximum => "maximum",
        ResourceLimitEventKind::OutOfMemory => "out_of_memory",
        ResourceLimitEventKind::Terminated => "terminated",
    };
    [("resource", resource), ("event", kind)]
}

/// Hands every metric of `snapshot` to `sink`, family by family, in a fixed order.
pub(crate) fn walk<S: Sink>(snapshot: &ResourceMetricsSnapshot, sink: &mut S) {
    let mut e = Metrics { sink };
    use Kind::{Counter, Gauge};

    if let Some(cpu) = &snapshot.cpu {
        e.family(
            "relay_metrics_cpu_user_seconds_total",
            Counter,
            "User-mode CPU time of the processes in scope.",
        )
        .value(base(&cpu.user_time));
        e.family(
            "relay_metrics_cpu_system_seconds_total",
            Counter,
            "Kernel-mode CPU time of the processes in scope.",
        )
        .value(base(&cpu.system_time));
        e.family(
            "relay_metrics_cpu_consumption_cores",
            Gauge,
            "Average CPU use since the previous snapshot, in logical processors.",
        )
        .value(base(&cpu.consumption_rate));
        e.family(
            "relay_metrics_cpu_throttled_seconds_total",
            Counter,
            "Time the cgroup was throttled by its CPU quota.",
        )
        .value(base(&cpu.throttled_time));
        e.family(
            "relay_metrics_cpu_effective_limit_cores",
            Gauge,
            "CPU capacity allowed by cgroup quota and cpuset.",
        )
        .value(base(&cpu.effective_limit));
        let mut stall = e.family(
            "relay_metrics_cpu_pressure_stall_seconds_total",
            Counter,
            "PSI CPU stall time.",
        );
        stall.series(&[("kind", "some")], base(&cpu.some_pressure_stall_time));
        stall.series(&[("kind", "full")], base(&cpu.full_pressure_stall_time));
    }
    if let Some(memory) = &snapshot.memory {
        e.family(
            "relay_metrics_memory_system_used_bytes",
            Gauge,
            "System memory in use (total - available).",
        )
        .value(base(&memory.system_used));
        e.family(
            "relay_metrics_memory_system_total_bytes",
            Gauge,
            "Total system memory.",
        )
        .value(base(&memory.system_total));
        e.family(
            "relay_metrics_memory_system_available_bytes",
            Gauge,
            "Available system memory.",
        )
        .value(base(&memory.system_available));
        e.family(
            "relay_metrics_memory_resident_bytes",
            Gauge,
            "Resident memory of the processes in scope.",
        )
        .value(base(&memory.resident));
        e.family(
            "relay_metrics_memory_private_bytes",
            Gauge,
            "Private memory of the processes in scope.",
        )
        .value(base(&memory.private));
        e.family(
            "relay_metrics_memory_virtual_bytes",
            Gauge,
            "Virtual memory of the processes in scope.",
        )
        .value(base(&memory.virtual_memory));
        e.family(
            "relay_metrics_memory_peak_resident_bytes",
            Gauge,
            "Peak resident memory of the application process.",
        )
        .value(base(&memory.peak_resident));
        e.family(
            "relay_metrics_memory_limit_bytes",
            Gauge,
            "Effective memory limit of the cgroup.",
        )
        .value(base(&memory.limit));
        e.family(
            "relay_metrics_memory_cgroup_charged_bytes",
            Gauge,
            "Memory charged to the cgroup.",
        )
        .value(base(&memory.environment_accounted));
        let mut stall = e.family(
            "relay_metrics_memory_pressure_stall_seconds_total",
            Counter,
            "PSI memory stall time.",
        );
        stall.series(&[("kind", "some")], base(&memory.some_pressure_stall_time));
        stall.series(&[("kind", "full")], base(&memory.full_pressure_stall_time));
    }
    let mut events = e.family(
        "relay_metrics_limit_events_total",
        Counter,
        "Resource-limit events (cgroup counters and eBPF).",
    );
    let event_lists = [
        snapshot.cpu.as_ref().map(|c| &c.limit_events),
        snapshot.memory.as_ref().map(|m| &m.limit_events),
        snapshot.process.as_ref().map(|p| &p.limit_events),
    ];
    for event in event_lists.into_iter().flatten().flatten() {
        events.series(&limit_event_labels(event), base(&event.count));
    }
    if let Some(process) = &snapshot.process {
        e.family("relay_metrics_processes", Gauge, "Processes in scope.")
            .value(base(&process.active_count));
        e.family(
            "relay_metrics_threads",
            Gauge,
            "Threads of the processes in scope.",
        )
        .value(base(&process.thread_count));
        e.family(
            "relay_metrics_open_file_descriptors",
            Gauge,
            "Open file descriptors of the processes in scope.",
        )
        .value(base(&process.open_file_descriptor_count));
        e.family(
            "relay_metrics_processes_created_total",
            Counter,
            "Processes created in scope since the collector started.",
        )
        .value(base(&process.lifetime_creation_count));
    }
    if let Some(disk) = &snapshot.disk {
        e.family(
            "relay_metrics_disk_read_bytes_total",
            Counter,
            "Bytes read from storage by the processes in scope.",
        )
        .value(base(&disk.read_data));
        e.family(
            "relay_metrics_disk_written_bytes_total",
            Counter,
            "Bytes written to storage by the processes in scope.",
        )
        .value(base(&disk.write_data));
        e.family(
            "relay_metrics_disk_read_bytes_per_second",
            Gauge,
            "Read rate since the previous snapshot.",
        )
        .value(base(&disk.read_throughput));
        e.family(
            "relay_metrics_disk_write_bytes_per_second",
            Gauge,
            "Write rate since the previous snapshot.",
        )
        .value(base(&disk.write_throughput));
        e.family(
            "relay_metrics_disk_read_operations_total",
            Counter,
            "Read system calls of the processes in scope.",
        )
        .value(base(&disk.read_operations));
        e.family(
            "relay_metrics_disk_write_operations_total",
            Counter,
            "Write system calls of the processes in scope.",
        )
        .value(base(&disk.write_operations));
        let mut capacity = e.family(
            "relay_metrics_filesystem_bytes",
            Gauge,
            "Filesystem capacity of a configured path.",
        );
        for fs in &disk.filesystems {
            capacity.series(
                &[("path", &fs.path), ("kind", "total")],
                base(&fs.total_capacity),
            );
            capacity.series(
                &[("path", &fs.path), ("kind", "available")],
                base(&fs.available_capacity),
            );
            capacity.series(
                &[("path", &fs.path), ("kind", "free")],
                base(&fs.free_capacity),
            );
        }
    }
    if let Some(gpu) = &snapshot.gpu {
        let mut index_text = itoa_buffer();
        let devices = gpu.device_metrics.as_deref().unwrap_or(&[]);
        let mut memory = e.family(
            "relay_metrics_gpu_memory_used_bytes",
            Gauge,
            "Accelerator memory in use.",
        );
        for device in devices {
            memory.series(
                &[("device", &device.device_identifier)],
                base(&device.memory_used),
            );
        }
        let mut busy = e.family(
            "relay_metrics_gpu_utilization_ratio",
            Gauge,
            "Accelerator compute utilisation (0-1).",
        );
        for device in devices {
            busy.series(
                &[("device", &device.device_identifier)],
                base(&device.compute_utilization),
            );
        }
        let processes = gpu.process_metrics.as_deref().unwrap_or(&[]);
        let mut memory = e.family(
            "relay_metrics_gpu_process_memory_used_bytes",
            Gauge,
            "Accelerator memory used by a process in scope.",
        );
        for process in processes {
            let pid = format_u32(&mut index_text, process.process_id);
            memory.series(
                &[("device", &process.device_identifier), ("pid", pid)],
                base(&process.memory_used),
            );
        }
        let mut busy = e.family(
            "relay_metrics_gpu_process_utilization_ratio",
            Gauge,
            "Accelerator utilisation of a process in scope (0-1).",
        );
        for process in processes {
            let pid = format_u32(&mut index_text, process.process_id);
            busy.series(
                &[("device", &process.device_identifier), ("pid", pid)],
                base(&process.compute_utilization),
            );
        }
    }
    if let Some(network) = &snapshot.network {
        type Select = fn(&crate::snapshot::NetworkTrafficMetrics) -> &Option<Measurement>;
        let families: [(&'static str, Kind, &'static str, Select); 8] = [
            (
                "relay_metrics_network_received_bytes_total",
                Counter,
                "Bytes received on the interface.",
                |t| &t.received_data,
            ),
            (
                "relay_metrics_network_transmitted_bytes_total",
                Counter,
                "Bytes transmitted on the interface.",
                |t| &t.transmitted_data,
            ),
            (
                "relay_metrics_network_receive_bytes_per_second",
                Gauge,
                "Receive rate since the previous snapshot.",
                |t| &t.receive_throughput,
            ),
            (
                "relay_metrics_network_transmit_bytes_per_second",
                Gauge,
                "Transmit rate since the previous snapshot.",
                |t| &t.transmit_throughput,
            ),
            (
                "relay_metrics_network_received_packets_total",
                Counter,
                "Packets received on the interface.",
                |t| &t.received_packets,
            ),
            (
                "relay_metrics_network_transmitted_packets_total",
                Counter,
                "Packets transmitted on the interface.",
                |t| &t.transmitted_packets,
            ),
            (
                "relay_metrics_network_receive_errors_total",
                Counter,
                "Receive errors on the interface.",
                |t| &t.receive_errors,
            ),
            (
                "relay_metrics_network_transmit_errors_total",
                Counter,
                "Transmit errors on the interface.",
                |t| &t.transmit_errors,
            ),
        ];
        for (name, kind, help, select) in families {
            let mut metric = e.family(name, kind, help);
            for interface in &network.interfaces {
                metric.series(
                    &[("interface", &interface.name)],
                    base(select(&interface.traffic)),
                );
            }
        }
    }
    if let Some(sampling) = &snapshot.process_sampling {
        e.family(
            "relay_metrics_sampling_visible_processes",
            Gauge,
            "Processes listed by the last snapshot.",
        )
        .value(Some(sampling.visible_processes as f64));
        e.family(
            "relay_metrics_sampling_sampled_processes",
            Gauge,
            "Processes whose base query succeeded in the last snapshot.",
        )
        .value(Some(sampling.sampled_processes as f64));
    }
    let collector = &snapshot.extensions.collector;
    e.family(
        "relay_metrics_collect_duration_seconds",
        Gauge,
        "Wall time the last collection took.",
    )
    .value(Some(collector.collect_duration_usec as f64 * 1e-6));
    e.family(
        "relay_metrics_snapshots_total",
        Counter,
        "Snapshots taken by this collector.",
    )
    .value(Some(collector.sequence as f64));
}

/// A stack buffer for formatting a pid without allocating.
fn itoa_buffer() -> [u8; 10] {
    [0; 10]
}

fn format_u32(buffer: &mut [u8; 10], value: u32) -> &str {
    let mut start = buffer.len();
    let mut rest = value;
    loop {
        start -= 1;
        // `rest % 10` is below 10: the cast cannot truncate.
        buffer[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    std::str::from_utf8(&buffer[start..]).unwrap_or("0")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{CpuUnit, DurationUnit, UtilizationUnit};

    /// Records what a walk hands to its sink.
    #[derive(Default)]
    struct Recorder {
        begun: Vec<&'static str>,
        points: Vec<(&'static str, String, f64)>,
    }

    impl Sink for Recorder {
        fn begin(&mut self, family: &Family) {
            self.begun.push(family.name);
        }
        fn point(&mut self, family: &Family, labels: &[(&str, &str)], value: f64) {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            self.points.push((family.name, labels.join(","), value));
        }
    }

    #[test]
    fn values_are_exported_in_base_units_whatever_the_configured_unit() {
        let ms = Measurement::integer(1500, DurationUnit::Milliseconds, DurationUnit::Milliseconds);
        assert_eq!(base(&Some(ms)), Some(1.5));
        let millicores = Measurement::decimal(250.0, CpuUnit::Millicores, CpuUnit::Millicores);
        assert_eq!(base(&millicores), Some(0.25));
        let percent = Measurement::decimal(
            25.0,
            UtilizationUnit::Percentage,
            UtilizationUnit::Percentage,
        );
        assert_eq!(base(&percent), Some(0.25));
        assert_eq!(base(&None), None);
    }

    #[test]
    fn only_finite_values_are_handed_over_and_empty_families_are_not_announced() {
        let mut recorder = Recorder::default();
        let mut metrics = Metrics {
            sink: &mut recorder,
        };
        metrics.family("empty", Kind::Gauge, "help").value(None);
        let mut family = metrics.family("m_bytes", Kind::Counter, "help");
        family.series(&[("path", "/nan")], Some(f64::NAN));
        family.series(&[("path", "/inf")], Some(f64::INFINITY));
        family.series(&[("path", "/a")], Some(2.0));
        family.series(&[("path", "/b")], Some(3.0));
        assert_eq!(recorder.begun, ["m_bytes"]);
        assert_eq!(
            recorder.points,
            [
                ("m_bytes", "path=/a".to_owned(), 2.0),
                ("m_bytes", "path=/b".to_owned(), 3.0)
            ]
        );
    }
}
