//! A container runtime's API asked on a thread of its own, so the sampling thread never waits
//! for the runtime: it only looks up the latest answer. Shared by the Docker Engine API
//! (`source::docker`) and the Kubernetes CRI (`source::cri`).
//!
//! The thread asks at once, then at most once a second when the sampling thread asks for a
//! refresh (a container it has not seen), and at least every 10 s. Each question is bounded by
//! its caller (time and size); a failure is kept as the answer's error, with an empty value, and
//! asked again later.

use std::future::Future;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// How long connecting to a runtime's socket may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the whole exchange of one refresh may take.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The answer is refreshed at least this often.
const REFRESH: Duration = Duration::from_secs(10);
/// And at most this often, however often a refresh is asked for.
const MIN_GAP: Duration = Duration::from_secs(1);

/// The latest answer, or why there is none (`value` is then empty).
#[derive(Debug, Default)]
pub(crate) struct Answer<T> {
    pub value: T,
    pub error: Option<String>,
}

/// The sampling thread's side: the latest answer, and a way to ask for a refresh.
#[derive(Debug)]
pub(crate) struct Asker<T> {
    latest: Arc<Mutex<Arc<Answer<T>>>>,
    wake: mpsc::SyncSender<()>,
}

impl<T: Default + Send + Sync + 'static> Asker<T> {
    /// Starts the thread `name`, which runs `question` on a current-thread tokio runtime; until
    /// the first answer, the error is `pending`.
    pub(crate) fn start<Q, F>(name: &str, pending: String, mut question: Q) -> std::io::Result<Self>
    where
        Q: FnMut() -> F + Send + 'static,
        F: Future<Output = Result<T, String>>,
    {
        let latest = Arc::new(Mutex::new(Arc::new(Answer {
            value: T::default(),
            error: Some(pending),
        })));
        let (wake, woken) = mpsc::sync_channel(1);
        let shared = Arc::clone(&latest);
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(error) => {
                        publish(&shared, Err(format!("cannot start the client: {error}")));
                        return;
                    }
                };
                loop {
                    publish(&shared, runtime.block_on(question()));
                    std::thread::sleep(MIN_GAP);
                    match woken.recv_timeout(REFRESH.saturating_sub(MIN_GAP)) {
                        Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(Self { latest, wake })
    }

    /// The latest answer; never blocks (the writer holds the lock only to swap an `Arc`, and a
    /// busy lock gives `None`: the caller keeps what it had).
    pub(crate) fn latest(&self) -> Option<Arc<Answer<T>>> {
        self.latest
            .try_lock()
            .ok()
            .map(|answer| Arc::clone(&answer))
    }

    /// Asks for a refresh; never blocks.
    pub(crate) fn ask(&self) {
        let _ = self.wake.try_send(());
    }
}

fn publish<T: Default>(latest: &Mutex<Arc<Answer<T>>>, result: Result<T, String>) {
    let answer = Arc::new(match result {
        Ok(value) => Answer { value, error: None },
        Err(error) => Answer {
            value: T::default(),
            error: Some(error),
        },
    });
    *latest
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = answer;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_replace_the_pending_error_and_a_refresh_asks_again() {
        let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counter = Arc::clone(&asked);
        let asker = Asker::<u32>::start("test-asker", "pending".into(), move || {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            async move {
                if n == 1 {
                    Err("refused".to_string())
                } else {
                    Ok(n)
                }
            }
        })
        .unwrap();
        let wait_for = |check: &dyn Fn(&Answer<u32>) -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(answer) = asker.latest() {
                    if check(&answer) {
                        return;
                    }
                }
                assert!(std::time::Instant::now() < deadline, "no such answer");
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        wait_for(&|a| a.error.as_deref() == Some("refused") && a.value == 0);
        asker.ask();
        wait_for(&|a| a.error.is_none() && a.value == 2);
    }
}
