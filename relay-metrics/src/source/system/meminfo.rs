//! `/proc/meminfo`: the system memory totals Relay reports (`MemTotal`, `MemAvailable`) plus the
//! free and swap lines. "Used" (total − available) is derived by `model`, not here.

use super::parse::{fields, lines, parse_u64};

/// The `/proc/meminfo` lines we use, in KiB. A line that is absent or malformed is `None`
/// (`MemAvailable` is missing on kernels before 3.14, for instance).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`: usable RAM.
    pub total_kib: Option<u64>,
    /// `MemAvailable`: the kernel's estimate of memory available without swapping; on kernels
    /// without it (before 3.14), Relay's estimate: `MemFree + Buffers + Cached + SReclaimable −
    /// Shmem`.
    pub available_kib: Option<u64>,
    /// `MemFree`: memory not used at all.
    pub free_kib: Option<u64>,
    /// `SwapTotal`.
    pub swap_total_kib: Option<u64>,
    /// `SwapFree`.
    pub swap_free_kib: Option<u64>,
}

impl MemInfo {
    fn is_complete(&self) -> bool {
        self.total_kib.is_some()
            && self.available_kib.is_some()
            && self.free_kib.is_some()
            && self.swap_total_kib.is_some()
            && self.swap_free_kib.is_some()
    }
}

/// Parses `/proc/meminfo`. Every field is independent: a malformed line only loses its own value.
/// Returns `None` when none of the wanted lines could be parsed (not a meminfo file at all).
pub fn parse_meminfo(content: &[u8]) -> Option<MemInfo> {
    let mut info = MemInfo::default();
    // `Buffers`, `Cached`, `SReclaimable`, `Shmem`: for the estimate without `MemAvailable`.
    let mut reclaimable = [None; 4];
    let mut has_available = false;
    for line in lines(content) {
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            continue;
        };
        let (key, rest) = (&line[..colon], &line[colon + 1..]);
        let slot = match key {
            b"MemTotal" => &mut info.total_kib,
            b"MemFree" => &mut info.free_kib,
            b"MemAvailable" => {
                has_available = true;
                &mut info.available_kib
            }
            b"SwapTotal" => &mut info.swap_total_kib,
            b"SwapFree" => &mut info.swap_free_kib,
            b"Buffers" => &mut reclaimable[0],
            b"Cached" => &mut reclaimable[1],
            b"SReclaimable" => &mut reclaimable[2],
            b"Shmem" => &mut reclaimable[3],
            _ => continue,
        };
        // The first occurrence wins; the kernel never repeats a key.
        if slot.is_none() {
            *slot = parse_kib(rest);
        }
        // The wanted lines are all in the first 20 of ~55: stop early.
        if info.is_complete() {
            break;
        }
    }
    if let (false, Some(free), [Some(buffers), Some(cached), Some(slab), Some(shmem)]) =
        (has_available, info.free_kib, reclaimable)
    {
        // As Relay's library (sysinfo) estimates it where the kernel has no `MemAvailable` (a
        // malformed `MemAvailable` line stays unknown).
        info.available_kib = Some(
            free.saturating_add(buffers)
                .saturating_add(cached)
                .saturating_add(slab)
                .saturating_sub(shmem),
        );
    }
    (info != MemInfo::default()).then_some(info)
}

/// `"   24683584 kB"` → 24683584. Any other unit or trailing field makes the value unknown rather
/// than silently misread.
fn parse_kib(rest: &[u8]) -> Option<u64> {
    let mut parts = fields(rest);
    let value = parse_u64(parts.next()?)?;
    match (parts.next(), parts.next()) {
        (Some(b"kB"), None) => Some(value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURED: &[u8] = include_bytes!("testdata/meminfo");

    #[test]
    fn without_mem_available_the_estimate_is_relays() {
        let old_kernel = b"MemTotal:  1000 kB\nMemFree:  100 kB\nBuffers:  20 kB\nCached:  300 kB\nSwapCached:  5 kB\nShmem:  50 kB\nSReclaimable:  40 kB\nSwapTotal:  0 kB\nSwapFree:  0 kB\n";
        let info = parse_meminfo(old_kernel).unwrap();
        assert_eq!(info.available_kib, Some(100 + 20 + 300 + 40 - 50));
        // MemAvailable, where the kernel has it, is taken as it is.
        let info = parse_meminfo(CAPTURED).unwrap();
        let text = String::from_utf8_lossy(CAPTURED);
        let line = text
            .lines()
            .find(|l| l.starts_with("MemAvailable:"))
            .unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert_eq!(info.available_kib, Some(kib));
    }

    #[test]
    fn parses_captured_meminfo() {
        let info = parse_meminfo(CAPTURED).unwrap();
        assert_eq!(
            info,
            MemInfo {
                total_kib: Some(24_683_584),
                available_kib: Some(23_795_424),
                free_kib: Some(20_996_412),
                swap_total_kib: Some(0),
                swap_free_kib: Some(0),
            }
        );
    }

    #[test]
    fn a_missing_line_is_none() {
        let info = parse_meminfo(b"MemTotal: 100 kB\nMemFree: 50 kB\n").unwrap();
        assert_eq!(info.total_kib, Some(100));
        assert_eq!(info.free_kib, Some(50));
        assert_eq!(info.available_kib, None);
        assert_eq!(info.swap_total_kib, None);
    }

    #[test]
    fn malformed_lines_lose_only_their_value() {
        let info = parse_meminfo(
            b"MemTotal: 1x0 kB\nMemFree: 50 MB\nMemAvailable:\nSwapTotal: 7 kB extra\nSwapFree: 3 kB",
        )
        .unwrap();
        assert_eq!(info.total_kib, None);
        assert_eq!(info.free_kib, None);
        assert_eq!(info.available_kib, None);
        assert_eq!(info.swap_total_kib, None);
        assert_eq!(info.swap_free_kib, Some(3));
    }

    #[test]
    fn garbage_and_truncation_never_panic() {
        assert_eq!(parse_meminfo(b""), None);
        assert_eq!(parse_meminfo(b"\xff\xfe:\n::::"), None);
        for end in 0..CAPTURED.len() {
            let _ = parse_meminfo(&CAPTURED[..end]);
        }
        // Cut inside the first value: MemTotal is lost or shortened, never wrong by more digits.
        let cut = parse_meminfo(b"MemTotal:       2468");
        assert_eq!(cut, None, "a value without its unit is not trusted");
    }
}
