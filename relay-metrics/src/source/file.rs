//! Reading kernel files cheaply: open once, re-read with `pread(fd, buf, 0)` into a reused buffer.
//! procfs and sysfs files regenerate their content on every read from offset 0, so a held
//! descriptor always sees fresh values and saves the open/close pair (most of a read's cost).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::held::Published;

/// A failed read of a kernel file or syscall, with the path it concerned.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// An I/O error on `path`.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The content of `path` could not be parsed.
    #[error("{path}: malformed content: {reason}")]
    Malformed {
        /// The file concerned.
        path: PathBuf,
        /// What was wrong.
        reason: String,
    },
}

impl SourceError {
    /// Builds an I/O error for `path`.
    pub fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds a parse error for `path`.
    pub fn malformed(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::Malformed {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// True when the object is gone (ENOENT, ESRCH): a process exited or a cgroup was removed.
    /// Such errors are expected during churn and are not reported as failures.
    pub fn is_gone(&self) -> bool {
        match self {
            Self::Io { source, .. } => is_gone(source),
            Self::Malformed { .. } => false,
        }
    }
}

/// ENOENT and ESRCH both mean "the process (or cgroup) went away".
pub(crate) fn is_gone(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOENT) | Some(libc::ESRCH))
        || error.kind() == io::ErrorKind::NotFound
}

/// How the kernel hands out a file, which decides when a read has all of it.
///
/// Every reader names the kind of the file it reads where it opens it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// The kernel writes the whole content before the first byte is copied out: a `single_open`
    /// seq_file (`/proc/stat`, `meminfo`, `/proc/<pid>/status`, `smaps_rollup`, pressure), a
    /// sysfs attribute, or a cgroup file printed by one `show` (`memory.*`, `cpu.stat`,
    /// `io.stat`, `blkio.*`). One `pread` into a buffer with room to spare has all of it, so the
    /// reads per sample stay at one.
    Whole,
    /// A seq_file that prints one record at a time (`/proc/net/dev`, `cgroup.procs`,
    /// `mountinfo`, `diskstats`, `/proc/vmstat`, `task/<tid>/children`, a tracefs `format`):
    /// each `read` hands out about one page whatever the buffer's size, so only a read of 0 is
    /// the end.
    Records,
}

/// A kernel file kept open between reads.
#[derive(Debug)]
pub struct HeldFile {
    path: PathBuf,
    kind: FileKind,
    file: Option<File>,
    /// The descriptor in the process-wide count of held ones (see [`crate::source::held`]).
    published: Published,
}

impl HeldFile {
    /// Remembers `path`, a file of `kind`; the file is opened on the first read.
    pub fn new(path: impl Into<PathBuf>, kind: FileKind) -> Self {
        Self {
            path: path.into(),
            kind,
            file: None,
            published: Published::default(),
        }
    }

    /// The path this file reads.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True while a descriptor is held.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// Drops the descriptor (it is reopened on the next read).
    pub fn close(&mut self) {
        self.file = None;
        self.published.set(0);
    }

    /// Reads the whole file into `buf` (cleared first, capacity kept) and returns the bytes.
    /// On error the descriptor is dropped so that the next read reopens the path.
    pub fn read<'b>(&mut self, buf: &'b mut Vec<u8>) -> Result<&'b [u8], SourceError> {
        let kind = self.kind;
        let result = match &self.file {
            Some(file) => pread_kind(file, kind, buf).map(|_| ()),
            None => match File::open(&self.path) {
                Ok(file) => {
                    let result = pread_kind(&file, kind, buf).map(|_| ());
                    self.file = Some(file);
                    self.published.set(1);
                    result
                }
                Err(error) => Err(error),
            },
        };
        match result {
            Ok(()) => Ok(buf.as_slice()),
            Err(error) => {
                self.close();
                Err(SourceError::io(&self.path, error))
            }
        }
    }
}

/// Reads `path` once (open, read until a read of 0, close) into `buf`: for files read rarely,
/// where one more `read` costs nothing that matters, so the file's kind need not be known.
pub(crate) fn read_once<'b>(path: &Path, buf: &'b mut Vec<u8>) -> Result<&'b [u8], SourceError> {
    let file = File::open(path).map_err(|error| SourceError::io(path, error))?;
    pread_all(&file, buf).map_err(|error| SourceError::io(path, error))?;
    Ok(buf.as_slice())
}

/// Reads a file of `kind` from offset 0: [`pread_whole`] or [`pread_all`].
fn pread_kind<'b>(file: &File, kind: FileKind, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    match kind {
        FileKind::Whole => pread_whole(file, buf),
        FileKind::Records => pread_all(file, buf),
    }
}

/// `pread` from offset 0 until a read of 0 (the end of file) into `buf` (cleared, capacity
/// kept), growing it only when the content does not fit. Right for every file, and needed for a
/// [`FileKind::Records`] one, which hands out about a page per read: a short read is not the end.
/// procfs and sysfs regenerate a file on every read from offset 0.
pub fn pread_all<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    pread_from_start(file, buf, false)
}

/// `pread` from offset 0 of a [`FileKind::Whole`] file: a read that leaves room in the buffer
/// has all of it (one syscall); one that fills the buffer grows it and reads on.
pub fn pread_whole<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    pread_from_start(file, buf, true)
}

/// Reads go straight into the buffer's spare capacity (rustix's `spare_capacity`): zero-filling
/// it first cost more than the copy itself on every read.
fn pread_from_start<'b>(
    file: &File,
    buf: &'b mut Vec<u8>,
    short_read_is_end: bool,
) -> io::Result<&'b [u8]> {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.capacity());
        }
        let spare = buf.capacity() - buf.len();
        let offset = u64::try_from(buf.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let read = match rustix::io::pread(file, rustix::buffer::spare_capacity(buf), offset) {
            Ok(read) => read,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        if read == 0 || (short_read_is_end && read < spare) {
            return Ok(buf.as_slice());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rereads_fresh_content_through_a_held_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        let mut held = HeldFile::new(&path, FileKind::Whole);
        let mut buf = Vec::new();
        assert_eq!(held.read(&mut buf).unwrap(), b"one");
        let mut file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all(b"two").unwrap();
        assert_eq!(held.read(&mut buf).unwrap(), b"two");
        assert!(held.is_open());
    }

    #[test]
    fn reads_content_larger_than_the_initial_buffer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        let content: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &content).unwrap();
        let mut buf = Vec::new();
        assert_eq!(read_once(&path, &mut buf).unwrap(), content.as_slice());
    }

    #[test]
    #[ignore = "root: makes a network namespace with 300 interfaces"]
    fn a_records_file_is_read_to_its_end_and_a_whole_file_in_one_read() {
        let interfaces = crate::long_files::Interfaces::new(300);
        let path = interfaces.proc_dir().join("net/dev");
        let oracle = std::fs::read(&path).unwrap();
        assert!(
            oracle.len() > 4 * crate::long_files::PAGE,
            "{}",
            oracle.len()
        );
        let mut held = HeldFile::new(&path, FileKind::Records);
        let mut buf = Vec::new();
        assert_eq!(held.read(&mut buf).unwrap(), oracle.as_slice());
        assert_eq!(held.read(&mut buf).unwrap(), oracle.as_slice());
        assert_eq!(read_once(&path, &mut buf).unwrap(), oracle.as_slice());
        // The kernel fact the kinds stand for: one read of a record-by-record seq_file is short
        // (about a page), whatever the buffer.
        let file = File::open(&path).unwrap();
        let first = pread_whole(&file, &mut buf).unwrap().len();
        assert!(
            first <= crate::long_files::PAGE,
            "one read gave {first} bytes"
        );
        // A whole file: one read into a buffer with room to spare has it all.
        let stat = std::fs::read("/proc/self/stat").unwrap();
        let mut whole = HeldFile::new("/proc/self/stat", FileKind::Whole);
        let read = whole.read(&mut buf).unwrap();
        assert_eq!(
            read.split(|b| *b == b' ').count(),
            stat.split(|b| *b == b' ').count()
        );
    }

    #[test]
    fn a_missing_file_is_reported_as_gone() {
        let mut held = HeldFile::new("/nonexistent/relay-metrics-test", FileKind::Whole);
        let error = held.read(&mut Vec::new()).unwrap_err();
        assert!(error.is_gone());
        assert!(error
            .to_string()
            .contains("/nonexistent/relay-metrics-test"));
    }

    /// A tracefs `format` is a record-by-record seq_file (a field per record): the longest one
    /// of this host's kernel (dma/dma_alloc_sgt, 5.5 KiB, on 6.18) comes a few hundred bytes per
    /// read, and the eBPF set-up reads it whole. (The VM's 6.1 hands out its longest, 4,040
    /// bytes, in one read: this test is the host's, outside the `source::ebpf` tests the VM runs.)
    #[test]
    #[ignore = "root: reads tracefs"]
    fn the_longest_tracefs_format_is_read_whole_as_root() {
        let tracing = std::path::Path::new("/sys/kernel/tracing/events");
        let mut longest: Option<(Vec<u8>, std::path::PathBuf)> = None;
        for category in std::fs::read_dir(tracing).expect("tracefs mounted") {
            let Ok(events) = std::fs::read_dir(category.expect("entry").path()) else {
                continue;
            };
            for event in events {
                let path = event.expect("entry").path().join("format");
                if let Ok(content) = std::fs::read(&path) {
                    if longest
                        .as_ref()
                        .is_none_or(|(l, _)| content.len() > l.len())
                    {
                        longest = Some((content, path));
                    }
                }
            }
        }
        let (oracle, long) = longest.expect("some event format");
        let mut one_read = Vec::new();
        let first = pread_whole(&std::fs::File::open(&long).expect("format"), &mut one_read)
            .expect("one read")
            .len();
        assert!(
            first < oracle.len(),
            "{}: one read gave all {first} bytes",
            long.display()
        );
        let events = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(events.path().join("sched/sched_switch")).expect("mkdir");
        std::os::unix::fs::symlink(&long, events.path().join("sched/sched_switch/format"))
            .expect("symlink");
        let formats = crate::source::ebpf::read_formats(events.path());
        assert_eq!(formats.switch, oracle, "{}", long.display());
    }
}
