//! OpenTelemetry export: the families of [`super::metrics`] as an OTLP/HTTP JSON
//! `ExportMetricsServiceRequest` (opentelemetry-proto's JSON mapping), pushed to a collector's
//! `/v1/metrics` over plain HTTP.
//!
//! Metric names are the Prometheus names without `_total`: a collector's Prometheus exporter adds
//! it back for monotonic sums, so both paths end in the same series. Units are UCUM (`s`, `By`,
//! `By/s`, `{cpu}`, `1`). Gauges are OTLP gauges; counters are cumulative monotonic sums whose
//! start is the exporter's start. Every point carries the `scope` attribute and its item labels;
//! the resource carries `service.name` (`relay-metrics`), `service.version` and `host.name`.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::metrics::{self, Family, Kind, Sink};
use crate::snapshot::ResourceMetricsSnapshot;

/// OTLP's `AGGREGATION_TEMPORALITY_CUMULATIVE`.
const CUMULATIVE: u8 = 2;
/// Longest wait for a collector to accept a connection or to answer.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of a collector's response we read (its status line is all we need).
const MAX_RESPONSE_BYTES: usize = 16 * 1024;

/// What every export of this process says about where its metrics come from.
#[derive(Debug, Clone)]
pub struct OtlpResource {
    attributes: Vec<KeyValue>,
    start_unix_nano: String,
}

impl OtlpResource {
    /// This host's resource, with cumulative sums starting at `start`.
    pub fn new(start: SystemTime) -> Self {
        // The UTS namespace's name, as gethostname(2) returns it.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        let mut attributes = vec![
            KeyValue::new("service.name", "relay-metrics"),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ];
        if !host.is_empty() {
            attributes.push(KeyValue::new("host.name", host));
        }
        Self {
            attributes,
            start_unix_nano: unix_nanos(start).to_string(),
        }
    }
}

/// Encodes `snapshot` as an OTLP/HTTP JSON request body into `out` (cleared first).
pub fn encode(snapshot: &ResourceMetricsSnapshot, resource: &OtlpResource, out: &mut Vec<u8>) {
    out.clear();
    let time_unix_nano = snapshot
        .timestamp
        .timestamp_nanos_opt()
        .map_or(0, |nanos| u64::try_from(nanos).unwrap_or(0))
        .to_string();
    let mut sink = Points {
        metrics: Vec::new(),
        scope: metrics::scope_name(snapshot.measurement_scope),
        time_unix_nano,
        start_unix_nano: &resource.start_unix_nano,
    };
    metrics::walk(snapshot, &mut sink);
    let request = Request {
        resource_metrics: [ResourceMetrics {
            resource: Resource {
                attributes: &resource.attributes,
            },
            scope_metrics: [ScopeMetrics {
                scope: Scope {
                    name: "relay-metrics",
                    version: env!("CARGO_PKG_VERSION"),
                },
                metrics: sink.metrics,
            }],
        }],
    };
    // Plain structs of strings and finite numbers: serialising into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, &request);
}

/// The OTLP metric (name, unit) of a family: the Prometheus name without `_total`, and the UCUM
/// unit its base-unit suffix names.
fn otlp_name_and_unit(family: &Family) -> (&'static str, &'static str) {
    let name = family.name.strip_suffix("_total").unwrap_or(family.name);
    let unit = if name.ends_with("_bytes_per_second") {
        "By/s"
    } else if name.ends_with("_seconds") {
        "s"
    } else if name.ends_with("_bytes") {
        "By"
    } else if name.ends_with("_cores") {
        "{cpu}"
    } else {
        "1"
    };
    (name, unit)
}

/// Collects the families as OTLP metrics.
struct Points<'r> {
    metrics: Vec<Metric>,
    scope: &'static str,
    time_unix_nano: String,
    start_unix_nano: &'r str,
}

impl Sink for Points<'_> {
    fn begin(&mut self, family: &Family) {
        let (name, unit) = otlp_name_and_unit(family);
        let data = match family.kind {
            Kind::Gauge => Data::Gauge {
                data_points: Vec::new(),
            },
            Kind::Counter => Data::Sum {
                data_points: Vec::new(),
                aggregation_temporality: CUMULATIVE,
                is_monotonic: true,
            },
        };
        self.metrics.push(Metric {
            name,
            description: family.help,
            unit,
            data,
        });
    }

    fn point(&mut self, family: &Family, labels: &[(&str, &str)], value: f64) {
        let Some(metric) = self.metrics.last_mut() else {
            return;
        };
        let mut attributes = Vec::with_capacity(labels.len() + 1);
        attributes.push(KeyValue::new("scope", self.scope));
        attributes.extend(labels.iter().map(|(key, value)| KeyValue::new(key, value)));
        let (data_points, start) = match &mut metric.data {
            Data::Gauge { data_points } => (data_points, None),
            Data::Sum { data_points, .. } => (data_points, Some(self.start_unix_nano.to_owned())),
        };
        debug_assert_eq!(family.kind == Kind::Counter, start.is_some());
        data_points.push(Point {
            attributes,
            start_time_unix_nano: start,
            time_unix_nano: self.time_unix_nano.clone(),
            as_double: value,
        });
    }
}

fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        u64::try_from(since.as_nanos()).unwrap_or(u64::MAX)
    })
}

// The request, field for field as opentelemetry-proto's JSON mapping names them (64-bit integers
// as decimal strings).

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Request<'r> {
    resource_metrics: [ResourceMetrics<'r>; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResourceMetrics<'r> {
    resource: Resource<'r>,
    scope_metrics: [ScopeMetrics; 1],
}

#[derive(Serialize)]
struct Resource<'r> {
    attributes: &'r [KeyValue],
}

#[derive(Serialize)]
struct ScopeMetrics {
    scope: Scope,
    metrics: Vec<Metric>,
}

#[derive(Serialize)]
struct Scope {
    name: &'static str,
    version: &'static str,
}

#[derive(Serialize)]
struct Metric {
    name: &'static str,
    description: &'static str,
    unit: &'static str,
    #[serde(flatten)]
    data: Data,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase", rename_all_fields = "camelCase")]
enum Data {
    Gauge {
        data_points: Vec<Point>,
    },
    Sum {
        data_points: Vec<Point>,
        aggregation_temporality: u8,
        is_monotonic: bool,
    },
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Point {
    attributes: Vec<KeyValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    start_time_unix_nano: Option<String>,
    time_unix_nano: String,
    as_double: f64,
}

#[derive(Debug, Clone, Serialize)]
struct KeyValue {
    key: String,
    value: StringValue,
}

impl KeyValue {
    fn new(key: &str, value: &str) -> Self {
        Self {
            key: key.to_owned(),
            value: StringValue {
                string_value: value.to_owned(),
            },
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct StringValue {
    string_value: String,
}

/// Where to push: a plain-HTTP OTLP endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpEndpoint {
    /// `host:port` to connect to.
    authority: String,
    /// The request path (`/v1/metrics` unless the URL names one).
    path: String,
}

/// A URL that is not a plain-HTTP endpoint.
#[derive(Debug, thiserror::Error)]
#[error("OTLP endpoint {url:?}: {reason}")]
pub struct EndpointError {
    url: String,
    reason: &'static str,
}

impl OtlpEndpoint {
    /// Parses `http://host[:port][/path]`: the port defaults to 4318 (OTLP/HTTP) and an empty
    /// path to `/v1/metrics`, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read; a path is used as given.
    /// TLS is not supported: point it at a local collector (sidecar or node agent).
    pub fn parse(url: &str) -> Result<Self, EndpointError> {
        let error = |reason| EndpointError {
            url: url.to_owned(),
            reason,
        };
        if url.starts_with("https://") {
            return Err(error(
                "https is not supported; send to a local collector over http",
            ));
        }
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| error("expected http://host[:port][/path]"))?;
        let (authority, path) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains(['@', ' ', '?', '#']) {
            return Err(error("expected a host (and optional port) after http://"));
        }
        let has_port = match authority.rsplit_once(':') {
            // An IPv6 literal's colons are inside its brackets.
            Some((host, port)) if !port.contains(']') => {
                if host.is_empty() || port.parse::<u16>().is_err() {
                    return Err(error("the port is not a number from 0 to 65535"));
                }
                true
            }
            _ => false,
        };
        let authority = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:4318")
        };
        let path = match path {
            "" | "/" => "/v1/metrics".to_owned(),
            path => path.to_owned(),
        };
        Ok(Self { authority, path })
    }
}

impl fmt::Display for OtlpEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

/// Why one export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// No connection, or it broke.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The collector took longer than the export timeout.
    #[error("no answer within {0:?}")]
    TimedOut(Duration),
    /// The collector answered with something other than 2xx.
    #[error("the collector answered {0:?}")]
    Rejected(String),
}

/// POSTs one OTLP/HTTP JSON body to `endpoint`; `Ok` on a 2xx answer.
pub async fn export(endpoint: &OtlpEndpoint, body: &[u8]) -> Result<(), ExportError> {
    tokio::time::timeout(EXPORT_TIMEOUT, post(endpoint, body))
        .await
        .map_err(|_| ExportError::TimedOut(EXPORT_TIMEOUT))?
}

async fn post(endpoint: &OtlpEndpoint, body: &[u8]) -> Result<(), ExportError> {
    let mut stream = TcpStream::connect(&endpoint.authority).await?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        endpoint.path,
        endpoint.authority,
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    let mut response = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // The final status line is enough; the collector closes the connection after its answer.
    loop {
        if let Some(outcome) = final_status(&response) {
            return outcome;
        }
        let read = stream.read(&mut chunk).await?;
        if read == 0 || response.len() >= MAX_RESPONSE_BYTES {
            return Err(ExportError::Rejected(format!(
                "no HTTP status line in {:?}",
                String::from_utf8_lossy(&response[..response.len().min(200)])
            )));
        }
        response.extend_from_slice(&chunk[..read]);
    }
}

/// The outcome of the final (non-1xx) status line of `response`, `None` while it is incomplete.
/// Interim 1xx answers and their headers are skipped; lines may end in CRLF or a bare LF.
fn final_status(response: &[u8]) -> Option<Result<(), ExportError>> {
    let mut lines = response.split_inclusive(|&b| b == b'\n');
    loop {
        let line = lines.next().filter(|line| line.ends_with(b"\n"))?;
        let line = String::from_utf8_lossy(line).trim_end().to_owned();
        let code = line
            .strip_prefix("HTTP/1.")
            .and_then(|rest| rest.split(' ').nth(1))
            .filter(|code| code.len() == 3)
            .and_then(|code| code.parse::<u16>().ok());
        match code {
            Some(100..=199) => loop {
                // Skip the interim answer's headers, up to its blank line.
                let header = lines.next().filter(|line| line.ends_with(b"\n"))?;
                if header.trim_ascii().is_empty() {
                    break;
                }
            },
            Some(200..=299) => return Some(Ok(())),
            _ => return Some(Err(ExportError::Rejected(line))),
        }
    }
}

#[cfg(test)]
mod tests;
