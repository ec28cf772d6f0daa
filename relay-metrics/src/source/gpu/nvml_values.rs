//! The device values beyond memory and utilisation: power, energy, temperatures, clocks,
//! clock-event (throttle) reasons and violation times, ECC and row remapping, PCIe, encoder and
//! decoder, MIG. Each is one safe `nvml-wrapper` query; a query that fails makes only its value
//! `None`, and says why in [`NvmlDeviceValues::missing`]. The values the snapshot reports
//! unchanged are read straight into its [`GpuReadings`] (their one definition).

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

use crate::snapshot::{GpuReadings, MigInstanceReport};

/// `NVML_FI_DEV_MEMORY_TEMP`: memory temperature is only a field value in NVML.
const FIELD_MEMORY_TEMP: u32 = 82;

/// The clock-event (throttle) reasons NVML reports, bit and name, in NVML's bit order.
pub const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in `mask`, in bit order (unknown bits are left out).
pub fn throttle_reason_names(mask: u64) -> impl Iterator<Item = &'static str> {
    THROTTLE_REASONS
        .iter()
        .filter(move |(bit, _)| mask & bit != 0)
        .map(|(_, name)| *name)
}

/// One device's extended values, in base units. `None` means the query failed: the reason is
/// in [`Self::missing`] under the value's name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvmlDeviceValues {
    /// Power, energy, temperatures, clocks, ECC, row remapping, PCIe, codecs, MIG.
    pub readings: GpuReadings,
    /// Current clock-event reasons, NVML's bitmask (see [`THROTTLE_REASONS`]).
    pub throttle_reasons: Option<u64>,
    /// Cumulative time held below requested clocks by the power limit, ns.
    pub violation_power_ns: Option<u64>,
    /// … by thermal limits, ns.
    pub violation_thermal_ns: Option<u64>,
    /// … by the board limit, ns.
    pub violation_board_limit_ns: Option<u64>,
    /// … by the reliability limit, ns.
    pub violation_reliability_ns: Option<u64>,
    /// Why values are `None`: (value name, NVML's reason).
    pub missing: Vec<(&'static str, String)>,
}

/// Why values are `None`: (value name, NVML's reason).
type Missing = Vec<(&'static str, String)>;

/// Reads every extended value of `device`.
pub(crate) fn read(nvml: &Nvml, device: &Device<'_>) -> NvmlDeviceValues {
    let mut v = NvmlDeviceValues::default();
    read_power_and_codecs(device, &mut v.readings, &mut v.missing);
    read_clocks(device, &mut v.readings, &mut v.missing);
    v.throttle_reasons = keep(
        &mut v.missing,
        "throttle_reasons",
        device.current_throttle_reasons().map(|r| r.bits()),
    );
    read_violations(device, &mut v);
    read_ecc_and_pcie(device, &mut v.readings, &mut v.missing);
    read_remapping_and_mig(nvml, device, &mut v.readings, &mut v.missing);
    v
}

/// The value of `result`, or `None` with NVML's reason under `name` in `missing`.
fn keep<T>(missing: &mut Missing, name: &'static str, result: Result<T, NvmlError>) -> Option<T> {
    result
        .map_err(|error| missing.push((name, error.to_string())))
        .ok()
}

/// Power, energy, temperatures and the encoder's and decoder's utilisation.
fn read_power_and_codecs(device: &Device<'_>, r: &mut GpuReadings, missing: &mut Missing) {
    let mut keep = |name: &'static str, result: Result<f64, NvmlError>| keep(missing, name, result);
    r.power_watts = keep("power_watts", device.power_usage().map(milli));
    r.power_limit_watts = keep(
        "power_limit_watts",
        device.enforced_power_limit().map(milli),
    );
    r.energy_joules = keep(
        "energy_joules",
        device
            .total_energy_consumption()
            .map(|mj| mj as f64 / 1000.0),
    );
    r.temperature_celsius = keep(
        "temperature_celsius",
        device.temperature(TemperatureSensor::Gpu).map(f64::from),
    );
    r.memory_temperature_celsius = keep("memory_temperature_celsius", memory_temperature(device));
    r.encoder_utilization_percent = keep(
        "encoder_utilization_percent",
        device
            .encoder_utilization()
            .map(|u| f64::from(u.utilization)),
    );
    r.decoder_utilization_percent = keep(
        "decoder_utilization_percent",
        device
            .decoder_utilization()
            .map(|u| f64::from(u.utilization)),
    );
}

/// The current and maximum SM, memory and graphics clocks, in Hz.
fn read_clocks(device: &Device<'_>, r: &mut GpuReadings, missing: &mut Missing) {
    let mhz = |result: Result<u32, NvmlError>| result.map(|mhz| u64::from(mhz) * 1_000_000);
    let clocks = [
        (Clock::SM, &mut r.sm_clock_hz, "sm_clock_hz"),
        (Clock::Memory, &mut r.memory_clock_hz, "memory_clock_hz"),
        (
            Clock::Graphics,
            &mut r.graphics_clock_hz,
            "graphics_clock_hz",
        ),
    ];
    for (clock, value, name) in clocks {
        *value = keep(missing, name, mhz(device.clock_info(clock)));
    }
    let maxima = [
        (Clock::SM, &mut r.sm_clock_max_hz, "sm_clock_max_hz"),
        (
            Clock::Memory,
            &mut r.memory_clock_max_hz,
            "memory_clock_max_hz",
        ),
        (
            Clock::Graphics,
            &mut r.graphics_clock_max_hz,
            "graphics_clock_max_hz",
        ),
    ];
    for (clock, value, name) in maxima {
        *value = keep(missing, name, mhz(device.max_clock_info(clock)));
    }
}

/// The cumulative times held below requested clocks, by cause.
fn read_violations(device: &Device<'_>, v: &mut NvmlDeviceValues) {
    let violations = [
        (
            PerformancePolicy::Power,
            &mut v.violation_power_ns,
            "violation_power_seconds",
        ),
        (
            PerformancePolicy::Thermal,
            &mut v.violation_thermal_ns,
            "violation_thermal_seconds",
        ),
        (
            PerformancePolicy::BoardLimit,
            &mut v.violation_board_limit_ns,
            "violation_board_limit_seconds",
        ),
        (
            PerformancePolicy::Reliability,
            &mut v.violation_reliability_ns,
            "violation_reliability_seconds",
        ),
    ];
    for (policy, value, name) in violations {
        *value = keep(
            &mut v.missing,
            name,
            device.violation_status(policy).map(|t| t.violation_time),
        );
    }
}

/// ECC error counts, PCIe throughput and replays.
fn read_ecc_and_pcie(device: &Device<'_>, r: &mut GpuReadings, missing: &mut Missing) {
    let ecc = [
        (
            MemoryError::Corrected,
            EccCounter::Volatile,
            &mut r.ecc_corrected_volatile,
            "ecc_corrected_volatile",
        ),
        (
            MemoryError::Uncorrected,
            EccCounter::Volatile,
            &mut r.ecc_uncorrected_volatile,
            "ecc_uncorrected_volatile",
        ),
        (
            MemoryError::Corrected,
            EccCounter::Aggregate,
            &mut r.ecc_corrected_aggregate,
            "ecc_corrected_aggregate",
        ),
        (
            MemoryError::Uncorrected,
            EccCounter::Aggregate,
            &mut r.ecc_uncorrected_aggregate,
            "ecc_uncorrected_aggregate",
        ),
    ];
    for (error, counter, value, name) in ecc {
        *value = keep(missing, name, device.total_ecc_errors(error, counter));
    }
    let pcie = [
        (
            PcieUtilCounter::Send,
            &mut r.pcie_tx_bytes_per_second,
            "pcie_tx_bytes_per_second",
        ),
        (
            PcieUtilCounter::Receive,
            &mut r.pcie_rx_bytes_per_second,
            "pcie_rx_bytes_per_second",
        ),
    ];
    for (counter, value, name) in pcie {
        let kb = device.pcie_throughput(counter);
        *value = keep(missing, name, kb.map(|kb| u64::from(kb) * 1024));
    }
    r.pcie_replays = keep(
        missing,
        "pcie_replays",
        device.pcie_replay_counter().map(u64::from),
    );
}

/// Row remapping, and MIG's mode and instances.
fn read_remapping_and_mig(
    nvml: &Nvml,
    device: &Device<'_>,
    r: &mut GpuReadings,
    missing: &mut Missing,
) {
    match remapped_rows(nvml, device) {
        Ok(rows) => {
            r.remapped_rows_correctable = Some(u64::from(rows.correctable));
            r.remapped_rows_uncorrectable = Some(u64::from(rows.uncorrectable));
            r.remapping_pending = Some(rows.pending != 0);
            r.remapping_failed = Some(rows.failure != 0);
        }
        Err(error) => missing.push(("remapped_rows", error.to_string())),
    }
    match device.mig_mode() {
        Ok(mode) => {
            r.mig_enabled = Some(mode.current == 1);
            if mode.current == 1 {
                mig_instances(device, &mut r.mig_instances, missing);
            }
        }
        Err(error) => missing.push(("mig_enabled", error.to_string())),
    }
}

fn milli(value: u32) -> f64 {
    f64::from(value) / 1000.0
}

fn memory_temperature(device: &Device<'_>) -> Result<f64, NvmlError> {
    let mut samples = device.field_values_for(&[FieldId(FIELD_MEMORY_TEMP)])?;
    let sample: FieldValueSample = samples.pop().ok_or(NvmlError::Unknown)??;
    match sample.value? {
        SampleValue::F64(value) => Ok(value),
        SampleValue::U32(value) => Ok(f64::from(value)),
        SampleValue::U64(value) => Ok(value as f64),
        SampleValue::I64(value) => Ok(value as f64),
    }
}

/// The outputs of `nvmlDeviceGetRemappedRows`.
struct RemappedRows {
    correctable: u32,
    uncorrectable: u32,
    pending: u32,
    failure: u32,
}

/// `nvmlDeviceGetRemappedRows`, which nvml-wrapper 0.13 does not wrap: the symbol table's
/// `Result` field is checked, so a driver without it gives `FailedToLoadSymbol`, never a panic.
fn remapped_rows(nvml: &Nvml, device: &Device<'_>) -> Result<RemappedRows, NvmlError> {
    let function = *nvml
        .lib()
        .nvmlDeviceGetRemappedRows
        .as_ref()
        .map_err(|error| NvmlError::FailedToLoadSymbol(error.to_string()))?;
    let mut rows = RemappedRows {
        correctable: 0,
        uncorrectable: 0,
        pending: 0,
        failure: 0,
    };
    // SAFETY: the handle comes from this open session and outlives the call; the four pointers
    // are to live `u32`s (`unsigned int`), which the function only writes.
    let code = unsafe {
        function(
            device.handle(),
            &raw mut rows.correctable,
            &raw mut rows.uncorrectable,
            &raw mut rows.pending,
            &raw mut rows.failure,
        )
    };
    nvml_wrapper::error::nvml_try(code).map(|()| rows)
}

fn mig_instances(
    device: &Device<'_>,
    out: &mut Vec<MigInstanceReport>,
    missing: &mut Vec<(&'static str, String)>,
) {
    let count = match device.mig_device_count() {
        Ok(count) => count,
        Err(error) => {
            missing.push(("mig_instances", error.to_string()));
            return;
        }
    };
    for index in 0..count {
        // Slots of the maximum count without an instance answer NOT_FOUND: not an error.
        let Ok(instance) = device.mig_device_by_index(index) else {
            continue;
        };
        let memory = instance.memory_info();
        if let Err(error) = &memory {
            missing.push(("mig_instances.memory_used_bytes", error.to_string()));
        }
        let memory = memory.ok();
        out.push(MigInstanceReport {
            index,
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
        });
    }
}
