//! `statvfs` of the configured paths with a deadline: a path on a hung filesystem (an NFS server
//! gone, a FUSE daemon that never answers) blocks its caller in the kernel, uninterruptibly
//! until the filesystem answers or aborts. The calls run on a helper thread; the sampler waits
//! for them only while they make progress, and a call that has not returned within the timeout
//! leaves its path `None` with a reason. That call stays pending on its thread (nothing can
//! cancel it) and the path is not asked again until it returns, so a hung path holds at most one
//! thread; the other paths are read by a new helper thread from the next snapshot on.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::{filesystem_capacity, FilesystemCapacity};

/// Reads the capacities of a fixed list of paths with a per-call deadline.
#[derive(Debug)]
pub struct DeadlineStatvfs {
    shared: Arc<Shared>,
    /// The helper thread's id, if one is running and not retired.
    worker: Option<u64>,
    next_worker: u64,
}

#[derive(Debug)]
struct Shared {
    paths: Vec<Arc<str>>,
    timeout: Duration,
    state: Mutex<State>,
    /// Wakes the helper (a new batch) and the sampler (a batch done).
    wake: Condvar,
}

#[derive(Debug)]
struct State {
    /// The batch asked for, and the last one finished.
    requested: u64,
    finished: u64,
    /// The helper that may work; a retired one exits after its call returns.
    worker: Option<u64>,
    /// The path being read and since when.
    current: Option<(usize, Instant)>,
    /// One result per path, for the last batch.
    results: Vec<FilesystemCapacity>,
    /// Paths with a call still pending on a retired helper, and since when.
    hung: Vec<Option<Instant>>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl DeadlineStatvfs {
    /// Reads `paths` (in this order) with at most `timeout` per call.
    pub fn new(paths: Vec<Arc<str>>, timeout: Duration) -> Self {
        let count = paths.len();
        Self {
            shared: Arc::new(Shared {
                paths,
                timeout,
                state: Mutex::new(State {
                    requested: 0,
                    finished: 0,
                    worker: None,
                    current: None,
                    results: vec![FilesystemCapacity::default(); count],
                    hung: vec![None; count],
                }),
                wake: Condvar::new(),
            }),
            worker: None,
            next_worker: 0,
        }
    }

    /// The configured paths.
    pub fn paths(&self) -> &[Arc<str>] {
        &self.shared.paths
    }

    /// One capacity per path into `out` (cleared first). A call that makes no progress for the
    /// timeout marks its path hung (`None` with the reason) and the rest are read by a new
    /// helper: each newly hung path costs the timeout once, a path already hung nothing.
    pub fn read(&mut self, out: &mut Vec<FilesystemCapacity>) {
        out.clear();
        if self.shared.paths.is_empty() {
            return;
        }
        while !self.read_batch() {}
        out.extend(self.shared.lock().results.iter().cloned());
    }

    /// Asks the helper for one pass over the paths; false if it hung on a path (now marked).
    fn read_batch(&mut self) -> bool {
        if self.worker.is_none() && !self.spawn_worker() {
            let mut state = self.shared.lock();
            for (index, path) in self.shared.paths.iter().enumerate() {
                state.results[index] = FilesystemCapacity::failed(
                    Path::new(&**path),
                    "cannot start the statvfs thread",
                );
            }
            return true;
        }
        let mut state = self.shared.lock();
        state.requested += 1;
        let batch = state.requested;
        state.current = None;
        let asked = Instant::now();
        self.shared.wake.notify_all();
        while state.finished < batch {
            let since = state.current.map_or(asked, |(_, since)| since);
            let Some(left) = (since + self.shared.timeout).checked_duration_since(Instant::now())
            else {
                break;
            };
            state = self
                .shared
                .wake
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.finished >= batch {
            return true;
        }
        // The helper is stuck in a call (or never ran): retire it. It exits once its call
        // returns, and clears its path's mark then.
        state.worker = None;
        self.worker = None;
        match state.current {
            Some((index, since)) => {
                state.hung[index] = Some(since);
                false
            }
            None => {
                for (index, path) in self.shared.paths.iter().enumerate() {
                    state.results[index] = FilesystemCapacity::failed(
                        Path::new(&**path),
                        format_args!(
                            "the statvfs thread did not run within {} ms",
                            self.shared.timeout.as_millis()
                        ),
                    );
                }
                true
            }
        }
    }

    fn spawn_worker(&mut self) -> bool {
        let id = self.next_worker;
        self.next_worker += 1;
        let shared = Arc::clone(&self.shared);
        {
            let mut state = shared.lock();
            state.worker = Some(id);
            // A new helper starts with the batches so far counted as done.
            state.finished = state.requested;
        }
        let spawned = std::thread::Builder::new()
            .name("relay-metrics-statvfs".into())
            .spawn(move || work(&shared, id));
        if spawned.is_ok() {
            self.worker = Some(id);
        }
        spawned.is_ok()
    }
}

impl Drop for DeadlineStatvfs {
    fn drop(&mut self) {
        // Retires the helper: it exits when it next looks.
        let mut state = self.shared.lock();
        state.worker = None;
        self.shared.wake.notify_all();
    }
}

/// The helper thread: reads every path of each batch asked for, until retired.
fn work(shared: &Shared, id: u64) {
    let mut state = shared.lock();
    loop {
        while state.worker == Some(id) && state.finished >= state.requested {
            state = shared
                .wake
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.worker != Some(id) {
            return;
        }
        let batch = state.requested;
        for index in 0..shared.paths.len() {
            let path = &shared.paths[index];
            if let Some(since) = state.hung[index] {
                state.results[index] = FilesystemCapacity::failed(
                    Path::new(&**path),
                    format_args!(
                        "no answer within {} ms (a hung filesystem?); that call has not returned \
                         for {} s and is not repeated until it does",
                        shared.timeout.as_millis(),
                        since.elapsed().as_secs()
                    ),
                );
                continue;
            }
            state.current = Some((index, Instant::now()));
            drop(state);
            let capacity = filesystem_capacity(Path::new(&**path));
            state = shared.lock();
            if state.worker != Some(id) {
                // Retired while this call hung: the path may be asked again.
                state.hung[index] = None;
                return;
            }
            state.results[index] = capacity;
        }
        state.current = None;
        state.finished = batch;
        shared.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_path_in_order() {
        let mut reader = DeadlineStatvfs::new(
            vec![Arc::from("/"), Arc::from("/relay-metrics-no-such-path")],
            Duration::from_secs(5),
        );
        let mut out = Vec::new();
        for _ in 0..3 {
            reader.read(&mut out);
            assert_eq!(out.len(), 2);
            assert!(out[0].total_bytes.is_some(), "{out:?}");
            assert!(out[1]
                .error
                .as_deref()
                .unwrap_or("")
                .contains("No such file"));
        }
    }
}
