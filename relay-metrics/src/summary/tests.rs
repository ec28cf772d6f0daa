use std::sync::Arc;

use chrono::TimeZone as _;

use super::*;
use crate::snapshot::{
    CpuMetrics, DiskMetrics, MemoryMetrics, ResourceLimitEventCount, SamplerInfo,
};
use crate::units::{CountUnit, CpuUnit as Cpu, DataUnit as Data, DurationUnit as Dur};

fn at(ms: i64) -> DateTime<Utc> {
    Utc.timestamp_millis_opt(1_700_000_000_000 + ms)
        .single()
        .unwrap_or_default()
}

/// A snapshot at `ms` with CPU times (ms), resident KiB and read bytes.
fn snapshot(
    scope: MeasurementScope,
    ms: i64,
    user_ms: u64,
    system_ms: u64,
    resident_kib: u64,
    read: u64,
) -> ResourceMetricsSnapshot {
    let mut s = ResourceMetricsSnapshot {
        timestamp: at(ms),
        measurement_scope: scope,
        ..Default::default()
    };
    s.cpu = Some(CpuMetrics {
        user_time: Some(Measurement::integer(
            user_ms,
            Dur::Milliseconds,
            Dur::Milliseconds,
        )),
        system_time: Some(Measurement::integer(
            system_ms,
            Dur::Milliseconds,
            Dur::Seconds,
        )),
        consumption_rate: Measurement::decimal(
            0.5 + ms as f64 / 1000.0,
            Cpu::LogicalProcessors,
            Cpu::Millicores,
        ),
        ..Default::default()
    });
    s.memory = Some(MemoryMetrics {
        resident: Some(Measurement::integer(
            resident_kib,
            CapacityUnit::Kibibytes,
            CapacityUnit::Mebibytes,
        )),
        peak_resident: Some(Measurement::integer(
            resident_kib,
            CapacityUnit::Kibibytes,
            CapacityUnit::Kibibytes,
        )),
        ..Default::default()
    });
    s.disk = Some(DiskMetrics {
        read_data: Some(Measurement::integer(read, Data::Bytes, Data::Kibibytes)),
        write_data: Some(Measurement::integer(0, Data::Bytes, Data::Bytes)),
        ..Default::default()
    });
    s.extensions.sampler = Some(SamplerInfo {
        interval_usec: 100_000,
        tick_index: 0,
        tick_lateness_usec: 0,
        missed_ticks_total: (ms / 1000) as u64,
    });
    // Recorded on 4 CPUs (the bound of the rates, whatever this machine has).
    s.extensions.collector.online_cpus = Some(4);
    s
}

#[test]
fn one_process_totals_are_last_minus_first_in_base_units() {
    let scope = MeasurementScope::ApplicationProcess;
    let mut builder = SummaryBuilder::for_stream(Baseline::FirstSample);
    builder.observe(&snapshot(scope, 0, 1000, 500, 1024, 4096));
    builder.observe(&snapshot(scope, 1000, 1800, 700, 4096, 8192));
    builder.observe(&snapshot(scope, 2000, 3000, 900, 2048, 12288));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.wall_time_s, Some(2.0));
    assert_eq!(summary.cpu.user_s, Some(2.0));
    assert!((summary.cpu.system_s.unwrap() - 0.4).abs() < 1e-9);
    assert!((summary.cpu.average_cores.unwrap() - 1.2).abs() < 1e-9);
    assert_eq!(summary.cpu.peak_cores, Some(2.5));
    assert_eq!(summary.memory.peak_resident_bytes, Some(4096 * 1024));
    assert_eq!(summary.memory.peak_at, Some(at(1000)));
    assert_eq!(
        summary.memory.peak_source,
        Some(PeakSource::HighestSampledSum)
    );
    assert_eq!(
        summary.memory.max_single_process_rss_bytes,
        Some(4096 * 1024)
    );
    assert_eq!(summary.io.read_bytes, Some(8192));
    assert_eq!(summary.io.written_bytes, Some(0));
    assert_eq!(summary.sampling.samples, 3);
    assert_eq!(summary.sampling.missed_ticks, 2);
    assert_eq!(summary.sampling.interval_usec, Some(100_000));
}

#[test]
fn zero_baseline_counts_from_the_start() {
    let scope = MeasurementScope::ApplicationProcess;
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    builder.observe(&snapshot(scope, 0, 1000, 500, 1024, 0));
    builder.observe(&snapshot(scope, 500, 1500, 500, 1024, 0));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.cpu.user_s, Some(1.5));
    assert_eq!(summary.cpu.total_s, Some(2.0));
}

#[test]
fn a_tree_without_an_exact_source_says_why_instead_of_a_sampled_sum() {
    let scope = MeasurementScope::ProcessTree;
    let mut builder = SummaryBuilder::new(Baseline::Zero);
    builder.observe(&snapshot(scope, 0, 600, 10, 1024, 0));
    builder.observe(&snapshot(scope, 100, 0, 0, 0, 0));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.cpu.user_s, None);
    assert_eq!(summary.cpu.total_s, None);
    assert_eq!(summary.io.read_bytes, None);
    let fields: Vec<&str> = summary.unknown.iter().map(|u| u.field.as_ref()).collect();
    for field in ["cpu.user_s", "cpu.system_s", "cpu.total_s", "io.read_bytes"] {
        assert!(fields.contains(&field), "{field} missing from {fields:?}");
    }
    assert!(summary.unknown.iter().all(|u| !u.reason.is_empty()));
    // The sampled peak stays: it is a peak, not a total.
    assert_eq!(summary.memory.peak_resident_bytes, Some(1024 * 1024));
}

#[test]
fn the_reaped_usage_gives_cpu_and_max_rss_like_time() {
    let scope = MeasurementScope::ProcessTree;
    let mut builder = SummaryBuilder::new(Baseline::Zero);
    builder.observe(&snapshot(scope, 0, 0, 0, 0, 0));
    let summary = builder.finish(RunEnd {
        command: Some("sh kids.sh".into()),
        wall_time: Some(Duration::from_millis(4000)),
        exit_status: Some(ExitStatus::exited(3)),
        reaped: Some(ReapedUsage {
            user: Duration::from_millis(3200),
            system: Duration::from_millis(300),
            max_rss_bytes: 300 << 20,
        }),
    });
    assert_eq!(summary.cpu.total_s, Some(3.5));
    assert_eq!(summary.cpu.source.as_deref(), Some("rusage"));
    assert_eq!(summary.cpu.average_cores, Some(0.875));
    assert_eq!(summary.memory.max_single_process_rss_bytes, Some(300 << 20));
    assert_eq!(summary.exit_status, Some(ExitStatus::exited(3)));
    let text = summary.to_text();
    assert!(
        text.contains("Summary of 'sh kids.sh' (process_tree scope)"),
        "{text}"
    );
    assert!(text.contains("3.200 s"), "{text}");
    assert!(text.contains("300.00 MiB"), "{text}");
    assert!(text.contains("exit status"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap();
    assert_eq!(json["cpu"]["user_s"], 3.2);
    assert_eq!(json["exit_status"]["code"], 3);
    assert!(json["io"]["read_bytes"].is_null());
}

#[test]
fn limit_events_and_oom_victims_count_what_happened_during_the_run() {
    let scope = MeasurementScope::Cgroup;
    let mut builder = SummaryBuilder::new(Baseline::FirstSample);
    let with_events = |ms, throttled, kills: u64, victims: &[(u32, u64)]| {
        let mut s = snapshot(scope, ms, 0, 0, 0, 0);
        if let Some(cpu) = s.cpu.as_mut() {
            cpu.limit_events = vec![ResourceLimitEventCount {
                resource: ResourceLimitResource::Cpu,
                event: ResourceLimitEventKind::Throttled,
                count: Some(Measurement::count(throttled, CountUnit::Events)),
            }];
            cpu.throttled_time = Some(Measurement::integer(
                throttled * 10,
                Dur::Milliseconds,
                Dur::Milliseconds,
            ));
        }
        s.extensions.kernel_events.oom_kills = Some(kills);
        s.extensions.kernel_events.processes_created = Some(kills + 10);
        s.extensions.kernel_events.recent_oom_victims = victims
            .iter()
            .map(|&(pid, time_ns)| OomVictim {
                pid,
                comm: Arc::from("hog"),
                rss_kib: 1024,
                time_ns,
            })
            .collect();
        s
    };
    builder.observe(&with_events(0, 5, 0, &[]));
    builder.observe(&with_events(100, 7, 1, &[(42, 1)]));
    builder.observe(&with_events(200, 9, 2, &[(42, 1), (43, 2)]));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(
        summary.limit_events,
        vec![LimitEventTotal {
            resource: ResourceLimitResource::Cpu,
            event: ResourceLimitEventKind::Throttled,
            count: 4
        }]
    );
    assert_eq!(summary.throttled_s, Some(0.04));
    assert_eq!(summary.oom_kills, Some(2));
    assert_eq!(summary.processes_created, Some(2));
    let pids: Vec<u32> = summary.oom_victims.iter().map(|v| v.pid).collect();
    assert_eq!(pids, [42, 43]);
    assert!(summary.to_text().contains("victims: 42 (hog, 1.00 MiB)"));
}

#[test]
fn no_snapshot_gives_nulls_with_reasons_not_zeros() {
    let summary = SummaryBuilder::new(Baseline::Zero).finish(RunEnd::default());
    assert_eq!(summary.wall_time_s, None);
    assert_eq!(summary.memory.peak_resident_bytes, None);
    assert_eq!(summary.gpu, None);
    assert!(summary.unknown.iter().any(|u| u.field == "samples"));
    assert!(summary.to_text().contains("n/a"));
}

#[test]
fn observing_allocates_nothing_in_steady_state() {
    let scope = MeasurementScope::ProcessTree;
    let mut builder = SummaryBuilder::new(Baseline::Zero);
    let snapshot = snapshot(scope, 0, 0, 0, 0, 0);
    builder.observe(&snapshot);
    let capacity = builder.victims.capacity();
    for _ in 0..1000 {
        builder.observe(&snapshot);
    }
    assert_eq!(builder.victims.capacity(), capacity);
    assert_eq!(builder.samples(), 1001);
}

#[test]
fn cumulative_totals_come_first_with_their_method_and_the_cgroup_peak() {
    use crate::snapshot::{Cumulative, CumulativeMethod};
    let scope = MeasurementScope::ProcessTree;
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    let with_cumulative = |ms: i64, user_ns: u64, peak: u64| {
        let mut s = snapshot(scope, ms, 0, 0, 1024, 0);
        s.extensions.cumulative = Some(Cumulative {
            method: CumulativeMethod::CgroupV2,
            reason: Some(Arc::from("orphans reparented out of the tree are not seen")),
            cpu_user_ns: Some(user_ns),
            cpu_system_ns: Some(user_ns / 10),
            storage_read_bytes: Some(4096),
            storage_write_bytes: Some(8192),
            processes_created: Some(5),
            memory_peak_bytes: Some(peak),
            ..Default::default()
        });
        s
    };
    builder.observe(&with_cumulative(0, 0, 10 << 20));
    builder.observe(&with_cumulative(1000, 500_000_000, 300 << 20));
    builder.observe(&with_cumulative(2000, 2_500_000_000, 300 << 20));
    let summary = builder.finish(RunEnd {
        reaped: Some(ReapedUsage::default()),
        ..RunEnd::default()
    });
    assert_eq!(summary.cpu.user_s, Some(2.5));
    assert_eq!(summary.cpu.system_s, Some(0.25));
    assert_eq!(summary.cpu.source.as_deref(), Some("cumulative:cgroup_v2"));
    // 2.2 s of CPU in the second second: the cumulative rate wins over the sampled
    // consumption_rate (2.5 at 2000 ms).
    assert!((summary.cpu.peak_cores.unwrap() - 2.2).abs() < 1e-9);
    // The cgroup's high-water mark is charged memory; resident memory is the processes' sum.
    assert_eq!(summary.memory.peak_charged_bytes, Some(300 << 20));
    assert_eq!(summary.memory.peak_charged_at, Some(at(1000)));
    assert_eq!(summary.memory.peak_resident_bytes, Some(1 << 20));
    assert_eq!(
        summary.memory.peak_source,
        Some(PeakSource::HighestSampledSum)
    );
    let text = summary.to_text();
    assert!(text.contains("peak charged memory"), "{text}");
    assert!(text.contains("300.00 MiB"), "{text}");
    assert!(text.contains("1.00 MiB"), "{text}");
    assert_eq!(summary.io.read_bytes, Some(4096));
    assert_eq!(summary.io.written_bytes, Some(8192));
    assert_eq!(summary.processes_created, Some(5));
    assert!(summary.to_text().contains("totals: orphans reparented"));
}

#[test]
fn gpu_limit_events_count_what_happened_during_the_run() {
    use crate::snapshot::{GpuExtension, GpuLimitEvent};
    let mut builder = SummaryBuilder::new(Baseline::FirstSample);
    let with_gpu = |ms, periods: u64, seconds: f64, xids: u64| {
        let mut s = snapshot(MeasurementScope::ProcessTree, ms, 0, 0, 0, 0);
        let event = |name: &'static str, count, throttled| GpuLimitEvent {
            resource: Cow::Borrowed("gpu"),
            event: Cow::Borrowed(name),
            index: Some(0),
            uuid: Arc::from("GPU-a"),
            count,
            sampled_periods: Some(periods + 10),
            throttled_seconds: throttled,
        };
        s.extensions.gpu = Some(GpuExtension {
            devices: Vec::new(),
            limit_events: vec![
                event("power_cap", periods, Some(seconds)),
                event("xid", xids, None),
            ],
        });
        s
    };
    builder.observe(&with_gpu(0, 2, 1.0, 0));
    builder.observe(&with_gpu(100, 5, 2.5, 1));
    builder.observe(&with_gpu(200, 9, 4.0, 1));
    // The device is lost and back: its counts restart from 0 (7 periods and 3 s before; last
    // minus first read 1 and 0.5 s).
    builder.observe(&with_gpu(300, 1, 0.5, 0));
    builder.observe(&with_gpu(400, 3, 1.5, 0));
    let summary = builder.finish(RunEnd::default());
    let gpu = summary.gpu.as_ref().unwrap();
    assert_eq!(
        gpu.limit_events,
        vec![
            GpuLimitEventTotal {
                event: "power_cap".into(),
                uuid: "GPU-a".into(),
                count: 10,
                throttled_s: Some(4.5),
            },
            GpuLimitEventTotal {
                event: "xid".into(),
                uuid: "GPU-a".into(),
                count: 1,
                throttled_s: None,
            },
        ]
    );
    let text = summary.to_text();
    assert!(
        text.contains("gpu power_cap on GPU-a (sampling periods, throttled 4.500 s)"),
        "{text}"
    );
    assert!(text.contains("gpu xid on GPU-a (XID errors)"), "{text}");
}

/// A snapshot at `us` with cgroup totals: CPU (ns), storage written (bytes), and a sampling
/// period of 10 ms, or none (`run`'s final snapshot).
fn cumulative_at(us: i64, cpu_ns: u64, written: u64, sampler: bool) -> ResourceMetricsSnapshot {
    use crate::snapshot::{Cumulative, CumulativeMethod};
    let mut s = ResourceMetricsSnapshot {
        timestamp: at(0) + chrono::Duration::microseconds(us),
        measurement_scope: MeasurementScope::ProcessTree,
        ..Default::default()
    };
    s.extensions.cumulative = Some(Cumulative {
        method: CumulativeMethod::CgroupV1,
        cpu_user_ns: Some(cpu_ns),
        cpu_system_ns: Some(0),
        storage_read_bytes: Some(0),
        storage_write_bytes: Some(written),
        ..Default::default()
    });
    s.extensions.sampler = sampler.then_some(SamplerInfo {
        interval_usec: 10_000,
        tick_index: 0,
        tick_lateness_usec: 0,
        missed_ticks_total: 0,
    });
    s
}

#[test]
fn a_final_snapshot_right_after_the_previous_gives_no_rate_of_its_own() {
    // One core for 20 ms, then the final snapshot 0.5 ms later with 10 ms more CPU (the
    // clock-tick rounding of a process tree): 20 cores over 0.5 ms before.
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    builder.observe(&cumulative_at(0, 0, 0, false));
    builder.observe(&cumulative_at(10_000, 10_000_000, 0, true));
    builder.observe(&cumulative_at(20_000, 20_000_000, 0, true));
    builder.observe(&cumulative_at(20_500, 21_000_000, 0, false));
    let summary = builder.finish(RunEnd::default());
    // 1 ms in 0.5 ms was 2 cores; the peak is the first 20 ms's, or the whole run's average.
    let peak = summary.cpu.peak_cores.unwrap();
    assert!((1.0..1.03).contains(&peak), "{peak}");
    assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
}

#[test]
fn odd_streams_are_named_in_the_warnings_and_give_no_impossible_figure() {
    let mut builder = SummaryBuilder::for_stream(Baseline::FirstSample);
    let on_two_cpus = |mut s: ResourceMetricsSnapshot| {
        s.extensions.collector.online_cpus = Some(2);
        s
    };
    builder.observe(&on_two_cpus(cumulative_at(0, 5_000_000_000, 0, true)));
    builder.observe(&on_two_cpus(cumulative_at(10_000, 5_010_000_000, 0, true)));
    // The counter falls, then jumps by 100,005 s of CPU in 10 ms.
    builder.observe(&on_two_cpus(cumulative_at(20_000, 1_000, 0, true)));
    builder.observe(&on_two_cpus(cumulative_at(
        30_000,
        100_005_000_000_000,
        0,
        true,
    )));
    // A timestamp 57 years back.
    builder.observe(&on_two_cpus(cumulative_at(
        -1_796_432_405_000_000,
        100_005_010_000_000,
        0,
        true,
    )));
    builder.observe(&on_two_cpus(cumulative_at(
        40_000,
        100_005_020_000_000,
        0,
        true,
    )));
    let summary = builder.finish(RunEnd::default());
    let peak = summary.cpu.peak_cores.unwrap();
    assert!(peak <= 2.0, "{peak}");
    let warnings = summary.warnings.join("\n");
    assert!(
        warnings.contains("timestamps go backwards 1 time(s)"),
        "{warnings}"
    );
    assert!(
        warnings.contains("counters fell")
            && warnings.contains("extensions.cumulative.cpu_user_ns"),
        "{warnings}"
    );
    assert!(
        warnings.contains("1 CPU rate(s) above the recording machine's 2 CPUs"),
        "{warnings}"
    );
    // 100,005 s of CPU in 40 ms: no total rather than an impossible one.
    assert_eq!(summary.cpu.total_s, None);
    assert_eq!(summary.cpu.average_cores, None);
    assert!(warnings.contains("not one series"), "{warnings}");
    let text = summary.to_text();
    assert!(!text.contains("+-"), "{text}");
    assert!(text.contains("warnings:"), "{text}");
    // The span runs from the first snapshot to the latest: 40 ms, not 57 years.
    assert_eq!(summary.wall_time_s, Some(0.04));
}

/// A stream's CPU rates against the CPUs of the machine that recorded it: 3.5 cores from 6
/// recorded CPUs, whatever this machine has, with totals; a 10 ms burst to 0.97 cores under a
/// 0.2-CPU quota (a quota bounds a period's use, not a 10 ms window's) kept as the peak.
#[test]
fn a_streams_cpu_rates_are_bounded_by_its_recorded_cpus_not_the_readers_or_its_quota() {
    let recorded = |cpus: u32, limit: Option<f64>, us: i64, cpu_ns: u64| {
        let mut s = cumulative_at(us, cpu_ns, 0, true);
        s.extensions.collector.online_cpus = Some(cpus);
        s.extensions.cgroups = vec![crate::snapshot::CgroupReport {
            cpu_effective_limit_logical_processors: limit,
            ..Default::default()
        }];
        s
    };
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    for i in 0..=10 {
        builder.observe(&recorded(6, None, i * 100_000, i as u64 * 350_000_000));
    }
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.cpu.total_s, Some(3.5));
    assert!((summary.cpu.average_cores.unwrap() - 3.5).abs() < 1e-9);
    assert!((summary.cpu.peak_cores.unwrap() - 3.5).abs() < 1e-9);
    assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);

    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    let bursts = [0, 9_700_000, 9_700_000, 9_700_000, 9_700_000, 9_700_000];
    let mut cpu_ns = 0;
    for (i, burst) in bursts.into_iter().enumerate() {
        cpu_ns += burst;
        builder.observe(&recorded(
            2,
            Some(0.2),
            i as i64 * 10_000 + 100_000 * (i as i64 / 2),
            cpu_ns,
        ));
    }
    let summary = builder.finish(RunEnd::default());
    assert!((summary.cpu.peak_cores.unwrap() - 0.97).abs() < 1e-9);
    assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
}

/// A stream of an older cgroup (`watch`): its high-water mark is the stream's peak only if it
/// rose during the stream; one that stayed at its first value may be from before (a review's
/// 2 s stream at 1.7 MiB resident read 207 MiB "at +0.000 s", left by an earlier process).
#[test]
fn a_streams_charged_peak_counts_only_if_it_rose_during_the_stream() {
    let with_peak = |us: i64, peak: u64| {
        let mut s = cumulative_at(us, 0, 0, true);
        s.extensions.cumulative.as_mut().unwrap().memory_peak_bytes = Some(peak);
        s
    };
    let mut builder = SummaryBuilder::for_stream(Baseline::FirstSample);
    for i in 0..3 {
        builder.observe(&with_peak(i * 1_000_000, 207 << 20));
    }
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.memory.peak_charged_bytes, None);
    assert_eq!(summary.memory.peak_charged_at, None);
    let reason = summary
        .unknown
        .iter()
        .find(|u| u.field == "memory.peak_charged_bytes")
        .map(|u| u.reason.to_string());
    assert!(
        reason
            .as_deref()
            .is_some_and(|r| r.contains("did not rise") && r.contains("207.00 MiB")),
        "{reason:?}"
    );

    let mut builder = SummaryBuilder::for_stream(Baseline::FirstSample);
    builder.observe(&with_peak(0, 207 << 20));
    builder.observe(&with_peak(1_000_000, 300 << 20));
    builder.observe(&with_peak(2_000_000, 300 << 20));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.memory.peak_charged_bytes, Some(300 << 20));
    assert_eq!(summary.memory.peak_charged_at, Some(at(1000)));

    // `run`'s own cgroup counts from its start: its mark is the run's even if flat.
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    builder.observe(&with_peak(0, 5 << 20));
    builder.observe(&with_peak(1_000_000, 5 << 20));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.memory.peak_charged_bytes, Some(5 << 20));
    // … and so does the report of its stream: its totals count from before the first
    // snapshot (the command's start).
    let mut builder = SummaryBuilder::for_stream(Baseline::FirstSample);
    for us in [0, 1_000_000] {
        let mut snapshot = with_peak(us, 5 << 20);
        snapshot.extensions.cumulative.as_mut().unwrap().since = Some(at(-3));
        builder.observe(&snapshot);
    }
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.memory.peak_charged_bytes, Some(5 << 20));
}

/// A command that ends before the first timed sample: only the first and the last snapshot,
/// 1 ms apart and without sampler information. With the period known, no window that short
/// is a rate: the peak is the whole run's average, not the 1 ms window's rate.
#[test]
fn a_run_shorter_than_a_period_has_its_average_as_its_peak() {
    let mut builder =
        SummaryBuilder::new(Baseline::Zero).with_interval(std::time::Duration::from_millis(20));
    builder.observe(&cumulative_at(0, 0, 0, false));
    builder.observe(&cumulative_at(1_000, 700_000, 0, false));
    let summary = builder.finish(RunEnd {
        wall_time: Some(std::time::Duration::from_millis(2)),
        ..RunEnd::default()
    });
    assert_eq!(summary.cpu.average_cores, Some(0.35));
    assert_eq!(summary.cpu.peak_cores, Some(0.35));
}

#[test]
fn storage_rates_come_from_the_same_counters_as_the_totals() {
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    builder.observe(&cumulative_at(0, 0, 0, true));
    builder.observe(&cumulative_at(10_000, 0, 1 << 20, true));
    assert_eq!(builder.last_rates().write, Some(100.0 * (1 << 20) as f64));
    assert_eq!(builder.last_rates().cores, Some(0.0));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.io.written_bytes, Some(1 << 20));
}

#[test]
fn clock_tick_totals_give_rates_over_a_tenth_of_a_second_at_least() {
    // A one-thread loop under `run --no-cgroup --interval-ms 10`: the process tree's totals
    // count 10 ms ticks, and a window with one tick more read 2 cores.
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    for i in 0..=40i64 {
        let ticks = i + i64::from(i % 7 == 3) - i64::from(i % 7 == 4);
        let mut s = cumulative_at(i * 10_000, (ticks * 10_000_000) as u64, 0, true);
        if let Some(c) = s.extensions.cumulative.as_mut() {
            c.method = crate::snapshot::CumulativeMethod::ProcessTree;
        }
        builder.observe(&s);
    }
    let peak = builder.finish(RunEnd::default()).cpu.peak_cores.unwrap();
    assert!((0.9..=1.11).contains(&peak), "{peak}");
}

#[test]
fn the_peak_is_never_below_the_average() {
    // A short process-tree run: its one 100 ms window closed before the command's first tick.
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    for (us, ns) in [(0, 0), (10_000, 0), (110_000, 0), (150_000, 20_000_000)] {
        let mut s = cumulative_at(us, ns, 0, true);
        if let Some(c) = s.extensions.cumulative.as_mut() {
            c.method = crate::snapshot::CumulativeMethod::ProcessTree;
        }
        builder.observe(&s);
    }
    let summary = builder.finish(RunEnd::default());
    let (peak, average) = (
        summary.cpu.peak_cores.unwrap(),
        summary.cpu.average_cores.unwrap(),
    );
    assert!(
        average > 0.1 && peak >= average,
        "peak {peak}, average {average}"
    );
    // Shorter than one window: the average is the peak.
    let mut builder = SummaryBuilder::for_stream(Baseline::Zero);
    builder.observe(&cumulative_at(0, 0, 0, true));
    builder.observe(&cumulative_at(5_000, 2_500_000, 0, false));
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.cpu.peak_cores, Some(0.5));
}

#[test]
fn a_cgroup_without_the_memory_controller_says_the_peak_is_the_processes() {
    // A v2 cgroup nested below an occupied cgroup has no memory.peak: the peak is the
    // processes' resident memory, and the unknown charged peak says why.
    use crate::snapshot::{Cumulative, CumulativeMethod};
    let mut builder = SummaryBuilder::new(Baseline::Zero);
    for ms in [0, 1000] {
        let mut s = snapshot(MeasurementScope::Cgroup, ms, 0, 0, 64 << 10, 0);
        s.extensions.cumulative = Some(Cumulative {
            method: CumulativeMethod::CgroupV2,
            storage_write_bytes: Some(8 << 20),
            storage_read_bytes: Some(0),
            memory_peak_bytes: None,
            ..Default::default()
        });
        builder.observe(&s);
    }
    let summary = builder.finish(RunEnd::default());
    assert_eq!(summary.memory.peak_charged_bytes, None);
    assert_eq!(summary.memory.peak_resident_bytes, Some(64 << 20));
    assert_eq!(summary.io.written_bytes, Some(8 << 20));
    let reason = summary
        .unknown
        .iter()
        .find(|u| u.field == "memory.peak_charged_bytes")
        .map(|u| u.reason.to_string())
        .unwrap();
    assert!(reason.contains("no memory controller"), "{reason}");
    // Without cgroup totals, the run had no memory cgroup at all.
    let mut tree = SummaryBuilder::new(Baseline::Zero);
    tree.observe(&snapshot(MeasurementScope::ProcessTree, 0, 0, 0, 1024, 0));
    let summary = tree.finish(RunEnd::default());
    let reason = &summary
        .unknown
        .iter()
        .find(|u| u.field == "memory.peak_charged_bytes")
        .unwrap()
        .reason;
    assert!(reason.contains("no memory cgroup of its own"), "{reason}");
}
