//! OpenTelemetry export of the families of [`super::metrics`], on opentelemetry-proto's
//! types: OTLP/HTTP with a protobuf (default) or JSON body, or OTLP/gRPC through the client
//! opentelemetry-proto generates for tonic; TLS on rustls; the standard `OTEL_EXPORTER_OTLP_*`
//! variables.
//!
//! Metric names are the Prometheus names without `_total`: a collector's Prometheus exporter adds
//! it back for monotonic sums, so both paths end in the same series. Units are UCUM (`s`, `By`,
//! `By/s`, `{cpu}`, `1`). Gauges are OTLP gauges; counters are cumulative monotonic sums whose
//! start is the exporter's start. Every point carries the `scope` attribute and its item labels;
//! the resource carries `service.name` (`relay-metrics`), `service.version` and `host.name`,
//! plus `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`.

mod encode;
mod exporter;
mod settings;
mod transport;

pub use encode::{request, OtlpResource};
pub use exporter::{start, ExportFailures, OtlpExporter, OtlpPublisher};
pub use settings::{Compression, OtlpFlags, OtlpSettings, Protocol, SettingsError};
pub use transport::TransportError;

#[cfg(test)]
mod tests;
