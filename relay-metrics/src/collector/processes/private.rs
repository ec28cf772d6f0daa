//! Private memory on its own cadence (`smaps_rollup`), the same for both paths.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Private memory on its own cadence: `smaps_rollup` walks every mapping (~90 µs a process),
/// so with an interval set, each process's value is re-read only when older than the interval.
/// Values are read in the same pass as the process's other files, so a process that exits
/// in between is dropped like any other exited process, never half-counted.
pub(super) struct PrivateMemoryCache {
    interval: Duration,
    /// pid → (start time, value, when read).
    values: HashMap<u32, (u64, Option<u64>, Instant)>,
    seen: Vec<u32>,
    pub(super) oldest_used: Option<Instant>,
}

impl PrivateMemoryCache {
    pub(super) fn new(interval: Duration) -> Self {
        Self {
            interval,
            values: HashMap::new(),
            seen: Vec::new(),
            oldest_used: None,
        }
    }

    pub(super) fn begin_pass(&mut self) {
        self.seen.clear();
        self.oldest_used = None;
    }

    /// True when the value of the process (`pid`, `start_time_ticks`) must be (re)read in this
    /// pass: none cached, older than the interval, or read from another process with the pid.
    pub(super) fn must_read(&self, pid: u32, start_time_ticks: u64) -> bool {
        self.interval.is_zero()
            || self.values.get(&pid).is_none_or(|(start, _, read_at)| {
                *start != start_time_ticks || read_at.elapsed() >= self.interval
            })
    }

    pub(super) fn store(
        &mut self,
        pid: u32,
        start_time_ticks: u64,
        private_kib: Option<u64>,
    ) -> Option<u64> {
        let now = Instant::now();
        self.seen.push(pid);
        self.oldest_used = Some(self.oldest_used.map_or(now, |o| o.min(now)));
        if !self.interval.is_zero() {
            self.values
                .insert(pid, (start_time_ticks, private_kib, now));
        }
        private_kib
    }

    pub(super) fn cached(&mut self, pid: u32) -> Option<u64> {
        self.seen.push(pid);
        let (_, value, read_at) = *self.values.get(&pid)?;
        self.oldest_used = Some(self.oldest_used.map_or(read_at, |o| o.min(read_at)));
        value
    }

    /// Drops values of processes that were not in this pass.
    pub(super) fn end_pass(&mut self) {
        if self.values.len() > self.seen.len() {
            self.seen.sort_unstable();
            let seen = &self.seen;
            self.values.retain(|pid, _| seen.binary_search(pid).is_ok());
        }
    }
}
