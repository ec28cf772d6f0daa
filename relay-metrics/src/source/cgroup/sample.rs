//! What one read of a cgroup returns: raw values, each group tagged with the cgroup version its
//! files came from, so a snapshot can say where a number came from. A version is `None` when no
//! file of its group could be read.

use super::parse::PsiTotals;
use super::CgroupVersion;
use crate::snapshot::MemoryEventCounts;

/// Which value groups to read; each group costs its own file reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CgroupFields {
    /// CPU usage, throttling counters and the effective CPU limit.
    pub cpu: bool,
    /// Memory limit, usage and limit events.
    pub memory: bool,
    /// Process count, limit and limit events.
    pub pids: bool,
    /// Pressure stall totals (cpu, memory, io).
    pub pressure: bool,
}

impl CgroupFields {
    /// Every group.
    #[cfg(test)]
    pub(crate) const ALL: Self = Self {
        cpu: true,
        memory: true,
        pids: true,
        pressure: true,
    };
    /// No group (reads nothing).
    pub(crate) const NONE: Self = Self {
        cpu: false,
        memory: false,
        pids: false,
        pressure: false,
    };
}

/// Raw values of one cgroup read. A `None` value is absent (file missing, controller not enabled,
/// group not requested, or content invalid), never guessed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CgroupSample {
    /// CPU group.
    pub cpu: CpuSample,
    /// Memory group.
    pub memory: MemorySample,
    /// pids group.
    pub pids: PidsSample,
    /// Pressure stall information.
    pub pressure: PressureSample,
}

/// CPU values. Usage, throttling and the limit may come from different v1 hierarchies (cpuacct,
/// cpu, cpuset), so each part carries its own version.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CpuSample {
    /// Source of the usage values.
    pub usage_version: Option<CgroupVersion>,
    /// Total CPU time: v2 `cpu.stat usage_usec` × 1000; v1 `cpuacct.usage` (ns).
    pub usage_ns: Option<u64>,
    /// User CPU time: v2 `cpu.stat user_usec`; v1 `cpuacct.usage_user` ns ÷ 1000.
    pub user_usec: Option<u64>,
    /// System CPU time: v2 `cpu.stat system_usec`; v1 `cpuacct.usage_sys` ns ÷ 1000.
    pub system_usec: Option<u64>,
    /// Source of the bandwidth counters.
    pub throttling_version: Option<CgroupVersion>,
    /// Enforcement periods that had runnable tasks (`cpu.stat nr_periods`).
    pub nr_periods: Option<u64>,
    /// Periods in which the group was throttled (`cpu.stat nr_throttled`).
    pub nr_throttled: Option<u64>,
    /// Time throttled: v2 `cpu.stat throttled_usec`; v1 `cpu.stat throttled_time` ns ÷ 1000.
    pub throttled_usec: Option<u64>,
    /// Source of the effective limit.
    pub limit_version: Option<CgroupVersion>,
    /// min(quota ÷ period over the directory and its ancestors up to the mount, CPUs in the
    /// leaf's effective cpuset), in logical processors. `None` when neither bounds it, or when
    /// any level is unreadable or invalid (Relay's rule: never a partial minimum).
    pub effective_cpu_limit_lp: Option<f64>,
}

/// Memory values.
///
/// cgroup v1 has no `memory.events`; its counters map onto Relay's events as follows:
/// - `memory.failcnt` counts how often usage hit `limit_in_bytes` (each failed charge attempt,
///   reclaim then usually succeeds), which is what v2's `max` event counts → `events.max`
///   (Relay `maximum`).
/// - `memory.oom_control oom_kill` counts OOM kills in the group. v1 has no count of OOM
///   situations, so the kill count is the closest exact counter and feeds both `events.oom`
///   (Relay `out_of_memory`) and `events.oom_kill`; an OOM under `oom_kill_disable 1` kills
///   nothing and shows only as `under_oom`.
/// - `memory.oom_control under_oom` is v1's "currently stuck in OOM" flag → `under_oom`.
/// - v1 has no `high` threshold and no `low` protection → `high` and `low` are `None`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemorySample {
    /// Source of these values.
    pub version: Option<CgroupVersion>,
    /// Effective limit: min over the directory and its ancestors up to the mount of v2
    /// `memory.max` / v1 `memory.limit_in_bytes`; `None` if no level has a limit.
    pub limit_bytes: Option<u64>,
    /// Usage: v2 `memory.current`; v1 `memory.usage_in_bytes`.
    pub current_bytes: Option<u64>,
    /// v2 `memory.events` (hierarchical), every key of the events list
    /// (`snapshot/target_values.rs`); v1 as above.
    pub events: MemoryEventCounts,
    /// v1 `memory.oom_control under_oom`. v2: none.
    pub under_oom: Option<bool>,
}

/// pids controller values (same files in v1 and v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PidsSample {
    /// Source of these values.
    pub version: Option<CgroupVersion>,
    /// `pids.current`.
    pub current: Option<u64>,
    /// Effective limit: min of numeric `pids.max` over the directory and its ancestors.
    pub limit: Option<u64>,
    /// `pids.events max`: forks refused because a limit was reached.
    pub max_events: Option<u64>,
}

/// Pressure stall totals (usually only on v2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PressureSample {
    /// Source of these values.
    pub version: Option<CgroupVersion>,
    /// `cpu.pressure`.
    pub cpu: PsiTotals,
    /// `memory.pressure`.
    pub memory: PsiTotals,
    /// `io.pressure`.
    pub io: PsiTotals,
}
