//! The tables of `extensions` against their structs (through their JSON), against the whole
//! `extensions` object and against docs/METRICS.md.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::snapshot::values::tests::{
    assert_docs_metrics_md_has, assert_rows_read_their_paths, distinct, numeric_paths,
    rendered_doc_table,
};
use crate::snapshot::{
    Cumulative, GpuExtension, GpuReadings, KernelEvents, PreciseCpu, SamplerInfo, Targets,
    Unavailable,
};

/// Values of `extensions` that are not numbers although serde may write `null` there: text,
/// timestamps and flags (the template's `null`s that [`distinct`] must leave alone).
const NOT_NUMBERS: &[&str] = &[
    "target.cgroup_path",
    "collector.process_source_reason",
    "collector.cgroup_source",
    "collector.cgroup_source_reason",
    "kernel_events.reason",
    "kernel_events.counting_since",
    "cumulative.since",
    "cumulative.reason",
    "gpu.devices[].remapping_pending",
    "gpu.devices[].remapping_failed",
    "gpu.devices[].mig_enabled",
];

/// The lists of `extensions` whose items have their own tables and tests elsewhere.
const OTHER_TABLES: &[(&str, &str)] = &[
    ("cgroups", "snapshot/scope_values.rs"),
    ("targets.cgroups", "snapshot/target_values.rs"),
];

/// One table as text: the path of its list under `extensions` (empty for
/// [`EXTENSION_VALUES`]) and each row's path, unit and source.
struct TableText {
    list: &'static str,
    rows: Vec<(&'static str, ValueUnit, &'static str)>,
}

impl TableText {
    fn new<T>(list: &'static str, rows: &'static [ValueRow<T>]) -> Self {
        let rows = rows
            .iter()
            .map(|r| (r.json_path, r.unit, r.source))
            .collect();
        Self { list, rows }
    }

    /// Each row's path under `extensions`.
    fn paths(&self) -> impl Iterator<Item = (String, ValueUnit, &'static str)> + '_ {
        self.rows.iter().map(|&(path, unit, source)| {
            let full = match (self.list, path) {
                (list, "") => list.to_owned(),
                ("", path) => path.to_owned(),
                (list, path) => format!("{list}.{path}"),
            };
            (full, unit, source)
        })
    }
}

/// Every table of this file, in the JSON's order.
fn tables() -> [TableText; 9] {
    [
        TableText::new("", EXTENSION_VALUES),
        TableText::new(
            "kernel_events.run_queue_delay_log2_ns[]",
            RUN_QUEUE_DELAY_BUCKET_VALUES,
        ),
        TableText::new("kernel_events.recent_oom_victims[]", OOM_VICTIM_VALUES),
        TableText::new("cumulative.devices[]", CUMULATIVE_DEVICE_VALUES),
        TableText::new("gpu.devices[]", GPU_DEVICE_VALUES),
        TableText::new("gpu.devices[].xid_errors[]", XID_ERROR_VALUES),
        TableText::new("gpu.devices[].mig_instances[]", MIG_INSTANCE_VALUES),
        TableText::new("gpu.limit_events[]", GPU_LIMIT_EVENT_VALUES),
        TableText::new("cpu_modes[]", CPU_MODE_VALUES),
    ]
}

fn not_a_number(path: &str) -> bool {
    NOT_NUMBERS.contains(&path)
}

/// `template` filled by [`distinct`] and held to `rows`; `is_text` as [`distinct`]'s.
fn check<T: Serialize + DeserializeOwned>(
    rows: &'static [ValueRow<T>],
    template: &T,
    is_text: fn(&str) -> bool,
    what: &str,
) {
    let (value, json) = distinct(template, is_text);
    assert_rows_read_their_paths(rows.iter(), &value, &json, what, "extension_values.rs");
}

/// `extensions` with every section that may be `null` present and every list empty.
fn sections_template() -> Extensions {
    Extensions {
        precise_cpu: Some(PreciseCpu::default()),
        kernel_events: KernelEvents {
            run_queue_delay_log2_ns: Some(Vec::new()),
            ..KernelEvents::default()
        },
        sampler: Some(SamplerInfo::default()),
        cumulative: Some(Cumulative::default()),
        targets: Some(Box::default()),
        gpu: Some(GpuExtension::default()),
        cpu_modes: Some(Vec::new()),
        ..Extensions::default()
    }
}

fn device_template() -> GpuDeviceReport {
    GpuDeviceReport {
        throttle_reasons: Some(vec!["sw_power_cap".into()]),
        ..GpuDeviceReport::default()
    }
}

#[test]
fn every_number_of_each_section_is_in_its_table_and_read_from_its_json_path() {
    check(
        EXTENSION_VALUES,
        &sections_template(),
        not_a_number,
        "`extensions` (Extensions, snapshot/extensions.rs)",
    );
    check(
        RUN_QUEUE_DELAY_BUCKET_VALUES,
        &0,
        |_| false,
        "a run-queue delay bucket",
    );
    check(
        OOM_VICTIM_VALUES,
        &OomVictim::default(),
        |_| false,
        "OomVictim",
    );
    check(
        CUMULATIVE_DEVICE_VALUES,
        &DeviceIo::default(),
        |_| false,
        "DeviceIo",
    );
    check(
        GPU_DEVICE_VALUES,
        &device_template(),
        |path| not_a_number(&format!("gpu.devices[].{path}")),
        "GpuDeviceReport",
    );
    check(
        XID_ERROR_VALUES,
        &XidErrorCount::default(),
        |_| false,
        "XidErrorCount",
    );
    check(
        MIG_INSTANCE_VALUES,
        &MigInstanceReport::default(),
        |_| false,
        "MigInstanceReport",
    );
    check(
        GPU_LIMIT_EVENT_VALUES,
        &GpuLimitEvent::default(),
        |_| false,
        "GpuLimitEvent",
    );
    check(
        CPU_MODE_VALUES,
        &CpuModeSeconds::default(),
        |_| false,
        "CpuModeSeconds",
    );
}

/// `extensions` with every section present and one item in every list (but those of
/// [`OTHER_TABLES`]).
fn whole_template() -> Extensions {
    let mut extensions = sections_template();
    extensions.kernel_events.run_queue_delay_log2_ns = Some(vec![0]);
    extensions.kernel_events.recent_oom_victims = vec![OomVictim::default()];
    extensions.unavailable = vec![Unavailable::default()];
    if let Some(cumulative) = &mut extensions.cumulative {
        cumulative.devices = vec![DeviceIo::default()];
    }
    extensions.targets = Some(Box::new(Targets {
        patterns: vec!["/".into()],
        reasons: vec!["none".into()],
        ..Targets::default()
    }));
    let device = GpuDeviceReport {
        xid_errors: vec![XidErrorCount::default()],
        readings: GpuReadings {
            mig_instances: vec![MigInstanceReport::default()],
            ..GpuReadings::default()
        },
        ..device_template()
    };
    extensions.gpu = Some(GpuExtension {
        devices: vec![device],
        limit_events: vec![GpuLimitEvent::default()],
    });
    extensions.cpu_modes = Some(vec![CpuModeSeconds::default()]);
    extensions
}

/// The paths of the empty lists in `json`.
fn empty_lists(value: &Value, path: &str, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                let child_path = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                empty_lists(child, &child_path, out);
            }
        }
        Value::Array(items) if items.is_empty() => out.push(path.to_owned()),
        Value::Array(items) => {
            for item in items {
                empty_lists(item, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_number_of_extensions_is_a_row_of_one_table() {
    let (_, json) = distinct(&whole_template(), not_a_number);
    let mut empty = Vec::new();
    empty_lists(&json, "", &mut empty);
    for list in empty {
        assert!(
            OTHER_TABLES.iter().any(|(path, _)| *path == list),
            "extensions.{list} is a list that whole_template() (snapshot/extension_values_tests.rs) \
             leaves empty: give it one item, so that its numbers are counted"
        );
    }
    let mut numbers = Vec::new();
    numeric_paths(&json, "", &mut numbers);
    let rows: Vec<_> = tables()
        .iter()
        .flat_map(|t| t.paths().collect::<Vec<_>>())
        .collect();
    for (path, _) in &numbers {
        let found = rows.iter().filter(|(row, _, _)| row == path).count();
        assert_eq!(
            found, 1,
            "extensions.{path} is a number with {found} rows in the tables of \
             relay-metrics/src/snapshot/extension_values.rs: want 1 (a list's items: a table of \
             their own, added to tables() in its tests)"
        );
    }
    for (row, _, _) in &rows {
        assert!(
            numbers.iter().any(|(path, _)| path == row),
            "extensions.{row} (snapshot/extension_values.rs) is no number of `extensions`"
        );
    }
}

#[test]
fn docs_metrics_md_lists_the_tables() {
    let tables = tables();
    let rows = tables.iter().flat_map(|t| t.paths().collect::<Vec<_>>());
    assert_docs_metrics_md_has(
        &rendered_doc_table(rows),
        "the values of `extensions`",
        "extension_values.rs",
    );
}
