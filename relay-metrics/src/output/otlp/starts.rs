//! Start times of the cumulative series an exporter sends, as OpenTelemetry's data model
//! reads them ("Resets and Gaps").
//!
//! Most counters count from before the agent saw them (a cgroup's since it was made, the
//! machine's since boot, an interface's since it appeared) and the moment they started is not
//! known here, so a series' first point, and its first point after a gap, is an unknown-start
//! reset point: its start is its own time, and a consumer counts no increase for it. Its next
//! points keep that start. A series whose value goes down (a counter that restarted: a
//! container restarted under the same cgroup path) restarted after its previous point, so its
//! start becomes that point's time.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::output::metrics::Label;

/// Per series (metric name and attributes, hashed): its last value and its start time; a series
/// absent from an export is forgotten, so it starts anew when it comes back.
#[derive(Debug, Default)]
pub(crate) struct StartTimes {
    series: HashMap<u64, Seen>,
    /// Exports so far, and the time of the last one (nanoseconds since the epoch).
    exports: u64,
    previous_time: u64,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    value: f64,
    start: u64,
    export: u64,
}

impl StartTimes {
    /// Begins an export at `time`.
    pub(crate) fn begin(&mut self, time: u64) -> Export<'_> {
        self.exports += 1;
        Export { starts: self, time }
    }
}

/// One export's view: [`Self::start`] per point; unseen series are forgotten when it ends.
pub(crate) struct Export<'s> {
    starts: &'s mut StartTimes,
    time: u64,
}

impl Export<'_> {
    /// The start time of a monotonic series `name`/`labels` whose value is now `value`.
    pub(crate) fn start(&mut self, name: &str, labels: &[(&str, Label<'_>)], value: f64) -> u64 {
        let mut hasher = DefaultHasher::new();
        name.hash(&mut hasher);
        for (key, label) in labels {
            key.hash(&mut hasher);
            match label {
                Label::Str(text) => text.hash(&mut hasher),
                Label::Int(number) => number.hash(&mut hasher),
            }
        }
        let key = hasher.finish();
        let starts = &mut *self.starts;
        let previous = starts.previous_time;
        let seen = starts.series.entry(key).or_insert(Seen {
            value,
            start: self.time,
            export: starts.exports,
        });
        if value < seen.value {
            seen.start = previous;
        }
        seen.value = value;
        seen.export = starts.exports;
        seen.start
    }
}

impl Drop for Export<'_> {
    fn drop(&mut self) {
        let export = self.starts.exports;
        self.starts.series.retain(|_, seen| seen.export == export);
        self.starts.previous_time = self.time;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_series_starts_at_its_first_point_and_a_restart_at_its_previous_point() {
        let mut starts = StartTimes::default();
        let a = [("cgroup", Label::Str("/a"))];
        let b = [("cgroup", Label::Str("/b"))];
        {
            // A counter that was counting before the agent saw it (12 s of a cgroup's CPU):
            // its first point is a reset of unknown start.
            let mut export = starts.begin(100);
            assert_eq!(export.start("cpu", &a, 12.0), 100);
        }
        {
            let mut export = starts.begin(200);
            assert_eq!(export.start("cpu", &a, 13.0), 100);
            assert_eq!(export.start("cpu", &b, 3.0), 200);
        }
        {
            let mut export = starts.begin(300);
            // Restarted (13 → 0.04) since the point at 200.
            assert_eq!(export.start("cpu", &a, 0.04), 200);
            assert_eq!(export.start("cpu", &b, 4.0), 200);
        }
        {
            let mut export = starts.begin(400);
            assert_eq!(export.start("cpu", &a, 1.0), 200);
            // Another family's series with the same labels is a series of its own.
            assert_eq!(export.start("memory", &a, 1.0), 400);
        }
        // /b was not in the export at 400: forgotten, and a new unknown-start reset when it
        // comes back.
        let mut export = starts.begin(500);
        assert_eq!(export.start("cpu", &b, 5.0), 500);
    }
}
