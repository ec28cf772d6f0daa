//! The metric view of a snapshot, shared by the Prometheus and OTLP encodings, in one of two
//! namings ([`MetricNames`]):
//!
//! - `relay_metrics` (default): the families of [`table`], every value converted to its base
//!   unit whatever the configured output units (seconds, bytes, bytes per second, cores,
//!   ratios), with the factors of [`crate::units`]. Names are Prometheus's (cumulative counters
//!   end in `_total`); every series carries `scope`, per-item series their item (`interface`,
//!   `path`, `device`, `pid`, `resource`/`event`, `kind`).
//! - `otel`: the same families under OpenTelemetry's semantic conventions ([`otel`]).
//! - `cadvisor`: cAdvisor's per-container families and node_exporter's machine families where
//!   they have the value, the `relay_metrics` families for the rest ([`cadvisor`]).
//! - `relay`: NeMo Relay's mark measurements, from [`super::relay_names`] (its one home): Relay's
//!   names and attributes, gauges in the configured units, Relay's `u64`/`f64` value types.
//!
//! A `null` value is simply not exported, as Relay's marks do, and a family without any value
//! is never announced.

mod cadvisor;
mod otel;
mod table;

pub(crate) use otel::resource_attributes;

use crate::config::MetricNames;
use crate::snapshot::{FieldUnit, ResourceMetricsSnapshot, SchemaField, ValueUnit};
use crate::units::{
    BandwidthUnit, CapacityUnit, CpuUnit, DurationUnit, Measurement, MeasurementUnit, UnitFamily,
    UtilizationUnit,
};

use super::relay_names::{self, RelayAttributeValue, RelayValue};

/// Whether a family holds point-in-time values or cumulative counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
    /// Never decreases while the agent runs (a Prometheus counter, an OTLP monotonic sum).
    Counter,
    /// OpenTelemetry's `updowncounter` (`otel` naming only): an OTLP non-monotonic cumulative
    /// sum, a gauge in Prometheus.
    UpDownCounter,
    /// A distribution (a Prometheus histogram, an OTLP cumulative histogram); its points come
    /// through [`Sink::histogram`].
    Histogram,
}

/// The unit of a family's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Seconds,
    Bytes,
    BytesPerSecond,
    /// Logical processors.
    Cores,
    /// 0–1.
    Ratio,
    /// A plain count.
    Count,
    /// Power (W).
    Watts,
    /// Energy (J).
    Joules,
    /// Temperature (°C).
    Celsius,
    /// Frequency (Hz).
    Hertz,
    /// Relay naming: the unit the snapshot was configured to use.
    Configured(MeasurementUnit),
    /// `otel` naming: the UCUM unit of the convention (`s`, `By`, `{process}`).
    Ucum(&'static str),
}

impl Unit {
    /// The base unit of a values table's unit (`snapshot::ValueUnit`), and what divides a
    /// value into it.
    pub(crate) fn base_of(unit: ValueUnit) -> (Self, f64) {
        match unit {
            ValueUnit::Nanoseconds => (Self::Seconds, 1e9),
            ValueUnit::Microseconds => (Self::Seconds, 1e6),
            ValueUnit::Milliseconds => (Self::Seconds, 1e3),
            ValueUnit::Seconds => (Self::Seconds, 1.0),
            ValueUnit::Bytes => (Self::Bytes, 1.0),
            ValueUnit::Kibibytes => (Self::Bytes, 1.0 / 1024.0),
            ValueUnit::BytesPerSecond => (Self::BytesPerSecond, 1.0),
            ValueUnit::Cores => (Self::Cores, 1.0),
            ValueUnit::Percent => (Self::Ratio, 100.0),
            ValueUnit::Watts => (Self::Watts, 1.0),
            ValueUnit::Joules => (Self::Joules, 1.0),
            ValueUnit::Celsius => (Self::Celsius, 1.0),
            ValueUnit::Hertz => (Self::Hertz, 1.0),
            ValueUnit::Count | ValueUnit::Identifier => (Self::Count, 1.0),
        }
    }

    /// The base unit of a field the schema table flags `metric`, from its unit; `None` for a
    /// field that is not a measurement or not flagged `metric`.
    const fn of(field: SchemaField) -> Option<Self> {
        if !field.metric {
            return None;
        }
        match field.unit {
            Some(FieldUnit::Duration) => Some(Self::Seconds),
            Some(FieldUnit::Memory | FieldUnit::Capacity | FieldUnit::Data) => Some(Self::Bytes),
            Some(FieldUnit::Bandwidth) => Some(Self::BytesPerSecond),
            Some(FieldUnit::Cpu) => Some(Self::Cores),
            Some(FieldUnit::Utilization) => Some(Self::Ratio),
            Some(FieldUnit::Count) => Some(Self::Count),
            None => None,
        }
    }

    /// The Prometheus name suffix of a base unit (OpenMetrics' `# UNIT`); `None` for counts
    /// and Relay's configured units.
    pub(crate) fn suffix(self) -> Option<&'static str> {
        match self {
            Self::Seconds => Some("seconds"),
            Self::Bytes => Some("bytes"),
            Self::BytesPerSecond => Some("bytes_per_second"),
            Self::Cores => Some("cores"),
            Self::Ratio => Some("ratio"),
            Self::Ucum("s") => Some("seconds"),
            Self::Ucum("By") => Some("bytes"),
            Self::Ucum("By/s") => Some("bytes_per_second"),
            Self::Watts => Some("watts"),
            Self::Joules => Some("joules"),
            Self::Celsius => Some("celsius"),
            Self::Hertz => Some("hertz"),
            Self::Count | Self::Configured(_) | Self::Ucum(_) => None,
        }
    }

    /// The OTLP unit: UCUM for base units, the configured unit's name for Relay's names.
    pub(crate) fn otlp(self) -> &'static str {
        match self {
            Self::Seconds => "s",
            Self::Bytes => "By",
            Self::BytesPerSecond => "By/s",
            Self::Cores => "{cpu}",
            Self::Ratio | Self::Count => "1",
            Self::Watts => "W",
            Self::Joules => "J",
            Self::Celsius => "Cel",
            Self::Hertz => "Hz",
            Self::Configured(unit) => unit.as_str(),
            Self::Ucum(unit) => unit,
        }
    }
}

/// One metric family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Family {
    /// `relay_metrics` naming: the Prometheus name (counters end in `_total`); `relay`
    /// naming: Relay's dotted name.
    pub name: &'static str,
    pub kind: Kind,
    pub help: &'static str,
    pub unit: Unit,
    pub names: MetricNames,
}

impl Family {
    /// A family of the `relay_metrics` naming (the others are renamed from it on output).
    pub(crate) const fn relay_metrics(
        name: &'static str,
        kind: Kind,
        unit: Unit,
        help: &'static str,
    ) -> Self {
        Self {
            name,
            kind,
            help,
            unit,
            names: MetricNames::RelayMetrics,
        }
    }
}

/// A label (attribute) value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label<'a> {
    Str(&'a str),
    Int(u64),
}

/// A point's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Number {
    F64(f64),
    /// Relay's `u64` values (never above `i64::MAX`).
    U64(u64),
}

/// Receives the metrics of a snapshot.
pub(crate) trait Sink {
    /// Announces `family`, before its first point.
    fn begin(&mut self, family: &Family);
    /// One finite value of `family` with all its labels (the scope first, in `relay_metrics`
    /// naming).
    fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number);
    /// [`Sink::point`] for a series of one measured cgroup: its labels are the cgroup's
    /// (`base`) then the series' own (`extra`). `cgroup` is the cgroup's index in the walk's
    /// targets, and every call with the same index in one walk has the same `base` (one cgroup
    /// has one set of labels), so a sink may write a cgroup's labels once per walk.
    fn cgroup_point<'l>(
        &mut self,
        family: &Family,
        cgroup: usize,
        base: &[(&'l str, Label<'l>)],
        extra: &[(&'l str, Label<'l>)],
        value: Number,
    ) {
        let _ = cgroup;
        let mut all = [("", Label::Int(0)); CGROUP_SERIES_LABELS];
        let count = join_labels(base, extra, &mut all);
        self.point(family, &all[..count], value);
    }
    /// Offered before the series of measured cgroup `cgroup` in `family`, where they depend on
    /// the cgroup's report alone: true when the sink wrote them itself, copied from its last
    /// walk (it announced the family first unless `announced`), and the walker then hands over
    /// none of them. A sink that keeps nothing says false.
    fn cgroup_lines(&mut self, family: &Family, cgroup: usize, announced: bool) -> bool {
        let _ = (family, cgroup, announced);
        false
    }
    /// One distribution of a [`Kind::Histogram`] family: cumulative counts at each upper bound
    /// (ascending; the `+Inf` bucket is `count`), the total count and the sum.
    fn histogram(&mut self, family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram);
    /// [`Sink::histogram`] for one measured cgroup, whose labels are `labels`: `cgroup` as in
    /// [`Sink::cgroup_point`].
    fn cgroup_histogram(
        &mut self,
        family: &Family,
        cgroup: usize,
        labels: &[(&str, Label<'_>)],
        histogram: &Histogram,
    ) {
        let _ = cgroup;
        self.histogram(family, labels, histogram);
    }
}

/// Most labels a measured cgroup's series has: the cgroup's ten and two of its family.
pub(crate) const CGROUP_SERIES_LABELS: usize = 12;

/// `base` then `extra` into `all`, as many as fit; returns how many.
pub(crate) fn join_labels<'l>(
    base: &[(&'l str, Label<'l>)],
    extra: &[(&'l str, Label<'l>)],
    all: &mut [(&'l str, Label<'l>); CGROUP_SERIES_LABELS],
) -> usize {
    let mut count = 0;
    for (slot, &label) in all.iter_mut().zip(base.iter().chain(extra)) {
        *slot = label;
        count += 1;
    }
    count
}

/// A distribution handed to [`Sink::histogram`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Histogram {
    /// `(upper bound, observations ≤ it)`, bounds ascending, counts cumulative.
    pub buckets: Vec<(f64, u64)>,
    /// Every observation.
    pub count: u64,
    /// Their sum.
    pub sum: f64,
}

/// One `relay_metrics` family: its series read fields of a snapshot section `T`, each with an
/// optional fixed label of its own.
pub(super) struct Def<T: 'static> {
    name: &'static str,
    kind: Kind,
    unit: Unit,
    help: &'static str,
    series: &'static [Series<T>],
}

/// One series of a family: its own label, if any, and the field it reads.
pub(super) struct Series<T: 'static> {
    label: Option<SeriesLabel>,
    get: Getter<T>,
    /// The field's base unit, for the tests' check that a family's series share one.
    #[cfg(test)]
    unit: Unit,
    /// The snapshot field, for the tests' check against the schema table.
    #[cfg(test)]
    field: &'static str,
}

/// A series' own label, e.g. `("kind", "some")`.
type SeriesLabel = (&'static str, &'static str);
type Getter<T> = fn(&T) -> Option<Measurement>;

/// Most labels a `relay_metrics` series has: scope, two item labels, one series label.
const MAX_LABELS: usize = 4;

/// A measurement in its family's base unit (seconds, bytes, bytes/s, cores, ratio); counts as
/// they are.
fn base(measurement: Measurement) -> f64 {
    fn ratio<U: UnitFamily>(unit: U, base: U) -> f64 {
        unit.factor() as f64 / base.factor() as f64
    }
    let unit = measurement.unit;
    let factor = if let Some(unit) = DurationUnit::from_measurement_unit(unit) {
        ratio(unit, DurationUnit::Seconds)
    } else if let Some(unit) = CapacityUnit::from_measurement_unit(unit) {
        ratio(unit, CapacityUnit::Bytes)
    } else if let Some(unit) = BandwidthUnit::from_measurement_unit(unit) {
        ratio(unit, BandwidthUnit::BytesPerSecond)
    } else if let Some(unit) = CpuUnit::from_measurement_unit(unit) {
        ratio(unit, CpuUnit::LogicalProcessors)
    } else if let Some(unit) = UtilizationUnit::from_measurement_unit(unit) {
        ratio(unit, UtilizationUnit::Fraction)
    } else {
        1.0
    };
    measurement.value.as_f64() * factor
}

/// [`walk`] within a series budget.
pub(crate) fn walk_within<S: Sink>(
    snapshot: &ResourceMetricsSnapshot,
    names: MetricNames,
    budget: &super::budget::SeriesBudget,
    sink: &mut S,
) {
    let off = super::budget::CategoriesOff::of(snapshot);
    if budget.filters(off) {
        walk(
            snapshot,
            names,
            &mut super::budget::Budgeted::new(sink, budget, off),
        );
    } else {
        walk(snapshot, names, sink);
    }
}

/// Hands every metric of `snapshot` to `sink` in `names`' naming, family by family, in a fixed
/// order.
pub(crate) fn walk<S: Sink>(snapshot: &ResourceMetricsSnapshot, names: MetricNames, sink: &mut S) {
    match names {
        MetricNames::RelayMetrics => walk_relay_metrics(snapshot, sink, false),
        MetricNames::Relay => walk_relay(snapshot, sink),
        MetricNames::Otel => walk_relay_metrics(
            snapshot,
            &mut otel::Renamer::new(sink, snapshot.measurement_scope.as_str()),
            false,
        ),
        MetricNames::Cadvisor => cadvisor::walk(snapshot, sink),
    }
}

/// The `relay_metrics` families; with `cadvisor`, the per-cgroup ones in cAdvisor's naming.
fn walk_relay_metrics<S: Sink>(snapshot: &ResourceMetricsSnapshot, sink: &mut S, cadvisor: bool) {
    let mut w = Writer {
        sink,
        scope: Some(snapshot.measurement_scope.as_str()),
        names: MetricNames::RelayMetrics,
    };
    let cumulative = snapshot.extensions.cumulative.as_ref();
    if let Some(cpu) = &snapshot.cpu {
        if let Some(cumulative) = cumulative {
            w.single(table::CUMULATIVE_CPU, cumulative);
        }
        w.single(table::CPU, cpu);
    }
    if let Some(memory) = &snapshot.memory {
        w.single(table::MEMORY, memory);
    }
    let events = [
        snapshot.cpu.as_ref().map(|c| &c.limit_events),
        snapshot.memory.as_ref().map(|m| &m.limit_events),
        snapshot.process.as_ref().map(|p| &p.limit_events),
    ];
    w.section(
        table::LIMIT_EVENTS,
        events.into_iter().flatten().flatten(),
        |event| {
            [
                ("resource", Label::Str(event.resource.as_str())),
                ("event", Label::Str(event.event.as_str())),
            ]
        },
    );
    if let Some(process) = &snapshot.process {
        w.single(table::PROCESS, process);
    }
    if let Some(disk) = &snapshot.disk {
        if let Some(cumulative) = cumulative {
            w.single(table::CUMULATIVE_DISK, cumulative);
        }
        w.single(table::DISK, disk);
        w.section(table::FILESYSTEM, &disk.filesystems, |fs| {
            [("path", Label::Str(&fs.path))]
        });
    }
    if let Some(gpu) = &snapshot.gpu {
        w.gpu(gpu);
    }
    if let Some(network) = &snapshot.network {
        w.network(network);
    }
    if let Some(sampling) = &snapshot.process_sampling {
        w.single(table::SAMPLING, sampling);
    }
    w.single(table::COLLECTOR, &snapshot.extensions.collector);
    if let Some(targets) = &snapshot.extensions.targets {
        if cadvisor {
            let seen = snapshot.timestamp.timestamp_millis() as f64 / 1e3;
            super::target_metrics::walk_cadvisor(targets, seen, w.sink);
        } else {
            super::target_metrics::walk(targets, w.sink);
        }
    }
    if let Some(gpu) = &snapshot.extensions.gpu {
        super::gpu_metrics::walk(gpu, snapshot.measurement_scope.as_str(), w.sink);
    }
}

impl<S: Sink> Writer<'_, S> {
    /// Relay's per-device and per-process GPU families.
    fn gpu(&mut self, gpu: &crate::snapshot::GpuMetrics) {
        let devices = gpu.device_metrics.as_deref().unwrap_or_default();
        self.section(table::GPU_DEVICE, devices, |device| {
            [("device", Label::Str(&device.device_identifier))]
        });
        let processes = gpu.process_metrics.as_deref().unwrap_or_default();
        self.section(table::GPU_PROCESS, processes, |process| {
            [
                ("device", Label::Str(&process.device_identifier)),
                ("pid", Label::Int(u64::from(process.process_id))),
            ]
        });
    }

    /// The per-interface network families.
    fn network(&mut self, network: &crate::snapshot::NetworkMetrics) {
        for def in table::NETWORK {
            self.family(def, &network.interfaces, |interface| {
                (
                    &interface.traffic,
                    [("interface", Label::Str(&interface.name))],
                )
            });
        }
    }
}

/// Hands the families of a table to a sink, with the scope label first where there is one.
struct Writer<'s, S> {
    sink: &'s mut S,
    /// `None`: no scope label (node_exporter's families).
    scope: Option<&'static str>,
    names: MetricNames,
}

impl<S: Sink> Writer<'_, S> {
    /// Every family of `defs` over one section without item labels.
    fn single<T>(&mut self, defs: &[Def<T>], section: &T) {
        self.section(defs, [section], |_| []);
    }

    /// Every family of `defs` over `items` (each labelled by `labels`).
    fn section<'i, T: 'i, const N: usize>(
        &mut self,
        defs: &[Def<T>],
        items: impl IntoIterator<Item = &'i T> + Clone,
        labels: impl Fn(&'i T) -> [(&'static str, Label<'i>); N],
    ) {
        for def in defs {
            self.family(def, items.clone(), |item| (item, labels(item)));
        }
    }

    /// One family over `items`, each giving its section and its labels.
    fn family<'i, I: 'i, T: 'i, const N: usize>(
        &mut self,
        def: &Def<T>,
        items: impl IntoIterator<Item = &'i I>,
        section: impl Fn(&'i I) -> (&'i T, [(&'static str, Label<'i>); N]),
    ) {
        let family = Family {
            name: def.name,
            kind: def.kind,
            help: def.help,
            unit: def.unit,
            names: self.names,
        };
        let mut started = false;
        for item in items {
            let (fields, item_labels) = section(item);
            for series in def.series {
                let Some(value) = (series.get)(fields).map(base).filter(|v| v.is_finite()) else {
                    continue;
                };
                if !started {
                    started = true;
                    self.sink.begin(&family);
                }
                let mut labels = [("", Label::Int(0)); MAX_LABELS];
                let mut count = 0;
                if let Some(scope) = self.scope {
                    labels[0] = ("scope", Label::Str(scope));
                    count = 1;
                }
                let series_label = series.label.map(|(key, value)| (key, Label::Str(value)));
                for label in item_labels.iter().copied().chain(series_label) {
                    if count < MAX_LABELS {
                        labels[count] = label;
                        count += 1;
                    }
                }
                self.sink
                    .point(&family, &labels[..count], Number::F64(value));
            }
        }
    }
}

/// Relay's measurements, grouped by name (a family's series must be contiguous in Prometheus
/// text; Relay interleaves limit events and network sections) in order of first appearance.
fn walk_relay<S: Sink>(snapshot: &ResourceMetricsSnapshot, sink: &mut S) {
    let measurements = relay_names::relay_measurements(snapshot);
    let mut names: Vec<&'static str> = Vec::with_capacity(64);
    let mut order: Vec<(usize, usize)> = measurements
        .iter()
        .enumerate()
        .map(|(index, measurement)| {
            let first = match names.iter().position(|name| *name == measurement.name) {
                Some(first) => first,
                None => {
                    names.push(measurement.name);
                    names.len() - 1
                }
            };
            (first, index)
        })
        .collect();
    order.sort_unstable();
    let mut current = None;
    for (_, index) in order {
        let measurement = &measurements[index];
        let family = Family {
            name: measurement.name,
            kind: Kind::Gauge,
            help: measurement.description,
            unit: Unit::Configured(measurement.unit),
            names: MetricNames::Relay,
        };
        if current != Some(measurement.name) {
            current = Some(measurement.name);
            sink.begin(&family);
        }
        let mut labels = [("", Label::Int(0)); 8];
        let mut count = 0;
        for (key, value) in measurement.attributes() {
            if count < labels.len() {
                labels[count] = (
                    key,
                    match *value {
                        RelayAttributeValue::Str(text) => Label::Str(text),
                        RelayAttributeValue::Int(number) => Label::Int(number),
                    },
                );
                count += 1;
            }
        }
        let value = match measurement.value {
            RelayValue::U64(number) => Number::U64(number),
            RelayValue::F64(number) => Number::F64(number),
        };
        sink.point(&family, &labels[..count], value);
    }
}

#[cfg(test)]
mod tests;
