use std::time::{Duration, Instant};

use super::*;
use crate::model::{InterfaceCounts, IoValues};

const TICKS: u64 = 100;
const SECOND_NS: u64 = 1_000_000_000;

/// A process started at boot second `started_s`, with CPU ticks and I/O bytes.
fn process(
    pid: u32,
    started_s: u64,
    cpu_ticks: u64,
    io_bytes: Option<(u64, u64)>,
) -> ProcessCounters {
    ProcessCounters {
        pid,
        start_time_ticks: started_s * TICKS,
        utime_ticks: cpu_ticks,
        io: io_bytes.map(|(read_bytes, write_bytes)| IoValues {
            read_bytes,
            write_bytes,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Clock of a pass `seconds` after `origin`, with boot time 1000 s + seconds.
fn at(origin: Instant, seconds: u64) -> (Instant, u64) {
    (
        origin + Duration::from_secs(seconds),
        (1000 + seconds) * SECOND_NS,
    )
}

/// One origin's baselines, fed passes at `TICKS` ticks per second.
struct Passes {
    origin: Instant,
    baselines: Baselines,
}

impl Passes {
    fn new() -> Self {
        Self {
            origin: Instant::now(),
            baselines: Baselines::default(),
        }
    }

    /// A complete pass `seconds` after the origin.
    fn rates(
        &mut self,
        seconds: u64,
        processes: &[ProcessCounters],
        coverage: Coverage,
    ) -> ProcessRates {
        let clock = at(self.origin, seconds);
        self.baselines
            .process_rates(processes, clock, TICKS, coverage, true)
    }
}

#[test]
fn first_sample_has_no_rates_then_deltas_give_them() {
    let mut passes = Passes::new();
    let first = passes.rates(0, &[process(1, 10, 100, Some((1000, 0)))], Coverage::Strict);
    assert_eq!(first, ProcessRates::default());
    let second = passes.rates(
        2,
        &[process(1, 10, 300, Some((1100, 50)))],
        Coverage::Strict,
    );
    assert_eq!(second.cpu_logical_processors, Some(1.0));
    assert_eq!(second.read_bytes_per_second, Some(50.0));
    assert_eq!(second.write_bytes_per_second, Some(25.0));
    assert_eq!((second.read_pairs, second.write_pairs), (1, 1));
}

#[test]
fn an_exited_child_disappears_and_a_new_child_counts_from_zero() {
    let mut passes = Passes::new();
    let before = [
        process(1, 10, 100, Some((0, 0))),
        process(2, 20, 50, Some((0, 0))),
    ];
    passes.rates(0, &before, Coverage::Strict);
    // Child 2 exited; child 3 was born during the interval (boot second 1000.5 > 1000).
    let mut born = process(3, 0, 30, Some((150, 0)));
    born.start_time_ticks = 1000 * TICKS + 50;
    let after = [process(1, 10, 130, Some((0, 0))), born];
    let rates = passes.rates(1, &after, Coverage::Strict);
    assert_eq!(rates.cpu_logical_processors, Some(0.6));
    assert_eq!(rates.read_bytes_per_second, Some(150.0));
}

#[test]
fn a_long_running_process_joining_the_scope_is_not_a_spike() {
    let mut passes = Passes::new();
    passes.rates(0, &[process(1, 10, 100, None)], Coverage::Partial);
    // Process 7 started at boot second 5, long before the previous sample, with 10 000 s of CPU.
    let joined = process(7, 5, 1_000_000, None);
    let rates = passes.rates(1, &[process(1, 10, 150, None), joined], Coverage::Partial);
    assert_eq!(rates.cpu_logical_processors, Some(0.5));
}

#[test]
fn a_decreasing_counter_gives_no_rate_but_a_new_baseline() {
    let mut passes = Passes::new();
    passes.rates(0, &[process(1, 10, 500, Some((900, 0)))], Coverage::Strict);
    let reset = passes.rates(1, &[process(1, 10, 400, Some((100, 0)))], Coverage::Strict);
    assert_eq!(reset.cpu_logical_processors, None);
    assert_eq!(reset.read_bytes_per_second, None);
    let next = passes.rates(2, &[process(1, 10, 450, Some((200, 0)))], Coverage::Strict);
    assert_eq!(next.cpu_logical_processors, Some(0.5));
    assert_eq!(next.read_bytes_per_second, Some(100.0));
}

#[test]
fn missing_io_pairs_are_skipped_in_partial_scopes_and_fatal_in_strict_ones() {
    let run = |coverage| {
        let mut passes = Passes::new();
        let before = [process(1, 10, 0, Some((0, 0))), process(2, 10, 0, None)];
        passes.rates(0, &before, coverage);
        let after = [process(1, 10, 0, Some((100, 0))), process(2, 10, 0, None)];
        passes.rates(1, &after, coverage)
    };
    let partial = run(Coverage::Partial);
    assert_eq!(
        (partial.read_bytes_per_second, partial.read_pairs),
        (Some(100.0), 1)
    );
    let strict = run(Coverage::Strict);
    assert_eq!(strict.read_bytes_per_second, None);
}

#[test]
fn out_of_order_samples_do_not_rewind_the_baseline() {
    let mut passes = Passes::new();
    passes.rates(5, &[process(1, 10, 100, None)], Coverage::Strict);
    let stale = passes.rates(4, &[process(1, 10, 50, None)], Coverage::Strict);
    assert_eq!(stale, ProcessRates::default());
    let next = passes.rates(6, &[process(1, 10, 200, None)], Coverage::Strict);
    assert_eq!(next.cpu_logical_processors, Some(1.0));
}

#[test]
fn an_incomplete_pass_clears_the_baseline() {
    let mut passes = Passes::new();
    passes.rates(0, &[process(1, 10, 100, None)], Coverage::Strict);
    let clock = at(passes.origin, 1);
    passes
        .baselines
        .process_rates(&[], clock, TICKS, Coverage::Strict, false);
    let after = passes.rates(2, &[process(1, 10, 200, None)], Coverage::Strict);
    assert_eq!(after.cpu_logical_processors, None);
}

#[test]
fn system_cpu_rate_sums_busy_fractions_per_cpu() {
    let origin = Instant::now();
    let mut baselines = Baselines::default();
    let ticks = |cpu, busy, total| CpuTicks { cpu, busy, total };
    assert_eq!(
        baselines.system_cpu_rate(origin, &[ticks(0, 0, 0), ticks(1, 0, 0)]),
        None
    );
    let later = origin + Duration::from_secs(1);
    let rate = baselines.system_cpu_rate(later, &[ticks(0, 100, 100), ticks(1, 25, 100)]);
    assert_eq!(rate, Some(1.25));
    // No tick elapsed on a CPU: no rate, and the baseline stays for the next sample.
    let soon = later + Duration::from_millis(1);
    assert_eq!(
        baselines.system_cpu_rate(soon, &[ticks(0, 100, 100), ticks(1, 25, 100)]),
        None
    );
    let next = soon + Duration::from_secs(1);
    assert_eq!(
        baselines.system_cpu_rate(next, &[ticks(0, 150, 200), ticks(1, 25, 200)]),
        Some(0.5)
    );
    assert_eq!(
        baselines.system_cpu_rate(next + Duration::from_secs(1), &[ticks(0, 1, 300)]),
        None
    );
}

#[test]
fn system_cpu_rate_pairs_cpus_by_number_across_hotplug() {
    let origin = Instant::now();
    let mut baselines = Baselines::default();
    let ticks = |cpu, busy, total| CpuTicks { cpu, busy, total };
    let second = origin + Duration::from_secs(1);
    baselines.system_cpu_rate(origin, &[ticks(0, 0, 100), ticks(3, 900, 1000)]);
    // cpu3 went offline and cpu2 came online: as many lines, other CPUs. Paired by position,
    // cpu2's ticks less cpu3's (50 busy of 100) would pass for a rate: 1.0 in all.
    assert_eq!(
        baselines.system_cpu_rate(second, &[ticks(0, 50, 200), ticks(2, 950, 1100)]),
        None
    );
    // From then on, the new set against itself.
    assert_eq!(
        baselines.system_cpu_rate(
            second + Duration::from_secs(1),
            &[ticks(0, 100, 300), ticks(2, 1000, 1200)]
        ),
        Some(1.0)
    );
}

#[test]
fn interface_rates_need_a_baseline_and_reject_resets() {
    let origin = Instant::now();
    let mut baselines = Baselines::default();
    let interface = |name: &str, rx, tx| InterfaceValues {
        name: name.into(),
        counts: InterfaceCounts {
            rx_bytes: Some(rx),
            tx_bytes: Some(tx),
            ..Default::default()
        },
    };
    let out = baselines.interface_rates(origin, &[interface("eth0", 100, 100)]);
    assert_eq!(out, [(None, None)]);
    let later = origin + Duration::from_secs(2);
    let out =
        baselines.interface_rates(later, &[interface("eth0", 200, 50), interface("lo", 1, 1)]);
    assert_eq!(out, [(Some(50.0), None), (None, None)]);
    let next = later + Duration::from_secs(1);
    let out =
        baselines.interface_rates(next, &[interface("eth0", 260, 60), interface("lo", 11, 1)]);
    assert_eq!(out, [(Some(60.0), Some(10.0)), (Some(10.0), Some(0.0))]);
}

#[test]
fn cgroup_usage_rate_is_ns_per_ns() {
    let origin = Instant::now();
    let mut baselines = Baselines::default();
    assert_eq!(baselines.cgroup_usage_rate(origin, Some(1_000)), None);
    let later = origin + Duration::from_millis(500);
    assert_eq!(
        baselines.cgroup_usage_rate(later, Some(100_001_000)),
        Some(0.2)
    );
    assert_eq!(
        baselines.cgroup_usage_rate(later + Duration::from_secs(1), Some(5)),
        None
    );
}
