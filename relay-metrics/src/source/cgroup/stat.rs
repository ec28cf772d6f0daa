//! The cgroup files only the cAdvisor naming needs (`memory.stat`, v2 `memory.swap.current`,
//! the CPU settings raw): parsed here, read by [`super::values`] when asked for.

use super::parse::{keyed_u64, parse_u64_trimmed};
use super::CgroupVersion;
use crate::snapshot::{TargetCpuSpec, TargetMemoryStat};

/// `memory.stat` into `out`: v1's hierarchical `total_*` keys (the cgroup and its children, as
/// `memory.usage_in_bytes` counts them), v2's own keys (v2 counters are hierarchical already).
/// v2's swap comes from `memory.swap.current`, not from here.
pub(crate) fn parse_memory_stat(bytes: &[u8], version: CgroupVersion, out: &mut TargetMemoryStat) {
    match version {
        CgroupVersion::V1 => {
            out.rss_bytes = keyed_u64(bytes, b"total_rss");
            out.cache_bytes = keyed_u64(bytes, b"total_cache");
            out.swap_bytes = keyed_u64(bytes, b"total_swap");
            out.mapped_file_bytes = keyed_u64(bytes, b"total_mapped_file");
            out.inactive_file_bytes = keyed_u64(bytes, b"total_inactive_file");
        }
        CgroupVersion::V2 => {
            out.rss_bytes = keyed_u64(bytes, b"anon");
            out.cache_bytes = keyed_u64(bytes, b"file");
            out.mapped_file_bytes = keyed_u64(bytes, b"file_mapped");
            out.inactive_file_bytes = keyed_u64(bytes, b"inactive_file");
        }
    }
}

/// v2 `cpu.max` (`max 100000`, `50000 100000`) into the raw quota and period.
pub(crate) fn parse_cpu_max_raw(bytes: &[u8], out: &mut TargetCpuSpec) {
    let mut fields = bytes
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let quota = fields.next();
    out.period_us = fields.next().and_then(parse_u64_trimmed);
    out.quota_us = quota.and_then(parse_u64_trimmed).filter(|&q| q > 0);
}

/// v1 `cpu.cfs_quota_us` (`-1`: none).
pub(crate) fn parse_v1_quota_raw(bytes: &[u8]) -> Option<u64> {
    parse_u64_trimmed(bytes).filter(|&q| q > 0)
}

/// v1 `cpu.shares` as it is; v2 `cpu.weight` (1–10000) as shares, with the conversion
/// cAdvisor and runc use (`2 + (weight − 1) × 262142 / 9999`).
pub(crate) fn parse_shares(bytes: &[u8], version: CgroupVersion) -> Option<u64> {
    let value = parse_u64_trimmed(bytes)?;
    match version {
        CgroupVersion::V1 => Some(value),
        CgroupVersion::V2 => (1..=10_000)
            .contains(&value)
            .then(|| 2 + (value - 1) * 262_142 / 9_999),
    }
}

/// cAdvisor's working set: usage less the inactive page cache, never below zero.
pub(crate) fn working_set(usage: u64, stat: &TargetMemoryStat) -> u64 {
    usage.saturating_sub(stat.inactive_file_bytes.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stat_of_both_versions_and_the_working_set() {
        let mut v1 = TargetMemoryStat::default();
        parse_memory_stat(
            b"cache 1\nrss 2\nswap 3\ninactive_file 4\ntotal_cache 4096\ntotal_rss 8192\ntotal_swap 0\ntotal_mapped_file 12\ntotal_inactive_file 1000\n",
            CgroupVersion::V1,
            &mut v1,
        );
        assert_eq!(
            v1,
            TargetMemoryStat {
                rss_bytes: Some(8192),
                cache_bytes: Some(4096),
                swap_bytes: Some(0),
                mapped_file_bytes: Some(12),
                inactive_file_bytes: Some(1000),
            }
        );
        assert_eq!(working_set(5000, &v1), 4000);
        assert_eq!(working_set(500, &v1), 0);
        let mut v2 = TargetMemoryStat::default();
        parse_memory_stat(
            b"anon 100\nfile 200\nkernel 7\nfile_mapped 30\nactive_file 150\ninactive_file 50\n",
            CgroupVersion::V2,
            &mut v2,
        );
        assert_eq!(
            (
                v2.rss_bytes,
                v2.cache_bytes,
                v2.mapped_file_bytes,
                v2.inactive_file_bytes,
                v2.swap_bytes
            ),
            (Some(100), Some(200), Some(30), Some(50), None)
        );
    }

    #[test]
    fn cpu_settings_raw() {
        let mut spec = TargetCpuSpec::default();
        parse_cpu_max_raw(b"50000 100000\n", &mut spec);
        assert_eq!(
            (spec.quota_us, spec.period_us),
            (Some(50_000), Some(100_000))
        );
        parse_cpu_max_raw(b"max 100000\n", &mut spec);
        assert_eq!((spec.quota_us, spec.period_us), (None, Some(100_000)));
        assert_eq!(parse_v1_quota_raw(b"-1\n"), None);
        assert_eq!(parse_v1_quota_raw(b"20000\n"), Some(20_000));
        assert_eq!(parse_shares(b"1024\n", CgroupVersion::V1), Some(1024));
        // The default weight, 100, is 2 + 99 × 262142 / 9999 = 2597 shares (as runc maps it back).
        assert_eq!(parse_shares(b"100\n", CgroupVersion::V2), Some(2597));
        assert_eq!(parse_shares(b"0\n", CgroupVersion::V2), None);
    }
}
