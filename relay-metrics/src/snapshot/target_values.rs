//! The values table of a measured cgroup (`extensions.targets.cgroups[*]`): every value a
//! `relay_metrics_cgroup_*` family exports, declared once with its JSON path, family name
//! (Prometheus; the `otel` naming derives its name from it), kind, unit and help.
//!
//! The families of `output/target_metrics` are built from [`TARGET_FAMILIES`]; the tests below
//! hold the table to the struct (every numeric value of a measured cgroup's JSON is in the
//! table or in the short list of values exported another way, and each entry reads the value
//! at its JSON path) and to docs/METRICS.md (each family listed with its kind, each series'
//! label value named on its line).
//!
//! Adding a memory event is one line in [`memory_events!`]'s list below: the struct field,
//! its JSON key, its `event` series and its place in docs/METRICS.md's check follow from it,
//! for the measured cgroups and for the scope's (`extensions.cgroups`, whose reader asks
//! v2 `memory.events` for every name of the list and whose table is `snapshot/scope_values.rs`).

use serde::{Deserialize, Serialize};

use super::scope_values::ScopeValue;
use super::values::ValueUnit;
use super::CgroupTargetReport;

/// One `relay_metrics_cgroup_*` family and the values it exports.
#[derive(Debug, Clone, Copy)]
pub struct TargetFamily {
    /// Its `relay_metrics` name (a counter's ends in `_total`).
    pub name: &'static str,
    /// A counter (the kernel's, never decreasing while the cgroup exists), else a gauge.
    pub counter: bool,
    /// The unit of its values in the struct; the family converts them to its base unit (ns and
    /// µs to seconds).
    pub unit: ValueUnit,
    /// Its help text.
    pub help: &'static str,
    /// Its series: one without labels, or one per label value.
    pub series: &'static [TargetSeries],
}

/// One series of a [`TargetFamily`]: which value of a measured cgroup it reads.
#[derive(Debug, Clone, Copy)]
pub struct TargetSeries {
    /// The value's path in a measured cgroup's JSON (`memory_events.low`).
    pub json_path: &'static str,
    /// The labels that tell it apart from the family's other series (`event="low"`).
    pub labels: &'static [(&'static str, &'static str)],
    /// The value, in the family's [`ValueUnit`]; `None` when the cgroup does not have it.
    pub read: fn(&CgroupTargetReport) -> Option<f64>,
}

/// A family of one unlabelled series: the value at `$path` of the report's JSON, read by
/// `$read`.
macro_rules! single {
    ($name:literal, $counter:literal, $unit:ident, $help:literal, $path:literal, $read:expr) => {
        TargetFamily {
            name: $name,
            counter: $counter,
            unit: ValueUnit::$unit,
            help: $help,
            series: &[TargetSeries {
                json_path: $path,
                labels: &[],
                read: $read,
            }],
        }
    };
}

/// Declares [`MemoryEventCounts`] and its series of `relay_metrics_cgroup_memory_events_total`
/// from one list: each entry's name is the struct field, the JSON key, the v2 `memory.events`
/// key and the `event` label value.
macro_rules! memory_events {
    ($($(#[doc = $doc:literal])+ $name:ident,)+) => {
        /// Memory event counters: v2 `memory.events`; v1 has `max` (`memory.failcnt`) and
        /// `oom` and `oom_kill` (both `memory.oom_control` `oom_kill`) and no others.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
        pub struct MemoryEventCounts {
            $($(#[doc = $doc])+ pub $name: Option<u64>,)+
        }

        /// How many memory events the list has.
        pub(crate) const MEMORY_EVENTS: usize = [$(stringify!($name)),+].len();

        impl MemoryEventCounts {
            /// The series of `relay_metrics_cgroup_memory_events_total`, one per event.
            const SERIES: &'static [TargetSeries] = &[$(TargetSeries {
                json_path: concat!("memory_events.", stringify!($name)),
                labels: &[("event", stringify!($name))],
                read: |r| plain(r.memory_events.$name),
            },)+];

            /// The events' keys in the scope cgroup's JSON (`memory_low_events`), in list order.
            pub(crate) const SCOPE_KEYS: [&'static str; MEMORY_EVENTS] =
                [$(concat!("memory_", stringify!($name), "_events")),+];

            /// The scope cgroup's events in its values table (`snapshot/scope_values.rs`).
            pub(crate) const SCOPE_VALUES: &'static [ScopeValue] = &[$(ScopeValue {
                json_path: concat!("memory_", stringify!($name), "_events"),
                unit: ValueUnit::Count,
                source: concat!("v2 `memory.events` `", stringify!($name), "`:", $($doc),+),
                read: |r| plain(r.memory_events.$name),
            },)+];

            /// Each event asked by its name, which is its v2 `memory.events` key.
            pub(crate) fn from_names(mut value_of: impl FnMut(&'static str) -> Option<u64>) -> Self {
                Self { $($name: value_of(stringify!($name)),)+ }
            }

            /// The values, in list order.
            pub(crate) fn values(&self) -> [Option<u64>; MEMORY_EVENTS] {
                [$(self.$name),+]
            }
        }
    };
}

memory_events! {
    /// Reclaimed under high memory pressure though below its `memory.low` boundary (the low
    /// protection is over-committed). v2 only: v1 has no `memory.low`, so `null` there.
    low,
    /// Usage went over `memory.high`.
    high,
    /// Usage hit the limit (v1 `memory.failcnt`).
    max,
    /// Out-of-memory situations (v1: the OOM kills, `memory.oom_control` `oom_kill`).
    oom,
    /// Processes killed by the OOM killer (v1 `memory.oom_control` `oom_kill`).
    oom_kill,
}

pub(super) fn plain(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// A PSI series: `resource`, `kind` and the field of [`super::PressureTotals`].
macro_rules! pressure {
    ($resource:literal, $kind:literal, $field:ident) => {
        TargetSeries {
            json_path: concat!("pressure.", stringify!($field)),
            labels: &[("resource", $resource), ("kind", $kind)],
            read: |r| plain(r.pressure.$field),
        }
    };
}

/// Every `relay_metrics_cgroup_*` family of one series set per cgroup, in export order
/// (the per-device, per-GPU, per-interface and histogram families are `output/target_metrics`'s).
#[rustfmt::skip]
pub const TARGET_FAMILIES: &[TargetFamily] = &[
    single!("relay_metrics_cgroup_cpu_usage_seconds_total", true, Nanoseconds,
        "CPU time of the cgroup (its own counter).", "cpu_usage_ns", |r| plain(r.cpu_usage_ns)),
    single!("relay_metrics_cgroup_cpu_user_seconds_total", true, Nanoseconds,
        "User-mode CPU time of the cgroup (its own counter).", "cpu_user_ns", |r| plain(r.cpu_user_ns)),
    single!("relay_metrics_cgroup_cpu_system_seconds_total", true, Nanoseconds,
        "Kernel-mode CPU time of the cgroup (its own counter).", "cpu_system_ns", |r| plain(r.cpu_system_ns)),
    single!("relay_metrics_cgroup_cpu_periods_total", true, Count,
        "CPU bandwidth enforcement periods of the cgroup.", "cpu_periods", |r| plain(r.cpu_periods)),
    single!("relay_metrics_cgroup_cpu_throttled_periods_total", true, Count,
        "Enforcement periods in which the cgroup was throttled.", "cpu_throttled_periods", |r| plain(r.cpu_throttled_periods)),
    single!("relay_metrics_cgroup_cpu_throttled_seconds_total", true, Nanoseconds,
        "Time the cgroup was throttled by its CPU quota.", "cpu_throttled_ns", |r| plain(r.cpu_throttled_ns)),
    single!("relay_metrics_cgroup_cpu_limit_cores", false, Cores,
        "The cgroup's own CPU quota divided by its period.", "cpu_limit_cores", |r| r.cpu_limit_cores),
    single!("relay_metrics_cgroup_memory_usage_bytes", false, Bytes,
        "Memory charged to the cgroup.", "memory_current_bytes", |r| plain(r.memory_current_bytes)),
    single!("relay_metrics_cgroup_memory_peak_bytes", false, Bytes,
        "Highest memory charged to the cgroup.", "memory_peak_bytes", |r| plain(r.memory_peak_bytes)),
    single!("relay_metrics_cgroup_memory_limit_bytes", false, Bytes,
        "The cgroup's own memory limit.", "memory_limit_bytes", |r| plain(r.memory_limit_bytes)),
    single!("relay_metrics_cgroup_pids", false, Count,
        "Tasks the cgroup's pids controller counts.", "pids_current", |r| plain(r.pids_current)),
    single!("relay_metrics_cgroup_pids_limit", false, Count,
        "The cgroup's own pids.max.", "pids_limit", |r| plain(r.pids_limit)),
    single!("relay_metrics_cgroup_start_time_seconds", false, Seconds,
        "When the cgroup was made, seconds since the epoch (cAdvisor's container creation time).",
        "created_seconds", |r| r.created_seconds),
    single!("relay_metrics_cgroup_processes", false, Count,
        "Processes in the cgroup's subtree.", "processes.count", |r| r.processes.map(|p| p.count as f64)),
    single!("relay_metrics_cgroup_threads", false, Count,
        "Threads of the processes in the cgroup's subtree.", "processes.threads", |r| r.processes.map(|p| p.threads as f64)),
    single!("relay_metrics_cgroup_resident_memory_bytes", false, Bytes,
        "Resident memory summed over the processes in the cgroup's subtree.",
        "processes.resident_bytes", |r| r.processes.map(|p| p.resident_bytes as f64)),
    single!("relay_metrics_cgroup_open_file_descriptors", false, Count,
        "Open file descriptors of the processes in the cgroup's subtree.",
        "processes.open_file_descriptors", |r| plain(r.processes.and_then(|p| p.open_file_descriptors))),
    single!("relay_metrics_cgroup_preemptions_total", true, Count,
        "Involuntary context switches of the cgroup's processes (eBPF, since the agent started).",
        "kernel_events.preemptions", |r| r.kernel_events.as_ref().map(|k| k.preemptions as f64)),
    single!("relay_metrics_cgroup_reclaim_stalls_total", true, Count,
        "Memory-reclaim stalls of the cgroup's processes (eBPF).",
        "kernel_events.reclaim_stalls", |r| r.kernel_events.as_ref().map(|k| k.reclaim_stalls as f64)),
    single!("relay_metrics_cgroup_reclaim_stall_seconds_total", true, Nanoseconds,
        "Time the cgroup's processes stalled in memory reclaim (eBPF).",
        "kernel_events.reclaim_stall_ns", |r| r.kernel_events.as_ref().map(|k| k.reclaim_stall_ns as f64)),
    single!("relay_metrics_cgroup_processes_created_total", true, Count,
        "Processes created by the cgroup's processes (eBPF).",
        "kernel_events.processes_created", |r| r.kernel_events.as_ref().map(|k| k.processes_created as f64)),
    single!("relay_metrics_cgroup_processes_exited_total", true, Count,
        "Processes of the cgroup seen exiting (eBPF membership).",
        "kernel_events.processes_exited", |r| r.kernel_events.as_ref().map(|k| k.processes_exited as f64)),
    TargetFamily {
        name: "relay_metrics_cgroup_memory_events_total",
        counter: true,
        unit: ValueUnit::Count,
        help: "Memory events of the cgroup, by event: the keys of v2 memory.events (v1: max is failcnt, oom and oom_kill its OOM kills).",
        series: MemoryEventCounts::SERIES,
    },
    TargetFamily {
        name: "relay_metrics_cgroup_pressure_stall_seconds_total",
        counter: true,
        unit: ValueUnit::Microseconds,
        help: "PSI stall time of the cgroup, by resource and kind.",
        series: &[
            pressure!("cpu", "some", cpu_some_usec),
            pressure!("cpu", "full", cpu_full_usec),
            pressure!("memory", "some", memory_some_usec),
            pressure!("memory", "full", memory_full_usec),
            pressure!("io", "some", io_some_usec),
            pressure!("io", "full", io_full_usec),
        ],
    },
];

#[cfg(test)]
#[path = "target_values_tests.rs"]
pub(crate) mod tests;
