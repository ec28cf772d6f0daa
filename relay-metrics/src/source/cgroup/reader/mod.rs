//! Reading a cgroup's values through held descriptors.
//!
//! The reader builds a plan (one [`HeldFile`](crate::source::HeldFile) per interface file, ancestors included) the first
//! time it sees a target and keeps it while the target stays the same, so steady-state reads are
//! `pread`s into two reused buffers and parsing in place: no allocation and no `open`.

mod cpu;
mod groups;
mod slot;

use std::path::Path;
use std::time::{Duration, Instant};

use super::sample::CgroupFields;
use super::sample::CgroupSample;
use super::target::CgroupTarget;
use super::CgroupError;
use cpu::CpuPlan;
use groups::{MemoryPlan, PidsPlan, PressurePlan};

/// How old a target's limits (the minimum over its ancestors of the memory, pids and CPU limits,
/// and its cpuset) may be before a read reads them again. Relay reads them at every poll, and its
/// polls are 200 ms or more apart: at those intervals every read still reads them. Below it
/// (`run` samples every millisecond) their files are most of what a read would add, for values a
/// person changes by hand: a change shows within this age.
pub(crate) const LIMITS_MAX_AGE: Duration = Duration::from_millis(100);

/// Reads [`CgroupSample`]s, keeping the files of the last target open between reads.
#[derive(Debug, Default)]
pub(crate) struct CgroupReader {
    plan: Option<Plan>,
    buf: Vec<u8>,
    second: Vec<u8>,
}

impl CgroupReader {
    /// A reader with nothing open yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Reads the groups in `want` for `target`. Use one reader per target: a different target
    /// than last time rebuilds the plan (and reopens every file).
    ///
    /// Missing files and invalid contents give `None` values. A removed cgroup gives
    /// [`CgroupError::Gone`]; other I/O errors (EACCES …) make the affected value `None`.
    pub(crate) fn read(
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
            now: Instant::now(),
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

/// The reader's buffers, whether any file produced data during this read, and when it began
/// (the age of a kept limit is measured from it).
struct Io<'a> {
    buf: &'a mut Vec<u8>,
    second: &'a mut Vec<u8>,
    got_data: bool,
    now: Instant,
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
