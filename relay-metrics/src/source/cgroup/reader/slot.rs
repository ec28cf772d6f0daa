//! One held interface file and the rules for reading it: missing, unreadable or gone.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::super::parse::{parse_u64_trimmed, LimitValue};
use super::super::target::CgroupDir;
use super::super::CgroupError;
use super::Io;
use crate::source::file::{FileKind, HeldFile, SourceError};

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
            file: HeldFile::new(dir.join(name), FileKind::Whole),
            leaf: leaf.to_path_buf(),
            absent: false,
        }
    }

    pub(super) fn leaf_file(dir: &CgroupDir, name: &str) -> Self {
        Self::new(&dir.dir, name, &dir.dir)
    }

    /// The setting `name` in `dir` and each ancestor up to the mount point that can hold a limit
    /// ([`limit_levels`]), leaf first.
    pub(super) fn chain(dir: &CgroupDir, name: &str) -> Vec<Self> {
        limit_levels(dir)
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

/// The levels of `dir` whose settings can be a limit, leaf first: each level up to the mount
/// point except the root of a v1 hierarchy (the only directory with `release_agent`). The kernel
/// refuses a memory limit or a CFS quota on the root cgroup (`EINVAL`, also for `-1`), so there
/// `memory.limit_in_bytes` is always unlimited and `cpu.cfs_quota_us` always -1, and `pids.max`
/// does not exist: reading them could not change a minimum. The unified hierarchy's root has
/// none of its limit files (`memory.max`, `cpu.max`, `pids.max`) and is probed once as absent.
/// Each level is checked once, when the plan is built.
pub(super) fn limit_levels(dir: &CgroupDir) -> impl Iterator<Item = &Path> {
    dir.levels()
        .filter(|level| !level.join("release_agent").exists())
}

pub(super) type ReadResult<'b> = Result<Outcome<'b>, CgroupError>;

/// A limit as last read, with whether its files gave data and when it was read: reused while
/// younger than [`LIMITS_MAX_AGE`](super::LIMITS_MAX_AGE).
#[derive(Debug)]
pub(super) struct Kept<T> {
    last: Option<(T, bool, Instant)>,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Self { last: None }
    }
}

impl<T: Copy> Kept<T> {
    /// The kept value while it is young enough, else the value `read` reads now (kept for the
    /// next reads). `io.got_data` is set as if the files had been read: a group whose only
    /// readable files are its limits still reports its version.
    pub(super) fn get(
        &mut self,
        io: &mut Io<'_>,
        read: impl FnOnce(&mut Io<'_>) -> Result<T, CgroupError>,
    ) -> Result<T, CgroupError> {
        if let Some((value, got_data, at)) = self.last {
            if io.now.saturating_duration_since(at) < super::LIMITS_MAX_AGE {
                io.got_data |= got_data;
                return Ok(value);
            }
        }
        let before = io.got_data;
        io.got_data = false;
        let result = read(io);
        let got_data = io.got_data;
        io.got_data |= before;
        let value = result?;
        self.last = Some((value, got_data, io.now));
        Ok(value)
    }
}

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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::super::super::parse::parse_v1_memory_limit;
    use super::*;

    /// An [`Io`] over `buffers` at `now`, with no data yet.
    fn io_at<'a>(buffers: &'a mut (Vec<u8>, Vec<u8>), now: Instant) -> Io<'a> {
        Io {
            buf: &mut buffers.0,
            second: &mut buffers.1,
            got_data: false,
            now,
        }
    }

    fn min_of(dir: &CgroupDir) -> Option<u64> {
        let mut chain = Slot::chain(dir, "memory.limit_in_bytes");
        let mut buffers = Default::default();
        let mut io = io_at(&mut buffers, Instant::now());
        chain_min(&mut chain, &mut io, parse_v1_memory_limit).unwrap()
    }

    #[test]
    fn a_kept_limit_is_read_again_once_it_is_limits_max_age_old() {
        let mut buffers = Default::default();
        let start = Instant::now();
        let mut io = io_at(&mut buffers, start);
        let mut kept = Kept::default();
        let mut reads = 0;
        let mut get = |io: &mut Io<'_>, value: u64| {
            kept.get(io, |io| {
                reads += 1;
                io.got_data = true;
                Ok(value)
            })
            .unwrap()
        };
        assert_eq!(get(&mut io, 1), 1);
        io.got_data = false;
        io.now = start + super::super::LIMITS_MAX_AGE - std::time::Duration::from_nanos(1);
        assert_eq!(get(&mut io, 2), 1, "younger than the age: kept");
        assert!(io.got_data, "a kept limit that had data counts as data");
        io.now = start + super::super::LIMITS_MAX_AGE;
        assert_eq!(get(&mut io, 3), 3, "as old as the age: read again");
        assert_eq!(reads, 2);
    }

    #[test]
    fn a_kept_limit_whose_read_failed_is_read_again() {
        let mut buffers = Default::default();
        let mut io = io_at(&mut buffers, Instant::now());
        io.got_data = true;
        let mut kept: Kept<u64> = Kept::default();
        let gone = kept.get(&mut io, |_| {
            Err(CgroupError::Gone {
                path: PathBuf::from("/w"),
            })
        });
        assert!(gone.is_err());
        assert!(io.got_data, "the data of earlier files is kept");
        assert_eq!(kept.get(&mut io, |_| Ok(7)).unwrap(), 7);
    }

    #[test]
    fn a_v1_hierarchy_root_is_no_limit_level() {
        let base = tempfile::tempdir().unwrap();
        let root = base.path();
        let parent = root.join("a");
        let leaf = parent.join("b");
        fs::create_dir_all(&leaf).unwrap();
        // A limit no kernel shows at a root: while the root is a level, its 4096 is the minimum.
        for (dir, limit) in [(root, "4096\n"), (&parent, "16384\n"), (&leaf, "8192\n")] {
            fs::write(dir.join("memory.limit_in_bytes"), limit).unwrap();
        }
        let dir = CgroupDir {
            path: "/a/b".into(),
            dir: leaf.clone(),
            mount_point: root.to_path_buf(),
        };
        assert_eq!(limit_levels(&dir).count(), 3);
        assert_eq!(min_of(&dir), Some(4096), "no release_agent: every level");

        fs::write(root.join("release_agent"), "\n").unwrap();
        let levels: Vec<_> = limit_levels(&dir).collect();
        assert_eq!(levels, vec![leaf.as_path(), parent.as_path()]);
        assert_eq!(min_of(&dir), Some(8192));
        // The root as the target itself: no level can hold a limit.
        let top = CgroupDir {
            path: "/".into(),
            dir: root.to_path_buf(),
            mount_point: root.to_path_buf(),
        };
        assert_eq!(limit_levels(&top).count(), 0);
        assert_eq!(min_of(&top), None);
    }
}
