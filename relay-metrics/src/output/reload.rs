//! Settings made from files that are renewed in place while the agent runs: the endpoint's TLS
//! certificate and key (and client CA), the OTLP client's CA and certificate. cert-manager, a
//! Kubernetes secret volume or a short-lived-certificate issuer replace them; an agent that read
//! them once would serve or present an expired certificate until restarted.
//!
//! A watcher thread looks at the files every [`CHECK_EVERY`] and makes the value again when one
//! of them changed. Files that do not make a value (a certificate written before its key, a file
//! half written) leave the last value in use, with a warning, until they change again. The
//! thread, not the sampling or async one, is the one a hung file system holds.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::output::lock;

/// How often the files are looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// A value made from files, made again when they change.
pub(crate) struct Reloaded<T> {
    current: Mutex<Arc<T>>,
}

impl<T: Send + Sync + 'static> Reloaded<T> {
    /// Makes the first value with `make` (its error is the caller's) and starts the watcher of
    /// `paths`, which ends once the returned value is dropped. `what` names the files in logs.
    pub(crate) fn watch(
        what: &'static str,
        paths: Vec<PathBuf>,
        make: impl Fn() -> Result<T, String> + Send + 'static,
    ) -> Result<Arc<Self>, String> {
        // Stamped before the read: a change in between is read again at the first check.
        let stamps = stamps(&paths);
        let reloaded = Arc::new(Self {
            current: Mutex::new(Arc::new(make()?)),
        });
        let watched = Arc::downgrade(&reloaded);
        std::thread::Builder::new()
            .name("relay-files".into())
            .spawn(move || watch(what, &paths, stamps, &make, &watched))
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
    paths: &[PathBuf],
    mut last: Vec<Option<FileStamp>>,
    make: &impl Fn() -> Result<T, String>,
    reloaded: &Weak<Reloaded<T>>,
) {
    loop {
        std::thread::sleep(CHECK_EVERY);
        if reloaded.strong_count() == 0 {
            return;
        }
        let now = stamps(paths);
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

fn stamps(paths: &[PathBuf]) -> Vec<Option<FileStamp>> {
    paths.iter().map(|path| FileStamp::of(path)).collect()
}

/// What tells a file's change: its identity, size and times (a renewal writes the file or
/// replaces it, so one of them moves); `None` where it cannot be looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    device: u64,
    inode: u64,
    size: u64,
    modified_ns: i128,
    changed_ns: i128,
}

impl FileStamp {
    fn of(path: &Path) -> Option<Self> {
        use std::os::unix::fs::MetadataExt as _;
        // Follows links: a Kubernetes secret volume renews a file by pointing its link elsewhere.
        let meta = std::fs::metadata(path).ok()?;
        let ns = |seconds: i64, nanos: i64| i128::from(seconds) * 1_000_000_000 + i128::from(nanos);
        Some(Self {
            device: meta.dev(),
            inode: meta.ino(),
            size: meta.size(),
            modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
            changed_ns: ns(meta.ctime(), meta.ctime_nsec()),
        })
    }
}
