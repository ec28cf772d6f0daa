//! The scope's values table against the struct (through its JSON) and against docs/METRICS.md.

use super::*;
use crate::snapshot::values::tests::{
    assert_docs_metrics_md_has, assert_rows_read_their_paths, distinct, rendered_doc_table,
};
use crate::snapshot::PressureTotals;

#[test]
fn every_number_of_a_scope_cgroup_is_in_the_table_and_read_from_its_json_path() {
    let template = CgroupReport {
        pressure: Some(PressureTotals::default()),
        ..CgroupReport::default()
    };
    // Not values: the cgroup's role and path, and which version each group came from.
    let (report, json) = distinct(&template, |path| {
        path == "role" || path == "path" || path.ends_with("_version")
    });
    assert_rows_read_their_paths(
        scope_values(),
        &report,
        &json,
        "a scope cgroup's report (CgroupReport, snapshot/extensions.rs)",
        "scope_values.rs",
    );
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

#[test]
fn docs_metrics_md_lists_the_table() {
    let rows = scope_values().map(|row| (row.json_path.to_owned(), row.unit, row.source));
    assert_docs_metrics_md_has(
        &rendered_doc_table(rows),
        "the scope cgroup's values (`extensions.cgroups`)",
        "scope_values.rs",
    );
}
