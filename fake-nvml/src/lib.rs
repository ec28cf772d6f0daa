//! A scripted stand-in for `libnvidia-ml.so.1`.
//!
//! No GPU exists on the machines that build relay-metrics, yet the GPU source must be tested
//! through the real path: `dlopen`, lazy symbol lookup by `nvml-wrapper`, the NVML calling
//! conventions (count queries answered with `NVML_ERROR_INSUFFICIENT_SIZE`, caller-sized buffers,
//! `NVML_VALUE_NOT_AVAILABLE`, `lastSeenTimeStamp`). This library exports those entry points and
//! serves two scripted devices.
//!
//! Behaviour is chosen when `nvmlInit_v2` runs, from two environment variables:
//! - `FAKE_NVML_SCENARIO`: `two_devices` (default), `uuid_fails` (device 0 has no UUID),
//!   `not_supported` (device 0's compute list, device 1's memory and utilisation answer
//!   `NVML_ERROR_NOT_SUPPORTED`), `count_fails` (`nvmlDeviceGetCount_v2` fails), `init_fails`
//!   (`nvmlInit_v2` answers `NVML_ERROR_DRIVER_NOT_LOADED`).
//! - `FAKE_NVML_PIDS`: up to three comma-separated PIDs `a,b,c` (default `1000,2000,3000`), so a
//!   test can put its own PID in.
//!
//! The script (bytes; "sm" is per-process SM utilisation in percent):
//!
//! | device | UUID | memory v1 used / v2 used+reserved | utilisation | compute | graphics | utilisation samples |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | 0 | `GPU-6a1f0c3e-0000-4000-8000-000000000000` | 4 MiB / 3 MiB + 1 MiB | 25 % | a: 4096, b: 1 MiB | a: 8192 | a: sm 20 then (newer) 30; c: sm 5; buffered before the first query: b: sm 99 at 50 µs |
//! | 1 | `GPU-6a1f0c3e-0000-4000-8000-000000000001` | 8 MiB / 7 MiB + 1 MiB | 50 % | c: not available | none | c: sm 70 |
//!
//! Process utilisation samples carry timestamps `g * 1_000_000 + {100, 150, 200}` µs, where `g`
//! counts the filled queries on that device, and only samples newer than `lastSeenTimeStamp` are
//! returned (none → `NVML_ERROR_NOT_FOUND`, as the driver does).
//!
//! With the cargo feature `missing-optional-symbols` the library does not export
//! `nvmlDeviceGetMemoryInfo` (v1), `nvmlDeviceGetUtilizationRates`,
//! `nvmlDeviceGetGraphicsRunningProcesses_v3` or `nvmlDeviceGetProcessUtilization`, like an old or
//! partial driver: the symbols are really absent, so `dlsym` fails. (The functions still exist
//! under mangled names, which keeps one body for both builds.)

use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// NVML's `nvmlReturn_t`.
type NvmlReturn = c_uint;

const SUCCESS: NvmlReturn = 0;
const ERROR_UNINITIALIZED: NvmlReturn = 1;
const ERROR_INVALID_ARGUMENT: NvmlReturn = 2;
const ERROR_NOT_SUPPORTED: NvmlReturn = 3;
const ERROR_NOT_FOUND: NvmlReturn = 6;
const ERROR_INSUFFICIENT_SIZE: NvmlReturn = 7;
const ERROR_DRIVER_NOT_LOADED: NvmlReturn = 9;
const ERROR_UNKNOWN: NvmlReturn = 999;

/// `NVML_VALUE_NOT_AVAILABLE` as the driver stores it in an unsigned long long.
const VALUE_NOT_AVAILABLE: u64 = u64::MAX;
/// `gpuInstanceId`/`computeInstanceId` when MIG is off.
const NO_INSTANCE: c_uint = 0xFFFF_FFFF;

const MIB: u64 = 1024 * 1024;
/// Timestamp of the sample buffered before any query (µs).
const HISTORY_TIME_STAMP_USEC: u64 = 50;
const DEVICE_COUNT: usize = 2;

/// `nvmlMemory_t` (v1).
#[repr(C)]
pub struct Memory {
    total: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct MemoryV2 {
    version: c_uint,
    total: c_ulonglong,
    reserved: c_ulonglong,
    free: c_ulonglong,
    used: c_ulonglong,
}

/// `nvmlUtilization_t`.
#[repr(C)]
pub struct Utilization {
    gpu: c_uint,
    memory: c_uint,
}

/// `nvmlProcessInfo_t` as used by the `_v3` process lists.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

/// `nvmlProcessUtilizationSample_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProcessUtilizationSample {
    pid: c_uint,
    time_stamp: c_ulonglong,
    sm_util: c_uint,
    mem_util: c_uint,
    enc_util: c_uint,
    dec_util: c_uint,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    TwoDevices,
    UuidFails,
    NotSupported,
    CountFails,
    InitFails,
}

impl Scenario {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "" | "two_devices" => Some(Self::TwoDevices),
            "uuid_fails" => Some(Self::UuidFails),
            "not_supported" => Some(Self::NotSupported),
            "count_fails" => Some(Self::CountFails),
            "init_fails" => Some(Self::InitFails),
            _ => None,
        }
    }
}

struct Script {
    scenario: Scenario,
    pids: [u32; 3],
    /// Filled process-utilisation queries per device: the fake driver's sample clock.
    utilization_generation: [u64; DEVICE_COUNT],
}

/// `None` until `nvmlInit_v2` succeeds (and again after `nvmlShutdown`).
static STATE: Mutex<Option<Script>> = Mutex::new(None);

/// Device handles are the addresses of these bytes: distinct, stable and never dereferenced.
static HANDLES: [u8; DEVICE_COUNT] = [0, 1];

fn state() -> MutexGuard<'static, Option<Script>> {
    // A poisoned lock only means a previous call panicked; the script data is still valid.
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn handle_of(index: usize) -> *mut c_void {
    std::ptr::from_ref(&HANDLES[index]).cast_mut().cast()
}

fn index_of(device: *mut c_void) -> Option<usize> {
    (0..DEVICE_COUNT).find(|&index| handle_of(index) == device)
}

fn parse_pids(text: &str) -> Option<[u32; 3]> {
    let mut pids = [1000, 2000, 3000];
    for (slot, part) in text.split(',').filter(|part| !part.is_empty()).enumerate() {
        *pids.get_mut(slot)? = part.trim().parse().ok()?;
    }
    Some(pids)
}

/// Runs `body` with the script of an initialised library and the index of `device`.
fn with_device(
    device: *mut c_void,
    body: impl FnOnce(&mut Script, usize) -> NvmlReturn,
) -> NvmlReturn {
    let mut guard = state();
    let Some(script) = guard.as_mut() else {
        return ERROR_UNINITIALIZED;
    };
    match index_of(device) {
        Some(index) => body(script, index),
        None => ERROR_INVALID_ARGUMENT,
    }
}

fn compute_processes(script: &Script, index: usize) -> Result<Vec<ProcessInfo>, NvmlReturn> {
    let [a, b, c] = script.pids;
    match (index, script.scenario) {
        (0, Scenario::NotSupported) => Err(ERROR_NOT_SUPPORTED),
        (0, _) => Ok(vec![process(a, 4096), process(b, MIB)]),
        _ => Ok(vec![process(c, VALUE_NOT_AVAILABLE)]),
    }
}

fn graphics_processes(script: &Script, index: usize) -> Vec<ProcessInfo> {
    match index {
        0 => vec![process(script.pids[0], 8192)],
        _ => Vec::new(),
    }
}

fn process(pid: u32, used_gpu_memory: u64) -> ProcessInfo {
    ProcessInfo {
        pid,
        used_gpu_memory,
        gpu_instance_id: NO_INSTANCE,
        compute_instance_id: NO_INSTANCE,
    }
}

/// The samples the driver holds at `generation` that are newer than `last_seen_usec`.
fn utilization_samples(
    script: &Script,
    index: usize,
    generation: u64,
    last_seen_usec: u64,
) -> Vec<ProcessUtilizationSample> {
    let [a, b, c] = script.pids;
    let base_usec = generation * 1_000_000;
    let scripted: &[(u32, u64, u32)] = match index {
        0 => &[(a, 100, 20), (a, 200, 30), (c, 150, 5)],
        _ => &[(c, 100, 70)],
    };
    // Device 0's buffer still holds one sample from before the first query (pid b, sm 99): only
    // a caller that passes no or a stale `lastSeenTimeStamp` gets it.
    let history: &[(u32, u64, u32)] = match index {
        0 => &[(b, HISTORY_TIME_STAMP_USEC, 99)],
        _ => &[],
    };
    let current = scripted
        .iter()
        .map(|&(pid, offset_usec, sm_util)| (pid, base_usec + offset_usec, sm_util));
    history
        .iter()
        .copied()
        .chain(current)
        .map(|(pid, time_stamp, sm_util)| ProcessUtilizationSample {
            pid,
            time_stamp,
            sm_util,
            mem_util: 0,
            enc_util: 0,
            dec_util: 0,
        })
        .filter(|sample| sample.time_stamp > last_seen_usec)
        .collect()
}

/// NVML's two-call protocol for lists: a count query (null buffer or too small) gets the needed
/// size and `INSUFFICIENT_SIZE` (or `SUCCESS` when the list is empty), a big enough buffer is
/// filled.
///
/// # Safety
/// `count` must be valid for reads and writes; `out`, if not null, must be valid for `*count`
/// writes of `T`.
unsafe fn fill_list<T: Copy>(items: &[T], count: *mut c_uint, out: *mut T) -> NvmlReturn {
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
unsafe fn write_c_string(text: &str, out: *mut c_char, length: c_uint) -> NvmlReturn {
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
unsafe fn write_out<T>(out: *mut T, value: T) -> NvmlReturn {
    if out.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, and the caller guarantees validity.
    unsafe { out.write(value) };
    SUCCESS
}

/// `nvmlInit_v2`: reads the scenario and PIDs from the environment.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    let name = std::env::var("FAKE_NVML_SCENARIO").unwrap_or_default();
    let Some(scenario) = Scenario::parse(&name) else {
        eprintln!("fake-nvml: unknown FAKE_NVML_SCENARIO {name:?}");
        return ERROR_UNKNOWN;
    };
    if scenario == Scenario::InitFails {
        return ERROR_DRIVER_NOT_LOADED;
    }
    let pid_text = std::env::var("FAKE_NVML_PIDS").unwrap_or_default();
    let Some(pids) = parse_pids(&pid_text) else {
        eprintln!("fake-nvml: malformed FAKE_NVML_PIDS {pid_text:?}");
        return ERROR_UNKNOWN;
    };
    *state() = Some(Script {
        scenario,
        pids,
        utilization_generation: [0; DEVICE_COUNT],
    });
    SUCCESS
}

/// `nvmlShutdown`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    match state().take() {
        Some(_) => SUCCESS,
        None => ERROR_UNINITIALIZED,
    }
}

/// `nvmlErrorString`: a static description of `result`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: NvmlReturn) -> *const c_char {
    let text: &'static [u8] = match result {
        SUCCESS => b"Success\0",
        ERROR_UNINITIALIZED => b"Uninitialized\0",
        ERROR_INVALID_ARGUMENT => b"Invalid Argument\0",
        ERROR_NOT_SUPPORTED => b"Not Supported\0",
        ERROR_NOT_FOUND => b"Not Found\0",
        ERROR_INSUFFICIENT_SIZE => b"Insufficient Size\0",
        ERROR_DRIVER_NOT_LOADED => b"Driver Not Loaded\0",
        _ => b"Unknown Error\0",
    };
    text.as_ptr().cast()
}

/// `nvmlSystemGetDriverVersion`: a plausible driver version.
///
/// # Safety
/// `version` must be valid for `length` byte writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(
    version: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    if state().is_none() {
        return ERROR_UNINITIALIZED;
    }
    // SAFETY: forwarded from the caller's contract.
    unsafe { write_c_string("550.54.15", version, length) }
}

/// `nvmlDeviceGetCount_v2`.
///
/// # Safety
/// `device_count` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetCount_v2(device_count: *mut c_uint) -> NvmlReturn {
    let scenario = match state().as_ref() {
        Some(script) => script.scenario,
        None => return ERROR_UNINITIALIZED,
    };
    if scenario == Scenario::CountFails {
        return ERROR_UNKNOWN;
    }
    // SAFETY: forwarded from the caller's contract.
    unsafe { write_out(device_count, DEVICE_COUNT as c_uint) }
}

/// `nvmlDeviceGetHandleByIndex_v2`.
///
/// # Safety
/// `device` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetHandleByIndex_v2(
    index: c_uint,
    device: *mut *mut c_void,
) -> NvmlReturn {
    if state().is_none() {
        return ERROR_UNINITIALIZED;
    }
    match usize::try_from(index) {
        Ok(index) if index < DEVICE_COUNT => {
            // SAFETY: forwarded from the caller's contract.
            unsafe { write_out(device, handle_of(index)) }
        }
        _ => ERROR_INVALID_ARGUMENT,
    }
}

/// `nvmlDeviceGetIndex`.
///
/// # Safety
/// `index` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetIndex(device: *mut c_void, index: *mut c_uint) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    with_device(device, |_, found| unsafe {
        write_out(index, found as c_uint)
    })
}

/// `nvmlDeviceGetUUID`.
///
/// # Safety
/// `uuid` must be valid for `length` byte writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetUUID(
    device: *mut c_void,
    uuid: *mut c_char,
    length: c_uint,
) -> NvmlReturn {
    with_device(device, |script, index| {
        if index == 0 && script.scenario == Scenario::UuidFails {
            return ERROR_UNKNOWN;
        }
        let text = format!("GPU-6a1f0c3e-0000-4000-8000-{index:012}");
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_c_string(&text, uuid, length) }
    })
}

/// `nvmlDeviceGetMemoryInfo` (v1 struct; `used` includes the driver's reserved memory).
///
/// # Safety
/// `memory` must be valid for a write.
#[cfg_attr(not(feature = "missing-optional-symbols"), unsafe(no_mangle))]
#[cfg_attr(
    feature = "missing-optional-symbols",
    expect(
        non_snake_case,
        reason = "NVML's C name, left unexported in this build"
    )
)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
    device: *mut c_void,
    memory: *mut Memory,
) -> NvmlReturn {
    with_device(device, |script, index| {
        if index == 1 && script.scenario == Scenario::NotSupported {
            return ERROR_NOT_SUPPORTED;
        }
        let used = (index as u64 + 1) * 4 * MIB;
        let total = 16 * 1024 * MIB;
        let value = Memory {
            total,
            free: total - used,
            used,
        };
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(memory, value) }
    })
}

/// `nvmlDeviceGetMemoryInfo_v2` (`used` excludes the 1 MiB reserved).
///
/// # Safety
/// `memory` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo_v2(
    device: *mut c_void,
    memory: *mut MemoryV2,
) -> NvmlReturn {
    with_device(device, |script, index| {
        if index == 1 && script.scenario == Scenario::NotSupported {
            return ERROR_NOT_SUPPORTED;
        }
        let reserved = MIB;
        let used = (index as u64 + 1) * 4 * MIB - reserved;
        let total = 16 * 1024 * MIB;
        let value = MemoryV2 {
            version: (std::mem::size_of::<MemoryV2>() | (2 << 24)) as c_uint,
            total,
            reserved,
            free: total - used - reserved,
            used,
        };
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(memory, value) }
    })
}

/// `nvmlDeviceGetUtilizationRates`.
///
/// # Safety
/// `utilization` must be valid for a write.
#[cfg_attr(not(feature = "missing-optional-symbols"), unsafe(no_mangle))]
#[cfg_attr(
    feature = "missing-optional-symbols",
    expect(
        non_snake_case,
        reason = "NVML's C name, left unexported in this build"
    )
)]
pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
    device: *mut c_void,
    utilization: *mut Utilization,
) -> NvmlReturn {
    with_device(device, |script, index| {
        if index == 1 && script.scenario == Scenario::NotSupported {
            return ERROR_NOT_SUPPORTED;
        }
        let value = Utilization {
            gpu: (index as c_uint + 1) * 25,
            memory: 10,
        };
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(utilization, value) }
    })
}

/// `nvmlDeviceGetComputeRunningProcesses_v3`.
///
/// # Safety
/// `info_count` must be valid for reads and writes; `infos`, if not null, for `*info_count`
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: *mut c_void,
    info_count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    with_device(device, |script, index| {
        match compute_processes(script, index) {
            // SAFETY: forwarded from the caller's contract.
            Ok(list) => unsafe { fill_list(&list, info_count, infos) },
            Err(code) => code,
        }
    })
}

/// `nvmlDeviceGetGraphicsRunningProcesses_v3`.
///
/// # Safety
/// As for `nvmlDeviceGetComputeRunningProcesses_v3`.
#[cfg_attr(not(feature = "missing-optional-symbols"), unsafe(no_mangle))]
#[cfg_attr(
    feature = "missing-optional-symbols",
    expect(
        non_snake_case,
        reason = "NVML's C name, left unexported in this build"
    )
)]
pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
    device: *mut c_void,
    info_count: *mut c_uint,
    infos: *mut ProcessInfo,
) -> NvmlReturn {
    with_device(device, |script, index| {
        let list = graphics_processes(script, index);
        // SAFETY: forwarded from the caller's contract.
        unsafe { fill_list(&list, info_count, infos) }
    })
}

/// `nvmlDeviceGetProcessUtilization`: samples newer than `last_seen_time_stamp`; a null buffer
/// asks for the count of the next query.
///
/// # Safety
/// `samples_count` must be valid for reads and writes; `utilization`, if not null, for
/// `*samples_count` writes.
#[cfg_attr(not(feature = "missing-optional-symbols"), unsafe(no_mangle))]
#[cfg_attr(
    feature = "missing-optional-symbols",
    expect(
        non_snake_case,
        reason = "NVML's C name, left unexported in this build"
    )
)]
pub unsafe extern "C" fn nvmlDeviceGetProcessUtilization(
    device: *mut c_void,
    utilization: *mut ProcessUtilizationSample,
    samples_count: *mut c_uint,
    last_seen_time_stamp: c_ulonglong,
) -> NvmlReturn {
    with_device(device, |script, index| {
        // A count query previews the next generation; only a filled query advances the clock.
        let generation = script.utilization_generation[index] + 1;
        let samples = utilization_samples(script, index, generation, last_seen_time_stamp);
        if samples.is_empty() {
            return ERROR_NOT_FOUND;
        }
        // SAFETY: forwarded from the caller's contract.
        let code = unsafe { fill_list(&samples, samples_count, utilization) };
        if code == SUCCESS && !utilization.is_null() {
            script.utilization_generation[index] = generation;
        }
        code
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_parse_with_defaults_for_missing_entries() {
        assert_eq!(parse_pids(""), Some([1000, 2000, 3000]));
        assert_eq!(parse_pids("7,8"), Some([7, 8, 3000]));
        assert_eq!(parse_pids("1,2,3,4"), None);
        assert_eq!(parse_pids("x"), None);
    }

    #[test]
    fn utilization_samples_are_filtered_by_last_seen() {
        let script = Script {
            scenario: Scenario::TwoDevices,
            pids: [1, 2, 3],
            utilization_generation: [0; DEVICE_COUNT],
        };
        assert_eq!(utilization_samples(&script, 0, 1, 0).len(), 4);
        assert_eq!(utilization_samples(&script, 0, 1, 50).len(), 3);
        assert_eq!(utilization_samples(&script, 0, 1, 1_000_150).len(), 1);
        assert!(utilization_samples(&script, 0, 1, 1_000_200).is_empty());
    }
}
