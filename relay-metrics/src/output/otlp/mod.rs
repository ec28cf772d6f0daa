//! OpenTelemetry export of the families of [`super::metrics`], on opentelemetry-proto's
//! types: OTLP/HTTP with a protobuf (default) or JSON body, or OTLP/gRPC through the client
//! opentelemetry-proto generates for tonic; TLS on rustls (ring); the standard
//! `OTEL_EXPORTER_OTLP_*` variables ([`OtlpSettings::resolve`]).
//!
//! In the default naming, metric names are the Prometheus names without `_total` (a collector's
//! Prometheus exporter adds it back for monotonic sums, so both paths end in the same series),
//! with UCUM units (`s`, `By`, `By/s`, `{cpu}`, `1`); gauges are OTLP gauges, counters cumulative
//! monotonic sums starting at the exporter's start. In Relay's naming, Relay's measurement names
//! and attributes, gauges, the configured unit, `asInt` for Relay's `u64` values. In the `otel`
//! naming, OpenTelemetry's semantic-convention names, units and instrument kinds (an
//! `updowncounter` is a non-monotonic cumulative sum). The resource carries `service.name`
//! (`relay-metrics`), `service.version`, `host.name`, `os.type` and `service.instance.id`, plus
//! `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME`.
//!
//! Use: [`start`] gives an [`OtlpPublisher`] for the sampling thread (it encodes each snapshot
//! once) and an [`OtlpExporter`] to run on tokio until a stop future completes; both share the
//! [`ExportFailures`] count.

mod encode;
mod exporter;
mod settings;
mod starts;
mod transport;

pub use encode::{request, OtlpResource};
pub use exporter::{start, ExportFailures, OtlpExporter, OtlpPublisher};
pub use settings::{Compression, OtlpFlags, OtlpSettings, Protocol, SettingsError};
pub use transport::TransportError;

#[cfg(test)]
mod tests;
