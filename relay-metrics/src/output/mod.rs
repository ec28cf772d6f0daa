//! Outputs: encodings of a published snapshot, and the HTTP endpoint that serves them.

pub mod json;
mod metrics;
pub mod otlp;
pub mod prometheus;
pub mod relay_names;
pub mod serve;
