//! Start times of the cumulative series an exporter sends: a monotonic series present at the
//! first export starts when the agent did; one that appears later (a new cgroup) or whose value
//! goes down (a counter that restarted: a container restarted under the same cgroup path)
//! starts at the previous export's time, the last time it was known not to be counting yet.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::output::metrics::Label;

/// Per series (metric name and attributes, hashed): its last value and its start time.
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
    pub(crate) fn start(
        &mut self,
        name: &str,
        labels: &[(&str, Label<'_>)],
        value: f64,
        agent_start: u64,
    ) -> u64 {
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
        let (first, previous) = (starts.exports == 1, starts.previous_time);
        let seen = starts.series.entry(key).or_insert(Seen {
            value,
            start: if first { agent_start } else { previous },
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
    fn a_restart_or_a_new_series_starts_at_the_previous_export() {
        let mut starts = StartTimes::default();
        let a = [("cgroup", Label::Str("/a"))];
        let b = [("cgroup", Label::Str("/b"))];
        {
            let mut export = starts.begin(100);
            assert_eq!(export.start("cpu", &a, 10.0, 1), 1);
        }
        {
            let mut export = starts.begin(200);
            assert_eq!(export.start("cpu", &a, 12.0, 1), 1);
            // Appeared since the export at 100.
            assert_eq!(export.start("cpu", &b, 3.0, 1), 100);
        }
        {
            let mut export = starts.begin(300);
            // Restarted (12 → 0.04) since the export at 200.
            assert_eq!(export.start("cpu", &a, 0.04, 1), 200);
            assert_eq!(export.start("cpu", &b, 4.0, 1), 100);
        }
        {
            let mut export = starts.begin(400);
            assert_eq!(export.start("cpu", &a, 1.0, 1), 200);
        }
        // /b was not in the export at 400: forgotten, and new again when it comes back.
        let mut export = starts.begin(500);
        assert_eq!(export.start("cpu", &b, 5.0, 1), 400);
    }
}
