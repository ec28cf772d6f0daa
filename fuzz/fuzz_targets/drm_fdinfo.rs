//! `/proc/<pid>/fdinfo/<fd>` of DRM clients (amdgpu, i915, xe ...), and the utilisation between two
//! readings. The input is two fdinfo texts separated by a NUL; the elapsed time comes from the
//! first bytes of the second.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::gpu::{
    engine_utilization_percent, parse_drm_fdinfo, utilization_percent,
};

fuzz_target!(|data: &[u8]| {
    let (first, second) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, data),
    };
    let elapsed_ns = second
        .iter()
        .take(8)
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
    let (Some(previous), Some(current)) = (parse_drm_fdinfo(first), parse_drm_fdinfo(second))
    else {
        return;
    };
    for engine in &current.engines {
        if let Some(before) = previous.engines.iter().find(|e| e.name == engine.name) {
            if let Some(percent) = engine_utilization_percent(before, engine, elapsed_ns) {
                assert!((0.0..=100.0).contains(&percent), "{percent}");
            }
        }
    }
    if let Some(percent) = utilization_percent([(&previous, &current, elapsed_ns)]) {
        assert!((0.0..=100.0).contains(&percent), "{percent}");
    }
});
