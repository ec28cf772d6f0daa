//! The `relay_metrics_cgroup_*` families of one series set per cgroup: built from the values
//! table of a measured cgroup ([`TARGET_FAMILIES`], `snapshot/target_values.rs`), where each
//! value is declared once with its name, kind, unit and help.

use crate::output::metrics::{Family, Kind, Unit};
use crate::snapshot::{TargetFamily, TARGET_FAMILIES};

pub(super) fn ns(value: Option<u64>) -> Option<f64> {
    value.map(|ns| ns as f64 / 1e9)
}

pub(super) fn plain(value: Option<u64>) -> Option<f64> {
    value.map(|v| v as f64)
}

/// Every family of the table with its metric description: `(family, table entry, divisor to its
/// base unit, as the values were always divided)`.
pub(super) fn families() -> impl Iterator<Item = (Family, &'static TargetFamily, f64)> {
    TARGET_FAMILIES.iter().map(|entry| {
        let (unit, divisor) = Unit::base_of(entry.unit);
        let kind = if entry.counter {
            Kind::Counter
        } else {
            Kind::Gauge
        };
        let family = Family::relay_metrics(entry.name, kind, unit, entry.help);
        (family, entry, divisor)
    })
}
