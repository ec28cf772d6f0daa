//! The tables of `extensions` against their structs (through their JSON), against the whole
//! `extensions` object and against docs/METRICS.md.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::*;
use crate::snapshot::target_values::tests::{all_series, EXPORTED_ELSEWHERE};
use crate::snapshot::values::tests::{
    assert_docs_metrics_md_has, assert_rows_read_their_paths, distinct, numeric_paths,
    rendered_doc_table,
};
use crate::snapshot::{
    scope_values, CgroupReport, Cumulative, GpuExtension, GpuReadings, KernelEvents, PreciseCpu,
    PressureTotals, ProcessSums, SamplerInfo, TargetCpuSpec, TargetKernelEvents, TargetMemoryStat,
    TargetNetwork, Targets, Unavailable,
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

fn not_a_number(path: &str) -> bool {
    NOT_NUMBERS.contains(&path)
}

/// [`not_a_number`], with the text and versions of the cgroups' lists.
fn not_a_number_anywhere(path: &str) -> bool {
    not_a_number(path)
        || path.starts_with("targets.cgroups[].labels.")
        || path == "targets.cgroups[].reason"
        || (path.starts_with("cgroups[].") && path.ends_with("_version"))
}

/// One table as text: the path of its list under `extensions` (empty for
/// [`EXTENSION_VALUES`]) and each row's path, unit and source.
struct TableText {
    list: &'static str,
    rows: Vec<(&'static str, ValueUnit, &'static str)>,
}

impl TableText {
    fn new<T: 'static>(
        list: &'static str,
        rows: impl IntoIterator<Item = &'static ValueRow<T>>,
    ) -> Self {
        let rows = rows
            .into_iter()
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
fn tables() -> [TableText; 15] {
    [
        TableText::new("", EXTENSION_VALUES),
        TableText::new(
            "kernel_events.run_queue_delay_log2_ns[]",
            RUN_QUEUE_DELAY_BUCKET_VALUES,
        ),
        TableText::new("kernel_events.recent_oom_victims[]", OOM_VICTIM_VALUES),
        TableText::new("cumulative.devices[]", CUMULATIVE_DEVICE_VALUES),
        TableText::new("targets.cgroups[]", TARGET_EXTRA_VALUES),
        TableText::new("targets.cgroups[].devices[]", TARGET_DEVICE_VALUES),
        TableText::new("targets.cgroups[].gpus[]", TARGET_GPU_VALUES),
        TableText::new(
            "targets.cgroups[].kernel_events.run_queue_histogram[]",
            RUN_QUEUE_DELAY_BUCKET_VALUES,
        ),
        TableText::new(
            "targets.cgroups[].kernel_events.oom_victims[]",
            TARGET_OOM_VICTIM_VALUES,
        ),
        TableText::new(
            "targets.cgroups[].network.interfaces[]",
            TARGET_INTERFACE_VALUES,
        ),
        TableText::new("gpu.devices[]", GPU_DEVICE_VALUES),
        TableText::new("gpu.devices[].xid_errors[]", XID_ERROR_VALUES),
        TableText::new("gpu.devices[].mig_instances[]", MIG_INSTANCE_VALUES),
        TableText::new("gpu.limit_events[]", GPU_LIMIT_EVENT_VALUES),
        TableText::new("cpu_modes[]", CPU_MODE_VALUES),
    ]
}

/// `template` filled by [`distinct`] and held to `rows`; `is_text` as [`distinct`]'s.
fn check<T: Serialize + DeserializeOwned>(
    rows: &'static [ValueRow<T>],
    template: &T,
    is_text: fn(&str) -> bool,
    what: &str,
) {
    let (value, json) = distinct(template, is_text);
    assert_rows_read_their_paths(rows, &value, &json, what, "extension_values.rs");
}

/// A struct whose every `null` is a value, so that [`check`] fills it all.
fn item<T: Serialize + DeserializeOwned + Default>(rows: &'static [ValueRow<T>], what: &str) {
    check(rows, &T::default(), |_| false, what);
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
    item(RUN_QUEUE_DELAY_BUCKET_VALUES, "a run-queue delay bucket");
    item(OOM_VICTIM_VALUES, "OomVictim");
    item(CUMULATIVE_DEVICE_VALUES, "DeviceIo");
    let measured = CgroupTargetReport {
        memory_stat: Some(TargetMemoryStat::default()),
        cpu_spec: Some(TargetCpuSpec::default()),
        network: Some(TargetNetwork::default()),
        ..CgroupTargetReport::default()
    };
    // The other numbers of a measured cgroup are its families' (`target_values.rs`).
    check(
        TARGET_EXTRA_VALUES,
        &measured,
        |path| {
            let parts = ["memory_stat.", "cpu_spec.", "network."];
            !parts.iter().any(|part| path.starts_with(part))
        },
        "the parts of a measured cgroup (CgroupTargetReport) that no family reads",
    );
    item(TARGET_DEVICE_VALUES, "TargetDeviceIo");
    item(TARGET_GPU_VALUES, "TargetGpuUse");
    item(TARGET_OOM_VICTIM_VALUES, "TargetOomVictim");
    item(TARGET_INTERFACE_VALUES, "TargetInterface");
    check(
        GPU_DEVICE_VALUES,
        &device_template(),
        |path| not_a_number(&format!("gpu.devices[].{path}")),
        "GpuDeviceReport",
    );
    item(XID_ERROR_VALUES, "XidErrorCount");
    item(MIG_INSTANCE_VALUES, "MigInstanceReport");
    item(GPU_LIMIT_EVENT_VALUES, "GpuLimitEvent");
    item(CPU_MODE_VALUES, "CpuModeSeconds");
}

/// A measured cgroup with every part present and one item in every list.
fn measured_cgroup_template() -> CgroupTargetReport {
    CgroupTargetReport {
        devices: vec![TargetDeviceIo::default()],
        processes: Some(ProcessSums::default()),
        gpus: Some(vec![TargetGpuUse::default()]),
        kernel_events: Some(TargetKernelEvents {
            run_queue_histogram: vec![0],
            oom_victims: vec![TargetOomVictim::default()],
            ..TargetKernelEvents::default()
        }),
        memory_stat: Some(TargetMemoryStat::default()),
        cpu_spec: Some(TargetCpuSpec::default()),
        created_seconds: Some(0.0),
        network: Some(TargetNetwork {
            namespace_inode: 0,
            interfaces: vec![TargetInterface::default()],
        }),
        ..CgroupTargetReport::default()
    }
}

/// `extensions` with every section present and one item in every list.
fn whole_template() -> Extensions {
    let mut extensions = sections_template();
    extensions.cgroups = vec![CgroupReport {
        pressure: Some(PressureTotals::default()),
        ..CgroupReport::default()
    }];
    extensions.kernel_events.run_queue_delay_log2_ns = Some(vec![0]);
    extensions.kernel_events.recent_oom_victims = vec![OomVictim::default()];
    extensions.unavailable = vec![Unavailable::default()];
    if let Some(cumulative) = &mut extensions.cumulative {
        cumulative.devices = vec![DeviceIo::default()];
    }
    extensions.targets = Some(Box::new(Targets {
        patterns: vec!["/".into()],
        reasons: vec!["none".into()],
        cgroups: vec![measured_cgroup_template()],
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

/// Every row's path under `extensions`: this file's tables, the scope's cgroups' table and the
/// measured cgroups' families (with the values they leave to others).
fn every_row_path() -> Vec<String> {
    let mut rows: Vec<_> = tables()
        .iter()
        .flat_map(|t| t.paths().map(|(path, _, _)| path).collect::<Vec<_>>())
        .collect();
    let scope = TableText::new("cgroups[]", scope_values());
    rows.extend(scope.paths().map(|(path, _, _)| path));
    let families = all_series().map(|(_, series)| series.json_path);
    let elsewhere = EXPORTED_ELSEWHERE.iter().map(|(path, _)| *path);
    for path in families.chain(elsewhere) {
        rows.push(format!("targets.cgroups[].{path}"));
    }
    rows
}

#[test]
fn every_number_of_extensions_is_a_row_of_one_table() {
    let (_, json) = distinct(&whole_template(), not_a_number_anywhere);
    let mut empty = Vec::new();
    empty_lists(&json, "", &mut empty);
    assert!(
        empty.is_empty(),
        "whole_template() (snapshot/extension_values_tests.rs) leaves the lists {empty:?} of \
         `extensions` empty: give each one item, so that its numbers are counted"
    );
    let mut numbers = Vec::new();
    numeric_paths(&json, "", &mut numbers);
    let rows = every_row_path();
    for (path, _) in &numbers {
        let found = rows.iter().filter(|row| *row == path).count();
        assert_eq!(
            found, 1,
            "extensions.{path} is a number with {found} rows in the tables of \
             relay-metrics/src/snapshot/extension_values.rs (or scope_values.rs, or the \
             families of target_values.rs): want 1 (a list's items: a table of their own, \
             added to tables() in its tests)"
        );
    }
    for row in &rows {
        assert!(
            numbers.iter().any(|(path, _)| path == row),
            "extensions.{row} (a values table) is no number of `extensions`"
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
