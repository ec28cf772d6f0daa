//! Rates of cumulative counters for the summary's peak and the report's charts, with the
//! checks that keep an odd series from giving an impossible figure: a rate is taken over a
//! window of at least one sampling period (a snapshot taken right after the previous one, as
//! `run`'s final one is, would turn a few ticks of rounding into tens of cores), never across a
//! counter that fell or a timestamp that went back, and a CPU rate never above the CPUs the
//! measured processes may use.

use chrono::{DateTime, Utc};

/// What one observation of a counter gave.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Step {
    /// A rate (units per second) over a window that closed here.
    Rate(f64),
    /// The first value, or a window still shorter than the minimum: no rate yet.
    Open,
    /// The counter went down (a restarted source): the window starts again here.
    Fell,
    /// The timestamp is before the window's start: the window starts again here.
    Backwards,
}

/// The start of the current window of one counter.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RateWindow {
    anchor: Option<(f64, DateTime<Utc>)>,
}

impl RateWindow {
    /// Takes `value` at `at`; a rate when at least `min_ns` passed since the window began.
    pub(crate) fn step(&mut self, value: f64, at: DateTime<Utc>, min_ns: i64) -> Step {
        let Some((before, then)) = self.anchor else {
            self.anchor = Some((value, at));
            return Step::Open;
        };
        let elapsed_ns = (at - then).num_nanoseconds().unwrap_or(i64::MAX);
        if elapsed_ns < 0 {
            self.anchor = Some((value, at));
            return Step::Backwards;
        }
        if value < before {
            self.anchor = Some((value, at));
            return Step::Fell;
        }
        if elapsed_ns == 0 || elapsed_ns < min_ns {
            return Step::Open;
        }
        self.anchor = Some((value, at));
        Step::Rate((value - before) * 1e9 / elapsed_ns as f64)
    }
}

/// The number of CPUs online: the bound of `run`'s and a recording's CPU rates. Not this
/// process's affinity: the processes it starts inherit that, but may widen it (`taskset`,
/// `sched_setaffinity`) to any CPU of their cpuset.
pub(crate) fn cpus_online() -> Option<f64> {
    crate::source::system::online_cpus(&crate::source::Roots::host()).map(f64::from)
}

/// Rates a CPU rate may exceed the bound by before it is named in the warnings (a snapshot's
/// timestamp and its counters are read up to one collect apart, a few per cent of a short
/// period); up to it, the rate is clamped to the bound.
pub(crate) const CPU_BOUND_SLACK: f64 = 1.25;

/// The odd things seen in a series, for the summary's warnings.
#[derive(Debug, Clone, Default)]
pub(crate) struct Oddities {
    /// Snapshots whose timestamp is before the previous one's, and the first such pair.
    pub(crate) backwards: u64,
    pub(crate) first_backwards: Option<(DateTime<Utc>, DateTime<Utc>)>,
    /// Counters that fell (by name), at most one entry each.
    pub(crate) fell: Vec<&'static str>,
    /// CPU rates above the bound: how many, the highest, and the bound.
    pub(crate) over_bound: u64,
    pub(crate) highest_over: f64,
}

impl Oddities {
    pub(crate) fn fell(&mut self, counter: &'static str) {
        if !self.fell.contains(&counter) {
            self.fell.push(counter);
        }
    }

    /// The warnings, in words.
    pub(crate) fn warnings(&self, bound: Option<(f64, &str)>) -> Vec<String> {
        let mut out = Vec::new();
        if let Some((before, after)) = self.first_backwards {
            out.push(format!(
                "timestamps go backwards {} time(s) (first: {} after {}): no rate is taken across them, the run spans from the first snapshot to the latest, and a time before the first is shown at +0",
                self.backwards,
                after.to_rfc3339(),
                before.to_rfc3339()
            ));
        }
        if !self.fell.is_empty() {
            out.push(format!(
                "counters fell (a restarted source, or not one series): {}; no rate is taken across a fall, and a total whose last value is below its first is n/a",
                self.fell.join(", ")
            ));
        }
        if self.over_bound > 0 {
            out.push(format!(
                "{} CPU rate(s) above {} {} CPUs (highest {:.2}) were left out of the peak and the chart",
                self.over_bound,
                bound.map_or("the", |(_, source)| source),
                bound.map_or_else(|| "?".to_owned(), |(cpus, _)| format!("{cpus}")),
                self.highest_over
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone as _;

    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_700_000_000_000 + ms)
            .single()
            .unwrap_or_default()
    }

    #[test]
    fn a_window_closes_only_after_the_minimum_and_restarts_on_a_fall_or_going_back() {
        let mut window = RateWindow::default();
        let period = 10_000_000;
        assert_eq!(window.step(0.0, at(0), period), Step::Open);
        // 0.5 ms later (run's final snapshot): no rate, the window stays open.
        assert_eq!(
            window.step(1e9, at(0) + chrono::Duration::microseconds(500), period),
            Step::Open
        );
        assert_eq!(window.step(2e9, at(20), period), Step::Rate(1e11));
        assert_eq!(window.step(1.0, at(30), period), Step::Fell);
        assert_eq!(window.step(2.0, at(25), period), Step::Backwards);
        assert_eq!(window.step(12.0, at(35), period), Step::Rate(1000.0));
    }

    #[test]
    fn at_least_one_cpu_is_online() {
        let cpus = cpus_online().unwrap();
        assert!((1.0..=4096.0).contains(&cpus), "{cpus}");
    }
}
