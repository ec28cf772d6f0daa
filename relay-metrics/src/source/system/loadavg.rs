//! `/proc/loadavg`: its fourth field, `running/total`, counts the tasks alive now (threads
//! included). Cumulative accounting takes the exits from it (tasks created − tasks alive), the
//! process pass's source choice weighs the task iterator's cost by it.

use super::parse::{fields, parse_u64};
use crate::source::file::{FileKind, HeldFile};
use crate::source::roots::Roots;

/// `/proc/loadavg`, held open between reads.
#[derive(Debug)]
pub(crate) struct LoadavgReader {
    file: HeldFile,
    buf: Vec<u8>,
}

impl LoadavgReader {
    /// The file of `roots`; it is opened on the first read.
    pub(crate) fn new(roots: &Roots) -> Self {
        Self {
            file: HeldFile::new(roots.proc.join("loadavg"), FileKind::Whole),
            buf: Vec::new(),
        }
    }

    /// The tasks alive now; `None` when the file cannot be read or parsed.
    pub(crate) fn tasks(&mut self) -> Option<u64> {
        self.file
            .read(&mut self.buf)
            .ok()
            .and_then(parse_loadavg_tasks)
    }
}

/// The 4th field of `/proc/loadavg`, `running/total`: the tasks alive now.
pub(crate) fn parse_loadavg_tasks(bytes: &[u8]) -> Option<u64> {
    let field = fields(bytes).nth(3)?;
    let slash = field.iter().position(|b| *b == b'/')?;
    parse_u64(&field[slash + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loadavg_gives_the_live_task_count() {
        assert_eq!(
            parse_loadavg_tasks(b"16.45 14.16 10.05 17/237 21993\n"),
            Some(237)
        );
        assert_eq!(parse_loadavg_tasks(b"garbage"), None);
        assert_eq!(parse_loadavg_tasks(b"0.00 0.00 0.00 1/ 5\n"), None);
    }

    #[test]
    fn the_reader_reads_the_fixture_roots_file_again_on_each_call() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("proc")).unwrap();
        let path = dir.path().join("proc/loadavg");
        std::fs::write(&path, "0.10 0.20 0.30 2/150 999\n").unwrap();
        let mut reader = LoadavgReader::new(&Roots::fixture(dir.path()));
        assert_eq!(reader.tasks(), Some(150));
        std::fs::write(&path, "0.10 0.20 0.30 2/151 999\n").unwrap();
        assert_eq!(reader.tasks(), Some(151));
    }
}
