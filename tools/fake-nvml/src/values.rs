//! The device values of the timeline (power, energy, temperatures, clocks, throttling, ECC,
//! row remapping, PCIe, encoder/decoder, MIG), served through NVML's entry points.

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};

use crate::ffi::{
    write_out, FieldValue, MemoryV2, NvmlReturn, ViolationTime, ERROR_INVALID_ARGUMENT,
    ERROR_NOT_SUPPORTED, SUCCESS,
};
use crate::script::{MAX_DEVICES, MIB};
use crate::timeline::Key;
use crate::{handle_of, with_device, MIG_INSTANCES};

/// `NVML_FI_DEV_MEMORY_TEMP`.
const FIELD_MEMORY_TEMP: c_uint = 82;
/// `NVML_VALUE_TYPE_UNSIGNED_INT`.
const VALUE_TYPE_UNSIGNED_INT: c_uint = 1;

/// Writes the scripted `key` of `device`, converted, to `out`.
///
/// # Safety
/// `out` must be null or valid for a write.
unsafe fn scalar<T>(
    device: *mut c_void,
    out: *mut T,
    key: Key,
    convert: impl FnOnce(u64) -> T,
) -> NvmlReturn {
    with_device(device, |script, index| {
        match script.timeline.device(index).get(key) {
            // SAFETY: forwarded from the caller's contract.
            Some(value) => unsafe { write_out(out, convert(value)) },
            None => ERROR_NOT_SUPPORTED,
        }
    })
}

fn narrow(value: u64) -> c_uint {
    c_uint::try_from(value).unwrap_or(c_uint::MAX)
}

/// `nvmlDeviceGetPowerUsage` (mW).
///
/// # Safety
/// `power` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPowerUsage(
    device: *mut c_void,
    power: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, power, Key::PowerMw, narrow) }
}

/// `nvmlDeviceGetEnforcedPowerLimit` (mW).
///
/// # Safety
/// `limit` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEnforcedPowerLimit(
    device: *mut c_void,
    limit: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, limit, Key::PowerLimitMw, narrow) }
}

/// `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver loaded).
///
/// # Safety
/// `energy` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: *mut c_void,
    energy: *mut c_ulonglong,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, energy, Key::EnergyMj, |v| v) }
}

/// `nvmlDeviceGetTemperature`: only `NVML_TEMPERATURE_GPU` (0) exists.
///
/// # Safety
/// `temperature` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTemperature(
    device: *mut c_void,
    sensor: c_uint,
    temperature: *mut c_uint,
) -> NvmlReturn {
    if sensor != 0 {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, temperature, Key::TempGpu, narrow) }
}

/// `nvmlDeviceGetFieldValues`: only `NVML_FI_DEV_MEMORY_TEMP`; any other field gets its own
/// `NVML_ERROR_NOT_SUPPORTED`, as the driver answers per field.
///
/// # Safety
/// `values` must be valid for `count` reads and writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetFieldValues(
    device: *mut c_void,
    count: c_int,
    values: *mut FieldValue,
) -> NvmlReturn {
    let Ok(count) = usize::try_from(count) else {
        return ERROR_INVALID_ARGUMENT;
    };
    if values.is_null() || count == 0 {
        return ERROR_INVALID_ARGUMENT;
    }
    with_device(device, |script, index| {
        let memory_temp = script.timeline.device(index).get(Key::TempMemory);
        for slot in 0..count {
            // SAFETY: the caller guarantees `count` valid entries.
            let value = unsafe { &mut *values.add(slot) };
            value.timestamp = 0;
            value.latency_usec = 0;
            match (value.field_id, memory_temp) {
                (FIELD_MEMORY_TEMP, Some(celsius)) => {
                    value.value_type = VALUE_TYPE_UNSIGNED_INT;
                    value.nvml_return = SUCCESS;
                    // The union's `unsigned int` member: the low 4 bytes on little-endian.
                    value.value = u64::from(narrow(celsius));
                }
                _ => value.nvml_return = ERROR_NOT_SUPPORTED,
            }
        }
        SUCCESS
    })
}

/// The clock of `clock_type` (0 graphics, 1 SM, 2 memory) from `keys`.
///
/// # Safety
/// `clock` must be valid for a write.
unsafe fn clock(
    device: *mut c_void,
    clock_type: c_uint,
    clock: *mut c_uint,
    keys: [Key; 3],
) -> NvmlReturn {
    match usize::try_from(clock_type).ok().and_then(|t| keys.get(t)) {
        // SAFETY: forwarded from the caller's contract.
        Some(&key) => unsafe { scalar(device, clock, key, narrow) },
        None => ERROR_INVALID_ARGUMENT,
    }
}

/// `nvmlDeviceGetClockInfo` (MHz).
///
/// # Safety
/// `clock_mhz` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetClockInfo(
    device: *mut c_void,
    clock_type: c_uint,
    clock_mhz: *mut c_uint,
) -> NvmlReturn {
    let keys = [Key::ClockGraphicsMhz, Key::ClockSmMhz, Key::ClockMemoryMhz];
    // SAFETY: forwarded from the caller's contract.
    unsafe { clock(device, clock_type, clock_mhz, keys) }
}

/// `nvmlDeviceGetMaxClockInfo` (MHz).
///
/// # Safety
/// `clock_mhz` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: *mut c_void,
    clock_type: c_uint,
    clock_mhz: *mut c_uint,
) -> NvmlReturn {
    let keys = [
        Key::MaxClockGraphicsMhz,
        Key::MaxClockSmMhz,
        Key::MaxClockMemoryMhz,
    ];
    // SAFETY: forwarded from the caller's contract.
    unsafe { clock(device, clock_type, clock_mhz, keys) }
}

/// `nvmlDeviceGetCurrentClocksThrottleReasons`.
///
/// # Safety
/// `reasons` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCurrentClocksThrottleReasons(
    device: *mut c_void,
    reasons: *mut c_ulonglong,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, reasons, Key::Throttle, |v| v) }
}

/// `nvmlDeviceGetViolationStatus`: power (0), thermal (1), board limit (3), reliability (5).
///
/// # Safety
/// `violation` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetViolationStatus(
    device: *mut c_void,
    policy: c_uint,
    violation: *mut ViolationTime,
) -> NvmlReturn {
    let key = match policy {
        0 => Key::ViolationPowerNs,
        1 => Key::ViolationThermalNs,
        3 => Key::ViolationBoardLimitNs,
        5 => Key::ViolationReliabilityNs,
        2 | 4 | 6 | 7 => return ERROR_NOT_SUPPORTED,
        _ => return ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        scalar(device, violation, key, |ns| ViolationTime {
            reference_time: 0,
            violation_time: ns,
        })
    }
}

/// `nvmlDeviceGetTotalEccErrors`: corrected (0) or uncorrected (1), volatile (0) or
/// aggregate (1).
///
/// # Safety
/// `count` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetTotalEccErrors(
    device: *mut c_void,
    error_type: c_uint,
    counter_type: c_uint,
    count: *mut c_ulonglong,
) -> NvmlReturn {
    let key = match (error_type, counter_type) {
        (0, 0) => Key::EccCorrectedVolatile,
        (1, 0) => Key::EccUncorrectedVolatile,
        (0, 1) => Key::EccCorrectedAggregate,
        (1, 1) => Key::EccUncorrectedAggregate,
        _ => return ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, count, key, |v| v) }
}

/// `nvmlDeviceGetRemappedRows`.
///
/// # Safety
/// Each pointer must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetRemappedRows(
    device: *mut c_void,
    correctable: *mut c_uint,
    uncorrectable: *mut c_uint,
    pending: *mut c_uint,
    failure: *mut c_uint,
) -> NvmlReturn {
    with_device(device, |script, index| {
        let state = script.timeline.device(index);
        let keys = [
            (Key::RemappedCorrectable, correctable),
            (Key::RemappedUncorrectable, uncorrectable),
            (Key::RemapPending, pending),
            (Key::RemapFailure, failure),
        ];
        if keys.iter().any(|(key, _)| state.get(*key).is_none()) {
            return ERROR_NOT_SUPPORTED;
        }
        for (key, out) in keys {
            // SAFETY: forwarded from the caller's contract.
            let code = unsafe { write_out(out, narrow(state.get(key).unwrap_or(0))) };
            if code != SUCCESS {
                return code;
            }
        }
        SUCCESS
    })
}

/// `nvmlDeviceGetPcieThroughput`: TX (0) or RX (1), KB/s.
///
/// # Safety
/// `value` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieThroughput(
    device: *mut c_void,
    counter: c_uint,
    value: *mut c_uint,
) -> NvmlReturn {
    let key = match counter {
        0 => Key::PcieTxKbps,
        1 => Key::PcieRxKbps,
        _ => return ERROR_INVALID_ARGUMENT,
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, value, key, narrow) }
}

/// `nvmlDeviceGetPcieReplayCounter`.
///
/// # Safety
/// `value` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetPcieReplayCounter(
    device: *mut c_void,
    value: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, value, Key::PcieReplays, narrow) }
}

/// Encoder or decoder utilisation and a 1 s sampling period.
///
/// # Safety
/// Both pointers must be valid for a write.
unsafe fn codec(
    device: *mut c_void,
    key: Key,
    utilization: *mut c_uint,
    period_usec: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    let code = unsafe { scalar(device, utilization, key, narrow) };
    if code != SUCCESS {
        return code;
    }
    // SAFETY: forwarded from the caller's contract.
    unsafe { write_out(period_usec, 1_000_000) }
}

/// `nvmlDeviceGetEncoderUtilization`.
///
/// # Safety
/// Both pointers must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetEncoderUtilization(
    device: *mut c_void,
    utilization: *mut c_uint,
    period_usec: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { codec(device, Key::EncoderPercent, utilization, period_usec) }
}

/// `nvmlDeviceGetDecoderUtilization`.
///
/// # Safety
/// Both pointers must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetDecoderUtilization(
    device: *mut c_void,
    utilization: *mut c_uint,
    period_usec: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    unsafe { codec(device, Key::DecoderPercent, utilization, period_usec) }
}

/// `nvmlDeviceGetMigMode`: current and pending mode are the scripted one.
///
/// # Safety
/// Both pointers must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigMode(
    device: *mut c_void,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    let code = unsafe { scalar(device, current, Key::MigMode, narrow) };
    if code != SUCCESS {
        return code;
    }
    // SAFETY: forwarded from the caller's contract.
    unsafe { scalar(device, pending, Key::MigMode, narrow) }
}

/// Whether device `index` is scripted in MIG mode now (device 1 is the one with instances).
fn mig_enabled(device: *mut c_void) -> Result<bool, NvmlReturn> {
    let mut enabled = false;
    let code = with_device(device, |script, index| {
        enabled = index == 1 && script.timeline.device(index).get(Key::MigMode) == Some(1);
        SUCCESS
    });
    if code == SUCCESS {
        Ok(enabled)
    } else {
        Err(code)
    }
}

/// `nvmlDeviceGetMaxMigDeviceCount`.
///
/// # Safety
/// `count` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMaxMigDeviceCount(
    device: *mut c_void,
    count: *mut c_uint,
) -> NvmlReturn {
    match mig_enabled(device) {
        // SAFETY: forwarded from the caller's contract.
        Ok(enabled) => unsafe {
            write_out(count, if enabled { MIG_INSTANCES as c_uint } else { 0 })
        },
        Err(code) => code,
    }
}

/// `nvmlDeviceGetMigDeviceHandleByIndex`.
///
/// # Safety
/// `handle` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: *mut c_void,
    index: c_uint,
    handle: *mut *mut c_void,
) -> NvmlReturn {
    match (mig_enabled(device), usize::try_from(index)) {
        (Ok(true), Ok(index)) if index < MIG_INSTANCES => {
            // SAFETY: forwarded from the caller's contract.
            unsafe { write_out(handle, handle_of(MAX_DEVICES + index)) }
        }
        (Err(code), _) => code,
        _ => ERROR_INVALID_ARGUMENT,
    }
}

/// Memory of MIG instance `instance`: 8 GiB each, (instance + 1) GiB used.
///
/// # Safety
/// `memory` must be null or valid for a write.
pub(crate) unsafe fn mig_instance_memory(instance: usize, memory: *mut MemoryV2) -> NvmlReturn {
    let total = 8 * 1024 * MIB;
    let used = (instance as u64 + 1) * 1024 * MIB;
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        write_out(
            memory,
            MemoryV2 {
                version: (std::mem::size_of::<MemoryV2>() | (2 << 24)) as c_uint,
                total,
                reserved: 0,
                free: total - used,
                used,
            },
        )
    }
}
