//! `/proc/<pid>/smaps_rollup` (private memory).
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_smaps_rollup_private_kib;

fuzz_target!(|data: &[u8]| {
    let _ = parse_smaps_rollup_private_kib(data);
});
