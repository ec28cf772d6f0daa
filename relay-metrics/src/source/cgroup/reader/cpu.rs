//! CPU usage, bandwidth counters and the effective CPU limit.

use super::super::parse::{
    keyed_u64, parse_cpu_list_count, parse_cpu_max, parse_v1_cpu_quota, CpuQuota,
};
use super::super::sample::CpuSample;
use super::super::target::CgroupTarget;
use super::super::{CgroupError, CgroupVersion};
use super::slot::{data, limit_levels, read_u64, Kept, Outcome, Slot};
use super::Io;

#[derive(Debug)]
pub(super) enum Usage {
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
pub(super) enum QuotaLevel {
    V2 { max: Slot },
    V1 { quota: Slot, period: Slot },
}

#[derive(Debug)]
pub(super) struct CpuPlan {
    usage: Usage,
    throttling: Option<(CgroupVersion, Slot)>,
    quota: Option<(CgroupVersion, Vec<QuotaLevel>)>,
    /// The leaf's effective cpuset, with v1's `cpuset.cpus` as fallback.
    cpuset: Option<(CgroupVersion, Slot, Option<Slot>)>,
    limit: Kept<(Option<CgroupVersion>, Option<f64>)>,
}

impl CpuPlan {
    pub(super) fn new(target: &CgroupTarget) -> Self {
        let cpu = target.controller_dir("cpu");
        let throttling = cpu.map(|(version, dir)| (version, Slot::leaf_file(dir, "cpu.stat")));
        let quota = cpu.map(|(version, dir)| {
            let levels = limit_levels(dir).map(|level| match version {
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
            limit: Kept::default(),
        }
    }

    pub(super) fn read(&mut self, io: &mut Io<'_>) -> Result<CpuSample, CgroupError> {
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
        let (quota, cpuset) = (&mut self.quota, &mut self.cpuset);
        let (limit_version, limit) = self.limit.get(io, |io| {
            let (version, limit) = effective_limit(quota, cpuset, io)?;
            Ok((version.filter(|_| io.got_data), limit))
        })?;
        sample.limit_version = limit_version;
        sample.effective_cpu_limit_lp = limit;
        Ok(sample)
    }
}

/// min(quota ÷ period over the levels, CPUs of the leaf's cpuset), with the version of the
/// files it came from.
fn effective_limit(
    quota: &mut Option<(CgroupVersion, Vec<QuotaLevel>)>,
    cpuset: &mut Option<(CgroupVersion, Slot, Option<Slot>)>,
    io: &mut Io<'_>,
) -> Result<(Option<CgroupVersion>, Option<f64>), CgroupError> {
    let version = quota
        .as_ref()
        .map(|(v, _)| *v)
        .or(cpuset.as_ref().map(|(v, _, _)| *v));
    let mut min: Option<f64> = None;
    let mut fold = |lp: f64| min = Some(min.map_or(lp, |m: f64| m.min(lp)));
    if let Some((_, levels)) = quota {
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
    if let Some((_, primary, fallback)) = cpuset {
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

pub(super) fn v2_usage(stat: &[u8], sample: &mut CpuSample) {
    sample.usage_version = Some(CgroupVersion::V2);
    sample.usage_ns = keyed_u64(stat, b"usage_usec").and_then(|us| us.checked_mul(1000));
    sample.user_usec = keyed_u64(stat, b"user_usec");
    sample.system_usec = keyed_u64(stat, b"system_usec");
}
