//! `extensions.gpu`.

use super::Writer;
use crate::snapshot::{
    GpuDeviceReport, GpuExtension, GpuLimitEvent, GpuReadings, MigInstanceReport, XidErrorCount,
};

pub(super) fn write_gpu(w: &mut Writer<'_>, gpu: &GpuExtension) {
    let GpuExtension {
        devices,
        limit_events,
    } = gpu;
    w.first("devices").list(devices, write_device);
    w.key("limit_events").list(limit_events, write_limit_event);
    w.close();
}

fn opt_bool(w: &mut Writer<'_>, value: Option<bool>) {
    w.option(&value, |w, value| w.bool(*value));
}

fn write_device(w: &mut Writer<'_>, device: &GpuDeviceReport) {
    let GpuDeviceReport {
        vendor,
        index,
        uuid,
        lost,
        throttle_reasons,
        violation_power_seconds,
        violation_thermal_seconds,
        violation_board_limit_seconds,
        violation_reliability_seconds,
        utilization_percent,
        xid_errors,
        readings,
    } = device;
    w.first("vendor").string(vendor);
    w.key("index").opt_u32(*index);
    w.key("uuid").string(uuid);
    w.key("lost").bool(*lost);
    w.key("throttle_reasons")
        .option(throttle_reasons, |w, reasons| {
            w.list(reasons, |w, reason| w.string(reason));
        });
    for (key, value) in [
        ("violation_power_seconds", violation_power_seconds),
        ("violation_thermal_seconds", violation_thermal_seconds),
        (
            "violation_board_limit_seconds",
            violation_board_limit_seconds,
        ),
        (
            "violation_reliability_seconds",
            violation_reliability_seconds,
        ),
        ("utilization_percent", utilization_percent),
    ] {
        w.key(key).opt_f64(*value);
    }
    w.key("xid_errors").list(xid_errors, |w, entry| {
        let XidErrorCount { xid, count } = entry;
        w.first("xid").u64(*xid);
        w.key("count").u64(*count);
        w.close();
    });
    write_readings(w, readings);
    w.close();
}

/// The NVML readings of a device, as keys of the device's object (not an object of their own).
fn write_readings(w: &mut Writer<'_>, readings: &GpuReadings) {
    let GpuReadings {
        power_watts,
        power_limit_watts,
        energy_joules,
        temperature_celsius,
        memory_temperature_celsius,
        sm_clock_hz,
        memory_clock_hz,
        graphics_clock_hz,
        sm_clock_max_hz,
        memory_clock_max_hz,
        graphics_clock_max_hz,
        ecc_corrected_volatile,
        ecc_uncorrected_volatile,
        ecc_corrected_aggregate,
        ecc_uncorrected_aggregate,
        remapped_rows_correctable,
        remapped_rows_uncorrectable,
        remapping_pending,
        remapping_failed,
        pcie_tx_bytes_per_second,
        pcie_rx_bytes_per_second,
        pcie_replays,
        encoder_utilization_percent,
        decoder_utilization_percent,
        mig_enabled,
        mig_instances,
    } = readings;
    for (key, value) in [
        ("power_watts", power_watts),
        ("power_limit_watts", power_limit_watts),
        ("energy_joules", energy_joules),
        ("temperature_celsius", temperature_celsius),
        ("memory_temperature_celsius", memory_temperature_celsius),
    ] {
        w.key(key).opt_f64(*value);
    }
    for (key, value) in [
        ("sm_clock_hz", sm_clock_hz),
        ("memory_clock_hz", memory_clock_hz),
        ("graphics_clock_hz", graphics_clock_hz),
        ("sm_clock_max_hz", sm_clock_max_hz),
        ("memory_clock_max_hz", memory_clock_max_hz),
        ("graphics_clock_max_hz", graphics_clock_max_hz),
        ("ecc_corrected_volatile", ecc_corrected_volatile),
        ("ecc_uncorrected_volatile", ecc_uncorrected_volatile),
        ("ecc_corrected_aggregate", ecc_corrected_aggregate),
        ("ecc_uncorrected_aggregate", ecc_uncorrected_aggregate),
        ("remapped_rows_correctable", remapped_rows_correctable),
        ("remapped_rows_uncorrectable", remapped_rows_uncorrectable),
    ] {
        w.key(key).opt_u64(*value);
    }
    w.key("remapping_pending");
    opt_bool(w, *remapping_pending);
    w.key("remapping_failed");
    opt_bool(w, *remapping_failed);
    w.key("pcie_tx_bytes_per_second")
        .opt_u64(*pcie_tx_bytes_per_second);
    w.key("pcie_rx_bytes_per_second")
        .opt_u64(*pcie_rx_bytes_per_second);
    w.key("pcie_replays").opt_u64(*pcie_replays);
    w.key("encoder_utilization_percent")
        .opt_f64(*encoder_utilization_percent);
    w.key("decoder_utilization_percent")
        .opt_f64(*decoder_utilization_percent);
    w.key("mig_enabled");
    opt_bool(w, *mig_enabled);
    w.key("mig_instances")
        .list(mig_instances, write_mig_instance);
}

fn write_mig_instance(w: &mut Writer<'_>, instance: &MigInstanceReport) {
    let MigInstanceReport {
        index,
        memory_used_bytes,
        memory_total_bytes,
    } = instance;
    w.first("index").u32(*index);
    w.key("memory_used_bytes").opt_u64(*memory_used_bytes);
    w.key("memory_total_bytes").opt_u64(*memory_total_bytes);
    w.close();
}

fn write_limit_event(w: &mut Writer<'_>, event: &GpuLimitEvent) {
    let GpuLimitEvent {
        resource,
        event,
        index,
        uuid,
        count,
        sampled_periods,
        throttled_seconds,
    } = event;
    w.first("resource").string(resource);
    w.key("event").string(event);
    w.key("index").opt_u32(*index);
    w.key("uuid").string(uuid);
    w.key("count").u64(*count);
    w.key("sampled_periods").opt_u64(*sampled_periods);
    w.key("throttled_seconds").opt_f64(*throttled_seconds);
    w.close();
}
