//! The export loop: the sampling thread publishes each snapshot's encoded request; one task
//! sends the newest. A retryable failure is tried again after a backoff (or the collector's
//! `Retry-After`), but only the newest snapshot is ever pending: a snapshot published meanwhile
//! replaces the one being retried, so a slow collector never builds a queue.

use std::future::Future;
use std::io::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use flate2::write::GzEncoder;
use prost::Message as _;
use tokio::sync::watch;
use tokio::time::Instant;

use super::encode::{self, OtlpResource};
use super::settings::{Compression, OtlpSettings, Protocol};
use super::transport::{tls_config, Failure, Payload, Retry, Transport, TransportError};
use crate::config::MetricNames;
use crate::output::lock;
use crate::output::reload::Reloaded;
use crate::snapshot::ResourceMetricsSnapshot;

/// First retry delay; doubled per consecutive failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// How often a retry waiting for its backoff looks for renewed TLS files (the watcher looks at
/// them every second).
const RENEWAL_CHECK: Duration = Duration::from_secs(1);
/// Longest backoff between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Longest `Retry-After` honoured (a longer one is cut to this).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// The number of failed export requests since the agent started (every failed attempt counts,
/// retries included).
#[derive(Debug, Clone, Default)]
pub struct ExportFailures(Arc<AtomicU64>);

impl ExportFailures {
    /// The count so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    fn add_one(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// Encodes snapshots for the exporter: owned by the sampling thread.
pub struct OtlpPublisher {
    resource: OtlpResource,
    names: MetricNames,
    budget: crate::output::budget::SeriesBudget,
    /// Per series, when it started counting (the sampling thread is the only caller).
    starts: std::sync::Mutex<super::starts::StartTimes>,
    protocol: Protocol,
    compression: Compression,
    sender: watch::Sender<Option<Arc<Payload>>>,
    failures: ExportFailures,
}

impl std::fmt::Debug for OtlpPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpPublisher")
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl OtlpPublisher {
    /// Encodes `snapshot` once (and compresses it, over HTTP) and hands it to the exporter,
    /// replacing any snapshot it has not sent yet.
    pub fn publish(&self, snapshot: &ResourceMetricsSnapshot) {
        let mut starts = lock(&self.starts);
        let request = encode::request_within(
            snapshot,
            &self.resource,
            self.names,
            &self.budget,
            Some(&mut starts),
        );
        drop(starts);
        let payload = match self.protocol {
            Protocol::Grpc => Payload::Grpc(request),
            Protocol::HttpProtobuf => Payload::Http(self.compress(request.encode_to_vec())),
            Protocol::HttpJson => {
                // Strings, finite numbers and opentelemetry-proto's own serializers: writing
                // into a Vec cannot fail.
                let body = serde_json::to_vec(&request).unwrap_or_default();
                Payload::Http(self.compress(body))
            }
        };
        self.sender.send_replace(Some(Arc::new(payload)));
    }

    fn compress(&self, body: Vec<u8>) -> Bytes {
        if self.compression == Compression::None {
            return Bytes::from(body);
        }
        let mut encoder = GzEncoder::new(
            Vec::with_capacity(body.len() / 4),
            flate2::Compression::fast(),
        );
        // Writing into a Vec cannot fail.
        let _ = encoder.write_all(&body);
        Bytes::from(encoder.finish().unwrap_or_default())
    }

    /// The exporter's failure count.
    pub fn failures(&self) -> ExportFailures {
        self.failures.clone()
    }
}

/// Sends what the [`OtlpPublisher`] publishes: run it with [`OtlpExporter::run`] on tokio.
pub struct OtlpExporter {
    transport: Transport,
    /// The configured CA and client certificate, when there are any: the transport is made
    /// again when they are renewed.
    tls: Option<WatchedTls>,
    receiver: watch::Receiver<Option<Arc<Payload>>>,
    failures: ExportFailures,
    endpoint: String,
}

/// The client TLS config made from the configured files, and the one the transport was made
/// with.
struct WatchedTls {
    files: Arc<Reloaded<rustls::ClientConfig>>,
    in_use: Arc<rustls::ClientConfig>,
    settings: OtlpSettings,
}

/// Builds the publisher (for the sampling thread) and the exporter (a tokio task) of
/// `settings`; cumulative sums start at `start`. Certificates and keys are loaded here, so a
/// bad file is an error at start; they are read again when they change. Must be called within
/// a tokio runtime (gRPC's channel).
pub fn start(
    settings: &OtlpSettings,
    start: SystemTime,
) -> Result<(OtlpPublisher, OtlpExporter), TransportError> {
    // Read here first so that a bad file is refused with its typed reason.
    let first = tls_config(settings)?;
    let files = settings.tls_files();
    let tls = if files.is_empty() {
        None
    } else {
        let made_from = settings.clone();
        let files = Reloaded::watch("the OTLP client's TLS files", files, move || {
            tls_config(&made_from).map_err(|e| e.to_string())
        })
        .map_err(TransportError::Pem)?;
        Some(WatchedTls {
            in_use: files.current(),
            files,
            settings: settings.clone(),
        })
    };
    // The watcher's own read, where there is one: its stamps and the transport then agree.
    let in_use = tls.as_ref().map_or(first, |tls| (*tls.in_use).clone());
    let transport = Transport::new(settings, in_use)?;
    let (sender, receiver) = watch::channel(None);
    let failures = ExportFailures::default();
    Ok((
        OtlpPublisher {
            resource: OtlpResource::new(start, &settings.resource_attributes),
            names: settings.metric_names,
            budget: settings.budget.clone(),
            starts: std::sync::Mutex::default(),
            protocol: settings.protocol,
            compression: settings.compression,
            sender,
            failures: failures.clone(),
        },
        OtlpExporter {
            transport,
            tls,
            receiver,
            failures,
            endpoint: settings.endpoint.to_string(),
        },
    ))
}

impl OtlpExporter {
    /// The exporter's failure count.
    pub fn failures(&self) -> ExportFailures {
        self.failures.clone()
    }

    /// Exports each newly published snapshot until `stop` completes or the publisher is
    /// dropped; then the newest snapshot not yet exported gets one last attempt (bounded by
    /// the export timeout). The first failure and the recovery after failures are logged once
    /// each, not per attempt.
    pub async fn run(mut self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let mut pending: Option<Arc<Payload>> = None;
        let mut not_before = Instant::now();
        let mut consecutive_failures = 0u32;
        let mut logged_failure = false;
        let mut renewal_check = Instant::now() + RENEWAL_CHECK;
        // Whether the pending retry waits for the collector's Retry-After.
        let mut told_to_wait = false;
        loop {
            let wait_until = pending.is_some().then_some(not_before);
            // A deadline kept across the loop's turns: snapshots more often than the check
            // would otherwise restart its wait each time.
            let check_renewal = (pending.is_some() && self.tls.is_some()).then_some(renewal_check);
            tokio::select! {
                changed = self.receiver.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    // Newer replaces older, also one being retried.
                    pending = self.receiver.borrow_and_update().clone();
                    continue;
                }
                () = &mut stop => break,
                () = sleep_until(wait_until) => {}
                () = sleep_until(check_renewal) => {
                    renewal_check = Instant::now() + RENEWAL_CHECK;
                    // Renewed certificates may be what the failures were about (an expired
                    // one, a rotated CA): tried at once, unless the collector asked for the
                    // wait. The failure count stands, so files renewed again and again do not
                    // keep a failing collector from backing off.
                    if told_to_wait || !self.tls_renewed() {
                        continue;
                    }
                }
            }
            let Some(payload) = pending.take() else {
                continue;
            };
            self.renew_transport();
            match self.transport.send(&payload).await {
                Ok(()) => {
                    consecutive_failures = 0;
                    if logged_failure {
                        logged_failure = false;
                        tracing::info!(endpoint = %self.endpoint, "OTLP export works again");
                    }
                }
                Err(failure) => {
                    self.failures.add_one();
                    consecutive_failures = consecutive_failures.saturating_add(1);
                    if !logged_failure {
                        logged_failure = true;
                        tracing::warn!(
                            endpoint = %self.endpoint,
                            reason = %failure.reason,
                            "OTLP export failed (reported once until it works again)"
                        );
                    }
                    if let Some(delay) = retry_delay(&failure, consecutive_failures) {
                        not_before = Instant::now() + delay;
                        told_to_wait = matches!(failure.retry, Retry::After(_));
                        pending = Some(payload);
                    }
                }
            }
        }
        self.flush(pending).await;
    }

    /// Whether the TLS files were renewed since the transport was made.
    fn tls_renewed(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|tls| !Arc::ptr_eq(&tls.files.current(), &tls.in_use))
    }

    /// Makes the transport again with the TLS config of renewed files (its connections then
    /// present and check the new certificates); keeps the last one where that fails.
    fn renew_transport(&mut self) {
        let Some(tls) = &mut self.tls else {
            return;
        };
        let now = tls.files.current();
        if Arc::ptr_eq(&now, &tls.in_use) {
            return;
        }
        match Transport::new(&tls.settings, (*now).clone()) {
            Ok(transport) => self.transport = transport,
            Err(error) => tracing::warn!(%error, "the renewed OTLP TLS files cannot be used"),
        }
        tls.in_use = now;
    }

    /// The last attempt at shutdown: the newest snapshot if it was not exported.
    async fn flush(&mut self, pending: Option<Arc<Payload>>) {
        let newest = match self.receiver.has_changed() {
            Ok(true) => self.receiver.borrow_and_update().clone(),
            _ => pending,
        };
        if let Some(payload) = newest {
            self.renew_transport();
            if let Err(failure) = self.transport.send(&payload).await {
                self.failures.add_one();
                tracing::warn!(
                    endpoint = %self.endpoint,
                    reason = %failure.reason,
                    "the last OTLP export at shutdown failed"
                );
            }
        }
    }
}

/// When to try again after the `attempt`-th consecutive failure; `None`: not retryable.
fn retry_delay(failure: &Failure, attempt: u32) -> Option<Duration> {
    let backoff = FIRST_BACKOFF
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    match failure.retry {
        Retry::No => None,
        Retry::Backoff => Some(jitter(backoff)),
        // The collector's word, but never sooner than our own backoff.
        Retry::After(delay) => Some(delay.min(MAX_RETRY_AFTER).max(backoff)),
    }
}

/// `delay` minus up to a fifth, so agents restarted together do not retry in step.
fn jitter(delay: Duration) -> Duration {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let fifth = delay / 5;
    delay - fifth.mul_f64(f64::from(nanos % 1000) / 1000.0)
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(retry: Retry) -> Failure {
        Failure {
            reason: String::new(),
            retry,
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap_and_retry_after_is_honoured_within_bounds() {
        let backoff = |attempt| retry_delay(&failure(Retry::Backoff), attempt).unwrap();
        for (attempt, full) in [(1, 500), (2, 1000), (3, 2000), (7, 30_000), (40, 30_000)] {
            let full = Duration::from_millis(full);
            let delay = backoff(attempt);
            assert!(
                delay <= full && delay >= full - full / 5,
                "{attempt}: {delay:?}"
            );
        }
        let after = |seconds, attempt| {
            retry_delay(
                &failure(Retry::After(Duration::from_secs(seconds))),
                attempt,
            )
            .unwrap()
        };
        assert_eq!(after(3, 1), Duration::from_secs(3));
        assert_eq!(after(0, 2), Duration::from_secs(1));
        assert_eq!(after(86_400, 1), MAX_RETRY_AFTER);
        assert_eq!(retry_delay(&failure(Retry::No), 1), None);
    }
}
