//! Memory, pids and pressure values.

use super::super::parse::{
    keyed_u64, parse_limit, parse_psi, parse_u64_trimmed, parse_v1_memory_limit,
};
use super::super::sample::{MemorySample, PidsSample, PressureSample};
use super::super::target::CgroupTarget;
use super::super::{CgroupError, CgroupVersion};
use super::slot::{chain_min, data, read_u64, Kept, Outcome, Slot};
use super::Io;
use crate::snapshot::MemoryEventCounts;

#[derive(Debug)]
pub(super) struct MemoryPlan {
    version: Option<CgroupVersion>,
    limits: Vec<Slot>,
    limit: Kept<Option<u64>>,
    current: Option<Slot>,
    /// v2 `memory.events`, or v1 `memory.failcnt`.
    events: Option<Slot>,
    /// v1 `memory.oom_control`.
    oom_control: Option<Slot>,
}

impl MemoryPlan {
    pub(super) fn new(target: &CgroupTarget) -> Self {
        let Some((version, dir)) = target.controller_dir("memory") else {
            return Self {
                version: None,
                limits: Vec::new(),
                limit: Kept::default(),
                current: None,
                events: None,
                oom_control: None,
            };
        };
        let (limit, current, events) = match version {
            CgroupVersion::V2 => ("memory.max", "memory.current", "memory.events"),
            CgroupVersion::V1 => (
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
                "memory.failcnt",
            ),
        };
        Self {
            version: Some(version),
            limits: Slot::chain(dir, limit),
            limit: Kept::default(),
            current: Some(Slot::leaf_file(dir, current)),
            events: Some(Slot::leaf_file(dir, events)),
            oom_control: (version == CgroupVersion::V1)
                .then(|| Slot::leaf_file(dir, "memory.oom_control")),
        }
    }

    pub(super) fn read(&mut self, io: &mut Io<'_>) -> Result<MemorySample, CgroupError> {
        let Some(version) = self.version else {
            return Ok(MemorySample::default());
        };
        let mut sample = MemorySample::default();
        let before = io.got_data;
        io.got_data = false;
        let parse = match version {
            CgroupVersion::V2 => parse_limit,
            CgroupVersion::V1 => parse_v1_memory_limit,
        };
        let limits = &mut self.limits;
        sample.limit_bytes = self.limit.get(io, |io| chain_min(limits, io, parse))?;
        if let Some(slot) = &mut self.current {
            sample.current_bytes = read_u64(slot, io)?;
        }
        if let Outcome::Data(bytes) = data(self.events.as_mut(), io.buf, &mut io.got_data)? {
            match version {
                CgroupVersion::V2 => {
                    sample.events =
                        MemoryEventCounts::from_names(|name| keyed_u64(bytes, name.as_bytes()));
                }
                CgroupVersion::V1 => sample.events.max = parse_u64_trimmed(bytes),
            }
        }
        if let Outcome::Data(bytes) = data(self.oom_control.as_mut(), io.buf, &mut io.got_data)? {
            sample.events.oom_kill = keyed_u64(bytes, b"oom_kill");
            sample.events.oom = sample.events.oom_kill;
            sample.under_oom = keyed_u64(bytes, b"under_oom").map(|flag| flag != 0);
        }
        sample.version = io.got_data.then_some(version);
        io.got_data |= before;
        Ok(sample)
    }
}

#[derive(Debug)]
pub(super) struct PidsPlan {
    version: Option<CgroupVersion>,
    current: Option<Slot>,
    limits: Vec<Slot>,
    limit: Kept<Option<u64>>,
    events: Option<Slot>,
}

impl PidsPlan {
    pub(super) fn new(target: &CgroupTarget) -> Self {
        match target.controller_dir("pids") {
            Some((version, dir)) => Self {
                version: Some(version),
                current: Some(Slot::leaf_file(dir, "pids.current")),
                limits: Slot::chain(dir, "pids.max"),
                limit: Kept::default(),
                events: Some(Slot::leaf_file(dir, "pids.events")),
            },
            None => Self {
                version: None,
                current: None,
                limits: Vec::new(),
                limit: Kept::default(),
                events: None,
            },
        }
    }

    pub(super) fn read(&mut self, io: &mut Io<'_>) -> Result<PidsSample, CgroupError> {
        let Some(version) = self.version else {
            return Ok(PidsSample::default());
        };
        let mut sample = PidsSample::default();
        let before = io.got_data;
        io.got_data = false;
        if let Some(slot) = &mut self.current {
            sample.current = read_u64(slot, io)?;
        }
        let limits = &mut self.limits;
        sample.limit = self
            .limit
            .get(io, |io| chain_min(limits, io, parse_limit))?;
        if let Outcome::Data(bytes) = data(self.events.as_mut(), io.buf, &mut io.got_data)? {
            sample.max_events = keyed_u64(bytes, b"max");
        }
        sample.version = io.got_data.then_some(version);
        io.got_data |= before;
        Ok(sample)
    }
}

#[derive(Debug)]
pub(super) struct PressurePlan {
    version: Option<CgroupVersion>,
    files: Option<[Slot; 3]>,
}

impl PressurePlan {
    pub(super) fn new(target: &CgroupTarget) -> Self {
        // PSI is a v2 feature; some kernels (psi_v1) also expose it in v1 cpuacct/cpu groups.
        let source = target
            .v2
            .as_ref()
            .map(|d| (CgroupVersion::V2, d))
            .or_else(|| target.v1_dir("cpuacct").map(|d| (CgroupVersion::V1, d)))
            .or_else(|| target.v1_dir("cpu").map(|d| (CgroupVersion::V1, d)));
        match source {
            Some((version, dir)) => Self {
                version: Some(version),
                files: Some([
                    Slot::leaf_file(dir, "cpu.pressure"),
                    Slot::leaf_file(dir, "memory.pressure"),
                    Slot::leaf_file(dir, "io.pressure"),
                ]),
            },
            None => Self {
                version: None,
                files: None,
            },
        }
    }

    pub(super) fn read(&mut self, io: &mut Io<'_>) -> Result<PressureSample, CgroupError> {
        let mut sample = PressureSample::default();
        let Some(files) = &mut self.files else {
            return Ok(sample);
        };
        let mut any = false;
        let [cpu, memory, io_file] = files;
        for (slot, totals) in [
            (cpu, &mut sample.cpu),
            (memory, &mut sample.memory),
            (io_file, &mut sample.io),
        ] {
            if let Outcome::Data(bytes) = slot.read(io.buf, &mut io.got_data)? {
                *totals = parse_psi(bytes);
                any = true;
            }
        }
        if any {
            sample.version = self.version;
        }
        Ok(sample)
    }
}
