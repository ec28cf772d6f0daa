//! `/proc/<pid>/cgroup`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::cgroup::parse_proc_cgroup;

fuzz_target!(|data: &[u8]| {
    for entry in parse_proc_cgroup(data) {
        assert!(entry.path.starts_with('/'));
        let _ = entry.is_v2();
    }
});
