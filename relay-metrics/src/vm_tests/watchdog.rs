//! A per-test time limit that turns a hang into a report: if a VM test is still running when its
//! limit passes, the watchdog prints what every running or blocked task in the VM is doing (state,
//! wait channel, kernel stack) and the test cgroup's files, then aborts the test binary, so the VM
//! powers off with the evidence on its console instead of sitting until qemu's own timeout.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Printed before every line of a report (`cargo xtask vm-test` shows these console lines).
pub(super) const WATCHDOG_PREFIX: &str = "watchdog: ";

/// Armed for one test; disarmed when dropped (at the end of the test, passed or failed).
pub(super) struct Watchdog {
    finished: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Aborts the process with a report if `test` has not dropped the watchdog within `limit`.
    pub(super) fn arm(test: &'static str, limit: Duration, cgroup: PathBuf) -> Self {
        let finished = Arc::new((Mutex::new(false), Condvar::new()));
        let shared = Arc::clone(&finished);
        let thread = std::thread::spawn(move || {
            let (lock, changed) = &*shared;
            let guard = lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            let (guard, _) = changed
                .wait_timeout_while(guard, limit, |finished| !*finished)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if *guard {
                return;
            }
            let report = report(test, limit, &cgroup);
            // Straight to fd 2: libtest captures the `eprint!` of test threads, and the capture
            // would die with the abort.
            let mut stderr = std::io::stderr().lock();
            for line in report.lines() {
                let _ = writeln!(stderr, "{WATCHDOG_PREFIX}{line}");
            }
            let _ = stderr.flush();
            std::process::abort();
        });
        Self {
            finished,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let (lock, changed) = &*self.finished;
        *lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = true;
        changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn report(test: &str, limit: Duration, cgroup: &Path) -> String {
    let mut out = format!("{test} is still running after {limit:?}\n");
    for file in [
        "/proc/loadavg",
        "/proc/pressure/memory",
        "/proc/pressure/cpu",
    ] {
        out += &format!("{file}: {}\n", read(Path::new(file)).trim());
    }
    let meminfo = read(Path::new("/proc/meminfo"));
    out += &format!(
        "meminfo: {}\n",
        meminfo.lines().take(5).collect::<Vec<_>>().join("; ")
    );
    for file in [
        "cgroup.procs",
        "memory.current",
        "memory.events",
        "cpu.stat",
        "pids.current",
    ] {
        let path = cgroup.join(file);
        if path.exists() {
            out += &format!("{}: {}\n", path.display(), read(&path).replace('\n', "; "));
        }
    }
    out += "tasks running (R) or in uninterruptible sleep (D):\n";
    for task in busy_tasks() {
        out += &task;
    }
    out
}

/// Every thread in state R or D, with its wait channel and kernel stack.
fn busy_tasks() -> Vec<String> {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return vec!["(cannot list /proc)\n".to_owned()];
    };
    let mut tasks = Vec::new();
    for process in processes.filter_map(Result::ok) {
        let Ok(threads) = std::fs::read_dir(process.path().join("task")) else {
            continue;
        };
        for thread in threads.filter_map(Result::ok) {
            let dir = thread.path();
            let stat = read(&dir.join("stat"));
            // The state follows the parenthesised command, which may itself hold spaces.
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                continue;
            };
            let state = rest.split(' ').next().unwrap_or("?");
            if state != "R" && state != "D" {
                continue;
            }
            tasks.push(format!(
                "  {head}) {state} wchan={} stack:\n{}",
                read(&dir.join("wchan")),
                read(&dir.join("stack"))
                    .lines()
                    .map(|frame| format!("    {frame}\n"))
                    .collect::<String>()
            ));
        }
    }
    tasks
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| format!("({error})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_lists_the_running_thread_with_its_state() {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        let report = report(
            "some_test",
            Duration::from_secs(1),
            Path::new("/nonexistent"),
        );
        assert!(
            report.starts_with("some_test is still running after 1s\n"),
            "{report}"
        );
        assert!(report.contains("/proc/loadavg: "), "{report}");
        // This thread is running while it reads its own stat.
        assert!(report.contains(&format!("\n  {tid} (")), "{report}");
    }
}
