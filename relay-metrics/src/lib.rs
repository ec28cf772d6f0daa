//! relay-metrics: typed resource-metrics snapshots of a process, a process tree, a cgroup or the
//! whole Linux system, wire-compatible with NeMo Relay's `resource_metrics` module.
//!
//! Data flows one way: [`source`] reads kernel files into a [`model::Sample`], [`model`] derives
//! sums, rates and units into a [`snapshot::ResourceMetricsSnapshot`], and the collector hands it
//! out as an `Arc` so every consumer shares one copy.

pub mod collector;
pub mod config;
pub mod model;
pub mod output;
pub mod sampler;
pub mod snapshot;
pub mod source;
pub mod units;

/// Crate-private entry points re-exported for the fuzz targets in `fuzz/` and other in-repository
/// tools; not a supported API.
#[doc(hidden)]
pub mod internals;

pub use collector::{AsyncCollector, Collector, CollectorError};
pub use config::ResourceMetricsConfig;
pub use snapshot::ResourceMetricsSnapshot;

/// Scope-level tests that need a pure cgroup v2 kernel: run by `cargo xtask vm-test`.
#[cfg(test)]
mod vm_tests;
