//! Fixed-rate ticks: deadlines at `start + n × period`, so a slow tick never shifts the ones after
//! it (no drift). A tick that is already past by a whole period is skipped and counted as
//! missed, instead of firing a burst of late ticks back to back.

use std::time::{Duration, Instant};

/// What happened at one tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    /// Index of this tick (0 for the first); skipped ticks consume indices.
    pub index: u64,
    /// How late the wake-up was relative to the tick's deadline.
    pub lateness: Duration,
    /// Ticks skipped just before this one because their time had passed.
    pub missed_before: u64,
}

/// A fixed-rate ticker on the monotonic clock.
#[derive(Debug, Clone)]
pub struct FixedRate {
    start: Instant,
    period: Duration,
    next_index: u64,
    missed_total: u64,
}

impl FixedRate {
    /// A ticker whose first tick is due at `start`. A zero period is raised to 1 µs.
    pub fn new(start: Instant, period: Duration) -> Self {
        Self {
            start,
            period: period.max(Duration::from_micros(1)),
            next_index: 0,
            missed_total: 0,
        }
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Ticks skipped so far.
    pub fn missed_total(&self) -> u64 {
        self.missed_total
    }

    fn deadline(&self, index: u64) -> Instant {
        let nanos = self.period.as_nanos().saturating_mul(u128::from(index));
        self.start + Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Decides the next tick as seen at `now`: how long to sleep first, and the tick.
    /// Pure, so the skipping rule is testable without sleeping.
    pub fn plan(&mut self, now: Instant) -> (Duration, Tick) {
        let mut index = self.next_index;
        let mut missed = 0;
        // Skip deadlines that a later deadline has also passed: firing them now would bunch.
        while self.deadline(index + 1) <= now {
            index += 1;
            missed += 1;
        }
        let deadline = self.deadline(index);
        self.next_index = index + 1;
        self.missed_total += missed;
        let sleep = deadline.saturating_duration_since(now);
        let lateness = now.saturating_duration_since(deadline);
        (
            sleep,
            Tick {
                index,
                lateness,
                missed_before: missed,
            },
        )
    }

    /// The timer slack `wait` asks for: 1 % of the period, between 1 µs and the kernel's
    /// default 50 µs. With the default, every wake-up is up to 50 µs late, a twentieth of a 1 ms
    /// period; spinning instead would cost a core's worth of CPU at 1 kHz.
    pub fn timer_slack(&self) -> Duration {
        (self.period / 100).clamp(Duration::from_micros(1), Duration::from_micros(50))
    }

    /// Sleeps until the next tick is due and returns it, with the measured lateness. Sets the
    /// calling thread's timer slack to [`FixedRate::timer_slack`] first (a best effort: a
    /// refusal only costs precision).
    pub fn wait(&mut self) -> Tick {
        let (sleep, mut tick) = self.plan(Instant::now());
        if !sleep.is_zero() {
            let slack_ns = u64::try_from(self.timer_slack().as_nanos()).unwrap_or(50_000);
            // The slack is per thread: one prctl per thread and value, not one per tick.
            SLACK_SET_NS.with(|set| {
                if set.get() != slack_ns && nix::sys::prctl::set_timerslack(slack_ns).is_ok() {
                    set.set(slack_ns);
                }
            });
            std::thread::sleep(sleep);
            let deadline = self.deadline(tick.index);
            tick.lateness = Instant::now().saturating_duration_since(deadline);
        }
        tick
    }
}

thread_local! {
    /// The timer slack this thread last set through [`FixedRate::wait`] (0: none).
    static SLACK_SET_NS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn deadlines_are_absolute_so_slow_ticks_do_not_drift() {
        let start = Instant::now();
        let mut ticker = FixedRate::new(start, 10 * MS);
        let (sleep, tick) = ticker.plan(start);
        assert_eq!((sleep, tick.index), (Duration::ZERO, 0));
        // The work of tick 0 took 7 ms: the next tick is still due at 10 ms, not 17.
        let (sleep, tick) = ticker.plan(start + 7 * MS);
        assert_eq!((sleep, tick.index, tick.missed_before), (3 * MS, 1, 0));
    }

    #[test]
    fn overdue_ticks_are_skipped_and_counted_not_bunched() {
        let start = Instant::now();
        let mut ticker = FixedRate::new(start, 10 * MS);
        ticker.plan(start);
        // Stalled until 35 ms: deadlines 10 and 20 ms are gone, 30 ms fires 5 ms late.
        let (sleep, tick) = ticker.plan(start + 35 * MS);
        assert_eq!(sleep, Duration::ZERO);
        assert_eq!(
            (tick.index, tick.missed_before, tick.lateness),
            (3, 2, 5 * MS)
        );
        assert_eq!(ticker.missed_total(), 2);
        let (sleep, tick) = ticker.plan(start + 36 * MS);
        assert_eq!((sleep, tick.index), (4 * MS, 4));
    }

    #[test]
    fn wait_sleeps_until_the_deadline() {
        let start = Instant::now();
        let mut ticker = FixedRate::new(start, 5 * MS);
        ticker.wait();
        let tick = ticker.wait();
        assert_eq!(tick.index, 1);
        assert!(Instant::now() >= start + 5 * MS);
        assert_eq!(ticker.timer_slack(), Duration::from_micros(50));
        let mut fast = FixedRate::new(Instant::now(), MS);
        fast.wait();
        fast.wait();
        assert_eq!(nix::sys::prctl::get_timerslack().unwrap(), 10_000);
    }

    #[test]
    fn timer_slack_is_a_hundredth_of_the_period_within_bounds() {
        let slack = |period| FixedRate::new(Instant::now(), period).timer_slack();
        assert_eq!(slack(MS), Duration::from_micros(10));
        assert_eq!(slack(Duration::from_secs(1)), Duration::from_micros(50));
        assert_eq!(slack(Duration::from_micros(20)), Duration::from_micros(1));
    }
}
