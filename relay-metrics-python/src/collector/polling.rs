//! The fixed-rate polling thread of a collector with `polling.enabled`: it collects on absolute
//! deadlines and emits Relay's metric marks.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyString;

use relay_metrics::sampler::StopSignal;
use relay_metrics::snapshot::SamplerInfo;

use super::Series;

/// The polling thread and its stop signal.
pub(super) struct Polling {
    pub(super) stop: StopSignal,
    pub(super) thread: JoinHandle<()>,
}

/// The polling thread: fixed-rate ticks (deadlines `start + n × period`); a tick that a slow
/// collection overran is skipped and counted, never fired late in a burst.
pub(super) fn poll(series: &Series, period: Duration, stop: &StopSignal, emit: &Py<PyAny>) {
    let start = Instant::now();
    let period_ns = period.as_nanos().max(1);
    let mut tick: u64 = 0;
    let mut missed: u64 = 0;
    let mut failures = Failures::default();
    loop {
        let deadline = start
            + Duration::from_nanos(u64::try_from(period_ns * u128::from(tick)).unwrap_or(u64::MAX));
        if stop.wait_until(deadline) {
            return;
        }
        let lateness = Instant::now().saturating_duration_since(deadline);
        let sampler = SamplerInfo {
            interval_usec: u64::try_from(period.as_micros()).unwrap_or(u64::MAX),
            tick_index: tick,
            tick_lateness_usec: u64::try_from(lateness.as_micros()).unwrap_or(u64::MAX),
            missed_ticks_total: missed,
        };
        match series.collect(Some(sampler)) {
            Ok((snapshot, _)) => Python::attach(|py| {
                if let Err(error) = crate::marks::emit(py, &snapshot, emit) {
                    failures.report(py, error);
                }
            }),
            // Relay logs a failed poll and goes on with the next one.
            Err(error) => eprintln!("relay_metrics: resource metrics poll failed: {error}"),
        }
        let elapsed = start.elapsed().as_nanos();
        let next = u64::try_from(elapsed / period_ns + 1).unwrap_or(u64::MAX);
        missed += next.saturating_sub(tick + 1);
        tick = next;
    }
}

/// Seconds between two reports of a failing emit after its first.
const REPORT_EVERY: Duration = Duration::from_secs(60);

/// The emit's failures (the subscribers' own are contained in Python; this is what escapes
/// that, such as a logging handler that raises): reported at most once a minute.
#[derive(Default)]
struct Failures {
    reported_at: Option<Instant>,
    suppressed: u64,
}

impl Failures {
    /// Reports `error` through `sys.unraisablehook`, never `PyErr_Print`: on this thread,
    /// printing a `SystemExit` would exit the process from a thread that is not the main one,
    /// and the interpreter's shutdown then fails fatally.
    fn report(&mut self, py: Python<'_>, error: PyErr) {
        if self
            .reported_at
            .is_some_and(|at| at.elapsed() < REPORT_EVERY)
        {
            self.suppressed += 1;
            return;
        }
        let context = format!(
            "relay_metrics' polling thread, emitting a resource metrics mark ({} failures not \
             reported since the last report; reported at most every {} s)",
            self.suppressed,
            REPORT_EVERY.as_secs()
        );
        self.reported_at = Some(Instant::now());
        self.suppressed = 0;
        error.write_unraisable(py, Some(PyString::new(py, &context).as_any()));
    }
}
