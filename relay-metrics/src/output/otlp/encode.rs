//! A snapshot as opentelemetry-proto's `ExportMetricsServiceRequest`, and its HTTP bodies.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram as OtlpHistogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::super::metrics::{self, Family, Histogram, Kind, Label, Number, Sink};
use crate::config::MetricNames;
use crate::snapshot::ResourceMetricsSnapshot;

/// What every export of this process says about where its metrics come from.
#[derive(Debug, Clone)]
pub struct OtlpResource {
    attributes: Vec<KeyValue>,
    start_unix_nano: u64,
}

impl OtlpResource {
    /// This host's resource (`service.name` `relay-metrics`, `service.version`, `host.name`,
    /// `os.type`, `service.instance.id`),
    /// with `extra` attributes (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`) replacing
    /// same-named ones, and non-monotonic sums starting at `start` (a monotonic sum's start is its
    /// own, chosen by the exporter's `StartTimes`).
    pub fn new(start: SystemTime, extra: &[(String, String)]) -> Self {
        let host = crate::source::system::hostname().unwrap_or_default();
        let host = host.as_str();
        let mut pairs: Vec<(&str, &str)> = vec![
            ("service.name", "relay-metrics"),
            ("service.version", env!("CARGO_PKG_VERSION")),
        ];
        if !host.is_empty() {
            pairs.push(("host.name", host));
        }
        // `os.type` and `service.instance.id`, shared with the `otel` naming's `target_info`.
        for (key, value) in metrics::resource_attributes() {
            if matches!(*key, "os.type" | "service.instance.id") {
                pairs.push((key, value));
            }
        }
        for (key, value) in extra {
            pairs.retain(|(existing, _)| existing != key);
            pairs.push((key, value));
        }
        Self {
            attributes: pairs
                .into_iter()
                .map(|(k, v)| string_attribute(k, v))
                .collect(),
            start_unix_nano: unix_nanos(start),
        }
    }
}

fn string_attribute(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_owned())),
        }),
        ..KeyValue::default()
    }
}

/// The request that exports `snapshot` in `names`' naming.
pub fn request(
    snapshot: &ResourceMetricsSnapshot,
    resource: &OtlpResource,
    names: MetricNames,
) -> ExportMetricsServiceRequest {
    request_within(
        snapshot,
        resource,
        names,
        &crate::output::budget::SeriesBudget::everything(),
        None,
    )
}

/// [`request`] within a series budget.
pub(crate) fn request_within(
    snapshot: &ResourceMetricsSnapshot,
    resource: &OtlpResource,
    names: MetricNames,
    budget: &crate::output::budget::SeriesBudget,
    starts: Option<&mut super::starts::StartTimes>,
) -> ExportMetricsServiceRequest {
    let time_unix_nano = snapshot
        .timestamp
        .timestamp_nanos_opt()
        .map_or(0, |nanos| u64::try_from(nanos).unwrap_or(0));
    let mut sink = Points {
        names,
        resources: vec![(Vec::new(), Vec::new())],
        family: None,
        families: 0,
        time_unix_nano,
        start_time_unix_nano: resource.start_unix_nano,
        starts: starts.map(|starts| starts.begin(time_unix_nano)),
    };
    metrics::walk_within(snapshot, names, budget, &mut sink);
    let resource_metrics = sink
        .resources
        .into_iter()
        .enumerate()
        .filter(|(index, (_, metrics))| *index == 0 || !metrics.is_empty())
        .map(|(_, (identity, metrics))| {
            let mut attributes = resource.attributes.clone();
            attributes.extend(
                identity
                    .iter()
                    .map(|(key, value)| string_attribute(key, value)),
            );
            ResourceMetrics {
                resource: Some(Resource {
                    attributes,
                    ..Resource::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "relay-metrics".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..InstrumentationScope::default()
                    }),
                    metrics: metrics.into_iter().map(|(_, metric)| metric).collect(),
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }
        })
        .collect();
    ExportMetricsServiceRequest { resource_metrics }
}

/// The resource attribute that a measured cgroup's label stands for (the conventions'
/// `container.*` and `k8s.*` where they have one); `None`: the label describes the point.
fn resource_key(names: MetricNames, label: &str) -> Option<&'static str> {
    Some(match (names, label) {
        (MetricNames::Cadvisor, "id") | (_, "cgroup" | "relay_metrics.cgroup") => {
            "relay_metrics.cgroup"
        }
        (_, "unit" | "relay_metrics.systemd.unit") => "relay_metrics.systemd.unit",
        (_, "container_id" | "container.id") => "container.id",
        (_, "container_runtime" | "container.runtime.name") => "container.runtime.name",
        (MetricNames::Cadvisor, "name") | (_, "container_name" | "container.name") => {
            "container.name"
        }
        (MetricNames::Cadvisor, "image") | (_, "container_image" | "container.image.name") => {
            "container.image.name"
        }
        (_, "pod_uid" | "k8s.pod.uid") => "k8s.pod.uid",
        (MetricNames::Cadvisor, "pod") | (_, "pod_name" | "k8s.pod.name") => "k8s.pod.name",
        (MetricNames::Cadvisor, "namespace") | (_, "pod_namespace" | "k8s.namespace.name") => {
            "k8s.namespace.name"
        }
        (MetricNames::Cadvisor, "container") => "k8s.container.name",
        (_, "qos_class" | "relay_metrics.k8s.qos_class") => "relay_metrics.k8s.qos_class",
        _ => return None,
    })
}

/// The OTLP name of a family: Relay's names as they are; ours without `_total` (a collector's
/// Prometheus exporter adds it back to monotonic sums, so both paths end in the same series;
/// cAdvisor's and node_exporter's names likewise).
pub(super) fn otlp_name(family: &Family) -> &'static str {
    match family.names {
        MetricNames::Relay | MetricNames::Otel => family.name,
        MetricNames::RelayMetrics | MetricNames::Cadvisor => {
            family.name.strip_suffix("_total").unwrap_or(family.name)
        }
    }
}

/// Collects the families as OTLP metrics: the host's, and those of each measured cgroup (a
/// container, a pod, a unit) under a resource of its own, as the conventions have it.
struct Points<'s> {
    names: MetricNames,
    /// Each resource's identity (the host's is empty, first) and its metrics, each with the
    /// number of the family it belongs to.
    resources: Vec<(Identity, Vec<(usize, Metric)>)>,
    /// The family being walked, as an empty metric to copy into each resource that has a point.
    family: Option<Metric>,
    /// Families begun so far.
    families: usize,
    time_unix_nano: u64,
    start_time_unix_nano: u64,
    /// The exporter's start times per series (`None`: every series starts at its point).
    starts: Option<super::starts::Export<'s>>,
}

/// A measured cgroup's resource attributes, in the order of its labels.
type Identity = Vec<(&'static str, String)>;

impl Points<'_> {
    /// The start time of a monotonic series with `value` now: without the exporter's history,
    /// an unknown-start reset point (see [`super::starts`]).
    fn start(&mut self, labels: &[(&str, Label<'_>)], value: f64) -> u64 {
        match (&mut self.starts, &self.family) {
            (Some(starts), Some(metric)) => starts.start(&metric.name, labels, value),
            _ => self.time_unix_nano,
        }
    }

    /// The metric of the current family in the resource that `labels` name, made on its first
    /// point, and the attributes left for the point.
    fn metric_for(&mut self, labels: &[(&str, Label<'_>)]) -> Option<(&mut Metric, Vec<KeyValue>)> {
        let names = self.names;
        let mut identity: Identity = Vec::new();
        let mut rest = Vec::new();
        for &(key, value) in labels {
            match (resource_key(names, key), value) {
                (Some(attribute), Label::Str(text)) => identity.push((attribute, text.to_owned())),
                _ => rest.push((key, value)),
            }
        }
        let index = match self
            .resources
            .iter()
            .position(|(known, _)| *known == identity)
        {
            Some(index) => index,
            None => {
                self.resources.push((identity, Vec::new()));
                self.resources.len() - 1
            }
        };
        let family = self.families;
        let metrics = &mut self.resources[index].1;
        if metrics.last().is_none_or(|(number, _)| *number != family) {
            metrics.push((family, self.family.clone()?));
        }
        let (_, metric) = metrics.last_mut()?;
        Some((metric, attributes(&rest)))
    }
}

impl Sink for Points<'_> {
    fn begin(&mut self, family: &Family) {
        let data = match family.kind {
            Kind::Gauge => metric::Data::Gauge(Gauge::default()),
            Kind::Counter | Kind::UpDownCounter => metric::Data::Sum(Sum {
                data_points: Vec::new(),
                aggregation_temporality: AggregationTemporality::Cumulative.into(),
                is_monotonic: family.kind == Kind::Counter,
            }),
            Kind::Histogram => metric::Data::Histogram(OtlpHistogram {
                data_points: Vec::new(),
                aggregation_temporality: AggregationTemporality::Cumulative.into(),
            }),
        };
        self.families += 1;
        self.family = Some(Metric {
            name: otlp_name(family).into(),
            description: family.help.into(),
            unit: family.unit.otlp().into(),
            data: Some(data),
            ..Metric::default()
        });
    }

    fn point(&mut self, _family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        let Some(Metric {
            data: Some(data), ..
        }) = &self.family
        else {
            return;
        };
        let monotonic = matches!(data, metric::Data::Sum(sum) if sum.is_monotonic);
        let sum = matches!(data, metric::Data::Sum(_));
        let start = match (monotonic, sum) {
            (true, _) => {
                let as_f64 = match value {
                    Number::F64(number) => number,
                    Number::U64(number) => number as f64,
                };
                self.start(labels, as_f64)
            }
            (false, true) => self.start_time_unix_nano,
            (false, false) => 0,
        };
        let time_unix_nano = self.time_unix_nano;
        let Some((
            Metric {
                data: Some(data), ..
            },
            attributes,
        )) = self.metric_for(labels)
        else {
            return;
        };
        let data_points = match data {
            metric::Data::Sum(sum) => &mut sum.data_points,
            metric::Data::Gauge(gauge) => &mut gauge.data_points,
            // Only gauges and sums are begun above.
            _ => return,
        };
        data_points.push(NumberDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano,
            value: Some(match value {
                Number::F64(number) => number_data_point::Value::AsDouble(number),
                Number::U64(number) => number_data_point::Value::AsInt(saturating_i64(number)),
            }),
            ..NumberDataPoint::default()
        });
    }

    fn histogram(&mut self, _family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram) {
        let start = self.start(labels, histogram.count as f64);
        let time_unix_nano = self.time_unix_nano;
        let Some((
            Metric {
                data: Some(metric::Data::Histogram(data)),
                ..
            },
            attributes,
        )) = self.metric_for(labels)
        else {
            return;
        };
        // OTLP's buckets are not cumulative, with one more bucket above the last bound.
        let mut bucket_counts = Vec::with_capacity(histogram.buckets.len() + 1);
        let mut below = 0;
        for &(_, cumulative) in &histogram.buckets {
            bucket_counts.push(cumulative.saturating_sub(below));
            below = cumulative;
        }
        bucket_counts.push(histogram.count.saturating_sub(below));
        data.data_points.push(HistogramDataPoint {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano,
            count: histogram.count,
            sum: Some(histogram.sum),
            bucket_counts,
            explicit_bounds: histogram.buckets.iter().map(|&(bound, _)| bound).collect(),
            ..HistogramDataPoint::default()
        });
    }
}

fn attributes(labels: &[(&str, Label<'_>)]) -> Vec<KeyValue> {
    labels
        .iter()
        .map(|(key, value)| match value {
            Label::Str(text) => string_attribute(key, text),
            Label::Int(number) => KeyValue {
                key: (*key).to_owned(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::IntValue(saturating_i64(*number))),
                }),
                ..KeyValue::default()
            },
        })
        .collect()
}

/// OTLP integers are signed; Relay's never exceed `i64::MAX`, pids and indexes neither.
fn saturating_i64(number: u64) -> i64 {
    i64::try_from(number).unwrap_or(i64::MAX)
}

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}
