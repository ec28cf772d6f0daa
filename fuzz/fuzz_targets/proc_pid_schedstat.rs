//! `/proc/<pid>/schedstat`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_schedstat;

fuzz_target!(|data: &[u8]| {
    let _ = parse_schedstat(data);
});
