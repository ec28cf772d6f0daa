//! `bench --process-source both`: the task-iterator and procfs paths measured side by side in
//! one run, collect by collect in alternation, so that load from elsewhere on the machine falls
//! on both alike.

use std::time::Instant;

use anyhow::{Context, Result};
use relay_metrics::config::{ProcessSource, ResourceMetricsConfig};
use relay_metrics::Collector;

use super::bench::round_us;

/// One path's figures.
#[derive(serde::Serialize)]
pub(crate) struct PathReport {
    /// `extensions.collector.process_source` of the last snapshot.
    process_source: String,
    /// Why procfs served, when it did.
    process_source_reason: Option<String>,
    median_us: f64,
    p99_us: f64,
    /// CPU time of the collecting thread per collect (µs, median).
    median_thread_cpu_us: f64,
    processes: Option<u64>,
}

/// Both reports.
#[derive(serde::Serialize)]
pub(crate) struct SideBySide {
    scope: relay_metrics::snapshot::MeasurementScope,
    iterations: u64,
    bpf_iter: PathReport,
    procfs: PathReport,
}

/// Builds one collector per path (the iterator one fails where the iterator cannot load) and
/// alternates their collects: 10 untimed each, then `iterations` timed each.
pub(crate) fn run(config: &ResourceMetricsConfig, iterations: u64) -> Result<SideBySide> {
    let collector = |source| {
        let mut config = config.clone();
        config.extensions.process_source = source;
        Collector::new(config).with_context(|| format!("the {} collector", source.as_str()))
    };
    let mut collectors = [
        collector(ProcessSource::BpfIter)?,
        collector(ProcessSource::Procfs)?,
    ];
    for _ in 0..10 {
        for collector in &mut collectors {
            drop(collector.collect());
        }
    }
    let capacity = usize::try_from(iterations).unwrap_or(0);
    let mut wall = [Vec::with_capacity(capacity), Vec::with_capacity(capacity)];
    let mut cpu = [Vec::with_capacity(capacity), Vec::with_capacity(capacity)];
    let mut last = [None, None];
    for round in 0..iterations {
        // Alternate which path goes first, so neither always follows the other.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for index in order {
            let cpu_before = thread_cpu_us();
            let started = Instant::now();
            let snapshot = collectors[index].collect();
            wall[index].push(started.elapsed().as_secs_f64() * 1e6);
            cpu[index].push(thread_cpu_us() - cpu_before);
            last[index] = Some(snapshot);
        }
    }
    let report = |index: usize| {
        let snapshot = last[index].as_ref();
        let collector = snapshot.map(|s| &s.extensions.collector);
        PathReport {
            process_source: collector
                .map(|c| c.process_source.to_string())
                .unwrap_or_default(),
            process_source_reason: collector
                .and_then(|c| c.process_source_reason.as_deref().map(str::to_owned)),
            median_us: round_us(quantile(&mut wall[index].clone(), 0.5)),
            p99_us: round_us(quantile(&mut wall[index].clone(), 0.99)),
            median_thread_cpu_us: round_us(quantile(&mut cpu[index].clone(), 0.5)),
            processes: snapshot
                .and_then(|s| s.process_sampling.as_ref())
                .map(|s| s.sampled_processes),
        }
    };
    Ok(SideBySide {
        scope: collectors[0].scope(),
        iterations,
        bpf_iter: report(0),
        procfs: report(1),
    })
}

fn quantile(values: &mut [f64], quantile: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let index = ((values.len() as f64 - 1.0) * quantile).round() as usize;
    values.get(index).copied().unwrap_or(0.0)
}

/// CPU time of the calling thread (µs, ns precision: the scheduler's run time).
fn thread_cpu_us() -> f64 {
    use nix::time::{clock_gettime, ClockId};
    match clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID) {
        Ok(time) => time.tv_sec() as f64 * 1e6 + time.tv_nsec() as f64 / 1e3,
        Err(_) => f64::NAN,
    }
}
