//! Summing per-process counters with Relay's coverage rules (Relay 0.10.4).

use super::ProcessCounters;

/// A sum over processes and how many processes supplied a value to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sum {
    /// The sum; `None` when nobody supplied it, on overflow, or (strict) when a process lacked it.
    pub value: Option<u64>,
    /// Processes that supplied a value (`field_sampled_processes`).
    pub supplied: u64,
}

/// How missing values affect a sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Coverage {
    /// Tree and application scopes: one process without the value makes the sum unknown,
    /// because a partial sum of a small set would be a wrong number.
    Strict,
    /// Global and cgroup scopes: sum what was readable; the coverage count says how much.
    Partial,
}

/// Sums `field` over `processes`.
pub(crate) fn sum(
    processes: &[ProcessCounters],
    coverage: Coverage,
    field: impl Fn(&ProcessCounters) -> Option<u64>,
) -> Sum {
    let mut total: Option<u64> = Some(0);
    let mut supplied = 0u64;
    let mut missing = false;
    for process in processes {
        match field(process) {
            Some(value) => {
                supplied += 1;
                total = total.and_then(|t| t.checked_add(value));
            }
            None => missing = true,
        }
    }
    let value = if supplied == 0 || (missing && coverage == Coverage::Strict) {
        None
    } else {
        total
    };
    Sum { value, supplied }
}

/// Clock ticks to milliseconds, truncated (Relay's 10 ms granularity at 100 Hz).
pub(crate) fn ticks_to_ms(ticks: u64, ticks_per_second: u64) -> Option<u64> {
    if ticks_per_second == 0 {
        return None;
    }
    u64::try_from(u128::from(ticks) * 1000 / u128::from(ticks_per_second)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_io(values: &[Option<u64>]) -> Vec<ProcessCounters> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| ProcessCounters {
                pid: i as u32 + 1,
                open_fds: *v,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn partial_sums_skip_unreadable_counters() {
        let processes = with_io(&[Some(10), None, Some(20)]);
        let partial = sum(&processes, Coverage::Partial, |p| p.open_fds);
        assert_eq!(
            partial,
            Sum {
                value: Some(30),
                supplied: 2
            }
        );
        let strict = sum(&processes, Coverage::Strict, |p| p.open_fds);
        assert_eq!(
            strict,
            Sum {
                value: None,
                supplied: 2
            }
        );
    }

    #[test]
    fn sums_distinguish_zero_unavailable_and_overflow() {
        let zero = with_io(&[Some(0)]);
        assert_eq!(sum(&zero, Coverage::Strict, |p| p.open_fds).value, Some(0));
        let none = with_io(&[None, None]);
        assert_eq!(sum(&none, Coverage::Partial, |p| p.open_fds).value, None);
        let overflow = with_io(&[Some(u64::MAX), Some(1)]);
        assert_eq!(
            sum(&overflow, Coverage::Partial, |p| p.open_fds).value,
            None
        );
        assert_eq!(sum(&[], Coverage::Partial, |p| p.open_fds).value, None);
    }

    #[test]
    fn ticks_convert_to_truncated_milliseconds() {
        assert_eq!(ticks_to_ms(21, 100), Some(210));
        assert_eq!(ticks_to_ms(1, 3), Some(333));
        assert_eq!(ticks_to_ms(5, 0), None);
    }
}
