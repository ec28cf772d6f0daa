//! The scripted devices, processes and utilisation samples (see the crate docs for the table).

use crate::ffi::{
    NvmlReturn, ProcessInfo, ProcessUtilizationSample, ERROR_NOT_SUPPORTED, NO_INSTANCE,
    VALUE_NOT_AVAILABLE,
};

pub(crate) const MIB: u64 = 1024 * 1024;
/// Timestamp of the sample buffered before any query (µs).
pub(crate) const HISTORY_TIME_STAMP_USEC: u64 = 50;
/// The most devices a scenario serves (`big_host`); the others serve two.
pub(crate) const MAX_DEVICES: usize = 8;
/// The most PIDs `FAKE_NVML_PIDS` may list (the processes of `big_host`).
pub(crate) const MAX_PIDS: usize = crate::big_host::PROCESSES;

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scenario {
    TwoDevices,
    UuidFails,
    NotSupported,
    CountFails,
    InitFails,
    BigHost,
}

impl Scenario {
    pub(crate) fn parse(name: &str) -> Option<Self> {
        match name {
            "" | "two_devices" => Some(Self::TwoDevices),
            "uuid_fails" => Some(Self::UuidFails),
            "not_supported" => Some(Self::NotSupported),
            "count_fails" => Some(Self::CountFails),
            "init_fails" => Some(Self::InitFails),
            "big_host" => Some(Self::BigHost),
            _ => None,
        }
    }

    /// How many devices `nvmlDeviceGetCount_v2` reports.
    pub(crate) fn device_count(self) -> usize {
        match self {
            Self::BigHost => MAX_DEVICES,
            _ => 2,
        }
    }
}

pub(crate) struct Script {
    pub(crate) scenario: Scenario,
    /// `nvmlInit_v2` calls not yet matched by `nvmlShutdown` (NVML counts them too).
    pub(crate) sessions: u32,
    /// Device values over time.
    pub(crate) timeline: crate::timeline::Timeline,
    /// `FAKE_NVML_PIDS`, in slot order (see [`Script::pid`]).
    pub(crate) pids: Vec<u32>,
    /// Filled process-utilisation queries per device: the fake driver's sample clock.
    pub(crate) utilization_generation: [u64; MAX_DEVICES],
    /// `FAKE_NVML_GROWTH`: entries a list gains between a count query and the fill.
    pub(crate) growth: usize,
    /// Count queries (null buffer) per device and [`List`].
    pub(crate) count_queries: [[u64; 3]; MAX_DEVICES],
}

/// The lists NVML answers with the two-call protocol.
#[derive(Clone, Copy)]
pub(crate) enum List {
    Compute,
    Graphics,
    Utilization,
}

impl Script {
    /// The PID of process slot `slot`: the list's entry, else 1000, 2000, 3000 for the slots
    /// a, b, c of the two-device scenarios, 10000 + slot in `big_host`.
    pub(crate) fn pid(&self, slot: usize) -> u32 {
        if let Some(&pid) = self.pids.get(slot) {
            return pid;
        }
        let slot = u32::try_from(slot).unwrap_or(u32::MAX);
        match self.scenario {
            Scenario::BigHost => 10_000_u32.saturating_add(slot),
            _ => 1000_u32.saturating_mul(slot.saturating_add(1)),
        }
    }

    /// How many entries of `list` (of `len`) a count query of device `index` reports: with
    /// `FAKE_NVML_GROWTH` = n, every odd count query of a list reports n fewer, as if n
    /// processes started (or samples arrived) between it and the fill, which then answers
    /// `INSUFFICIENT_SIZE` to a buffer sized by the count; the next count is right.
    pub(crate) fn counted(&mut self, index: usize, list: List, len: usize) -> usize {
        let queries = &mut self.count_queries[index][list as usize];
        *queries += 1;
        if *queries % 2 == 1 {
            len.saturating_sub(self.growth)
        } else {
            len
        }
    }

    /// The a, b, c slots of the two-device scenarios.
    fn abc(&self) -> [u32; 3] {
        [self.pid(0), self.pid(1), self.pid(2)]
    }
}

/// Comma-separated PIDs, at most [`MAX_PIDS`]; empty entries are skipped.
pub(crate) fn parse_pids(text: &str) -> Option<Vec<u32>> {
    let pids = text
        .split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| part.trim().parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    (pids.len() <= MAX_PIDS).then_some(pids)
}

pub(crate) fn compute_processes(
    script: &Script,
    index: usize,
) -> Result<Vec<ProcessInfo>, NvmlReturn> {
    let [a, b, c] = script.abc();
    match (index, script.scenario) {
        (_, Scenario::BigHost) => Ok(crate::big_host::compute_processes(script, index)),
        (0, Scenario::NotSupported) => Err(ERROR_NOT_SUPPORTED),
        (0, _) => Ok(vec![process(a, 4096), process(b, MIB)]),
        _ => Ok(vec![process(c, VALUE_NOT_AVAILABLE)]),
    }
}

pub(crate) fn graphics_processes(script: &Script, index: usize) -> Vec<ProcessInfo> {
    if script.scenario == Scenario::BigHost {
        return crate::big_host::graphics_processes(script, index);
    }
    match index {
        0 => vec![process(script.pid(0), 8192)],
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
    if script.scenario == Scenario::BigHost {
        return crate::big_host::utilization_samples(script, index, generation, last_seen_usec);
    }
    let [a, b, c] = script.abc();
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
        .map(|(pid, time_stamp, sm_util, mem_util)| sample(pid, time_stamp, sm_util, mem_util))
        .filter(|sample| sample.time_stamp > last_seen_usec)
        .collect()
}

pub(crate) fn sample(
    pid: u32,
    time_stamp: u64,
    sm_util: u32,
    mem_util: u32,
) -> ProcessUtilizationSample {
    ProcessUtilizationSample {
        pid,
        time_stamp,
        sm_util,
        mem_util,
        enc_util: 0,
        dec_util: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_parse_with_defaults_for_missing_entries() {
        let script = |scenario, text| Script {
            scenario,
            sessions: 1,
            timeline: crate::timeline::Timeline::from_env().unwrap(),
            pids: parse_pids(text).unwrap(),
            utilization_generation: [0; MAX_DEVICES],
            growth: 0,
            count_queries: [[0; 3]; MAX_DEVICES],
        };
        assert_eq!(script(Scenario::TwoDevices, "").abc(), [1000, 2000, 3000]);
        assert_eq!(script(Scenario::TwoDevices, "7,8").abc(), [7, 8, 3000]);
        let big = script(Scenario::BigHost, "7,8");
        assert_eq!([big.pid(0), big.pid(1), big.pid(199)], [7, 8, 10_199]);
        assert_eq!(parse_pids("1,2,3,4"), Some(vec![1, 2, 3, 4]));
        let most = vec!["5"; MAX_PIDS].join(",");
        assert_eq!(parse_pids(&most).map(|pids| pids.len()), Some(MAX_PIDS));
        assert_eq!(parse_pids(&format!("{most},5")), None, "one PID too many");
        assert_eq!(parse_pids("x"), None);
    }

    #[test]
    fn utilization_samples_are_filtered_by_last_seen() {
        let script = Script {
            scenario: Scenario::TwoDevices,
            sessions: 1,
            timeline: crate::timeline::Timeline::from_env().unwrap(),
            pids: vec![1, 2, 3],
            utilization_generation: [0; MAX_DEVICES],
            growth: 0,
            count_queries: [[0; 3]; MAX_DEVICES],
        };
        assert_eq!(utilization_samples(&script, 0, 1, 0).len(), 4);
        assert_eq!(utilization_samples(&script, 0, 1, 50).len(), 3);
        assert_eq!(utilization_samples(&script, 0, 1, 1_000_150).len(), 1);
        assert!(utilization_samples(&script, 0, 1, 1_000_200).is_empty());
    }
}
