//! The scope's values table against the struct (through its JSON) and against docs/METRICS.md.

use super::*;
use crate::snapshot::target_values::tests::{distinct, numeric_paths};
use crate::snapshot::PressureTotals;

/// A scope cgroup's report whose every number is a different one (see [`distinct`]).
fn distinct_report() -> (CgroupReport, serde_json::Value) {
    let template = CgroupReport {
        pressure: Some(PressureTotals::default()),
        ..CgroupReport::default()
    };
    // Not values: the cgroup's role and path, and which version each group came from.
    distinct(&template, |path| {
        path == "role" || path == "path" || path.ends_with("_version")
    })
}

#[test]
fn every_number_of_a_scope_cgroup_is_in_the_table_and_read_from_its_json_path() {
    let (report, json) = distinct_report();
    let mut paths = Vec::new();
    numeric_paths(&json, "", &mut paths);
    assert!(paths.len() > 20, "{paths:?}");
    for (path, value) in &paths {
        let rows: Vec<_> = scope_values().filter(|v| v.json_path == path).collect();
        assert_eq!(
            rows.len(),
            1,
            "{path} is a number of a scope cgroup's report (CgroupReport, \
             snapshot/extensions.rs) with {} rows in its values table \
             (relay-metrics/src/snapshot/scope_values.rs): want 1",
            rows.len()
        );
        assert_eq!(
            (rows[0].read)(&report),
            Some(*value),
            "the row of {path} reads another value"
        );
    }
    for row in scope_values() {
        assert!(
            paths.iter().any(|(p, _)| p == row.json_path),
            "{} (snapshot/scope_values.rs) is no number of a scope cgroup's JSON",
            row.json_path
        );
    }
}

#[test]
fn the_memory_events_keep_their_flat_keys() {
    let mut report = CgroupReport::default();
    report.memory_events.low = Some(7);
    report.memory_events.oom_kill = Some(9);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["memory_low_events"], 7, "{json}");
    assert_eq!(json["memory_oom_kill_events"], 9, "{json}");
    assert!(json["memory_high_events"].is_null(), "{json}");
    assert!(json.get("memory_events").is_none(), "{json}");
    let back: CgroupReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);
}

fn unit_name(unit: TargetUnit) -> &'static str {
    match unit {
        TargetUnit::Nanoseconds => "ns",
        TargetUnit::Microseconds => "µs",
        TargetUnit::Seconds => "s",
        TargetUnit::Bytes => "bytes",
        TargetUnit::Cores => "logical processors",
        TargetUnit::Count => "count",
    }
}

/// docs/METRICS.md's table of the scope cgroup's values, as the values table renders it.
fn rendered_doc_table() -> String {
    let mut table = String::from("\n\n| JSON key | unit | source |\n| --- | --- | --- |\n");
    for row in scope_values() {
        table.push_str(&format!(
            "| `{}` | {} | {} |\n",
            row.json_path,
            unit_name(row.unit),
            row.source.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    table.push('\n');
    table
}

#[test]
fn docs_metrics_md_lists_the_table() {
    let doc = include_str!("../../../docs/METRICS.md");
    let table = rendered_doc_table();
    assert!(
        doc.contains(&table),
        "docs/METRICS.md's table of the scope cgroup's values (`extensions.cgroups`) is not \
         the one relay-metrics/src/snapshot/scope_values.rs renders; it should read:{table}"
    );
}
