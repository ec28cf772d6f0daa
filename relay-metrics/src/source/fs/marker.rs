//! One abandoned helper per hung mount on the machine, whatever the number of processes asking.
//!
//! A helper stuck in `statfs` outlives the process that started it (no signal ends the wait).
//! Within one process the refresher does not ask a path again until its helper returns; across
//! processes, each short-lived `snapshot` would otherwise leave one more. So each mount has a
//! marker file, in `/run/relay-metrics/statfs` for root (`$XDG_RUNTIME_DIR/relay-metrics/statfs`
//! for others; without one there is no marker, as before), named by the mount's id (unique on
//! the machine while mounted). A process asks a mount only while holding the file's `flock`;
//! when its helper is abandoned the file keeps the helper's pid and start time, and the next
//! process that finds that helper still stuck does not start another. When the mount recovers
//! the helper returns and exits (its parent, or init once that parent is gone, reaps it), and
//! the marker goes stale: its pid is gone, or is a zombie, or was reused by a process with
//! another start time. A file whose mount's helper answered is removed.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A helper recorded in a marker that is still stuck.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StuckHelper {
    pub(super) pid: i32,
    /// Seconds since its call was made.
    pub(super) stuck_for_s: u64,
}

/// The directory of the markers, created if missing; `None` where there is no private place.
pub(super) fn directory() -> Option<PathBuf> {
    let base = if nix::unistd::geteuid().is_root() {
        PathBuf::from("/run")
    } else {
        PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?)
    };
    let dir = base.join("relay-metrics").join("statfs");
    let _ = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir);
    // Only a directory of ours, writable by nobody else: another user must not plant markers.
    let metadata = std::fs::symlink_metadata(&dir).ok()?;
    let ours = metadata.is_dir()
        && metadata.uid() == nix::unistd::geteuid().as_raw()
        && metadata.mode() & 0o022 == 0;
    ours.then_some(dir)
}

/// The marker's name for `path`: the id of the mount holding it (the longest mount point that
/// is a prefix of the path as written, from `/proc/self/mountinfo`; no call on the path itself,
/// which could hang), else a hash of the path.
pub(super) fn mount_key(path: &str, mountinfo: &str) -> String {
    let mut best: Option<(usize, &str)> = None;
    for line in mountinfo.lines() {
        let mut fields = line.split(' ');
        let (Some(id), Some(mount_point)) = (fields.next(), fields.nth(3)) else {
            continue;
        };
        let mount_point = unescape(mount_point);
        let covers = mount_point == "/"
            || path == mount_point
            || path
                .strip_prefix(mount_point.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
        if covers && best.is_none_or(|(length, _)| mount_point.len() >= length) {
            best = Some((mount_point.len(), id));
        }
    }
    match best {
        Some((_, id)) => format!("mount-{id}"),
        None => format!("path-{:016x}", fnv1a(path.as_bytes())),
    }
}

/// `mountinfo`'s text (the calling process's, `/proc/self/mountinfo`; empty when unreadable). A
/// mount point's bytes pass through as the kernel has them, except space, tab, newline and
/// backslash: one mount point that is not UTF-8 turns into replacement characters, not an
/// empty table (every path would then be keyed by its own name).
pub(super) fn read_mountinfo(path: &Path) -> String {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

/// Removes the markers of mounts that are gone (not in `mountinfo` any more) whose helper is no
/// longer stuck: nothing else would, as no path maps to them now.
pub(super) fn remove_stale(dir: &Path, mountinfo: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mounted: Vec<String> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').next())
        .map(|id| format!("mount-{id}"))
        .collect();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(key) = name.to_str() else {
            continue;
        };
        if !key.starts_with("mount-") || mounted.iter().any(|mounted| mounted == key) {
            continue;
        }
        // Held by another process (asking, or just marking): left for a later start.
        if let Some(mut lock) = MountLock::acquire(dir, key, Duration::ZERO) {
            if lock.stuck_helper().is_none() {
                lock.clear();
            }
        }
    }
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|digits| {
            let text = std::str::from_utf8(digits).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A mount's marker, locked: only its holder asks that mount.
#[derive(Debug)]
pub(super) struct MountLock {
    file: File,
    path: PathBuf,
}

impl MountLock {
    /// Locks `key`'s marker in `dir`, waiting up to `wait` for another process's call in
    /// flight; `None` when it stays locked or the file cannot be used.
    pub(super) fn acquire(dir: &Path, key: &str, wait: Duration) -> Option<Self> {
        let path = dir.join(key);
        let deadline = Instant::now() + wait;
        loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&path)
                .ok()?;
            while !try_lock(&file) {
                if Instant::now() >= deadline {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            // The holder before us may have removed the file: then lock the one there now.
            let same = match (file.metadata(), std::fs::symlink_metadata(&path)) {
                (Ok(held), Ok(named)) => held.ino() == named.ino() && held.dev() == named.dev(),
                _ => false,
            };
            if same {
                return Some(Self { file, path });
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// The helper the marker names, if it is still stuck.
    pub(super) fn stuck_helper(&mut self) -> Option<StuckHelper> {
        let mut text = String::new();
        self.file.rewind().ok()?;
        self.file.read_to_string(&mut text).ok()?;
        let mut words = text.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(start_time)), Some(Ok(since))) =
            (words.next(), words.next(), words.next())
        else {
            return None;
        };
        let pid = i32::try_from(pid).ok()?;
        let (state, started) = process_state(pid)?;
        if state == 'Z' || started != start_time {
            return None;
        }
        Some(StuckHelper {
            pid,
            stuck_for_s: unix_seconds().saturating_sub(since),
        })
    }

    /// Records `pid`, abandoned in its call made at `since`, and unlocks.
    pub(super) fn mark_stuck(mut self, pid: i32, since: Instant) {
        let Some((_, start_time)) = process_state(pid) else {
            // Already gone: nothing is stuck.
            self.clear();
            return;
        };
        let since = unix_seconds().saturating_sub(since.elapsed().as_secs());
        let _ = self.file.set_len(0);
        let _ = self.file.rewind();
        let _ = writeln!(self.file, "{pid} {start_time} {since}");
    }

    /// The mount answered: the marker goes, and the lock with it.
    pub(super) fn clear(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn try_lock(file: &File) -> bool {
    // SAFETY: `flock` on a descriptor this `File` owns; no memory is passed.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs())
}

/// A process's state letter and start time (clock ticks after boot) from `/proc/<pid>/stat`.
fn process_state(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    // `starttime` is field 22; `state` was field 3.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some((state, start_time))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /mnt/data rw shared:2 - ext4 /dev/sdb1 rw
41 40 0:36 / /mnt/data/hung\\040fs rw - fuse fuse rw
42 22 0:37 / /mnt/database rw - tmpfs tmpfs rw
";

    #[test]
    fn a_mount_point_that_is_not_utf8_leaves_the_other_mounts_keyed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mountinfo");
        let mut bytes = MOUNTINFO.as_bytes().to_vec();
        bytes.extend_from_slice(b"43 22 0:38 / /mnt/caf\xe9 rw - tmpfs tmpfs rw\n");
        std::fs::write(&file, bytes).unwrap();
        let mountinfo = read_mountinfo(&file);
        assert_eq!(mount_key("/mnt/data/x", &mountinfo), "mount-40");
        assert_eq!(mount_key("/mnt/database", &mountinfo), "mount-42");
    }

    #[test]
    fn a_path_is_keyed_by_the_mount_that_holds_it() {
        assert_eq!(mount_key("/mnt/data/x", MOUNTINFO), "mount-40");
        assert_eq!(mount_key("/mnt/data", MOUNTINFO), "mount-40");
        assert_eq!(mount_key("/mnt/data/hung fs/a/b", MOUNTINFO), "mount-41");
        // A prefix by characters, not by components, is another mount.
        assert_eq!(mount_key("/mnt/database/y", MOUNTINFO), "mount-42");
        assert_eq!(mount_key("/mnt/datab", MOUNTINFO), "mount-22");
        assert!(mount_key("/x", "").starts_with("path-"));
    }

    #[test]
    fn a_marker_names_a_live_helper_until_it_is_gone_and_locks_one_holder() {
        // A lock released is taken within this: a child forked by a test running beside
        // this one shares the lock's open file until it execs.
        const FREE: Duration = Duration::from_secs(2);
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id()).unwrap();
        let mut lock = MountLock::acquire(dir.path(), "mount-1", FREE).unwrap();
        assert_eq!(lock.stuck_helper(), None);
        // Held: another holder waits, then gives up.
        assert!(MountLock::acquire(dir.path(), "mount-1", Duration::from_millis(20)).is_none());
        lock.mark_stuck(pid, Instant::now());
        let mut lock = MountLock::acquire(dir.path(), "mount-1", FREE).unwrap();
        assert_eq!(lock.stuck_helper().map(|helper| helper.pid), Some(pid));
        drop(lock);
        child.kill().unwrap();
        child.wait().unwrap();
        let mut lock = MountLock::acquire(dir.path(), "mount-1", FREE).unwrap();
        assert_eq!(lock.stuck_helper(), None);
        lock.clear();
        assert!(!dir.path().join("mount-1").exists());
        // A marker whose pid now names another process (its start time differs) is stale.
        std::fs::write(
            dir.path().join("mount-2"),
            format!("{} 1 0\n", std::process::id()),
        )
        .unwrap();
        let mut lock = MountLock::acquire(dir.path(), "mount-2", FREE).unwrap();
        assert_eq!(lock.stuck_helper(), None);
        drop(lock);
        // Markers of mounts that are gone go, unless their helper is still stuck; a mounted
        // one stays.
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let stuck = MountLock::acquire(dir.path(), "mount-3", FREE).unwrap();
        stuck.mark_stuck(i32::try_from(sleeper.id()).unwrap(), Instant::now());
        std::fs::write(dir.path().join("mount-22"), "").unwrap();
        // remove_stale leaves a marker whose lock is held, also by a child forked meanwhile by
        // another test: it is run again until the marker goes, for as long as FREE.
        let removed_within_free = |name: &str| {
            let deadline = Instant::now() + FREE;
            loop {
                remove_stale(dir.path(), MOUNTINFO);
                if !dir.path().join(name).exists() {
                    return true;
                }
                if Instant::now() > deadline {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        assert!(removed_within_free("mount-2"));
        assert!(dir.path().join("mount-3").exists());
        assert!(dir.path().join("mount-22").exists());
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert!(removed_within_free("mount-3"));
    }
}
