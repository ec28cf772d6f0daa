//! relay-metrics: typed resource-metrics snapshots of a process, a process tree, a cgroup or the
//! whole Linux system, wire-compatible with NeMo Relay's `resource_metrics` module.
//!
//! The API in ten minutes:
//!
//! - [`ResourceMetricsConfig`] ([`config`]): Relay's component configuration, read from JSON or
//!   TOML and validated with Relay's messages.
//! - [`Collector`]: takes snapshots of one target ([`Collector::collect`]), or a fixed-rate series
//!   of them ([`Collector::every`]); [`AsyncCollector`] does the same from async code.
//! - [`ResourceMetricsSnapshot`] ([`snapshot`], with the measurements of [`units`]): the schema,
//!   serde-compatible with Relay's; [`ResourceMetricsSnapshot::write_json`] writes its JSON fast.
//! - [`output`]: the encodings (JSON, Prometheus text; OTLP and the HTTP server with the `agent`
//!   feature) and Relay's metric-mark names.
//! - [`sampler::FixedRate`]: the fixed-rate ticker behind `every`, for loops of your own.
//! - [`init_child_loader`]: call it first thing in `main` to load the eBPF programs in a
//!   short-lived child instead of the long-running process.
//!
//! Cargo features: none by default, which is the library core (collector, configuration,
//! snapshot, JSON, Prometheus text), free of any HTTP, TLS, gRPC or argument-parsing stack.
//! `agent` adds `output::serve` (the HTTP endpoint, its web config, logging set-up) and
//! `output::otlp` (hyper, tonic, rustls, bcrypt, tracing-subscriber); `cli` adds clap's derives
//! on the configuration's enums and the agent's flags, and is what the `relay-metrics` binary
//! needs (`cargo build --release -p relay-metrics --features cli`).
//!
//! Data flows one way inside: sources read kernel files into a sample, a pure model derives
//! sums, rates and units into a snapshot, and the collector hands it out as an `Arc` so every
//! consumer shares one copy.

#![deny(missing_docs)]
#![deny(unreachable_pub)]

mod collector;
pub mod config;
pub(crate) mod model;
pub mod output;
#[cfg(feature = "report")]
pub mod report;
pub mod sampler;
pub mod snapshot;
pub(crate) mod source;
pub mod summary;
pub mod units;

/// A hash map for the keys the collector builds and probes thousands of times a snapshot
/// (pids, cgroup ids and paths, one entry per process or cgroup): foldhash's fast hasher, cheaper
/// on such short keys than the standard SipHash, and still seeded per process.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

pub use collector::{
    AsyncCollector, Collector, CollectorError, FixedRateSnapshots, KernelEventsPreload,
    ReapedProcess,
};
pub use config::ResourceMetricsConfig;
pub use snapshot::ResourceMetricsSnapshot;
pub use source::ebpf::{init_child_loader, IN_PROCESS_ENV};

/// An error and its causes, `a: b: c` (a top-level message alone often says little: hyper's, or
/// aya's load error, whose cause holds the verifier log).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// NOT API: the one door to the internals, for the workspace's fuzz targets, benches, tools and
/// tests. Nothing there is stable or documented for users.
#[doc(hidden)]
pub mod internals;

/// Scope-level tests that need a pure cgroup v2 kernel: run by `cargo xtask vm-test`.
#[cfg(test)]
mod vm_tests;

#[cfg(test)]
mod test_children;

#[cfg(test)]
mod long_files;
