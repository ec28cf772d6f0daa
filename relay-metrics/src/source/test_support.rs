//! Helpers shared by the sources' tests.

use std::time::{Duration, Instant};

/// Median wall time of `read` in µs over `calls` calls, after 100 warm-up calls (for the
/// ignored cost measurements, run by hand in release mode).
pub(crate) fn median_micros(mut read: impl FnMut(), calls: usize) -> f64 {
    for _ in 0..100 {
        read();
    }
    let mut times: Vec<Duration> = (0..calls)
        .map(|_| {
            let start = Instant::now();
            read();
            start.elapsed()
        })
        .collect();
    times.sort_unstable();
    times[calls / 2].as_secs_f64() * 1e6
}
