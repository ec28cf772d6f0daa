//! `/proc/meminfo`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::system::parse_meminfo;

fuzz_target!(|data: &[u8]| {
    let _ = parse_meminfo(data);
});
