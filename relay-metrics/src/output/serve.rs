//! The agent's HTTP endpoint: a sampling thread publishes each snapshot once (JSON and
//! Prometheus text, encoded once into shared `Bytes`; when exporting, the OTLP request too), and
//! every request is answered from the latest publication without copying it.
//!
//! Routes: `GET /metrics` (Prometheus text exposition), `GET /snapshot` (the snapshot's JSON),
//! `GET /healthz`. Each response closes its connection.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use super::otlp::OtlpPublisher;
use super::prometheus;
use crate::Collector;

/// One snapshot, encoded once for every output.
#[derive(Debug, Clone)]
pub struct Publication {
    /// The snapshot as JSON.
    pub json: Bytes,
    /// The snapshot in Prometheus text format.
    pub prometheus: Bytes,
    /// The collector's snapshot sequence number.
    pub sequence: u64,
}

/// The latest publication, shared between the sampling thread and the request handlers.
#[derive(Debug, Clone, Default)]
pub struct Latest {
    slot: Arc<Mutex<Option<Arc<Publication>>>>,
}

impl Latest {
    /// The latest publication (the lock is held only to clone an `Arc`).
    pub fn get(&self) -> Option<Arc<Publication>> {
        self.slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, publication: Publication) {
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(publication));
    }
}

/// Samples with `collector` every `period` on a thread of its own, publishing into `latest`
/// (and to the OTLP exporter when given).
pub fn spawn_sampler(
    mut collector: Collector,
    period: Duration,
    latest: Latest,
    otlp: Option<OtlpPublisher>,
) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("relay-metrics-sampler".into())
        .spawn(move || {
            let names = collector.config().extensions.metric_names;
            let mut text = String::with_capacity(16 * 1024);
            let mut json_len = 16 * 1024;
            for snapshot in collector.every(period) {
                // A fresh buffer per tick: `Bytes` takes it over and clients may still hold it.
                let mut json = Vec::with_capacity(json_len);
                snapshot.write_json(&mut json);
                json_len = json.len() + 1024;
                prometheus::encode(&snapshot, names, &mut text);
                if let Some(otlp) = &otlp {
                    otlp.publish(&snapshot);
                }
                latest.set(Publication {
                    json: Bytes::from(json),
                    prometheus: Bytes::copy_from_slice(text.as_bytes()),
                    sequence: snapshot.extensions.collector.sequence,
                });
            }
        })
}

/// One line on stderr. An agent whose stderr was closed keeps running: the line is dropped
/// (`eprintln!` would panic on the broken pipe).
pub fn log(message: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "relay-metrics: {message}");
}

/// Serves `latest` on `listener` until an accept error (never returns otherwise).
///
/// At most [`MAX_CONNECTIONS`] requests are handled at once (more wait in the listen backlog),
/// and a failed `accept` (out of descriptors, a connection reset before it was taken) is
/// reported once and retried after a pause: the agent outlives a burst of clients.
pub async fn serve(listener: TcpListener, latest: Latest) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut failing = false;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            return Ok(());
        };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(error) => {
                if !failing {
                    log(format_args!("cannot accept a connection: {error}"));
                }
                failing = true;
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        failing = false;
        let latest = latest.clone();
        tokio::spawn(async move {
            // A client that goes away mid-request is its own problem, not the server's.
            let _ = respond(stream, &latest).await;
            drop(slot);
        });
    }
}

/// Binds `address` (port 0 picks a free port) and returns the listener and its address.
pub async fn bind(address: &str) -> io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}

/// Largest request head we read; anything longer is answered 431.
const MAX_HEAD_BYTES: usize = 8 * 1024;
/// Time a client has to send its whole request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Requests handled at once (each holds a descriptor).
pub const MAX_CONNECTIONS: usize = 64;
/// Pause before accepting again after `accept` failed.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

async fn respond(mut stream: TcpStream, latest: &Latest) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    // One deadline for the whole head: a client trickling a byte at a time holds its slot
    // no longer than a silent one.
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let complete = loop {
        let read = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "request head timed out"))??;
        if read == 0 {
            return Ok(());
        }
        head.extend_from_slice(&chunk[..read]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        if head.len() > MAX_HEAD_BYTES {
            break false;
        }
    };
    let (status, content_type, body) = if !complete {
        (
            "431 Request Header Fields Too Large",
            "text/plain",
            Bytes::from_static(b"request head too large\n"),
        )
    } else {
        route(&head, latest)
    };
    let header = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(header.as_bytes()).await?;
    stream.write_all(&body).await?;
    stream.shutdown().await
}

fn route(head: &[u8], latest: &Latest) -> (&'static str, &'static str, Bytes) {
    let request_line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let mut parts = request_line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    if method != b"GET" {
        return (
            "405 Method Not Allowed",
            "text/plain",
            Bytes::from_static(b"only GET\n"),
        );
    }
    let publication = latest.get();
    match (path, publication) {
        (b"/healthz", _) => ("200 OK", "text/plain", Bytes::from_static(b"ok\n")),
        (b"/metrics" | b"/snapshot", None) => (
            "503 Service Unavailable",
            "text/plain",
            Bytes::from_static(b"no snapshot yet\n"),
        ),
        (b"/metrics", Some(publication)) => (
            "200 OK",
            prometheus::CONTENT_TYPE,
            publication.prometheus.clone(),
        ),
        (b"/snapshot", Some(publication)) => {
            ("200 OK", "application/json", publication.json.clone())
        }
        _ => (
            "404 Not Found",
            "text/plain",
            Bytes::from_static(b"routes: /metrics /snapshot /healthz\n"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest_with(json: &'static [u8], text: &'static [u8]) -> Latest {
        let latest = Latest::default();
        latest.set(Publication {
            json: Bytes::from_static(json),
            prometheus: Bytes::from_static(text),
            sequence: 1,
        });
        latest
    }

    #[test]
    fn routes_requests_to_the_latest_publication() {
        let empty = Latest::default();
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\n\r\n", &empty).0,
            "503 Service Unavailable"
        );
        let latest = latest_with(b"{}", b"m 1\n");
        let (status, kind, body) = route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &latest);
        assert_eq!(
            (status, kind, &body[..]),
            ("200 OK", prometheus::CONTENT_TYPE, &b"m 1\n"[..])
        );
        assert_eq!(
            &route(b"GET /snapshot?pretty HTTP/1.1\r\n\r\n", &latest).2[..],
            b"{}"
        );
        assert_eq!(route(b"GET /healthz HTTP/1.0\r\n\r\n", &latest).0, "200 OK");
        assert_eq!(
            route(b"GET /other HTTP/1.1\r\n\r\n", &latest).0,
            "404 Not Found"
        );
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n", &latest).0,
            "405 Method Not Allowed"
        );
        assert_eq!(route(b"", &latest).0, "405 Method Not Allowed");
    }

    #[test]
    fn a_publication_is_shared_not_copied() {
        let latest = latest_with(b"{\"a\":1}", b"m 1\n");
        let (_, _, first) = route(b"GET /snapshot HTTP/1.1\r\n\r\n", &latest);
        let (_, _, second) = route(b"GET /snapshot HTTP/1.1\r\n\r\n", &latest);
        assert_eq!(first.as_ptr(), second.as_ptr());
    }
}
