//! PSI files (`/proc/pressure/*`, cgroup `*.pressure`): both parsers read the same text.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::{cgroup::parse_psi, system::parse_pressure};

fuzz_target!(|data: &[u8]| {
    let _ = parse_psi(data);
    let _ = parse_pressure(data);
});
