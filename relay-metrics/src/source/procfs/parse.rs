//! Parsers for the per-process files of procfs. Each takes the raw bytes of one read and returns
//! `None` on anything unexpected: a parser never panics and never guesses a number.

use super::{IoCounters, SchedStat};
// The shared parser is this hot path's measured-fast one (see its comment before changing it).
pub(crate) use crate::source::parse::parse_u64;

/// The fields of `/proc/<pid>/stat` the collector uses (numbering as in proc(5)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 1: the pid the file describes.
    pub pid: u32,
    /// Field 3: one-letter state (`R`, `S`, `D`, `Z`, ...).
    pub state: u8,
    /// Field 4: parent pid.
    pub ppid: u32,
    /// Field 9: kernel flags of the task (`PF_*`).
    pub flags: u64,
    /// Field 14: user-mode CPU time in clock ticks.
    pub utime_ticks: u64,
    /// Field 15: kernel-mode CPU time in clock ticks.
    pub stime_ticks: u64,
    /// Field 16: user-mode CPU time of the children it waited for, in clock ticks.
    pub cutime_ticks: u64,
    /// Field 17: kernel-mode CPU time of the children it waited for, in clock ticks.
    pub cstime_ticks: u64,
    /// Field 20: number of threads.
    pub num_threads: u64,
    /// Field 22: start time after boot in clock ticks; with the pid, the identity of a process.
    pub start_time_ticks: u64,
    /// Field 23: virtual memory size in bytes.
    pub vsize_bytes: u64,
    /// Field 24: resident set size in pages.
    pub rss_pages: u64,
}

/// `PF_KTHREAD`: the task is a kernel thread (no memory map, no file descriptors).
pub(crate) const PF_KTHREAD: u64 = 0x0020_0000;

/// Parses `/proc/<pid>/stat`.
///
/// `comm` (field 2) may contain spaces, parentheses and even `") ("`, so the fields after it are
/// found from the *last* `)` of the line: the kernel prints nothing after comm that contains one.
pub fn parse_stat(bytes: &[u8]) -> Option<Stat> {
    let open = memchr::memchr(b'(', bytes)?;
    let close = memchr::memrchr(b')', bytes)?;
    if close < open {
        return None;
    }
    let pid = parse_u32(trim(&bytes[..open]))?;
    // Field 3 is the first field after comm; `field(n)` moves on to field n.
    let mut fields = Fields {
        rest: &bytes[close + 1..],
        number: 2,
    };
    let state = match fields.field(3)? {
        [state] => *state,
        _ => return None,
    };
    let ppid = parse_u32(fields.field(4)?)?;
    let flags = parse_u64(fields.field(9)?)?;
    let utime_ticks = parse_u64(fields.field(14)?)?;
    let stime_ticks = parse_u64(fields.field(15)?)?;
    let cutime_ticks = parse_u64(fields.field(16)?)?;
    let cstime_ticks = parse_u64(fields.field(17)?)?;
    // Fields 18 and 19 (priority, nice) are skipped; they may be negative.
    let num_threads = parse_u64(fields.field(20)?)?;
    let start_time_ticks = parse_u64(fields.field(22)?)?;
    let vsize_bytes = parse_u64(fields.field(23)?)?;
    let rss_pages = parse_u64(fields.field(24)?)?;
    // Every kernel prints many fields after rss; requiring the next one rejects a line cut
    // inside rss, which would otherwise parse as a smaller number.
    let _rsslim = fields.field(25)?;
    Some(Stat {
        pid,
        state,
        ppid,
        flags,
        utime_ticks,
        stime_ticks,
        cutime_ticks,
        cstime_ticks,
        num_threads,
        start_time_ticks,
        vsize_bytes,
        rss_pages,
    })
}

/// The whitespace-separated fields of a stat line after comm, numbered as in proc(5), read
/// once from left to right (a field is only looked at if it is asked for or before one that is).
struct Fields<'a> {
    rest: &'a [u8],
    /// The number of the field that ends where `rest` starts.
    number: usize,
}

impl<'a> Fields<'a> {
    /// Field `number` (after the ones already passed), or `None` if the line ends before it.
    fn field(&mut self, number: usize) -> Option<&'a [u8]> {
        loop {
            let start = self.rest.iter().position(|b| !b.is_ascii_whitespace())?;
            let rest = &self.rest[start..];
            let end = rest
                .iter()
                .position(|b| b.is_ascii_whitespace())
                .unwrap_or(rest.len());
            self.rest = &rest[end..];
            self.number += 1;
            if self.number == number {
                return Some(&rest[..end]);
            }
            if self.number > number {
                return None;
            }
        }
    }
}

/// Parses `VmHWM` (peak resident set, KiB) out of `/proc/<pid>/status`. Kernel threads and
/// zombies have no `Vm*` lines: `None`.
pub fn parse_status_vm_hwm_kib(bytes: &[u8]) -> Option<u64> {
    kib_field(bytes, b"VmHWM")
}

/// Parses `Tgid` (the process a task belongs to) out of `/proc/<pid>/status`: a thread id
/// opens as `/proc/<tid>` too, and only this tells it apart from a process id.
pub(crate) fn parse_status_tgid(bytes: &[u8]) -> Option<u32> {
    let value = bytes
        .split(|&b| b == b'\n')
        .filter_map(split_key)
        .find(|(key, _)| *key == b"Tgid")?
        .1;
    parse_u32(trim(value))
}

/// `/proc/<pid>/statm`: the second field, resident pages (exact, unlike stat's rss).
pub fn parse_statm_resident_pages(bytes: &[u8]) -> Option<u64> {
    let mut fields = bytes
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let _size = fields.next()?;
    std::str::from_utf8(fields.next()?).ok()?.parse().ok()
}

/// Parses `/proc/<pid>/io`; `None` unless all four counters are present and numeric.
pub fn parse_io(bytes: &[u8]) -> Option<IoCounters> {
    let mut read_bytes = None;
    let mut write_bytes = None;
    let mut read_syscalls = None;
    let mut write_syscalls = None;
    for line in bytes.split(|&b| b == b'\n') {
        let Some((key, value)) = split_key(line) else {
            continue;
        };
        let slot = match key {
            b"read_bytes" => &mut read_bytes,
            b"write_bytes" => &mut write_bytes,
            b"syscr" => &mut read_syscalls,
            b"syscw" => &mut write_syscalls,
            _ => continue,
        };
        *slot = Some(parse_u64(trim(value))?);
    }
    Some(IoCounters {
        read_bytes: read_bytes?,
        write_bytes: write_bytes?,
        read_syscalls: read_syscalls?,
        write_syscalls: write_syscalls?,
    })
}

/// Parses `/proc/<pid>/schedstat`: `run_ns wait_ns timeslices`.
pub fn parse_schedstat(bytes: &[u8]) -> Option<SchedStat> {
    let mut fields = bytes
        .split(|b| b.is_ascii_whitespace())
        .filter(|field| !field.is_empty());
    let run_ns = parse_u64(fields.next()?)?;
    let wait_ns = parse_u64(fields.next()?)?;
    // The third field (timeslices) is checked, not kept: nothing reports it.
    let _timeslices = parse_u64(fields.next()?)?;
    if fields.next().is_some() {
        return None;
    }
    Some(SchedStat { run_ns, wait_ns })
}

/// Private memory (KiB) from `/proc/<pid>/smaps_rollup`: `Private_Clean + Private_Dirty`, plus
/// `Private_Hugetlb` when the kernel prints it. A missing Clean or Dirty line (kernel threads give
/// an empty file), a malformed value or an overflowing sum gives `None`.
pub fn parse_smaps_rollup_private_kib(bytes: &[u8]) -> Option<u64> {
    let clean = kib_field(bytes, b"Private_Clean")?;
    let dirty = kib_field(bytes, b"Private_Dirty")?;
    let sum = clean.checked_add(dirty)?;
    if has_key(bytes, b"Private_Hugetlb") {
        sum.checked_add(kib_field(bytes, b"Private_Hugetlb")?)
    } else {
        Some(sum)
    }
}

/// Parses the `children` file of a thread (`/proc/<pid>/task/<tid>/children`): space-separated
/// pids, pushed into `out`. Returns `None` (and may have pushed a prefix) on a malformed token.
pub fn parse_children(bytes: &[u8], out: &mut Vec<u32>) -> Option<()> {
    for token in bytes
        .split(|b| b.is_ascii_whitespace())
        .filter(|token| !token.is_empty())
    {
        out.push(parse_u32(token)?);
    }
    Some(())
}

/// The value of a `Key:   123 kB` line; the unit must be `kB`.
fn kib_field(bytes: &[u8], wanted: &[u8]) -> Option<u64> {
    let value = bytes
        .split(|&b| b == b'\n')
        .filter_map(split_key)
        .find(|(key, _)| *key == wanted)?
        .1;
    let mut parts = value
        .split(|b| b.is_ascii_whitespace())
        .filter(|part| !part.is_empty());
    let number = parse_u64(parts.next()?)?;
    match (parts.next(), parts.next()) {
        (Some(b"kB"), None) => Some(number),
        _ => None,
    }
}

fn has_key(bytes: &[u8], wanted: &[u8]) -> bool {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(split_key)
        .any(|(key, _)| key == wanted)
}

/// Splits `key: value` at the first colon.
fn split_key(line: &[u8]) -> Option<(&[u8], &[u8])> {
    let colon = line.iter().position(|&b| b == b':')?;
    Some((&line[..colon], &line[colon + 1..]))
}

fn trim(bytes: &[u8]) -> &[u8] {
    bytes.trim_ascii()
}

pub(crate) fn parse_u32(bytes: &[u8]) -> Option<u32> {
    u32::try_from(parse_u64(bytes)?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_gives_the_thread_group_id() {
        assert_eq!(
            parse_status_tgid(
                b"Name:\tsh\nUmask:\t0022\nState:\tS\nTgid:\t4242\nNgid:\t0\nPid:\t4243\n"
            ),
            Some(4242)
        );
        assert_eq!(parse_status_tgid(b"Name:\tsh\nPid:\t1\n"), None);
        assert_eq!(parse_status_tgid(b"Tgid:\t-1\n"), None);
        assert_eq!(parse_status_tgid(b"Tgid:\n"), None);
    }

    #[test]
    fn statm_gives_the_resident_pages() {
        assert_eq!(
            parse_statm_resident_pages(b"650 455 398 4 0 82 0\n"),
            Some(455)
        );
        assert_eq!(parse_statm_resident_pages(b"650\n"), None);
        assert_eq!(parse_statm_resident_pages(b"650 x 1\n"), None);
        assert_eq!(parse_statm_resident_pages(b""), None);
    }

    const SLEEP_STAT: &[u8] = include_bytes!("testdata/sleep_stat");
    const SLEEP_STATUS: &[u8] = include_bytes!("testdata/sleep_status");
    const SLEEP_IO: &[u8] = include_bytes!("testdata/sleep_io");
    const SLEEP_SCHEDSTAT: &[u8] = include_bytes!("testdata/sleep_schedstat");
    const SLEEP_SMAPS_ROLLUP: &[u8] = include_bytes!("testdata/sleep_smaps_rollup");
    const ODD_COMM_STAT: &[u8] = include_bytes!("testdata/odd_comm_stat");
    const KTHREAD_STAT: &[u8] = include_bytes!("testdata/kthread_stat");
    const KTHREAD_STATUS: &[u8] = include_bytes!("testdata/kthread_status");
    const KTHREAD_IO: &[u8] = include_bytes!("testdata/kthread_io");
    const KTHREAD_SCHEDSTAT: &[u8] = include_bytes!("testdata/kthread_schedstat");
    const ZOMBIE_STAT: &[u8] = include_bytes!("testdata/zombie_stat");
    const ZOMBIE_STATUS: &[u8] = include_bytes!("testdata/zombie_status");

    #[test]
    fn parses_a_real_stat_line() {
        assert_eq!(
            parse_stat(SLEEP_STAT),
            Some(Stat {
                pid: 8458,
                state: b'S',
                ppid: 8455,
                flags: 4_194_304,
                utime_ticks: 0,
                stime_ticks: 0,
                cutime_ticks: 0,
                cstime_ticks: 0,
                num_threads: 1,
                start_time_ticks: 37904,
                vsize_bytes: 2_990_080,
                rss_pages: 424,
            })
        );
    }

    #[test]
    fn comm_with_parentheses_and_spaces_is_skipped_from_the_last_paren() {
        // comm is "a) (b c) x": a first-')' parser would read "(b" as the state.
        let stat = parse_stat(ODD_COMM_STAT).unwrap();
        assert_eq!(stat.pid, 8561);
        assert_eq!(stat.state, b'S');
        assert_eq!(stat.ppid, 8501);
        assert_eq!(stat.num_threads, 1);
        assert_eq!(stat.start_time_ticks, 37964);
        assert_eq!(stat.vsize_bytes, 18_558_976);
        assert_eq!(stat.rss_pages, 2793);
    }

    #[test]
    fn kernel_thread_and_zombie_stat_lines_parse() {
        let kthread = parse_stat(KTHREAD_STAT).unwrap();
        assert_eq!((kthread.pid, kthread.ppid, kthread.state), (2, 0, b'S'));
        assert_eq!((kthread.vsize_bytes, kthread.rss_pages), (0, 0));
        assert_eq!(kthread.start_time_ticks, 25);
        assert_ne!(kthread.flags & PF_KTHREAD, 0, "flags {:#x}", kthread.flags);
        assert_eq!(parse_stat(SLEEP_STAT).unwrap().flags & PF_KTHREAD, 0);
        let zombie = parse_stat(ZOMBIE_STAT).unwrap();
        assert_eq!((zombie.state, zombie.start_time_ticks), (b'Z', 38264));
    }

    #[test]
    fn hand_built_stat_checks_every_field_position() {
        let line =
            b"42 (x) R 7 8 9 10 11 12 13 14 15 16 1400 1500 1600 1700 -5 -20 2000 0 2200 2300 2400 25\n";
        let stat = parse_stat(line).unwrap();
        assert_eq!(
            stat,
            Stat {
                pid: 42,
                state: b'R',
                ppid: 7,
                flags: 12,
                utime_ticks: 1400,
                stime_ticks: 1500,
                cutime_ticks: 1600,
                cstime_ticks: 1700,
                num_threads: 2000,
                start_time_ticks: 2200,
                vsize_bytes: 2300,
                rss_pages: 2400,
            }
        );
    }

    #[test]
    fn malformed_stat_gives_none() {
        let line = std::str::from_utf8(SLEEP_STAT).unwrap();
        // Every truncation of a real line up to and including rss (field 24) must be rejected,
        // never panic: a cut inside "424" must not read as rss 42.
        let after_rss = line.find(" 424 ").unwrap() + 5;
        for end in 0..=after_rss {
            assert_eq!(parse_stat(&SLEEP_STAT[..end]), None, "prefix {end}");
        }
        assert!(parse_stat(&SLEEP_STAT[..after_rss + 1]).is_some());
        assert_eq!(parse_stat(b""), None);
        assert_eq!(parse_stat(b")("), None);
        assert_eq!(parse_stat(b"x (a) S 1"), None);
        let bad_utime = line.replacen(" 0 0 0 0 20 ", " zz 0 0 0 20 ", 1);
        assert_eq!(parse_stat(bad_utime.as_bytes()), None);
        let negative = line.replacen(" 424 ", " -424 ", 1);
        assert_eq!(parse_stat(negative.as_bytes()), None);
        let huge = line.replacen(" 424 ", " 99999999999999999999999 ", 1);
        assert_eq!(parse_stat(huge.as_bytes()), None);
        assert_eq!(parse_stat(b"1 (a) ) ( SS 1 2 3"), None);
    }

    #[test]
    fn status_gives_vm_hwm_or_none() {
        assert_eq!(parse_status_vm_hwm_kib(SLEEP_STATUS), Some(1804));
        assert_eq!(parse_status_vm_hwm_kib(KTHREAD_STATUS), None);
        assert_eq!(parse_status_vm_hwm_kib(ZOMBIE_STATUS), None);
        assert_eq!(parse_status_vm_hwm_kib(b"VmHWM:\t  12 kB\n"), Some(12));
        assert_eq!(parse_status_vm_hwm_kib(b"VmHWM:\t  12 MB\n"), None);
        assert_eq!(parse_status_vm_hwm_kib(b"VmHWM:\t  x kB\n"), None);
        assert_eq!(parse_status_vm_hwm_kib(b"VmHWM:"), None);
        // A key that only starts with VmHWM is not VmHWM.
        assert_eq!(parse_status_vm_hwm_kib(b"VmHWMx:\t 5 kB\n"), None);
    }

    #[test]
    fn io_counters_parse() {
        assert_eq!(
            parse_io(SLEEP_IO),
            Some(IoCounters {
                read_bytes: 0,
                write_bytes: 0,
                read_syscalls: 10,
                write_syscalls: 0,
            })
        );
        assert_eq!(
            parse_io(KTHREAD_IO).map(|io| io.read_syscalls),
            Some(0),
            "kernel threads print zeros"
        );
        let hand = b"rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 5\nwrite_bytes: 6\ncancelled_write_bytes: 7\n";
        assert_eq!(
            parse_io(hand),
            Some(IoCounters {
                read_bytes: 5,
                write_bytes: 6,
                read_syscalls: 3,
                write_syscalls: 4,
            })
        );
        assert_eq!(parse_io(&hand[..40]), None, "truncated before write_bytes");
        assert_eq!(parse_io(b""), None);
        assert_eq!(
            parse_io(b"syscr: 3\nsyscw: 4\nread_bytes: -5\nwrite_bytes: 6\n"),
            None
        );
    }

    #[test]
    fn schedstat_parses() {
        assert_eq!(
            parse_schedstat(SLEEP_SCHEDSTAT),
            Some(SchedStat {
                run_ns: 701_341,
                wait_ns: 687_110,
            })
        );
        assert!(parse_schedstat(KTHREAD_SCHEDSTAT).is_some());
        assert_eq!(parse_schedstat(b"1 2\n"), None);
        assert_eq!(parse_schedstat(b"1 2 3 4\n"), None);
        assert_eq!(parse_schedstat(b"1 two 3\n"), None);
        assert_eq!(parse_schedstat(b""), None);
    }

    #[test]
    fn smaps_rollup_private_memory() {
        // Private_Clean 0 + Private_Dirty 156 + Private_Hugetlb 0 in the captured file.
        let expected = {
            let text = std::str::from_utf8(SLEEP_SMAPS_ROLLUP).unwrap();
            let get = |key: &str| -> u64 {
                let line = text.lines().find(|l| l.starts_with(key)).unwrap();
                line.split_whitespace().nth(1).unwrap().parse().unwrap()
            };
            get("Private_Clean:") + get("Private_Dirty:") + get("Private_Hugetlb:")
        };
        assert_eq!(
            parse_smaps_rollup_private_kib(SLEEP_SMAPS_ROLLUP),
            Some(expected)
        );
        assert_eq!(
            parse_smaps_rollup_private_kib(b"Private_Clean: 3 kB\nPrivate_Dirty: 4 kB\n"),
            Some(7),
            "Private_Hugetlb is optional"
        );
        assert_eq!(
            parse_smaps_rollup_private_kib(
                b"Private_Clean: 3 kB\nPrivate_Dirty: 4 kB\nPrivate_Hugetlb: 2048 kB\n"
            ),
            Some(2055)
        );
        assert_eq!(parse_smaps_rollup_private_kib(b""), None, "kernel thread");
        assert_eq!(
            parse_smaps_rollup_private_kib(b"Private_Dirty: 4 kB\n"),
            None
        );
        assert_eq!(
            parse_smaps_rollup_private_kib(b"Private_Clean: 4 kB\n"),
            None
        );
        assert_eq!(
            parse_smaps_rollup_private_kib(
                b"Private_Clean: 18446744073709551615 kB\nPrivate_Dirty: 1 kB\n"
            ),
            None,
            "overflow"
        );
        assert_eq!(
            parse_smaps_rollup_private_kib(
                b"Private_Clean: 1 kB\nPrivate_Dirty: 1 kB\nPrivate_Hugetlb: x kB\n"
            ),
            None
        );
    }

    #[test]
    fn children_lists_parse() {
        let mut out = Vec::new();
        assert_eq!(parse_children(b"12 345 6 ", &mut out), Some(()));
        assert_eq!(out, [12, 345, 6]);
        out.clear();
        assert_eq!(parse_children(b"", &mut out), Some(()));
        assert!(out.is_empty());
        assert_eq!(parse_children(b"1 x", &mut out), None);
        assert_eq!(parse_children(b"4294967296", &mut out), None);
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"+1"), None);
        assert_eq!(parse_u64(b" 1"), None);
        assert_eq!(parse_u32(b"4294967295"), Some(u32::MAX));
        assert_eq!(parse_u32(b"4294967296"), None);
    }
}
