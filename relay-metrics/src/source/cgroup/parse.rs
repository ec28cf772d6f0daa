//! Parsers for the content of cgroup interface files. All take bytes and never panic; `None`
//! means "malformed", which callers turn into a missing value rather than a guess.

/// The v1 memory controller reports "no limit" as `PAGE_COUNTER_MAX * PAGE_SIZE`, a page-aligned
/// number just below 2^63 whose exact value depends on the page size; anything this large cannot
/// be a limit someone configured on purpose.
pub(super) const V1_UNLIMITED_BYTES: u64 = 1 << 62;

/// A limit file's value: `max` (v2) or a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitValue {
    /// No limit at this level.
    Unlimited,
    /// A numeric limit.
    Value(u64),
}

/// A CPU bandwidth limit at one level, as logical processors (quota ÷ period).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CpuQuota {
    /// No quota at this level (`max`, or v1 `-1`).
    Unlimited,
    /// quota ÷ period, always finite and > 0.
    LogicalProcessors(f64),
}

/// Cumulative stall totals of one PSI file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PsiTotals {
    /// `some ... total=` in microseconds: time at least one task stalled.
    pub some_usec: Option<u64>,
    /// `full ... total=` in microseconds: time all non-idle tasks stalled.
    pub full_usec: Option<u64>,
}

/// A decimal `u64`, surrounding ASCII whitespace allowed (whole one-value files).
pub(crate) use crate::source::parse::parse_u64_trimmed;

/// Parses `max` or a decimal number (`memory.max`, `pids.max`).
pub fn parse_limit(bytes: &[u8]) -> Option<LimitValue> {
    let bytes = bytes.trim_ascii();
    if bytes == b"max" {
        return Some(LimitValue::Unlimited);
    }
    parse_u64_trimmed(bytes).map(LimitValue::Value)
}

/// A limit file's value as a number, `u64::MAX` standing for `max`: what [`parse_limit`] gives
/// for its text (the cgroup iterator's limits are in this form).
pub(crate) fn limit_of(value: u64) -> LimitValue {
    if value == u64::MAX {
        LimitValue::Unlimited
    } else {
        LimitValue::Value(value)
    }
}

/// Parses v1 `memory.limit_in_bytes`; the kernel's "unlimited" sentinel becomes `Unlimited`.
pub fn parse_v1_memory_limit(bytes: &[u8]) -> Option<LimitValue> {
    parse_u64_trimmed(bytes).map(v1_memory_limit_of)
}

/// v1 `memory.limit_in_bytes` as a number: the kernel's "unlimited" sentinel is `Unlimited`.
pub(crate) fn v1_memory_limit_of(value: u64) -> LimitValue {
    if value >= V1_UNLIMITED_BYTES {
        LimitValue::Unlimited
    } else {
        LimitValue::Value(value)
    }
}

/// Finds `key value` in a flat-keyed file (`cpu.stat`, `memory.events`, `pids.events`,
/// `memory.oom_control`) and parses the value. A missing key gives `None`.
pub fn keyed_u64(content: &[u8], key: &[u8]) -> Option<u64> {
    content.split(|&b| b == b'\n').find_map(|line| {
        let rest = line.strip_prefix(key)?;
        let value = rest.strip_prefix(b" ")?;
        parse_u64_trimmed(value)
    })
}

/// Parses v2 `cpu.max` (`$QUOTA $PERIOD`, quota may be `max`). Returns `None` when the content is
/// invalid: a quota or period that is zero, negative, fractional, NaN, infinite or not a number.
pub fn parse_cpu_max(bytes: &[u8]) -> Option<CpuQuota> {
    let text = std::str::from_utf8(bytes.trim_ascii()).ok()?;
    let mut fields = text.split_ascii_whitespace();
    let quota = fields.next()?;
    let period = positive(fields.next()?)?;
    if fields.next().is_some() {
        return None;
    }
    let quota = match quota {
        "max" => None,
        quota => Some(positive(quota)?),
    };
    cpu_quota_of(quota, period)
}

/// Parses v1 `cpu.cfs_quota_us` + `cpu.cfs_period_us`. Quota `-1` means no limit; any other
/// non-positive or non-numeric value, or a bad period, is invalid (`None`).
pub fn parse_v1_cpu_quota(quota: &[u8], period: &[u8]) -> Option<CpuQuota> {
    let quota = std::str::from_utf8(quota.trim_ascii()).ok()?;
    let period = positive(std::str::from_utf8(period.trim_ascii()).ok()?)?;
    let quota = match quota {
        "-1" => None,
        quota => Some(positive(quota)?),
    };
    cpu_quota_of(quota, period)
}

/// A CPU limit from its quota (`None`: no quota) and period, both in µs, as the files give them
/// and the cgroup iterator's record does; `None` where either is 0.
pub(crate) fn cpu_quota_of(quota_us: Option<u64>, period_us: u64) -> Option<CpuQuota> {
    if period_us == 0 {
        return None;
    }
    match quota_us {
        None => Some(CpuQuota::Unlimited),
        Some(0) => None,
        Some(quota) => Some(CpuQuota::LogicalProcessors(quota as f64 / period_us as f64)),
    }
}

fn positive(text: &str) -> Option<u64> {
    text.parse::<u64>().ok().filter(|&value| value > 0)
}

/// Counts the CPUs in a cpu list such as `0-3,8,10-11` (→ 7). An empty list, a reversed range
/// or anything that is not a number gives `None`.
pub fn parse_cpu_list_count(bytes: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(bytes.trim_ascii()).ok()?;
    if text.is_empty() {
        return None;
    }
    let mut count: u32 = 0;
    for part in text.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((first, last)) => (first.parse::<u32>().ok()?, last.parse::<u32>().ok()?),
            None => {
                let cpu = part.parse::<u32>().ok()?;
                (cpu, cpu)
            }
        };
        if last < first {
            return None;
        }
        count = count.checked_add(last - first + 1)?;
    }
    Some(count)
}

/// Parses a PSI file (`some avg10=.. avg60=.. avg300=.. total=N`, optional `full ...` line).
/// A line whose `total=` is missing or malformed leaves that value `None`.
pub fn parse_psi(content: &[u8]) -> PsiTotals {
    // Same format as /proc/pressure/*: one parser for both.
    let pressure = crate::source::system::parse_pressure(content).unwrap_or_default();
    PsiTotals {
        some_usec: pressure.some_total_usec,
        full_usec: pressure.full_total_usec,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_values_from_a_real_v1_cpu_stat() {
        let stat =
            b"nr_periods 12\nnr_throttled 7\nthrottled_time 123456789\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(keyed_u64(stat, b"nr_periods"), Some(12));
        assert_eq!(keyed_u64(stat, b"nr_throttled"), Some(7));
        assert_eq!(keyed_u64(stat, b"throttled_time"), Some(123456789));
        assert_eq!(keyed_u64(stat, b"throttled"), None, "prefix must not match");
        assert_eq!(keyed_u64(stat, b"missing"), None);
        assert_eq!(keyed_u64(b"nr_periods x\n", b"nr_periods"), None);
    }

    #[test]
    fn cpu_max_valid_and_invalid() {
        assert_eq!(
            parse_cpu_max(b"20000 100000\n"),
            Some(CpuQuota::LogicalProcessors(0.2))
        );
        assert_eq!(parse_cpu_max(b"max 100000\n"), Some(CpuQuota::Unlimited));
        for bad in [
            &b"0 100000"[..],
            b"-1 100000",
            b"NaN 100000",
            b"inf 100000",
            b"1.5 100000",
            b"20000 0",
            b"20000 -5",
            b"max 0",
            b"20000",
            b"20000 100000 7",
            b"",
            b"\xff 100",
        ] {
            assert_eq!(
                parse_cpu_max(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn v1_quota() {
        assert_eq!(
            parse_v1_cpu_quota(b"20000\n", b"100000\n"),
            Some(CpuQuota::LogicalProcessors(0.2))
        );
        assert_eq!(
            parse_v1_cpu_quota(b"-1\n", b"100000\n"),
            Some(CpuQuota::Unlimited)
        );
        assert_eq!(parse_v1_cpu_quota(b"0\n", b"100000\n"), None);
        assert_eq!(parse_v1_cpu_quota(b"-2\n", b"100000\n"), None);
        assert_eq!(parse_v1_cpu_quota(b"20000\n", b"0\n"), None);
        assert_eq!(parse_v1_cpu_quota(b"-1\n", b"zero\n"), None);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list_count(b"0-3,8,10-11\n"), Some(7));
        assert_eq!(parse_cpu_list_count(b"0\n"), Some(1));
        assert_eq!(parse_cpu_list_count(b"0-1\n"), Some(2));
        for bad in [
            &b"3-1"[..],
            b"a",
            b"1-",
            b"-1",
            b"0,,1",
            b"",
            b"\n",
            b"0-3,x",
        ] {
            assert_eq!(parse_cpu_list_count(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn limits() {
        assert_eq!(parse_limit(b"max\n"), Some(LimitValue::Unlimited));
        assert_eq!(parse_limit(b"4096\n"), Some(LimitValue::Value(4096)));
        assert_eq!(parse_limit(b"-1\n"), None);
        assert_eq!(
            parse_v1_memory_limit(b"9223372036854771712\n"),
            Some(LimitValue::Unlimited)
        );
        assert_eq!(
            parse_v1_memory_limit(b"67108864\n"),
            Some(LimitValue::Value(67108864))
        );
    }

    #[test]
    fn psi_totals_from_captured_bytes() {
        // Captured from /sys/fs/cgroup/unified/cpu.pressure on the dev machine.
        let psi = b"some avg10=12.35 avg60=3.37 avg300=1.61 total=8169595\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(
            parse_psi(psi),
            PsiTotals {
                some_usec: Some(8169595),
                full_usec: Some(0)
            }
        );
        let some_only = b"some avg10=0.00 avg60=0.00 avg300=0.00 total=3000999\n";
        assert_eq!(parse_psi(some_only).some_usec, Some(3000999));
        assert_eq!(parse_psi(some_only).full_usec, None);
        assert_eq!(parse_psi(b"some avg10=1 total=x\n").some_usec, None);
        assert_eq!(parse_psi(b"garbage"), PsiTotals::default());
    }
}
