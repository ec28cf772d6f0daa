//! The values table of the scope's cgroups (`extensions.cgroups[*]`, [`CgroupReport`]): every
//! number of a report declared once with its JSON path, unit and source (which kernel file
//! gives it, on v2 and on v1).
//!
//! No `relay_metrics_*` family exports these values as they are: the scope's cgroup feeds
//! Relay's fields (`model/derive`), whose families are the schema table's. The table is the
//! source of docs/METRICS.md's list of them, and the tests below hold it to the struct (every
//! numeric value of a report's JSON has one row, and each row reads the value at its path) and
//! to that list (the doc's block is the one the table renders), with the helpers every values
//! table's test shares (`snapshot/values_tests.rs`).
//!
//! The memory events are not rows here: they come from the one list of `memory_events!`
//! (`snapshot/target_values.rs`), shared with the measured cgroups, and keep their flat keys
//! (`memory_low_events`) through [`flat_memory_events`].

use super::target_values::plain;
use super::values::{ValueRow, ValueUnit};
use super::{CgroupReport, MemoryEventCounts};

/// One number of a scope cgroup's report.
pub type ScopeValue = ValueRow<CgroupReport>;

/// A row whose value is the report field `$field`, an `Option<u64>`.
macro_rules! row {
    ($field:ident, $unit:ident, $source:literal) => {
        ScopeValue {
            json_path: stringify!($field),
            unit: ValueUnit::$unit,
            source: $source,
            read: |r| plain(r.$field),
        }
    };
}

/// A PSI row: `pressure.$field`, from the `total=` of `$file`'s `$kind` line.
macro_rules! pressure {
    ($field:ident, $file:literal, $kind:literal) => {
        ScopeValue {
            json_path: concat!("pressure.", stringify!($field)),
            unit: ValueUnit::Microseconds,
            source: concat!(
                "`",
                $file,
                "` `",
                $kind,
                "` `total=` (where the hierarchy has it)"
            ),
            read: |r| plain(r.pressure.and_then(|p| p.$field)),
        }
    };
}

/// The numbers of a scope cgroup's report before its memory events, in the JSON's order.
#[rustfmt::skip]
const BEFORE_EVENTS: &[ScopeValue] = &[
    row!(cpu_usage_ns, Nanoseconds, "v2 `cpu.stat` `usage_usec` × 1000; v1 `cpuacct.usage`"),
    row!(cpu_periods, Count, "`cpu.stat` `nr_periods`: CFS periods elapsed"),
    row!(cpu_throttled_periods, Count, "`cpu.stat` `nr_throttled`: CFS periods throttled"),
    row!(cpu_throttled_usec, Microseconds,
        "v2 `cpu.stat` `throttled_usec`; v1 `cpu.stat` `throttled_time` ÷ 1000"),
    ScopeValue {
        json_path: "cpu_effective_limit_logical_processors",
        unit: ValueUnit::Cores,
        source: "the lowest quota ÷ period (v2 `cpu.max`, v1 `cpu.cfs_quota_us` and \
                 `cpu.cfs_period_us`) of the cgroup and its ancestors, and the CPUs of its \
                 effective cpuset",
        read: |r| r.cpu_effective_limit_logical_processors,
    },
    row!(memory_limit_bytes, Bytes,
        "the lowest v2 `memory.max` (v1 `memory.limit_in_bytes`) of the cgroup and its ancestors"),
    row!(memory_current_bytes, Bytes, "v2 `memory.current`; v1 `memory.usage_in_bytes`"),
];

/// The numbers after the memory events, in the JSON's order.
#[rustfmt::skip]
const AFTER_EVENTS: &[ScopeValue] = &[
    row!(pids_current, Count, "`pids.current`"),
    row!(pids_max, Count,
        "the lowest numeric `pids.max` of the cgroup and its ancestors; `null` when unlimited"),
    row!(pids_max_events, Count, "`pids.events` `max`: forks refused at a limit"),
    pressure!(cpu_some_usec, "cpu.pressure", "some"),
    pressure!(cpu_full_usec, "cpu.pressure", "full"),
    pressure!(memory_some_usec, "memory.pressure", "some"),
    pressure!(memory_full_usec, "memory.pressure", "full"),
    pressure!(io_some_usec, "io.pressure", "some"),
    pressure!(io_full_usec, "io.pressure", "full"),
];

/// Every number of a scope cgroup's report, in the JSON's order: the rows above and the memory
/// events between them.
pub fn scope_values() -> impl Iterator<Item = &'static ScopeValue> {
    BEFORE_EVENTS
        .iter()
        .chain(MemoryEventCounts::SCOPE_VALUES)
        .chain(AFTER_EVENTS)
}

/// [`CgroupReport::memory_events`] as the flat keys `memory_<event>_events` of the report's
/// JSON (serde's `flatten` with these): the keys it had before the events came from one list.
pub(super) mod flat_memory_events {
    use std::fmt;

    use serde::de::{IgnoredAny, MapAccess, Visitor};
    use serde::ser::SerializeMap;
    use serde::{Deserializer, Serializer};

    use super::super::target_values::MEMORY_EVENTS;
    use super::MemoryEventCounts;

    pub(crate) fn serialize<S: Serializer>(
        events: &MemoryEventCounts,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(MEMORY_EVENTS))?;
        for (key, value) in MemoryEventCounts::SCOPE_KEYS.iter().zip(events.values()) {
            map.serialize_entry(key, &value)?;
        }
        map.end()
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<MemoryEventCounts, D::Error> {
        deserializer.deserialize_map(Events)
    }

    struct Events;

    impl<'de> Visitor<'de> for Events {
        type Value = MemoryEventCounts;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("the keys memory_<event>_events")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut values = [None; MEMORY_EVENTS];
            while let Some(key) = map.next_key::<String>()? {
                match MemoryEventCounts::SCOPE_KEYS.iter().position(|k| *k == key) {
                    Some(index) => values[index] = map.next_value()?,
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            let mut next = values.into_iter();
            Ok(MemoryEventCounts::from_names(|_| next.next().flatten()))
        }
    }
}

#[cfg(test)]
#[path = "scope_values_tests.rs"]
mod tests;
