//! Reading a cgroup's values through held descriptors.
//!
//! The reader builds a plan (one [`HeldFile`] per interface file, ancestors included) the first
//! time it sees a target and keeps it while the target stays the same, so steady-state reads are
//! `pread`s into two reused buffers and parsing in place: no allocation and no `open`.

use std::path::{Path, PathBuf};

use super::parse::{
    keyed_u64, parse_cpu_list_count, parse_cpu_max, parse_limit, parse_psi, parse_u64,
    parse_v1_cpu_quota, parse_v1_memory_limit, CpuQuota, LimitValue,
};
use super::sample::{
    CgroupFields, CgroupSample, CpuSample, MemorySample, PidsSample, PressureSample,
};
use super::target::{CgroupDir, CgroupTarget};
use super::{CgroupError, CgroupVersion};
use crate::source::file::{HeldFile, SourceError};

/// Reads [`CgroupSample`]s, keeping the files of the last target open between reads.
#[derive(Debug, Default)]
pub struct CgroupReader {
    plan: Option<Plan>,
    buf: Vec<u8>,
    second: Vec<u8>,
}

impl CgroupReader {
    /// A reader with nothing open yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Closes every file and forgets which files were missing, so the next read probes them
    /// again (files appear when a controller is enabled for the cgroup).
    pub fn reset(&mut self) {
        self.plan = None;
    }

    /// Reads the groups in `want` for `target`.
    ///
    /// Missing files and invalid contents give `None` values. A removed cgroup gives
    /// [`CgroupError::Gone`]; other I/O errors (EACCES …) make the affected value `None`.
    pub fn read(
        &mut self,
        target: &CgroupTarget,
        want: CgroupFields,
    ) -> Result<CgroupSample, CgroupError> {
        if self.plan.as_ref().is_none_or(|plan| plan.target != *target) {
            self.plan = Some(Plan::new(target));
        }
        let Some(plan) = self.plan.as_mut() else {
            return Ok(CgroupSample::default());
        };
        let mut io = Io {
            buf: &mut self.buf,
            second: &mut self.second,
            got_data: false,
        };
        let mut sample = CgroupSample::default();
        if want.cpu {
            sample.cpu = plan.cpu.read(&mut io)?;
        }
        if want.memory {
            sample.memory = plan.memory.read(&mut io)?;
        }
        if want.pids {
            sample.pids = plan.pids.read(&mut io)?;
        }
        if want.pressure {
            sample.pressure = plan.pressure.read(&mut io)?;
        }
        // Files that were found missing are not probed again, so a removed cgroup whose files
        // were all missing would otherwise read as "all None" forever.
        if want != CgroupFields::NONE && !io.got_data {
            for leaf in plan.leaves() {
                if !leaf.exists() {
                    return Err(CgroupError::Gone {
                        path: leaf.to_path_buf(),
                    });
                }
            }
        }
        Ok(sample)
    }
}

/// The reader's buffers plus whether any file produced data during this read.
struct Io<'a> {
    buf: &'a mut Vec<u8>,
    second: &'a mut Vec<u8>,
    got_data: bool,
}

/// One interface file of one cgroup directory.
#[derive(Debug)]
struct Slot {
    file: HeldFile,
    /// The cgroup directory the read is about (the leaf, also for ancestor files): when it has
    /// disappeared the whole target is gone.
    leaf: PathBuf,
    /// Set once the file was missing while its cgroup existed; it is not probed again.
    absent: bool,
}

enum Outcome<'b> {
    Data(&'b [u8]),
    Absent,
    Unreadable,
}

impl Slot {
    fn new(dir: &Path, name: &str, leaf: &Path) -> Self {
        Self {
            file: HeldFile::new(dir.join(name)),
            leaf: leaf.to_path_buf(),
            absent: false,
        }
    }

    fn leaf_file(dir: &CgroupDir, name: &str) -> Self {
        Self::new(&dir.dir, name, &dir.dir)
    }

    /// The file `name` in `dir` and each ancestor up to the mount point, leaf first.
    fn chain(dir: &CgroupDir, name: &str) -> Vec<Self> {
        dir.levels()
            .map(|level| Self::new(level, name, &dir.dir))
            .collect()
    }

    fn read<'b>(&mut self, buf: &'b mut Vec<u8>, got_data: &mut bool) -> ReadResult<'b> {
        if self.absent {
            return Ok(Outcome::Absent);
        }
        let mut retried = false;
        loop {
            match self.file.read(buf) {
                Ok(_) => break,
                Err(error) => {
                    let errno = match &error {
                        SourceError::Io { source, .. } => source.raw_os_error(),
                        SourceError::Malformed { .. } => None,
                    };
                    // A held descriptor of a removed cgroup reads ENODEV; an open of a file
                    // in a removed directory fails with ENOENT.
                    let vanished = matches!(errno, Some(libc::ENOENT) | Some(libc::ENODEV));
                    if !vanished {
                        return Ok(Outcome::Unreadable);
                    }
                    if !self.leaf.exists() {
                        return Err(CgroupError::Gone {
                            path: self.leaf.clone(),
                        });
                    }
                    if errno == Some(libc::ENOENT) {
                        self.absent = true;
                        return Ok(Outcome::Absent);
                    }
                    // ENODEV while the directory exists: the cgroup was removed and created
                    // again under the same name; the descriptor was dropped, so reopen once.
                    if retried {
                        return Ok(Outcome::Unreadable);
                    }
                    retried = true;
                }
            }
        }
        *got_data = true;
        Ok(Outcome::Data(buf.as_slice()))
    }
}

type ReadResult<'b> = Result<Outcome<'b>, CgroupError>;

fn data<'b>(slot: Option<&mut Slot>, buf: &'b mut Vec<u8>, got: &mut bool) -> ReadResult<'b> {
    match slot {
        Some(slot) => slot.read(buf, got),
        None => Ok(Outcome::Absent),
    }
}

/// Min over a chain of limit files. `Absent` levels are skipped; an unreadable or invalid level
/// makes the whole limit `None`, as in Relay: a partial minimum could be a wrong number.
fn chain_min(
    chain: &mut [Slot],
    io: &mut Io<'_>,
    parse: fn(&[u8]) -> Option<LimitValue>,
) -> Result<Option<u64>, CgroupError> {
    let mut min: Option<u64> = None;
    for slot in chain {
        match slot.read(io.buf, &mut io.got_data)? {
            Outcome::Absent => {}
            Outcome::Unreadable => return Ok(None),
            Outcome::Data(bytes) => match parse(bytes) {
                None => return Ok(None),
                Some(LimitValue::Unlimited) => {}
                Some(LimitValue::Value(value)) => {
                    min = Some(min.map_or(value, |m| m.min(value)));
                }
            },
        }
    }
    Ok(min)
}

#[derive(Debug)]
struct Plan {
    target: CgroupTarget,
    cpu: CpuPlan,
    memory: MemoryPlan,
    pids: PidsPlan,
    pressure: PressurePlan,
}

impl Plan {
    fn new(target: &CgroupTarget) -> Self {
        Self {
            target: target.clone(),
            cpu: CpuPlan::new(target),
            memory: MemoryPlan::new(target),
            pids: PidsPlan::new(target),
            pressure: PressurePlan::new(target),
        }
    }

    fn leaves(&self) -> impl Iterator<Item = &Path> {
        self.target
            .v2
            .iter()
            .map(|d| d.dir.as_path())
            .chain(self.target.v1.iter().map(|d| d.dir.dir.as_path()))
    }
}

#[derive(Debug)]
enum Usage {
    None,
    /// v2: `usage_usec` etc. are in the same `cpu.stat` as the throttling counters.
    FromThrottlingStat,
    /// v2 `cpu.stat` alone: the cgroup core provides usage even where the cpu controller is
    /// bound to v1 (hybrid hosts); used when the target has no v1 cpuacct directory.
    V2Stat(Slot),
    V1 {
        usage: Slot,
        user: Slot,
        system: Slot,
    },
}

#[derive(Debug)]
enum QuotaLevel {
    V2 { max: Slot },
    V1 { quota: Slot, period: Slot },
}

#[derive(Debug)]
struct CpuPlan {
    usage: Usage,
    throttling: Option<(CgroupVersion, Slot)>,
    quota: Option<(CgroupVersion, Vec<QuotaLevel>)>,
    /// The leaf's effective cpuset, with v1's `cpuset.cpus` as fallback.
    cpuset: Option<(CgroupVersion, Slot, Option<Slot>)>,
}

impl CpuPlan {
    fn new(target: &CgroupTarget) -> Self {
        let cpu = target.controller_dir("cpu");
        let throttling = cpu.map(|(version, dir)| (version, Slot::leaf_file(dir, "cpu.stat")));
        let quota = cpu.map(|(version, dir)| {
            let levels = dir.levels().map(|level| match version {
                CgroupVersion::V2 => QuotaLevel::V2 {
                    max: Slot::new(level, "cpu.max", &dir.dir),
                },
                CgroupVersion::V1 => QuotaLevel::V1 {
                    quota: Slot::new(level, "cpu.cfs_quota_us", &dir.dir),
                    period: Slot::new(level, "cpu.cfs_period_us", &dir.dir),
                },
            });
            (version, levels.collect())
        });
        let usage = match (cpu, target.controller_dir("cpuacct")) {
            (_, Some((CgroupVersion::V1, acct))) => Usage::V1 {
                usage: Slot::leaf_file(acct, "cpuacct.usage"),
                user: Slot::leaf_file(acct, "cpuacct.usage_user"),
                system: Slot::leaf_file(acct, "cpuacct.usage_sys"),
            },
            (Some((CgroupVersion::V2, _)), _) => Usage::FromThrottlingStat,
            _ => match &target.v2 {
                Some(v2) => Usage::V2Stat(Slot::leaf_file(v2, "cpu.stat")),
                None => Usage::None,
            },
        };
        let cpuset = target
            .controller_dir("cpuset")
            .map(|(version, dir)| match version {
                CgroupVersion::V2 => (version, Slot::leaf_file(dir, "cpuset.cpus.effective"), None),
                CgroupVersion::V1 => (
                    version,
                    Slot::leaf_file(dir, "cpuset.effective_cpus"),
                    Some(Slot::leaf_file(dir, "cpuset.cpus")),
                ),
            });
        Self {
            usage,
            throttling,
            quota,
            cpuset,
        }
    }

    fn read(&mut self, io: &mut Io<'_>) -> Result<CpuSample, CgroupError> {
        let mut sample = CpuSample::default();
        if let Some((version, slot)) = &mut self.throttling {
            if let Outcome::Data(stat) = slot.read(io.buf, &mut io.got_data)? {
                sample.throttling_version = Some(*version);
                sample.nr_periods = keyed_u64(stat, b"nr_periods");
                sample.nr_throttled = keyed_u64(stat, b"nr_throttled");
                sample.throttled_usec = match version {
                    CgroupVersion::V2 => keyed_u64(stat, b"throttled_usec"),
                    CgroupVersion::V1 => keyed_u64(stat, b"throttled_time").map(|ns| ns / 1000),
                };
                if matches!(self.usage, Usage::FromThrottlingStat) {
                    v2_usage(stat, &mut sample);
                }
            }
        }
        match &mut self.usage {
            Usage::None | Usage::FromThrottlingStat => {}
            Usage::V2Stat(slot) => {
                if let Outcome::Data(stat) = slot.read(io.buf, &mut io.got_data)? {
                    v2_usage(stat, &mut sample);
                }
            }
            Usage::V1 {
                usage,
                user,
                system,
            } => {
                sample.usage_ns = read_u64(usage, io)?;
                sample.user_usec = read_u64(user, io)?.map(|ns| ns / 1000);
                sample.system_usec = read_u64(system, io)?.map(|ns| ns / 1000);
                let any = sample.usage_ns.or(sample.user_usec).or(sample.system_usec);
                sample.usage_version = any.map(|_| CgroupVersion::V1);
            }
        }
        let before = io.got_data;
        io.got_data = false;
        let (limit_version, limit) = self.effective_limit(io)?;
        sample.limit_version = limit_version.filter(|_| io.got_data);
        io.got_data |= before;
        sample.effective_cpu_limit_lp = limit;
        Ok(sample)
    }

    fn effective_limit(
        &mut self,
        io: &mut Io<'_>,
    ) -> Result<(Option<CgroupVersion>, Option<f64>), CgroupError> {
        let version = self
            .quota
            .as_ref()
            .map(|(v, _)| *v)
            .or(self.cpuset.as_ref().map(|(v, _, _)| *v));
        let mut min: Option<f64> = None;
        let mut fold = |lp: f64| min = Some(min.map_or(lp, |m: f64| m.min(lp)));
        if let Some((_, levels)) = &mut self.quota {
            for level in levels {
                let quota = match level {
                    QuotaLevel::V2 { max } => match max.read(io.buf, &mut io.got_data)? {
                        Outcome::Absent => continue,
                        Outcome::Unreadable => return Ok((version, None)),
                        Outcome::Data(bytes) => parse_cpu_max(bytes),
                    },
                    QuotaLevel::V1 { quota, period } => {
                        let quota = match quota.read(io.buf, &mut io.got_data)? {
                            Outcome::Absent => continue,
                            Outcome::Unreadable => return Ok((version, None)),
                            Outcome::Data(bytes) => bytes,
                        };
                        match period.read(io.second, &mut io.got_data)? {
                            Outcome::Data(period) => parse_v1_cpu_quota(quota, period),
                            Outcome::Absent | Outcome::Unreadable => None,
                        }
                    }
                };
                match quota {
                    None => return Ok((version, None)),
                    Some(CpuQuota::Unlimited) => {}
                    Some(CpuQuota::LogicalProcessors(lp)) => fold(lp),
                }
            }
        }
        if let Some((_, primary, fallback)) = &mut self.cpuset {
            let outcome = match primary.read(io.buf, &mut io.got_data)? {
                Outcome::Absent => data(fallback.as_mut(), io.buf, &mut io.got_data)?,
                other => other,
            };
            match outcome {
                Outcome::Absent => {}
                Outcome::Unreadable => return Ok((version, None)),
                Outcome::Data(bytes) => match parse_cpu_list_count(bytes) {
                    Some(count) => fold(f64::from(count)),
                    None => return Ok((version, None)),
                },
            }
        }
        Ok((version, min))
    }
}

fn v2_usage(stat: &[u8], sample: &mut CpuSample) {
    sample.usage_version = Some(CgroupVersion::V2);
    sample.usage_ns = keyed_u64(stat, b"usage_usec").and_then(|us| us.checked_mul(1000));
    sample.user_usec = keyed_u64(stat, b"user_usec");
    sample.system_usec = keyed_u64(stat, b"system_usec");
}

fn read_u64(slot: &mut Slot, io: &mut Io<'_>) -> Result<Option<u64>, CgroupError> {
    Ok(match slot.read(io.buf, &mut io.got_data)? {
        Outcome::Data(bytes) => parse_u64(bytes),
        Outcome::Absent | Outcome::Unreadable => None,
    })
}

#[derive(Debug)]
struct MemoryPlan {
    version: Option<CgroupVersion>,
    limits: Vec<Slot>,
    current: Option<Slot>,
    /// v2 `memory.events`, or v1 `memory.failcnt`.
    events: Option<Slot>,
    /// v1 `memory.oom_control`.
    oom_control: Option<Slot>,
}

impl MemoryPlan {
    fn new(target: &CgroupTarget) -> Self {
        let Some((version, dir)) = target.controller_dir("memory") else {
            return Self {
                version: None,
                limits: Vec::new(),
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
            current: Some(Slot::leaf_file(dir, current)),
            events: Some(Slot::leaf_file(dir, events)),
            oom_control: (version == CgroupVersion::V1)
                .then(|| Slot::leaf_file(dir, "memory.oom_control")),
        }
    }

    fn read(&mut self, io: &mut Io<'_>) -> Result<MemorySample, CgroupError> {
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
        sample.limit_bytes = chain_min(&mut self.limits, io, parse)?;
        if let Some(slot) = &mut self.current {
            sample.current_bytes = read_u64(slot, io)?;
        }
        if let Outcome::Data(bytes) = data(self.events.as_mut(), io.buf, &mut io.got_data)? {
            match version {
                CgroupVersion::V2 => {
                    sample.high_events = keyed_u64(bytes, b"high");
                    sample.max_events = keyed_u64(bytes, b"max");
                    sample.oom_events = keyed_u64(bytes, b"oom");
                    sample.oom_kill_events = keyed_u64(bytes, b"oom_kill");
                }
                CgroupVersion::V1 => sample.max_events = parse_u64(bytes),
            }
        }
        if let Outcome::Data(bytes) = data(self.oom_control.as_mut(), io.buf, &mut io.got_data)? {
            sample.oom_kill_events = keyed_u64(bytes, b"oom_kill");
            sample.oom_events = sample.oom_kill_events;
            sample.under_oom = keyed_u64(bytes, b"under_oom").map(|flag| flag != 0);
        }
        sample.version = io.got_data.then_some(version);
        io.got_data |= before;
        Ok(sample)
    }
}

#[derive(Debug)]
struct PidsPlan {
    version: Option<CgroupVersion>,
    current: Option<Slot>,
    limits: Vec<Slot>,
    events: Option<Slot>,
}

impl PidsPlan {
    fn new(target: &CgroupTarget) -> Self {
        match target.controller_dir("pids") {
            Some((version, dir)) => Self {
                version: Some(version),
                current: Some(Slot::leaf_file(dir, "pids.current")),
                limits: Slot::chain(dir, "pids.max"),
                events: Some(Slot::leaf_file(dir, "pids.events")),
            },
            None => Self {
                version: None,
                current: None,
                limits: Vec::new(),
                events: None,
            },
        }
    }

    fn read(&mut self, io: &mut Io<'_>) -> Result<PidsSample, CgroupError> {
        let Some(version) = self.version else {
            return Ok(PidsSample::default());
        };
        let mut sample = PidsSample::default();
        let before = io.got_data;
        io.got_data = false;
        if let Some(slot) = &mut self.current {
            sample.current = read_u64(slot, io)?;
        }
        sample.limit = chain_min(&mut self.limits, io, parse_limit)?;
        if let Outcome::Data(bytes) = data(self.events.as_mut(), io.buf, &mut io.got_data)? {
            sample.max_events = keyed_u64(bytes, b"max");
        }
        sample.version = io.got_data.then_some(version);
        io.got_data |= before;
        Ok(sample)
    }
}

#[derive(Debug)]
struct PressurePlan {
    version: Option<CgroupVersion>,
    files: Option<[Slot; 3]>,
}

impl PressurePlan {
    fn new(target: &CgroupTarget) -> Self {
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

    fn read(&mut self, io: &mut Io<'_>) -> Result<PressureSample, CgroupError> {
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
