//! The one decimal-number parser of every source. It takes the exact bytes of a field and never
//! allocates or panics; callers whose files end in a newline use [`parse_u64_trimmed`].

/// Decimal digits only (no sign, no blanks), checked against overflow; `None` otherwise.
///
/// This is the per-process hot path's parser (`parse_stat` calls it ~40 times per process): the
/// `try_fold` shape is the one that measured fastest there (commit 3c426ce: a loop-shaped shared
/// copy made `parse_stat` slower), so change its shape only with the `parsers` bench side by side.
#[inline]
pub(crate) fn parse_u64(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |acc, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d <= 9)?;
        acc.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// [`parse_u64`] after trimming ASCII whitespace on both sides: a whole one-value file such as
/// `memory.max` or a sysfs counter (`268435456\n`).
#[inline]
pub(crate) fn parse_u64_trimmed(bytes: &[u8]) -> Option<u64> {
    parse_u64(bytes.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimals_and_rejects_everything_else() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"0042"), Some(42));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"99999999999999999999"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"+1"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b" 1"), None);
        assert_eq!(parse_u64(b"1\n"), None);
        assert_eq!(parse_u64(b"1/"), None);
        assert_eq!(parse_u64(b"1:"), None);
    }

    #[test]
    fn trimmed_accepts_surrounding_blanks_only() {
        assert_eq!(parse_u64_trimmed(b"268435456\n"), Some(268_435_456));
        assert_eq!(parse_u64_trimmed(b" \t7 \n"), Some(7));
        assert_eq!(parse_u64_trimmed(b"\n"), None);
        assert_eq!(parse_u64_trimmed(b"1 2"), None);
        assert_eq!(parse_u64_trimmed(b"-1\n"), None);
        // `str::parse` accepted a leading `+`, which the kernel never writes: now refused.
        assert_eq!(parse_u64_trimmed(b"+5\n"), None);
    }
}
