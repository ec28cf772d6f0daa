//! The `relay-metrics` command line.

fn main() {}
