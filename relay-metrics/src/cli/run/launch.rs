//! Starting the command's measurement: `run`'s config and output, the signal mask, the
//! command's cgroup and scope, the collector, and the threads that report to the sampling loop.

use std::io::Write;
use std::path::Path;
use std::sync::mpsc::{self, Receiver};

use anyhow::{Context, Result};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use relay_metrics::config::{ResourceMetricsConfig, ScopeSetting};
use relay_metrics::{Collector, CollectorError, KernelEventsPreload};

use super::cgroup::RunCgroup;
use super::{forwarded_signals, Event, PRIVATE_MEMORY_INTERVAL_MS};

/// The config file's settings (the defaults without one).
pub(super) fn load_config(path: Option<&Path>, interval_ms: u64) -> Result<ResourceMetricsConfig> {
    Ok(match path {
        Some(path) => ResourceMetricsConfig::from_file(path)?,
        None => {
            let mut config = ResourceMetricsConfig::default();
            // `memory.private`'s only exact source, `smaps_rollup`, walks every page of a
            // process (most of a sample's cost at 1 ms): below one snapshot a second it is
            // re-read once a second, its age in `extensions.sample_ages.private_memory_ms`.
            if interval_ms < PRIVATE_MEMORY_INTERVAL_MS {
                config.extensions.private_memory_interval_millis = PRIVATE_MEMORY_INTERVAL_MS;
            }
            // A compact line: the network totals, not each interface (81 % of a 19 KB line).
            config.extensions.network_interfaces = false;
            config
        }
    })
}

/// Where the stream goes (`path`, or stdout), and whether its lines are batched.
pub(super) fn open_output(path: Option<&Path>) -> Result<(Box<dyn Write>, bool)> {
    // Lines are batched (`batch`): the file needs no buffer of its own. A terminal gets each
    // line as it comes.
    Ok(match path {
        Some(path) => (
            Box::new(
                std::fs::File::create(path)
                    .with_context(|| format!("cannot create {}", path.display()))?,
            ),
            true,
        ),
        None => {
            use std::io::IsTerminal as _;
            let stdout = std::io::stdout();
            let batched = !stdout.is_terminal();
            (Box::new(stdout.lock()), batched)
        }
    })
}

/// Blocks the forwarded signals (and SIGTTOU) in this thread; returns the forwarded ones.
///
/// Called once the command is spawned (a child inherits the signal mask, and std's spawn
/// leaves it as is) and before any thread starts, so every thread inherits the mask and the
/// signals reach only the forwarding thread's sigwait. SIGTTOU is blocked so that `run`, in
/// the background once the command has the terminal, can take the foreground back. (A
/// signal in the instant before would end `run` and leave the command stopped in an
/// orphaned group, which the kernel ends with SIGHUP.)
pub(super) fn block_forwarded_signals() -> Result<SigSet> {
    let forwarded = forwarded_signals();
    let mut blocked = forwarded;
    blocked.add(Signal::SIGTTOU);
    blocked
        .thread_block()
        .context("cannot block the signals to forward")?;
    Ok(forwarded)
}

/// Moves the stopped command into `cgroup` (removed if that fails). Stopped, the command has
/// no child yet: moved now, every descendant starts in the cgroup.
pub(super) fn enter_cgroup(
    cgroup: Result<RunCgroup, String>,
    pid: u32,
) -> Result<RunCgroup, String> {
    cgroup.and_then(|cgroup| match cgroup.enter(pid) {
        Ok(()) => Ok(cgroup),
        Err(error) => {
            let _ = cgroup.remove();
            Err(error)
        }
    })
}

/// Points `config` at the command's cgroup, or at its process tree without one.
pub(super) fn set_scope(
    config: &mut ResourceMetricsConfig,
    cgroup: &Result<RunCgroup, String>,
    pid: u32,
) {
    match cgroup {
        Ok(cgroup) => {
            config.measurement_scope = ScopeSetting::Cgroup;
            config.root_pid = None;
            config.cgroup_path = Some(cgroup.path().to_string());
        }
        Err(_) => {
            config.measurement_scope = ScopeSetting::ProcessTree;
            config.root_pid = Some(pid);
            config.cgroup_path = None;
        }
    }
}

/// The collector of the command's scope, counting its totals from the command's start.
pub(super) fn start_collector(
    config: ResourceMetricsConfig,
    preload: KernelEventsPreload,
    cgroup: &Result<RunCgroup, String>,
    subreaper: bool,
) -> Result<Collector, CollectorError> {
    let collector = match cgroup {
        Ok(cgroup) => Collector::with_preload_in(config, preload, cgroup.nested()),
        Err(_) => Collector::with_preload(config, preload),
    };
    collector.map(|mut collector| {
        match cgroup {
            Ok(cgroup) => {
                collector.count_cumulative_from_start();
                for note in cgroup.nested().notes() {
                    collector.note_cumulative(note);
                }
            }
            Err(reason) => {
                collector.count_from_root_start();
                collector.note_cumulative(&format!(
                    "run measures the process tree, not a cgroup of its own: {reason}"
                ));
                if subreaper {
                    collector.reaps_orphans();
                }
            }
        }
        collector
    })
}

/// Starts the threads that report the command's exit and the signals `run` receives.
pub(super) fn spawn_event_threads(pid: Pid, forwarded: SigSet) -> Result<Receiver<Event>> {
    let (sender, events) = mpsc::channel();
    let exit_sender = sender.clone();
    std::thread::Builder::new()
        .name("run-wait".into())
        .spawn(move || {
            // WNOWAIT: the command stays a zombie whose final counters are still readable.
            let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
            while let Err(nix::errno::Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
            let _ = exit_sender.send(Event::Exited);
        })
        .context("cannot start the thread that waits for the command")?;
    std::thread::Builder::new()
        .name("run-signals".into())
        .spawn(move || {
            while let Ok(signal) = forwarded.wait() {
                if sender.send(Event::Signal(signal)).is_err() {
                    return;
                }
            }
        })
        .context("cannot start the signal-forwarding thread")?;
    Ok(events)
}
