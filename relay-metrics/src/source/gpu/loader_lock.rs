//! Keeps `fork` out of the dynamic loader while a GPU thread loads or unloads NVML.
//!
//! The GPU and XID threads `dlopen` NVML in the background (at start, then at most once a minute
//! while it is missing). A `fork` by another thread while one of them is inside the loader gives
//! the child a copy of the loader's half-updated state, and the child's next lookup by name
//! crashes (SIGSEGV in `_dl_load_cache_lookup`, seen in fork children of Python programs that
//! hold a collector). A `pthread_atfork` handler takes the same lock as these calls, so a
//! `fork` waits until the loader call in progress is done, and none starts until it returns.
//! A `fork` from inside such a call (a driver library may start a helper program) goes ahead:
//! that thread already holds the lock.

use std::cell::{Cell, UnsafeCell};
use std::sync::Once;

struct LoaderLock(UnsafeCell<libc::pthread_mutex_t>);

// SAFETY: the mutex is only used through the pthread calls, which are safe across threads.
unsafe impl Sync for LoaderLock {}

static LOCK: LoaderLock = LoaderLock(UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));
static REGISTERED: Once = Once::new();

thread_local! {
    /// Whether this thread is inside [`without_fork`] (and so holds the lock).
    static HOLDING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `load` (a `dlopen` or `dlclose` of NVML, with what it calls) with `fork` held back.
pub(super) fn without_fork<T>(load: impl FnOnce() -> T) -> T {
    REGISTERED.call_once(|| {
        // SAFETY: the handlers only lock, unlock or re-initialise the static mutex. If the
        // registration fails (ENOMEM), forks are simply not held back, as before.
        unsafe {
            libc::pthread_atfork(Some(before_fork), Some(after_fork), Some(in_child));
        }
    });
    lock();
    HOLDING.set(true);
    /// Unlocks also if `load` unwinds, so that no later `fork` waits forever.
    struct Unlock;
    impl Drop for Unlock {
        fn drop(&mut self) {
            HOLDING.set(false);
            unlock();
        }
    }
    let _unlock = Unlock;
    load()
}

extern "C" fn before_fork() {
    if !HOLDING.get() {
        lock();
    }
}

extern "C" fn after_fork() {
    if !HOLDING.get() {
        unlock();
    }
}

extern "C" fn in_child() {
    // Inside a loader call, the child's copy of this thread still unlocks when the call returns.
    if !HOLDING.get() {
        reset();
    }
}

fn lock() {
    // SAFETY: a valid, initialised static mutex; never locked twice by one thread (the fork
    // handler does not lock it inside a loader call).
    unsafe {
        libc::pthread_mutex_lock(LOCK.0.get());
    }
}

fn unlock() {
    // SAFETY: called by the thread that locked it (after its load, or in the parent after fork).
    unsafe {
        libc::pthread_mutex_unlock(LOCK.0.get());
    }
}

fn reset() {
    // SAFETY: the child has one thread, the copy of the one that locked the mutex before the
    // fork; a fresh mutex replaces the locked copy.
    unsafe {
        libc::pthread_mutex_init(LOCK.0.get(), std::ptr::null());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_waits_for_the_loader_call_in_progress_and_the_child_can_load_again() {
        let (started, started_rx) = std::sync::mpsc::channel();
        let loading = std::thread::spawn(move || {
            without_fork(|| {
                started.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(300));
                std::time::Instant::now()
            })
        });
        started_rx.recv().unwrap();
        // SAFETY: the child only calls async-signal-safe functions and the lock, then _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: alarm and _exit are async-signal-safe; a child stuck on the lock is
            // ended by SIGALRM and fails the test instead of hanging it.
            unsafe { libc::alarm(5) };
            let code = without_fork(|| 0);
            unsafe { libc::_exit(code) };
        }
        let forked = std::time::Instant::now();
        let loaded = loading.join().unwrap();
        assert!(
            forked >= loaded,
            "fork returned while the loader call was in progress"
        );
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status}"
        );
    }

    #[test]
    fn a_fork_from_inside_a_loader_call_goes_ahead() {
        let (done, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let status = without_fork(|| {
                // SAFETY: the child only calls _exit.
                let pid = unsafe { libc::fork() };
                if pid == 0 {
                    unsafe { libc::_exit(0) };
                }
                let mut status = -1;
                // SAFETY: waits for the child forked above.
                unsafe { libc::waitpid(pid, &mut status, 0) };
                status
            });
            // A later fork outside a loader call still works: the lock was released.
            let later = std::process::Command::new("true")
                .status()
                .map(|s| s.success());
            let _ = done.send((status, later.ok()));
        });
        let (status, later) = done_rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("a fork inside a loader call deadlocked");
        assert_eq!(status, 0);
        assert_eq!(later, Some(true));
    }
}
