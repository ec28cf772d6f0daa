//! The values table against the struct (through its JSON) and against docs/METRICS.md.

use serde_json::Value;

use super::*;
use crate::snapshot::values::tests::{distinct, numeric_paths};
use crate::snapshot::{ProcessSums, TargetKernelEvents};

/// Numeric values of a measured cgroup that no family of the table exports, and why.
pub(crate) const EXPORTED_ELSEWHERE: &[(&str, &str)] = &[
    (
        "kernel_events.run_queue_count",
        "the count of relay_metrics_cgroup_run_queue_delay_seconds (histogram)",
    ),
    (
        "kernel_events.run_queue_total_ns",
        "the sum of relay_metrics_cgroup_run_queue_delay_seconds (histogram)",
    ),
];

/// A measured cgroup whose every numeric value (outside lists and the cAdvisor-only parts) is
/// a different number, made through its JSON so that a field added to the struct is filled
/// without editing this test; with that JSON.
pub(crate) fn distinct_report() -> (CgroupTargetReport, Value) {
    let template = CgroupTargetReport {
        processes: Some(ProcessSums::default()),
        kernel_events: Some(TargetKernelEvents::default()),
        created_seconds: Some(0.0),
        gpus: Some(Vec::new()),
        ..CgroupTargetReport::default()
    };
    // Not values: the cgroup's identity, its labels and its reason.
    distinct(&template, |path| {
        path == "cgroup" || path == "reason" || path.starts_with("labels.")
    })
}

pub(crate) fn all_series() -> impl Iterator<Item = (&'static TargetFamily, &'static TargetSeries)> {
    TARGET_FAMILIES
        .iter()
        .flat_map(|family| family.series.iter().map(move |series| (family, series)))
}

#[test]
fn every_value_of_a_measured_cgroup_is_in_the_table_and_read_from_its_json_path() {
    let (report, json) = distinct_report();
    let mut paths = Vec::new();
    numeric_paths(&json, "", &mut paths);
    assert!(paths.len() > 30, "{paths:?}");
    for (path, value) in &paths {
        let series: Vec<_> = all_series().filter(|(_, s)| s.json_path == path).collect();
        let elsewhere = EXPORTED_ELSEWHERE.iter().any(|(p, _)| p == path);
        assert!(
            series.len() == 1 || (series.is_empty() && elsewhere),
            "{path} is a value of a measured cgroup (snapshot/targets.rs) with {} series in \
             TARGET_FAMILIES (relay-metrics/src/snapshot/target_values.rs): want 1, or a line \
             in EXPORTED_ELSEWHERE saying which family carries it",
            series.len()
        );
        for (family, s) in series {
            assert_eq!(
                (s.read)(&report),
                Some(*value),
                "{} {:?} reads another value than {path}",
                family.name,
                s.labels
            );
        }
    }
    for (family, series) in all_series() {
        assert!(
            paths.iter().any(|(p, _)| p == series.json_path),
            "{} {:?} names {}, which is no value of a measured cgroup's JSON",
            family.name,
            series.labels,
            series.json_path
        );
    }
    for (path, _) in EXPORTED_ELSEWHERE {
        assert!(paths.iter().any(|(p, _)| p == path), "{path}");
    }
}

#[test]
fn every_family_and_series_of_the_table_is_in_docs_metrics_md() {
    let doc = include_str!("../../../docs/METRICS.md");
    for family in TARGET_FAMILIES {
        let kind = if family.counter { "counter" } else { "gauge" };
        let line = doc
            .lines()
            .find(|line| line.starts_with(&format!("| `{}` |", family.name)))
            .unwrap_or_else(|| {
                panic!(
                    "{} (relay-metrics/src/snapshot/target_values.rs) has no line in \
                     docs/METRICS.md's table (`| `name` | kind | source |`)",
                    family.name
                )
            });
        assert!(
            line.starts_with(&format!("| `{}` | {kind} |", family.name)),
            "docs/METRICS.md does not list {} as a {kind}: {line}",
            family.name
        );
        for series in family.series {
            for (_, value) in series.labels {
                assert!(
                    line.contains(&format!("`{value}`")),
                    "docs/METRICS.md's line of {} does not name its series `{value}` \
                     (relay-metrics/src/snapshot/target_values.rs): {line}",
                    family.name
                );
            }
        }
    }
}

#[test]
fn family_names_are_unique_and_counters_end_in_total() {
    for (i, family) in TARGET_FAMILIES.iter().enumerate() {
        assert!(
            family.name.starts_with("relay_metrics_cgroup_"),
            "{}",
            family.name
        );
        assert_eq!(
            family.counter,
            family.name.ends_with("_total"),
            "{}",
            family.name
        );
        assert!(
            TARGET_FAMILIES[..i].iter().all(|f| f.name != family.name),
            "{} twice",
            family.name
        );
    }
}
