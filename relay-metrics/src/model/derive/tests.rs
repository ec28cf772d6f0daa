use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::*;
use crate::model::{CgroupValues, PressureValues};
use crate::model::{
    CpuTicks, FilesystemValues, InterfaceCounts, InterfaceValues, IoValues, ProcessSet,
    SystemValues,
};
use crate::snapshot::{KernelEvents, OomVictim};

fn process(pid: u32, utime_ticks: u64, read_bytes: u64) -> ProcessCounters {
    ProcessCounters {
        pid,
        start_time_ticks: 100,
        utime_ticks,
        stime_ticks: 5,
        cutime_ticks: Some(0),
        cstime_ticks: Some(0),
        threads: 2,
        rss_bytes: 8 * 1024 * 1024,
        vsize_bytes: 100 * 1024 * 1024,
        peak_resident_kib: Some(9000),
        private_kib: Some(4000),
        open_fds: Some(10),
        io: Some(IoValues {
            read_bytes,
            write_bytes: 0,
            read_syscalls: 7,
            write_syscalls: 3,
        }),
        run_time_ns: Some(utime_ticks * 10_000_000),
        run_queue_wait_ns: Some(1_000),
    }
}

fn interface(name: &str, rx_bytes: u64, tx_bytes: u64) -> InterfaceValues {
    InterfaceValues {
        name: name.into(),
        counts: InterfaceCounts {
            rx_bytes: Some(rx_bytes),
            tx_bytes: Some(tx_bytes),
            ..Default::default()
        },
    }
}

fn sample(scope: MeasurementScope, instant: Instant, processes: Vec<ProcessCounters>) -> Sample {
    Sample {
        instant,
        system_wide_instant: instant,
        boottime_ns: 50_000_000_000,
        clock_ticks_per_second: 100,
        processes: ProcessPass::Sampled(ProcessSet {
            visible: processes.len() as u64,
            incomplete: None,
            processes,
        }),
        system: SystemValues {
            memory_total_kib: Some(1000),
            memory_available_kib: Some(400),
            cpu_ticks: vec![CpuTicks {
                cpu: 0,
                busy: 10,
                total: 100,
            }],
            cpu_pressure: PressureValues {
                some_usec: Some(3_000_999),
                full_usec: Some(0),
            },
            memory_pressure: PressureValues::default(),
        },
        filesystems: vec![FilesystemValues {
            path: "/".into(),
            total_bytes: Some(4096),
            available_bytes: Some(1024),
            free_bytes: Some(2048),
        }],
        interfaces: vec![interface("eth0", 1000, 10), interface("lo", 5, 5)],
        ..Sample::empty(scope)
    }
}

fn to_json(snapshot: &ResourceMetricsSnapshot) -> Value {
    serde_json::to_value(snapshot).unwrap()
}

fn m(value: Value, unit: &str) -> Value {
    json!({"value": value, "unit": unit})
}

#[test]
fn process_tree_sums_and_second_sample_rates() {
    let config = ResourceMetricsConfig::default();
    let origin = Instant::now();
    let mut baselines = Baselines::default();
    let first = derive(
        &config,
        &sample(
            MeasurementScope::ProcessTree,
            origin,
            vec![process(1, 100, 0), process(2, 21, 0)],
        ),
        &mut baselines,
        Utc::now(),
    );
    let v = to_json(&first);
    assert_eq!(v["cpu"]["user_time"], m(json!(1210), "milliseconds"));
    assert_eq!(v["cpu"]["total_time"], m(json!(1310), "milliseconds"));
    assert_eq!(v["cpu"]["consumption_rate"], Value::Null);
    assert_eq!(v["memory"]["resident"], m(json!(16384), "kibibytes"));
    assert_eq!(v["memory"]["system_used"], m(json!(600), "kibibytes"));
    assert_eq!(
        v["memory"]["peak_resident"],
        Value::Null,
        "tree scope has no single peak"
    );
    assert_eq!(v["process"]["active_count"], m(json!(2), "processes"));
    assert_eq!(v["process"]["descendant_count"], m(json!(1), "processes"));
    assert_eq!(v["process"]["thread_count"], m(json!(4), "threads"));
    assert_eq!(v["disk"]["read_operations"], m(json!(14), "operations"));
    assert_eq!(
        v["disk"]["filesystems"][0]["available_capacity"],
        m(json!(1024), "bytes")
    );
    let fields = &v["process_sampling"]["field_sampled_processes"];
    assert_eq!(fields["disk.read_throughput"], json!(0));
    assert_eq!(fields["cpu.total_time"], json!(2));
    assert_eq!(fields["memory.physical_footprint"], json!(0));
    assert!(fields.get("memory.peak_resident").is_none());
    assert_eq!(fields.as_object().unwrap().len(), 16);
    assert_eq!(
        v["network"]["system"]["received_data"],
        m(json!(1005), "bytes")
    );
    assert_eq!(v["network"]["system"]["receive_throughput"], Value::Null);

    let later = origin + Duration::from_millis(500);
    let second = derive(
        &config,
        &sample(
            MeasurementScope::ProcessTree,
            later,
            vec![process(1, 150, 500), process(2, 21, 0)],
        ),
        &mut baselines,
        Utc::now(),
    );
    let v = to_json(&second);
    assert_eq!(
        v["cpu"]["consumption_rate"],
        m(json!(1.0), "logical_processors")
    );
    assert_eq!(
        v["disk"]["read_throughput"],
        m(json!(1000.0), "bytes_per_second")
    );
    assert_eq!(
        v["process_sampling"]["field_sampled_processes"]["disk.read_throughput"],
        json!(2)
    );
    assert_eq!(
        v["network"]["system"]["receive_throughput"],
        m(json!(0.0), "bytes_per_second")
    );
    assert_eq!(
        v["extensions"]["precise_cpu"]["run_rate_logical_processors"],
        json!(1.0)
    );
}

#[test]
fn global_scope_reports_system_values_and_no_process_memory() {
    let config = ResourceMetricsConfig::default();
    let mut baselines = Baselines::default();
    let v = to_json(&derive(
        &config,
        &sample(
            MeasurementScope::Global,
            Instant::now(),
            vec![process(1, 1, 0)],
        ),
        &mut baselines,
        Utc::now(),
    ));
    assert_eq!(v["memory"]["resident"], Value::Null);
    assert_eq!(v["process"]["descendant_count"], Value::Null);
    assert_eq!(
        v["cpu"]["some_pressure_stall_time"],
        m(json!(3000), "milliseconds")
    );
    let fields = v["process_sampling"]["field_sampled_processes"]
        .as_object()
        .unwrap();
    assert!(
        fields.keys().all(|k| !k.starts_with("memory.")),
        "{fields:?}"
    );
}

#[test]
fn application_scope_has_peak_resident() {
    let config = ResourceMetricsConfig::default();
    let v = to_json(&derive(
        &config,
        &sample(
            MeasurementScope::ApplicationProcess,
            Instant::now(),
            vec![process(1, 1, 0)],
        ),
        &mut Baselines::default(),
        Utc::now(),
    ));
    assert_eq!(v["memory"]["peak_resident"], m(json!(9000), "kibibytes"));
    assert_eq!(
        v["process_sampling"]["field_sampled_processes"]["memory.peak_resident"],
        json!(1)
    );
}

#[test]
fn configured_units_apply_and_disabled_categories_are_null() {
    let config = ResourceMetricsConfig::from_value(json!({
        "memory": {"enabled": false},
        "gpu": {"device_metrics": false},
        "units": {"cpu": {"user_time": "seconds"}, "disk": {"filesystem_total_capacity": "kibibytes"}}
    }))
    .unwrap();
    let v = to_json(&derive(
        &config,
        &sample(
            MeasurementScope::ProcessTree,
            Instant::now(),
            vec![process(1, 150, 0)],
        ),
        &mut Baselines::default(),
        Utc::now(),
    ));
    assert_eq!(v["memory"], Value::Null);
    assert_eq!(v["cpu"]["user_time"], m(json!(1.5), "seconds"));
    assert_eq!(
        v["disk"]["filesystems"][0]["total_capacity"],
        m(json!(4), "kibibytes")
    );
    assert_eq!(
        v["gpu"],
        json!({"device_metrics": null, "process_metrics": []})
    );
}

#[test]
fn an_incomplete_tree_pass_nulls_sums_but_keeps_system_values() {
    let config = ResourceMetricsConfig::default();
    let mut s = sample(
        MeasurementScope::ProcessTree,
        Instant::now(),
        vec![process(1, 1, 0)],
    );
    if let ProcessPass::Sampled(set) = &mut s.processes {
        set.incomplete = Some("/proc/2/stat: permission denied".into());
    }
    s.cgroup = Some(CgroupValues {
        memory_limit_bytes: Some(4096),
        ..Default::default()
    });
    let v = to_json(&derive(&config, &s, &mut Baselines::default(), Utc::now()));
    assert_eq!(v["cpu"]["user_time"], Value::Null);
    assert_eq!(v["process"]["active_count"], Value::Null);
    assert_eq!(v["memory"]["limit"], Value::Null);
    assert_eq!(v["memory"]["system_total"], m(json!(1000), "kibibytes"));
    assert_eq!(v["gpu"]["process_metrics"], Value::Null);
}

#[test]
fn a_vanished_root_gives_relays_unavailable_shape() {
    let config = ResourceMetricsConfig::default();
    let mut s = sample(MeasurementScope::ProcessTree, Instant::now(), Vec::new());
    s.processes = ProcessPass::RootUnavailable("process 42 exited".into());
    let v = to_json(&derive(&config, &s, &mut Baselines::default(), Utc::now()));
    assert_eq!(v["process_sampling"], Value::Null);
    assert_eq!(v["cpu"]["limit_events"], json!([]));
    assert_eq!(v["memory"]["system_total"], Value::Null);
    assert_eq!(v["disk"]["filesystems"], json!([]));
    assert_eq!(
        v["gpu"],
        json!({"device_metrics": null, "process_metrics": null})
    );
    assert_eq!(v["network"]["interfaces"], json!([]));
}

#[test]
fn cgroup_values_fill_relays_cgroup_fields_and_limit_events() {
    let config = ResourceMetricsConfig::default();
    let mut s = sample(
        MeasurementScope::Cgroup,
        Instant::now(),
        vec![process(1, 1, 0)],
    );
    s.cgroup = Some(CgroupValues {
        throttled_usec: Some(2_000_999),
        throttled_periods: Some(12),
        effective_cpu_limit: Some(0.2),
        memory_limit_bytes: Some(64 * 1024 * 1024),
        memory_current_bytes: Some(2048),
        memory_max_events: Some(3),
        memory_oom_kills: Some(1),
        pids_max_events: Some(4),
        ..Default::default()
    });
    let v = to_json(&derive(&config, &s, &mut Baselines::default(), Utc::now()));
    assert_eq!(v["measurement_scope"], json!("cgroup"));
    assert_eq!(v["cpu"]["throttled_time"], m(json!(2000), "milliseconds"));
    assert_eq!(
        v["cpu"]["effective_limit"],
        m(json!(0.2), "logical_processors")
    );
    assert_eq!(
        v["cpu"]["limit_events"],
        json!([{"resource": "cpu", "event": "throttled", "count": m(json!(12), "events")}])
    );
    assert_eq!(v["memory"]["limit"], m(json!(65536), "kibibytes"));
    assert_eq!(
        v["memory"]["environment_accounted"],
        m(json!(2), "kibibytes")
    );
    assert_eq!(v["memory"]["out_of_memory_event_count"], Value::Null);
    let events: Vec<&str> = v["memory"]["limit_events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["maximum", "terminated"]);
    assert_eq!(
        v["process"]["limit_events"][0]["count"],
        m(json!(4), "events")
    );
    assert_eq!(v["process"]["descendant_count"], Value::Null);
}

#[test]
fn snapshot_keys_follow_relays_order() {
    let config = ResourceMetricsConfig::default();
    let snapshot = derive(
        &config,
        &sample(
            MeasurementScope::ProcessTree,
            Instant::now(),
            vec![process(1, 1, 0)],
        ),
        &mut Baselines::default(),
        Utc::now(),
    );
    let text = serde_json::to_string(&snapshot).unwrap();
    let keys = [
        "\"timestamp\"",
        "\"operating_system\"",
        "\"measurement_scope\"",
        "\"process_sampling\"",
        "\"cpu\"",
        "\"memory\"",
        "\"process\"",
        "\"disk\"",
        "\"gpu\"",
        "\"network\"",
        "\"extensions\"",
    ];
    let positions: Vec<usize> = keys.iter().map(|k| text.find(k).unwrap()).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let timestamp = to_json(&snapshot)["timestamp"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        timestamp.ends_with('Z') && timestamp.contains('T'),
        "{timestamp}"
    );
}

#[test]
fn cgroup_scope_rate_comes_from_the_cgroup_usage_counter() {
    let config = ResourceMetricsConfig::default();
    let origin = Instant::now();
    let mut baselines = Baselines::default();
    let with_usage = |instant, usage_ns, utime| {
        let mut s = sample(
            MeasurementScope::Cgroup,
            instant,
            vec![process(1, utime, 0)],
        );
        s.cgroup = Some(CgroupValues {
            usage_ns: Some(usage_ns),
            ..Default::default()
        });
        s
    };
    derive(
        &config,
        &with_usage(origin, 0, 100),
        &mut baselines,
        Utc::now(),
    );
    // The process accounts for 0.5 LP, but the cgroup (which also ran a process that exited
    // in between) used 0.8 LP: the cgroup's counter is the scope's consumption.
    let later = origin + Duration::from_secs(1);
    let v = to_json(&derive(
        &config,
        &with_usage(later, 800_000_000, 150),
        &mut baselines,
        Utc::now(),
    ));
    assert_eq!(
        v["cpu"]["consumption_rate"],
        m(json!(0.8), "logical_processors")
    );
    assert_eq!(
        v["extensions"]["precise_cpu"]["cgroup_usage_rate_logical_processors"],
        json!(0.8)
    );
}

/// The kernel events reach the extensions whole, also in a snapshot that already holds another
/// pass's lists (whose allocations are reused).
#[test]
fn kernel_events_are_copied_whole_into_a_reused_snapshot() {
    let config = ResourceMetricsConfig::default();
    let mut baselines = Baselines::default();
    let mut out = ResourceMetricsSnapshot::default();
    let origin = Instant::now();
    let victim = |pid| OomVictim {
        pid,
        comm: "victim".into(),
        ..Default::default()
    };
    let mut first = sample(MeasurementScope::Global, origin, vec![]);
    first.kernel_events = KernelEvents {
        active: true,
        processes_created: Some(3),
        run_queue_delay_log2_ns: Some(vec![1, 2, 3]),
        recent_oom_victims: vec![victim(7), victim(8)],
        ring_buffer_drops: Some(1),
        ..Default::default()
    };
    derive_into(&config, &mut first, &mut baselines, Utc::now(), &mut out);
    assert_eq!(out.extensions.kernel_events, first.kernel_events);
    let mut second = sample(
        MeasurementScope::Global,
        origin + Duration::from_secs(1),
        vec![],
    );
    second.kernel_events = KernelEvents {
        reason: Some("not loaded".into()),
        recent_oom_victims: vec![victim(9)],
        ..Default::default()
    };
    derive_into(&config, &mut second, &mut baselines, Utc::now(), &mut out);
    assert_eq!(out.extensions.kernel_events, second.kernel_events);
}

/// The measured cgroups move from the sample into the extensions, whole, leaving the reused
/// snapshot's in the sample for its next pass to write over; a pass without them leaves none
/// of an earlier pass's in a reused snapshot.
#[test]
fn measured_cgroups_are_moved_from_the_sample_and_cleared_without_them() {
    let config = ResourceMetricsConfig::default();
    let mut baselines = Baselines::default();
    let mut out = ResourceMetricsSnapshot::default();
    let origin = Instant::now();
    let mut first = sample(MeasurementScope::Global, origin, vec![]);
    first.targets = Some(Box::new(crate::snapshot::Targets {
        matched: 2,
        cgroups: vec![crate::snapshot::CgroupTargetReport {
            cgroup: "/system.slice/a.service".into(),
            cpu_usage_ns: Some(1_234),
            memory_current_bytes: Some(4096),
            ..Default::default()
        }],
        ..Default::default()
    }));
    let measured = first.targets.clone();
    let earlier = Some(Box::new(crate::snapshot::Targets {
        matched: 7,
        ..Default::default()
    }));
    out.extensions.targets.clone_from(&earlier);
    derive_into(&config, &mut first, &mut baselines, Utc::now(), &mut out);
    assert_eq!(out.extensions.targets, measured);
    assert_eq!(first.targets, earlier);
    let mut second = sample(
        MeasurementScope::Global,
        origin + Duration::from_secs(1),
        vec![],
    );
    derive_into(&config, &mut second, &mut baselines, Utc::now(), &mut out);
    assert_eq!(out.extensions.targets, None);
}
