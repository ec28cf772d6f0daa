//! Settings made from files that are renewed in place while the agent runs: the endpoint's TLS
//! certificate and key (and client CA), the OTLP client's CA and certificate. cert-manager, a
//! Kubernetes secret volume or a short-lived-certificate issuer replace them; an agent that read
//! them once would serve or present an expired certificate until restarted.
//!
//! A watcher thread looks at the files every [`CHECK_EVERY`] (their metadata, and their content
//! read through the input guard) and makes the value again when one of them changed. Files that
//! do not make a value (a certificate written before its key, a file half written) leave the
//! last value in use, with a warning, until they change again. The thread, not the sampling or
//! async one, is the one a hung file system holds.

use std::hash::{DefaultHasher, Hasher as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::config::{read_input_file, InputKind};
use crate::output::lock;

/// How often the files are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A value made from files, made again when they change.
pub(crate) struct Reloaded<T> {
    current: Mutex<Arc<T>>,
}

impl<T: Send + Sync + 'static> Reloaded<T> {
    /// Makes the first value with `make` (its error is the caller's) and starts the watcher of
    /// `files` (each with the kind `make` reads it as), which ends once the returned value is
    /// dropped. `what` names the files in logs.
    pub(crate) fn watch(
        what: &'static str,
        files: Vec<(PathBuf, InputKind)>,
        make: impl Fn() -> Result<T, String> + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        // Stamped (contents included) before the read: a change after the stamp, even one at the
        // same size within the timestamps' granule, differs from it and is read again at the
        // first check. Stamped after, a change between the read and the stamp would never be.
        let stamps = stamps(&files);
        let reloaded = Arc::new(Self {
            current: Mutex::new(Arc::new(make()?)),
        });
        let watched = Arc::downgrade(&reloaded);
        std::thread::Builder::new()
            .name("relay-files".into())
            .spawn(move || watch(what, &files, stamps, &make, &watched))
            .map_err(|e| format!("cannot start the watcher of {what}: {e}"))?;
        Ok(reloaded)
    }

    /// The value in use now.
    pub(crate) fn current(&self) -> Arc<T> {
        Arc::clone(&lock(&self.current))
    }
}

fn watch<T>(
    what: &str,
    files: &[(PathBuf, InputKind)],
    mut last: Vec<Option<FileStamp>>,
    make: &impl Fn() -> Result<T, String>,
    reloaded: &Weak<Reloaded<T>>,
) {
    loop {
        std::thread::sleep(CHECK_EVERY);
        if reloaded.strong_count() == 0 {
            return;
        }
        // Stamped before the read, as at the start.
        let now = stamps(files);
        if now == last {
            continue;
        }
        last = now;
        let made = make();
        let Some(reloaded) = reloaded.upgrade() else {
            return;
        };
        match made {
            Ok(value) => {
                *lock(&reloaded.current) = Arc::new(value);
                tracing::info!("{what} changed: new connections use them");
            }
            Err(reason) => tracing::warn!(
                %reason,
                "{what} changed and cannot be used: the last ones stay in use until they change again"
            ),
        }
    }
}

fn stamps(files: &[(PathBuf, InputKind)]) -> Vec<Option<FileStamp>> {
    files
        .iter()
        .map(|(path, kind)| FileStamp::of(path, *kind))
        .collect()
}

/// What tells a file's change: its identity, size and times (a renewal writes the file or
/// replaces it, so one of them moves) and a hash of its content, for a rewrite at the same size
/// within the file system's timestamp granule; `None` where it cannot be looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    device: u64,
    inode: u64,
    size: u64,
    modified_ns: i128,
    changed_ns: i128,
    /// `None` where the input guard refuses the file (a device or a FIFO is not read, nor a file
    /// over its kind's cap) or it cannot be read: the rest of the stamp still tells a change.
    content: Option<u64>,
}

impl FileStamp {
    fn of(path: &Path, kind: InputKind) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        // Follows links: a Kubernetes secret volume renews a file by pointing its link elsewhere.
        let meta = std::fs::metadata(path).ok()?;
        let ns = |seconds: i64, nanos: i64| i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
        // Only a regular file is opened: opening a device runs its driver even where the guard
        // then refuses it.
        let regular = meta.is_file().then_some(path);
        let content = regular
            .and_then(|path| read_input_file(path, kind).ok())
            .map(|bytes| {
                let mut hasher = DefaultHasher::new();
                hasher.write(&bytes);
                hasher.finish()
            });
        Some(Self {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
            changed_ns: ns(meta.ctime(), meta.ctime_nsec()),
            content,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rewrite at the same size within one timestamp granule leaves the size and the times as
    /// they were: only the content tells it. The granule cannot be hit at will, so the rewrite
    /// puts the modification time back and the stamps are compared without the change time,
    /// which cannot be set.
    #[test]
    fn a_rewrite_that_keeps_the_size_and_the_times_changes_the_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cert.pem");
        std::fs::write(&path, "first").unwrap();
        let stamp = || FileStamp::of(&path, InputKind::Certificates).unwrap();
        let before = stamp();
        assert_eq!(stamp(), before, "an unchanged file keeps its stamp");
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, "again").unwrap();
        let file = std::fs::File::options().write(true).open(&path).unwrap();
        file.set_modified(modified).unwrap();
        let after = stamp();
        assert_eq!(
            (after.inode, after.size, after.modified_ns),
            (before.inode, before.size, before.modified_ns)
        );
        let without_change_time = |stamp: FileStamp| FileStamp {
            changed_ns: 0,
            ..stamp
        };
        assert_ne!(without_change_time(after), without_change_time(before));
    }

    #[test]
    fn a_fifo_a_device_or_a_file_over_the_cap_is_stamped_without_being_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("key.fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let large = dir.path().join("large.key");
        let over = usize::try_from(InputKind::PrivateKey.max_bytes()).unwrap() + 1;
        std::fs::write(&large, vec![b'x'; over]).unwrap();
        // Without a writer, a blocking read of the FIFO would never return; `/dev/zero` never
        // ends.
        for path in [fifo.as_path(), Path::new("/dev/zero"), large.as_path()] {
            let stamp = FileStamp::of(path, InputKind::PrivateKey).unwrap();
            assert_eq!(stamp.content, None, "{}", path.display());
        }
    }
}
