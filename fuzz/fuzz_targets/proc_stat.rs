//! `/proc/stat`, and the CPU rate between two parses.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::system::{cpu_rate_logical_processors, parse_stat};

const CAPTURED: &[u8] = b"cpu  10 0 10 100 0 0 0 0 0 0\ncpu0 5 0 5 50 0 0 0 0 0 0\ncpu1 5 0 5 50 0 0 0 0 0 0\nctxt 7\nprocesses 9\n";

fuzz_target!(|data: &[u8]| {
    let mut fresh = Vec::new();
    let counters = parse_stat(data, &mut fresh);
    // The per-CPU list is cleared before use: a reused buffer gives the same result.
    let mut reused = Vec::new();
    let _ = parse_stat(CAPTURED, &mut reused);
    let before = reused.clone();
    assert_eq!(parse_stat(data, &mut reused), counters);
    assert_eq!(reused, fresh);
    for (prev, cur) in [(&before, &fresh), (&fresh, &before), (&fresh, &fresh)] {
        if let Some(rate) = cpu_rate_logical_processors(prev, cur) {
            assert!(rate.is_finite() && rate >= 0.0, "{rate}");
        }
    }
});
