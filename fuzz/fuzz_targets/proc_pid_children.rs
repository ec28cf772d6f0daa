//! `/proc/<pid>/task/<tid>/children`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::procfs::parse_children;

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    if parse_children(data, &mut out).is_some() {
        // Every pid is one whitespace-separated token.
        let tokens = data
            .split(|b| b.is_ascii_whitespace())
            .filter(|token| !token.is_empty())
            .count();
        assert_eq!(out.len(), tokens);
    }
});
