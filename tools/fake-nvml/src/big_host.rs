//! The processes of the `big_host` scenario: 8 devices and 200 processes spread over them, each
//! value a formula of the process's slot `p` (0 to 199), so that a test computes every one on
//! its own:
//!
//! - the PID is the `p`-th entry of `FAKE_NVML_PIDS` (10000 + `p` when the list is shorter);
//! - the device is `p % 8` (25 processes on each, listed in slot order);
//! - the compute list holds `p` when `p % 5 != 4`, using `(p + 1)` MiB;
//! - the graphics list holds `p` when `p % 5 >= 3`, using `2 (p + 1)` MiB (a process on both
//!   lists, `p % 5 == 3`, thus uses `2 (p + 1)` MiB by its larger entry);
//! - each filled utilisation query `g` holds, for every `p` with `p % 10 != 9`, an older sample
//!   (SM 99 %, memory 99 %) at `g × 10⁶ + 100` µs and a newer one (SM `p % 7 + 1` %, memory
//!   `p % 5 + 1` %) at `g × 10⁶ + 200 + p` µs; `p % 10 == 9` has no sample.

use crate::ffi::{ProcessInfo, ProcessUtilizationSample};
use crate::script::{process, sample, Script, MAX_DEVICES, MIB};

/// Processes of the scenario.
pub(crate) const PROCESSES: usize = 200;

/// The slots of the processes on device `index`, in order.
fn slots(index: usize) -> impl Iterator<Item = usize> {
    (index..PROCESSES).step_by(MAX_DEVICES)
}

fn mib(slot: usize, times: u64) -> u64 {
    (slot as u64 + 1) * times * MIB
}

pub(crate) fn compute_processes(script: &Script, index: usize) -> Vec<ProcessInfo> {
    slots(index)
        .filter(|p| p % 5 != 4)
        .map(|p| process(script.pid(p), mib(p, 1)))
        .collect()
}

pub(crate) fn graphics_processes(script: &Script, index: usize) -> Vec<ProcessInfo> {
    slots(index)
        .filter(|p| p % 5 >= 3)
        .map(|p| process(script.pid(p), mib(p, 2)))
        .collect()
}

/// Device `index`'s samples at `generation` newer than `last_seen_usec`.
pub(crate) fn utilization_samples(
    script: &Script,
    index: usize,
    generation: u64,
    last_seen_usec: u64,
) -> Vec<ProcessUtilizationSample> {
    let base_usec = generation * 1_000_000;
    slots(index)
        .filter(|p| p % 10 != 9)
        .flat_map(|p| {
            let pid = script.pid(p);
            // Both below 100, so the casts are exact.
            let (sm, memory) = ((p % 7 + 1) as u32, (p % 5 + 1) as u32);
            [
                sample(pid, base_usec + 100, 99, 99),
                sample(pid, base_usec + 200 + p as u64, sm, memory),
            ]
        })
        .filter(|sample| sample.time_stamp > last_seen_usec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::Scenario;

    #[test]
    fn every_process_sits_on_one_device_and_some_list() {
        let script = Script {
            scenario: Scenario::BigHost,
            sessions: 1,
            timeline: crate::timeline::Timeline::from_env().unwrap(),
            pids: Vec::new(),
            utilization_generation: [0; MAX_DEVICES],
            growth: 0,
            count_queries: [[0; 3]; MAX_DEVICES],
        };
        let mut seen: Vec<u32> = (0..MAX_DEVICES)
            .flat_map(|d| {
                let mut pids: Vec<u32> = compute_processes(&script, d)
                    .iter()
                    .chain(&graphics_processes(&script, d))
                    .map(|info| info.pid)
                    .collect();
                pids.sort_unstable();
                pids.dedup();
                pids
            })
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, (10_000..10_200).collect::<Vec<u32>>());
        // Slot 3 (device 3) is on both lists: 4 MiB compute, 8 MiB graphics.
        let graphics = graphics_processes(&script, 3);
        assert_eq!(
            (graphics[0].pid, graphics[0].used_gpu_memory),
            (10_003, 8 * MIB)
        );
        // Device 1: slots 1, 9, 17, …, 193; 9, 49, 89, 129 and 169 have no sample: 20 × 2.
        let samples = utilization_samples(&script, 1, 1, 0);
        assert_eq!(samples.len(), 40);
        assert!(samples.iter().all(|s| s.pid != 10_009));
        assert_eq!(utilization_samples(&script, 1, 1, 1_000_100).len(), 20);
    }
}
