//! `/proc/vmstat`: the machine's event counters since boot.

use super::parse::{fields, lines, parse_u64};

/// The `oom_kill` counter of `/proc/vmstat`: processes the OOM killer killed since boot (every
/// kill, machine-wide or in a cgroup). `None` if the line is missing (kernels before 4.13) or
/// malformed.
pub(crate) fn parse_vmstat_oom_kill(content: &[u8]) -> Option<u64> {
    lines(content).find_map(|line| {
        let mut parts = fields(line);
        match (parts.next(), parts.next(), parts.next()) {
            (Some(b"oom_kill"), Some(value), None) => parse_u64(value),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::parse_vmstat_oom_kill;

    #[test]
    fn oom_kill_is_found_among_the_other_counters() {
        let vmstat = b"nr_free_pages 3990\nnr_zone_inactive_anon 12\noom_kill 7\ncompact_stall 0\n";
        assert_eq!(parse_vmstat_oom_kill(vmstat), Some(7));
        assert_eq!(parse_vmstat_oom_kill(b"oom_kill 0"), Some(0));
        // A prefix of another name, a missing value or extra fields are not the counter.
        assert_eq!(parse_vmstat_oom_kill(b"oom_kill_x 3\n"), None);
        assert_eq!(parse_vmstat_oom_kill(b"oom_kill\n"), None);
        assert_eq!(parse_vmstat_oom_kill(b"oom_kill 3 4\n"), None);
        assert_eq!(parse_vmstat_oom_kill(b"oom_kill -3\n"), None);
        assert_eq!(parse_vmstat_oom_kill(b"nr_free_pages 1\n"), None);
        assert_eq!(parse_vmstat_oom_kill(b""), None);
    }
}
