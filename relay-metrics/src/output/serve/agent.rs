//! The agent's lifecycle: start the sampler, the HTTP server and the exporter; end with an
//! error when the sampler dies (so a supervisor restarts the agent); on SIGTERM or SIGINT stop
//! accepting, finish the requests in flight and a last export within the shutdown grace, and
//! return normally.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{oneshot, watch};

use super::conn::{self, Limits};
use super::health::Liveness;
use super::http::App;
use super::{bind, spawn_sampler, Latest, SamplerDied, SamplerStop};
use crate::output::otlp::{self, OtlpPublisher, OtlpSettings, TransportError};
use crate::source::allocator;
use crate::Collector;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// Address to listen on (`host:port`; port 0 picks a free port).
    pub listen: String,
    /// The sampling period.
    pub period: Duration,
    /// Where and how to push each snapshot, if anywhere.
    pub otlp: Option<OtlpSettings>,
    /// The HTTP server's limits.
    pub limits: Limits,
    /// TLS and basic auth (`--web-config-file`), if any.
    pub web: Option<super::WebConfig>,
    /// Which series `/metrics` serves (`--metrics`, …).
    pub budget: crate::output::budget::SeriesBudget,
}

/// Why the agent stopped other than by a signal.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {address}: {source}")]
    Listen {
        /// The address asked for.
        address: String,
        /// The bind error.
        source: io::Error,
    },
    /// The OTLP exporter could not be set up (a certificate or key file).
    #[error("cannot set up the OTLP export: {0}")]
    Otlp(TransportError),
    /// The sampling thread could not be started.
    #[error("cannot start the sampling thread: {0}")]
    StartSampler(io::Error),
    /// The signal handlers could not be installed.
    #[error("cannot install the signal handlers: {0}")]
    Signals(io::Error),
    /// The sampling thread ended (it never does on its own): the agent would only serve an
    /// ever older snapshot.
    #[error("{0}")]
    SamplerDied(String),
}

/// Runs the agent with `collector` until SIGTERM or SIGINT (`Ok`) or until the sampler dies.
/// The process's threads share one malloc arena from here on, unless `MALLOC_ARENA_MAX` is set.
pub async fn run(collector: Collector, options: AgentOptions) -> Result<(), AgentError> {
    // Before the sampling thread and the connections' tasks allocate.
    crate::source::allocator::one_arena();
    let period = options.period;
    let budget = options.budget.clone();
    run_with(options, move |latest, resource, stop| {
        spawn_sampler(collector, period, budget, latest, resource, stop)
    })
    .await
}

/// [`run`] with the sampling thread started by `spawn`.
pub(super) async fn run_with(
    options: AgentOptions,
    spawn: impl FnOnce(
        Latest,
        Option<OtlpPublisher>,
        SamplerStop,
    ) -> io::Result<oneshot::Receiver<SamplerDied>>,
) -> Result<(), AgentError> {
    let (listener, address) = bind(&options.listen)
        .await
        .map_err(|source| AgentError::Listen {
            address: options.listen.clone(),
            source,
        })?;
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt())?;
    let latest = Latest::default();
    let otlp = match &options.otlp {
        Some(settings) => Some(
            otlp::start(settings, SystemTime::now())
                .map(|started| (started, settings.endpoint.to_string()))
                .map_err(AgentError::Otlp)?,
        ),
        None => None,
    };
    let (publisher, exporter) = match otlp {
        Some(((publisher, exporter), endpoint)) => (Some(publisher), Some((exporter, endpoint))),
        None => (None, None),
    };
    let sampler_stop = SamplerStop::default();
    let mut died =
        spawn(latest.clone(), publisher, sampler_stop.clone()).map_err(AgentError::StartSampler)?;
    let (stop, stopped) = watch::channel(false);
    let (tls, auth) = match options.web {
        Some(web) => (web.tls, web.auth),
        None => (None, None),
    };
    if let Some(auth) = &auth {
        tracing::info!(
            at_once = auth.pool_size(),
            "basic auth: unknown credentials are verified on a pool of bcrypt threads"
        );
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!("serving {scheme}://{address}/metrics");
    let failures = exporter.as_ref().map(|(exporter, _)| exporter.failures());
    let exporter = exporter.map(|(exporter, endpoint)| {
        tracing::info!(%endpoint, "exporting OTLP");
        let mut stop = stopped.clone();
        tokio::spawn(exporter.run(async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }))
    });
    let app = Arc::new(App {
        liveness: Liveness {
            period: options.period,
            started: Instant::now(),
            export: failures,
        },
        latest,
        auth,
    });
    tokio::spawn(give_back_free_memory(stopped.clone()));
    let mut server = tokio::spawn(conn::serve(listener, app, options.limits, tls, stopped));
    tokio::select! {
        death = &mut died => {
            let SamplerDied(reason) = death.unwrap_or_else(|_| SamplerDied("the sampling thread vanished".into()));
            tracing::error!("{reason}: exiting");
            return Err(AgentError::SamplerDied(reason));
        }
        _ = terminate.recv() => tracing::info!("SIGTERM: stopping"),
        _ = interrupt.recv() => tracing::info!("SIGINT: stopping"),
        _ = &mut server => {}
    }
    // The sampler stops first: its collector's eBPF programs are detached (about a second in
    // the kernel) while the requests and the last export finish, within the same grace.
    sampler_stop.request();
    let _ = stop.send(true);
    let deadline = tokio::time::Instant::now() + options.limits.shutdown_grace;
    let _ = tokio::time::timeout_at(deadline, &mut server).await;
    if let Some(exporter) = exporter {
        if tokio::time::timeout_at(deadline, exporter).await.is_err() {
            tracing::warn!("the last OTLP export did not finish within the shutdown grace");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// How often the allocator's free memory is looked at.
const FREE_MEMORY_CHECK: Duration = Duration::from_secs(2);
/// Free memory the allocator may keep before it is given back to the kernel: a few scrapes'
/// worth (one `/metrics` body is tens of KB).
const FREE_MEMORY_KEPT: u64 = 4 * 1024 * 1024;

/// Gives the allocator's free memory back to the kernel after a flood of connections or
/// requests (`source::allocator`): checked every 2 s, trimmed once 4 MiB more is free than
/// after the last trim. (Trimmed pages still count as free to the allocator, hence the
/// baseline.) A check costs microseconds; a trim a few milliseconds, and only after a flood.
async fn give_back_free_memory(mut stopped: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(FREE_MEMORY_CHECK);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let Some(mut baseline) = allocator::free_bytes() else {
        return;
    };
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = stopped.wait_for(|stopped| *stopped) => return,
        }
        let Some(free) = allocator::free_bytes() else {
            return;
        };
        if free > baseline + FREE_MEMORY_KEPT {
            allocator::give_back();
            baseline = allocator::free_bytes().unwrap_or(free);
        } else {
            baseline = baseline.min(free);
        }
    }
}

fn signal(
    kind: tokio::signal::unix::SignalKind,
) -> Result<tokio::signal::unix::Signal, AgentError> {
    tokio::signal::unix::signal(kind).map_err(AgentError::Signals)
}
