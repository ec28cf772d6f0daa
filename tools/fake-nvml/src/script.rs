//! The scripted devices, processes and utilisation samples (see the crate docs for the table).

use crate::ffi::{
    NvmlReturn, ProcessInfo, ProcessUtilizationSample, ERROR_NOT_SUPPORTED, NO_INSTANCE,
    VALUE_NOT_AVAILABLE,
};

pub(crate) const MIB: u64 = 1024 * 1024;
/// Timestamp of the sample buffered before any query (µs).
pub(crate) const HISTORY_TIME_STAMP_USEC: u64 = 50;
pub(crate) const DEVICE_COUNT: usize = 2;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    TwoDevices,
    UuidFails,
    NotSupported,
    CountFails,
    InitFails,
}

impl Scenario {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "" | "two_devices" => Some(Self::TwoDevices),
            "uuid_fails" => Some(Self::UuidFails),
            "not_supported" => Some(Self::NotSupported),
            "count_fails" => Some(Self::CountFails),
            "init_fails" => Some(Self::InitFails),
            _ => None,
        }
    }
}

pub(crate) struct Script {
    pub(crate) scenario: Scenario,
    /// `nvmlInit_v2` calls not yet matched by `nvmlShutdown` (NVML counts them too).
    pub(crate) sessions: u32,
    /// Device values over time.
    pub(crate) timeline: crate::timeline::Timeline,
    pub(crate) pids: [u32; 3],
    /// Filled process-utilisation queries per device: the fake driver's sample clock.
    pub(crate) utilization_generation: [u64; DEVICE_COUNT],
}

pub(crate) fn parse_pids(text: &str) -> Option<[u32; 3]> {
    let mut pids = [1000, 2000, 3000];
    for (slot, part) in text.split(',').filter(|part| !part.is_empty()).enumerate() {
        *pids.get_mut(slot)? = part.trim().parse().ok()?;
    }
    Some(pids)
}

pub(crate) fn compute_processes(
    script: &Script,
    index: usize,
) -> Result<Vec<ProcessInfo>, NvmlReturn> {
    let [a, b, c] = script.pids;
    match (index, script.scenario) {
        (0, Scenario::NotSupported) => Err(ERROR_NOT_SUPPORTED),
        (0, _) => Ok(vec![process(a, 4096), process(b, MIB)]),
        _ => Ok(vec![process(c, VALUE_NOT_AVAILABLE)]),
    }
}

pub(crate) fn graphics_processes(script: &Script, index: usize) -> Vec<ProcessInfo> {
    match index {
        0 => vec![process(script.pids[0], 8192)],
        _ => Vec::new(),
    }
}

pub(crate) fn process(pid: u32, used_gpu_memory: u64) -> ProcessInfo {
    ProcessInfo {
        pid,
        used_gpu_memory,
        gpu_instance_id: NO_INSTANCE,
        compute_instance_id: NO_INSTANCE,
    }
}

/// The samples the driver holds at `generation` that are newer than `last_seen_usec`.
pub(crate) fn utilization_samples(
    script: &Script,
    index: usize,
    generation: u64,
    last_seen_usec: u64,
) -> Vec<ProcessUtilizationSample> {
    let [a, b, c] = script.pids;
    let base_usec = generation * 1_000_000;
    // (pid, µs after the generation's start, sm %, memory %)
    let scripted: &[(u32, u64, u32, u32)] = match index {
        0 => &[(a, 100, 20, 10), (a, 200, 30, 12), (c, 150, 5, 2)],
        _ => &[(c, 100, 70, 40)],
    };
    // Device 0's buffer still holds one sample from before the first query (pid b, sm 99): only
    // a caller that passes no or a stale `lastSeenTimeStamp` gets it.
    let history: &[(u32, u64, u32, u32)] = match index {
        0 => &[(b, HISTORY_TIME_STAMP_USEC, 99, 88)],
        _ => &[],
    };
    let current = scripted
        .iter()
        .map(|&(pid, offset_usec, sm_util, mem_util)| {
            (pid, base_usec + offset_usec, sm_util, mem_util)
        });
    history
        .iter()
        .copied()
        .chain(current)
        .map(
            |(pid, time_stamp, sm_util, mem_util)| ProcessUtilizationSample {
                pid,
                time_stamp,
                sm_util,
                mem_util,
                enc_util: 0,
                dec_util: 0,
            },
        )
        .filter(|sample| sample.time_stamp > last_seen_usec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_parse_with_defaults_for_missing_entries() {
        assert_eq!(parse_pids(""), Some([1000, 2000, 3000]));
        assert_eq!(parse_pids("7,8"), Some([7, 8, 3000]));
        assert_eq!(parse_pids("1,2,3,4"), None);
        assert_eq!(parse_pids("x"), None);
    }

    #[test]
    fn utilization_samples_are_filtered_by_last_seen() {
        let script = Script {
            scenario: Scenario::TwoDevices,
            sessions: 1,
            timeline: crate::timeline::Timeline::from_env().unwrap(),
            pids: [1, 2, 3],
            utilization_generation: [0; DEVICE_COUNT],
        };
        assert_eq!(utilization_samples(&script, 0, 1, 0).len(), 4);
        assert_eq!(utilization_samples(&script, 0, 1, 50).len(), 3);
        assert_eq!(utilization_samples(&script, 0, 1, 1_000_150).len(), 1);
        assert!(utilization_samples(&script, 0, 1, 1_000_200).is_empty());
    }
}
