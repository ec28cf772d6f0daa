//! Outputs: encodings of a published snapshot, and the HTTP endpoint that serves them.

pub mod json;
pub mod prometheus;
pub mod serve;
