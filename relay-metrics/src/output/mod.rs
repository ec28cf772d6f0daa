//! Outputs: encodings of a published snapshot (JSON, Prometheus text, OTLP), the agent's HTTP endpoint that
//! serves them, and NeMo Relay's metric-mark names.
//!
//! `otlp` and `serve` are the agent's: they need the `agent` feature.

pub mod budget;
mod gpu_metrics;
pub mod json;
pub(crate) mod metrics;
#[cfg(feature = "agent")]
pub(crate) mod pem;
pub(crate) mod target_metrics;
// The OTLP and Prometheus modules' docs name the metric families they share (`metrics`), which
// are not public API.
#[allow(
    rustdoc::private_intra_doc_links,
    reason = "links to the crate-private metric families"
)]
#[cfg(feature = "agent")]
pub mod otlp;
#[allow(
    rustdoc::private_intra_doc_links,
    reason = "links to the crate-private metric families"
)]
pub mod prometheus;
pub mod relay_names;
#[cfg(feature = "agent")]
pub(crate) mod reload;
#[cfg(feature = "agent")]
pub mod serve;

/// Locks `mutex`, also after a thread panicked holding it: the agent goes on with the value as
/// that thread left it instead of panicking in turn.
#[cfg(feature = "agent")]
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
