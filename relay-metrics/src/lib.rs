//! relay-metrics: typed resource-metrics snapshots of a process, a process tree, a cgroup or the
//! whole Linux system, wire-compatible with NeMo Relay's `resource_metrics` module.

pub mod config;
pub mod model;
pub mod snapshot;
pub mod source;
pub mod units;
