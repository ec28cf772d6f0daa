//! `relay-metrics bench`: the collector's own cost (collect() latency and CPU time per collect).

use std::io::Write as _;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use relay_metrics::config::ProcessSource;
use relay_metrics::Collector;

use super::{bench_sources, resolve_config, TargetArgs};

/// The most collects `bench` times.
const MAX_BENCH_ITERATIONS: u64 = 10_000_000;

#[derive(Args)]
pub(crate) struct BenchArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Timed collects (after 10 untimed warm-up collects), at most 10,000,000 (their
    /// latencies are kept to compute the percentiles: 80 MB at the cap).
    #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_BENCH_ITERATIONS))]
    iterations: u64,
    /// Where per-process values come from (overrides `extensions.process_source`); `both`
    /// measures the task-iterator and procfs paths side by side, alternating collects.
    #[arg(long, value_enum)]
    process_source: Option<ProcessSourceArg>,
}

#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
enum ProcessSourceArg {
    Auto,
    BpfIter,
    Procfs,
    Both,
}

/// Measures and prints one JSON report; returns the exit code.
pub(crate) fn run(args: BenchArgs) -> Result<i32> {
    let BenchArgs {
        target,
        iterations,
        process_source,
    } = args;
    let mut config = resolve_config(&target)?;
    config.extensions.process_source = match process_source {
        None => config.extensions.process_source,
        Some(ProcessSourceArg::Auto) => ProcessSource::Auto,
        Some(ProcessSourceArg::BpfIter) => ProcessSource::BpfIter,
        Some(ProcessSourceArg::Procfs) => ProcessSource::Procfs,
        Some(ProcessSourceArg::Both) => ProcessSource::Auto,
    };
    let mut line = if matches!(process_source, Some(ProcessSourceArg::Both)) {
        serde_json::to_vec(&bench_sources::run(&config, iterations)?)?
    } else {
        serde_json::to_vec(&bench(Collector::new(config)?, iterations))?
    };
    line.push(b'\n');
    match std::io::stdout().lock().write_all(&line) {
        // The reader went away (`bench | true`): nothing left to report to.
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        result => result.map(|()| 0).context("cannot write the report"),
    }
}

/// What `bench` prints.
#[derive(serde::Serialize)]
struct BenchReport {
    scope: relay_metrics::snapshot::MeasurementScope,
    iterations: u64,
    median_us: f64,
    p99_us: f64,
    max_us: f64,
    /// Process CPU time (user + system, all threads) per collect.
    cpu_us_per_collect: f64,
    /// Processes in the last snapshot.
    processes: Option<u64>,
}

fn bench(mut collector: Collector, iterations: u64) -> BenchReport {
    for _ in 0..10 {
        drop(collector.collect());
    }
    let mut latencies_us = Vec::with_capacity(usize::try_from(iterations).unwrap_or(0));
    let cpu_before = process_cpu_us();
    let mut processes = None;
    for _ in 0..iterations {
        let started = Instant::now();
        let snapshot = collector.collect();
        latencies_us.push(started.elapsed().as_secs_f64() * 1e6);
        processes = snapshot
            .process_sampling
            .as_ref()
            .map(|s| s.sampled_processes);
    }
    let cpu_us = process_cpu_us() - cpu_before;
    latencies_us.sort_by(f64::total_cmp);
    let at = |quantile: f64| {
        let index = ((latencies_us.len() as f64 - 1.0) * quantile).round() as usize;
        latencies_us.get(index).copied().unwrap_or(0.0)
    };
    BenchReport {
        scope: collector.scope(),
        iterations,
        median_us: round_us(at(0.5)),
        p99_us: round_us(at(0.99)),
        max_us: round_us(at(1.0)),
        cpu_us_per_collect: round_us(cpu_us / iterations as f64),
        processes,
    }
}

/// A figure in µs as `bench` prints it: to 2 decimals (10 ns), finer than the clocks' noise.
pub(crate) fn round_us(us: f64) -> f64 {
    (us * 100.0).round() / 100.0
}

/// CPU time of this process so far (user + system), µs.
fn process_cpu_us() -> f64 {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let us = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e6 + t.tv_usec() as f64;
            us(usage.user_time()) + us(usage.system_time())
        }
        Err(_) => f64::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::round_us;

    #[test]
    fn figures_are_rounded_to_two_decimals_and_print_so() {
        assert_eq!(
            serde_json::to_string(&round_us(198.99499999999998)).unwrap(),
            "198.99"
        );
        assert_eq!(
            serde_json::to_string(&round_us(0.125_000_1)).unwrap(),
            "0.13"
        );
        assert_eq!(serde_json::to_string(&round_us(42.0)).unwrap(), "42.0");
        assert!(round_us(f64::NAN).is_nan());
    }
}
