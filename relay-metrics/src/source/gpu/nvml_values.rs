//! The device values beyond memory and utilisation: power, energy, temperatures, clocks,
//! clock-event (throttle) reasons and violation times, ECC and row remapping, PCIe, encoder and
//! decoder, MIG. Each is one safe `nvml-wrapper` query; a query that fails makes only its value
//! `None`, and says why in [`NvmlDeviceValues::missing`].

use nvml_wrapper::enum_wrappers::device::{
    Clock, EccCounter, MemoryError, PcieUtilCounter, PerformancePolicy, TemperatureSensor,
};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::FieldValueSample;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::{Device, Nvml};

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

/// One MIG GPU instance's memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigInstanceSample {
    /// Position among the device's MIG devices (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
    /// Memory in use (`nvmlDeviceGetMemoryInfo_v2` of the MIG device), bytes.
    pub memory_used_bytes: Option<u64>,
    /// Memory of the instance, bytes.
    pub memory_total_bytes: Option<u64>,
}

/// One device's extended values, in base units. `None` means the query failed: the reason is
/// in [`Self::missing`] under the value's name.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvmlDeviceValues {
    /// Power draw (`nvmlDeviceGetPowerUsage`), W.
    pub power_watts: Option<f64>,
    /// Enforced power limit (`nvmlDeviceGetEnforcedPowerLimit`), W.
    pub power_limit_watts: Option<f64>,
    /// Energy since the driver loaded (`nvmlDeviceGetTotalEnergyConsumption`), J.
    pub energy_joules: Option<f64>,
    /// GPU die temperature, °C.
    pub temperature_celsius: Option<f64>,
    /// Memory temperature (field `NVML_FI_DEV_MEMORY_TEMP`), °C.
    pub memory_temperature_celsius: Option<f64>,
    /// Current SM clock, Hz.
    pub sm_clock_hz: Option<u64>,
    /// Current memory clock, Hz.
    pub memory_clock_hz: Option<u64>,
    /// Current graphics clock, Hz.
    pub graphics_clock_hz: Option<u64>,
    /// Maximum SM clock, Hz.
    pub sm_clock_max_hz: Option<u64>,
    /// Maximum memory clock, Hz.
    pub memory_clock_max_hz: Option<u64>,
    /// Maximum graphics clock, Hz.
    pub graphics_clock_max_hz: Option<u64>,
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
    /// Corrected ECC errors since the driver loaded.
    pub ecc_corrected_volatile: Option<u64>,
    /// Uncorrected ECC errors since the driver loaded.
    pub ecc_uncorrected_volatile: Option<u64>,
    /// Corrected ECC errors over the device's life.
    pub ecc_corrected_aggregate: Option<u64>,
    /// Uncorrected ECC errors over the device's life.
    pub ecc_uncorrected_aggregate: Option<u64>,
    /// Rows remapped for correctable errors.
    pub remapped_rows_correctable: Option<u64>,
    /// Rows remapped for uncorrectable errors.
    pub remapped_rows_uncorrectable: Option<u64>,
    /// A remapping waits for the next reset.
    pub remapping_pending: Option<bool>,
    /// A remapping failed.
    pub remapping_failed: Option<bool>,
    /// PCIe transmit throughput (NVML samples it over 20 ms), bytes/s.
    pub pcie_tx_bytes_per_second: Option<u64>,
    /// PCIe receive throughput, bytes/s.
    pub pcie_rx_bytes_per_second: Option<u64>,
    /// PCIe replays since the driver loaded.
    pub pcie_replays: Option<u64>,
    /// Video encoder utilisation, percent.
    pub encoder_utilization_percent: Option<f64>,
    /// Video decoder utilisation, percent.
    pub decoder_utilization_percent: Option<f64>,
    /// MIG mode is on.
    pub mig_enabled: Option<bool>,
    /// The MIG instances, when MIG mode is on.
    pub mig_instances: Vec<MigInstanceSample>,
    /// Why values are `None`: (value name, NVML's reason).
    pub missing: Vec<(&'static str, String)>,
}

/// Reads every extended value of `device`.
pub(crate) fn read(nvml: &Nvml, device: &Device<'_>) -> NvmlDeviceValues {
    let mut v = NvmlDeviceValues::default();
    let missing = &mut v.missing;
    let mut keep = |name: &'static str, result: Result<f64, NvmlError>| -> Option<f64> {
        result
            .map_err(|error| missing.push((name, error.to_string())))
            .ok()
    };
    v.power_watts = keep("power_watts", device.power_usage().map(milli));
    v.power_limit_watts = keep(
        "power_limit_watts",
        device.enforced_power_limit().map(milli),
    );
    v.energy_joules = keep(
        "energy_joules",
        device
            .total_energy_consumption()
            .map(|mj| mj as f64 / 1000.0),
    );
    v.temperature_celsius = keep(
        "temperature_celsius",
        device.temperature(TemperatureSensor::Gpu).map(f64::from),
    );
    v.memory_temperature_celsius = keep("memory_temperature_celsius", memory_temperature(device));
    v.encoder_utilization_percent = keep(
        "encoder_utilization_percent",
        device
            .encoder_utilization()
            .map(|u| f64::from(u.utilization)),
    );
    v.decoder_utilization_percent = keep(
        "decoder_utilization_percent",
        device
            .decoder_utilization()
            .map(|u| f64::from(u.utilization)),
    );
    let missing = &mut v.missing;
    let mut keep = |name: &'static str, result: Result<u64, NvmlError>| -> Option<u64> {
        result
            .map_err(|error| missing.push((name, error.to_string())))
            .ok()
    };
    let mhz = |result: Result<u32, NvmlError>| result.map(|mhz| u64::from(mhz) * 1_000_000);
    v.sm_clock_hz = keep("sm_clock_hz", mhz(device.clock_info(Clock::SM)));
    v.memory_clock_hz = keep("memory_clock_hz", mhz(device.clock_info(Clock::Memory)));
    v.graphics_clock_hz = keep("graphics_clock_hz", mhz(device.clock_info(Clock::Graphics)));
    v.sm_clock_max_hz = keep("sm_clock_max_hz", mhz(device.max_clock_info(Clock::SM)));
    v.memory_clock_max_hz = keep(
        "memory_clock_max_hz",
        mhz(device.max_clock_info(Clock::Memory)),
    );
    v.graphics_clock_max_hz = keep(
        "graphics_clock_max_hz",
        mhz(device.max_clock_info(Clock::Graphics)),
    );
    v.throttle_reasons = keep(
        "throttle_reasons",
        device.current_throttle_reasons().map(|r| r.bits()),
    );
    let violation = |policy| device.violation_status(policy).map(|t| t.violation_time);
    v.violation_power_ns = keep(
        "violation_power_seconds",
        violation(PerformancePolicy::Power),
    );
    v.violation_thermal_ns = keep(
        "violation_thermal_seconds",
        violation(PerformancePolicy::Thermal),
    );
    v.violation_board_limit_ns = keep(
        "violation_board_limit_seconds",
        violation(PerformancePolicy::BoardLimit),
    );
    v.violation_reliability_ns = keep(
        "violation_reliability_seconds",
        violation(PerformancePolicy::Reliability),
    );
    let ecc = |error, counter| device.total_ecc_errors(error, counter);
    v.ecc_corrected_volatile = keep(
        "ecc_corrected_volatile",
        ecc(MemoryError::Corrected, EccCounter::Volatile),
    );
    v.ecc_uncorrected_volatile = keep(
        "ecc_uncorrected_volatile",
        ecc(MemoryError::Uncorrected, EccCounter::Volatile),
    );
    v.ecc_corrected_aggregate = keep(
        "ecc_corrected_aggregate",
        ecc(MemoryError::Corrected, EccCounter::Aggregate),
    );
    v.ecc_uncorrected_aggregate = keep(
        "ecc_uncorrected_aggregate",
        ecc(MemoryError::Uncorrected, EccCounter::Aggregate),
    );
    let kb = |result: Result<u32, NvmlError>| result.map(|kb| u64::from(kb) * 1024);
    v.pcie_tx_bytes_per_second = keep(
        "pcie_tx_bytes_per_second",
        kb(device.pcie_throughput(PcieUtilCounter::Send)),
    );
    v.pcie_rx_bytes_per_second = keep(
        "pcie_rx_bytes_per_second",
        kb(device.pcie_throughput(PcieUtilCounter::Receive)),
    );
    v.pcie_replays = keep("pcie_replays", device.pcie_replay_counter().map(u64::from));
    match remapped_rows(nvml, device) {
        Ok(rows) => {
            v.remapped_rows_correctable = Some(u64::from(rows.correctable));
            v.remapped_rows_uncorrectable = Some(u64::from(rows.uncorrectable));
            v.remapping_pending = Some(rows.pending != 0);
            v.remapping_failed = Some(rows.failure != 0);
        }
        Err(error) => v.missing.push(("remapped_rows", error.to_string())),
    }
    match device.mig_mode() {
        Ok(mode) => {
            v.mig_enabled = Some(mode.current == 1);
            if mode.current == 1 {
                mig_instances(device, &mut v);
            }
        }
        Err(error) => v.missing.push(("mig_enabled", error.to_string())),
    }
    v
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

fn mig_instances(device: &Device<'_>, v: &mut NvmlDeviceValues) {
    let count = match device.mig_device_count() {
        Ok(count) => count,
        Err(error) => {
            v.missing.push(("mig_instances", error.to_string()));
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
            v.missing
                .push(("mig_instances.memory_used_bytes", error.to_string()));
        }
        let memory = memory.ok();
        v.mig_instances.push(MigInstanceSample {
            index,
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
        });
    }
}
