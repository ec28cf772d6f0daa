//! `/proc/<pid>/io`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_io;

fuzz_target!(|data: &[u8]| {
    let _ = parse_io(data);
});
