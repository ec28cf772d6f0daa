//! Fixed-rate ticks: deadlines at `start + n × period`, so a slow tick never shifts the ones after
//! it (no drift). A tick that is already past by a whole period is skipped and counted as
//! missed, instead of firing a burst of late ticks back to back.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::time::TimeSpec;
use nix::time::{clock_gettime, clock_nanosleep, ClockId, ClockNanosleepFlags};

use crate::snapshot::SamplerInfo;

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
    /// `start` on `CLOCK_MONOTONIC` (the clock of `Instant` on Linux), so that `wait` can sleep
    /// until an absolute deadline: a relative sleep computed from a clock reading would add
    /// any preemption between the reading and the sleep to the tick's lateness. `None` if the
    /// clock could not be read (then `wait` sleeps relative).
    start_monotonic: Option<Duration>,
    period: Duration,
    next_index: u64,
    missed_total: u64,
}

impl FixedRate {
    /// A ticker whose first tick is due at `start`. A zero period is raised to 1 µs.
    pub fn new(start: Instant, period: Duration) -> Self {
        Self {
            start,
            start_monotonic: monotonic_time_of(start),
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

    fn offset(&self, index: u64) -> Duration {
        let nanos = self.period.as_nanos().saturating_mul(u128::from(index));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    fn deadline(&self, index: u64) -> Instant {
        self.start + self.offset(index)
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

    /// The next tick, with the wait for it left to `wait_until(deadline)` so that the caller
    /// can watch for something else meanwhile (a stop request, the command's exit): it returns
    /// `true` once the deadline has passed, or `false` to give up the tick (then `None`).
    /// `deadline` is `None` for a tick beyond the clock's range (a huge period). The tick's
    /// lateness runs from its deadline to the return of `wait_until`. Every sampling loop
    /// (`every`, `run`, the agent, Python polling) paces itself through this or [`Self::wait`].
    pub fn next_unless(
        &mut self,
        wait_until: impl FnOnce(Option<Instant>) -> bool,
    ) -> Option<SamplerInfo> {
        let planned_at = Instant::now();
        let (sleep, tick) = self.plan(planned_at);
        let deadline = planned_at.checked_add(sleep);
        if !wait_until(deadline) {
            return None;
        }
        let late = deadline.map_or(Duration::ZERO, |deadline| {
            Instant::now().saturating_duration_since(deadline)
        });
        Some(self.sampler_info(tick.index, tick.lateness + late))
    }

    /// What a snapshot taken at tick `index`, `lateness` after its deadline, says about its
    /// sampling (`extensions.sampler`).
    pub fn sampler_info(&self, index: u64, lateness: Duration) -> SamplerInfo {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        SamplerInfo {
            interval_usec: micros(self.period),
            tick_index: index,
            tick_lateness_usec: micros(lateness),
            missed_ticks_total: self.missed_total,
        }
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
            self.sleep_until(tick.index, sleep);
            let deadline = self.deadline(tick.index);
            let mut now = Instant::now();
            // Never early, even if `Instant` stopped being CLOCK_MONOTONIC (std documents the
            // clock as an implementation detail): finish the sleep on its own clock.
            if now < deadline {
                std::thread::sleep(deadline - now);
                now = Instant::now();
            }
            tick.lateness = now.saturating_duration_since(deadline);
        }
        tick
    }

    /// Sleeps until tick `index` is due: `clock_nanosleep` to the absolute deadline (retried
    /// after a signal with the same deadline), else `relative` from now.
    fn sleep_until(&self, index: u64, relative: Duration) {
        let Some(start) = self.start_monotonic else {
            std::thread::sleep(relative);
            return;
        };
        let deadline = TimeSpec::from_duration(start.saturating_add(self.offset(index)));
        loop {
            match clock_nanosleep(
                ClockId::CLOCK_MONOTONIC,
                ClockNanosleepFlags::TIMER_ABSTIME,
                &deadline,
            ) {
                Ok(_) => return,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    std::thread::sleep(relative);
                    return;
                }
            }
        }
    }
}

/// A stop request for a sampling thread that sleeps between ticks: clones share one flag, and a
/// request wakes the sleeper at once instead of at its next deadline.
#[derive(Debug, Clone, Default)]
pub struct StopSignal(Arc<(Mutex<bool>, Condvar)>);

impl StopSignal {
    /// Asks the thread to stop (it wakes from its sleep at once).
    pub fn request(&self) {
        let (flag, wake) = &*self.0;
        *flag.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
    }

    /// Sleeps until `deadline` (`None`: no deadline) unless a stop is requested first; true
    /// when one was.
    pub fn wait_until(&self, deadline: Option<Instant>) -> bool {
        let (flag, wake) = &*self.0;
        let mut stopped = flag.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if *stopped {
                return true;
            }
            let now = Instant::now();
            stopped = match deadline {
                Some(deadline) if now >= deadline => return false,
                Some(deadline) => {
                    wake.wait_timeout(stopped, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => wake.wait(stopped).unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// `instant` as a time on `CLOCK_MONOTONIC`, from one reading of each clock (they agree to
/// within the nanoseconds between the two readings).
fn monotonic_time_of(instant: Instant) -> Option<Duration> {
    let monotonic_now = Duration::from(clock_gettime(ClockId::CLOCK_MONOTONIC).ok()?);
    let now = Instant::now();
    match now.checked_duration_since(instant) {
        Some(ago) => monotonic_now.checked_sub(ago),
        None => monotonic_now.checked_add(instant.duration_since(now)),
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
        // Tick 1, or a later one where a loaded machine stalled this thread past its deadline.
        assert!(tick.index >= 1);
        // Woken at the absolute deadline: not before it, and not a clock conversion away
        // from it (the bound is loose for a loaded machine).
        let woken = Instant::now();
        assert!(woken >= start + 5 * MS * u32::try_from(tick.index).unwrap());
        assert!(
            woken < start + 2000 * MS,
            "woken {:?} after start",
            woken - start
        );
        assert_eq!(ticker.timer_slack(), Duration::from_micros(50));
        let mut fast = FixedRate::new(Instant::now(), MS);
        fast.wait();
        fast.wait();
        assert_eq!(nix::sys::prctl::get_timerslack().unwrap(), 10_000);
    }

    #[test]
    fn instants_convert_to_the_monotonic_clock_in_the_past_and_the_future() {
        let now = Instant::now();
        for (instant, offset_ms) in [(now - 10 * MS, -10i64), (now + 10 * MS, 10)] {
            let converted = monotonic_time_of(instant).unwrap();
            let monotonic_now = Duration::from(clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap());
            let expected_ms = i128::from(offset_ms);
            let actual_ns = converted.as_nanos() as i128 - monotonic_now.as_nanos() as i128;
            // Off by no more than the time spent between the readings (at most 50 ms here).
            let error_ns = actual_ns - expected_ms * 1_000_000;
            assert!(
                (-50_000_000..=0).contains(&error_ns),
                "{offset_ms} ms: {error_ns} ns"
            );
        }
    }

    #[test]
    fn timer_slack_is_a_hundredth_of_the_period_within_bounds() {
        let slack = |period| FixedRate::new(Instant::now(), period).timer_slack();
        assert_eq!(slack(MS), Duration::from_micros(10));
        assert_eq!(slack(Duration::from_secs(1)), Duration::from_micros(50));
        assert_eq!(slack(Duration::from_micros(20)), Duration::from_micros(1));
    }

    #[test]
    fn next_unless_gives_up_a_tick_when_asked_and_measures_lateness_from_the_deadline() {
        let start = Instant::now();
        let mut ticker = FixedRate::new(start, 20 * MS);
        let first = ticker.next_unless(|_| true).unwrap();
        assert_eq!((first.tick_index, first.interval_usec), (0, 20_000));
        // The wait returns 5 ms after the next tick's deadline: that is its lateness. (Tick 1,
        // or a later one where a loaded machine stalled this thread for a whole period.)
        let mut waited_for = None;
        let second = ticker
            .next_unless(|deadline| {
                let deadline = deadline.unwrap();
                waited_for = Some(deadline);
                std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + 5 * MS);
                true
            })
            .unwrap();
        assert!(second.tick_index >= 1);
        let index = u32::try_from(second.tick_index).unwrap();
        assert_eq!(waited_for, Some(start + 20 * MS * index));
        assert!(second.tick_lateness_usec >= 5_000, "{second:?}");
        assert_eq!(ticker.next_unless(|_| false), None);
    }

    #[test]
    fn a_stop_request_wakes_a_wait_without_deadline() {
        let stop = StopSignal::default();
        let requester = stop.clone();
        let waiter = std::thread::spawn(move || stop.wait_until(None));
        std::thread::sleep(10 * MS);
        requester.request();
        assert!(waiter.join().unwrap());
        assert!(!StopSignal::default().wait_until(Some(Instant::now())));
    }
}
