//! `/proc/vmstat`: the machine's event counters since boot.

use std::path::Path;

use super::parse::{fields, lines, parse_u64};
use crate::source::file::{FileKind, HeldFile, SourceError};
use crate::source::roots::Roots;

/// `/proc/vmstat`'s `oom_kill`, through a descriptor held open between reads.
#[derive(Debug)]
pub(crate) struct OomKillReader {
    /// A seq_file printed record by record (~4 KiB of per-CPU sums): read until a read of 0.
    file: HeldFile,
    buf: Vec<u8>,
}

impl OomKillReader {
    /// The file of `roots`; it is opened on the first read.
    pub(crate) fn new(roots: &Roots) -> Self {
        Self {
            file: HeldFile::new(roots.proc.join("vmstat"), FileKind::Records),
            buf: Vec::with_capacity(8 * 1024),
        }
    }

    /// The OOM kills since boot: `Ok(None)` when the file has no `oom_kill` counter.
    pub(crate) fn read(&mut self) -> Result<Option<u64>, SourceError> {
        self.file.read(&mut self.buf).map(parse_vmstat_oom_kill)
    }

    /// The file read.
    pub(crate) fn path(&self) -> &Path {
        self.file.path()
    }
}

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
    use super::*;

    /// `/proc/vmstat` is a record-by-record seq_file (one counter per record), 4,062 bytes on
    /// this 6.18 host: under a page here, but past one on kernels with more counters, where
    /// `oom_kill` (byte ~2,500 here) can fall in the second page. It is read to its end; the
    /// read path is the one tested on multi-page files in `source::file`.
    #[test]
    fn the_oom_kill_count_is_the_whole_files() {
        let oracle = || {
            parse_vmstat_oom_kill(&std::fs::read("/proc/vmstat").unwrap())
                .expect("oom_kill in /proc/vmstat")
        };
        let mut reader = OomKillReader::new(&Roots::host());
        // Other tests may OOM-kill meanwhile: the read lies between two whole-file reads.
        let before = oracle();
        let read = reader.read().unwrap().expect("a count");
        let after = oracle();
        assert!(
            before <= read && read <= after,
            "{before} <= {read} <= {after}"
        );
    }

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
