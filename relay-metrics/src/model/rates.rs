//! Rates: the previous sample of a series and the deltas against it (Relay 0.10.4).
//!
//! One [`Baselines`] belongs to one series (a collector's on-demand calls, or one sampler).
//! A counter that decreased gives `None` for that rate (and the new baseline is still stored);
//! a sample that is not later than the baseline is ignored.
//!
//! One deliberate difference from Relay: a process that is new to the baseline contributes its
//! whole lifetime counters only when it *started* after the previous sample (its start time says
//! so). A long-running process that merely joined the scope (moved into the cgroup, re-parented)
//! contributes nothing for that one interval, instead of its entire history as a spike.

use std::sync::Arc;
use std::time::Instant;

use super::aggregate::Coverage;
use super::{CpuTicks, InterfaceValues, ProcessCounters};
use crate::FastMap;

/// Per-series state for rates.
#[derive(Debug, Default)]
pub(crate) struct Baselines {
    process_clock: Option<PassClock>,
    processes: FastMap<ProcessKey, ProcessBaseline>,
    /// Scratch map swapped with `processes` each pass, so steady state does not allocate.
    next_processes: FastMap<ProcessKey, ProcessBaseline>,
    system_cpu: Option<(Instant, Vec<CpuTicks>)>,
    interfaces: Vec<InterfaceBaseline>,
    /// Per-interface rates of the last reading, reused between passes.
    interface_rates: Vec<RatePair>,
    /// When the interface counters behind `interface_rates` were read.
    interfaces_read_at: Option<Instant>,
    cgroup_usage: Option<(Instant, u64)>,
}

/// Receive and transmit rates of one interface (bytes per second).
pub(crate) type RatePair = (Option<f64>, Option<f64>);

impl Baselines {
    /// Forgets every baseline (target change).
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }
}

type ProcessKey = (u32, u64);

#[derive(Debug, Clone, Copy)]
struct PassClock {
    instant: Instant,
    boottime_ns: u64,
}

#[derive(Debug, Clone, Copy)]
struct ProcessBaseline {
    cpu_ticks: u64,
    run_ns: Option<u64>,
    read_bytes: Option<u64>,
    write_bytes: Option<u64>,
}

#[derive(Debug, Clone)]
struct InterfaceBaseline {
    name: Arc<str>,
    instant: Instant,
    rx_bytes: Option<u64>,
    tx_bytes: Option<u64>,
}

/// Rates derived from the per-process counters of a pass.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcessRates {
    /// CPU use (logical processors) from utime + stime.
    pub cpu_logical_processors: Option<f64>,
    /// CPU use (logical processors) from schedstat run time (ns precision).
    pub run_logical_processors: Option<f64>,
    /// Bytes read per second.
    pub read_bytes_per_second: Option<f64>,
    /// Bytes written per second.
    pub write_bytes_per_second: Option<f64>,
    /// Processes with a usable read pair.
    pub read_pairs: u64,
    /// Processes with a usable write pair.
    pub write_pairs: u64,
}

/// One rate being accumulated over processes.
#[derive(Debug, Clone, Copy)]
struct Accumulator {
    delta: u64,
    pairs: u64,
    broken: bool,
}

impl Accumulator {
    const fn new() -> Self {
        Self {
            delta: 0,
            pairs: 0,
            broken: false,
        }
    }

    /// Adds `current − previous`; a missing side is a missing pair (fatal when strict).
    fn add(&mut self, current: Option<u64>, previous: Option<u64>, coverage: Coverage) {
        match (current, previous) {
            (Some(current), Some(previous)) => match current.checked_sub(previous) {
                Some(delta) => {
                    self.pairs += 1;
                    match self.delta.checked_add(delta) {
                        Some(total) => self.delta = total,
                        None => self.broken = true,
                    }
                }
                None => self.broken = true,
            },
            _ if coverage == Coverage::Strict => self.broken = true,
            _ => {}
        }
    }

    fn per_second(&self, elapsed_seconds: f64) -> Option<f64> {
        (!self.broken && elapsed_seconds > 0.0).then(|| self.delta as f64 / elapsed_seconds)
    }
}

impl Baselines {
    /// Rates of the per-process counters since the previous pass of this series, then stores
    /// this pass as the new baseline (only if `store` — Relay keeps baselines only from complete
    /// passes). `start_ns` converts a process start time to `CLOCK_BOOTTIME` ns.
    pub(crate) fn process_rates(
        &mut self,
        processes: &[ProcessCounters],
        clock: (Instant, u64),
        ticks_per_second: u64,
        coverage: Coverage,
        store: bool,
    ) -> ProcessRates {
        let (instant, boottime_ns) = clock;
        let mut rates = ProcessRates::default();
        let previous_clock = self.process_clock;
        if let Some(previous) = previous_clock.filter(|p| instant > p.instant) {
            let elapsed = instant.duration_since(previous.instant).as_secs_f64();
            let mut cpu = Accumulator::new();
            let mut run = Accumulator::new();
            let mut read = Accumulator::new();
            let mut write = Accumulator::new();
            for process in processes {
                let key = (process.pid, process.start_time_ticks);
                let baseline = match self.processes.get(&key) {
                    Some(baseline) => *baseline,
                    None if started_after(process, previous.boottime_ns, ticks_per_second) => {
                        ProcessBaseline {
                            cpu_ticks: 0,
                            run_ns: Some(0),
                            read_bytes: Some(0),
                            write_bytes: Some(0),
                        }
                    }
                    // Joined the scope without being new: no interval to measure yet.
                    None => continue,
                };
                let io = process.io;
                cpu.add(
                    Some(process.utime_ticks + process.stime_ticks),
                    Some(baseline.cpu_ticks),
                    coverage,
                );
                // Strict in every scope: see the run-time sum in `derive`.
                run.add(process.run_time_ns, baseline.run_ns, Coverage::Strict);
                read.add(io.map(|io| io.read_bytes), baseline.read_bytes, coverage);
                write.add(io.map(|io| io.write_bytes), baseline.write_bytes, coverage);
            }
            let ticks = ticks_per_second.max(1) as f64;
            rates = ProcessRates {
                cpu_logical_processors: cpu.per_second(elapsed).map(|t| t / ticks),
                run_logical_processors: run.per_second(elapsed).map(|ns| ns / 1e9),
                read_bytes_per_second: read.per_second(elapsed),
                write_bytes_per_second: write.per_second(elapsed),
                read_pairs: read.pairs,
                write_pairs: write.pairs,
            };
            if processes.is_empty() {
                rates.cpu_logical_processors = None;
                rates.run_logical_processors = None;
            }
        }
        let is_newer = previous_clock.is_none_or(|p| instant > p.instant);
        if !store {
            self.process_clock = None;
            self.processes.clear();
        } else if is_newer {
            self.next_processes.clear();
            for process in processes {
                let baseline = ProcessBaseline {
                    cpu_ticks: process.utime_ticks + process.stime_ticks,
                    run_ns: process.run_time_ns,
                    read_bytes: process.io.map(|io| io.read_bytes),
                    write_bytes: process.io.map(|io| io.write_bytes),
                };
                self.next_processes
                    .insert((process.pid, process.start_time_ticks), baseline);
            }
            std::mem::swap(&mut self.processes, &mut self.next_processes);
            self.process_clock = Some(PassClock {
                instant,
                boottime_ns,
            });
        }
        rates
    }

    /// System CPU use in logical processors from per-CPU `/proc/stat` ticks: Σ Δbusy/Δtotal.
    /// `None` on the first sample, a CPU count change or a decrease. When no tick elapsed on some
    /// CPU the baseline is kept, so the next sample measures a longer, meaningful interval.
    pub(crate) fn system_cpu_rate(&mut self, instant: Instant, cpus: &[CpuTicks]) -> Option<f64> {
        if cpus.is_empty() {
            return None;
        }
        let Some((previous_instant, previous)) = &mut self.system_cpu else {
            self.system_cpu = Some((instant, cpus.to_vec()));
            return None;
        };
        if instant <= *previous_instant {
            return None;
        }
        let mut rate = Some(0.0);
        // Paired by CPU number: one CPU gone offline and another online keep the count.
        if !previous
            .iter()
            .map(|c| c.cpu)
            .eq(cpus.iter().map(|c| c.cpu))
        {
            rate = None;
        } else {
            for (current, before) in cpus.iter().zip(previous.iter()) {
                let busy = current.busy.checked_sub(before.busy);
                let total = current.total.checked_sub(before.total);
                match (busy, total) {
                    (Some(_), Some(0)) => return None,
                    (Some(busy), Some(total)) if busy <= total => {
                        rate = rate.map(|r| r + busy as f64 / total as f64);
                    }
                    _ => rate = None,
                }
            }
        }
        previous.clear();
        previous.extend_from_slice(cpus);
        *previous_instant = instant;
        rate
    }

    /// Per-interface (rx, tx) bytes per second, in the order of `interfaces`, read at
    /// `instant`. The same reading again (counters reused on a slower cadence) keeps the rates
    /// it had: against itself they would be unknown.
    pub(crate) fn interface_rates(
        &mut self,
        instant: Instant,
        interfaces: &[InterfaceValues],
    ) -> &[RatePair] {
        if self.interfaces_read_at == Some(instant)
            && self.interface_rates.len() == interfaces.len()
        {
            return &self.interface_rates;
        }
        self.interfaces_read_at = Some(instant);
        let mut out = std::mem::take(&mut self.interface_rates);
        out.clear();
        for interface in interfaces {
            let previous = self
                .interfaces
                .binary_search_by(|b| b.name.cmp(&interface.name))
                .ok()
                .map(|i| &self.interfaces[i])
                .filter(|b| instant > b.instant);
            let rates = match previous {
                Some(before) => {
                    let seconds = instant.duration_since(before.instant).as_secs_f64();
                    let rate = |current: Option<u64>, previous: Option<u64>| {
                        current?.checked_sub(previous?).map(|d| d as f64 / seconds)
                    };
                    (
                        rate(interface.counts.rx_bytes, before.rx_bytes),
                        rate(interface.counts.tx_bytes, before.tx_bytes),
                    )
                }
                None => (None, None),
            };
            out.push(rates);
        }
        let same_names = self.interfaces.len() == interfaces.len()
            && self
                .interfaces
                .iter()
                .zip(interfaces)
                .all(|(b, i)| b.name == i.name);
        if !same_names {
            self.interfaces = interfaces
                .iter()
                .map(|i| InterfaceBaseline {
                    name: Arc::clone(&i.name),
                    instant,
                    rx_bytes: i.counts.rx_bytes,
                    tx_bytes: i.counts.tx_bytes,
                })
                .collect();
            self.interfaces.sort_by(|a, b| a.name.cmp(&b.name));
            self.interface_rates = out;
            return &self.interface_rates;
        }
        for (baseline, interface) in self.interfaces.iter_mut().zip(interfaces) {
            if instant > baseline.instant {
                baseline.instant = instant;
                baseline.rx_bytes = interface.counts.rx_bytes;
                baseline.tx_bytes = interface.counts.tx_bytes;
            }
        }
        self.interface_rates = out;
        &self.interface_rates
    }

    /// cgroup CPU usage in logical processors since the previous sample.
    pub(crate) fn cgroup_usage_rate(
        &mut self,
        instant: Instant,
        usage_ns: Option<u64>,
    ) -> Option<f64> {
        let Some(usage_ns) = usage_ns else {
            self.cgroup_usage = None;
            return None;
        };
        let rate = match self.cgroup_usage {
            Some((before, _)) if instant <= before => return None,
            Some((before, previous)) => usage_ns
                .checked_sub(previous)
                .map(|delta| delta as f64 / instant.duration_since(before).as_nanos() as f64),
            None => None,
        };
        self.cgroup_usage = Some((instant, usage_ns));
        rate
    }
}

/// True when the process started at or after the previous sample (one tick of slack, since
/// start times have tick granularity).
fn started_after(
    process: &ProcessCounters,
    previous_boottime_ns: u64,
    ticks_per_second: u64,
) -> bool {
    let ticks_per_second = u128::from(ticks_per_second.max(1));
    let start_ns = u128::from(process.start_time_ticks) * 1_000_000_000 / ticks_per_second;
    let tick_ns = 1_000_000_000 / ticks_per_second;
    start_ns + tick_ns >= u128::from(previous_boottime_ns)
}

#[cfg(test)]
mod tests;
