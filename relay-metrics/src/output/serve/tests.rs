use std::io::Read as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Body as _;
use hyper::header::{HeaderValue, ACCEPT, ACCEPT_ENCODING};
use hyper::{Method, Request, StatusCode};

use super::body::Chunks;
use super::encode::{to_openmetrics, Format};
use super::health::Liveness;
use super::http::{accepts_gzip, wants_openmetrics, App, OPENMETRICS_CONTENT_TYPE};
use super::*;
use crate::output::otlp::ExportFailures;

const TEXT: &[u8] =
    b"# HELP m_bytes A \"quoted\" help.\n# TYPE m_bytes gauge\nm_bytes{scope=\"global\"} 1\n\
# HELP c_total Counted things.\n# TYPE c_total counter\nc_total{scope=\"global\"} 7\n";

fn app(period: Duration) -> App {
    App {
        latest: Latest::default(),
        liveness: Liveness {
            period,
            started: Instant::now(),
            export: Some(ExportFailures::default()),
        },
        auth: None,
    }
}

fn publish(app: &App) {
    app.latest.set(Publication::new(
        Bytes::from_static(b"{\"a\":1}"),
        Bytes::from_static(TEXT),
        "global",
    ));
}

fn request(
    method: Method,
    path: &str,
    headers: &[(hyper::header::HeaderName, &str)],
) -> Request<()> {
    let mut request = Request::new(());
    *request.method_mut() = method;
    *request.uri_mut() = path.parse().unwrap();
    for (name, value) in headers {
        request
            .headers_mut()
            .append(name.clone(), HeaderValue::from_str(value).unwrap());
    }
    request
}

/// The whole body of a response.
fn collect(mut body: Chunks) -> Vec<u8> {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let mut out = Vec::new();
    let expected = body.size_hint().exact().unwrap();
    while let std::task::Poll::Ready(Some(Ok(frame))) =
        std::pin::Pin::new(&mut body).poll_frame(&mut context)
    {
        out.extend_from_slice(frame.data_ref().unwrap());
    }
    assert_eq!(out.len() as u64, expected, "size hint and body agree");
    out
}

#[test]
fn routes_methods_and_missing_snapshots() {
    let app = app(Duration::from_secs(1));
    let status = |method: Method, path: &str| app.respond(&request(method, path, &[])).status();
    assert_eq!(
        status(Method::GET, "/metrics"),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        status(Method::GET, "/healthz"),
        StatusCode::SERVICE_UNAVAILABLE
    );
    publish(&app);
    assert_eq!(status(Method::GET, "/metrics"), StatusCode::OK);
    assert_eq!(status(Method::HEAD, "/metrics"), StatusCode::OK);
    assert_eq!(status(Method::GET, "/snapshot?pretty"), StatusCode::OK);
    assert_eq!(status(Method::GET, "/healthz"), StatusCode::OK);
    assert_eq!(status(Method::GET, "/other"), StatusCode::NOT_FOUND);
    let landing = app.respond(&request(Method::GET, "/", &[]));
    assert_eq!(landing.status(), StatusCode::OK);
    assert_eq!(
        landing.headers()["content-type"],
        "text/html; charset=utf-8"
    );
    let page = String::from_utf8(collect(landing.into_body())).unwrap();
    for link in ["href=\"metrics\"", "href=\"snapshot\"", "href=\"healthz\""] {
        assert!(page.contains(link), "{link} in {page}");
    }
    assert_eq!(status(Method::POST, "/"), StatusCode::METHOD_NOT_ALLOWED);
    let post = app.respond(&request(Method::POST, "/metrics", &[]));
    assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.headers()["allow"], "GET, HEAD");
}

#[test]
fn metrics_end_with_the_sample_age_and_export_failures() {
    let app = app(Duration::from_secs(1));
    publish(&app);
    let response = app.respond(&request(Method::GET, "/metrics", &[]));
    assert_eq!(
        response.headers()["content-type"],
        crate::output::prometheus::CONTENT_TYPE
    );
    let text = String::from_utf8(collect(response.into_body())).unwrap();
    assert!(
        text.starts_with(std::str::from_utf8(TEXT).unwrap()),
        "{text}"
    );
    let age: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("relay_metrics_sample_age_seconds{scope=\"global\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!((0.0..5.0).contains(&age), "{age}");
    assert!(
        text.contains(
            "# TYPE relay_metrics_otlp_export_failures_total counter\n\
                       relay_metrics_otlp_export_failures_total{scope=\"global\"} 0\n"
        ),
        "{text}"
    );
}

#[test]
fn a_publication_is_shared_not_copied() {
    let app = app(Duration::from_secs(1));
    publish(&app);
    let first = app.respond(&request(Method::GET, "/snapshot", &[]));
    let second = app.respond(&request(Method::GET, "/snapshot", &[]));
    let first = collect(first.into_body());
    assert_eq!(first, b"{\"a\":1}");
    // The chunk handed to hyper is the publication's own buffer.
    let publication = app.latest.get().unwrap();
    let mut body = second.into_body();
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let std::task::Poll::Ready(Some(Ok(frame))) =
        std::pin::Pin::new(&mut body).poll_frame(&mut context)
    else {
        panic!("no frame");
    };
    assert_eq!(
        frame.data_ref().unwrap().as_ptr(),
        publication.json().as_ptr()
    );
}

#[test]
fn openmetrics_when_accept_prefers_it() {
    let prometheus_default = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let wants = |accept: &str| {
        let mut headers = hyper::HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_str(accept).unwrap());
        wants_openmetrics(&headers)
    };
    assert!(wants(prometheus_default));
    assert!(wants("application/openmetrics-text"));
    assert!(!wants("*/*"));
    assert!(!wants("text/plain"));
    assert!(!wants("text/plain, application/openmetrics-text;q=0.5"));
    assert!(!wants("application/openmetrics-text;q=0"));
    assert!(!wants("application/openmetrics-text;version=2.0.0"));
    assert!(!wants_openmetrics(&hyper::HeaderMap::new()));

    let app = app(Duration::from_secs(1));
    publish(&app);
    let response = app.respond(&request(
        Method::GET,
        "/metrics",
        &[(ACCEPT, prometheus_default)],
    ));
    assert_eq!(response.headers()["content-type"], OPENMETRICS_CONTENT_TYPE);
    let text = String::from_utf8(collect(response.into_body())).unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE c counter\nc_total{scope=\"global\"} 7\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE relay_metrics_otlp_export_failures counter\n"),
        "{text}"
    );
    assert_eq!(text.matches("# EOF").count(), 1);
}

#[test]
fn openmetrics_conversion_renames_counters_and_escapes_help() {
    let text = b"# HELP a_total Things.\n# TYPE a_total counter\na_total 1\n\
        # HELP b Odd.\n# TYPE b counter\nb 2\n\
        # HELP d_seconds Time.\n# TYPE d_seconds gauge\n# UNIT d_seconds seconds\nd_seconds 3\n\
        # HELP e Not suffixed.\n# TYPE e untyped\n# UNIT e seconds\ne 4\n\
        # a comment\n\n";
    let converted = String::from_utf8(to_openmetrics(text)).unwrap();
    assert_eq!(
        converted,
        "# HELP a Things.\n# TYPE a counter\na_total 1\n\
         # HELP b Odd.\n# TYPE b unknown\nb 2\n\
         # HELP d_seconds Time.\n# TYPE d_seconds gauge\n# UNIT d_seconds seconds\nd_seconds 3\n\
         # HELP e Not suffixed.\n# TYPE e unknown\ne 4\n"
    );
    let quoted = String::from_utf8(to_openmetrics(TEXT)).unwrap();
    assert!(
        quoted.contains("# HELP m_bytes A \\\"quoted\\\" help.\n"),
        "{quoted}"
    );
}

/// Series lines pass through the conversion as runs: blank lines anywhere among them go, a last
/// line without its newline gets one, and every other byte is kept.
#[test]
fn openmetrics_keeps_series_lines_and_drops_blank_ones() {
    let text =
        b"\na 1\n\n\nb{x=\"#\"} 2\n# HELP c_total C.\n# TYPE c_total counter\n\nc_total 3\n\nd 4";
    assert_eq!(
        String::from_utf8(to_openmetrics(text)).unwrap(),
        "a 1\nb{x=\"#\"} 2\n# HELP c C.\n# TYPE c counter\nc_total 3\nd 4\n"
    );
    // A node's worth of series: the same lines, in the same order, as a line-by-line reading.
    let mut big = String::new();
    for family in 0..20 {
        big.push_str(&format!("# HELP f{family} H.\n# TYPE f{family} gauge\n"));
        for series in 0..300 {
            big.push_str(&format!("f{family}{{cgroup=\"/c-{series}\"}} {series}\n"));
        }
    }
    let converted = String::from_utf8(to_openmetrics(big.as_bytes())).unwrap();
    assert_eq!(converted, big);
}

#[test]
fn gzip_when_accepted_and_the_stream_decodes_to_the_plain_body() {
    let accepts = |value: &str| {
        let mut headers = hyper::HeaderMap::new();
        headers.insert(ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        accepts_gzip(&headers)
    };
    assert!(accepts("gzip"));
    assert!(accepts("deflate, gzip;q=0.5"));
    assert!(accepts("*"));
    assert!(!accepts("gzip;q=0"));
    assert!(!accepts("identity"));
    assert!(!accepts("*;q=0.5, gzip;q=0"));

    let app = app(Duration::from_secs(1));
    publish(&app);
    for path in ["/metrics", "/snapshot"] {
        let plain = collect(app.respond(&request(Method::GET, path, &[])).into_body());
        let response = app.respond(&request(Method::GET, path, &[(ACCEPT_ENCODING, "gzip")]));
        assert_eq!(response.headers()["content-encoding"], "gzip");
        let compressed = collect(response.into_body());
        let mut decoded = String::new();
        // One gzip member (not several concatenated): what every client can read.
        flate2::read::GzDecoder::new(&compressed[..])
            .read_to_string(&mut decoded)
            .unwrap();
        let plain = String::from_utf8(plain).unwrap();
        // The sample age differs between the two responses; everything before it is equal.
        let cut = |text: &str| {
            text.split("relay_metrics_sample_age_seconds{")
                .next()
                .unwrap()
                .to_string()
        };
        assert_eq!(cut(&decoded), cut(&plain));
        assert!(
            decoded.len().abs_diff(plain.len()) < 8,
            "{decoded}\n{plain}"
        );
    }
}

#[test]
fn liveness_turns_503_after_three_periods() {
    let app = app(Duration::from_millis(10));
    publish(&app);
    let publication = app.latest.get().unwrap();
    assert_eq!(
        app.liveness.check(Some(&publication), publication.taken),
        Ok(())
    );
    let reason = app
        .liveness
        .check(
            Some(&publication),
            publication.taken + Duration::from_millis(31),
        )
        .unwrap_err();
    assert!(
        reason.starts_with("stale: the latest snapshot is"),
        "{reason}"
    );
    let response = {
        std::thread::sleep(Duration::from_millis(40));
        app.respond(&request(Method::GET, "/healthz", &[]))
    };
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(String::from_utf8(collect(response.into_body()))
        .unwrap()
        .contains("stale"));
}

#[test]
fn the_oldest_idle_connection_is_shed_first_and_busy_ones_never() {
    let registry = std::sync::Arc::new(conn::Registry::default());
    let (first, first_shed) = registry.register();
    std::thread::sleep(Duration::from_millis(2));
    let (second, second_shed) = registry.register();
    let busy = first.busy();
    assert!(registry.shed_oldest_idle());
    // The first is busy: the second, idle, is told to close.
    assert!(notified(&second_shed));
    assert!(!notified(&first_shed));
    // Already told: not chosen again; the first is still busy.
    assert!(!registry.shed_oldest_idle());
    drop(busy);
    assert!(registry.shed_oldest_idle());
    assert!(notified(&first_shed));
    assert_eq!(registry.len(), 2);
    drop((first, second));
    assert_eq!(registry.len(), 0);
}

/// A response that has run for the response timeout ends its connection (`http` closes it when
/// `overdue` is ready), whether or not it made progress; an idle connection is never overdue.
#[test]
fn a_response_is_overdue_after_the_response_timeout_and_an_idle_connection_never() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let registry = std::sync::Arc::new(conn::Registry::default());
    let (registration, _shed) = registry.register();
    let limit = Duration::from_millis(200);
    runtime.block_on(async {
        let idle = tokio::time::timeout(Duration::from_millis(600), registration.overdue(limit));
        assert!(idle.await.is_err(), "an idle connection was overdue");
        let busy = registration.busy();
        let started = Instant::now();
        tokio::time::timeout(Duration::from_secs(5), registration.overdue(limit))
            .await
            .expect("a busy connection was never overdue");
        let took = started.elapsed();
        assert!(took >= limit && took < limit * 2, "{took:?}");
        drop(busy);
        assert_eq!(registration.busy_for(), None);
    });
}

#[test]
fn a_sampler_that_panics_ends_the_agent_with_its_reason() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let options = AgentOptions {
        listen: "127.0.0.1:0".into(),
        period: Duration::from_millis(100),
        otlp: None,
        limits: Limits::default(),
        web: None,
        budget: crate::output::budget::SeriesBudget::everything(),
    };
    let result = runtime.block_on(async {
        tokio::time::timeout(
            Duration::from_secs(10),
            agent::run_with(options, |_, _, _| {
                spawn_sampling(|| panic!("collector exploded"))
            }),
        )
        .await
    });
    match result {
        Ok(Err(AgentError::SamplerDied(reason))) => {
            assert_eq!(reason, "the sampling thread panicked: collector exploded");
        }
        other => panic!("{other:?}"),
    }
}

/// True when `notify` holds a notification (consuming it).
fn notified(notify: &tokio::sync::Notify) -> bool {
    let waker = std::task::Waker::noop();
    let mut context = std::task::Context::from_waker(waker);
    let notified = notify.notified();
    let mut notified = std::pin::pin!(notified);
    std::future::Future::poll(notified.as_mut(), &mut context).is_ready()
}

#[test]
fn a_write_that_makes_no_progress_times_out() {
    use tokio::io::AsyncWriteExt as _;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The peer never reads: writes stall once its 64-byte buffer is full.
        let (near, _far) = tokio::io::duplex(64);
        let mut stream = conn::WriteTimeout::new(near, Duration::from_millis(100));
        let started = Instant::now();
        let error = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Err(error) = stream.write_all(&[0u8; 1024]).await {
                    return error;
                }
            }
        })
        .await
        .expect("the write failed before the test's own timeout");
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(100));
    });
}

#[test]
fn openmetrics_has_a_unit_line_for_every_unit_suffixed_family() {
    let config = crate::ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "global", "disk": {"filesystem_paths": ["/"]},
            "extensions": {"kernel_events": false}}"#,
    )
    .unwrap();
    let mut collector = crate::Collector::new(config).unwrap();
    collector.collect();
    let snapshot = collector.collect();
    let app = app(Duration::from_secs(1));
    app.latest
        .set(Publication::of_snapshot(snapshot, relay_metrics_text()));
    let response = app.respond(&request(
        Method::GET,
        "/metrics",
        &[(ACCEPT, "application/openmetrics-text; version=1.0.0")],
    ));
    let body = String::from_utf8(collect(response.into_body())).unwrap();
    let families: Vec<&str> = body
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| rest.split(' ').next().unwrap())
        .collect();
    assert!(families.len() > 20, "{body}");
    let mut suffixed = 0;
    for family in families {
        let unit = ["bytes_per_second", "seconds", "bytes", "ratio", "cores"]
            .into_iter()
            .find(|unit| family.ends_with(&format!("_{unit}")));
        if let Some(unit) = unit {
            suffixed += 1;
            assert!(
                body.contains(&format!("# UNIT {family} {unit}\n")),
                "no # UNIT for {family}:\n{body}"
            );
        }
    }
    assert!(suffixed > 10, "{body}");
    for name in [
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "relay_metrics_sample_age_seconds",
    ] {
        assert!(body.contains(&format!("# UNIT {name} ")), "{name}: {body}");
    }
}

/// The agent's text settings: `relay_metrics` names, every series.
fn relay_metrics_text() -> Arc<TextSettings> {
    Arc::new(TextSettings::new(
        crate::config::MetricNames::RelayMetrics,
        crate::output::budget::SeriesBudget::everything(),
    ))
}

/// A publication of a snapshot writes nothing until asked; then its text once, whatever the
/// number of requests (or once ahead, on the sampling thread, after a text was asked for), and
/// the same text the encoder gives with the agent's own series.
#[test]
fn a_snapshots_text_is_written_on_the_first_request_and_only_once() {
    let config = crate::ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "global", "extensions": {"kernel_events": false}}"#,
    )
    .unwrap();
    let mut collector = crate::Collector::new(config).unwrap();
    let snapshot = collector.collect();
    let text = relay_metrics_text();
    let publication = Publication::of_snapshot(Arc::clone(&snapshot), Arc::clone(&text));
    assert!(publication.derived_prometheus().is_none());
    assert!(!text.take_asked().text());
    let first = publication.prometheus();
    let second = publication.prometheus();
    assert_eq!(first.as_ptr(), second.as_ptr(), "written twice");
    // Asked for: the sampling thread writes the next one ahead, and that is not a request.
    let asked = text.take_asked();
    assert!(asked.text());
    assert_eq!(
        asked.compressed().count(),
        0,
        "no compressed body was asked for"
    );
    assert!(!text.take_asked().text());
    let next = Publication::of_snapshot(Arc::clone(&snapshot), Arc::clone(&text));
    next.prepare(asked);
    let ahead = next.derived_prometheus().cloned().unwrap();
    assert!(
        !text.take_asked().text(),
        "writing ahead counted as a request"
    );
    assert_eq!(next.prometheus().as_ptr(), ahead.as_ptr(), "written again");
    assert!(text.take_asked().text());
    let mut expected = String::new();
    crate::output::prometheus::encode(
        &snapshot,
        crate::config::MetricNames::RelayMetrics,
        &mut expected,
    );
    let text = std::str::from_utf8(&first).unwrap();
    let (families, own) = text.split_at(expected.len());
    assert_eq!(families, expected);
    assert!(own.starts_with("# HELP relay_metrics_build_info "), "{own}");
    assert!(own.contains("\nprocess_cpu_seconds_total "), "{own}");
}

/// A compressed body asked for is compressed ahead for the next publication, on the sampling
/// thread: a request then gets that one, and compressing ahead is not a request.
#[test]
fn a_compressed_body_asked_for_is_compressed_ahead_for_the_next_snapshot() {
    let config = crate::ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "global", "extensions": {"kernel_events": false}}"#,
    )
    .unwrap();
    let mut collector = crate::Collector::new(config).unwrap();
    let text = relay_metrics_text();
    let first = Publication::of_snapshot(collector.collect(), Arc::clone(&text));
    assert!(first.gzip(Format::OpenMetrics).is_some());
    let asked = text.take_asked();
    assert!(asked.text(), "the compressed text is the text");
    assert_eq!(
        asked.compressed().collect::<Vec<_>>(),
        [Format::OpenMetrics]
    );
    let next = Publication::of_snapshot(collector.collect(), Arc::clone(&text));
    next.prepare(asked);
    let ahead = next
        .derived_gzip(Format::OpenMetrics)
        .expect("compressed ahead");
    let asked = text.take_asked();
    assert!(
        !asked.text() && asked.compressed().count() == 0,
        "preparing counted as asked"
    );
    let served = next.gzip(Format::OpenMetrics).unwrap();
    assert_eq!(
        served.bytes.as_ptr(),
        ahead.bytes.as_ptr(),
        "compressed again"
    );
    assert!(next.derived_gzip(Format::Prometheus).is_none());
    // Its body decodes to the next publication's text.
    let mut body = served.bytes.to_vec();
    body.extend_from_slice(&served.finish(b"# EOF\n").unwrap());
    let mut decoded = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut decoded)
        .unwrap();
    let expected = to_openmetrics(&next.prometheus());
    assert_eq!(decoded.as_bytes(), [&expected[..], b"# EOF\n"].concat());
    assert_eq!(text.take_asked().compressed().count(), 1);
    // The JSON's gzip (one segment, compressed whole) is left to its requests.
    let json = Publication::of_snapshot(collector.collect(), Arc::clone(&text));
    assert!(json.gzip(Format::Json).is_some());
    assert_eq!(text.take_asked().compressed().count(), 0);
}

/// Snapshots published one after another share what was compressed last: each compressed body,
/// in both text formats, still decodes to its own publication's text.
#[test]
fn compressed_bodies_of_successive_snapshots_decode_to_their_own_text() {
    let config = crate::ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "global", "extensions": {"kernel_events": false}}"#,
    )
    .unwrap();
    let mut collector = crate::Collector::new(config).unwrap();
    let text = relay_metrics_text();
    let app = app(Duration::from_secs(1));
    let openmetrics = "application/openmetrics-text; version=1.0.0";
    for _ in 0..3 {
        app.latest.set(Publication::of_snapshot(
            collector.collect(),
            Arc::clone(&text),
        ));
        for accept in ["text/plain", openmetrics] {
            let get = |headers: &[_]| {
                let response = app.respond(&request(Method::GET, "/metrics", headers));
                collect(response.into_body())
            };
            let plain = String::from_utf8(get(&[(ACCEPT, accept)])).unwrap();
            let compressed = get(&[(ACCEPT, accept), (ACCEPT_ENCODING, "gzip")]);
            let mut decoded = String::new();
            flate2::read::GzDecoder::new(&compressed[..])
                .read_to_string(&mut decoded)
                .unwrap();
            // Equal up to the sample's age, which each request writes as of its own time.
            let before_age = |text: &str| {
                text.split("relay_metrics_sample_age")
                    .next()
                    .unwrap()
                    .to_owned()
            };
            assert!(plain.lines().count() > 50, "{plain}");
            assert_eq!(before_age(&decoded), before_age(&plain));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
