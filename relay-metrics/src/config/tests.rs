use super::*;
use crate::units::{CapacityUnit, MeasurementUnit as U};
use serde_json::json;

fn error_of(value: serde_json::Value) -> String {
    ResourceMetricsConfig::from_value(value)
        .unwrap_err()
        .to_string()
}

#[test]
fn defaults_match_relay() {
    let config = ResourceMetricsConfig::from_value(json!({})).unwrap();
    assert_eq!(config.measurement_scope, ScopeSetting::RuntimeDefault);
    assert!(!config.polling.enabled);
    assert_eq!(config.polling.interval_millis, 5000);
    assert!(config.cpu.enabled && config.memory.enabled && config.process.enabled);
    assert!(config.disk.enabled && config.disk.process_io);
    assert!(config.disk.filesystem_paths.is_empty());
    assert!(config.gpu.enabled && config.gpu.device_metrics && config.gpu.process_metrics);
    assert!(config.network.enabled && config.network.interfaces.is_empty());
    let units = &config.units;
    let defaults: [(U, U); 10] = [
        (units.cpu.user_time.into(), U::Milliseconds),
        (units.cpu.effective_limit.into(), U::LogicalProcessors),
        (units.memory.resident.into(), U::Kibibytes),
        (
            units.memory.full_pressure_stall_time.into(),
            U::Milliseconds,
        ),
        (units.disk.read_data.into(), U::Bytes),
        (units.disk.filesystem_free_capacity.into(), U::Bytes),
        (units.disk.write_throughput.into(), U::BytesPerSecond),
        (units.gpu.device_memory_used.into(), U::Kibibytes),
        (units.gpu.process_compute_utilization.into(), U::Percentage),
        (
            units.network.interface.receive_throughput.into(),
            U::BytesPerSecond,
        ),
    ];
    for (row, (unit, relay_default)) in defaults.into_iter().enumerate() {
        assert_eq!(unit, relay_default, "row {row}");
    }
    assert_eq!(config, ResourceMetricsConfig::default());
}

/// Relay has 15 behavioural and 39 unit options; count the leaves of the serialised default.
#[test]
fn has_relays_54_options_plus_ours() {
    fn leaves(value: &serde_json::Value) -> usize {
        match value {
            serde_json::Value::Object(map) => map.values().map(leaves).sum(),
            _ => 1,
        }
    }
    let mut value = serde_json::to_value(ResourceMetricsConfig::default()).unwrap();
    let map = value.as_object_mut().unwrap();
    let ours = ["cgroup_path", "root_pid", "extensions"].map(|key| map.remove(key).unwrap());
    assert_eq!(leaves(&value), 54);
    assert_eq!(leaves(&value["units"]), 39);
    assert_eq!(ours.iter().map(leaves).sum::<usize>(), 15);
}

#[test]
fn validation_messages_match_relay() {
    let prefix = "invalid resource metrics config: invalid argument: resource_metrics.";
    let cases = [
        (
            json!({"polling": {"interval_millis": 0}}),
            "polling.interval_millis must be greater than zero",
        ),
        (
            json!({"disk": {"filesystem_paths": ["/", "tmp"]}}),
            "disk.filesystem_paths[1] must be absolute",
        ),
        (
            json!({"disk": {"filesystem_paths": [""]}}),
            "disk.filesystem_paths[0] must not be empty",
        ),
        (
            json!({"network": {"interfaces": ["lo", "  "]}}),
            "network.interfaces must not contain blank names",
        ),
        (
            json!({"gpu": {"devices": [""]}}),
            "gpu.devices must not contain empty identifiers",
        ),
        (
            json!({"extensions": {"cri_endpoint": "tcp://127.0.0.1:10010"}}),
            "extensions.cri_endpoint: a CRI endpoint is a Unix socket, unix:///path or /path (like unix:///run/containerd/containerd.sock), got \"tcp://127.0.0.1:10010\"",
        ),
    ];
    for (input, tail) in cases {
        assert_eq!(error_of(input), format!("{prefix}{tail}"));
    }
}

#[test]
fn interval_zero_is_rejected_even_with_polling_off() {
    let message = error_of(json!({"polling": {"enabled": false, "interval_millis": 0}}));
    assert!(
        message.ends_with("interval_millis must be greater than zero"),
        "{message}"
    );
}

#[test]
fn serde_errors_carry_relays_prefix_without_positions() {
    let unknown = error_of(json!({"foo": 1}));
    assert!(
        unknown.starts_with("invalid resource metrics config: unknown field `foo`, expected one of `measurement_scope`, `polling`"),
        "{unknown}"
    );
    assert!(!unknown.contains("line"), "{unknown}");
    let memory_inspection = error_of(json!({"memory_inspection": {"enabled": true}}));
    assert!(memory_inspection.contains("unknown field `memory_inspection`"));
    let family = error_of(json!({"units": {"cpu": {"user_time": "mebibytes"}}}));
    assert_eq!(
        family,
        "invalid resource metrics config: unknown variant `mebibytes`, expected one of `microseconds`, `milliseconds`, `seconds`, `minutes`"
    );
    let boolean = error_of(json!({"cpu": {"enabled": "yes"}}));
    assert_eq!(
        boolean,
        "invalid resource metrics config: invalid type: string \"yes\", expected a boolean"
    );
    let negative = error_of(json!({"polling": {"interval_millis": -5}}));
    assert!(negative.contains("expected u64"), "{negative}");
    let operations = error_of(json!({"units": {"disk": {"read_operations": "operations"}}}));
    assert!(
        operations.contains("unknown field `read_operations`"),
        "{operations}"
    );
}

#[test]
fn accepts_huge_intervals_and_nonexistent_absolute_paths() {
    let config = ResourceMetricsConfig::from_value(json!({
        "polling": {"interval_millis": u64::MAX},
        "disk": {"filesystem_paths": ["/nonexistent/relay-probe"]}
    }))
    .unwrap();
    assert_eq!(config.polling.interval_millis, u64::MAX);
    // Accepted as Relay accepts it, but polled at least once a day.
    assert_eq!(
        config.polling.period(),
        std::time::Duration::from_millis(MAX_INTERVAL_MILLIS)
    );
    assert_eq!(MAX_INTERVAL_MILLIS, 24 * 60 * 60 * 1000);
    let config =
        ResourceMetricsConfig::from_value(json!({"polling": {"interval_millis": 1500}})).unwrap();
    assert_eq!(
        config.polling.period(),
        std::time::Duration::from_millis(1500)
    );
}

#[test]
fn interval_flags_are_capped_at_one_day() {
    assert_eq!(parse_interval_millis("1"), Ok(1));
    assert_eq!(parse_interval_millis("86400000"), Ok(86_400_000));
    for text in [
        "0",
        "86400001",
        "18446744073709551615",
        "-1",
        "1.5",
        "soon",
        "",
    ] {
        let error = parse_interval_millis(text).unwrap_err();
        assert_eq!(
            error,
            format!("expected whole milliseconds from 1 to 86400000 (one day), got {text:?}")
        );
    }
}

#[test]
fn a_byte_order_mark_is_skipped_in_json_and_toml() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("bom.json", "\u{feff}{\"measurement_scope\": \"global\"}"),
        ("bom.toml", "\u{feff}measurement_scope = \"global\"\n"),
    ] {
        let config = ResourceMetricsConfig::from_text(text).unwrap();
        assert_eq!(config.measurement_scope, ScopeSetting::Global, "{name}");
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let config = ResourceMetricsConfig::from_file(&path).unwrap();
        assert_eq!(config.measurement_scope, ScopeSetting::Global, "{name}");
    }
    // Only a leading mark: one inside the document is still a syntax error.
    let error = ResourceMetricsConfig::from_text("{}\u{feff}").unwrap_err();
    assert!(matches!(error, ConfigError::Syntax { .. }), "{error}");
}

#[test]
fn reads_toml_and_relay_plugin_documents() {
    let toml = r#"
        version = 1
        [[components]]
        kind = "resource_metrics"
        enabled = true
        [components.config]
        measurement_scope = "global"
        [components.config.units.memory]
        resident = "mebibytes"
    "#;
    let config = ResourceMetricsConfig::from_text(toml).unwrap();
    assert_eq!(config.measurement_scope, ScopeSetting::Global);
    assert_eq!(config.units.memory.resident, CapacityUnit::Mebibytes);

    let bare = ResourceMetricsConfig::from_text("[disk]\nprocess_io = false\n").unwrap();
    assert!(!bare.disk.process_io);

    let twice = json!({"components": [
        {"kind": "resource_metrics", "config": {}},
        {"kind": "resource_metrics", "config": {}}
    ]});
    assert_eq!(
        ResourceMetricsConfig::from_value(twice).unwrap_err(),
        ConfigError::DuplicateComponent
    );
    let syntax = ResourceMetricsConfig::from_text("{not json").unwrap_err();
    assert!(matches!(syntax, ConfigError::Syntax { .. }), "{syntax}");
}

#[test]
fn cgroup_scope_needs_a_safe_absolute_path() {
    let missing = error_of(json!({"measurement_scope": "cgroup"}));
    assert!(
        missing.ends_with("cgroup_path is required when measurement_scope is cgroup"),
        "{missing}"
    );
    let relative = error_of(json!({"measurement_scope": "cgroup", "cgroup_path": "system.slice"}));
    assert!(
        relative.contains("cgroup_path must be absolute"),
        "{relative}"
    );
    let escape = error_of(json!({"measurement_scope": "cgroup", "cgroup_path": "/a/../../etc"}));
    assert!(escape.contains("must not contain '..'"), "{escape}");
    let ok = ResourceMetricsConfig::from_value(
        json!({"measurement_scope": "cgroup", "cgroup_path": "/system.slice/foo.service"}),
    );
    assert!(ok.is_ok());
    let pid = error_of(json!({"root_pid": 0}));
    assert!(
        pid.contains("root_pid must be a process id greater than zero"),
        "{pid}"
    );
}

fn file_error(path: &Path) -> String {
    ResourceMetricsConfig::from_file(path)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_fifo_or_device_as_the_config_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("config.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    // Without a writer, opening the FIFO for reading would block forever.
    let error = file_error(&fifo);
    assert!(error.contains("not a regular file"), "{error}");
    let error = file_error(Path::new("/dev/zero"));
    assert!(error.contains("not a regular file"), "{error}");
    assert!(
        error.starts_with("cannot read config file /dev/zero"),
        "{error}"
    );
}

#[test]
fn a_config_file_over_the_size_cap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.json");
    // Valid JSON (spaces around an empty object), one byte over the cap.
    let mut text = vec![b' '; usize::try_from(MAX_CONFIG_BYTES).unwrap() - 1];
    text.extend_from_slice(b"{}");
    std::fs::write(&big, &text).unwrap();
    let error = file_error(&big);
    assert!(
        error.contains("larger than 1 MiB (1048576 bytes)"),
        "{error}"
    );
    text.truncate(text.len() - 3);
    text.extend_from_slice(b"{}");
    std::fs::write(&big, &text).unwrap();
    ResourceMetricsConfig::from_file(&big).expect("a file at the cap is read");
}

#[test]
fn cgroup_source_takes_its_three_spellings_and_refuses_others() {
    use crate::config::CgroupSource;
    for (text, source) in [
        ("auto", CgroupSource::Auto),
        ("bpf_iter", CgroupSource::BpfIter),
        ("files", CgroupSource::Files),
    ] {
        let config =
            ResourceMetricsConfig::from_value(json!({"extensions": {"cgroup_source": text}}))
                .unwrap();
        assert_eq!(config.extensions.cgroup_source, source);
        assert_eq!(source.as_str(), text);
    }
    assert_eq!(
        ResourceMetricsConfig::default().extensions.cgroup_source,
        CgroupSource::Auto
    );
    let error =
        ResourceMetricsConfig::from_value(json!({"extensions": {"cgroup_source": "procfs"}}))
            .unwrap_err()
            .to_string();
    assert!(error.contains("unknown variant `procfs`"), "{error}");
}

#[test]
fn process_source_takes_its_three_spellings_and_refuses_others() {
    use crate::config::ProcessSource;
    for (text, source) in [
        ("auto", ProcessSource::Auto),
        ("bpf_iter", ProcessSource::BpfIter),
        ("procfs", ProcessSource::Procfs),
    ] {
        let config =
            ResourceMetricsConfig::from_value(json!({"extensions": {"process_source": text}}))
                .unwrap();
        assert_eq!(config.extensions.process_source, source);
        assert_eq!(source.as_str(), text);
    }
    assert_eq!(
        ResourceMetricsConfig::default().extensions.process_source,
        ProcessSource::Auto
    );
    let error = ResourceMetricsConfig::from_value(json!({"extensions": {"process_source": "bpf"}}))
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown variant `bpf`"), "{error}");
}

#[test]
fn cgroup_patterns_and_depth_are_validated() {
    let config = ResourceMetricsConfig::from_text(
        r#"{"extensions": {"cgroups": ["/system.slice/*.service", "/kubepods.slice/**"], "cgroup_depth": 4, "max_targets": 10}}"#,
    )
    .unwrap();
    assert_eq!(config.extensions.cgroups.len(), 2);
    assert_eq!(config.extensions.max_targets, 10);
    for (text, expected) in [
        (
            r#"{"extensions": {"cgroups": ["system.slice"]}}"#,
            "resource_metrics.extensions.cgroups: pattern \"system.slice\" must be absolute",
        ),
        (
            r#"{"extensions": {"cgroup_depth": 0}}"#,
            "resource_metrics.extensions.cgroup_depth must be at least 1",
        ),
    ] {
        let error = ResourceMetricsConfig::from_text(text)
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{error}");
    }
}
