//! NVML's C types, return codes and buffer conventions.

use std::ffi::{c_char, c_uint, c_ulonglong};

/// NVML's `nvmlReturn_t`.
pub(crate) type NvmlReturn = c_uint;

pub(crate) const SUCCESS: NvmlReturn = 0;
pub(crate) const ERROR_UNINITIALIZED: NvmlReturn = 1;
pub(crate) const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
pub(crate) const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
pub(crate) const ERROR_NOT_FOUND: NvmlReturn = 6;
pub(crate) const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
pub(crate) const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
pub(crate) const ERROR_TIMEOUT: NvmlReturn = 10;
pub(crate) const ERROR_GPU_IS_LOST: NvmlReturn = 15;
pub(crate) const ERROR_UNKNOWN: NvmlReturn = 999;

/// `NVML_VALUE_NOT_AVAILABLE` as the driver stores it in an unsigned long long.
pub(crate) const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `gpuInstanceId`/`computeInstanceId` when MIG is off.
pub(crate) const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

/// `nvmlMemory_t` (v1).
#[repr(C)]
pub struct Memory {
    pub(crate) total: c_ulonglong,
    pub(crate) free: c_ulonglong,
    pub(crate) used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    pub(crate) version: c_uint,
    pub(crate) total: c_ulonglong,
    pub(crate) reserved: c_ulonglong,
    pub(crate) free: c_ulonglong,
    pub(crate) used: c_ulonglong,
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct Utilization {
    pub(crate) gpu: c_uint,
    pub(crate) memory: c_uint,
}

/// `nvmlProcessInfo_t` as used by the `_v3` process lists.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfo {
    pub(crate) pid: c_uint,
    pub(crate) used_gpu_memory: c_ulonglong,
    pub(crate) gpu_instance_id: c_uint,
    pub(crate) compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessUtilizationSample {
    pub(crate) pid: c_uint,
    pub(crate) time_stamp: c_ulonglong,
    pub(crate) sm_util: c_uint,
    pub(crate) mem_util: c_uint,
    pub(crate) enc_util: c_uint,
    pub(crate) dec_util: c_uint,
}

/// `nvmlViolationTime_t`.
#[repr(C)]
pub struct ViolationTime {
    pub(crate) reference_time: c_ulonglong,
    pub(crate) violation_time: c_ulonglong,
}

/// `nvmlEventData_t`.
#[repr(C)]
pub struct EventData {
    pub(crate) device: *mut std::ffi::c_void,
    pub(crate) event_type: c_ulonglong,
    pub(crate) event_data: c_ulonglong,
    pub(crate) gpu_instance_id: c_uint,
    pub(crate) compute_instance_id: c_uint,
}

/// `nvmlFieldValue_t`: the value is a union of 8 bytes, written here as its `unsigned long
/// long` or `double` member according to `value_type`.
#[repr(C)]
pub struct FieldValue {
    pub(crate) field_id: c_uint,
    pub(crate) scope_id: c_uint,
    pub(crate) timestamp: i64,
    pub(crate) latency_usec: i64,
    pub(crate) value_type: c_uint,
    pub(crate) nvml_return: NvmlReturn,
    pub(crate) value: c_ulonglong,
}

const _: () = assert!(std::mem::size_of::<FieldValue>() == 40);
const _: () = assert!(std::mem::size_of::<EventData>() == 32);

/// NVML's two-call protocol for lists: a count query (null buffer or too small) gets the needed
/// size and `INSUFFICIENT_SIZE` (or `SUCCESS` when the list is empty), a big enough buffer is
/// filled.
///
/// # Safety
/// `count` must be valid for reads and writes; `out`, if not null, must be valid for `*count`
/// writes of `T`.
pub(crate) unsafe fn fill_list<T: Copy>(
    items: &[T],
    count: *mut c_uint,
    out: *mut T,
) -> NvmlReturn {
    if count.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let needed = c_uint::try_from(items.len()).unwrap_or(c_uint::MAX);
    // SAFETY: the caller guarantees `count` is valid; it was checked for null above.
    let capacity = unsafe { *count };
    // SAFETY: as above.
    unsafe { *count = needed };
    if needed == 0 {
        return SUCCESS;
    }
    if out.is_null() || capacity < needed {
        return ERROR_INSUFFICIENT_SIZE;
    }
    for (slot, item) in items.iter().enumerate() {
        // SAFETY: `slot < needed <= capacity`, and the caller guarantees room for `capacity`.
        unsafe { out.add(slot).write(*item) };
    }
    SUCCESS
}

/// Copies `text` and a terminating NUL into a caller buffer of `length` bytes.
///
/// # Safety
/// `out` must be null or valid for `length` byte writes.
pub(crate) unsafe fn write_c_string(text: &str, out: *mut c_char, length: c_uint) -> NvmlReturn {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let bytes = text.as_bytes();
    if usize::try_from(length).map_or(true, |length| length <= bytes.len()) {
        return ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: `out` has room for `length > bytes.len()` bytes, so the text and the NUL fit.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), out, bytes.len());
        out.add(bytes.len()).write(0);
    }
    SUCCESS
}

/// Writes `value` through `out` after a null check.
///
/// # Safety
/// `out` must be null or valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) -> NvmlReturn {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller guarantees validity.
    unsafe { out.write(value) };
    SUCCESS
}
