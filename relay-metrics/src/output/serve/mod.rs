//! The agent: a sampling thread publishes each snapshot (when exporting, it also makes the OTLP
//! request), its Prometheus text and JSON written into shared `Bytes` on the first request for
//! each, an HTTP/1.1 server on hyper
//! answers every request from the latest publication without copying it, and the OTLP exporter
//! (`super::otlp`) pushes each snapshot to a collector.
//!
//! Routes: `GET`/`HEAD` `/` (a landing page with links), `/metrics` (Prometheus text 0.0.4, or
//! OpenMetrics 1.0 when `Accept` asks for it; gzip when `Accept-Encoding` allows; the
//! snapshot's families, then the build info and the agent's own process series), `/snapshot`
//! (the snapshot's JSON) and `/healthz` (503 with the reason when the latest snapshot is older
//! than three periods).
//! Connections are kept alive; see [`Limits`] for how slow, idle and non-reading clients are
//! kept from starving the others.

mod agent;
mod body;
mod conn;
mod encode;
mod gzip;
mod health;
mod http;
mod logging;
mod own;
#[cfg(test)]
mod tests;
mod web;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::otlp::OtlpPublisher;
use crate::snapshot::ResourceMetricsSnapshot;
use crate::Collector;

pub use agent::{run, AgentError, AgentOptions};

pub use conn::Limits;
pub(crate) use encode::TextSettings;
pub use logging::{init_logging, LogFormat};
pub use web::{WebConfig, WebConfigError};

/// One snapshot, each of its outputs encoded once, on the first request for it: most agents are
/// scraped less often than they sample (every 15 s for a snapshot a second), and a node's
/// snapshot with hundreds of cgroups is megabytes of text a period that nobody reads otherwise.
/// The sampling thread encodes ahead what the last one was asked for
/// ([`TextSettings::take_asked`]).
#[derive(Debug)]
pub(crate) struct Publication {
    source: encode::Source,
    /// The `scope` label of every series.
    pub scope: &'static str,
    /// When the sampling thread received the snapshot.
    pub taken: Instant,
    /// The encodings made so far.
    derived: encode::Derived,
}

impl Publication {
    /// A publication of already encoded outputs.
    #[cfg(test)]
    pub(crate) fn new(json: bytes::Bytes, prometheus: bytes::Bytes, scope: &'static str) -> Self {
        Self {
            source: encode::Source::Ready { json, prometheus },
            scope,
            taken: Instant::now(),
            derived: encode::Derived::default(),
        }
    }

    /// A publication of `snapshot`, its Prometheus text written as `text` says.
    pub(crate) fn of_snapshot(
        snapshot: Arc<ResourceMetricsSnapshot>,
        text: Arc<TextSettings>,
    ) -> Self {
        Self {
            scope: snapshot.measurement_scope.as_str(),
            source: encode::Source::Snapshot { snapshot, text },
            taken: Instant::now(),
            derived: encode::Derived::default(),
        }
    }
}

/// The latest publication, shared between the sampling thread and the request handlers.
#[derive(Debug, Clone)]
pub(crate) struct Latest {
    slot: Arc<watch::Sender<Option<Arc<Publication>>>>,
}

impl Default for Latest {
    fn default() -> Self {
        Self {
            slot: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl Latest {
    /// The latest publication (the lock is held only to clone an `Arc`).
    pub(crate) fn get(&self) -> Option<Arc<Publication>> {
        self.slot.borrow().clone()
    }

    /// Replaces the latest publication and wakes whoever waits for a new one.
    pub(crate) fn set(&self, publication: Publication) {
        self.slot.send_replace(Some(Arc::new(publication)));
    }
}

/// How the sampling thread ended: it never ends on its own, so either way the agent must stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SamplerDied(pub String);

/// Tells the sampling thread to stop: it then drops its collector at once, so that the kernel
/// detaches the eBPF programs (~1 s of RCU synchronisation on close) while the agent finishes
/// its requests and last export, not after, when the process exits.
pub(crate) type SamplerStop = crate::sampler::StopSignal;

/// Samples with `collector` every `period` (fixed rate: deadlines `start + n × period`, late
/// ticks skipped and counted) on a thread of its own, publishing into `latest` (and to the OTLP
/// exporter when given), with the series `budget` keeps, until `stop` is requested. The receiver gets why the thread ended (a
/// stop, or a panic with its message).
pub(crate) fn spawn_sampler(
    mut collector: Collector,
    period: Duration,
    budget: crate::output::budget::SeriesBudget,
    latest: Latest,
    otlp: Option<OtlpPublisher>,
    stop: SamplerStop,
) -> io::Result<tokio::sync::oneshot::Receiver<SamplerDied>> {
    spawn_sampling(move || {
        let text = Arc::new(TextSettings::new(
            collector.config().extensions.metric_names,
            budget,
        ));
        let mut ticker = crate::sampler::FixedRate::new(Instant::now(), period);
        let slack = u64::try_from(ticker.timer_slack().as_nanos()).unwrap_or(50_000);
        // Best effort, as in `FixedRate::wait`: a refusal only costs precision.
        let _ = nix::sys::prctl::set_timerslack(slack);
        while let Some(sampler) = ticker.next_unless(|deadline| !stop.wait_until(deadline)) {
            let snapshot = collector.collect_with_sampler(sampler);
            if let Some(otlp) = &otlp {
                otlp.publish(&snapshot);
            }
            let publication = Publication::of_snapshot(snapshot, Arc::clone(&text));
            publication.prepare(text.take_asked());
            latest.set(publication);
        }
        // Detaches the eBPF programs now (see `SamplerStop`).
        drop(collector);
    })
}

/// Runs `sample` on the sampling thread; the receiver learns how it ended.
fn spawn_sampling(
    sample: impl FnOnce() + Send + 'static,
) -> io::Result<tokio::sync::oneshot::Receiver<SamplerDied>> {
    let (died, death) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("relay-metrics-sampler".into())
        .spawn(move || {
            let reason = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(sample)) {
                Ok(()) => "the sampling loop ended".to_string(),
                Err(payload) => {
                    let message = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_string())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic without a message".to_string());
                    format!("the sampling thread panicked: {message}")
                }
            };
            let _ = died.send(SamplerDied(reason));
        })?;
    Ok(death)
}

/// Binds `address` (port 0 picks a free port) and returns the listener and its address.
pub(crate) async fn bind(address: &str) -> io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(address).await?;
    let local = listener.local_addr()?;
    Ok((listener, local))
}
