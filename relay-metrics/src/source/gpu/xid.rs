//! XID errors through NVML's event API, on a thread of their own: `nvmlEventSetWait_v2` blocks
//! until the driver raises an event, so waiting there costs nothing and an XID is counted as it
//! happens, not at the next device query.
//!
//! The thread opens its own NVML session (NVML counts sessions; the library is loaded once per
//! process), registers every selected device for `nvmlEventTypeXidCriticalError`, and waits in
//! slices of [`WAIT_SLICE_MS`] so that it notices a stop request. A failure (no library, no
//! event support, a device lost) is kept as the reason the counts may be incomplete, and the
//! set is rebuilt after [`REBUILD_PAUSE`], so a device that returns is registered again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{EventSet, Nvml};

use super::device_selected;
use super::nvml::{load, unload, NvmlOptions};

/// How long one wait blocks before the stop flag is checked.
const WAIT_SLICE_MS: u32 = 50;

/// How long after a failure the session or the event set is built again.
const REBUILD_PAUSE: Duration = Duration::from_secs(1);

/// XID errors of one device since the watcher started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XidDevice {
    /// NVML index.
    pub index: u32,
    /// UUID, or `nvidia:<index>` when it could not be read.
    pub identifier: String,
    /// Errors per XID code.
    pub counts: BTreeMap<u64, u64>,
    /// When the newest one was received.
    pub last_received: Option<Instant>,
}

/// What the watcher has received so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XidCounts {
    /// Devices with at least one XID error, by index.
    pub devices: Vec<XidDevice>,
    /// Whether an event set is registered and being waited on now.
    pub listening: bool,
    /// Why events are not (or not all) being received, when that is so.
    pub error: Option<String>,
}

struct Shared {
    counts: Mutex<XidCounts>,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, XidCounts> {
        // Plain counters: still consistent if a holder panicked.
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Sleeps up to `duration` (parked: a stop request unparks the thread, so dropping the
    /// watcher does not wait for a sleep to end); `false` when asked to stop.
    fn pause(&self, duration: Duration) -> bool {
        let until = Instant::now() + duration;
        loop {
            if self.stopped() {
                return false;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            std::thread::park_timeout(left);
        }
    }
}

/// Counts XID errors on a thread of its own; dropping it stops and joins the thread (within
/// one wait slice).
pub struct XidWatcher {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for XidWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XidWatcher")
            .field("counts", &*self.shared.lock())
            .finish()
    }
}

impl XidWatcher {
    /// Starts the thread on the library and device selection of `options`.
    pub fn spawn(options: NvmlOptions) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            counts: Mutex::new(XidCounts::default()),
            stop: AtomicBool::new(false),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("relay-metrics-xid".to_string())
            .spawn(move || run(&options, &thread_shared))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// A copy of the counts so far (a short lock; never waits on NVML).
    pub fn counts(&self) -> XidCounts {
        self.shared.lock().clone()
    }

    /// Calls `read` with the counts under the lock (no copy).
    pub fn with_counts<R>(&self, read: impl FnOnce(&XidCounts) -> R) -> R {
        read(&self.shared.lock())
    }
}

impl Drop for XidWatcher {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            // A panic on the thread has already been reported by the panic hook.
            let _ = thread.join();
        }
    }
}

fn run(options: &NvmlOptions, shared: &Shared) {
    while !shared.stopped() {
        let nvml = match load(options.library.as_deref().map(|path| path.as_os_str())) {
            Ok(nvml) => nvml,
            Err(error) => {
                shared.lock().error = Some(error.to_string());
                if !shared.pause(options.retry_interval) {
                    return;
                }
                continue;
            }
        };
        listen(&nvml, options, shared);
        shared.lock().listening = false;
        unload(nvml);
        if !shared.pause(REBUILD_PAUSE) {
            return;
        }
    }
}

/// Registers the selected devices and counts their events until a failure or a stop.
fn listen(nvml: &Nvml, options: &NvmlOptions, shared: &Shared) {
    // `EventSet`'s drop calls the raw `nvmlEventSetFree`: never build one without it.
    let lib = nvml.lib();
    if let Err(error) = lib
        .nvmlEventSetFree
        .as_ref()
        .and(lib.nvmlEventSetWait_v2.as_ref())
    {
        shared.lock().error = Some(format!("NVML has no event API: {error}"));
        // Nothing will change while this library stays loaded.
        while shared.pause(Duration::from_secs(3600)) {}
        return;
    }
    let (set, problems) = match register(nvml, options) {
        Ok(built) => built,
        Err(error) => {
            shared.lock().error = Some(format!("cannot listen for XID events: {error}"));
            return;
        }
    };
    {
        let mut counts = shared.lock();
        counts.listening = true;
        counts.error = (!problems.is_empty()).then(|| problems.join("; "));
    }
    while !shared.stopped() {
        match set.wait(WAIT_SLICE_MS) {
            Ok(event) => {
                let received = Instant::now();
                let xid = match event.event_data {
                    Some(XidError::Value(xid)) => xid,
                    // NVML's "unknown XID" (999): counted, under its own code.
                    Some(XidError::Unknown) | None => 999,
                };
                let index = event.device.index().ok();
                let identifier = event.device.uuid().ok();
                record(shared, index, identifier, xid, received);
            }
            Err(NvmlError::Timeout) => {}
            Err(error) => {
                shared.lock().error = Some(format!("waiting for XID events failed: {error}"));
                return;
            }
        }
    }
}

fn record(
    shared: &Shared,
    index: Option<u32>,
    identifier: Option<String>,
    xid: u64,
    received: Instant,
) {
    let index = index.unwrap_or(u32::MAX);
    let mut counts = shared.lock();
    let position = match counts.devices.binary_search_by_key(&index, |d| d.index) {
        Ok(position) => position,
        Err(position) => {
            counts.devices.insert(
                position,
                XidDevice {
                    index,
                    identifier: String::new(),
                    counts: BTreeMap::new(),
                    last_received: None,
                },
            );
            position
        }
    };
    let device = &mut counts.devices[position];
    if let Some(identifier) = identifier.filter(|id| !id.is_empty()) {
        device.identifier = identifier;
    } else if device.identifier.is_empty() {
        device.identifier = format!("nvidia:{index}");
    }
    *device.counts.entry(xid).or_insert(0) += 1;
    device.last_received = Some(received);
}

/// An event set with every selected device that accepts XID events; the devices that do not
/// are named in the second value. NVML frees a set whose registration failed, so the set is
/// rebuilt with the devices registered so far.
fn register<'n>(
    nvml: &'n Nvml,
    options: &NvmlOptions,
) -> Result<(EventSet<'n>, Vec<String>), NvmlError> {
    let count = nvml.device_count()?;
    let mut set = nvml.create_event_set()?;
    let mut registered: Vec<u32> = Vec::new();
    let mut problems = Vec::new();
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(error) => {
                problems.push(format!("device {index}: {error}"));
                continue;
            }
        };
        let identifier = device.uuid().unwrap_or_else(|_| format!("nvidia:{index}"));
        if !device_selected(&options.devices, &identifier, Some(index)) {
            continue;
        }
        match device.register_events(EventTypes::CRITICAL_XID_ERROR, set) {
            Ok(kept) => {
                set = kept;
                registered.push(index);
            }
            Err(error) => {
                problems.push(format!("device {index}: {}", error.error));
                set = nvml.create_event_set()?;
                for &again in &registered {
                    set = nvml
                        .device_by_index(again)?
                        .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                        .map_err(|error| error.error)?;
                }
            }
        }
    }
    Ok((set, problems))
}
