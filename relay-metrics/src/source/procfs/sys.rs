//! The syscalls of this module, allocation-free in steady state: `openat` with names formatted on
//! the stack, `pread` into reused buffers, and directory listing with `getdents64` (rustix's
//! `RawDir`) on a held descriptor into a reused buffer (no `DIR*`; a rewind with `lseek` instead
//! of a reopen).

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{lseek, Whence};
use rustix::fs::{FileType, RawDir};

use crate::source::{Roots, SourceError};

/// Room for about a thousand `/proc` entries per `getdents64` call.
const DIRENT_BUFFER_BYTES: usize = 32 * 1024;

/// A reused buffer for `getdents64`.
#[derive(Debug, Default)]
pub struct DirentBuffer {
    buf: Vec<MaybeUninit<u8>>,
}

impl DirentBuffer {
    /// Lists the directory open on `dir` from its start, calling `entry` with each name (without
    /// the trailing NUL), `.` and `..` included. The first call allocates the buffer; later ones
    /// reuse it.
    pub fn for_each(
        &mut self,
        dir: BorrowedFd<'_>,
        mut entry: impl FnMut(&[u8]),
    ) -> io::Result<()> {
        self.for_each_typed(dir, |name, _| entry(name))
    }

    /// Like [`Self::for_each`], also passing whether each entry is a directory (`false` also
    /// when the file system does not say).
    pub(crate) fn for_each_typed(
        &mut self,
        dir: BorrowedFd<'_>,
        mut entry: impl FnMut(&[u8], bool),
    ) -> io::Result<()> {
        self.for_each_with_inode(dir, |name, is_dir, _| entry(name, is_dir))
    }

    /// Like [`Self::for_each_typed`], also passing each entry's inode number (on cgroupfs a
    /// cgroup directory's is the kernel's cgroup id).
    pub(crate) fn for_each_with_inode(
        &mut self,
        dir: BorrowedFd<'_>,
        mut entry: impl FnMut(&[u8], bool, u64),
    ) -> io::Result<()> {
        if self.buf.len() < DIRENT_BUFFER_BYTES {
            self.buf.resize(DIRENT_BUFFER_BYTES, MaybeUninit::uninit());
        }
        lseek(dir, 0, Whence::SeekSet).map_err(io::Error::from)?;
        let mut listing = RawDir::new(dir, &mut self.buf);
        loop {
            match listing.next() {
                None => return Ok(()),
                Some(Ok(found)) => entry(
                    found.file_name().to_bytes(),
                    found.file_type() == FileType::Directory,
                    found.ino(),
                ),
                // Nothing was consumed: the next call repeats the same getdents64.
                Some(Err(rustix::io::Errno::INTR)) => {}
                Some(Err(errno)) => return Err(errno.into()),
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

pub(crate) use crate::source::file::{pread_all, pread_whole};

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
