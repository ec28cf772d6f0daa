use super::*;
use crate::config::MetricNames;
use crate::snapshot::{ResourceMetricsSnapshot, TargetKernelEvents, TargetLabels};
use std::sync::Arc;

fn snapshot() -> ResourceMetricsSnapshot {
    let mut histogram = vec![0; 32];
    histogram[10] = 2; // 1.0–2.0 µs
    histogram[13] = 3; // 8–16 µs
    histogram[31] = 1; // beyond every bound
                       // Every category on: a category that is off drops its per-cgroup families.
    let mut snapshot = ResourceMetricsSnapshot {
        cpu: Some(Default::default()),
        memory: Some(Default::default()),
        process: Some(Default::default()),
        disk: Some(Default::default()),
        gpu: Some(Default::default()),
        ..ResourceMetricsSnapshot::default()
    };
    snapshot.extensions.targets = Some(Box::new(Targets {
        cgroups: vec![CgroupTargetReport {
            cgroup: "/machine.slice/a".into(),
            labels: TargetLabels {
                container_id: Some("abc".into()),
                ..TargetLabels::default()
            },
            cpu_usage_ns: Some(1_500_000_000),
            gpus: Some(vec![TargetGpuUse {
                index: 1,
                uuid: Arc::from("GPU-b"),
                processes: 2,
                memory_used_bytes: None,
                sm_utilization_percent: Some(45.0),
                memory_utilization_percent: Some(12.5),
            }]),
            kernel_events: Some(TargetKernelEvents {
                run_queue_count: 6,
                run_queue_total_ns: 3_000_000_000,
                run_queue_histogram: histogram,
                preemptions: 4,
                ..TargetKernelEvents::default()
            }),
            ..CgroupTargetReport::default()
        }],
        dropped: 7,
        ..Targets::default()
    }));
    snapshot
}

#[test]
fn prometheus_text_has_labelled_series_and_a_cumulative_histogram() {
    let mut text = String::new();
    crate::output::prometheus::encode(&snapshot(), MetricNames::RelayMetrics, &mut text);
    let labels = "cgroup=\"/machine.slice/a\",container_id=\"abc\"";
    for line in [
        "relay_metrics_targets 1".to_owned(),
        "relay_metrics_targets_dropped 7".to_owned(),
        format!("relay_metrics_cgroup_cpu_usage_seconds_total{{{labels}}} 1.5"),
        format!("relay_metrics_cgroup_preemptions_total{{{labels}}} 4"),
        format!("relay_metrics_cgroup_gpu_processes{{{labels},device=\"1\",uuid=\"GPU-b\"}} 2"),
        format!("relay_metrics_cgroup_gpu_sm_utilization_ratio{{{labels},device=\"1\",uuid=\"GPU-b\"}} 0.45"),
        format!("relay_metrics_cgroup_gpu_memory_utilization_ratio{{{labels},device=\"1\",uuid=\"GPU-b\"}} 0.125"),
        "# TYPE relay_metrics_cgroup_run_queue_delay_seconds histogram".to_owned(),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_bucket{{{labels},le=\"0.000001024\"}} 0"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_bucket{{{labels},le=\"0.000004096\"}} 2"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_bucket{{{labels},le=\"0.000016384\"}} 5"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_bucket{{{labels},le=\"1.073741824\"}} 5"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_bucket{{{labels},le=\"+Inf\"}} 6"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_sum{{{labels}}} 3"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_count{{{labels}}} 6"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    // Unknown memory is not exported.
    assert!(
        !text.contains("relay_metrics_cgroup_gpu_memory_used_bytes{"),
        "{text}"
    );
}

/// Every series of the values table (`snapshot/target_values.rs`) reaches the Prometheus text
/// with its labels and its value in its family's base unit.
#[test]
fn every_series_of_the_values_table_is_exported_with_its_labels() {
    let (report, _) = crate::snapshot::distinct_report();
    let mut snapshot = snapshot();
    snapshot.extensions.targets = Some(Box::new(Targets {
        cgroups: vec![CgroupTargetReport {
            cgroup: "/t".into(),
            ..report.clone()
        }],
        ..Targets::default()
    }));
    let mut text = String::new();
    crate::output::prometheus::encode(&snapshot, MetricNames::RelayMetrics, &mut text);
    let mut series_count = 0;
    for (family, entry, divisor) in table::families() {
        for series in entry.series {
            let mut labels = vec!["cgroup=\"/t\"".to_owned()];
            labels.extend(series.labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")));
            let start = format!("{}{{{}}} ", family.name, labels.join(","));
            let line = text
                .lines()
                .find(|l| l.starts_with(&start))
                .unwrap_or_else(|| panic!("{start} missing in\n{text}"));
            let exported: f64 = line[start.len()..].parse().unwrap();
            let want = (series.read)(&report).unwrap() / divisor;
            assert!(
                (exported - want).abs() <= want.abs() * 1e-12,
                "{line}: want {want}"
            );
            series_count += 1;
        }
    }
    assert!(series_count > 30, "{series_count}");
}

#[cfg(feature = "agent")]
#[test]
fn otlp_has_a_cumulative_histogram_with_per_bucket_counts() {
    use opentelemetry_proto::tonic::common::v1::any_value;
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let resource = crate::output::otlp::OtlpResource::new(std::time::SystemTime::now(), &[]);
    let request = crate::output::otlp::request(&snapshot(), &resource, MetricNames::RelayMetrics);
    // The cgroup's series are under a resource of its own: the host's attributes and its own.
    assert_eq!(request.resource_metrics.len(), 2);
    let host = &request.resource_metrics[0];
    let container = &request.resource_metrics[1];
    let attribute = |key: &str| {
        container
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == key))
            .and_then(|kv| kv.value.as_ref())
            .and_then(|v| match &v.value {
                Some(any_value::Value::StringValue(text)) => Some(text.clone()),
                _ => None,
            })
    };
    assert_eq!(
        attribute("relay_metrics.cgroup").as_deref(),
        Some("/machine.slice/a")
    );
    assert_eq!(attribute("container.id").as_deref(), Some("abc"));
    assert_eq!(attribute("service.name").as_deref(), Some("relay-metrics"));
    let named = |metrics: &[opentelemetry_proto::tonic::metrics::v1::Metric], name: &str| {
        metrics.iter().any(|m| m.name == name)
    };
    let histogram_name = "relay_metrics_cgroup_run_queue_delay_seconds";
    assert!(!named(&host.scope_metrics[0].metrics, histogram_name));
    let metrics = &container.scope_metrics[0].metrics;
    let metric = metrics
        .iter()
        .find(|m| m.name == "relay_metrics_cgroup_run_queue_delay_seconds")
        .expect("the histogram");
    let Some(Data::Histogram(histogram)) = &metric.data else {
        panic!("not a histogram: {metric:?}");
    };
    let point = &histogram.data_points[0];
    assert_eq!(point.count, 6);
    assert_eq!(point.sum, Some(3.0));
    assert_eq!(point.explicit_bounds.len(), 11);
    assert_eq!(point.bucket_counts.len(), 12);
    assert_eq!(point.bucket_counts[..3], [0, 2, 3]);
    assert_eq!(point.bucket_counts.iter().sum::<u64>(), 6);
    assert_eq!(point.bucket_counts[11], 1);
    assert!(point.attributes.iter().all(|kv| kv.key != "cgroup"));
}

#[test]
fn cadvisor_naming_has_cadvisors_labels_units_and_working_set() {
    use crate::snapshot::{TargetCpuSpec, TargetMemoryStat};
    let mut snapshot = snapshot();
    let targets = snapshot.extensions.targets.as_mut().unwrap();
    let report = &mut targets.cgroups[0];
    report.labels = TargetLabels {
        container_id: Some("abc".into()),
        container_name: Some("k8s_app_web-0_shop_uid_0".into()),
        container_image: Some("nginx:1".into()),
        pod_name: Some("web-0".into()),
        pod_namespace: Some("shop".into()),
        kubernetes_container: Some("app".into()),
        ..TargetLabels::default()
    };
    report.memory_current_bytes = Some(10_000);
    report.memory_stat = Some(TargetMemoryStat {
        rss_bytes: Some(3_000),
        inactive_file_bytes: Some(4_000),
        ..TargetMemoryStat::default()
    });
    report.cpu_spec = Some(TargetCpuSpec {
        quota_us: Some(20_000),
        period_us: Some(100_000),
        shares: Some(1024),
    });
    report.cpu_throttled_ns = Some(250_000_000);
    let mut text = String::new();
    crate::output::prometheus::encode(&snapshot, MetricNames::Cadvisor, &mut text);
    let labels = "container=\"app\",id=\"/machine.slice/a\",image=\"nginx:1\",name=\"k8s_app_web-0_shop_uid_0\",namespace=\"shop\",pod=\"web-0\"";
    for line in [
        format!("container_cpu_usage_seconds_total{{{labels},cpu=\"total\"}} 1.5"),
        format!("container_cpu_cfs_throttled_seconds_total{{{labels}}} 0.25"),
        format!("container_memory_usage_bytes{{{labels}}} 10000"),
        format!("container_memory_working_set_bytes{{{labels}}} 6000"),
        format!("container_memory_rss{{{labels}}} 3000"),
        format!("container_spec_cpu_quota{{{labels}}} 20000"),
        format!("container_spec_cpu_period{{{labels}}} 100000"),
        format!("container_spec_cpu_shares{{{labels}}} 1024"),
        format!("container_spec_memory_limit_bytes{{{labels}}} 0"),
        format!("relay_metrics_cgroup_preemptions_total{{{labels}}} 4"),
        format!("relay_metrics_cgroup_run_queue_delay_seconds_count{{{labels}}} 6"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing in\n{text}");
    }
    // The relay_metrics families cAdvisor's carry are not repeated; no relay labels.
    assert!(
        !text.contains("relay_metrics_cgroup_cpu_usage_seconds_total"),
        "{text}"
    );
    assert!(!text.contains("container_id="), "{text}");
}

/// A measured cgroup with a namespace of its own (`eth0`, `lo`, a `veth` peer): every counter
/// in each naming under its name, `interface` labelled, cAdvisor's interface filter, the
/// conventions' `container.network.io`, and the interface globs of the budget.
#[test]
fn network_per_cgroup_in_every_naming_and_within_the_interface_globs() {
    let mut snapshot = snapshot();
    let interface = |name: &str, base: u64| TargetInterface {
        name: name.into(),
        receive_bytes: Some(base + 1),
        transmit_bytes: Some(base + 2),
        receive_packets: Some(base + 3),
        transmit_packets: Some(base + 4),
        receive_errors: Some(base + 5),
        transmit_errors: Some(base + 6),
        receive_dropped: Some(base + 7),
        transmit_dropped: Some(base + 8),
    };
    if let Some(targets) = snapshot.extensions.targets.as_mut() {
        targets.cgroups[0].network = Some(crate::snapshot::TargetNetwork {
            namespace_inode: 4_026_532_000,
            interfaces: vec![
                interface("eth0", 100),
                interface("lo", 200),
                interface("veth1", 300),
            ],
        });
    }
    let mut relay = String::new();
    crate::output::prometheus::encode(&snapshot, MetricNames::RelayMetrics, &mut relay);
    let labels = "cgroup=\"/machine.slice/a\",container_id=\"abc\"";
    for (name, value) in [
        ("received_bytes_total", 1),
        ("transmitted_bytes_total", 2),
        ("received_packets_total", 3),
        ("transmitted_packets_total", 4),
        ("receive_errors_total", 5),
        ("transmit_errors_total", 6),
        ("receive_dropped_packets_total", 7),
        ("transmit_dropped_packets_total", 8),
    ] {
        for (interface, base) in [("eth0", 100), ("lo", 200), ("veth1", 300)] {
            let line = format!(
                "relay_metrics_cgroup_network_{name}{{{labels},interface=\"{interface}\"}} {}\n",
                base + value
            );
            assert!(relay.contains(&line), "{line}{relay}");
        }
    }
    let mut cadvisor = String::new();
    crate::output::prometheus::encode(&snapshot, MetricNames::Cadvisor, &mut cadvisor);
    for (name, value) in [
        ("receive_bytes_total", 101),
        ("transmit_bytes_total", 102),
        ("receive_packets_total", 103),
        ("transmit_packets_total", 104),
        ("receive_errors_total", 105),
        ("transmit_errors_total", 106),
        ("receive_packets_dropped_total", 107),
        ("transmit_packets_dropped_total", 108),
    ] {
        let line = format!(
            "container_network_{name}{{id=\"/machine.slice/a\",interface=\"eth0\"}} {value}\n"
        );
        assert!(cadvisor.contains(&line), "{line}{cadvisor}");
    }
    assert!(cadvisor.contains(
        "# HELP container_network_receive_packets_dropped_total Cumulative count of packets dropped while receiving\n"
    ));
    // cAdvisor leaves out `lo` and `veth*`; none of ours repeats them in its naming.
    assert!(!cadvisor.contains("interface=\"lo\""), "{cadvisor}");
    assert!(!cadvisor.contains("interface=\"veth1\""), "{cadvisor}");
    assert!(
        !cadvisor.contains("relay_metrics_cgroup_network_"),
        "{cadvisor}"
    );
    let mut otel = String::new();
    crate::output::prometheus::encode(&snapshot, MetricNames::Otel, &mut otel);
    assert!(
        otel.contains("# TYPE container_network_io_bytes_total counter\n"),
        "{otel}"
    );
    for (direction, value) in [("receive", 101), ("transmit", 102)] {
        let line = format!(
            "network_interface_name=\"eth0\",network_io_direction=\"{direction}\"}} {value}\n"
        );
        assert!(otel.contains(&line), "{line}{otel}");
    }
    // The interface globs: `veth*` and `lo` out.
    let budget = crate::output::budget::SeriesBudget::new(
        Vec::new(),
        Vec::new(),
        true,
        Vec::new(),
        vec!["veth*".into(), "lo".into()],
    )
    .unwrap();
    let mut within = String::new();
    crate::output::prometheus::encode_within(
        &snapshot,
        MetricNames::RelayMetrics,
        &budget,
        &mut within,
    );
    assert!(within.contains("interface=\"eth0\"} 101\n"), "{within}");
    assert!(!within.contains("interface=\"lo\""), "{within}");
    assert!(!within.contains("interface=\"veth1\""), "{within}");
    // A family glob turns the family off.
    let budget = crate::output::budget::SeriesBudget::new(
        Vec::new(),
        vec!["relay_metrics_cgroup_network_*".into()],
        true,
        Vec::new(),
        Vec::new(),
    )
    .unwrap();
    within.clear();
    crate::output::prometheus::encode_within(
        &snapshot,
        MetricNames::RelayMetrics,
        &budget,
        &mut within,
    );
    assert!(
        !within.contains("relay_metrics_cgroup_network_"),
        "{within}"
    );
    assert!(
        within.contains("relay_metrics_cgroup_cpu_usage_seconds_total"),
        "{within}"
    );
}

/// A pod's cgroup, its sandbox and its containers share one namespace: in cAdvisor's naming
/// only the sandbox reports it (as cAdvisor's CRI handlers do), so that a sum by pod counts its
/// traffic once; a container of its own (no pod) reports its own; the `relay_metrics` naming
/// reports it for every cgroup that shares it.
#[test]
fn cadvisor_naming_reports_a_pods_network_once_on_its_sandbox() {
    let mut snapshot = snapshot();
    let targets = snapshot.extensions.targets.as_mut().unwrap();
    let template = targets.cgroups[0].clone();
    let pod = |cgroup: &str, container_id: Option<&str>, container: Option<&str>| {
        let mut report = template.clone();
        report.cgroup = cgroup.into();
        report.labels = TargetLabels {
            container_id: container_id.map(Into::into),
            pod_uid: Some("uid-1".into()),
            pod_name: Some("web-0".into()),
            pod_namespace: Some("shop".into()),
            kubernetes_container: container.map(Into::into),
            ..TargetLabels::default()
        };
        report
    };
    targets.cgroups = vec![
        pod("/kubepods/pod1", None, None),
        pod("/kubepods/pod1/sandbox", Some("sandbox"), None),
        pod("/kubepods/pod1/app", Some("app"), Some("app")),
        pod("/kubepods/pod1/sidecar", Some("sidecar"), Some("sidecar")),
        // A Docker-API runtime under the kubelet names the sandbox `POD`.
        pod("/kubepods/pod2/infra", Some("infra"), Some("POD")),
        template.clone(),
    ];
    for report in &mut targets.cgroups {
        report.network = Some(crate::snapshot::TargetNetwork {
            namespace_inode: 4_026_532_000,
            interfaces: vec![TargetInterface {
                name: "eth0".into(),
                receive_bytes: Some(100),
                ..TargetInterface::default()
            }],
        });
    }
    let reported = |names: MetricNames, family: &str| {
        let mut text = String::new();
        crate::output::prometheus::encode(&snapshot, names, &mut text);
        let ids: Vec<String> = text
            .lines()
            .filter(|line| line.starts_with(&format!("{family}{{")))
            .filter_map(|line| {
                let (_, rest) = line.split_once(['{', ','].as_slice())?;
                let id = rest.split(',').find_map(|l| {
                    l.strip_prefix("id=\"")
                        .or_else(|| l.strip_prefix("cgroup=\""))
                })?;
                Some(id.trim_end_matches('"').to_owned())
            })
            .collect();
        ids
    };
    assert_eq!(
        reported(
            MetricNames::Cadvisor,
            "container_network_receive_bytes_total"
        ),
        [
            "/kubepods/pod1/sandbox",
            "/kubepods/pod2/infra",
            "/machine.slice/a"
        ]
    );
    assert_eq!(
        reported(
            MetricNames::RelayMetrics,
            "relay_metrics_cgroup_network_received_bytes_total"
        )
        .len(),
        6
    );
}

/// The family names of a Prometheus exposition (its `# TYPE` lines).
fn family_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split(' ').next())
        .map(str::to_owned)
        .collect()
}

/// Every family rendered in the `otel` naming and in the `cadvisor` naming, from this machine's
/// snapshot in each scope with a measured cgroup whose every value is set: no name of the
/// `otel` naming is one cAdvisor or node_exporter exports (the families the `cadvisor` naming
/// gives under their names), and none of it ends in a suffix Prometheus reserves.
#[test]
fn otel_names_never_take_cadvisors_or_node_exporters() {
    use crate::snapshot::{
        MeasurementScope, TargetCpuSpec, TargetDeviceIo, TargetInterface, TargetMemoryStat,
        TargetNetwork,
    };
    let config = crate::config::ResourceMetricsConfig::from_text(
        r#"{"measurement_scope": "global", "disk": {"filesystem_paths": ["/"]},
            "extensions": {"kernel_events": false, "metric_names": "cadvisor"}}"#,
    )
    .unwrap();
    let mut collector = crate::collector::Collector::new(config).unwrap();
    collector.collect();
    let mut machine = (*collector.collect()).clone();
    let mut targets = snapshot().extensions.targets.unwrap();
    let report = &mut targets.cgroups[0];
    report.cpu_user_ns = Some(1);
    report.cpu_system_ns = Some(1);
    report.cpu_periods = Some(1);
    report.cpu_throttled_periods = Some(1);
    report.cpu_throttled_ns = Some(1);
    report.cpu_limit_cores = Some(1.0);
    report.memory_current_bytes = Some(1);
    report.memory_peak_bytes = Some(1);
    report.memory_limit_bytes = Some(1);
    report.memory_events.oom_kill = Some(1);
    report.memory_events.max = Some(1);
    report.pids_current = Some(1);
    report.pids_limit = Some(1);
    report.pressure.cpu_some_usec = Some(1);
    report.processes = Some(crate::snapshot::ProcessSums {
        count: 1,
        threads: 1,
        resident_bytes: 1,
        open_file_descriptors: Some(1),
    });
    report.memory_stat = Some(TargetMemoryStat {
        rss_bytes: Some(1),
        cache_bytes: Some(1),
        swap_bytes: Some(1),
        mapped_file_bytes: Some(1),
        inactive_file_bytes: Some(1),
    });
    report.cpu_spec = Some(TargetCpuSpec {
        quota_us: Some(1),
        period_us: Some(1),
        shares: Some(1),
    });
    report.devices = vec![TargetDeviceIo {
        device: "8:0".into(),
        ..TargetDeviceIo::default()
    }];
    report.created_seconds = Some(1.0);
    report.network = Some(TargetNetwork {
        namespace_inode: 1,
        interfaces: vec![TargetInterface {
            name: "eth0".into(),
            receive_bytes: Some(1),
            transmit_bytes: Some(1),
            receive_packets: Some(1),
            transmit_packets: Some(1),
            receive_errors: Some(1),
            transmit_errors: Some(1),
            receive_dropped: Some(1),
            transmit_dropped: Some(1),
        }],
    });
    machine.extensions.targets = Some(targets);
    let mut text = String::new();
    crate::output::prometheus::encode(&machine, MetricNames::Cadvisor, &mut text);
    let theirs: Vec<String> = family_names(&text)
        .into_iter()
        .filter(|name| name.starts_with("container_") || name.starts_with("node_"))
        .collect();
    // Their names are there to collide with: the per-container ones and the machine's.
    for name in [
        "container_memory_usage_bytes",
        "container_network_receive_bytes_total",
        "container_start_time_seconds",
        "node_cpu_seconds_total",
    ] {
        assert!(theirs.iter().any(|n| n == name), "{name}: {theirs:?}");
    }
    let mut ours = std::collections::BTreeSet::new();
    for scope in [
        MeasurementScope::Global,
        MeasurementScope::ProcessTree,
        MeasurementScope::Cgroup,
    ] {
        machine.measurement_scope = scope;
        crate::output::prometheus::encode(&machine, MetricNames::Otel, &mut text);
        ours.extend(family_names(&text));
    }
    for name in ["container_memory_usage_bytes", "system_process_count"] {
        let renamed = format!("relay_metrics_{name}");
        assert!(
            !ours.contains(name) && (ours.contains(&renamed) || name.starts_with("system")),
            "{name}: {ours:?}"
        );
    }
    assert!(ours.contains("system_processes"), "{ours:?}");
    assert!(
        ours.contains("container_network_io_bytes_total"),
        "{ours:?}"
    );
    let shared: Vec<&String> = theirs.iter().filter(|n| ours.contains(*n)).collect();
    assert!(
        shared.is_empty(),
        "shared with cAdvisor's names: {shared:?}"
    );
    let reserved: Vec<&String> = ours
        .iter()
        .filter(|n| n.ends_with("_count") || n.ends_with("_sum") || n.ends_with("_bucket"))
        .collect();
    assert!(reserved.is_empty(), "{reserved:?}");
}

#[test]
fn every_family_cadvisor_covers_is_a_family_of_the_values_table() {
    for name in cadvisor::COVERED {
        assert!(
            table::families().any(|(family, _, _)| family.name == *name),
            "cadvisor::COVERED names {name}, which TARGET_FAMILIES (snapshot/target_values.rs) \
             does not have: it would be exported in cAdvisor's naming beside its cAdvisor family"
        );
    }
}
