//! The report's unit tests: downsampling, bad lines, the narrow parse against full snapshots,
//! and the GPU markers.

use std::borrow::Cow;

use chrono::TimeZone as _;

use super::*;
use crate::snapshot::*;
use crate::units::{
    BandwidthUnit, CapacityUnit, CountUnit, CpuUnit, DataUnit, DurationUnit, Measurement,
    UnitFamily, UtilizationUnit,
};

fn resident(ms: i64, kib: u64) -> ResourceMetricsSnapshot {
    ResourceMetricsSnapshot {
        timestamp: Utc
            .timestamp_millis_opt(1_700_000_000_000 + ms)
            .single()
            .unwrap_or_default(),
        memory: Some(MemoryMetrics {
            resident: Some(Measurement::integer(
                kib,
                CapacityUnit::Kibibytes,
                CapacityUnit::Kibibytes,
            )),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn downsampling_bounds_the_columns_and_keeps_a_one_sample_peak() {
    let mut builder = ReportBuilder::default();
    for ms in 0..100_000 {
        let kib = if ms == 77_777 {
            9_000_000
        } else {
            1000 + (ms % 7) as u64
        };
        builder.observe(&resident(ms, kib));
    }
    let report = builder.finish(RunEnd::default()).unwrap();
    assert!(report.columns.len() <= MAX_COLUMNS);
    assert!(report.columns.len() > MAX_COLUMNS / 4);
    let i = Series::Resident as usize;
    let (floor, peak) = report
        .columns
        .iter()
        .fold((f64::MAX, f64::MIN), |(floor, peak), c| {
            (floor.min(c.min[i]), peak.max(c.max[i]))
        });
    assert_eq!(peak, 9_000_000.0 * 1024.0);
    assert_eq!(floor, 1000.0 * 1024.0);
    let samples: u32 = report.columns.iter().map(|c| c.samples).sum();
    assert_eq!(samples, 100_000);
    assert_eq!(
        report.summary.memory.peak_resident_bytes,
        Some(9_000_000 * 1024)
    );
    // The peak's column is drawn: the SVG carries its height.
    let svg = report.to_svg().unwrap();
    assert!(svg.contains("Resident memory"));
}

#[test]
fn bad_lines_are_named_and_blank_lines_skipped() {
    let good = serde_json::to_string(&resident(0, 1)).unwrap();
    let input = format!("{good}\n\n{good}\nnot json\n");
    let mut builder = ReportBuilder::default();
    let error = builder.read_ndjson(input.as_bytes()).unwrap_err();
    assert!(
        matches!(error, ReportError::BadLine { line: 4, .. }),
        "{error}"
    );
    assert_eq!(builder.samples(), 2);
    let long = format!("{}\n", " ".repeat(MAX_LINE_BYTES + 10));
    let error = ReportBuilder::default()
        .read_ndjson(long.as_bytes())
        .unwrap_err();
    assert!(error.to_string().starts_with("line 1: "), "{error}");
    assert!(matches!(
        ReportBuilder::default().finish(RunEnd::default()),
        Err(ReportError::Empty)
    ));
}

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_700_000_000_000 + ms)
        .single()
        .unwrap_or_default()
}

fn integer<U: UnitFamily>(value: u64, unit: U) -> Option<Measurement> {
    Some(Measurement::integer(value, unit, unit))
}

fn millis(value: u64) -> Option<Measurement> {
    integer(value, DurationUnit::Milliseconds)
}

fn kib(value: u64) -> Option<Measurement> {
    integer(value, CapacityUnit::Kibibytes)
}

fn data(value: u64) -> Option<Measurement> {
    integer(value, DataUnit::Bytes)
}

fn rate(value: f64) -> Option<Measurement> {
    Measurement::decimal(
        value,
        BandwidthUnit::BytesPerSecond,
        BandwidthUnit::KibibytesPerSecond,
    )
}

fn count(value: u64, unit: CountUnit) -> Option<Measurement> {
    Some(Measurement::count(value, unit))
}

fn limit(
    resource: ResourceLimitResource,
    event: ResourceLimitEventKind,
    value: u64,
) -> ResourceLimitEventCount {
    ResourceLimitEventCount {
        resource,
        event,
        count: count(value, CountUnit::Events),
    }
}

const UUID: &str = "GPU-6a1f0c3e-0000-4000-8000-000000000000";

fn gpu_event(event: &'static str, value: u64, seconds: Option<f64>) -> GpuLimitEvent {
    GpuLimitEvent {
        resource: Cow::Borrowed("gpu"),
        event: Cow::Borrowed(event),
        index: Some(0),
        uuid: UUID.into(),
        count: value,
        sampled_periods: (event != "xid").then_some(value * 2),
        throttled_seconds: seconds,
    }
}

/// Sample `i` of a series with every value the report reads (and some it skips) moving: CPU
/// throttling, pressure, OOM kills with a victim, limit counters, GPU devices and, with
/// `gpu_events`, GPU throttling from sample 5 on and an XID error at sample 15.
fn rich(i: u64, gpu_events: bool) -> ResourceMetricsSnapshot {
    let ms = i as i64 * 10;
    let traffic = NetworkTrafficMetrics {
        received_data: data(1000 * i),
        receive_throughput: rate(1000.0 + (i % 5) as f64 * 300.5),
        transmit_throughput: rate(20.25 * i as f64),
        ..Default::default()
    };
    ResourceMetricsSnapshot {
        timestamp: at(ms),
        measurement_scope: MeasurementScope::Cgroup,
        process_sampling: Some(ProcessSamplingMetadata {
            visible_processes: 3,
            sampled_processes: 3,
            ..Default::default()
        }),
        cpu: Some(CpuMetrics {
            user_time: millis(100 * i),
            system_time: millis(10 * i),
            total_time: millis(110 * i),
            consumption_rate: Measurement::decimal(
                0.5 + (i % 3) as f64 * 0.25,
                CpuUnit::LogicalProcessors,
                CpuUnit::LogicalProcessors,
            ),
            throttled_time: millis(if i > 5 { 3 * i } else { 0 }),
            some_pressure_stall_time: millis(i * i),
            limit_events: vec![limit(
                ResourceLimitResource::Cpu,
                ResourceLimitEventKind::Throttled,
                i / 4,
            )],
            ..Default::default()
        }),
        memory: Some(MemoryMetrics {
            system_used: kib(5_000_000),
            resident: kib(1000 + (i * 7) % 50),
            peak_resident: kib(1100 + i),
            environment_accounted: kib(2000 + i),
            some_pressure_stall_time: millis(i / 2),
            limit_events: vec![
                limit(
                    ResourceLimitResource::Memory,
                    ResourceLimitEventKind::High,
                    i / 3,
                ),
                limit(
                    ResourceLimitResource::Memory,
                    ResourceLimitEventKind::Terminated,
                    i / 7,
                ),
            ],
            ..Default::default()
        }),
        process: Some(ProcessMetrics {
            active_count: count(1 + i % 4, CountUnit::Processes),
            thread_count: count(9, CountUnit::Threads),
            limit_events: vec![limit(
                ResourceLimitResource::Processes,
                ResourceLimitEventKind::Maximum,
                i / 9,
            )],
            ..Default::default()
        }),
        disk: Some(DiskMetrics {
            read_data: data(4096 * i),
            write_data: data(512 * i * i),
            read_throughput: rate(409_600.0),
            write_throughput: rate(51_200.0 * i as f64),
            filesystems: vec![FilesystemCapacityMetrics {
                path: "/".into(),
                total_capacity: data(1 << 30),
                ..Default::default()
            }],
            ..Default::default()
        }),
        gpu: Some(GpuMetrics {
            device_metrics: Some(
                (0..2)
                    .map(|d| AcceleratorDeviceMetrics {
                        device_identifier: format!("GPU-{d}").into(),
                        device_index: Some(d),
                        memory_used: kib(1 << 20 | i << d),
                        compute_utilization: Measurement::decimal(
                            ((i * 13 + u64::from(d) * 40) % 100) as f64,
                            UtilizationUnit::Percentage,
                            UtilizationUnit::Percentage,
                        ),
                        ..Default::default()
                    })
                    .collect(),
            ),
            process_metrics: Some(vec![AcceleratorProcessMetrics {
                device_identifier: "GPU-0".into(),
                process_id: 42,
                memory_used: kib(1024),
                ..Default::default()
            }]),
        }),
        network: Some(NetworkMetrics {
            measurement_scope: MeasurementScope::Global,
            system: traffic.clone(),
            interfaces: vec![NetworkInterfaceMetrics {
                name: "eth0".into(),
                traffic,
            }],
        }),
        extensions: Extensions {
            collector: CollectorInfo {
                name: Cow::Borrowed("relay-metrics"),
                sequence: i + 1,
                // Recorded on 16 CPUs: its ~10 cores are possible there.
                online_cpus: Some(16),
                ..Default::default()
            },
            precise_cpu: Some(PreciseCpu {
                run_time_ns: Some(1_000_000 * i),
                run_rate_logical_processors: i.is_multiple_of(2).then_some(1.25 + i as f64 / 100.0),
                cgroup_usage_ns: Some(2_000_000 * i),
                cgroup_usage_rate_logical_processors: Some(1.5),
                ..Default::default()
            }),
            cgroups: vec![CgroupReport {
                path: "/relay-metrics-run".into(),
                cpu_usage_ns: Some(7),
                cpu_effective_limit_logical_processors: Some(16.0),
                ..Default::default()
            }],
            kernel_events: KernelEvents {
                active: true,
                processes_created: Some(2 * i),
                processes_exited: Some(i),
                run_queue_delay_log2_ns: Some(vec![1, 2, 3]),
                oom_kills: Some(i / 7),
                recent_oom_victims: if i >= 7 {
                    vec![OomVictim {
                        pid: 4242,
                        comm: "hog".into(),
                        rss_kib: 1 << 20,
                        time_ns: 7,
                    }]
                } else {
                    Vec::new()
                },
                ..Default::default()
            },
            sampler: Some(SamplerInfo {
                interval_usec: 10_000,
                tick_index: i,
                tick_lateness_usec: 3,
                missed_ticks_total: i / 10,
            }),
            unavailable: vec![Unavailable {
                field: Cow::Borrowed("memory.limit"),
                reason: "no limit".into(),
            }],
            cumulative: Some(Cumulative {
                since: Some(at(0)),
                method: CumulativeMethod::CgroupV2,
                reason: Some("syscall bytes: cgroups keep no rchar/wchar".into()),
                cpu_user_ns: Some(90_000_000 * i),
                cpu_system_ns: Some(9_000_000 * i),
                storage_read_bytes: Some(4096 * i),
                storage_write_bytes: Some(8192 * i),
                processes_created: Some(3 * i),
                processes_exited: Some(i),
                memory_peak_bytes: Some((3000 + i) << 10),
                devices: vec![DeviceIo {
                    device: "8:0".into(),
                    read_bytes: 4096 * i,
                    write_bytes: 8192 * i,
                }],
                ..Default::default()
            }),
            gpu: Some(GpuExtension {
                devices: vec![GpuDeviceReport {
                    vendor: Cow::Borrowed("nvidia"),
                    index: Some(0),
                    uuid: UUID.into(),
                    readings: GpuReadings {
                        power_watts: Some(250.5),
                        ..Default::default()
                    },
                    throttle_reasons: Some(vec![Cow::Borrowed("sw_power_cap")]),
                    ..Default::default()
                }],
                limit_events: if gpu_events {
                    vec![
                        gpu_event("power_cap", i.saturating_sub(4), Some(i as f64 * 0.01)),
                        gpu_event("thermal", 0, Some(0.0)),
                        gpu_event("hw_slowdown", 0, None),
                        gpu_event("xid", u64::from(i >= 15), None),
                    ]
                } else {
                    Vec::new()
                },
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The report of `snapshots` as observed, and as read back from their NDJSON.
fn both_ways(snapshots: &[ResourceMetricsSnapshot]) -> (Report, Report) {
    let mut full = ReportBuilder::for_stream(Baseline::FirstSample);
    let mut ndjson = String::new();
    for snapshot in snapshots {
        full.observe(snapshot);
        ndjson.push_str(&serde_json::to_string(snapshot).unwrap());
        ndjson.push('\n');
    }
    let mut narrow = ReportBuilder::for_stream(Baseline::FirstSample);
    narrow.read_ndjson(ndjson.as_bytes()).unwrap();
    (
        full.finish(RunEnd::default()).unwrap(),
        narrow.finish(RunEnd::default()).unwrap(),
    )
}

#[test]
fn reading_only_what_the_report_needs_gives_the_report_of_full_snapshots() {
    for gpu_events in [false, true] {
        let series: Vec<_> = (0..40).map(|i| rich(i, gpu_events)).collect();
        let (full, narrow) = both_ways(&series);
        assert_eq!(narrow.summary, full.summary);
        assert_eq!(narrow.to_html().unwrap(), full.to_html().unwrap());
        assert_eq!(narrow.to_svg().unwrap(), full.to_svg().unwrap());
        // The series moves what the summary reads: an unread field would show here.
        let summary = &narrow.summary;
        assert!(summary.limit_events.len() >= 4, "{summary:?}");
        assert_eq!(summary.oom_victims.len(), 1);
        assert!(summary.cpu.source.as_deref() == Some("cumulative:cgroup_v2"));
        assert!(summary.cumulative_reason.is_some());
        assert!(summary.gpu.as_ref().is_some_and(|gpu| gpu.devices == 2));
        assert_eq!(summary.sampling.missed_ticks, 3);
    }
}

#[test]
fn the_golden_snapshots_read_narrow_give_the_report_of_full_ones() {
    let golden = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/golden");
    let mut files = 0;
    for entry in std::fs::read_dir(golden).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|extension| extension != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
        // The goldens mask what changes from run to run.
        value["extensions"]["collector"]["version"] = "0.0.0".into();
        value["extensions"]["collector"]["collect_duration_usec"] = 10.into();
        value["extensions"]["sample_ages"] = serde_json::json!({});
        if value["extensions"]["collector"]["sequence"].is_string() {
            value["extensions"]["collector"]["sequence"] = 1.into();
        }
        if value["extensions"]["cumulative"]["since"].is_string() {
            value["extensions"]["cumulative"]["since"] = serde_json::Value::Null;
        }
        let series: Vec<ResourceMetricsSnapshot> = (0..3)
            .map(|i| {
                value["timestamp"] = at(i * 250).to_rfc3339().into();
                serde_json::from_value(value.clone())
                    .unwrap_or_else(|error| panic!("{}: {error}", path.display()))
            })
            .collect();
        let (full, narrow) = both_ways(&series);
        assert_eq!(narrow.summary, full.summary, "{}", path.display());
        assert_eq!(
            narrow.to_html().unwrap(),
            full.to_html().unwrap(),
            "{}",
            path.display()
        );
        files += 1;
    }
    assert!(files > 5, "only {files} golden files in {golden}");
}

/// A pressure marker needs one resource's stall above 10 % of an interval: 6 % of CPU stall
/// and 6 % of memory stall in the same 10 ms is not one (their sum was counted as 12 %).
#[test]
fn a_pressure_marker_needs_one_resource_above_a_tenth() {
    let stalled = |i: u64, cpu_per_step_us: u64, memory_per_step_us: u64| {
        let mut snapshot = rich(i, false);
        snapshot.cpu.as_mut().unwrap().some_pressure_stall_time =
            integer(cpu_per_step_us * i, DurationUnit::Microseconds);
        snapshot.memory.as_mut().unwrap().some_pressure_stall_time =
            integer(memory_per_step_us * i, DurationUnit::Microseconds);
        snapshot
    };
    let pressure_columns = |series: &[ResourceMetricsSnapshot]| {
        let (report, _) = both_ways(series);
        report
            .columns
            .iter()
            .filter(|column| column.markers & Marker::Pressure as u8 != 0)
            .count()
    };
    // Samples 10 ms apart: 600 µs of each is 6 % of each.
    let both_six: Vec<_> = (0..20).map(|i| stalled(i, 600, 600)).collect();
    assert_eq!(pressure_columns(&both_six), 0);
    let memory_eleven: Vec<_> = (0..20).map(|i| stalled(i, 0, 1100)).collect();
    assert_eq!(pressure_columns(&memory_eleven), 19);
}

#[test]
fn gpu_throttling_and_xid_errors_are_markers_only_where_they_happened() {
    let marked = |report: &Report, marker: Marker| {
        report
            .columns
            .iter()
            .filter(|column| column.markers & marker as u8 != 0)
            .count()
    };
    // No GPU events, or events whose counts never grow: no GPU rows, as before they existed.
    let quiet: Vec<_> = (0..40).map(|i| rich(i, false)).collect();
    let mut steady: Vec<_> = (0..40).map(|i| rich(i, true)).collect();
    for snapshot in &mut steady {
        let gpu = snapshot.extensions.gpu.as_mut().unwrap();
        for event in &mut gpu.limit_events {
            event.count = 3;
        }
    }
    for series in [quiet, steady] {
        let (report, _) = both_ways(&series);
        assert_eq!(marked(&report, Marker::GpuThrottling), 0);
        assert_eq!(marked(&report, Marker::Xid), 0);
        let svg = report.to_svg().unwrap();
        assert!(svg.contains("CPU throttling (") && svg.contains("OOM kill ("));
        assert!(!svg.contains("GPU throttling"), "a GPU row without events");
        assert!(!svg.contains("GPU XID error"), "an XID row without errors");
    }

    // Power capping from sample 5 on, an XID error at sample 15.
    let series: Vec<_> = (0..40).map(|i| rich(i, true)).collect();
    let (report, narrow) = both_ways(&series);
    assert_eq!(marked(&report, Marker::GpuThrottling), 35);
    assert_eq!(marked(&report, Marker::Xid), 1);
    // Columns of 1 ms: sample i is in column 10 i.
    assert!(report.columns[150].markers & Marker::Xid as u8 != 0);
    assert!(report.columns[40].markers & Marker::GpuThrottling as u8 == 0);
    assert!(report.columns[50].markers & Marker::GpuThrottling as u8 != 0);
    for report in [&report, &narrow] {
        let svg = report.to_svg().unwrap();
        assert!(svg.contains("GPU throttling (35)"), "{svg}");
        assert!(svg.contains("GPU XID error (1)"), "{svg}");
        // The events' summary rows: periods with the power cap, its seconds, the XID error.
        let html = report.to_html().unwrap();
        let table = render::summary_table(&report.summary);
        assert!(html.contains(&table));
        for row in [
            format!(
                "<tr><th>GPU limit event</th><td class=\"value\">35</td><td class=\"comment\">\
                 gpu power_cap on {UUID} (sampling periods, throttled 0.390 s)</td></tr>"
            ),
            format!(
                "<tr><th>GPU limit event</th><td class=\"value\">1</td><td class=\"comment\">\
                 gpu xid on {UUID} (XID errors)</td></tr>"
            ),
        ] {
            assert!(table.contains(&row), "{row} missing from\n{table}");
        }
    }

    // A lost device that returns counts from zero: no marker for the drop, one for the rise.
    let mut events = ReportBuilder::default();
    for (i, xid) in [2, 2, 0, 1].into_iter().enumerate() {
        let mut snapshot = rich(i as u64, true);
        snapshot.extensions.gpu.as_mut().unwrap().limit_events = vec![gpu_event("xid", xid, None)];
        events.observe(&snapshot);
    }
    let report = events.finish(RunEnd::default()).unwrap();
    let xid: Vec<bool> = report
        .columns
        .iter()
        .filter(|column| column.samples > 0)
        .map(|column| column.markers & Marker::Xid as u8 != 0)
        .collect();
    assert_eq!(xid, [false, false, false, true]);
}

#[test]
fn nesting_is_checked_before_parsing_and_brackets_in_strings_do_not_count() {
    use super::parse::{too_deep, MAX_DEPTH};
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    assert!(!too_deep(nested(MAX_DEPTH).as_bytes()));
    assert!(too_deep(nested(MAX_DEPTH + 1).as_bytes()));
    let quoted = format!("{{\"a\":\"{}\\\"{}\"}}", "[".repeat(500), "{".repeat(500));
    assert!(!too_deep(quoted.as_bytes()));
    // A cut line deeper than the limit is refused as soon as it gets there.
    let deep = "{\"x\":".repeat(8 << 20);
    let started = std::time::Instant::now();
    assert!(too_deep(deep.as_bytes()));
    assert!(started.elapsed() < std::time::Duration::from_millis(100));
}

#[test]
fn the_cpu_chart_plots_the_summarys_cpu_not_the_live_threads_rate() {
    // Issue 29, item 5: a build's children run between samples; the live threads' rate
    // (precise_cpu.run_rate) misses them, the cumulative CPU does not. One core and a half
    // by the cumulative counter, 0.4 by the live threads, 100 ms apart.
    let mut builder = ReportBuilder::for_stream(Baseline::Zero);
    for i in 0..20u64 {
        let mut s = ResourceMetricsSnapshot {
            timestamp: at(i as i64 * 100),
            measurement_scope: MeasurementScope::Cgroup,
            ..Default::default()
        };
        s.extensions.precise_cpu = Some(PreciseCpu {
            run_rate_logical_processors: Some(0.4),
            ..Default::default()
        });
        s.extensions.cumulative = Some(Cumulative {
            method: CumulativeMethod::CgroupV1,
            cpu_user_ns: Some(i * 150_000_000),
            cpu_system_ns: Some(0),
            storage_read_bytes: Some(0),
            storage_write_bytes: Some(i << 20),
            ..Default::default()
        });
        s.extensions.sampler = Some(SamplerInfo {
            interval_usec: 100_000,
            ..Default::default()
        });
        builder.observe(&s);
    }
    let report = builder.finish(RunEnd::default()).unwrap();
    let plotted: Vec<f64> = report
        .columns
        .iter()
        .map(|c| c.max[Series::Cores as usize])
        .filter(|v| !v.is_nan())
        .collect();
    assert_eq!(plotted.len(), 19);
    assert!(
        plotted.iter().all(|v| (v - 1.5).abs() < 1e-9),
        "{plotted:?}"
    );
    let average = report.summary.cpu.average_cores.unwrap();
    assert!((average - 1.5).abs() < 1e-9, "{average}");
    let writes: Vec<f64> = report
        .columns
        .iter()
        .map(|c| c.max[Series::DiskWrite as usize])
        .filter(|v| !v.is_nan())
        .collect();
    assert!(
        writes
            .iter()
            .all(|v| (v - 10.0 * (1 << 20) as f64).abs() < 1e-3),
        "{writes:?}"
    );
}

/// The report reads `extensions` through narrow structs that name its keys again: each number
/// it reads is the one at its row's path (the values tables of `snapshot/extension_values.rs`
/// and `snapshot/scope_values.rs`), the others are left out.
#[test]
fn the_narrow_parse_reads_the_extension_values_at_their_table_paths() {
    let template = Extensions {
        precise_cpu: Some(PreciseCpu::default()),
        sampler: Some(SamplerInfo::default()),
        cumulative: Some(Cumulative::default()),
        cgroups: vec![CgroupReport::default()],
        ..Extensions::default()
    };
    // Only the rows' numbers, so that the text and flags stay `null`.
    let (extensions, _) = distinct(&template, |path| {
        let scope = path.strip_prefix("cgroups[].");
        EXTENSION_VALUES.iter().all(|row| row.json_path != path)
            && scope.is_none_or(|p| scope_values().all(|row| row.json_path != p))
    });
    let snapshot = ResourceMetricsSnapshot {
        extensions,
        ..ResourceMetricsSnapshot::default()
    };
    let parsed = parse::parse_line(&serde_json::to_vec(&snapshot).unwrap()).unwrap();
    // A value the report leaves out is `null` or its struct's default 0; the filled ones are
    // 1 and more.
    let is_read = |value: Option<f64>| value.is_some_and(|v| v != 0.0);
    let mut read = 0;
    for row in EXTENSION_VALUES {
        let got = (row.read)(&parsed.extensions);
        if is_read(got) {
            read += 1;
            assert_eq!(got, (row.read)(&snapshot.extensions), "{}", row.json_path);
        }
    }
    // No cgroup's value: the report reads none.
    assert!(parsed.extensions.cgroups.is_empty());
    // What parse.rs reads: the CPUs online, 2 kernel event counters, 5 nanosecond CPU values,
    // 4 of the sampler and 6 cumulative totals.
    assert_eq!(
        read, 18,
        "the report reads other extension values than parse.rs says"
    );
}
