//! Byte-level helpers shared by the procfs parsers of the system-wide sources.

/// Parses an unsigned decimal number; `None` on an empty field, any non-digit or overflow.
pub(crate) fn parse_u64(field: &[u8]) -> Option<u64> {
    if field.is_empty() {
        return None;
    }
    let mut value: u64 = 0;
    for &byte in field {
        let digit = byte.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(digit))?;
    }
    Some(value)
}

/// Splits on ASCII spaces and tabs, skipping empty fields (procfs pads columns with runs of spaces).
pub(crate) fn fields(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&byte| byte == b' ' || byte == b'\t')
        .filter(|field| !field.is_empty())
}

/// The lines of a procfs file, without their terminating newline.
pub(crate) fn lines(content: &[u8]) -> impl Iterator<Item = &[u8]> {
    content
        .split(|&byte| byte == b'\n')
        .filter(|line| !line.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_decimals_and_rejects_everything_else() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b"12a"), None);
        assert_eq!(parse_u64(b" 1"), None);
    }

    #[test]
    fn splits_padded_fields() {
        let got: Vec<&[u8]> = fields(b"  a \t bb  c").collect();
        assert_eq!(got, vec![&b"a"[..], b"bb", b"c"]);
    }
}
