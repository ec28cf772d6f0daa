//! `/proc/<pid>/statm` (resident pages).
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_statm_resident_pages;

fuzz_target!(|data: &[u8]| {
    let _ = parse_statm_resident_pages(data);
});
