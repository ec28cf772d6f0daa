//! The writer must produce exactly serde_json's bytes: on every golden snapshot, on snapshots
//! collected from the fixture trees and from this machine, and on randomised values that reach
//! every field with edge cases (NaN, infinities, escapes, empty lists, odd timestamps).

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::ResourceMetricsConfig;
use crate::snapshot::*;
use crate::source::Roots;
use crate::units::{Measurement, MeasurementUnit, MeasurementValue};
use crate::Collector;

fn fast(snapshot: &ResourceMetricsSnapshot) -> Vec<u8> {
    let mut out = b"prefix".to_vec();
    snapshot.write_json(&mut out);
    assert_eq!(&out[..6], b"prefix", "write_json must append");
    out.split_off(6)
}

fn assert_same_bytes(snapshot: &ResourceMetricsSnapshot, what: &str) {
    let expected = serde_json::to_vec(snapshot).unwrap();
    let actual = fast(snapshot);
    if actual != expected {
        let at = actual
            .iter()
            .zip(&expected)
            .position(|(a, b)| a != b)
            .unwrap_or(actual.len().min(expected.len()));
        let from = at.saturating_sub(80);
        panic!(
            "{what}: write_json differs from serde_json at byte {at}\n  serde: {}\n  ours:  {}",
            String::from_utf8_lossy(&expected[from..(at + 80).min(expected.len())]),
            String::from_utf8_lossy(&actual[from..(at + 80).min(actual.len())]),
        );
    }
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn matches_serde_on_every_golden_snapshot() {
    let mut checked = 0;
    let mut paths: Vec<_> = std::fs::read_dir(repo().join("tests/golden"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    paths.sort();
    for path in paths {
        let mut value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        // The goldens mask what depends on the run; put plausible values back.
        value["timestamp"] = json!("2025-03-04T05:06:07.123456Z");
        value["extensions"]["collector"]["collect_duration_usec"] = json!(87);
        value["extensions"]["collector"]["sequence"] = json!(2);
        value["extensions"]["collector"]["version"] = json!("0.1.0");
        // Masked in the goldens whose collector takes more than one snapshot.
        value["extensions"]["collector"]["sequence"] = json!(2);
        value["extensions"]["sample_ages"] = json!({"private_memory_ms": 12, "gpu_ms": null, "cgroups_ms": 0, "system_wide_ms": 3, "filesystems_ms": 4});
        if value["extensions"]["cumulative"].is_object() {
            value["extensions"]["cumulative"]["since"] = json!("2025-03-04T05:06:05.5Z");
        }
        let snapshot: ResourceMetricsSnapshot = serde_json::from_value(value)
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert_same_bytes(&snapshot, &path.display().to_string());
        checked += 1;
    }
    assert!(checked >= 10, "only {checked} golden files found");
}

fn collect_twice(config: Value, roots: Roots) -> Arc<ResourceMetricsSnapshot> {
    let config: ResourceMetricsConfig = serde_json::from_value(config).unwrap();
    let mut collector = Collector::with_roots(config, roots).unwrap();
    collector.collect();
    collector.collect()
}

#[test]
fn matches_serde_on_snapshots_of_the_fixture_trees() {
    let base = json!({
        "disk": {"enabled": true, "process_io": true, "filesystem_paths": ["/", "/tmp"]},
        "gpu": {"enabled": false},
        "extensions": {"kernel_events": false},
    });
    let cases = [
        (
            "cgroup-v2",
            json!({"measurement_scope": "cgroup", "cgroup_path": "/relay-test"}),
        ),
        (
            "cgroup-v1",
            json!({"measurement_scope": "cgroup", "cgroup_path": "/relay-test"}),
        ),
        (
            "cgroup-hybrid",
            json!({"measurement_scope": "cgroup", "cgroup_path": "/relay-test"}),
        ),
        (
            "cgroup-v2",
            json!({"measurement_scope": "process_tree", "root_pid": 4242}),
        ),
        (
            "global-small",
            json!({"measurement_scope": "process_tree", "root_pid": 100}),
        ),
        (
            "global-small",
            json!({"measurement_scope": "application_process", "root_pid": 100}),
        ),
        ("global-small", json!({"measurement_scope": "global"})),
    ];
    for (fixture, scope) in cases {
        let mut config = base.clone();
        for (key, value) in scope.as_object().unwrap() {
            config[key] = value.clone();
        }
        let snapshot = collect_twice(
            config,
            Roots::fixture(repo().join("tests/fixtures").join(fixture)),
        );
        assert!(snapshot.cpu.is_some(), "{fixture}: nothing collected");
        assert_same_bytes(&snapshot, fixture);
    }
}

#[test]
fn matches_serde_on_snapshots_of_this_machine() {
    let pid = std::process::id();
    for scope in [
        json!({"measurement_scope": "process_tree", "root_pid": pid}),
        json!({"measurement_scope": "global"}),
    ] {
        let mut config = json!({
            "disk": {"enabled": true, "filesystem_paths": ["/", "/tmp", "/nonexistent-relay-json"]},
            "gpu": {"enabled": false},
            "extensions": {"kernel_events": false},
        });
        for (key, value) in scope.as_object().unwrap() {
            config[key] = value.clone();
        }
        let snapshot = collect_twice(config, Roots::host());
        assert_same_bytes(&snapshot, &scope.to_string());
    }
}

#[test]
fn timestamps_match_chrono_for_every_precision_and_range() {
    let mut snapshot = ResourceMetricsSnapshot::default();
    let seconds = [
        0,
        1,
        59,
        951_782_400,     // 2000-02-29
        1_741_064_767,   // 2025
        253_402_300_799, // 9999-12-31T23:59:59
        253_402_300_800, // year 10000: chrono writes +10000
        -62_167_219_200, // 0000-01-01
        -62_167_219_201, // year -1
        -1,
    ];
    let nanos = [
        0,
        1,
        999_999_999,
        100_000_000,
        120_000_000,
        123_000_000,
        123_400_000,
        123_456_000,
        123_456_700,
        1_000_000_000, // a leap second (only valid at :59)
        1_500_000_000,
    ];
    let mut checked = 0;
    for secs in seconds {
        for nanos in nanos {
            let Some(timestamp) = DateTime::<Utc>::from_timestamp(secs, nanos) else {
                continue;
            };
            snapshot.timestamp = timestamp;
            assert_same_bytes(&snapshot, &format!("timestamp {secs} s {nanos} ns"));
            checked += 1;
        }
    }
    assert!(checked > 90, "only {checked} timestamps were valid");
}

#[test]
fn strings_are_escaped_like_serde() {
    let mut snapshot = ResourceMetricsSnapshot::default();
    let mut all_bytes: String = (0u8..0x80).map(char::from).collect();
    all_bytes.push_str("é€😀\u{2028}");
    // Each control character alone too, so that no other character forces the escaping path.
    let mut texts: Vec<String> = (0u8..0x20)
        .map(|byte| format!("a{}b", char::from(byte)))
        .collect();
    texts.extend(["", "plain", "a\"b", "back\\slash", "\u{7f}", &all_bytes].map(String::from));
    for text in &texts {
        snapshot.extensions.unavailable = vec![Unavailable {
            field: Cow::Owned(text.clone()),
            reason: text.as_str().into(),
        }];
        snapshot.extensions.target.cgroup_path = Some(text.as_str().into());
        assert_same_bytes(&snapshot, &format!("{text:?}"));
    }
}

/// A small xorshift generator: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self) -> bool {
        self.below(2) == 0
    }

    fn u64(&mut self) -> u64 {
        match self.below(4) {
            0 => self.below(10),
            1 => u64::MAX - self.below(3),
            2 => self.below(1_000_000),
            _ => self.next(),
        }
    }

    fn u32(&mut self) -> u32 {
        (self.u64() >> self.below(64)) as u32
    }

    fn f64(&mut self) -> f64 {
        match self.below(8) {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => f64::NEG_INFINITY,
            3 => -0.0,
            4 => f64::MIN_POSITIVE / 3.0,
            5 => self.below(1000) as f64 / 8.0,
            _ => f64::from_bits(self.next()),
        }
    }

    fn opt<T>(&mut self, value: impl FnOnce(&mut Self) -> T) -> Option<T> {
        (self.below(4) != 0).then(|| value(self))
    }

    fn list<T>(&mut self, mut item: impl FnMut(&mut Self) -> T) -> Vec<T> {
        (0..self.below(4)).map(|_| item(self)).collect()
    }

    fn text(&mut self) -> String {
        const PIECES: [&str; 10] = [
            "eth0", "/sys/fs", "\"", "\\", "\n", "\u{1}", "\u{1f}", "é", "😀", " ",
        ];
        (0..self.below(5))
            .map(|_| PIECES[self.below(PIECES.len() as u64) as usize])
            .collect()
    }

    fn pick<T: Copy>(&mut self, values: &[T]) -> T {
        values[self.below(values.len() as u64) as usize]
    }

    fn measurement(&mut self) -> Option<Measurement> {
        self.opt(|rng| Measurement {
            value: if rng.chance() {
                MeasurementValue::Integer(rng.u64())
            } else {
                MeasurementValue::Decimal(rng.f64())
            },
            unit: rng.pick(&[
                MeasurementUnit::Milliseconds,
                MeasurementUnit::Kibibytes,
                MeasurementUnit::BytesPerSecond,
                MeasurementUnit::LogicalProcessors,
                MeasurementUnit::FileDescriptors,
                MeasurementUnit::Fraction,
            ]),
        })
    }

    fn limit_events(&mut self) -> Vec<ResourceLimitEventCount> {
        self.list(|rng| ResourceLimitEventCount {
            resource: rng.pick(&[
                ResourceLimitResource::Cpu,
                ResourceLimitResource::Memory,
                ResourceLimitResource::Processes,
            ]),
            event: rng.pick(&[
                ResourceLimitEventKind::Throttled,
                ResourceLimitEventKind::High,
                ResourceLimitEventKind::Maximum,
                ResourceLimitEventKind::OutOfMemory,
                ResourceLimitEventKind::Terminated,
            ]),
            count: rng.measurement(),
        })
    }

    fn traffic(&mut self) -> NetworkTrafficMetrics {
        NetworkTrafficMetrics {
            received_data: self.measurement(),
            transmitted_data: self.measurement(),
            receive_throughput: self.measurement(),
            transmit_throughput: self.measurement(),
            received_packets: self.measurement(),
            transmitted_packets: self.measurement(),
            receive_errors: self.measurement(),
            transmit_errors: self.measurement(),
        }
    }

    fn vendor(&mut self) -> AcceleratorVendor {
        self.pick(&[
            AcceleratorVendor::Nvidia,
            AcceleratorVendor::Amd,
            AcceleratorVendor::Intel,
            AcceleratorVendor::Apple,
            AcceleratorVendor::Other,
        ])
    }

    fn scope(&mut self) -> MeasurementScope {
        self.pick(&[
            MeasurementScope::Global,
            MeasurementScope::ApplicationProcess,
            MeasurementScope::ProcessTree,
            MeasurementScope::Cgroup,
        ])
    }
}

fn random_snapshot(rng: &mut Rng) -> ResourceMetricsSnapshot {
    let mut coverage = FieldCoverage::default();
    for key in COVERAGE_KEYS {
        if rng.chance() {
            coverage.set(key, rng.u64());
        }
    }
    let version =
        |rng: &mut Rng| rng.opt(|rng| rng.pick(&[CgroupVersionName::V1, CgroupVersionName::V2]));
    ResourceMetricsSnapshot {
        timestamp: DateTime::from_timestamp(
            rng.below(4_000_000_000) as i64,
            rng.below(1_000_000_000) as u32,
        )
        .unwrap(),
        operating_system: rng.pick(&[
            OperatingSystem::Linux,
            OperatingSystem::Macos,
            OperatingSystem::Windows,
            OperatingSystem::Unsupported,
        ]),
        measurement_scope: rng.scope(),
        process_sampling: rng.opt(|rng| ProcessSamplingMetadata {
            visible_processes: rng.u64(),
            sampled_processes: rng.u64(),
            field_sampled_processes: coverage,
        }),
        cpu: rng.opt(|rng| CpuMetrics {
            user_time: rng.measurement(),
            system_time: rng.measurement(),
            total_time: rng.measurement(),
            consumption_rate: rng.measurement(),
            throttled_time: rng.measurement(),
            effective_limit: rng.measurement(),
            some_pressure_stall_time: rng.measurement(),
            full_pressure_stall_time: rng.measurement(),
            limit_events: rng.limit_events(),
        }),
        memory: rng.opt(|rng| MemoryMetrics {
            system_used: rng.measurement(),
            system_total: rng.measurement(),
            system_available: rng.measurement(),
            resident: rng.measurement(),
            private: rng.measurement(),
            physical_footprint: rng.measurement(),
            virtual_memory: rng.measurement(),
            peak_resident: rng.measurement(),
            limit: rng.measurement(),
            environment_accounted: rng.measurement(),
            some_pressure_stall_time: rng.measurement(),
            full_pressure_stall_time: rng.measurement(),
            out_of_memory_event_count: rng.measurement(),
            limit_events: rng.limit_events(),
        }),
        process: rng.opt(|rng| ProcessMetrics {
            active_count: rng.measurement(),
            descendant_count: rng.measurement(),
            thread_count: rng.measurement(),
            lifetime_creation_count: rng.measurement(),
            open_file_descriptor_count: rng.measurement(),
            windows_handle_count: rng.measurement(),
            limit_events: rng.limit_events(),
        }),
        disk: rng.opt(|rng| DiskMetrics {
            read_data: rng.measurement(),
            write_data: rng.measurement(),
            read_throughput: rng.measurement(),
            write_throughput: rng.measurement(),
            read_operations: rng.measurement(),
            write_operations: rng.measurement(),
            filesystems: rng.list(|rng| FilesystemCapacityMetrics {
                path: rng.text().into(),
                total_capacity: rng.measurement(),
                available_capacity: rng.measurement(),
                free_capacity: rng.measurement(),
            }),
        }),
        gpu: rng.opt(|rng| GpuMetrics {
            device_metrics: rng.opt(|rng| {
                rng.list(|rng| AcceleratorDeviceMetrics {
                    vendor: rng.vendor(),
                    device_identifier: rng.text().into(),
                    device_index: rng.opt(Rng::u32),
                    memory_used: rng.measurement(),
                    compute_utilization: rng.measurement(),
                })
            }),
            process_metrics: rng.opt(|rng| {
                rng.list(|rng| AcceleratorProcessMetrics {
                    vendor: rng.vendor(),
                    device_identifier: rng.text().into(),
                    device_index: rng.opt(Rng::u32),
                    process_id: rng.u32(),
                    memory_used: rng.measurement(),
                    compute_utilization: rng.measurement(),
                })
            }),
        }),
        network: rng.opt(|rng| NetworkMetrics {
            measurement_scope: rng.scope(),
            system: rng.traffic(),
            interfaces: rng.list(|rng| NetworkInterfaceMetrics {
                name: rng.text().into(),
                traffic: rng.traffic(),
            }),
        }),
        extensions: Extensions {
            collector: CollectorInfo {
                name: Cow::Owned(rng.text()),
                version: Cow::Borrowed("0.1.0"),
                sequence: rng.u64(),
                collect_duration_usec: rng.u64(),
                online_cpus: rng.opt(|rng| rng.u64() as u32),
                process_source: Cow::Owned(rng.text()),
                process_source_reason: rng.opt(|rng| rng.text().into()),
                unchanged_rule_misses: rng.u64(),
                unchanged_reused_reads: rng.u64(),
                cgroup_source: rng.opt(|rng| Cow::Owned(rng.text())),
                cgroup_source_reason: rng.opt(|rng| rng.text().into()),
            },
            target: TargetInfo {
                root_pid: rng.opt(Rng::u32),
                cgroup_path: rng.opt(|rng| rng.text().into()),
            },
            precise_cpu: rng.opt(|rng| PreciseCpu {
                run_time_ns: rng.opt(Rng::u64),
                run_queue_wait_ns: rng.opt(Rng::u64),
                run_rate_logical_processors: rng.opt(Rng::f64),
                cgroup_usage_ns: rng.opt(Rng::u64),
                cgroup_usage_rate_logical_processors: rng.opt(Rng::f64),
            }),
            cgroups: rng.list(|rng| CgroupReport {
                role: rng.pick(&[CgroupRole::Target, CgroupRole::Containing]),
                path: rng.text().into(),
                cpu_version: version(rng),
                memory_version: version(rng),
                pids_version: version(rng),
                cpu_usage_ns: rng.opt(Rng::u64),
                cpu_periods: rng.opt(Rng::u64),
                cpu_throttled_periods: rng.opt(Rng::u64),
                cpu_throttled_usec: rng.opt(Rng::u64),
                cpu_effective_limit_logical_processors: rng.opt(Rng::f64),
                memory_limit_bytes: rng.opt(Rng::u64),
                memory_current_bytes: rng.opt(Rng::u64),
                memory_events: MemoryEventCounts::from_names(|_| rng.opt(Rng::u64)),
                pids_current: rng.opt(Rng::u64),
                pids_max: rng.opt(Rng::u64),
                pids_max_events: rng.opt(Rng::u64),
                pressure: rng.opt(|rng| PressureTotals {
                    cpu_some_usec: rng.opt(Rng::u64),
                    cpu_full_usec: rng.opt(Rng::u64),
                    memory_some_usec: rng.opt(Rng::u64),
                    memory_full_usec: rng.opt(Rng::u64),
                    io_some_usec: rng.opt(Rng::u64),
                    io_full_usec: rng.opt(Rng::u64),
                }),
            }),
            kernel_events: KernelEvents {
                active: rng.chance(),
                reason: rng.opt(|rng| rng.text().into()),
                counting_since: rng.opt(|rng| {
                    DateTime::from_timestamp(i64::from(rng.u32()), rng.u32() % 1_000_000_000)
                        .unwrap_or_default()
                }),
                processes_created: rng.opt(Rng::u64),
                processes_exited: rng.opt(Rng::u64),
                involuntary_switches: rng.opt(Rng::u64),
                run_queue_delay_count: rng.opt(Rng::u64),
                run_queue_delay_total_ns: rng.opt(Rng::u64),
                run_queue_delay_log2_ns: rng.opt(|rng| rng.list(Rng::u64)),
                reclaim_stall_count: rng.opt(Rng::u64),
                reclaim_stall_total_ns: rng.opt(Rng::u64),
                oom_kills: rng.opt(Rng::u64),
                recent_oom_victims: rng.list(|rng| OomVictim {
                    pid: rng.u32(),
                    comm: rng.text().into(),
                    rss_kib: rng.u64(),
                    time_ns: rng.u64(),
                }),
                ring_buffer_drops: rng.opt(Rng::u64),
            },
            sample_ages: SampleAges {
                private_memory_ms: rng.opt(Rng::u64),
                gpu_ms: rng.opt(Rng::u64),
                cgroups_ms: rng.opt(Rng::u64),
                system_wide_ms: rng.opt(Rng::u64),
                filesystems_ms: rng.opt(Rng::u64),
            },
            sampler: rng.opt(|rng| SamplerInfo {
                interval_usec: rng.u64(),
                tick_index: rng.u64(),
                tick_lateness_usec: rng.u64(),
                missed_ticks_total: rng.u64(),
            }),
            unavailable: rng.list(|rng| Unavailable {
                field: Cow::Owned(rng.text()),
                reason: rng.text().into(),
            }),
            cumulative: rng.opt(|rng| Cumulative {
                since: rng.opt(|rng| {
                    DateTime::from_timestamp(i64::from(rng.u32()), rng.u32() % 1_000_000_000)
                        .unwrap_or_default()
                }),
                method: rng.pick(&[
                    CumulativeMethod::ProcStat,
                    CumulativeMethod::CgroupV2,
                    CumulativeMethod::CgroupV1,
                    CumulativeMethod::ProcessTree,
                    CumulativeMethod::Process,
                ]),
                reason: rng.opt(|rng| rng.text().into()),
                cpu_user_ns: rng.opt(Rng::u64),
                cpu_system_ns: rng.opt(Rng::u64),
                storage_read_bytes: rng.opt(Rng::u64),
                storage_write_bytes: rng.opt(Rng::u64),
                syscall_read_bytes: rng.opt(Rng::u64),
                syscall_write_bytes: rng.opt(Rng::u64),
                processes_created: rng.opt(Rng::u64),
                processes_exited: rng.opt(Rng::u64),
                memory_peak_bytes: rng.opt(Rng::u64),
                devices: rng.list(|rng| DeviceIo {
                    device: rng.text().into(),
                    read_bytes: rng.u64(),
                    write_bytes: rng.u64(),
                }),
            }),
            targets: None,
            gpu: rng.opt(Rng::gpu),
            cpu_modes: rng.opt(|rng| {
                rng.list(|rng| crate::snapshot::CpuModeSeconds {
                    cpu: rng.below(64) as u32,
                    user: rng.below(1_000_000) as f64 / 100.0,
                    idle: rng.below(1_000_000) as f64 / 100.0,
                    ..Default::default()
                })
            }),
        },
    }
}

impl Rng {
    fn opt_bool(&mut self) -> Option<bool> {
        self.opt(Rng::chance)
    }

    fn gpu(&mut self) -> GpuExtension {
        GpuExtension {
            devices: self.list(|rng| GpuDeviceReport {
                vendor: Cow::Owned(rng.text()),
                index: rng.opt(Rng::u32),
                uuid: rng.text().into(),
                lost: rng.chance(),
                readings: GpuReadings {
                    power_watts: rng.opt(Rng::f64),
                    power_limit_watts: rng.opt(Rng::f64),
                    energy_joules: rng.opt(Rng::f64),
                    temperature_celsius: rng.opt(Rng::f64),
                    memory_temperature_celsius: rng.opt(Rng::f64),
                    sm_clock_hz: rng.opt(Rng::u64),
                    memory_clock_hz: rng.opt(Rng::u64),
                    graphics_clock_hz: rng.opt(Rng::u64),
                    sm_clock_max_hz: rng.opt(Rng::u64),
                    memory_clock_max_hz: rng.opt(Rng::u64),
                    graphics_clock_max_hz: rng.opt(Rng::u64),
                    ecc_corrected_volatile: rng.opt(Rng::u64),
                    ecc_uncorrected_volatile: rng.opt(Rng::u64),
                    ecc_corrected_aggregate: rng.opt(Rng::u64),
                    ecc_uncorrected_aggregate: rng.opt(Rng::u64),
                    remapped_rows_correctable: rng.opt(Rng::u64),
                    remapped_rows_uncorrectable: rng.opt(Rng::u64),
                    remapping_pending: rng.opt_bool(),
                    remapping_failed: rng.opt_bool(),
                    pcie_tx_bytes_per_second: rng.opt(Rng::u64),
                    pcie_rx_bytes_per_second: rng.opt(Rng::u64),
                    pcie_replays: rng.opt(Rng::u64),
                    encoder_utilization_percent: rng.opt(Rng::f64),
                    decoder_utilization_percent: rng.opt(Rng::f64),
                    mig_enabled: rng.opt_bool(),
                    mig_instances: rng.list(|rng| MigInstanceReport {
                        index: rng.u32(),
                        memory_used_bytes: rng.opt(Rng::u64),
                        memory_total_bytes: rng.opt(Rng::u64),
                    }),
                },
                throttle_reasons: rng.opt(|rng| rng.list(|rng| Cow::Owned(rng.text()))),
                violation_power_seconds: rng.opt(Rng::f64),
                violation_thermal_seconds: rng.opt(Rng::f64),
                violation_board_limit_seconds: rng.opt(Rng::f64),
                violation_reliability_seconds: rng.opt(Rng::f64),
                utilization_percent: rng.opt(Rng::f64),
                xid_errors: rng.list(|rng| XidErrorCount {
                    xid: rng.u64(),
                    count: rng.u64(),
                }),
            }),
            limit_events: self.list(|rng| GpuLimitEvent {
                resource: Cow::Borrowed("gpu"),
                event: Cow::Owned(rng.text()),
                index: rng.opt(Rng::u32),
                uuid: rng.text().into(),
                count: rng.u64(),
                sampled_periods: rng.opt(Rng::u64),
                throttled_seconds: rng.opt(Rng::f64),
            }),
        }
    }
}

#[test]
fn matches_serde_on_randomised_snapshots() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut nulls = 0;
    for round in 0..2000 {
        let snapshot = random_snapshot(&mut rng);
        let bytes = fast(&snapshot);
        nulls += bytes.windows(12).filter(|w| w == b"\"value\":null").count();
        assert_same_bytes(&snapshot, &format!("random snapshot {round}"));
    }
    assert!(
        nulls > 100,
        "the non-finite decimals were not exercised ({nulls})"
    );
}

#[test]
fn enum_names_match_serde() {
    fn check<T: serde::Serialize>(value: T, name: &str) {
        assert_eq!(
            serde_json::to_string(&value).unwrap(),
            format!("\"{name}\"")
        );
    }
    for value in [
        OperatingSystem::Linux,
        OperatingSystem::Macos,
        OperatingSystem::Windows,
        OperatingSystem::Unsupported,
    ] {
        check(value, value.as_str());
    }
    for value in [
        MeasurementScope::Global,
        MeasurementScope::ApplicationProcess,
        MeasurementScope::ProcessTree,
        MeasurementScope::Cgroup,
    ] {
        check(value, value.as_str());
    }
    for value in [
        AcceleratorVendor::Nvidia,
        AcceleratorVendor::Amd,
        AcceleratorVendor::Intel,
        AcceleratorVendor::Apple,
        AcceleratorVendor::Other,
    ] {
        check(value, value.as_str());
    }
    for value in [
        ResourceLimitResource::Cpu,
        ResourceLimitResource::Memory,
        ResourceLimitResource::Processes,
    ] {
        check(value, value.as_str());
    }
    for value in [
        ResourceLimitEventKind::Throttled,
        ResourceLimitEventKind::High,
        ResourceLimitEventKind::Maximum,
        ResourceLimitEventKind::OutOfMemory,
        ResourceLimitEventKind::Terminated,
    ] {
        check(value, value.as_str());
    }
    for value in [CgroupRole::Target, CgroupRole::Containing] {
        check(value, value.as_str());
    }
    for value in [CgroupVersionName::V2, CgroupVersionName::V1] {
        check(value, value.as_str());
    }
    for &unit in MeasurementUnit::ALL {
        check(unit, unit.as_str());
    }
}
