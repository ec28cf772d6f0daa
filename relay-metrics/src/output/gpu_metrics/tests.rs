use std::borrow::Cow;
use std::sync::Arc;

use super::*;
use crate::snapshot::{GpuLimitEvent, GpuReadings, MigInstanceReport, XidErrorCount};

/// Collects `name{labels} value` lines and the announced families with their kind and unit.
#[derive(Default)]
struct Lines {
    families: Vec<(&'static str, Kind, Unit)>,
    lines: Vec<String>,
}

impl Sink for Lines {
    fn begin(&mut self, family: &Family) {
        self.families.push((family.name, family.kind, family.unit));
    }

    fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        let labels: Vec<String> = labels
            .iter()
            .map(|(key, value)| match value {
                Label::Str(text) => format!("{key}={text}"),
                Label::Int(number) => format!("{key}={number}"),
            })
            .collect();
        let value = match value {
            Number::F64(v) => v,
            Number::U64(v) => v as f64,
        };
        self.lines
            .push(format!("{}{{{}}} {value}", family.name, labels.join(",")));
    }

    fn histogram(
        &mut self,
        family: &Family,
        labels: &[(&str, Label<'_>)],
        histogram: &crate::output::metrics::Histogram,
    ) {
        self.point(family, labels, Number::U64(histogram.count));
    }
}

fn nvidia() -> GpuDeviceReport {
    GpuDeviceReport {
        vendor: Cow::Borrowed("nvidia"),
        index: Some(0),
        uuid: Arc::from("GPU-a"),
        readings: GpuReadings {
            power_watts: Some(250.5),
            power_limit_watts: Some(300.0),
            energy_joules: Some(1234.5),
            temperature_celsius: Some(71.0),
            memory_temperature_celsius: None,
            sm_clock_hz: Some(1_410_000_000),
            memory_clock_max_hz: Some(2_619_000_000),
            ecc_corrected_volatile: Some(3),
            ecc_uncorrected_aggregate: Some(0),
            remapped_rows_correctable: Some(2),
            remapping_pending: Some(true),
            pcie_rx_bytes_per_second: Some(4096),
            pcie_replays: Some(7),
            encoder_utilization_percent: Some(25.0),
            mig_enabled: Some(true),
            mig_instances: vec![MigInstanceReport {
                index: 1,
                memory_used_bytes: Some(1 << 30),
                memory_total_bytes: Some(8 << 30),
            }],
            ..GpuReadings::default()
        },
        throttle_reasons: Some(vec![Cow::Borrowed("sw_power_cap")]),
        violation_power_seconds: Some(1.5),
        xid_errors: vec![XidErrorCount { xid: 79, count: 2 }],
        ..GpuDeviceReport::default()
    }
}

fn walked(gpu: &GpuExtension) -> Lines {
    let mut lines = Lines::default();
    walk(gpu, "global", &mut lines);
    lines
}

#[test]
fn every_value_is_a_series_with_device_and_uuid_labels() {
    let amd = GpuDeviceReport {
        vendor: Cow::Borrowed("amd"),
        uuid: Arc::from("0000:03:00.0"),
        readings: GpuReadings {
            power_watts: Some(87.0),
            ..GpuReadings::default()
        },
        ..GpuDeviceReport::default()
    };
    let gpu = GpuExtension {
        devices: vec![nvidia(), amd],
        limit_events: vec![GpuLimitEvent {
            resource: Cow::Borrowed("gpu"),
            event: Cow::Borrowed("power_cap"),
            index: Some(0),
            uuid: Arc::from("GPU-a"),
            count: 4,
            sampled_periods: Some(9),
            throttled_seconds: Some(1.0),
        }],
    };
    let lines = walked(&gpu).lines;
    let expected = [
        "relay_metrics_gpu_power_watts{scope=global,device=0,uuid=GPU-a} 250.5",
        "relay_metrics_gpu_power_watts{scope=global,device=0000:03:00.0,uuid=0000:03:00.0} 87",
        "relay_metrics_gpu_power_limit_watts{scope=global,device=0,uuid=GPU-a} 300",
        "relay_metrics_gpu_energy_joules_total{scope=global,device=0,uuid=GPU-a} 1234.5",
        "relay_metrics_gpu_temperature_celsius{scope=global,device=0,uuid=GPU-a,sensor=gpu} 71",
        "relay_metrics_gpu_clock_hertz{scope=global,device=0,uuid=GPU-a,clock=sm} 1410000000",
        "relay_metrics_gpu_clock_max_hertz{scope=global,device=0,uuid=GPU-a,clock=memory} 2619000000",
        "relay_metrics_gpu_throttle_active{scope=global,device=0,uuid=GPU-a,reason=gpu_idle} 0",
        "relay_metrics_gpu_throttle_active{scope=global,device=0,uuid=GPU-a,reason=sw_power_cap} 1",
        "relay_metrics_gpu_throttled_seconds_total{scope=global,device=0,uuid=GPU-a,reason=power} 1.5",
        "relay_metrics_gpu_throttle_periods_total{scope=global,device=0,uuid=GPU-a,reason=power_cap} 4",
        "relay_metrics_gpu_xid_errors_total{scope=global,device=0,uuid=GPU-a,xid=79} 2",
        "relay_metrics_gpu_ecc_errors_total{scope=global,device=0,uuid=GPU-a,type=corrected,counter=volatile} 3",
        "relay_metrics_gpu_ecc_errors_total{scope=global,device=0,uuid=GPU-a,type=uncorrected,counter=aggregate} 0",
        "relay_metrics_gpu_remapped_rows{scope=global,device=0,uuid=GPU-a,cause=correctable} 2",
        "relay_metrics_gpu_row_remapping_state{scope=global,device=0,uuid=GPU-a,state=pending} 1",
        "relay_metrics_gpu_pcie_bytes_per_second{scope=global,device=0,uuid=GPU-a,direction=rx} 4096",
        "relay_metrics_gpu_pcie_replays_total{scope=global,device=0,uuid=GPU-a} 7",
        "relay_metrics_gpu_codec_utilization_ratio{scope=global,device=0,uuid=GPU-a,codec=encoder} 0.25",
        "relay_metrics_gpu_mig_enabled{scope=global,device=0,uuid=GPU-a} 1",
        "relay_metrics_gpu_mig_instance_memory_used_bytes{scope=global,device=0,uuid=GPU-a,instance=1} 1073741824",
    ];
    for line in expected {
        assert!(
            lines.iter().any(|l| l == line),
            "missing {line}\n{lines:#?}"
        );
    }
    // Nine reasons, each 0 or 1; a null value (memory temperature) has no series.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("relay_metrics_gpu_throttle_active"))
            .count(),
        9
    );
    assert!(!lines.iter().any(|l| l.contains("sensor=memory")));
}

#[test]
fn counters_end_in_total_and_families_without_values_are_not_announced() {
    let gpu = GpuExtension {
        devices: vec![GpuDeviceReport {
            uuid: Arc::from("GPU-empty"),
            index: Some(3),
            ..GpuDeviceReport::default()
        }],
        limit_events: Vec::new(),
    };
    assert!(walked(&gpu).families.is_empty());
    let full = GpuExtension {
        devices: vec![nvidia()],
        limit_events: vec![GpuLimitEvent {
            resource: Cow::Borrowed("gpu"),
            event: Cow::Borrowed("thermal"),
            index: Some(0),
            uuid: Arc::from("GPU-a"),
            count: 1,
            sampled_periods: Some(1),
            throttled_seconds: None,
        }],
    };
    assert_eq!(walked(&full).families.len(), 18, "every family announced");
    let audit = include_str!("../../../../docs/METRICS.md");
    for (name, kind, unit) in walked(&full).families {
        assert_eq!(kind == Kind::Counter, name.ends_with("_total"), "{name}");
        let kind_name = if kind == Kind::Counter {
            "counter"
        } else {
            "gauge"
        };
        assert!(
            audit.contains(&format!("`{name}` | {kind_name} |")),
            "{name} is not listed as a {kind_name} in docs/METRICS.md's audit"
        );
        if let Some(suffix) = unit.suffix() {
            let base = name.strip_suffix("_total").unwrap_or(name);
            assert!(
                base.ends_with(suffix),
                "{name} does not end with its unit {suffix}"
            );
        }
    }
}

/// Records each point's family, base unit and value.
#[derive(Default)]
struct Points(Vec<(&'static str, Unit, f64)>);

impl Sink for Points {
    fn begin(&mut self, _: &Family) {}

    fn point(&mut self, family: &Family, _: &[(&str, Label<'_>)], value: Number) {
        let value = match value {
            Number::F64(v) => v,
            Number::U64(v) => v as f64,
        };
        self.0.push((family.name, family.unit, value));
    }

    fn histogram(
        &mut self,
        _: &Family,
        _: &[(&str, Label<'_>)],
        _: &crate::output::metrics::Histogram,
    ) {
    }
}

#[test]
fn every_value_exported_is_a_row_of_the_gpu_values_tables_in_its_base_unit() {
    use crate::snapshot::{
        distinct, ValueRow, ValueUnit, GPU_DEVICE_VALUES, GPU_LIMIT_EVENT_VALUES,
        MIG_INSTANCE_VALUES, XID_ERROR_VALUES,
    };
    let template = GpuExtension {
        devices: vec![GpuDeviceReport {
            throttle_reasons: Some(Vec::new()),
            xid_errors: vec![XidErrorCount::default()],
            readings: GpuReadings {
                mig_instances: vec![MigInstanceReport::default()],
                ..GpuReadings::default()
            },
            ..GpuDeviceReport::default()
        }],
        limit_events: vec![GpuLimitEvent::default()],
    };
    // Flags, not numbers: their families (0 or 1) are left out below.
    let (mut gpu, _) = distinct(&template, |path| {
        ["remapping_pending", "remapping_failed", "mig_enabled"]
            .iter()
            .any(|flag| path.ends_with(flag))
    });
    let device = gpu.devices[0].clone();
    let event = &mut gpu.limit_events[0];
    (event.index, event.uuid, event.event) = (device.index, device.uuid.clone(), "thermal".into());
    // Every row's value in its base unit; an identifier is a label, never a value.
    fn values<T>(rows: &[ValueRow<T>], item: &T, out: &mut Vec<(String, Unit, f64)>) {
        for row in rows.iter().filter(|row| row.unit != ValueUnit::Identifier) {
            let (unit, divisor) = Unit::base_of(row.unit);
            if let Some(value) = (row.read)(item) {
                out.push((row.json_path.to_owned(), unit, value / divisor));
            }
        }
    }
    let mut rows = Vec::new();
    values(GPU_DEVICE_VALUES, &device, &mut rows);
    values(XID_ERROR_VALUES, &device.xid_errors[0], &mut rows);
    values(
        MIG_INSTANCE_VALUES,
        &device.readings.mig_instances[0],
        &mut rows,
    );
    values(GPU_LIMIT_EVENT_VALUES, &gpu.limit_events[0], &mut rows);
    let mut points = Points::default();
    walk(&gpu, "global", &mut points);
    let flags = [THROTTLE_ACTIVE.name, REMAPPING.name, MIG.name];
    let numbers: Vec<_> = points.0.iter().filter(|p| !flags.contains(&p.0)).collect();
    assert!(numbers.len() > 20, "{numbers:?}");
    for (family, unit, value) in numbers {
        let found: Vec<_> = rows
            .iter()
            .filter(|(_, u, v)| u == unit && (v - value).abs() <= value.abs() * 1e-12)
            .collect();
        assert_eq!(
            found.len(),
            1,
            "{family} exports {value} ({unit:?}), which is {} rows' value in the values tables \
             of relay-metrics/src/snapshot/extension_values.rs, in that unit: want 1 ({rows:?})",
            found.len()
        );
    }
}
