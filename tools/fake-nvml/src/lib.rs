//! A scripted stand-in for `libnvidia-ml.so.1`.
//!
//! No GPU exists on the machines that build relay-metrics, yet the GPU source must be tested
//! through the real path: `dlopen`, lazy symbol lookup by `nvml-wrapper`, the NVML calling
//! conventions (count queries answered with `NVML_ERROR_INSUFFICIENT_SIZE`, caller-sized buffers,
//! `NVML_VALUE_NOT_AVAILABLE`, `lastSeenTimeStamp`). This library exports those entry points and
//! serves two scripted devices, or eight in `big_host`.
//!
//! Behaviour is chosen when `nvmlInit_v2` runs, from two environment variables:
//! - `FAKE_NVML_SCENARIO`: `two_devices` (default), `uuid_fails` (device 0 has no UUID),
//!   `not_supported` (device 0's compute list, device 1's memory and utilisation answer
//!   `NVML_ERROR_NOT_SUPPORTED`), `count_fails` (`nvmlDeviceGetCount_v2` fails), `init_fails`
//!   (`nvmlInit_v2` answers `NVML_ERROR_DRIVER_NOT_LOADED`), `big_host` (8 devices and 200
//!   processes whose values are formulas: see the `big_host` module).
//! - `FAKE_NVML_PIDS`: up to 200 comma-separated PIDs, so a test can put real processes in. The
//!   two-device scenarios use the first three as `a,b,c` (default `1000,2000,3000`); `big_host`
//!   the `p`-th as process slot `p` (default `10000 + p`).
//! - `FAKE_NVML_GROWTH`: a number n (default 0). Every odd count query (null buffer) of a
//!   device's compute, graphics or utilisation-sample list reports n entries fewer than the list
//!   holds, as if processes started or samples arrived between the count and the fill: a fill
//!   into a buffer sized by that count answers `NVML_ERROR_INSUFFICIENT_SIZE`, as the driver
//!   does, and the next count query is right.
//!
//! The script (bytes; "sm" and "mem" are per-process SM and memory utilisation in percent):
//!
//! | device | UUID | memory v1 used / v2 used+reserved | utilisation | compute | graphics | utilisation samples |
//! | --- | --- | --- | --- | --- | --- | --- |
//! | 0 | `GPU-6a1f0c3e-0000-4000-8000-000000000000` | 4 MiB / 3 MiB + 1 MiB | 25 % | a: 4096, b: 1 MiB | a: 8192 | a: sm 20 mem 10 then (newer) sm 30 mem 12; c: sm 5 mem 2; buffered before the first query: b: sm 99 mem 88 at 50 µs |
//! | 1 | `GPU-6a1f0c3e-0000-4000-8000-000000000001` | 8 MiB / 7 MiB + 1 MiB | 50 % | c: not available | none | c: sm 70 mem 40 |
//!
//! In `big_host`, device `d` (0 to 7) uses `4 (d + 1)` MiB (v1; v2 `4 (d + 1) - 1` MiB + 1 MiB
//! reserved) and is `10 (d + 1)` % busy; its other values are the timeline's defaults, which are
//! formulas of `d` too (see `timeline`).
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

mod big_host;
mod events;
mod ffi;
mod script;
mod timeline;
mod values;

use std::ffi::{c_char, c_uint, c_ulonglong, c_void};
use std::sync::{Mutex, MutexGuard, PoisonError};

use ffi::{
    fill_list, write_c_string, write_out, Memory, MemoryV2, NvmlReturn, ProcessInfo,
    ProcessUtilizationSample, Utilization, ERROR_DRIVER_NOT_LOADED, ERROR_GPU_IS_LOST,
    ERROR_INSUFFICIENT_SIZE, ERROR_INVALID_ARGUMENT, ERROR_NOT_FOUND, ERROR_NOT_SUPPORTED,
    ERROR_TIMEOUT, ERROR_UNINITIALIZED, ERROR_UNKNOWN, SUCCESS,
};
use script::{
    compute_processes, graphics_processes, parse_pids, utilization_samples, List, Scenario, Script,
    MAX_DEVICES, MIB,
};

/// Exports an NVML entry point, except in the `missing-optional-symbols` build, which leaves it
/// out as a driver too old for it would (the function stays, under a mangled name).
macro_rules! optional_symbol {
    ($(#[$meta:meta])* pub unsafe extern "C" fn $name:ident $($rest:tt)*) => {
        $(#[$meta])*
        #[cfg_attr(not(feature = "missing-optional-symbols"), unsafe(no_mangle))]
        #[cfg_attr(
            feature = "missing-optional-symbols",
            expect(non_snake_case, reason = "NVML's C name, left unexported in this build")
        )]
        pub unsafe extern "C" fn $name $($rest)*
    };
}

/// `None` until `nvmlInit_v2` succeeds (and again after `nvmlShutdown`).
static STATE: Mutex<Option<Script>> = Mutex::new(None);

/// Device handles are the addresses of these bytes: distinct, stable and never dereferenced.
/// The first [`MAX_DEVICES`] are the devices, the others device 1's MIG instances.
static HANDLES: [u8; MAX_DEVICES + MIG_INSTANCES] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];

/// MIG instances of device 1 (in MIG mode by default).
const MIG_INSTANCES: usize = 2;

fn state() -> MutexGuard<'static, Option<Script>> {
    // A poisoned lock only means a previous call panicked; the script data is still valid.
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn handle_of(index: usize) -> *mut c_void {
    std::ptr::from_ref(&HANDLES[index]).cast_mut().cast()
}

/// The device index of a handle (of any scenario: [`with_device`] checks the scenario's count).
fn index_of(device: *mut c_void) -> Option<usize> {
    (0..MAX_DEVICES).find(|&index| handle_of(index) == device)
}

/// The MIG instance (0 or 1 of device 1) whose handle is `device`.
fn mig_instance_of(device: *mut c_void) -> Option<usize> {
    (0..MIG_INSTANCES).find(|&instance| handle_of(MAX_DEVICES + instance) == device)
}

/// Runs `body` with the script of an initialised library and the index of `device`; a device
/// the scenario has lost answers `NVML_ERROR_GPU_IS_LOST`.
fn with_device(
    device: *mut c_void,
    body: impl FnOnce(&mut Script, usize) -> NvmlReturn,
) -> NvmlReturn {
    stall(device);
    let mut guard = state();
    let Some(script) = guard.as_mut() else {
        return ERROR_UNINITIALIZED;
    };
    match index_of(device).filter(|&index| index < script.scenario.device_count()) {
        Some(index) if script.timeline.device(index).lost => ERROR_GPU_IS_LOST,
        Some(index) => body(script, index),
        None => ERROR_INVALID_ARGUMENT,
    }
}

/// Sleeps for the device's scripted `stall_ms` (without holding the state, so that other
/// threads' queries go on).
fn stall(device: *mut c_void) {
    let pause = {
        let guard = state();
        guard.as_ref().and_then(|script| {
            let index = index_of(device).filter(|&i| i < script.scenario.device_count())?;
            script.timeline.device(index).get(timeline::Key::StallMs)
        })
    };
    if let Some(ms) = pause.filter(|&ms| ms > 0) {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

/// Answers a per-device query with one struct: `NOT_SUPPORTED` for device 1 in the
/// `not_supported` scenario, else `value(index)` written to `out`.
///
/// # Safety
/// `out` must be valid for a write.
unsafe fn device_struct<T>(
    device: *mut c_void,
    out: *mut T,
    value: impl FnOnce(usize, Scenario) -> T,
) -> NvmlReturn {
    with_device(device, |script, index| {
        if index == 1 && script.scenario == Scenario::NotSupported {
            return ERROR_NOT_SUPPORTED;
        }
        // SAFETY: forwarded from the caller's contract.
        unsafe { write_out(out, value(index, script.scenario)) }
    })
}

/// [`fill_list`], except that a count query (null buffer) of a list that `FAKE_NVML_GROWTH`
/// makes grow reports it shorter (see [`Script::counted`]).
///
/// # Safety
/// As for [`fill_list`].
unsafe fn answer_list<T: Copy>(
    script: &mut Script,
    index: usize,
    list: List,
    items: &[T],
    count: *mut c_uint,
    out: *mut T,
) -> NvmlReturn {
    let shown = if out.is_null() {
        script.counted(index, list, items.len())
    } else {
        items.len()
    };
    // SAFETY: forwarded from the caller's contract; `shown <= items.len()`.
    unsafe { fill_list(&items[..shown], count, out) }
}

/// Memory in use on device `index` as NVML's v1 struct counts it (the reserved MiB included).
fn used_with_reserved(index: usize) -> u64 {
    (index as u64 + 1) * 4 * MIB
}

/// Every device's memory.
const TOTAL_MEMORY: u64 = 16 * 1024 * MIB;

/// `nvmlInit_v2`: reads the scenario, PIDs and scenario file from the environment; a second
/// call only counts a session, as NVML's does.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> NvmlReturn {
    if let Some(script) = state().as_mut() {
        script.sessions += 1;
        return SUCCESS;
    }
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
    let growth_text = std::env::var("FAKE_NVML_GROWTH").unwrap_or_default();
    let Ok(growth) = (if growth_text.is_empty() {
        Ok(0)
    } else {
        growth_text.parse()
    }) else {
        eprintln!("fake-nvml: malformed FAKE_NVML_GROWTH {growth_text:?}");
        return ERROR_UNKNOWN;
    };
    let timeline = match timeline::Timeline::from_env() {
        Ok(timeline) => timeline,
        Err(error) => {
            eprintln!("fake-nvml: bad FAKE_NVML_SCRIPT: {error}");
            return ERROR_UNKNOWN;
        }
    };
    *state() = Some(Script {
        scenario,
        sessions: 1,
        timeline,
        pids,
        utilization_generation: [0; MAX_DEVICES],
        growth,
        count_queries: [[0; 3]; MAX_DEVICES],
    });
    SUCCESS
}

/// `nvmlInitWithFlags`, which pynvml (`nvidia-ml-py`) calls: `nvmlInit_v2`, the flags ignored
/// (so `scripts/gpu-check.sh`'s pynvml side can be dry-run against this library).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> NvmlReturn {
    nvmlInit_v2()
}

/// `nvmlShutdown`: the last session's shutdown forgets the script.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> NvmlReturn {
    let mut guard = state();
    match guard.as_mut() {
        Some(script) if script.sessions > 1 => {
            script.sessions -= 1;
            SUCCESS
        }
        Some(_) => {
            *guard = None;
            SUCCESS
        }
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
        ERROR_TIMEOUT => b"Timeout\0",
        ERROR_GPU_IS_LOST => b"GPU is lost\0",
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
    unsafe { write_out(device_count, scenario.device_count() as c_uint) }
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
    let guard = state();
    let Some(script) = guard.as_ref() else {
        return ERROR_UNINITIALIZED;
    };
    let count = script.scenario.device_count();
    match usize::try_from(index) {
        Ok(index) if index < count && script.timeline.device(index).lost => ERROR_GPU_IS_LOST,
        Ok(index) if index < count => {
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

optional_symbol! {
    /// `nvmlDeviceGetMemoryInfo` (v1 struct; `used` includes the driver's reserved memory).
    ///
    /// # Safety
    /// `memory` must be valid for a write.
    pub unsafe extern "C" fn nvmlDeviceGetMemoryInfo(
        device: *mut c_void,
        memory: *mut Memory,
    ) -> NvmlReturn {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            device_struct(device, memory, |index, _| Memory {
                total: TOTAL_MEMORY,
                free: TOTAL_MEMORY - used_with_reserved(index),
                used: used_with_reserved(index),
            })
        }
    }
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
    if let Some(instance) = mig_instance_of(device) {
        // SAFETY: forwarded from the caller's contract.
        return unsafe { values::mig_instance_memory(instance, memory) };
    }
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        device_struct(device, memory, |index, _| {
            let used = used_with_reserved(index) - MIB;
            MemoryV2 {
                version: (std::mem::size_of::<MemoryV2>() | (2 << 24)) as c_uint,
                total: TOTAL_MEMORY,
                reserved: MIB,
                free: TOTAL_MEMORY - used - MIB,
                used,
            }
        })
    }
}

optional_symbol! {
    /// `nvmlDeviceGetUtilizationRates`.
    ///
    /// # Safety
    /// `utilization` must be valid for a write.
    pub unsafe extern "C" fn nvmlDeviceGetUtilizationRates(
        device: *mut c_void,
        utilization: *mut Utilization,
    ) -> NvmlReturn {
        // SAFETY: forwarded from the caller's contract.
        unsafe {
            device_struct(device, utilization, |index, scenario| Utilization {
                gpu: (index as c_uint + 1) * if scenario == Scenario::BigHost { 10 } else { 25 },
                memory: 10,
            })
        }
    }
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
            Ok(list) => unsafe {
                answer_list(script, index, List::Compute, &list, info_count, infos)
            },
            Err(code) => code,
        }
    })
}

optional_symbol! {
    /// `nvmlDeviceGetGraphicsRunningProcesses_v3`.
    ///
    /// # Safety
    /// As for `nvmlDeviceGetComputeRunningProcesses_v3`.
    pub unsafe extern "C" fn nvmlDeviceGetGraphicsRunningProcesses_v3(
        device: *mut c_void,
        info_count: *mut c_uint,
        infos: *mut ProcessInfo,
    ) -> NvmlReturn {
        with_device(device, |script, index| {
            let list = graphics_processes(script, index);
            // SAFETY: forwarded from the caller's contract.
            unsafe { answer_list(script, index, List::Graphics, &list, info_count, infos) }
        })
    }
}

optional_symbol! {
    /// `nvmlDeviceGetProcessUtilization`: samples newer than `last_seen_time_stamp`; a null buffer
    /// asks for the count of the next query.
    ///
    /// # Safety
    /// `samples_count` must be valid for reads and writes; `utilization`, if not null, for
    /// `*samples_count` writes.
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
            let code = unsafe {
                answer_list(script, index, List::Utilization, &samples, samples_count, utilization)
            };
            if code == SUCCESS && !utilization.is_null() {
                script.utilization_generation[index] = generation;
            }
            code
        })
    }
}
