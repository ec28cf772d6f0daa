//! The agent's HTTP behaviour on the wire: keep-alive, HEAD, 405 with `Allow`, gzip and
//! OpenMetrics negotiation (checked with curl and Python's gzip, tools nobody here wrote),
//! malformed requests, the per-request series, and the lifecycle: SIGTERM finishes what is in
//! flight and exits 0.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{exchange, get, parse_response, start_agent, wait_ready};

/// Reads one response with a Content-Length body from a kept-alive connection.
fn read_response(stream: &mut TcpStream, head_only: bool) -> common::Response {
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(stream.read(&mut byte).unwrap(), 1, "connection closed");
        raw.push(byte[0]);
    }
    let mut response = parse_response(&raw).unwrap();
    if !head_only {
        let length: usize = response.header("content-length").unwrap().parse().unwrap();
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).unwrap();
        response.body = body;
    }
    response
}

#[test]
fn keep_alive_head_and_method_not_allowed() {
    let agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    let mut stream = TcpStream::connect(&agent.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Three requests on one connection, the second with bare LF line ends.
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let first = read_response(&mut stream, false);
    assert_eq!(first.status, 200);
    let length: usize = first.header("content-length").unwrap().parse().unwrap();
    assert!(length > 1000);
    stream
        .write_all(b"HEAD /metrics HTTP/1.1\nHost: x\n\n")
        .unwrap();
    let head = read_response(&mut stream, true);
    assert_eq!(head.status, 200);
    // The same length a GET would get (± the sample age's digits), and no body follows: the
    // next response starts right after the head.
    let head_length: usize = head.header("content-length").unwrap().parse().unwrap();
    assert!(
        head_length.abs_diff(length) < 16,
        "{head_length} vs {length}"
    );
    stream
        .write_all(b"DELETE /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let delete = read_response(&mut stream, false);
    assert_eq!(delete.status, 405);
    assert_eq!(delete.header("allow"), Some("GET, HEAD"));

    let unknown_version = exchange(
        &agent.address,
        "GET /metrics HTTP/9.9\r\nHost: x\r\n\r\n",
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(
        unknown_version.status == 505 || unknown_version.status == 400,
        "{unknown_version:?}"
    );
}

#[test]
#[ignore = "tools: curl, python3"]
fn gzip_and_openmetrics_as_real_clients_ask_for_them() {
    let agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    let url = format!("http://{}/metrics", agent.address);
    // curl decompresses with zlib; a corrupt stream or trailer fails the command.
    let output = Command::new("curl")
        .args(["-sS", "--fail", "--compressed", "-D", "-", &url])
        .output()
        .expect("curl (installed by scripts/install-deps.sh)");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    assert!(
        text.to_ascii_lowercase()
            .contains("content-encoding: gzip\r\n"),
        "{text}"
    );
    assert!(text.contains("\nrelay_metrics_snapshots_total{scope=\"global\"} "));
    assert!(text.contains("\nrelay_metrics_sample_age_seconds{scope=\"global\"} "));

    // Prometheus's own Accept header.
    let accept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    let response = exchange(
        &agent.address,
        &format!(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: {accept}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n"
        ),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        response.header("content-type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    let mut python = Command::new("python3")
        .args([
            "-c",
            "import gzip, sys; sys.stdout.buffer.write(gzip.decompress(sys.stdin.buffer.read()))",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    python
        .stdin
        .take()
        .unwrap()
        .write_all(&response.body)
        .unwrap();
    let decoded = python.wait_with_output().unwrap();
    assert!(decoded.status.success(), "Python's gzip refused the body");
    let text = String::from_utf8(decoded.stdout).unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("# TYPE relay_metrics_snapshots counter\n"));
}

#[test]
fn export_failures_are_counted_on_metrics() {
    let nobody_listens = common::free_address();
    let agent = start_agent(&[
        "--scope",
        "global",
        "--otlp-endpoint",
        &format!("http://{nobody_listens}"),
    ]);
    wait_ready(&agent.address);
    let failures = |text: &str| -> f64 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix("relay_metrics_otlp_export_failures_total{scope=\"global\"} ")
            })
            .expect("the failures counter")
            .parse()
            .unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while failures(&get(&agent.address, "/metrics").text()) < 2.0 {
        assert!(
            Instant::now() < deadline,
            "refused exports were not counted"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn sigterm_finishes_the_response_in_flight_and_exits_0() {
    let mut agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    let size = get(&agent.address, "/snapshot").body.len();
    // A response in flight: requested, not read yet.
    let mut stream = TcpStream::connect(&agent.address).unwrap();
    stream
        .write_all(b"GET /snapshot HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(agent.child.0.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let response = parse_response(&raw).unwrap();
    assert_eq!(response.status, 200);
    assert!(response.body.len().abs_diff(size) < 100);
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("the agent exits within the shutdown grace");
    assert_eq!(status.code(), Some(0));
    assert!(TcpStream::connect(&agent.address).is_err());
}

/// A connection whose request head is not complete holds no stop: SIGTERM ends the agent at
/// once (it waited the whole 5 s shutdown grace for the rest of the head).
#[test]
fn a_partial_request_head_does_not_delay_the_stop() {
    let mut agent = start_agent(&["--scope", "global"]);
    wait_ready(&agent.address);
    let mut stream = TcpStream::connect(&agent.address).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(agent.child.0.id()).unwrap());
    let started = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = agent
        .wait_exit(Duration::from_secs(10))
        .expect("the agent exits");
    let took = started.elapsed();
    eprintln!("SIGTERM to exit with a partial request head: {took:?}");
    assert_eq!(status.code(), Some(0));
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(stream);
}

#[test]
fn sigterm_with_a_hung_otlp_collector_exits_within_the_five_second_grace() {
    // A collector that accepts and never answers: the last export can only time out.
    let collector = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", collector.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in collector.incoming().map_while(Result::ok) {
            held.push(stream);
        }
    });
    // Global scope with the kernel event counters where they load (as root): their detaching
    // costs about a second in the kernel, which must fall within the grace, not after it.
    let mut agent = start_agent(&["--scope", "global", "--otlp-endpoint", &endpoint]);
    agent.expect_line("exporting OTLP");
    wait_ready(&agent.address);
    std::thread::sleep(Duration::from_millis(500));
    let pid = nix::unistd::Pid::from_raw(i32::try_from(agent.child.0.id()).unwrap());
    let signalled = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = agent
        .wait_exit(Duration::from_secs(15))
        .expect("the agent exits");
    let took = signalled.elapsed();
    eprintln!("SIGTERM to exit with a hung OTLP collector: {took:?}");
    assert_eq!(status.code(), Some(0));
    agent.expect_line("the last OTLP export did not finish within the shutdown grace");
    assert!(
        took < Duration::from_millis(5500),
        "exited {took:?} after SIGTERM (documented: within 5 s)"
    );
}
