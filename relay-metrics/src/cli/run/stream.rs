//! `run`'s sampling loop: the first snapshot (the command before it ran), one per tick until
//! the command exits (and, with `--wait-all`, until what it left running exits), then the final
//! snapshot, which names what the command left running.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::sys::signal::{killpg, Signal};

use relay_metrics::summary::SummaryBuilder;
use relay_metrics::{Collector, ResourceMetricsSnapshot};

use super::batch::LineBatch;
use super::{tree, CommandGroup, Event, Orphans};

/// What the stream needs besides the collector: the command, the events of the helper threads,
/// the summary being built, and what to do with processes the command leaves running.
pub(super) struct Stream<'a> {
    pub(super) group: &'a mut CommandGroup,
    pub(super) events: &'a Receiver<Event>,
    pub(super) builder: &'a mut SummaryBuilder,
    pub(super) orphans: &'a mut Orphans,
    /// `--wait-all`: `Some(None)` waits without a limit.
    pub(super) wait_all: Option<Option<Duration>>,
    /// Lists the processes that may be left running (the cgroup's, or `run`'s descendants).
    pub(super) members: &'a dyn Fn() -> Vec<i32>,
    /// Without a cgroup: tells the guard about the processes that leave the group.
    pub(super) tracker: Option<tree::Tracker>,
}

impl Stream<'_> {
    /// Tells the guard about new processes outside the group (without a cgroup).
    fn track(&mut self) {
        if let (Some(tracker), Some(guard)) = (&mut self.tracker, &self.group.guard) {
            tracker.track(|message| guard.tell(message));
        }
    }
}

/// Writes a snapshot of the command before it starts, resumes it, then writes one per tick
/// until it exits (and, with `--wait-all`, until what it left running exits), then one final
/// snapshot (taken at once, outside the tick grid: its `extensions.sampler` is `null`), which
/// carries the totals and names what the command left running. Returns when the command was
/// resumed; after an error, lines may still be pending in `lines` (the caller flushes them).
/// Every snapshot also feeds the summary.
pub(super) fn stream_until_exit(
    collector: &mut Collector,
    period: Duration,
    lines: &mut LineBatch<'_>,
    stream: &mut Stream<'_>,
) -> Result<Instant> {
    // The first line shows the command before it ran. Taking it first also puts the scope's
    // members in the kernel's tracking, so a cgroup's kernel counts miss no early creation.
    // Written at once: a reader may take it as the sign that the command starts.
    write_line(stream.builder, lines, &collector.collect(), true)?;
    // Wall time runs from here: the command was stopped while the collector started.
    let started = Instant::now();
    killpg(stream.group.group, Signal::SIGCONT).context("cannot resume the command")?;
    let mut snapshots = collector.every(period);
    let mut lost = false;
    let (group, events) = (&*stream.group, stream.events);
    // Waits for the tick's deadline (`None`: never comes) while passing signals on; false once
    // the command exited.
    let tracker = &mut stream.tracker;
    let mut wait = |deadline: Option<Instant>| loop {
        // Without a cgroup, the guard is told of processes that left the group at least every
        // `tree::TRACK_EVERY`, whatever the period.
        let wake = match tracker {
            Some(_) => [deadline, Instant::now().checked_add(tree::TRACK_EVERY)]
                .into_iter()
                .flatten()
                .min(),
            None => deadline,
        };
        let event = match wake {
            Some(wake) => events.recv_timeout(wake.saturating_duration_since(Instant::now())),
            None => events.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match event {
            Ok(Event::Signal(signal)) => group.signal(signal),
            Ok(Event::Exited) => return false,
            Err(RecvTimeoutError::Timeout) => {
                if let (Some(tracker), Some(guard)) = (tracker.as_mut(), &group.guard) {
                    tracker.track(|message| guard.tell(message));
                }
                if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    return true;
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                lost = true;
                return false;
            }
        }
    };
    while let Some(snapshot) = snapshots.next_unless(&mut wait) {
        write_line(stream.builder, lines, &snapshot, false)?;
        drop(snapshot);
        stream
            .orphans
            .reap_exited(group.pid, group.group, snapshots.collector_mut());
    }
    if lost {
        bail!("lost track of the command");
    }
    let left = leftovers(stream);
    if !left.is_empty() {
        let note = match stream.wait_all {
            None => tree::describe(
                &left,
                "run ended them (SIGKILL) when the command exited (--wait-all waits for them)",
            ),
            Some(limit) => wait_for_leftovers(&mut snapshots, lines, stream, &left, limit)?,
        };
        snapshots.collector_mut().note_cumulative(&note);
    }
    // What is left is ended before the last snapshot and counted by its reaping: without a
    // cgroup, one that left the command's tree (`setsid`) is counted no other way, and with one
    // its peak RSS is.
    stream.group.end_descendants();
    stream
        .orphans
        .reap_exited_at_end(stream.group.pid, collector);
    write_line(stream.builder, lines, &collector.collect(), true)?;
    Ok(started)
}

/// Adds a snapshot to the summary and to the stream (writing what is pending when `at_once`).
fn write_line(
    builder: &mut SummaryBuilder,
    lines: &mut LineBatch<'_>,
    snapshot: &ResourceMetricsSnapshot,
    at_once: bool,
) -> Result<()> {
    builder.observe(snapshot);
    lines
        .line(|line| snapshot.write_json(line))
        .and_then(|()| if at_once { lines.flush() } else { Ok(()) })
        .context("cannot write the snapshot stream")
}

/// The live processes the command left running (the exited command itself is not one).
fn leftovers(stream: &Stream<'_>) -> Vec<tree::Leftover> {
    let command = stream.group.pid.as_raw();
    tree::leftovers((stream.members)().into_iter().filter(|&pid| pid != command))
}

/// `--wait-all`: goes on taking snapshots until the processes the command left running have
/// exited, `limit` has passed, or `run` receives a signal (passed on to the command's group);
/// returns the sentence that names them and says how the wait ended. Those still running are
/// ended by the caller (SIGKILL).
fn wait_for_leftovers(
    snapshots: &mut relay_metrics::FixedRateSnapshots<'_>,
    lines: &mut LineBatch<'_>,
    stream: &mut Stream<'_>,
    left: &[tree::Leftover],
    limit: Option<Duration>,
) -> Result<String> {
    let waited = Instant::now();
    let deadline = limit.and_then(|limit| waited.checked_add(limit));
    let mut interrupted: Option<Signal> = None;
    let mut timed_out = false;
    loop {
        if leftovers(stream).is_empty() {
            break;
        }
        let (group, events) = (&*stream.group, stream.events);
        let mut wait = |tick: Option<Instant>| loop {
            // Polled every 50 ms: a leftover's exit is not an event `run` is told of.
            let poll = Instant::now() + Duration::from_millis(50);
            let until = [tick, deadline, Some(poll)].into_iter().flatten().min();
            let until = until.unwrap_or(poll);
            match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(Event::Signal(signal)) => {
                    group.signal(signal);
                    interrupted = Some(signal);
                    return false;
                }
                Ok(Event::Exited) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return false,
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                timed_out = true;
                return false;
            }
            if tick.is_some_and(|tick| Instant::now() >= tick) {
                return true;
            }
            if leftovers_gone(group, stream.members) {
                return false;
            }
        };
        let Some(snapshot) = snapshots.next_unless(&mut wait) else {
            break;
        };
        write_line(stream.builder, lines, &snapshot, false)?;
        drop(snapshot);
        stream.track();
    }
    let still = leftovers(stream);
    let secs = waited.elapsed().as_secs_f64();
    Ok(match (interrupted, timed_out, still.is_empty()) {
        (_, _, true) => tree::describe(
            left,
            &format!("run waited for them (--wait-all); the last one exited {secs:.3} s after the command"),
        ),
        (Some(signal), _, false) => tree::describe(
            &still,
            &format!("run received {signal} while waiting for them (--wait-all) and ended them (SIGKILL)"),
        ),
        (None, _, false) => tree::describe(
            &still,
            &format!("still running when the --wait-all limit passed ({secs:.3} s): run ended them (SIGKILL)"),
        ),
    })
}

/// True when nothing the command left is running any more.
fn leftovers_gone(group: &CommandGroup, members: &dyn Fn() -> Vec<i32>) -> bool {
    let command = group.pid.as_raw();
    tree::leftovers(members().into_iter().filter(|&pid| pid != command)).is_empty()
}
