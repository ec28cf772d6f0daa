//! `/proc/<pid>/stat`: comm may hold any bytes, including `)` and newlines.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_stat;

fuzz_target!(|data: &[u8]| {
    if let Some(stat) = parse_stat(data) {
        // The fields are found after the last `)`: the same content parses the same way again
        // when comm changes (it is everything between the first `(` and the last `)`).
        let close = data.iter().rposition(|&b| b == b')').unwrap_or(0);
        let mut renamed = b"1 (x) ) (".to_vec();
        renamed.extend_from_slice(&data[close..]);
        if let Some(again) = parse_stat(&renamed) {
            assert_eq!(
                (again.state, again.ppid, again.utime_ticks),
                (stat.state, stat.ppid, stat.utime_ticks)
            );
            assert_eq!(
                (again.start_time_ticks, again.rss_pages),
                (stat.start_time_ticks, stat.rss_pages)
            );
        }
    }
});
