//! The syscalls of this module, allocation-free in steady state: `openat` with names formatted on
//! the stack, `pread` into reused buffers, and directory listing with `getdents64` on a held
//! descriptor into a reused buffer (no `DIR*`; a rewind with `lseek` instead of a reopen).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{lseek, Whence};

use crate::source::{Roots, SourceError};

/// Room for about a thousand `/proc` entries per `getdents64` call.
const DIRENT_BUFFER_BYTES: usize = 32 * 1024;

/// Offsets inside `struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }`.
const RECLEN_OFFSET: usize = 16;
const TYPE_OFFSET: usize = 18;
const NAME_OFFSET: usize = 19;

/// `d_type` of a directory (`DT_DIR`).
pub(crate) const DT_DIR: u8 = 4;

/// A reused buffer for `getdents64`.
#[derive(Debug, Default)]
pub(crate) struct DirentBuffer {
    buf: Vec<u8>,
}

impl DirentBuffer {
    /// Lists the directory open on `dir` from its start, calling `entry` with each name (without
    /// the trailing NUL), `.` and `..` included. The first call allocates the buffer; later ones
    /// reuse it.
    pub(crate) fn for_each(
        &mut self,
        dir: BorrowedFd<'_>,
        mut entry: impl FnMut(&[u8]),
    ) -> io::Result<()> {
        self.for_each_typed(dir, |name, _| entry(name))
    }

    /// Like [`Self::for_each`], also passing each entry's `d_type` (`DT_DIR`, ...; 0 when the
    /// file system does not say).
    pub(crate) fn for_each_typed(
        &mut self,
        dir: BorrowedFd<'_>,
        mut entry: impl FnMut(&[u8], u8),
    ) -> io::Result<()> {
        if self.buf.len() < DIRENT_BUFFER_BYTES {
            self.buf.resize(DIRENT_BUFFER_BYTES, 0);
        }
        lseek(dir, 0, Whence::SeekSet).map_err(io::Error::from)?;
        loop {
            // SAFETY: the pointer and length describe `self.buf`, which is valid for writes of
            // its whole length and outlives the call; the kernel writes at most that many bytes.
            let read = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    dir.as_raw_fd(),
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            };
            if read < 0 {
                let error = io::Error::last_os_error();
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(error);
            }
            let filled = usize::try_from(read).unwrap_or(0).min(self.buf.len());
            if filled == 0 {
                return Ok(());
            }
            let mut offset = 0;
            while let Some(record) = self.buf.get(offset..filled) {
                let Some(reclen) = record
                    .get(RECLEN_OFFSET..RECLEN_OFFSET + 2)
                    .map(|bytes| usize::from(u16::from_ne_bytes([bytes[0], bytes[1]])))
                else {
                    break;
                };
                if reclen <= NAME_OFFSET || reclen > record.len() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "getdents64 returned a malformed record",
                    ));
                }
                let name = &record[NAME_OFFSET..reclen];
                let name = name
                    .iter()
                    .position(|&b| b == 0)
                    .map_or(name, |end| &name[..end]);
                entry(name, record[TYPE_OFFSET]);
                offset += reclen;
            }
        }
    }
}

/// True for `.` and `..`.
pub(crate) fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

/// Opens the proc root of `roots`, returning its path (for error messages) and descriptor.
pub(crate) fn open_proc_root(roots: &Roots) -> Result<(PathBuf, OwnedFd), SourceError> {
    let proc_root = roots.proc.clone();
    let proc_dir = File::open(&proc_root)
        .map(OwnedFd::from)
        .map_err(|error| SourceError::io(&proc_root, error))?;
    Ok((proc_root, proc_dir))
}

/// Whether `dir` is on procfs (a live proc root) rather than a fixture tree: only procfs gives
/// directory sizes and link counts their procfs meanings (open descriptors, threads).
pub(crate) fn is_procfs(dir: &OwnedFd) -> bool {
    nix::sys::statfs::fstatfs(dir)
        .is_ok_and(|statfs| statfs.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

/// Opens the directory `name` relative to `dir` (close-on-exec).
pub(crate) fn open_dir_at(dir: impl AsFd, name: &[u8]) -> io::Result<OwnedFd> {
    openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Opens the file `name` relative to `dir` for reading (close-on-exec).
pub(crate) fn open_file_at(dir: impl AsFd, name: &[u8]) -> io::Result<std::fs::File> {
    openat(dir, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map(std::fs::File::from)
        .map_err(io::Error::from)
}

pub(crate) use crate::source::file::pread_all;

/// Formats path components like `1234/task/5678/children` into a stack buffer, so that opening a
/// pid's file needs no heap allocation.
#[derive(Debug)]
pub(crate) struct PathName {
    buf: [u8; 96],
    len: usize,
}

impl PathName {
    /// An empty name.
    pub(crate) fn new() -> Self {
        Self {
            buf: [0; 96],
            len: 0,
        }
    }

    /// Appends a decimal number.
    pub(crate) fn number(mut self, value: u32) -> Self {
        let mut digits = [0u8; 10];
        let mut start = digits.len();
        let mut rest = value;
        loop {
            start -= 1;
            // `rest % 10` is below 10, so the cast cannot truncate.
            digits[start] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
        }
        self.push(&digits[start..]);
        self
    }

    /// Appends raw bytes (a separator or a file name).
    pub(crate) fn text(mut self, bytes: &[u8]) -> Self {
        self.push(bytes);
        self
    }

    fn push(&mut self, bytes: &[u8]) {
        // Names built here are at most "<u32>/task/<u32>/children" (30 bytes), far below the
        // buffer; anything longer is cut, which makes the open fail rather than overflow.
        let end = (self.len + bytes.len()).min(self.buf.len());
        let take = end - self.len;
        self.buf[self.len..end].copy_from_slice(&bytes[..take]);
        self.len = end;
    }

    /// The bytes written so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_a_directory_repeatedly_with_one_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        // About 64 bytes per record: 1000 entries need several getdents64 calls.
        for i in 0..1000 {
            std::fs::write(
                dir.path().join(format!("entry-with-a-longish-name-{i}")),
                b"",
            )
            .unwrap();
        }
        let fd = open_dir_at(
            std::fs::File::open("/").unwrap(),
            dir.path().as_os_str().as_encoded_bytes(),
        )
        .unwrap();
        let mut buffer = DirentBuffer::default();
        for _ in 0..3 {
            let mut names = Vec::new();
            buffer
                .for_each(fd.as_fd(), |name| {
                    if !is_dot(name) {
                        names.push(String::from_utf8(name.to_vec()).unwrap());
                    }
                })
                .unwrap();
            names.sort();
            let mut expected: Vec<String> = (0..1000)
                .map(|i| format!("entry-with-a-longish-name-{i}"))
                .collect();
            expected.sort();
            assert_eq!(names, expected);
        }
    }

    #[test]
    fn path_names_format_numbers() {
        let name = PathName::new()
            .number(0)
            .text(b"/")
            .number(u32::MAX)
            .text(b"/task/")
            .number(1234)
            .text(b"/children");
        assert_eq!(name.as_bytes(), b"0/4294967295/task/1234/children");
    }
}
