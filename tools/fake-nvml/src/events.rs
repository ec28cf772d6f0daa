//! NVML's event API for XID critical errors: `nvmlEventSetCreate`, `nvmlDeviceRegisterEvents`,
//! `nvmlEventSetWait_v2`, `nvmlEventSetFree`. Each set delivers every scripted XID event of the
//! devices registered on it once, when the timeline's clock reaches it.

use std::ffi::{c_uint, c_ulonglong, c_void};
use std::time::{Duration, Instant};

use crate::ffi::{
    write_out, EventData, NvmlReturn, ERROR_INVALID_ARGUMENT, ERROR_TIMEOUT, ERROR_UNINITIALIZED,
    NO_INSTANCE, SUCCESS,
};
use crate::{handle_of, index_of, state, with_device};

/// `nvmlEventTypeXidCriticalError`.
const EVENT_XID: c_ulonglong = 0x8;

/// An event set: the devices registered for XID events, and how many of the scenario's XID
/// events it has passed.
struct EventSet {
    xid_devices: Vec<usize>,
    passed: usize,
}

/// `nvmlEventSetCreate`.
///
/// # Safety
/// `set` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetCreate(set: *mut *mut c_void) -> NvmlReturn {
    if state().is_none() {
        return ERROR_UNINITIALIZED;
    }
    if set.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    let created = Box::into_raw(Box::new(EventSet {
        xid_devices: Vec::new(),
        passed: 0,
    }));
    // SAFETY: forwarded from the caller's contract.
    unsafe { write_out(set, created.cast()) }
}

/// `nvmlEventSetFree`.
///
/// # Safety
/// `set` must come from `nvmlEventSetCreate` and not be used afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetFree(set: *mut c_void) -> NvmlReturn {
    if set.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller hands back a set made by `Box::into_raw` in nvmlEventSetCreate.
    drop(unsafe { Box::from_raw(set.cast::<EventSet>()) });
    SUCCESS
}

/// `nvmlDeviceGetSupportedEventTypes`: XID critical errors only.
///
/// # Safety
/// `types` must be valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceGetSupportedEventTypes(
    device: *mut c_void,
    types: *mut c_ulonglong,
) -> NvmlReturn {
    // SAFETY: forwarded from the caller's contract.
    with_device(device, |_, _| unsafe { write_out(types, EVENT_XID) })
}

/// `nvmlDeviceRegisterEvents`: only the XID bit is kept.
///
/// # Safety
/// `set` must come from `nvmlEventSetCreate`, used by one thread at a time.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlDeviceRegisterEvents(
    device: *mut c_void,
    event_types: c_ulonglong,
    set: *mut c_void,
) -> NvmlReturn {
    if set.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract: a live set of ours, not used concurrently.
    let set = unsafe { &mut *set.cast::<EventSet>() };
    with_device(device, |_, index| {
        if event_types & EVENT_XID != 0 && !set.xid_devices.contains(&index) {
            set.xid_devices.push(index);
        }
        SUCCESS
    })
}

/// What the set should do next.
enum Next {
    Deliver {
        device: usize,
        xid: u64,
    },
    /// Nothing due: sleep until then (`None`: poll the clock file).
    Sleep(Option<Instant>),
    NothingLeft,
}

/// `nvmlEventSetWait_v2`: the next due XID event of a registered device, or `NVML_ERROR_TIMEOUT`
/// after `timeout_ms`.
///
/// # Safety
/// `set` must come from `nvmlEventSetCreate`, used by one thread at a time; `data` must be
/// valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn nvmlEventSetWait_v2(
    set: *mut c_void,
    data: *mut EventData,
    timeout_ms: c_uint,
) -> NvmlReturn {
    if set.is_null() || data.is_null() {
        return ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: the caller's contract: a live set of ours, not used concurrently.
    let set = unsafe { &mut *set.cast::<EventSet>() };
    let deadline = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    loop {
        let next = {
            let guard = state();
            let Some(script) = guard.as_ref() else {
                return ERROR_UNINITIALIZED;
            };
            let events = script.timeline.xid_events();
            let now_ms = script.timeline.now_ms();
            let mut next = Next::NothingLeft;
            while let Some(event) = events.get(set.passed) {
                if !set.xid_devices.contains(&event.device) {
                    set.passed += 1;
                    continue;
                }
                next = if event.at_ms <= now_ms {
                    set.passed += 1;
                    Next::Deliver {
                        device: event.device,
                        xid: event.xid,
                    }
                } else {
                    Next::Sleep(script.timeline.due_instant(event.at_ms))
                };
                break;
            }
            next
        };
        let now = Instant::now();
        match next {
            Next::Deliver { device, xid } => {
                let event = EventData {
                    device: handle_of(device),
                    event_type: EVENT_XID,
                    event_data: xid,
                    gpu_instance_id: NO_INSTANCE,
                    compute_instance_id: NO_INSTANCE,
                };
                debug_assert!(index_of(event.device).is_some());
                // SAFETY: forwarded from the caller's contract.
                return unsafe { write_out(data, event) };
            }
            _ if now >= deadline => return ERROR_TIMEOUT,
            Next::Sleep(Some(due)) => {
                std::thread::sleep(due.min(deadline).saturating_duration_since(now));
            }
            Next::Sleep(None) => {
                std::thread::sleep(Duration::from_millis(1).min(deadline - now));
            }
            Next::NothingLeft => std::thread::sleep(deadline.saturating_duration_since(now)),
        }
    }
}
