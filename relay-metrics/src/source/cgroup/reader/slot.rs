//! One held interface file and the rules for reading it: missing, unreadable or gone.

use std::path::{Path, PathBuf};

use super::super::parse::{parse_u64_trimmed, LimitValue};
use super::super::target::CgroupDir;
use super::super::CgroupError;
use super::Io;
use crate::source::file::{HeldFile, SourceError};

/// One interface file of one cgroup directory.
#[derive(Debug)]
pub(super) struct Slot {
    file: HeldFile,
    /// The cgroup directory the read is about (the leaf, also for ancestor files): when it has
    /// disappeared the whole target is gone.
    leaf: PathBuf,
    /// Set once the file was missing while its cgroup existed; it is not probed again.
    absent: bool,
}

pub(super) enum Outcome<'b> {
    Data(&'b [u8]),
    Absent,
    Unreadable,
}

impl Slot {
    pub(super) fn new(dir: &Path, name: &str, leaf: &Path) -> Self {
        Self {
            file: HeldFile::new(dir.join(name)),
            leaf: leaf.to_path_buf(),
            absent: false,
        }
    }

    pub(super) fn leaf_file(dir: &CgroupDir, name: &str) -> Self {
        Self::new(&dir.dir, name, &dir.dir)
    }

    /// The file `name` in `dir` and each ancestor up to the mount point, leaf first.
    pub(super) fn chain(dir: &CgroupDir, name: &str) -> Vec<Self> {
        dir.levels()
            .map(|level| Self::new(level, name, &dir.dir))
            .collect()
    }

    pub(super) fn read<'b>(&mut self, buf: &'b mut Vec<u8>, got_data: &mut bool) -> ReadResult<'b> {
        if self.absent {
            return Ok(Outcome::Absent);
        }
        let mut retried = false;
        loop {
            match self.file.read(buf) {
                Ok(_) => break,
                Err(error) => {
                    let errno = match &error {
                        SourceError::Io { source, .. } => source.raw_os_error(),
                        SourceError::Malformed { .. } => None,
                    };
                    // A held descriptor of a removed cgroup reads ENODEV; an open of a file
                    // in a removed directory fails with ENOENT.
                    let vanished = matches!(errno, Some(libc::ENOENT) | Some(libc::ENODEV));
                    if !vanished {
                        return Ok(Outcome::Unreadable);
                    }
                    if !self.leaf.exists() {
                        return Err(CgroupError::Gone {
                            path: self.leaf.clone(),
                        });
                    }
                    if errno == Some(libc::ENOENT) {
                        self.absent = true;
                        return Ok(Outcome::Absent);
                    }
                    // ENODEV while the directory exists: the cgroup was removed and created
                    // again under the same name; the descriptor was dropped, so reopen once.
                    if retried {
                        return Ok(Outcome::Unreadable);
                    }
                    retried = true;
                }
            }
        }
        *got_data = true;
        Ok(Outcome::Data(buf.as_slice()))
    }
}

pub(super) type ReadResult<'b> = Result<Outcome<'b>, CgroupError>;

pub(super) fn data<'b>(
    slot: Option<&mut Slot>,
    buf: &'b mut Vec<u8>,
    got: &mut bool,
) -> ReadResult<'b> {
    match slot {
        Some(slot) => slot.read(buf, got),
        None => Ok(Outcome::Absent),
    }
}

/// Min over a chain of limit files. `Absent` levels are skipped; an unreadable or invalid level
/// makes the whole limit `None`, as in Relay: a partial minimum could be a wrong number.
pub(super) fn chain_min(
    chain: &mut [Slot],
    io: &mut Io<'_>,
    parse: fn(&[u8]) -> Option<LimitValue>,
) -> Result<Option<u64>, CgroupError> {
    let mut min: Option<u64> = None;
    for slot in chain {
        match slot.read(io.buf, &mut io.got_data)? {
            Outcome::Absent => {}
            Outcome::Unreadable => return Ok(None),
            Outcome::Data(bytes) => match parse(bytes) {
                None => return Ok(None),
                Some(LimitValue::Unlimited) => {}
                Some(LimitValue::Value(value)) => {
                    min = Some(min.map_or(value, |m| m.min(value)));
                }
            },
        }
    }
    Ok(min)
}

pub(super) fn read_u64(slot: &mut Slot, io: &mut Io<'_>) -> Result<Option<u64>, CgroupError> {
    Ok(match slot.read(io.buf, &mut io.got_data)? {
        Outcome::Data(bytes) => parse_u64_trimmed(bytes),
        Outcome::Absent | Outcome::Unreadable => None,
    })
}
