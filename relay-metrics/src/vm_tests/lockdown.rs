//! The fallbacks under kernel lockdown `confidentiality` (Debian's 6.1 kernel booted with
//! `lockdown=confidentiality` by `cargo xtask vm-test --lockdown`; the other VM runs skip this
//! module): the task iterator is refused (procfs serves, with the reason), tracing is disabled
//! (kernel events off, with the reason), and the snapshot is otherwise complete. Both with
//! securityfs mounted (the lockdown mode is readable) and without it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use nix::mount::{mount, umount, MsFlags};

use crate::config::{GpuConfig, ScopeSetting};
use crate::units::MeasurementValue;
use crate::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};

const SECURITYFS: &str = "/sys/kernel/security";

/// The second of two global snapshots 200 ms apart, kernel events on, GPU off.
fn take_snapshot() -> Arc<ResourceMetricsSnapshot> {
    let config = ResourceMetricsConfig {
        measurement_scope: ScopeSetting::Global,
        gpu: GpuConfig {
            enabled: false,
            ..GpuConfig::default()
        },
        ..ResourceMetricsConfig::default()
    };
    assert!(
        config.extensions.kernel_events,
        "kernel events are on by default"
    );
    let mut collector = Collector::new(config).expect("a global collector");
    collector.collect();
    std::thread::sleep(Duration::from_millis(200));
    collector.collect()
}

/// Everything but kernel events is there, per-process values from procfs for every process.
fn assert_complete_but_kernel_events(snapshot: &ResourceMetricsSnapshot, text: &str) {
    let events = &snapshot.extensions.kernel_events;
    assert!(!events.active, "{text}");
    assert_eq!(events.processes_created, None, "{text}");
    assert_eq!(events.run_queue_delay_count, None, "{text}");
    assert_eq!(
        snapshot.extensions.collector.process_source, "procfs",
        "{text}"
    );
    let unavailable: Vec<&str> = snapshot
        .extensions
        .unavailable
        .iter()
        .map(|u| &*u.field)
        .collect();
    assert_eq!(unavailable, ["extensions.kernel_events"], "{text}");
    let positive = |value: Option<MeasurementValue>, what: &str| match value {
        Some(value) => assert!(value.as_f64() > 0.0, "{what} is {value:?}\n{text}"),
        None => panic!("{what} is missing\n{text}"),
    };
    let sampling = snapshot
        .process_sampling
        .as_ref()
        .expect("process sampling");
    assert!(sampling.visible_processes > 0, "{text}");
    assert_eq!(
        sampling.sampled_processes, sampling.visible_processes,
        "{text}"
    );
    let process = snapshot.process.as_ref().expect("process category");
    for (value, what) in [
        (&process.active_count, "process.active_count"),
        (&process.thread_count, "process.thread_count"),
        (
            &process.open_file_descriptor_count,
            "process.open_file_descriptor_count",
        ),
    ] {
        positive(value.as_ref().map(|m| m.value), what);
    }
    let memory = snapshot.memory.as_ref().expect("memory category");
    positive(
        memory.system_total.as_ref().map(|m| m.value),
        "memory.system_total",
    );
    let cpu = snapshot.cpu.as_ref().expect("cpu category");
    positive(cpu.total_time.as_ref().map(|m| m.value), "cpu.total_time");
    assert!(
        cpu.consumption_rate.is_some(),
        "cpu.consumption_rate\n{text}"
    );
    assert!(snapshot.extensions.precise_cpu.is_some(), "{text}");
}

/// Mounts securityfs again when dropped.
struct RemountSecurityfs;

impl Drop for RemountSecurityfs {
    fn drop(&mut self) {
        let none: Option<&str> = None;
        if let Err(error) = mount(
            Some("none"),
            SECURITYFS,
            Some("securityfs"),
            MsFlags::empty(),
            none,
        ) {
            eprintln!("remounting {SECURITYFS}: {error}");
        }
    }
}

/// A snapshot complete but for kernel events, whose reasons for procfs and for the kernel
/// events being off pass the two checks.
fn assert_falls_back(
    process_source_reason: impl FnOnce(&str) -> bool,
    kernel_events_reason: impl FnOnce(&str) -> bool,
) {
    let snapshot = take_snapshot();
    let text = serde_json::to_string_pretty(&*snapshot).unwrap_or_default();
    assert_complete_but_kernel_events(&snapshot, &text);
    let extensions = &snapshot.extensions;
    let reason = extensions.collector.process_source_reason.as_deref();
    assert!(reason.is_some_and(process_source_reason), "{text}");
    let reason = extensions.kernel_events.reason.as_deref();
    assert!(reason.is_some_and(kernel_events_reason), "{text}");
}

#[test]
#[ignore = "vm: needs a kernel booted with lockdown=confidentiality: cargo xtask vm-test --lockdown runs it"]
fn a_snapshot_under_lockdown_falls_back_with_its_reasons_and_is_complete_in_vm() {
    let lockdown = std::fs::read_to_string(Path::new(SECURITYFS).join("lockdown"))
        .expect("reading the lockdown mode (securityfs is mounted by the VM's init)");
    assert!(
        lockdown.contains("[confidentiality]"),
        "not booted with lockdown=confidentiality: {lockdown:?}"
    );
    assert_falls_back(
        |reason| reason.contains("lockdown is 'confidentiality'"),
        |reason| {
            reason
                == "tracing is disabled by the kernel (kernel lockdown is 'confidentiality'): the \
                    tracepoints' ids and record formats are tracefs files, so no program can be \
                    attached"
        },
    );

    // Without securityfs the mode is unknown: what the kernel refuses gives the reasons.
    umount(SECURITYFS).expect("unmounting securityfs");
    let _remount = RemountSecurityfs;
    assert_falls_back(
        |reason| reason.starts_with("loading the task iterator"),
        |reason| {
            reason.starts_with(
                "tracing is disabled by the kernel (tracefs is mounted at /sys/kernel/tracing \
                 but has no events",
            )
        },
    );
}
