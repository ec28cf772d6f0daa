//! Byte-level helpers shared by the procfs parsers of the system-wide sources.

pub(crate) use crate::source::parse::parse_u64;

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
    fn splits_padded_fields() {
        let got: Vec<&[u8]> = fields(b"  a \t bb  c").collect();
        assert_eq!(got, vec![&b"a"[..], b"bb", b"c"]);
    }
}
