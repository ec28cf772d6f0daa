//! The value files of cgroup v1 and v2 (`memory.max`, `cpu.max`, `cpu.stat`, `cpuset.cpus`, v1
//! quota and period ...). The first byte picks the parser; v1 quota and period are split at NUL.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::cgroup::{
    keyed_u64, parse_cpu_list_count, parse_cpu_max, parse_limit, parse_v1_cpu_quota,
    parse_v1_memory_limit, CpuQuota,
};

fn check_quota(quota: Option<CpuQuota>) {
    if let Some(CpuQuota::LogicalProcessors(cpus)) = quota {
        assert!(cpus.is_finite() && cpus > 0.0, "{cpus}");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 6 {
        0 => {
            let _ = parse_limit(rest);
        }
        1 => {
            let _ = parse_v1_memory_limit(rest);
        }
        2 => {
            for key in [
                &b"usage_usec"[..],
                b"throttled_usec",
                b"oom_kill",
                b"max",
                b"",
            ] {
                let _ = keyed_u64(rest, key);
            }
        }
        3 => check_quota(parse_cpu_max(rest)),
        4 => {
            let (quota, period) = match rest.iter().position(|&b| b == 0) {
                Some(nul) => (&rest[..nul], &rest[nul + 1..]),
                None => (rest, &b"100000\n"[..]),
            };
            check_quota(parse_v1_cpu_quota(quota, period));
        }
        _ => {
            if let Some(count) = parse_cpu_list_count(rest) {
                assert!(count > 0);
            }
        }
    }
});
