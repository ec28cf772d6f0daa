//! `extensions.gpu`: every device value of the GPU thread's latest sample, the XID errors of the
//! event thread, and the GPU limit events (throttling periods and seconds, XID errors). Entries
//! are rewritten in place, so a steady set of devices allocates nothing per pass.

use std::borrow::Cow;
use std::sync::Arc;

use crate::snapshot::{GpuDeviceReport, GpuExtension, GpuLimitEvent, GpuReadings, XidErrorCount};
use crate::source::gpu::{
    throttle_reason_names, DrmDeviceSample, DrmVendor, GpuDeviceSample, GpuSample,
    GpuThrottleEvent, LostDevice, XidCounts, XidWatcher,
};

use super::super::reasons::Reasons;
use super::{share, slot};

/// The `extensions.unavailable` field of a device value (NVML's value names).
fn value_field(name: &str) -> &'static str {
    macro_rules! fields {
        ($($name:literal),* $(,)?) => {
            match name {
                $($name => concat!("extensions.gpu.devices.", $name),)*
                _ => "extensions.gpu.devices",
            }
        };
    }
    fields!(
        "power_watts",
        "power_limit_watts",
        "energy_joules",
        "temperature_celsius",
        "memory_temperature_celsius",
        "sm_clock_hz",
        "memory_clock_hz",
        "graphics_clock_hz",
        "sm_clock_max_hz",
        "memory_clock_max_hz",
        "graphics_clock_max_hz",
        "throttle_reasons",
        "violation_power_seconds",
        "violation_thermal_seconds",
        "violation_board_limit_seconds",
        "violation_reliability_seconds",
        "ecc_corrected_volatile",
        "ecc_uncorrected_volatile",
        "ecc_corrected_aggregate",
        "ecc_uncorrected_aggregate",
        "remapped_rows",
        "pcie_tx_bytes_per_second",
        "pcie_rx_bytes_per_second",
        "pcie_replays",
        "encoder_utilization_percent",
        "decoder_utilization_percent",
        "mig_enabled",
        "mig_instances",
        "mig_instances.memory_used_bytes",
        "xid_errors",
    )
}

/// Fills `out` from the latest NVML sample, the XID thread and the DRM devices; `None` when
/// none of them has a device. Of a sample that is not `fresh` (its NVML query is blocked) only
/// the devices' identities are kept, with their XID errors (counted by the event thread, which
/// does not wait on that query).
pub(super) fn fill(
    nvml: Option<&GpuSample>,
    fresh: bool,
    xid: Option<Result<&XidWatcher, &String>>,
    drm: &[DrmDeviceSample],
    reasons: &mut Reasons,
    out: &mut Option<GpuExtension>,
) {
    let nvml_devices = nvml.map_or(0, |s| s.devices.len() + s.lost.len());
    if nvml_devices == 0 && drm.is_empty() {
        *out = None;
        return;
    }
    let extension = out.get_or_insert_with(GpuExtension::default);
    let mut devices = 0;
    let mut events = 0;
    if let Some(sample) = nvml {
        let xid_counts = xid_view(sample, xid, reasons);
        for device in &sample.devices {
            let report = slot(
                &mut extension.devices,
                &mut devices,
                GpuDeviceReport::default,
            );
            if !fresh {
                identity_report(device.index, &device.identifier, &xid_counts, report);
                let entry = (&mut extension.limit_events, &mut events);
                xid_event(device.index, &report.uuid, &xid_counts, true, entry);
                continue;
            }
            nvidia_report(device, &xid_counts, report);
            for (name, reason) in &device.values.missing {
                reasons.add(
                    value_field(name),
                    format_args!("{}: {reason}", device.identifier),
                );
            }
            if let Some(error) = &device.process_lists_error {
                reasons.add(
                    "gpu.process_metrics",
                    format_args!(
                        "{}: {error}; a process listed only there has no record",
                        device.identifier
                    ),
                );
            }
            limit_events(
                device,
                &xid_counts,
                &mut extension.limit_events,
                &mut events,
            );
        }
        for lost in &sample.lost {
            let report = slot(
                &mut extension.devices,
                &mut devices,
                GpuDeviceReport::default,
            );
            lost_report(lost, &xid_counts, report, reasons);
            // Its XID errors stay (XID 79 is a device falling off the bus); the event thread
            // cannot watch a device NVML does not open, so no count of 0 is made up for it.
            let entry = (&mut extension.limit_events, &mut events);
            xid_event(lost.index, &report.uuid, &xid_counts, false, entry);
        }
    }
    for device in drm {
        let report = slot(
            &mut extension.devices,
            &mut devices,
            GpuDeviceReport::default,
        );
        drm_report(device, report, reasons);
    }
    extension.devices.truncate(devices);
    extension.limit_events.truncate(events);
}

/// The XID counts for the NVML devices; an error of the watcher's is a reason for
/// `xid_errors`.
fn xid_view(
    sample: &GpuSample,
    xid: Option<Result<&XidWatcher, &String>>,
    reasons: &mut Reasons,
) -> XidView {
    match xid {
        Some(Ok(watcher)) => watcher.with_counts(|counts| {
            if let Some(error) = counts.error.as_deref().filter(|_| sample.error.is_none()) {
                reasons.add(
                    "extensions.gpu.devices.xid_errors",
                    format_args!("NVML events: {error}"),
                );
            }
            XidView::of(counts)
        }),
        Some(Err(error)) => {
            reasons.add("extensions.gpu.devices.xid_errors", format_args!("{error}"));
            XidView::default()
        }
        None => XidView::default(),
    }
}

/// `report` for an NVML device that could not be opened, and why; its XID errors are still
/// those counted.
fn lost_report(
    lost: &LostDevice,
    xid: &XidView,
    report: &mut GpuDeviceReport,
    reasons: &mut Reasons,
) {
    let fallback;
    let uuid = match &lost.identifier {
        Some(identifier) => identifier.as_str(),
        None => {
            fallback = format!("nvidia:{}", lost.index);
            &fallback
        }
    };
    identity_report(lost.index, uuid, xid, report);
    report.lost = true;
    reasons.add(
        "extensions.gpu.devices",
        format_args!("NVML device {} ({uuid}): {}", lost.index, lost.reason),
    );
}

/// `report` for an NVML device known by its index and UUID only: every value `null`, its XID
/// errors those counted.
fn identity_report(index: u32, uuid: &str, xid: &XidView, report: &mut GpuDeviceReport) {
    clear(report);
    report.vendor = Cow::Borrowed("nvidia");
    report.index = Some(index);
    share(&mut report.uuid, uuid);
    report.xid_errors.extend(
        xid.codes(index, uuid)
            .iter()
            .map(|&(xid, count)| XidErrorCount { xid, count }),
    );
}

/// The `xid` limit event of a device known by its index and UUID only, where it had some; for
/// a device the event thread `watched` (one opened, whose query is blocked), as for a device
/// whose values were read ([`limit_events`]): also a count of 0 while the thread listens.
fn xid_event(
    index: u32,
    uuid: &str,
    xid: &XidView,
    watched: bool,
    (list, used): (&mut Vec<GpuLimitEvent>, &mut usize),
) {
    let codes = xid.codes(index, uuid);
    if (watched && xid.listening) || !codes.is_empty() {
        let total = codes.iter().map(|&(_, count)| count).sum();
        let entry = slot(list, used, GpuLimitEvent::default);
        write_event(entry, "xid", index, uuid, total);
        entry.sampled_periods = None;
        entry.throttled_seconds = None;
    }
}

/// `report` for a DRM device (AMD, Intel): its hwmon values, and what DRM cannot give.
fn drm_report(device: &DrmDeviceSample, report: &mut GpuDeviceReport, reasons: &mut Reasons) {
    clear(report);
    report.vendor = Cow::Borrowed(match device.vendor {
        DrmVendor::Amd => "amd",
        DrmVendor::Intel => "intel",
        DrmVendor::Other => "other",
    });
    share(&mut report.uuid, &device.identifier);
    report.utilization_percent = device.utilization_percent;
    let readings = &mut report.readings;
    readings.power_watts = device.hwmon.power_watts;
    readings.energy_joules = device.hwmon.energy_joules;
    readings.temperature_celsius = device.hwmon.temperature_celsius;
    readings.memory_temperature_celsius = device.hwmon.memory_temperature_celsius;
    let id = &device.identifier;
    let hwmon = [
        (
            "extensions.gpu.devices.power_watts",
            device.hwmon.power_watts,
            "power1_average or power1_input",
        ),
        (
            "extensions.gpu.devices.energy_joules",
            device.hwmon.energy_joules,
            "energy1_input",
        ),
        (
            "extensions.gpu.devices.temperature_celsius",
            device.hwmon.temperature_celsius,
            "temp1_input or an edge temperature",
        ),
        (
            "extensions.gpu.devices.memory_temperature_celsius",
            device.hwmon.memory_temperature_celsius,
            "temperature labelled mem",
        ),
    ];
    for (field, value, file) in hwmon {
        if value.is_none() {
            reasons.add(field, format_args!("{id}: no readable hwmon {file}"));
        }
    }
    reasons.add(
        "extensions.gpu.devices",
        format_args!(
            "{id}: DRM sysfs and hwmon have no power limit, clocks, clock-event reasons, \
             violation times, ECC, remapped rows, PCIe, encoder/decoder, MIG or XID values"
        ),
    );
}

/// One device's XID codes and counts: index, UUID, (code, count) pairs.
type XidOfDevice = (u32, String, Vec<(u64, u64)>);

/// The XID counts of the devices, copied out of the watcher's lock (few devices, few codes).
#[derive(Default)]
struct XidView {
    listening: bool,
    devices: Vec<XidOfDevice>,
}

impl XidView {
    fn of(counts: &XidCounts) -> Self {
        Self {
            listening: counts.listening,
            devices: counts
                .devices
                .iter()
                .map(|d| {
                    let codes = d.counts.iter().map(|(&xid, &count)| (xid, count)).collect();
                    (d.index, d.identifier.clone(), codes)
                })
                .collect(),
        }
    }

    /// The XID codes and counts of a device (matched by index and UUID).
    fn of_device(&self, device: &GpuDeviceSample) -> &[(u64, u64)] {
        self.codes(device.index, &device.identifier)
    }

    /// The XID codes and counts of the device at `index` with `identifier`.
    fn codes(&self, index: u32, identifier: &str) -> &[(u64, u64)] {
        self.devices
            .iter()
            .find(|(at, id, _)| *at == index && id == identifier)
            .map_or(&[], |(_, _, codes)| codes.as_slice())
    }
}

/// Every value `null`, every list empty (a lost or DRM device).
fn clear(report: &mut GpuDeviceReport) {
    let uuid = std::mem::replace(&mut report.uuid, Arc::from(""));
    let mut throttle = report.throttle_reasons.take();
    let mut mig = std::mem::take(&mut report.readings.mig_instances);
    let mut xid = std::mem::take(&mut report.xid_errors);
    mig.clear();
    xid.clear();
    if let Some(list) = &mut throttle {
        list.clear();
    }
    *report = GpuDeviceReport {
        uuid,
        readings: GpuReadings {
            mig_instances: mig,
            ..GpuReadings::default()
        },
        xid_errors: xid,
        ..GpuDeviceReport::default()
    };
}

fn nvidia_report(device: &GpuDeviceSample, xid: &XidView, report: &mut GpuDeviceReport) {
    let v = &device.values;
    let seconds = |ns: Option<u64>| ns.map(|ns| ns as f64 / 1e9);
    report.vendor = Cow::Borrowed("nvidia");
    report.index = Some(device.index);
    share(&mut report.uuid, &device.identifier);
    report.lost = false;
    report.readings.clone_from(&v.readings);
    match v.throttle_reasons {
        Some(mask) => {
            let list = report.throttle_reasons.get_or_insert_with(Vec::new);
            list.clear();
            list.extend(throttle_reason_names(mask).map(Cow::Borrowed));
        }
        None => report.throttle_reasons = None,
    }
    report.violation_power_seconds = seconds(v.violation_power_ns);
    report.violation_thermal_seconds = seconds(v.violation_thermal_ns);
    report.violation_board_limit_seconds = seconds(v.violation_board_limit_ns);
    report.violation_reliability_seconds = seconds(v.violation_reliability_ns);
    report.utilization_percent = device.utilization_percent;
    report.xid_errors.clear();
    report.xid_errors.extend(
        xid.of_device(device)
            .iter()
            .map(|&(xid, count)| XidErrorCount { xid, count }),
    );
}

/// The device's throttling events (when its reasons could be read) and its XID errors (when
/// the event thread listens or has counted some).
fn limit_events(
    device: &GpuDeviceSample,
    xid: &XidView,
    list: &mut Vec<GpuLimitEvent>,
    used: &mut usize,
) {
    let counts = &device.throttle;
    if counts.sampled_periods > 0 {
        for (event, active) in GpuThrottleEvent::ALL.into_iter().zip(counts.active_periods) {
            let throttled_ns = match event {
                GpuThrottleEvent::PowerCap => counts.power_violation_ns,
                GpuThrottleEvent::Thermal => counts.thermal_violation_ns,
                GpuThrottleEvent::HwSlowdown => None,
            };
            let entry = slot(list, used, GpuLimitEvent::default);
            write_event(
                entry,
                event.as_str(),
                device.index,
                &device.identifier,
                active,
            );
            entry.sampled_periods = Some(counts.sampled_periods);
            entry.throttled_seconds = throttled_ns.map(|ns| ns as f64 / 1e9);
        }
    }
    let codes = xid.of_device(device);
    if xid.listening || !codes.is_empty() {
        let total = codes.iter().map(|&(_, count)| count).sum();
        let entry = slot(list, used, GpuLimitEvent::default);
        write_event(entry, "xid", device.index, &device.identifier, total);
        entry.sampled_periods = None;
        entry.throttled_seconds = None;
    }
}

fn write_event(entry: &mut GpuLimitEvent, event: &'static str, index: u32, uuid: &str, count: u64) {
    entry.resource = Cow::Borrowed("gpu");
    entry.event = Cow::Borrowed(event);
    entry.index = Some(index);
    share(&mut entry.uuid, uuid);
    entry.count = count;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xid_events(xid: &XidView, watched: bool) -> Vec<(u32, String, u64)> {
        let (mut list, mut used) = (Vec::new(), 0);
        xid_event(1, "GPU-1", xid, watched, (&mut list, &mut used));
        let events = list[..used].iter();
        events
            .map(|e| (e.index.unwrap(), e.uuid.to_string(), e.count))
            .collect()
    }

    #[test]
    fn only_a_watched_device_has_an_xid_count_of_zero() {
        let quiet = XidView {
            listening: true,
            devices: Vec::new(),
        };
        // A blocked query's device is watched by the event thread: 0 errors so far.
        assert_eq!(xid_events(&quiet, true), [(1, "GPU-1".into(), 0)]);
        // A device NVML does not open is not: no count is made up.
        assert_eq!(xid_events(&quiet, false), []);
        let not_listening = XidView {
            listening: false,
            devices: Vec::new(),
        };
        assert_eq!(xid_events(&not_listening, true), []);
        // Errors counted before it was lost stay either way.
        let counted = XidView {
            listening: true,
            devices: vec![(1, "GPU-1".into(), vec![(79, 1), (48, 2)])],
        };
        assert_eq!(xid_events(&counted, false), [(1, "GPU-1".into(), 3)]);
    }
}
