//! The `relay_metrics_gpu_*` families of `extensions.gpu`: power, energy, temperatures, clocks,
//! clock-event reasons, violation times, XID and ECC errors, row remapping, PCIe, encoder and
//! decoder, MIG, and the throttled periods of the GPU limit events. Every series carries
//! `device` (the NVML index, or the PCI address of a DRM device) and `uuid` (the NVML UUID, or
//! the PCI address). Counters are the driver's own (since it loaded: energy, violation times,
//! volatile ECC, PCIe replays) or the collector's (since it started: XID errors, throttled
//! periods); a `null` value is not exported.

use super::metrics::{Family, Kind, Label, Number, Sink, Unit};
use crate::snapshot::{GpuDeviceReport, GpuExtension};
use crate::source::gpu::THROTTLE_REASONS;

/// Most labels a series has: scope, device, uuid and two of its family.
const MAX_LABELS: usize = 5;

const POWER: Family = Family::relay_metrics(
    "relay_metrics_gpu_power_watts",
    Kind::Gauge,
    Unit::Watts,
    "GPU power draw.",
);
const POWER_LIMIT: Family = Family::relay_metrics(
    "relay_metrics_gpu_power_limit_watts",
    Kind::Gauge,
    Unit::Watts,
    "Enforced GPU power limit.",
);
const ENERGY: Family = Family::relay_metrics(
    "relay_metrics_gpu_energy_joules_total",
    Kind::Counter,
    Unit::Joules,
    "GPU energy since the driver loaded.",
);
const TEMPERATURE: Family = Family::relay_metrics(
    "relay_metrics_gpu_temperature_celsius",
    Kind::Gauge,
    Unit::Celsius,
    "GPU temperature by sensor (gpu, memory).",
);
const CLOCK: Family = Family::relay_metrics(
    "relay_metrics_gpu_clock_hertz",
    Kind::Gauge,
    Unit::Hertz,
    "GPU clock by domain (sm, memory, graphics).",
);
const CLOCK_MAX: Family = Family::relay_metrics(
    "relay_metrics_gpu_clock_max_hertz",
    Kind::Gauge,
    Unit::Hertz,
    "Maximum GPU clock by domain (sm, memory, graphics).",
);
const THROTTLE_ACTIVE: Family = Family::relay_metrics(
    "relay_metrics_gpu_throttle_active",
    Kind::Gauge,
    Unit::Count,
    "1 when the clock-event (throttle) reason is active, else 0.",
);
const THROTTLED_SECONDS: Family = Family::relay_metrics(
    "relay_metrics_gpu_throttled_seconds_total",
    Kind::Counter,
    Unit::Seconds,
    "Time clocks were held below the requested ones, by reason (power, thermal, board_limit, reliability), since the driver loaded.",
);
const THROTTLE_PERIODS: Family = Family::relay_metrics(
    "relay_metrics_gpu_throttle_periods_total",
    Kind::Counter,
    Unit::Count,
    "GPU sampling periods with a limit event active (power_cap, thermal, hw_slowdown), since the collector started.",
);
const XID: Family = Family::relay_metrics(
    "relay_metrics_gpu_xid_errors_total",
    Kind::Counter,
    Unit::Count,
    "XID errors received through NVML events, by code, since the collector started.",
);
const ECC: Family = Family::relay_metrics(
    "relay_metrics_gpu_ecc_errors_total",
    Kind::Counter,
    Unit::Count,
    "ECC errors by type (corrected, uncorrected) and counter (volatile: since the driver loaded; aggregate: the device's life).",
);
const REMAPPED_ROWS: Family = Family::relay_metrics(
    "relay_metrics_gpu_remapped_rows",
    Kind::Gauge,
    Unit::Count,
    "Memory rows remapped, by cause (correctable, uncorrectable).",
);
const REMAPPING: Family = Family::relay_metrics(
    "relay_metrics_gpu_row_remapping_state",
    Kind::Gauge,
    Unit::Count,
    "1 when a row remapping is pending or has failed (state), else 0.",
);
const PCIE_THROUGHPUT: Family = Family::relay_metrics(
    "relay_metrics_gpu_pcie_bytes_per_second",
    Kind::Gauge,
    Unit::BytesPerSecond,
    "PCIe throughput by direction (tx, rx), sampled by the driver over 20 ms.",
);
const PCIE_REPLAYS: Family = Family::relay_metrics(
    "relay_metrics_gpu_pcie_replays_total",
    Kind::Counter,
    Unit::Count,
    "PCIe replays since the driver loaded.",
);
const CODEC: Family = Family::relay_metrics(
    "relay_metrics_gpu_codec_utilization_ratio",
    Kind::Gauge,
    Unit::Ratio,
    "Video encoder and decoder utilisation (0-1), by codec.",
);
const MIG: Family = Family::relay_metrics(
    "relay_metrics_gpu_mig_enabled",
    Kind::Gauge,
    Unit::Count,
    "1 when MIG mode is on, else 0.",
);
const MIG_MEMORY: Family = Family::relay_metrics(
    "relay_metrics_gpu_mig_instance_memory_used_bytes",
    Kind::Gauge,
    Unit::Bytes,
    "Memory in use per MIG instance.",
);

type Emit<'e> = dyn FnMut(&[(&'static str, Label<'_>)], f64) + 'e;

/// One family over every device: `points` emits each of a device's series with its own
/// labels; the family is announced before its first finite value only.
fn emit_family<S: Sink>(
    sink: &mut S,
    scope: &str,
    family: &Family,
    gpu: &GpuExtension,
    mut points: impl FnMut(&GpuDeviceReport, &mut Emit<'_>),
) {
    let mut started = false;
    for device in &gpu.devices {
        let device_label = match device.index {
            Some(index) => Label::Int(u64::from(index)),
            None => Label::Str(&device.uuid),
        };
        points(device, &mut |extra, value| {
            if !value.is_finite() {
                return;
            }
            if !started {
                started = true;
                sink.begin(family);
            }
            let mut labels = [("", Label::Int(0)); MAX_LABELS];
            labels[0] = ("scope", Label::Str(scope));
            labels[1] = ("device", device_label);
            labels[2] = ("uuid", Label::Str(&device.uuid));
            let mut count = 3;
            for &label in extra {
                if count < MAX_LABELS {
                    labels[count] = label;
                    count += 1;
                }
            }
            sink.point(family, &labels[..count], Number::F64(value));
        });
    }
}

fn flag(value: bool) -> f64 {
    if value {
        1.0
    } else {
        0.0
    }
}

/// Emits a family's one unlabelled series, when there is a value.
fn one(value: Option<f64>, emit: &mut Emit<'_>) {
    if let Some(value) = value {
        emit(&[], value);
    }
}

/// Hands the GPU families of `gpu` to `sink`, each series labelled with `scope` first.
pub(crate) fn walk<S: Sink>(gpu: &GpuExtension, scope: &str, sink: &mut S) {
    walk_power_and_clocks(gpu, scope, sink);
    walk_throttling(gpu, scope, sink);
    walk_errors(gpu, scope, sink);
    walk_links_codecs_and_partitions(gpu, scope, sink);
}

/// Power, its limit, energy, temperatures and clocks.
fn walk_power_and_clocks<S: Sink>(gpu: &GpuExtension, scope: &str, sink: &mut S) {
    emit_family(sink, scope, &POWER, gpu, |d, emit| {
        one(d.readings.power_watts, emit)
    });
    emit_family(sink, scope, &POWER_LIMIT, gpu, |d, emit| {
        one(d.readings.power_limit_watts, emit);
    });
    emit_family(sink, scope, &ENERGY, gpu, |d, emit| {
        one(d.readings.energy_joules, emit)
    });
    emit_family(sink, scope, &TEMPERATURE, gpu, |d, emit| {
        for (sensor, value) in [
            ("gpu", d.readings.temperature_celsius),
            ("memory", d.readings.memory_temperature_celsius),
        ] {
            if let Some(value) = value {
                emit(&[("sensor", Label::Str(sensor))], value);
            }
        }
    });
    for (family, current) in [(&CLOCK, true), (&CLOCK_MAX, false)] {
        emit_family(sink, scope, family, gpu, |d, emit| {
            let clocks = if current {
                [
                    d.readings.sm_clock_hz,
                    d.readings.memory_clock_hz,
                    d.readings.graphics_clock_hz,
                ]
            } else {
                [
                    d.readings.sm_clock_max_hz,
                    d.readings.memory_clock_max_hz,
                    d.readings.graphics_clock_max_hz,
                ]
            };
            for (clock, value) in ["sm", "memory", "graphics"].into_iter().zip(clocks) {
                if let Some(value) = value {
                    emit(&[("clock", Label::Str(clock))], value as f64);
                }
            }
        });
    }
}

/// Which throttle reasons are active, the time spent throttled and the throttled periods.
fn walk_throttling<S: Sink>(gpu: &GpuExtension, scope: &str, sink: &mut S) {
    emit_family(sink, scope, &THROTTLE_ACTIVE, gpu, |d, emit| {
        let Some(active) = &d.throttle_reasons else {
            return;
        };
        for (_, reason) in THROTTLE_REASONS {
            let on = active.iter().any(|name| name == reason);
            emit(&[("reason", Label::Str(reason))], flag(on));
        }
    });
    emit_family(sink, scope, &THROTTLED_SECONDS, gpu, |d, emit| {
        for (reason, value) in [
            ("power", d.violation_power_seconds),
            ("thermal", d.violation_thermal_seconds),
            ("board_limit", d.violation_board_limit_seconds),
            ("reliability", d.violation_reliability_seconds),
        ] {
            if let Some(value) = value {
                emit(&[("reason", Label::Str(reason))], value);
            }
        }
    });
    emit_family(sink, scope, &THROTTLE_PERIODS, gpu, |d, emit| {
        let events = gpu
            .limit_events
            .iter()
            .filter(|e| e.event != "xid" && e.index == d.index && *e.uuid == *d.uuid);
        for event in events {
            emit(&[("reason", Label::Str(&event.event))], event.count as f64);
        }
    });
}

/// Xid errors, ECC errors and row remapping.
fn walk_errors<S: Sink>(gpu: &GpuExtension, scope: &str, sink: &mut S) {
    emit_family(sink, scope, &XID, gpu, |d, emit| {
        for entry in &d.xid_errors {
            emit(&[("xid", Label::Int(entry.xid))], entry.count as f64);
        }
    });
    emit_family(sink, scope, &ECC, gpu, |d, emit| {
        for (kind, counter, value) in [
            ("corrected", "volatile", d.readings.ecc_corrected_volatile),
            (
                "uncorrected",
                "volatile",
                d.readings.ecc_uncorrected_volatile,
            ),
            ("corrected", "aggregate", d.readings.ecc_corrected_aggregate),
            (
                "uncorrected",
                "aggregate",
                d.readings.ecc_uncorrected_aggregate,
            ),
        ] {
            if let Some(value) = value {
                let labels = [("type", Label::Str(kind)), ("counter", Label::Str(counter))];
                emit(&labels, value as f64);
            }
        }
    });
    emit_family(sink, scope, &REMAPPED_ROWS, gpu, |d, emit| {
        for (cause, value) in [
            ("correctable", d.readings.remapped_rows_correctable),
            ("uncorrectable", d.readings.remapped_rows_uncorrectable),
        ] {
            if let Some(value) = value {
                emit(&[("cause", Label::Str(cause))], value as f64);
            }
        }
    });
    emit_family(sink, scope, &REMAPPING, gpu, |d, emit| {
        for (state, value) in [
            ("pending", d.readings.remapping_pending),
            ("failed", d.readings.remapping_failed),
        ] {
            if let Some(value) = value {
                emit(&[("state", Label::Str(state))], flag(value));
            }
        }
    });
}

/// PCIe throughput and replays, encoder and decoder use, MIG mode and its instances' memory.
fn walk_links_codecs_and_partitions<S: Sink>(gpu: &GpuExtension, scope: &str, sink: &mut S) {
    emit_family(sink, scope, &PCIE_THROUGHPUT, gpu, |d, emit| {
        for (direction, value) in [
            ("tx", d.readings.pcie_tx_bytes_per_second),
            ("rx", d.readings.pcie_rx_bytes_per_second),
        ] {
            if let Some(value) = value {
                emit(&[("direction", Label::Str(direction))], value as f64);
            }
        }
    });
    emit_family(sink, scope, &PCIE_REPLAYS, gpu, |d, emit| {
        one(d.readings.pcie_replays.map(|v| v as f64), emit);
    });
    emit_family(sink, scope, &CODEC, gpu, |d, emit| {
        for (codec, value) in [
            ("encoder", d.readings.encoder_utilization_percent),
            ("decoder", d.readings.decoder_utilization_percent),
        ] {
            if let Some(value) = value {
                emit(&[("codec", Label::Str(codec))], value / 100.0);
            }
        }
    });
    emit_family(sink, scope, &MIG, gpu, |d, emit| {
        one(d.readings.mig_enabled.map(flag), emit);
    });
    emit_family(sink, scope, &MIG_MEMORY, gpu, |d, emit| {
        for instance in &d.readings.mig_instances {
            if let Some(used) = instance.memory_used_bytes {
                let labels = [("instance", Label::Int(u64::from(instance.index)))];
                emit(&labels, used as f64);
            }
        }
    });
}

#[cfg(test)]
mod tests;
