//! The fixed-rate polling thread of a collector with `polling.enabled`: it collects on absolute
//! deadlines and emits Relay's metric marks.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyString;

use relay_metrics::sampler::{FixedRate, StopSignal};

use super::Series;

/// The polling thread and its stop signal.
pub(super) struct Polling {
    pub(super) stop: StopSignal,
    pub(super) thread: JoinHandle<()>,
}

/// The polling thread: fixed-rate ticks (deadlines `start + n × period`, `FixedRate`): after a
/// slow collection, the ticks it overran are skipped and counted, and the latest one that is
/// due fires at once (late, with its lateness), never a burst of them.
pub(super) fn poll(series: &Series, period: Duration, stop: &StopSignal, emit: &Py<PyAny>) {
    let mut ticker = FixedRate::new(Instant::now(), period);
    let mut failures = Failures::default();
    while let Some(sampler) = ticker.next_unless(|deadline| !stop.wait_until(deadline)) {
        match series.collect(Some(sampler)) {
            Ok((snapshot, _)) => Python::attach(|py| {
                if let Err(error) = crate::marks::emit(py, &snapshot, emit) {
                    failures.report(py, error);
                }
            }),
            // Relay logs a failed poll and goes on with the next one.
            Err(error) => eprintln!("relay_metrics: resource metrics poll failed: {error}"),
        }
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
