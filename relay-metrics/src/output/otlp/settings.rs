//! Where and how to export: the `serve` flags, then the standard `OTEL_EXPORTER_OTLP_*`
//! variables (a `_METRICS_` variable before its general one), then the defaults.

use std::path::PathBuf;
use std::time::Duration;

use hyper::Uri;

use crate::config::MetricNames;

/// The wire protocol of the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`MetricsService/Export`), port 4317 by default.
    Grpc,
    /// OTLP/HTTP with a binary protobuf body, port 4318 by default.
    HttpProtobuf,
    /// OTLP/HTTP with a JSON body (protobuf's JSON mapping), port 4318 by default.
    HttpJson,
}

impl Protocol {
    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "http/json" => Ok(Self::HttpJson),
            other => Err(format!(
                "unknown OTLP protocol {other:?} (expected grpc, http/protobuf or http/json)"
            )),
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Self::Grpc => 4317,
            Self::HttpProtobuf | Self::HttpJson => 4318,
        }
    }
}

/// Compression of the request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Gzip (`Content-Encoding: gzip`, or gRPC's `grpc-encoding: gzip`).
    Gzip,
    /// Uncompressed.
    None,
}

impl Compression {
    fn parse(text: &str) -> Result<Self, String> {
        match text {
            "gzip" => Ok(Self::Gzip),
            "none" => Ok(Self::None),
            other => Err(format!(
                "unknown OTLP compression {other:?} (expected gzip or none)"
            )),
        }
    }
}

/// The export flags of `serve`; each OTLP one overrides its `OTEL_EXPORTER_OTLP_*` variable.
#[derive(Debug, Clone, Default)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct OtlpFlags {
    /// Metric names on `/metrics` and in OTLP: `relay_metrics` (`relay_metrics_*` in base
    /// units), `otel` (OpenTelemetry's semantic conventions: `system.cpu.time`, …, UCUM units),
    /// `relay` (NeMo Relay's `nemo.relay.resource.*` in the configured units) or `cadvisor`
    /// (cAdvisor's `container_*` for the cgroups measured one by one, node_exporter's `node_*`
    /// for the machine, `relay_metrics_*` for the rest).
    /// Overrides the config's `extensions.metric_names`.
    #[cfg_attr(feature = "cli", arg(long, value_enum, value_name = "NAMING"))]
    pub metric_names: Option<MetricNames>,
    /// Push every snapshot to this OTLP endpoint, `http[s]://host[:port][/path]`. For HTTP the
    /// path defaults to `/v1/metrics`; a missing port is 4318 (HTTP) or 4317 (gRPC) over
    /// http, 443 over https. Without it, `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` or
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` turns the export on.
    #[cfg_attr(feature = "cli", arg(long, value_name = "URL"))]
    pub otlp_endpoint: Option<String>,
    /// grpc, http/protobuf (default) or http/json.
    #[cfg_attr(feature = "cli", arg(long, value_name = "PROTOCOL", value_parser = Protocol::parse))]
    pub otlp_protocol: Option<Protocol>,
    /// A header sent with every export (repeatable), e.g. `authorization=Bearer T`.
    #[cfg_attr(feature = "cli", arg(long = "otlp-header", value_name = "K=V", value_parser = parse_header_flag))]
    pub otlp_headers: Vec<(String, String)>,
    /// PEM file of the certificate authorities that verify the collector (instead of the
    /// system's roots).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub otlp_ca_file: Option<PathBuf>,
    /// PEM certificate chain presented to the collector (with `--otlp-client-key`).
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub otlp_client_cert: Option<PathBuf>,
    /// PEM private key of `--otlp-client-cert`.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    pub otlp_client_key: Option<PathBuf>,
    /// gzip or none (default).
    #[cfg_attr(feature = "cli", arg(long, value_name = "KIND", value_parser = Compression::parse))]
    pub otlp_compression: Option<Compression>,
    /// Longest wait for one export (default 10000).
    #[cfg_attr(feature = "cli", arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..)))]
    pub otlp_timeout_ms: Option<u64>,
}

#[cfg(feature = "cli")]
fn parse_header_flag(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected K=V, got {text:?}"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(format!("empty header name in {text:?}"));
    }
    Ok((key.to_owned(), value.trim().to_owned()))
}

/// Everything the exporter needs, resolved from flags, environment and defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The full URL requests go to (HTTP: including the path; gRPC: the origin).
    pub endpoint: Uri,
    /// The wire protocol.
    pub protocol: Protocol,
    /// Extra request headers (gRPC: metadata), in order; names as given.
    pub headers: Vec<(String, String)>,
    /// Certificate authorities that replace the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate chain and key (both or neither).
    pub client_cert: Option<(PathBuf, PathBuf)>,
    /// Body compression.
    pub compression: Compression,
    /// Longest wait for one export.
    pub timeout: Duration,
    /// Resource attributes from `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` (the latter
    /// as `service.name`, winning over the former), in order.
    pub resource_attributes: Vec<(String, String)>,
    /// The metric naming (not an OTLP setting: the agent's config sets it; default
    /// `relay_metrics`).
    pub metric_names: MetricNames,
    /// Which series are exported (`serve --metrics`, …; not an OTLP setting either).
    pub budget: crate::output::budget::SeriesBudget,
}

/// A flag or variable that does not make a valid export configuration.
#[derive(Debug, thiserror::Error)]
#[error("OTLP: {0}")]
pub struct SettingsError(String);

/// Default per-export timeout (the OTLP specification's 10 s).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl OtlpSettings {
    /// Resolves the flags against the variables that `env` returns (normally
    /// `std::env::var`). `Ok(None)`: no endpoint anywhere, so no export.
    pub fn resolve(
        flags: &OtlpFlags,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, SettingsError> {
        let vars = Variables { env };
        let protocol = match (flags.otlp_protocol, vars.otlp("PROTOCOL")) {
            (Some(protocol), _) => protocol,
            (None, Some((text, _))) => Protocol::parse(text.trim()).map_err(SettingsError)?,
            (None, None) => Protocol::HttpProtobuf,
        };
        // The flag and the metrics variable name the whole URL; the general variable a base
        // under which `v1/metrics` goes (the specification's rule for OTLP/HTTP).
        let (url, rule) = match (&flags.otlp_endpoint, vars.otlp("ENDPOINT")) {
            (Some(url), _) => (url.clone(), PathRule::DefaultMetricsPath),
            (None, Some((url, true))) => (url, PathRule::AsIs),
            (None, Some((url, false))) => (url, PathRule::AppendMetricsPath),
            (None, None) => return Ok(None),
        };
        let endpoint = endpoint_uri(url.trim(), protocol, rule)?;
        let headers = headers(flags, &vars)?;
        let ca_file = vars.path(&flags.otlp_ca_file, "CERTIFICATE");
        let client_cert = client_cert(flags, &vars)?;
        let compression = match (flags.otlp_compression, vars.otlp("COMPRESSION")) {
            (Some(compression), _) => compression,
            (None, Some((text, _))) => Compression::parse(text.trim()).map_err(SettingsError)?,
            (None, None) => Compression::None,
        };
        let timeout = timeout(flags, &vars)?;
        let resource_attributes = resource_attributes(&vars)?;
        Ok(Some(Self {
            endpoint,
            protocol,
            headers,
            ca_file,
            client_cert,
            compression,
            timeout,
            resource_attributes,
            metric_names: MetricNames::default(),
            budget: crate::output::budget::SeriesBudget::everything(),
        }))
    }
}

/// The environment as the OTLP settings read it.
struct Variables<'e> {
    env: &'e dyn Fn(&str) -> Option<String>,
}

impl Variables<'_> {
    /// `name`'s value; a variable set to the empty string counts as unset, as OpenTelemetry
    /// SDKs read them.
    fn var(&self, name: &str) -> Option<String> {
        (self.env)(name).filter(|value| !value.trim().is_empty())
    }

    /// `OTEL_EXPORTER_OTLP_METRICS_<suffix>`, else `OTEL_EXPORTER_OTLP_<suffix>`; with whether
    /// the value is the metrics variable's.
    fn otlp(&self, suffix: &str) -> Option<(String, bool)> {
        self.var(&format!("OTEL_EXPORTER_OTLP_METRICS_{suffix}"))
            .map(|value| (value, true))
            .or_else(|| {
                self.var(&format!("OTEL_EXPORTER_OTLP_{suffix}"))
                    .map(|value| (value, false))
            })
    }

    /// A file: the flag's, else the variable's.
    fn path(&self, flag: &Option<PathBuf>, suffix: &str) -> Option<PathBuf> {
        flag.clone().or_else(|| {
            self.otlp(suffix)
                .map(|(text, _)| PathBuf::from(text.trim()))
        })
    }
}

/// The variable's headers, then the flags' (a flag replaces a variable's header of the same
/// name, whatever its case).
fn headers(
    flags: &OtlpFlags,
    vars: &Variables<'_>,
) -> Result<Vec<(String, String)>, SettingsError> {
    let mut headers = match vars.otlp("HEADERS") {
        Some((text, _)) => parse_pairs(&text, "OTEL_EXPORTER_OTLP_HEADERS")?,
        None => Vec::new(),
    };
    for (key, value) in &flags.otlp_headers {
        headers.retain(|(existing, _)| !existing.eq_ignore_ascii_case(key));
        headers.push((key.clone(), value.clone()));
    }
    Ok(headers)
}

/// The client certificate and its key: both or neither.
fn client_cert(
    flags: &OtlpFlags,
    vars: &Variables<'_>,
) -> Result<Option<(PathBuf, PathBuf)>, SettingsError> {
    match (
        vars.path(&flags.otlp_client_cert, "CLIENT_CERTIFICATE"),
        vars.path(&flags.otlp_client_key, "CLIENT_KEY"),
    ) {
        (Some(cert), Some(key)) => Ok(Some((cert, key))),
        (None, None) => Ok(None),
        _ => Err(SettingsError(
            "a client certificate needs its key and a key its certificate \
             (--otlp-client-cert with --otlp-client-key)"
                .into(),
        )),
    }
}

/// The per-export timeout: the flag's, the variable's (positive milliseconds) or the default.
fn timeout(flags: &OtlpFlags, vars: &Variables<'_>) -> Result<Duration, SettingsError> {
    match (flags.otlp_timeout_ms, vars.otlp("TIMEOUT")) {
        (Some(ms), _) => Ok(Duration::from_millis(ms)),
        (None, Some((text, _))) => match text.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => Err(SettingsError(format!(
                "OTEL_EXPORTER_OTLP_TIMEOUT must be a positive number of \
                 milliseconds, not {text:?}"
            ))),
        },
        (None, None) => Ok(DEFAULT_TIMEOUT),
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES`, with `OTEL_SERVICE_NAME` as `service.name` winning over it.
fn resource_attributes(vars: &Variables<'_>) -> Result<Vec<(String, String)>, SettingsError> {
    let mut attributes = match vars.var("OTEL_RESOURCE_ATTRIBUTES") {
        Some(text) => parse_pairs(&text, "OTEL_RESOURCE_ATTRIBUTES")?,
        None => Vec::new(),
    };
    if let Some(name) = vars.var("OTEL_SERVICE_NAME") {
        attributes.retain(|(key, _)| key != "service.name");
        attributes.push(("service.name".into(), name.trim().to_owned()));
    }
    Ok(attributes)
}

/// What an endpoint's path means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PathRule {
    /// The path as given (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`).
    AsIs,
    /// A base: `v1/metrics` is appended (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    AppendMetricsPath,
    /// `/v1/metrics` when there is no path (`--otlp-endpoint`).
    DefaultMetricsPath,
}

fn endpoint_uri(url: &str, protocol: Protocol, rule: PathRule) -> Result<Uri, SettingsError> {
    let error = |reason: &str| SettingsError(format!("endpoint {url:?}: {reason}"));
    let uri: Uri = url
        .parse()
        .map_err(|parse: hyper::http::uri::InvalidUri| error(&parse.to_string()))?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(error("expected http://host[:port][/path] or https://…")),
    };
    let authority = uri
        .authority()
        .filter(|authority| !authority.host().is_empty())
        .ok_or_else(|| error("expected a host after the scheme"))?;
    if authority.as_str().contains('@') {
        return Err(error(
            "credentials in the URL are not supported (use a header)",
        ));
    }
    // The text after the host, if any, must be `:` and a port number (the parser leaves a
    // malformed port to its users).
    let after_host = &authority.as_str()[authority.host().len()..];
    let port = match (after_host.strip_prefix(':'), authority.port_u16()) {
        (None, _) if after_host.is_empty() => {
            if https {
                443
            } else {
                protocol.default_port()
            }
        }
        (Some(text), Some(port)) if text == port.to_string() => port,
        _ => return Err(error("the port is not a number from 0 to 65535")),
    };
    let path = match protocol {
        // gRPC names the service path itself.
        Protocol::Grpc => "/".to_owned(),
        Protocol::HttpProtobuf | Protocol::HttpJson => {
            let given = uri.path_and_query().map_or("", |p| p.as_str());
            match rule {
                PathRule::AsIs if given.is_empty() => "/".to_owned(),
                PathRule::AsIs => given.to_owned(),
                PathRule::DefaultMetricsPath if given.is_empty() || given == "/" => {
                    "/v1/metrics".to_owned()
                }
                PathRule::DefaultMetricsPath => given.to_owned(),
                PathRule::AppendMetricsPath => {
                    format!("{}/v1/metrics", given.trim_end_matches('/'))
                }
            }
        }
    };
    let scheme = if https { "https" } else { "http" };
    format!("{scheme}://{}:{port}{path}", authority.host())
        .parse()
        .map_err(|parse: hyper::http::uri::InvalidUri| error(&parse.to_string()))
}

/// `k=v,k2=v2` with percent-encoded keys and values (the W3C baggage form of
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`).
fn parse_pairs(text: &str, variable: &str) -> Result<Vec<(String, String)>, SettingsError> {
    let mut pairs = Vec::new();
    for item in text.split(',').filter(|item| !item.trim().is_empty()) {
        let (key, value) = item.split_once('=').ok_or_else(|| {
            SettingsError(format!("{variable}: expected key=value, got {item:?}"))
        })?;
        let decode = |part: &str| {
            percent_decode(part.trim()).ok_or_else(|| {
                SettingsError(format!("{variable}: bad percent-encoding in {item:?}"))
            })
        };
        let key = decode(key)?;
        if key.is_empty() {
            return Err(SettingsError(format!("{variable}: empty key in {item:?}")));
        }
        pairs.push((key, decode(value)?));
    }
    Ok(pairs)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        if bytes[index] == b'%' {
            let hex = bytes.get(index + 1..index + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            index += 3;
        } else {
            out.push(bytes[index]);
            index += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn resolve(flags: &OtlpFlags, vars: &[(&str, &str)]) -> Result<Option<OtlpSettings>, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        OtlpSettings::resolve(flags, &|name| vars.get(name).cloned()).map_err(|e| e.to_string())
    }

    fn endpoint(flags: &OtlpFlags, vars: &[(&str, &str)]) -> String {
        resolve(flags, vars).unwrap().unwrap().endpoint.to_string()
    }

    fn flag_endpoint(url: &str) -> OtlpFlags {
        OtlpFlags {
            otlp_endpoint: Some(url.into()),
            ..OtlpFlags::default()
        }
    }

    #[test]
    fn no_endpoint_means_no_export() {
        assert_eq!(resolve(&OtlpFlags::default(), &[]), Ok(None));
        assert_eq!(
            resolve(
                &OtlpFlags::default(),
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", " "),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "a=b")
                ]
            ),
            Ok(None)
        );
    }

    #[test]
    fn endpoint_paths_follow_the_flag_the_metrics_variable_and_the_base_variable() {
        let none = OtlpFlags::default();
        assert_eq!(
            endpoint(&flag_endpoint("http://collector"), &[]),
            "http://collector:4318/v1/metrics"
        );
        assert_eq!(
            endpoint(&flag_endpoint("http://h:1/custom/path"), &[]),
            "http://h:1/custom/path"
        );
        assert_eq!(
            endpoint(&flag_endpoint("https://saas.example"), &[]),
            "https://saas.example:443/v1/metrics"
        );
        assert_eq!(
            endpoint(&flag_endpoint("http://[::1]"), &[]),
            "http://[::1]:4318/v1/metrics"
        );
        assert_eq!(
            endpoint(
                &none,
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/base/")]
            ),
            "http://c:4318/base/v1/metrics"
        );
        assert_eq!(
            endpoint(
                &none,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:1"),
                    ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:2/exact")
                ]
            ),
            "http://m:2/exact"
        );
        assert_eq!(
            endpoint(
                &none,
                &[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:2")]
            ),
            "http://m:2/"
        );
        // The flag wins over both variables.
        assert_eq!(
            endpoint(
                &flag_endpoint("http://flag:3"),
                &[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:2/exact")]
            ),
            "http://flag:3/v1/metrics"
        );
        // gRPC: the origin only, port 4317 by default.
        assert_eq!(
            endpoint(
                &none,
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                    ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc")
                ]
            ),
            "http://c:4317/"
        );
    }

    #[test]
    fn bad_endpoints_and_values_are_refused_with_the_reason() {
        for (url, reason) in [
            ("collector:4318", "expected http://"),
            ("ftp://collector", "expected http://"),
            ("http://user@host", "credentials"),
            ("http://host:port", "the port is not a number"),
            ("http://host:70000", "the port is not a number"),
            ("http://host:", "the port is not a number"),
        ] {
            let error = resolve(&flag_endpoint(url), &[]).unwrap_err();
            assert!(error.contains(reason), "{url}: {error}");
        }
        let base = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c")];
        for (name, value, reason) in [
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "http/xml",
                "unknown OTLP protocol",
            ),
            (
                "OTEL_EXPORTER_OTLP_COMPRESSION",
                "zstd",
                "unknown OTLP compression",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "0", "milliseconds"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "novalue",
                "expected key=value",
            ),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=%zz", "percent-encoding"),
            ("OTEL_RESOURCE_ATTRIBUTES", "=v", "empty key"),
            ("OTEL_EXPORTER_OTLP_CLIENT_KEY", "/k.pem", "needs its key"),
        ] {
            let error = resolve(&OtlpFlags::default(), &[base[0], (name, value)]).unwrap_err();
            assert!(error.contains(reason), "{name}={value}: {error}");
        }
    }

    #[test]
    fn metrics_variables_override_general_ones_and_flags_override_both() {
        let vars = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=general,x-team=a%20b"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "api-key=metrics"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/general-ca.pem"),
            ("OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE", "/ca.pem"),
            ("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "/cert.pem"),
            ("OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY", "/key.pem"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=ignored,deployment.environment=prod%2Ceu",
            ),
            ("OTEL_SERVICE_NAME", "node-agent"),
        ];
        let settings = resolve(&OtlpFlags::default(), &vars).unwrap().unwrap();
        assert_eq!(settings.protocol, Protocol::HttpJson);
        // The metrics variable replaces the general one whole, as every SDK reads it.
        assert_eq!(settings.headers, [("api-key".into(), "metrics".into())]);
        assert_eq!(settings.ca_file, Some(PathBuf::from("/ca.pem")));
        assert_eq!(
            settings.client_cert,
            Some((PathBuf::from("/cert.pem"), PathBuf::from("/key.pem")))
        );
        assert_eq!(settings.compression, Compression::Gzip);
        assert_eq!(settings.timeout, Duration::from_millis(2500));
        assert_eq!(
            settings.resource_attributes,
            [
                ("deployment.environment".into(), "prod,eu".into()),
                ("service.name".into(), "node-agent".into())
            ]
        );

        let flags = OtlpFlags {
            otlp_protocol: Some(Protocol::Grpc),
            otlp_headers: vec![
                ("API-KEY".into(), "flag".into()),
                ("x-new".into(), "1".into()),
            ],
            otlp_ca_file: Some("/flag-ca.pem".into()),
            otlp_compression: Some(Compression::None),
            otlp_timeout_ms: Some(7),
            ..OtlpFlags::default()
        };
        let settings = resolve(&flags, &vars).unwrap().unwrap();
        assert_eq!(settings.protocol, Protocol::Grpc);
        assert_eq!(
            settings.headers,
            [
                ("API-KEY".into(), "flag".into()),
                ("x-new".into(), "1".into())
            ]
        );
        assert_eq!(settings.ca_file, Some(PathBuf::from("/flag-ca.pem")));
        assert_eq!(settings.compression, Compression::None);
        assert_eq!(settings.timeout, Duration::from_millis(7));
    }

    #[test]
    fn header_flags_need_a_name_and_an_equals_sign() {
        assert_eq!(
            parse_header_flag("authorization=Bearer a=b"),
            Ok(("authorization".into(), "Bearer a=b".into()))
        );
        assert!(parse_header_flag("novalue").is_err());
        assert!(parse_header_flag("=v").is_err());
    }
}
