//! The configured paths' capacities, kept fresh off the sampling path.
//!
//! A refresher thread asks each path in a [`Helper`] process (a bounded number at once, each
//! with the timeout from its start) and keeps the latest answers; a collect only copies them (no system
//! call, no wait) and asks for the next round. Rounds run only while someone collects, and at
//! most once per [`MIN_ROUND_GAP`]: a helper process per path per collect would cost a fork on
//! every tick. Only the very first read waits, for one fresh answer, so that a one-shot
//! `snapshot` has values.
//!
//! A path whose helper has not answered by the deadline is marked hung: `None` with a reason,
//! and it is not asked again until that helper's call returns (as node_exporter does with stuck
//! mounts), so a hung mount holds one helper process, never a thread of ours. The refresher
//! thread itself only forks, reads sockets with a timeout and signals; it never waits on a
//! filesystem, so it cannot keep the process from exiting.

use std::collections::VecDeque;
use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::helper::{Abandoned, Helper};
use super::marker::{self, MountLock};
use super::FilesystemCapacity;

/// The least time between the starts of two rounds. Capacities change slowly (node_exporter
/// reads them once per scrape); the values' age is reported with them.
pub(super) const MIN_ROUND_GAP: Duration = Duration::from_secs(1);

/// Latest capacities of a fixed list of paths, refreshed by helper processes.
#[derive(Debug)]
pub(crate) struct FilesystemRefresher {
    shared: Arc<Shared>,
    started: bool,
}

#[derive(Debug)]
struct Shared {
    paths: Vec<Arc<str>>,
    timeout: Duration,
    state: Mutex<State>,
    /// Wakes the refresher (a round wanted, or stop) and the first reader (a round done).
    wake: Condvar,
}

#[derive(Debug)]
struct State {
    /// One answer per path, from the last round.
    answers: Vec<FilesystemCapacity>,
    /// When the last round started, if one has finished.
    round_at: Option<Instant>,
    /// A collect read the answers since the last round started.
    wanted: bool,
    /// The owner is gone.
    stopped: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl FilesystemRefresher {
    /// Refreshes `paths` (in this order), giving each helper `timeout` to answer. Nothing starts
    /// before the first [`read`](Self::read).
    pub(crate) fn new(paths: Vec<Arc<str>>, timeout: Duration) -> Self {
        let count = paths.len();
        Self {
            shared: Arc::new(Shared {
                paths,
                timeout,
                state: Mutex::new(State {
                    answers: vec![FilesystemCapacity::default(); count],
                    round_at: None,
                    wanted: true,
                    stopped: false,
                }),
                wake: Condvar::new(),
            }),
            started: false,
        }
    }

    /// The configured paths.
    pub(crate) fn paths(&self) -> &[Arc<str>] {
        &self.shared.paths
    }

    /// The latest capacity of each path into `out` (cleared first), and when their round
    /// started (`None` if no round has finished). Waits only on the first call, for the first
    /// round (at most the timeout plus the time to start the helpers).
    pub(crate) fn read(&mut self, out: &mut Vec<FilesystemCapacity>) -> Option<Instant> {
        out.clear();
        if self.shared.paths.is_empty() {
            return None;
        }
        if !self.started {
            self.started = true;
            self.start_thread();
        }
        let mut state = self.shared.lock();
        if state.round_at.is_none() && !state.stopped {
            // Past this bound something is wrong beyond a hung mount (the machine is
            // starved): answer without values rather than hold the caller.
            let bound = self.shared.timeout * 2 + Duration::from_secs(1);
            state = self
                .shared
                .wake
                .wait_timeout_while(state, bound, |state| {
                    state.round_at.is_none() && !state.stopped
                })
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        out.extend(state.answers.iter().cloned());
        if !state.wanted {
            state.wanted = true;
            self.shared.wake.notify_all();
        }
        state.round_at
    }

    fn start_thread(&self) {
        let shared = Arc::clone(&self.shared);
        let spawned = std::thread::Builder::new()
            .name("relay-metrics-fs".into())
            .spawn(move || refresh(&shared));
        if let Err(error) = spawned {
            let mut state = self.shared.lock();
            state.stopped = true;
            for (answer, path) in state.answers.iter_mut().zip(&self.shared.paths) {
                *answer = FilesystemCapacity::failed(
                    Path::new(&**path),
                    format_args!("cannot start the refresher thread: {error}"),
                );
            }
        }
    }
}

impl Drop for FilesystemRefresher {
    fn drop(&mut self) {
        // Not joined: a round in progress ends within the timeout, and the thread with it.
        self.shared.lock().stopped = true;
        self.shared.wake.notify_all();
    }
}

/// What the refresher knows of one path between rounds.
struct PathState {
    /// The path for `statfs`, or why it cannot be one.
    c_path: Result<CString, String>,
    /// Its helper from an earlier round, still stuck.
    hung: Option<Abandoned>,
    /// Its mount's marker (`marker` module), shared with every process on the machine.
    key: String,
}

/// Where the mounts' markers are, and each path's.
fn markers(shared: &Shared) -> (Option<PathBuf>, Vec<String>) {
    let Some(dir) = marker::directory() else {
        return (None, vec![String::new(); shared.paths.len()]);
    };
    let mountinfo = marker::read_mountinfo(Path::new("/proc/self/mountinfo"));
    marker::remove_stale(&dir, &mountinfo);
    let keys = shared
        .paths
        .iter()
        .map(|path| marker::mount_key(path, &mountinfo))
        .collect();
    (Some(dir), keys)
}

/// The refresher thread: one round whenever a collect wants one, at most once per gap.
fn refresh(shared: &Shared) {
    let (marker_dir, keys) = markers(shared);
    let mut paths: Vec<PathState> = shared
        .paths
        .iter()
        .zip(keys)
        .map(|(path, key)| PathState {
            c_path: CString::new(path.as_bytes())
                .map_err(|_| "the path contains a NUL byte".to_owned()),
            hung: None,
            key,
        })
        .collect();
    let mut answers = Vec::with_capacity(paths.len());
    loop {
        {
            let state = shared
                .wake
                .wait_while(shared.lock(), |state| !state.wanted && !state.stopped)
                .unwrap_or_else(PoisonError::into_inner);
            if state.stopped {
                break;
            }
        }
        let round_at = Instant::now();
        shared.lock().wanted = false;
        round(shared, marker_dir.as_deref(), &mut paths, &mut answers);
        {
            let mut state = shared.lock();
            std::mem::swap(&mut state.answers, &mut answers);
            state.round_at = Some(round_at);
            shared.wake.notify_all();
            let gap_left = (round_at + MIN_ROUND_GAP).saturating_duration_since(Instant::now());
            let state = shared
                .wake
                .wait_timeout_while(state, gap_left, |state| !state.stopped)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            if state.stopped {
                break;
            }
        }
    }
    for path in &paths {
        if let Some(hung) = &path.hung {
            hung.reap_if_exited();
        }
    }
}

/// The most helper processes alive at once in a round. A round over many paths then costs a
/// bounded number of processes and descriptors (each helper holds a socket), and each helper
/// gets the whole timeout from its own start.
const MAX_HELPERS_IN_FLIGHT: usize = 32;

/// A started helper and the path it answers for.
struct InFlight {
    index: usize,
    since: Instant,
    helper: io::Result<Helper>,
    /// Its mount's marker, locked while the call is in flight.
    lock: Option<MountLock>,
}

/// Asks every path not hung, each in its own helper (at most [`MAX_HELPERS_IN_FLIGHT`] at
/// once, oldest answered first), and collects the answers into `answers` in path order.
fn round(
    shared: &Shared,
    marker_dir: Option<&Path>,
    paths: &mut [PathState],
    answers: &mut Vec<FilesystemCapacity>,
) {
    answers.clear();
    answers.resize(paths.len(), FilesystemCapacity::default());
    let mut in_flight = VecDeque::with_capacity(MAX_HELPERS_IN_FLIGHT);
    for index in 0..paths.len() {
        if paths[index]
            .hung
            .as_mut()
            .is_some_and(Abandoned::has_returned)
        {
            paths[index].hung = None;
        }
        let path = Path::new(&*shared.paths[index]);
        match (&paths[index].c_path, &paths[index].hung) {
            (Err(reason), _) => answers[index] = FilesystemCapacity::failed(path, reason),
            (Ok(_), Some(hung)) => {
                answers[index] = FilesystemCapacity::failed(
                    path,
                    format_args!(
                        "no answer within {} ms (a hung filesystem?); that call has not \
                         returned for {} s and is not repeated until it does",
                        shared.timeout.as_millis(),
                        hung.since.elapsed().as_secs()
                    ),
                );
            }
            (Ok(_), None) => {
                if in_flight.len() == MAX_HELPERS_IN_FLIGHT {
                    if let Some(oldest) = in_flight.pop_front() {
                        take_answer(shared, paths, answers, oldest);
                    }
                }
                let lock = match marker_dir {
                    Some(dir) => {
                        match lock_mount(shared, dir, paths, answers, &mut in_flight, index) {
                            Ok(lock) => Some(lock),
                            Err(why) => {
                                answers[index] = FilesystemCapacity::failed(path, why);
                                continue;
                            }
                        }
                    }
                    None => None,
                };
                if let Ok(c_path) = &paths[index].c_path {
                    in_flight.push_back(InFlight {
                        index,
                        since: Instant::now(),
                        helper: Helper::start(c_path),
                        lock,
                    });
                }
            }
        }
    }
    for started in in_flight {
        take_answer(shared, paths, answers, started);
    }
}

/// Locks the marker of path `index`'s mount before a helper is started for it; why not, when
/// another process's helper is stuck on that mount (then none is started: one per mount on the
/// machine) or another process's call on it is still in flight past the timeout.
fn lock_mount(
    shared: &Shared,
    dir: &Path,
    paths: &mut [PathState],
    answers: &mut [FilesystemCapacity],
    in_flight: &mut VecDeque<InFlight>,
    index: usize,
) -> Result<MountLock, String> {
    // A call of this round on the same mount holds the lock: its answer comes first.
    let key = paths[index].key.clone();
    if let Some(position) = in_flight
        .iter()
        .position(|started| paths[started.index].key == key)
    {
        for started in in_flight.drain(..=position).collect::<Vec<_>>() {
            take_answer(shared, paths, answers, started);
        }
    }
    let timeout_ms = shared.timeout.as_millis();
    let Some(mut lock) = MountLock::acquire(dir, &key, shared.timeout + Duration::from_millis(200))
    else {
        return Err(format!(
            "another process's statfs of this mount has had no answer within {timeout_ms} ms \
             (a hung filesystem?)"
        ));
    };
    match lock.stuck_helper() {
        Some(stuck) => Err(format!(
            "no answer within {timeout_ms} ms (a hung filesystem?): a statfs helper process \
             (pid {}) has been stuck on this mount for {} s, and the mount is not asked again \
             until that call returns",
            stuck.pid, stuck.stuck_for_s
        )),
        None => Ok(lock),
    }
}

/// Waits for one helper's answer (until its timeout from its start) into `answers`; a helper
/// without an answer marks its path hung.
fn take_answer(
    shared: &Shared,
    paths: &mut [PathState],
    answers: &mut [FilesystemCapacity],
    started: InFlight,
) {
    let InFlight {
        index,
        since,
        helper,
        lock,
    } = started;
    let path = Path::new(&*shared.paths[index]);
    answers[index] = match helper {
        Ok(helper) => match helper.answer(since, since + shared.timeout) {
            Ok(answer) => {
                if let Some(lock) = lock {
                    lock.clear();
                }
                match answer {
                    Ok(blocks) => FilesystemCapacity::from_blocks(path, &blocks),
                    Err(reason) => FilesystemCapacity::failed(path, reason),
                }
            }
            Err(abandoned) => {
                if let Some(lock) = lock {
                    lock.mark_stuck(abandoned.pid(), since);
                }
                paths[index].hung = Some(abandoned);
                FilesystemCapacity::failed(
                    path,
                    format_args!(
                        "no answer within {} ms (a hung filesystem?); its helper process is \
                         abandoned and the path is not asked again until that call returns",
                        shared.timeout.as_millis()
                    ),
                )
            }
        },
        Err(error) => {
            if let Some(lock) = lock {
                lock.clear();
            }
            FilesystemCapacity::failed(
                path,
                format_args!("cannot start the statfs helper process: {error}"),
            )
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_path_in_order_and_only_the_first_read_waits() {
        let mut refresher = FilesystemRefresher::new(
            vec![Arc::from("/"), Arc::from("/relay-metrics-no-such-path")],
            Duration::from_secs(5),
        );
        let mut out = Vec::new();
        let first = refresher.read(&mut out).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out[0].total_bytes.is_some(), "{out:?}");
        let error = out[1].error.as_deref().unwrap_or("");
        assert!(error.contains("No such file"), "{error}");
        // Later reads return the latest round at once, and a new round follows within the gap.
        let deadline = Instant::now() + MIN_ROUND_GAP * 5;
        loop {
            let asked = Instant::now();
            let round_at = refresher.read(&mut out).unwrap();
            assert!(asked.elapsed() < Duration::from_millis(100));
            assert_eq!(out.len(), 2);
            assert!(out[0].total_bytes.is_some(), "{out:?}");
            if round_at > first {
                break;
            }
            assert!(Instant::now() < deadline, "no second round");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn a_path_with_a_nul_byte_is_refused_with_a_reason() {
        let mut refresher = FilesystemRefresher::new(
            vec![Arc::from("/\0x"), Arc::from("/")],
            Duration::from_secs(5),
        );
        let mut out = Vec::new();
        refresher.read(&mut out);
        assert!(
            out[0].error.as_deref().unwrap_or("").contains("NUL"),
            "{out:?}"
        );
        assert!(out[1].total_bytes.is_some(), "{out:?}");
    }

    #[test]
    fn no_paths_start_nothing() {
        let mut refresher = FilesystemRefresher::new(Vec::new(), Duration::from_secs(1));
        let mut out = vec![FilesystemCapacity::default()];
        assert_eq!(refresher.read(&mut out), None);
        assert!(out.is_empty());
        assert!(!refresher.started);
    }
}
