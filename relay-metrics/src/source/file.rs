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

/// A kernel file kept open between reads.
#[derive(Debug)]
pub struct HeldFile {
    path: PathBuf,
    file: Option<File>,
    /// The descriptor in the process-wide count of held ones (see [`crate::source::held`]).
    published: Published,
}

impl HeldFile {
    /// Remembers `path`; the file is opened on the first read.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
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
        let result = match &self.file {
            Some(file) => pread_all(file, buf).map(|_| ()),
            None => match File::open(&self.path) {
                Ok(file) => {
                    let result = pread_all(&file, buf).map(|_| ());
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

/// Reads `path` once (open, read, close) into `buf`: for files read rarely.
pub(crate) fn read_once<'b>(path: &Path, buf: &'b mut Vec<u8>) -> Result<&'b [u8], SourceError> {
    let file = File::open(path).map_err(|error| SourceError::io(path, error))?;
    pread_all(&file, buf).map_err(|error| SourceError::io(path, error))?;
    Ok(buf.as_slice())
}

/// `pread` from offset 0 until end of file into `buf` (cleared, capacity kept), growing it only
/// when the content does not fit. procfs and sysfs regenerate a file on every read from
/// offset 0. Reads go straight into the buffer's spare capacity (rustix's `spare_capacity`):
/// zero-filling it first cost more than the copy itself on every read.
pub fn pread_all<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let spare = buf.capacity() - buf.len();
        let offset = u64::try_from(buf.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large"))?;
        let read = match rustix::io::pread(file, rustix::buffer::spare_capacity(buf), offset) {
            Ok(read) => read,
            Err(rustix::io::Errno::INTR) => continue,
            Err(errno) => return Err(errno.into()),
        };
        if read == 0 || read < spare {
            return Ok(buf.as_slice());
        }
        buf.reserve(buf.capacity());
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
        let mut held = HeldFile::new(&path);
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
    fn a_missing_file_is_reported_as_gone() {
        let mut held = HeldFile::new("/nonexistent/relay-metrics-test");
        let error = held.read(&mut Vec::new()).unwrap_err();
        assert!(error.is_gone());
        assert!(error
            .to_string()
            .contains("/nonexistent/relay-metrics-test"));
    }
}
