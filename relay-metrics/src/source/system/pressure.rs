//! Pressure stall information: `/proc/pressure/{cpu,memory,io}` and the cgroup `*.pressure` files,
//! which share one format:
//! ```text
//! some avg10=0.00 avg60=0.00 avg300=0.00 total=6825279
//! full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//! ```
//! Only the cumulative `total=` (µs) is kept: averages are derived from totals by `model`.

use super::parse::{fields, lines, parse_u64};

/// Cumulative stall time of one resource, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pressure {
    /// Time at least one task was stalled on the resource.
    pub some_total_usec: Option<u64>,
    /// Time all non-idle tasks were stalled at once. Absent for system-wide CPU before Linux 5.13.
    pub full_total_usec: Option<u64>,
}

/// Parses a PSI file. A line that is absent or whose `total=` is missing or malformed gives `None`
/// for that line only. Returns `None` when neither a `some` nor a `full` line is recognisable.
pub fn parse_pressure(content: &[u8]) -> Option<Pressure> {
    let mut pressure = Pressure::default();
    let mut recognised = false;
    for line in lines(content) {
        let mut parts = fields(line);
        let slot = match parts.next() {
            Some(b"some") => &mut pressure.some_total_usec,
            Some(b"full") => &mut pressure.full_total_usec,
            _ => continue,
        };
        recognised = true;
        *slot = parts
            .find_map(|part| part.strip_prefix(b"total="))
            .and_then(parse_u64);
    }
    recognised.then_some(pressure)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_captured_pressure_files() {
        assert_eq!(
            parse_pressure(include_bytes!("testdata/pressure_cpu")),
            Some(Pressure {
                some_total_usec: Some(106_281_295),
                full_total_usec: Some(0),
            })
        );
        assert_eq!(
            parse_pressure(include_bytes!("testdata/pressure_io")),
            Some(Pressure {
                some_total_usec: Some(3_169_899),
                full_total_usec: Some(1_786_894),
            })
        );
        assert_eq!(
            parse_pressure(include_bytes!("testdata/pressure_memory")),
            Some(Pressure {
                some_total_usec: Some(0),
                full_total_usec: Some(0),
            })
        );
    }

    #[test]
    fn a_missing_full_line_is_none() {
        assert_eq!(
            parse_pressure(b"some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n"),
            Some(Pressure {
                some_total_usec: Some(42),
                full_total_usec: None,
            })
        );
    }

    #[test]
    fn malformed_totals_are_none_and_garbage_is_rejected() {
        assert_eq!(
            parse_pressure(b"some avg10=0.00 total=\nfull avg10=1 total=-3\n"),
            Some(Pressure::default())
        );
        assert_eq!(
            parse_pressure(b"some avg10=0.00"),
            Some(Pressure::default())
        );
        assert_eq!(parse_pressure(b""), None);
        assert_eq!(parse_pressure(b"total=5\nother total=6\n"), None);
    }

    #[test]
    fn truncation_never_panics() {
        let captured: &[u8] = include_bytes!("testdata/pressure_io");
        for end in 0..captured.len() {
            if let Some(pressure) = parse_pressure(&captured[..end]) {
                // A cut total is shorter, never larger, than the real one.
                assert!(pressure.some_total_usec.unwrap_or(0) <= 3_169_899);
            }
        }
    }
}
