//! Device values over time from a scenario file: a power-capped phase, a thermal slowdown, an
//! ECC error, XID 79, and a device that falls off the bus and returns. The clock is a file the
//! test rewrites, so each phase is read exactly once, whatever the machine's load.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use relay_metrics::internals::gpu::{
    throttle_reason_names, GpuDeviceSample, NvmlOptions, NvmlSample, XidWatcher,
};

use relay_metrics::snapshot::{GpuReadings, MigInstanceReport};

use super::{open_with, Fake, TestDir, Variant, UUID_0, UUID_1};

const GIB: u64 = 1024 * 1024 * 1024;

pub(super) const SCENARIO: &str = "\
# power-capped phase: power at the limit, sw_power_cap
1000 0 power_mw 300000
1000 0 throttle 0x4
# thermal slowdown: sw and hw thermal, 95 °C, violation times grow
2000 0 throttle 0x60
2000 0 temp_gpu 95
2000 0 violation_power_ns 1500000000
2000 0 violation_thermal_ns 700000000
# back to idle; one corrected ECC error, XID 79, energy grows
3000 0 throttle 0x1
3000 0 ecc_corrected_volatile 1
3000 0 energy_mj 1300000
3000 0 xid 79
# device 1 reports XID 79 (fallen off the bus), then is lost, then returns
3500 1 xid 79
4000 1 lost
5000 1 back
";

/// A fake whose clock is a file, and that file.
struct Scripted {
    fake: Fake,
    clock: PathBuf,
    _files: TestDir,
}

impl Scripted {
    fn new(label: &str, script: &str) -> Self {
        Self::with_options(label, script, NvmlOptions::default())
    }

    fn with_options(label: &str, script: &str, options: NvmlOptions) -> Self {
        let files = TestDir::new(label);
        let script_path = files.0.join("scenario.txt");
        std::fs::write(&script_path, script).unwrap();
        let clock = files.0.join("clock");
        std::fs::write(&clock, "0").unwrap();
        let (fake, loaded) = open_with(
            Variant::Full,
            "two_devices",
            options,
            &[
                ("FAKE_NVML_SCRIPT", script_path.as_path()),
                ("FAKE_NVML_CLOCK_FILE", clock.as_path()),
            ],
        );
        loaded.unwrap();
        Self {
            fake,
            clock,
            _files: files,
        }
    }

    /// Moves the fake's clock to `ms` and queries every device.
    fn sample_at(&mut self, ms: u64) -> NvmlSample {
        set_clock(&self.clock, ms);
        let started = Instant::now();
        let sample = self.fake.source.sample(&mut |_| true).unwrap();
        // Never blocks: a lost device is one failed call, not a wait.
        assert!(started.elapsed() < Duration::from_secs(5));
        sample
    }
}

pub(super) fn set_clock(path: &Path, ms: u64) {
    // Written whole and renamed, so the fake never reads a half-written number.
    let temporary = path.with_extension("new");
    std::fs::write(&temporary, ms.to_string()).unwrap();
    std::fs::rename(&temporary, path).unwrap();
}

fn names(device: &GpuDeviceSample) -> Vec<&'static str> {
    throttle_reason_names(device.values.throttle_reasons.unwrap()).collect()
}

fn missing(device: &GpuDeviceSample) -> Vec<&'static str> {
    device
        .values
        .missing
        .iter()
        .map(|(name, _)| *name)
        .collect()
}

#[test]
fn every_value_is_read_and_unsupported_ones_are_none_with_their_own_reason() {
    let mut scripted = Scripted::new("values", "");
    let sample = scripted.sample_at(0);
    let [zero, one] = &sample.devices[..] else {
        panic!("two devices expected: {sample:?}");
    };
    let v = &zero.values;
    assert_eq!(
        v.readings,
        GpuReadings {
            power_watts: Some(100.0),
            power_limit_watts: Some(300.0),
            energy_joules: Some(1000.0),
            temperature_celsius: Some(45.0),
            memory_temperature_celsius: Some(50.0),
            sm_clock_hz: Some(1_410_000_000),
            memory_clock_hz: Some(2_619_000_000),
            graphics_clock_hz: Some(1_410_000_000),
            sm_clock_max_hz: Some(1_980_000_000),
            memory_clock_max_hz: Some(2_619_000_000),
            graphics_clock_max_hz: Some(1_980_000_000),
            ecc_corrected_volatile: Some(0),
            ecc_uncorrected_volatile: Some(0),
            ecc_corrected_aggregate: Some(2),
            ecc_uncorrected_aggregate: Some(0),
            remapped_rows_correctable: Some(0),
            remapped_rows_uncorrectable: Some(0),
            remapping_pending: Some(false),
            remapping_failed: Some(false),
            pcie_tx_bytes_per_second: Some(1_000 * 1024),
            pcie_rx_bytes_per_second: Some(2_000 * 1024),
            pcie_replays: Some(0),
            encoder_utilization_percent: Some(0.0),
            decoder_utilization_percent: Some(0.0),
            mig_enabled: Some(false),
            mig_instances: Vec::new(),
        }
    );
    assert_eq!(names(zero), ["gpu_idle"]);
    assert_eq!(v.violation_power_ns, Some(0));
    assert_eq!(v.violation_thermal_ns, Some(0));
    assert_eq!(v.violation_board_limit_ns, Some(0));
    assert_eq!(v.violation_reliability_ns, Some(0));
    assert_eq!(missing(zero), Vec::<&str>::new());

    // Device 1 lacks some sensors: each value is None with its own reason, the rest is read.
    let v = &one.values;
    let r = &v.readings;
    assert_eq!(r.power_watts, Some(200.0));
    assert_eq!(r.temperature_celsius, Some(50.0));
    assert_eq!(r.memory_temperature_celsius, None);
    assert_eq!(r.ecc_corrected_volatile, None);
    assert_eq!(r.remapped_rows_correctable, None);
    assert_eq!(r.remapping_pending, None);
    assert_eq!(r.encoder_utilization_percent, None);
    assert_eq!(r.decoder_utilization_percent, Some(0.0));
    assert_eq!(
        missing(one),
        [
            "memory_temperature_celsius",
            "encoder_utilization_percent",
            "ecc_corrected_volatile",
            "ecc_uncorrected_volatile",
            "ecc_corrected_aggregate",
            "ecc_uncorrected_aggregate",
            "remapped_rows",
        ]
    );
    for (name, reason) in &v.missing {
        assert!(
            reason.contains("not available on the target device"),
            "{name}: {reason}"
        );
    }
    // MIG mode with two instances: 1 GiB and 2 GiB used of 8 GiB each.
    assert_eq!(r.mig_enabled, Some(true));
    assert_eq!(
        r.mig_instances,
        [
            MigInstanceReport {
                index: 0,
                memory_used_bytes: Some(GIB),
                memory_total_bytes: Some(8 * GIB),
            },
            MigInstanceReport {
                index: 1,
                memory_used_bytes: Some(2 * GIB),
                memory_total_bytes: Some(8 * GIB),
            },
        ]
    );
}

#[test]
fn the_scenario_phases_give_values_throttle_counts_and_a_lost_device_that_returns() {
    let mut scripted = Scripted::new("phases", SCENARIO);
    let idle = scripted.sample_at(0);
    assert_eq!(idle.devices[0].throttle.sampled_periods, 1);
    assert_eq!(idle.devices[0].throttle.active_periods, [0, 0, 0]);

    let capped = scripted.sample_at(1000);
    let zero = &capped.devices[0];
    assert_eq!(zero.values.readings.power_watts, Some(300.0));
    assert_eq!(names(zero), ["sw_power_cap"]);
    assert_eq!(zero.throttle.active_periods, [1, 0, 0]);

    let hot = scripted.sample_at(2000);
    let zero = &hot.devices[0];
    assert_eq!(zero.values.readings.temperature_celsius, Some(95.0));
    assert_eq!(names(zero), ["sw_thermal_slowdown", "hw_thermal_slowdown"]);
    // hw_thermal_slowdown is a hardware slowdown too.
    assert_eq!(zero.throttle.active_periods, [1, 1, 1]);
    assert_eq!(zero.throttle.sampled_periods, 3);
    assert_eq!(zero.throttle.power_violation_ns, Some(1_500_000_000));
    assert_eq!(zero.throttle.thermal_violation_ns, Some(700_000_000));

    let after = scripted.sample_at(3000);
    let zero = &after.devices[0];
    assert_eq!(names(zero), ["gpu_idle"]);
    assert_eq!(zero.values.readings.ecc_corrected_volatile, Some(1));
    assert_eq!(zero.values.readings.energy_joules, Some(1300.0));
    assert_eq!(zero.throttle.active_periods, [1, 1, 1]);
    assert_eq!(zero.throttle.sampled_periods, 4);
    assert!(after.lost.is_empty());

    let lost = scripted.sample_at(4000);
    assert_eq!(lost.devices.len(), 1, "{lost:?}");
    assert_eq!(lost.devices[0].identifier, UUID_0);
    let [gone] = &lost.lost[..] else {
        panic!("one lost device expected: {lost:?}");
    };
    assert_eq!(gone.index, 1);
    assert_eq!(gone.identifier.as_deref(), Some(UUID_1));
    assert!(gone.reason.contains("fell off the bus"), "{}", gone.reason);
    // Still named by its identity while it stays lost (it was forgotten after one query).
    let still = scripted.sample_at(4500);
    let [gone] = &still.lost[..] else {
        panic!("one lost device expected: {still:?}");
    };
    assert_eq!(gone.identifier.as_deref(), Some(UUID_1));

    let back = scripted.sample_at(5000);
    assert!(back.lost.is_empty());
    assert_eq!(back.devices.len(), 2);
    assert_eq!(back.devices[1].identifier, UUID_1);
    assert_eq!(back.devices[1].values.readings.power_watts, Some(200.0));
    // A returning device starts a new count.
    assert_eq!(back.devices[1].throttle.sampled_periods, 1);

    // A device not selected is not reported when it is lost either.
    let mut only_zero = Scripted::with_options(
        "lost-unselected",
        SCENARIO,
        NvmlOptions {
            devices: vec!["0".into()],
            ..NvmlOptions::default()
        },
    );
    only_zero.sample_at(3000);
    let lost = only_zero.sample_at(4000);
    assert!(lost.lost.is_empty(), "{lost:?}");
}

#[test]
fn xid_events_are_counted_per_code_by_the_watcher_thread() {
    let scripted = Scripted::new("xid", SCENARIO);
    let watcher = XidWatcher::spawn(NvmlOptions {
        library: Some(scripted.fake.library.clone()),
        ..NvmlOptions::default()
    })
    .unwrap();
    // Registered and listening before the event is due.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !watcher.counts().listening {
        assert!(Instant::now() < deadline, "{:?}", watcher.counts());
        std::thread::sleep(Duration::from_millis(5));
    }
    set_clock(&scripted.clock, 2999);
    std::thread::sleep(Duration::from_millis(50));
    assert!(watcher.counts().devices.is_empty(), "{watcher:?}");
    set_clock(&scripted.clock, 3000);
    let counts = loop {
        let counts = watcher.counts();
        if !counts.devices.is_empty() {
            break counts;
        }
        assert!(Instant::now() < deadline, "{counts:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!(counts.error, None);
    assert_eq!(counts.devices.len(), 1);
    assert_eq!(counts.devices[0].index, 0);
    assert_eq!(counts.devices[0].identifier, UUID_0);
    assert_eq!(counts.devices[0].counts.get(&79), Some(&1));
    drop(watcher);
}

#[test]
fn xid_events_are_seen_within_100_ms_of_being_raised() {
    // Real time: the fake raises each event at its time after nvmlInit_v2, which happens after
    // `before_init`; the watcher stamps its arrival.
    let files = TestDir::new("xid-latency");
    let script = files.0.join("scenario.txt");
    std::fs::write(&script, "500 0 xid 79\n1000 1 xid 48\n").unwrap();
    super::built_library(Variant::Full);
    let (fake, loaded) = open_with(
        Variant::Full,
        "two_devices",
        NvmlOptions::default(),
        &[("FAKE_NVML_SCRIPT", script.as_path())],
    );
    loaded.unwrap();
    // Not before `open_with`: another test may hold the environment lock meanwhile (the
    // big-host test does for seconds), which is no latency of the watcher.
    let before_init = fake.before_init;
    let watcher = XidWatcher::spawn(NvmlOptions {
        library: Some(fake.library.clone()),
        ..NvmlOptions::default()
    })
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let counts = loop {
        let counts = watcher.counts();
        if counts.devices.len() == 2 {
            break counts;
        }
        assert!(Instant::now() < deadline, "{counts:?}");
        std::thread::sleep(Duration::from_millis(10));
    };
    for (device, raised_ms, xid) in [(0, 500, 79), (1, 1000, 48)] {
        let seen = &counts.devices[device];
        assert_eq!(seen.counts.get(&xid), Some(&1));
        let raised = before_init + Duration::from_millis(raised_ms);
        let latency = seen
            .last_received
            .unwrap()
            .saturating_duration_since(raised);
        eprintln!("XID {xid}: seen at most {latency:?} after it was raised");
        assert!(
            latency < Duration::from_millis(100),
            "XID {xid}: {latency:?}"
        );
    }
    drop(watcher);
    drop(fake);
}
