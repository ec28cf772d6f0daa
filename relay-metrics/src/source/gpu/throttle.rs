//! Throttling counted over the GPU thread's periods: how many periods each limit event's
//! clock-event reasons were active, and how much the violation times grew.

use super::nvml_values::NvmlDeviceValues;
use super::{GpuThrottleEvent, ThrottleCounts};

/// Throttle counting of one device, kept across queries.
#[derive(Debug, Default)]
pub(super) struct ThrottleState {
    pub(super) identifier: String,
    counts: ThrottleCounts,
    power_base_ns: Option<u64>,
    thermal_base_ns: Option<u64>,
}

impl ThrottleState {
    /// A new count for the device `identifier`.
    pub(super) fn new(identifier: String) -> Self {
        Self {
            identifier,
            ..Self::default()
        }
    }

    /// Counts one period of `values`.
    pub(super) fn count(&mut self, values: &NvmlDeviceValues) -> ThrottleCounts {
        if let Some(mask) = values.throttle_reasons {
            self.counts.sampled_periods += 1;
            for (slot, event) in self
                .counts
                .active_periods
                .iter_mut()
                .zip(GpuThrottleEvent::ALL)
            {
                if mask & event.mask() != 0 {
                    *slot += 1;
                }
            }
        }
        self.counts.power_violation_ns = growth(&mut self.power_base_ns, values.violation_power_ns);
        self.counts.thermal_violation_ns =
            growth(&mut self.thermal_base_ns, values.violation_thermal_ns);
        self.counts
    }
}

/// Growth of a cumulative counter since its first reading; a counter that went backwards (the
/// driver reloaded) starts a new base, keeping what was counted before unknown.
fn growth(base: &mut Option<u64>, current: Option<u64>) -> Option<u64> {
    let current = current?;
    match *base {
        Some(first) if current >= first => Some(current - first),
        _ => {
            *base = Some(current);
            Some(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_starts_at_zero_and_restarts_when_the_counter_goes_back() {
        let mut base = None;
        assert_eq!(growth(&mut base, None), None);
        assert_eq!(growth(&mut base, Some(100)), Some(0));
        assert_eq!(growth(&mut base, Some(250)), Some(150));
        assert_eq!(growth(&mut base, Some(40)), Some(0), "driver reloaded");
        assert_eq!(growth(&mut base, Some(50)), Some(10));
    }

    #[test]
    fn periods_count_each_event_whose_bits_are_set() {
        let mut state = ThrottleState::default();
        let mut values = NvmlDeviceValues {
            throttle_reasons: Some(0x4),
            ..NvmlDeviceValues::default()
        };
        state.count(&values);
        values.throttle_reasons = Some(0x40);
        state.count(&values);
        values.throttle_reasons = None;
        let counts = state.count(&values);
        assert_eq!(
            counts.sampled_periods, 2,
            "an unreadable period is not sampled"
        );
        assert_eq!(counts.active_periods, [1, 1, 1]);
    }
}
