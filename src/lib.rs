//! Test and benchmark host for the relay-metrics workspace (see tests/ and benches/).
