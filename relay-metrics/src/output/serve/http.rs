//! Requests to responses: routes, methods, content negotiation (OpenMetrics or Prometheus text,
//! gzip or identity).

use std::time::Instant;

use bytes::Bytes;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};

use super::body::Chunks;
use super::encode::Format;
use super::health::Liveness;
use super::web::BasicAuth;
use super::Latest;
use crate::output::prometheus;

/// What a request handler reads.
#[derive(Debug)]
pub(super) struct App {
    pub latest: Latest,
    pub liveness: Liveness,
    /// Basic-auth users every request must be one of, when configured.
    pub auth: Option<std::sync::Arc<BasicAuth>>,
}

/// OpenMetrics' content type.
pub(super) const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
const ROUTES: &str = "routes: / /metrics /snapshot /healthz\n";
/// The landing page (`GET /`), as node_exporter's: what the agent is and where its routes are.
const LANDING: &str = concat!(
    "<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">",
    "<title>relay-metrics</title></head>\n<body>\n<h1>relay-metrics</h1>\n",
    "<p>Resource-metrics agent, version ",
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("RELAY_METRICS_COMMIT"),
    ").</p>\n<ul>\n",
    "<li><a href=\"metrics\">/metrics</a>: Prometheus text, or OpenMetrics when asked</li>\n",
    "<li><a href=\"snapshot\">/snapshot</a>: the latest snapshot as JSON</li>\n",
    "<li><a href=\"healthz\">/healthz</a>: whether the sampler is live</li>\n",
    "</ul>\n</body>\n</html>\n"
);

impl App {
    /// The response to a request from `client`: 401 without valid credentials when basic auth
    /// is on, else [`Self::respond`]. `/healthz` needs none: a kubelet's probes send none, and
    /// it tells only whether the sampler is live.
    pub(super) async fn authorized<B>(
        &self,
        request: &Request<B>,
        client: std::net::IpAddr,
    ) -> Response<Chunks> {
        let open = request.uri().path() == "/healthz";
        if let Some(auth) = self.auth.as_ref().filter(|_| !open) {
            let authorization = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|value| value.to_str().ok());
            if !auth.allows(authorization, client).await {
                let mut response = plain(StatusCode::UNAUTHORIZED, "authentication required\n");
                response.headers_mut().insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Basic realm=\"relay-metrics\""),
                );
                return response;
            }
        }
        self.respond(request)
    }

    /// The response to a request (its body is not read: no route takes one).
    pub(super) fn respond<B>(&self, request: &Request<B>) -> Response<Chunks> {
        let route = match request.uri().path() {
            "/" => Route::Landing,
            "/metrics" => Route::Metrics,
            "/snapshot" => Route::Snapshot,
            "/healthz" => Route::Healthz,
            _ => return plain(StatusCode::NOT_FOUND, ROUTES),
        };
        if !matches!(*request.method(), Method::GET | Method::HEAD) {
            let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        if let Route::Landing = route {
            let mut response = plain(StatusCode::OK, LANDING);
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/html; charset=utf-8"),
            );
            return response;
        }
        let now = Instant::now();
        let latest = self.latest.get();
        if let Route::Healthz = route {
            return match self.liveness.check(latest.as_deref(), now) {
                Ok(()) => plain(StatusCode::OK, "ok\n"),
                Err(reason) => plain(StatusCode::SERVICE_UNAVAILABLE, reason),
            };
        }
        let Some(publication) = latest else {
            return plain(StatusCode::SERVICE_UNAVAILABLE, "no snapshot yet\n");
        };
        let headers = request.headers();
        let (format, content_type, tail) = match route {
            Route::Metrics => {
                let openmetrics = wants_openmetrics(headers);
                let tail = self.liveness.tail(&publication, now, openmetrics);
                if openmetrics {
                    (Format::OpenMetrics, OPENMETRICS_CONTENT_TYPE, tail)
                } else {
                    (Format::Prometheus, prometheus::CONTENT_TYPE, tail)
                }
            }
            _ => (Format::Json, "application/json", String::new()),
        };
        let compressed = accepts_gzip(headers)
            .then(|| publication.gzip(format))
            .flatten()
            .and_then(|prefix| Some((prefix.bytes.clone(), prefix.finish(tail.as_bytes())?)));
        let gzip = compressed.is_some();
        let body = match compressed {
            Some((prefix, end)) => Chunks::from_parts([prefix, end, Bytes::new()]),
            None => {
                Chunks::from_parts([publication.encoded(format), Bytes::from(tail), Bytes::new()])
            }
        };
        let mut response = Response::new(body);
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(
            header::VARY,
            HeaderValue::from_static(match route {
                Route::Metrics => "Accept, Accept-Encoding",
                _ => "Accept-Encoding",
            }),
        );
        if gzip {
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        }
        response
    }
}

#[derive(Debug, Clone, Copy)]
enum Route {
    Landing,
    Metrics,
    Snapshot,
    Healthz,
}

/// A plain-text response.
pub(super) fn plain(status: StatusCode, text: impl Into<Bytes>) -> Response<Chunks> {
    let mut response = Response::new(Chunks::one(text));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(TEXT));
    response
}

/// Each element of a comma-separated header (every occurrence of it) with its `q` (1 unless
/// given; an unparsable `q` counts as 0): `(value without parameters, parameters, q)`.
fn weighted(
    headers: &HeaderMap,
    name: header::HeaderName,
) -> impl Iterator<Item = (&str, &str, f32)> {
    headers
        .get_all(name)
        .into_iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|element| {
            let element = element.trim();
            let (value, parameters) = element.split_once(';').unwrap_or((element, ""));
            let q = parameters
                .split(';')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(key, _)| key.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, q)| q.trim().parse::<f32>().unwrap_or(0.0));
            (value.trim(), parameters, q)
        })
}

/// True when `Accept` prefers OpenMetrics (1.0.0, 0.0.1 or unversioned) at least as much as
/// plain text, as Prometheus asks by default.
pub(super) fn wants_openmetrics(headers: &HeaderMap) -> bool {
    let (mut openmetrics, mut text) = (0.0f32, 0.0f32);
    for (value, parameters, q) in weighted(headers, header::ACCEPT) {
        if value.eq_ignore_ascii_case("application/openmetrics-text") {
            let version = parameters
                .split(';')
                .filter_map(|p| p.trim().split_once('='))
                .find(|(key, _)| key.trim().eq_ignore_ascii_case("version"))
                .map(|(_, version)| version.trim());
            if matches!(version, None | Some("1.0.0" | "0.0.1")) {
                openmetrics = openmetrics.max(q);
            }
        } else if ["text/plain", "text/*", "*/*"]
            .iter()
            .any(|t| value.eq_ignore_ascii_case(t))
        {
            text = text.max(q);
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

/// True when `Accept-Encoding` accepts gzip (by name or `*`, with `q` above 0).
pub(super) fn accepts_gzip(headers: &HeaderMap) -> bool {
    let (mut named, mut any) = (None, None);
    for (value, _, q) in weighted(headers, header::ACCEPT_ENCODING) {
        if value.eq_ignore_ascii_case("gzip") || value.eq_ignore_ascii_case("x-gzip") {
            named = Some(q);
        } else if value == "*" {
            any = Some(q);
        }
    }
    named.or(any).is_some_and(|q| q > 0.0)
}
