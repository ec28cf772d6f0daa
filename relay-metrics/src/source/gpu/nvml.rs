//! NVIDIA devices and processes through NVML, loaded at run time by `nvml-wrapper`.
//!
//! Only the safe `nvml-wrapper` API is used, plus the symbol table's `Result` fields: the raw
//! `-sys` methods panic when the driver lacks a symbol, whereas the safe API reports
//! `FailedToLoadSymbol`, which becomes a `None` for that one field.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, Nvml};

use super::loader_lock;
use super::nvml_values::{self, NvmlDeviceValues};
use super::throttle::ThrottleState;
use super::{
    device_selected, GpuDeviceSample, GpuError, GpuProcessSample, LostDevice, ThrottleCounts,
};

/// Environment variable naming the NVML shared library to load instead of `libnvidia-ml.so.1`.
pub const NVML_LIBRARY_ENV: &str = "RELAY_METRICS_NVML_LIBRARY";

/// The library name the NVIDIA driver installs; found through the normal `dlopen` search.
pub(super) const DEFAULT_NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// The unversioned name some installations only provide (development symlink).
const FALLBACK_NVML_LIBRARY: &str = "libnvidia-ml.so";

/// How long a failed load is remembered before the library is tried again: a `dlopen` probe walks
/// dozens of paths, too slow to repeat every tick on a machine without a GPU.
pub(super) const NVML_RETRY_INTERVAL: Duration = Duration::from_secs(60);

/// What to load and query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NvmlOptions {
    /// The library to open; `None` searches `libnvidia-ml.so.1`, then `libnvidia-ml.so`.
    pub library: Option<PathBuf>,
    /// `gpu.devices` selectors (identifier or decimal index); empty selects every device.
    pub devices: Vec<String>,
    /// Query device memory and utilisation.
    pub device_metrics: bool,
    /// Query per-process memory and utilisation.
    pub process_metrics: bool,
    /// Minimum time between two attempts to load a library that failed to load.
    pub retry_interval: Duration,
}

impl Default for NvmlOptions {
    fn default() -> Self {
        Self {
            library: None,
            devices: Vec::new(),
            device_metrics: true,
            process_metrics: true,
            retry_interval: NVML_RETRY_INTERVAL,
        }
    }
}

impl NvmlOptions {
    /// Defaults, with the library taken from `RELAY_METRICS_NVML_LIBRARY` when it is set and not
    /// empty.
    pub fn from_env() -> Self {
        let library = std::env::var_os(NVML_LIBRARY_ENV)
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);
        Self {
            library,
            ..Self::default()
        }
    }
}

/// Device and process records of one NVML query.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NvmlSample {
    /// Selected devices, in NVML index order.
    pub devices: Vec<GpuDeviceSample>,
    /// Processes per device (device index order), ascending PID within a device.
    pub processes: Vec<GpuProcessSample>,
    /// Devices NVML could not open in this query, with its reason.
    pub lost: Vec<LostDevice>,
}

enum Session {
    NotTried,
    // Boxed: the symbol table is ~12 KB and the session is usually `Failed` on hosts without GPUs.
    Open(Box<Nvml>),
    Failed { error: GpuError, at: Instant },
}

/// An NVML session, opened on first use and kept open (as Relay does) until dropped.
pub struct NvmlSource {
    options: NvmlOptions,
    session: Session,
    /// Per device index: the newest process-utilisation timestamp seen (µs). Absent until the
    /// first query of that device, whose samples are discarded because they cover an unknown
    /// stretch of the driver's buffer.
    last_seen_usec: HashMap<u32, u64>,
    /// Per device index: throttle counts since the device was first seen with its identifier.
    throttle: HashMap<u32, ThrottleState>,
    /// Per device index: the identifier it was last seen with, kept while it is lost (a lost
    /// device is named by it for as long as it is lost, and selected or not by it).
    identities: HashMap<u32, String>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let session = match &self.session {
            Session::NotTried => "not tried".to_string(),
            Session::Open(_) => "open".to_string(),
            Session::Failed { error, .. } => format!("failed: {error}"),
        };
        f.debug_struct("NvmlSource")
            .field("options", &self.options)
            .field("session", &session)
            .finish()
    }
}

impl NvmlSource {
    /// A source that loads the library on first use.
    pub fn new(options: NvmlOptions) -> Self {
        Self {
            options,
            session: Session::NotTried,
            last_seen_usec: HashMap::new(),
            throttle: HashMap::new(),
            identities: HashMap::new(),
        }
    }

    /// The options this source was built with.
    pub fn options(&self) -> &NvmlOptions {
        &self.options
    }

    /// Changes the retry interval of a failed load (tests; a config reload).
    pub fn set_retry_interval(&mut self, retry_interval: Duration) {
        self.options.retry_interval = retry_interval;
    }

    /// Loads and initialises the library unless it is open already. After a failure the same
    /// error is returned without a new attempt until the retry interval has passed.
    pub fn ensure_loaded(&mut self) -> Result<(), GpuError> {
        self.open().map(|_| ())
    }

    /// Why NVML is unavailable (for the snapshot's extensions), `None` when it is open or was
    /// never tried.
    pub fn unavailable_reason(&self) -> Option<String> {
        match &self.session {
            Session::Failed { error, .. } => Some(error.to_string()),
            Session::NotTried | Session::Open(_) => None,
        }
    }

    /// Queries every selected device. Process records are kept only for PIDs accepted by
    /// `include_pid`. An error means no NVML record at all (library unavailable, device count
    /// unreadable); a failing field query only makes that field `None`.
    pub fn sample(
        &mut self,
        include_pid: &mut dyn FnMut(u32) -> bool,
    ) -> Result<NvmlSample, GpuError> {
        self.open()?;
        let Self {
            options,
            session,
            last_seen_usec,
            throttle,
            identities,
        } = self;
        let Session::Open(nvml) = session else {
            // `open` succeeded, so the session is open; kept total rather than panicking.
            return Ok(NvmlSample::default());
        };
        let count = nvml.device_count().map_err(|error| GpuError::DeviceCount {
            reason: error.to_string(),
        })?;
        let mut sample = NvmlSample::default();
        for index in 0..count {
            // A device NVML cannot open (lost, no permission) is reported with its last known
            // identity, so that its loss shows, and its return is a new series of counts.
            let device = match nvml.device_by_index(index) {
                Ok(device) => device,
                Err(error) => {
                    // Its return starts a new series of counts.
                    throttle.remove(&index);
                    let identifier = identities.get(&index).cloned();
                    sample
                        .lost
                        .extend(lost_device(identifier, &options.devices, index, &error));
                    continue;
                }
            };
            let identifier = match device.uuid() {
                Ok(uuid) if !uuid.is_empty() => {
                    if identities.get(&index) != Some(&uuid) {
                        identities.insert(index, uuid.clone());
                    }
                    uuid
                }
                // A failed UUID query: the UUID the index last had (a transient failure must
                // not start a new series nor leave a UUID selection), else the index.
                _ => identities
                    .get(&index)
                    .cloned()
                    .unwrap_or_else(|| format!("nvidia:{index}")),
            };
            if !device_selected(&options.devices, &identifier, Some(index)) {
                continue;
            }
            let state = throttle.entry(index).or_default();
            if state.identifier != identifier {
                *state = ThrottleState::new(identifier.clone());
            }
            let mut device_sample = read_device(
                nvml,
                &device,
                index,
                identifier,
                state,
                options.device_metrics,
            );
            if options.process_metrics {
                let utilization = process_utilization(&device, index, last_seen_usec);
                device_sample.process_lists_error = collect_processes(
                    &device,
                    index,
                    &device_sample.identifier,
                    utilization,
                    include_pid,
                    &mut sample.processes,
                );
            }
            sample.devices.push(device_sample);
        }
        Ok(sample)
    }

    fn open(&mut self) -> Result<&Nvml, GpuError> {
        if let Session::Failed { error, at } = &self.session {
            if at.elapsed() < self.options.retry_interval {
                return Err(error.clone());
            }
        }
        if !matches!(self.session, Session::Open(_)) {
            self.session = match load(self.options.library.as_deref().map(|path| path.as_os_str()))
            {
                Ok(nvml) => Session::Open(Box::new(nvml)),
                Err(error) => Session::Failed {
                    error,
                    at: Instant::now(),
                },
            };
        }
        match &self.session {
            Session::Open(nvml) => Ok(nvml),
            Session::Failed { error, .. } => Err(error.clone()),
            Session::NotTried => Err(GpuError::Load {
                library: DEFAULT_NVML_LIBRARY.to_string(),
                reason: "not attempted".to_string(),
            }),
        }
    }
}

/// A device NVML could not open, with its last known identity; `None` when it is not
/// selected.
fn lost_device(
    identifier: Option<String>,
    selectors: &[String],
    index: u32,
    error: &NvmlError,
) -> Option<LostDevice> {
    // Never seen: selected by its index alone.
    let fallback = format!("nvidia:{index}");
    let selected = device_selected(
        selectors,
        identifier.as_deref().unwrap_or(&fallback),
        Some(index),
    );
    selected.then(|| LostDevice {
        index,
        identifier,
        reason: error.to_string(),
    })
}

/// The device's values (all `None` without `device_metrics`), its throttle counts from `state`.
fn read_device(
    nvml: &Nvml,
    device: &Device<'_>,
    index: u32,
    identifier: String,
    state: &mut ThrottleState,
    device_metrics: bool,
) -> GpuDeviceSample {
    if !device_metrics {
        return GpuDeviceSample {
            index,
            identifier,
            memory_used_bytes: None,
            utilization_percent: None,
            values: NvmlDeviceValues::default(),
            throttle: ThrottleCounts::default(),
            process_lists_error: None,
        };
    }
    let values = nvml_values::read(nvml, device);
    let throttle = state.count(&values);
    GpuDeviceSample {
        index,
        identifier,
        memory_used_bytes: memory_used_bytes(nvml, device),
        utilization_percent: device
            .utilization_rates()
            .ok()
            .map(|rates| f64::from(rates.gpu)),
        values,
        throttle,
        process_lists_error: None,
    }
}

impl Drop for NvmlSource {
    fn drop(&mut self) {
        if let Session::Open(nvml) = std::mem::replace(&mut self.session, Session::NotTried) {
            unload(*nvml);
        }
    }
}

/// Opens and initialises `library`, or the default names in order (with `fork` held back
/// meanwhile: see [`loader_lock`]).
pub(super) fn load(library: Option<&OsStr>) -> Result<Nvml, GpuError> {
    loader_lock::without_fork(|| load_now(library))
}

/// Shuts NVML down and unloads it (with `fork` held back, as for a load). `Nvml`'s own drop
/// calls the raw `nvmlShutdown` binding, which panics when the symbol is missing: a library
/// without it is leaked instead (it stays loaded, as Relay's does).
pub(super) fn unload(nvml: Nvml) {
    if nvml.lib().nvmlShutdown.is_err() {
        std::mem::forget(nvml);
    } else {
        loader_lock::without_fork(|| drop(nvml));
    }
}

fn load_now(library: Option<&OsStr>) -> Result<Nvml, GpuError> {
    match library {
        Some(path) => init(path),
        None => match init(OsStr::new(DEFAULT_NVML_LIBRARY)) {
            Err(GpuError::Load { reason, .. }) => {
                init(OsStr::new(FALLBACK_NVML_LIBRARY)).map_err(|error| match error {
                    GpuError::Load {
                        reason: fallback, ..
                    } => GpuError::Load {
                        library: format!("{DEFAULT_NVML_LIBRARY} or {FALLBACK_NVML_LIBRARY}"),
                        reason: format!("{reason}; {fallback}"),
                    },
                    other => other,
                })
            }
            other => other,
        },
    }
}

fn init(library: &OsStr) -> Result<Nvml, GpuError> {
    let name = library.to_string_lossy().into_owned();
    Nvml::builder()
        .lib_path(library)
        .init()
        .map_err(|error| match error {
            NvmlError::LibloadingError(error) => GpuError::Load {
                library: name,
                reason: error.to_string(),
            },
            NvmlError::FailedToLoadSymbol(reason) => GpuError::Load {
                library: name,
                reason: format!("not a usable NVML library (nvmlInit_v2: {reason})"),
            },
            other => GpuError::Init {
                library: name,
                reason: other.to_string(),
            },
        })
}

/// `nvmlMemory_t` (v1): three unsigned long longs.
#[repr(C)]
struct MemoryV1 {
    total: u64,
    free: u64,
    used: u64,
}

const _: () = assert!(std::mem::size_of::<MemoryV1>() == 24);

/// Device memory in use. The v1 query comes first because Relay reports its `used`, which
/// includes the driver's reserved memory; `_v2` (which excludes it) is the fallback for drivers
/// without v1.
fn memory_used_bytes(nvml: &Nvml, device: &Device<'_>) -> Option<u64> {
    if let Ok(function) = nvml.lib().nvmlDeviceGetMemoryInfo.as_ref() {
        let function = *function;
        let mut memory = MemoryV1 {
            total: 0,
            free: 0,
            used: 0,
        };
        // SAFETY: the handle comes from this open session and outlives the call; `MemoryV1` has
        // the layout of `nvmlMemory_t`, which the function only writes. No safe wrapper exists:
        // nvml-wrapper 0.13's `Device::memory_info` calls only `nvmlDeviceGetMemoryInfo_v2`.
        let code = unsafe { function(device.handle(), (&raw mut memory).cast()) };
        if code == 0 {
            return Some(memory.used);
        }
    }
    device.memory_info().ok().map(|memory| memory.used)
}

/// SM and memory utilisation per PID from the samples newer than the last seen timestamp of
/// this device, the newest sample of each PID winning. `None` on the device's first query and
/// when the query is unsupported.
fn process_utilization(
    device: &Device<'_>,
    index: u32,
    last_seen_usec: &mut HashMap<u32, u64>,
) -> Option<BTreeMap<u32, ProcessUtilization>> {
    let previous_usec = last_seen_usec.get(&index).copied();
    let samples = match grown_list(|| device.process_utilization_stats(previous_usec.unwrap_or(0)))
    {
        Ok(samples) => samples,
        // The driver's way of saying "no sample newer than that timestamp".
        Err(NvmlError::NotFound) => Vec::new(),
        Err(_) => return None,
    };
    let floor_usec = previous_usec.unwrap_or(0);
    let newest_usec = samples
        .iter()
        .map(|sample| sample.timestamp)
        .fold(floor_usec, u64::max);
    last_seen_usec.insert(index, newest_usec);
    previous_usec?;
    let mut newest: BTreeMap<u32, (u64, ProcessUtilization)> = BTreeMap::new();
    for sample in samples
        .iter()
        .filter(|sample| sample.timestamp > floor_usec)
    {
        let utilization = ProcessUtilization {
            sm_percent: f64::from(sample.sm_util),
            memory_percent: f64::from(sample.mem_util),
        };
        let entry = newest
            .entry(sample.pid)
            .or_insert((sample.timestamp, utilization));
        if sample.timestamp >= entry.0 {
            *entry = (sample.timestamp, utilization);
        }
    }
    Some(
        newest
            .into_iter()
            .map(|(pid, (_, utilization))| (pid, utilization))
            .collect(),
    )
}

/// Tries of a list query whose fill found the list longer than its count query did.
const LIST_TRIES: usize = 3;

/// Runs an NVML list query (a count query, then a fill into a buffer of that size) again when
/// the fill answers `INSUFFICIENT_SIZE`: the list grew in between (processes started, samples
/// arrived; `nvml-wrapper` adds 5 entries of headroom to process lists, none to samples), and
/// the driver then fills nothing, so one such race would drop every process or sample of the
/// device from this sample. Each try counts again.
fn grown_list<T>(mut query: impl FnMut() -> Result<T, NvmlError>) -> Result<T, NvmlError> {
    let mut result = query();
    for _ in 1..LIST_TRIES {
        if !matches!(result, Err(NvmlError::InsufficientSize(_))) {
            break;
        }
        result = query();
    }
    result
}

/// One process's newest utilisation sample on a device.
#[derive(Debug, Clone, Copy)]
struct ProcessUtilization {
    sm_percent: f64,
    memory_percent: f64,
}

/// Merges the compute and graphics lists (a query that fails leaves the other one's memory
/// intact) and the PIDs known only from utilisation samples, in ascending PID order; says which
/// list failed, as a process only in it is missing (NVML answers an empty list, not an error,
/// where a device runs no process).
fn collect_processes(
    device: &Device<'_>,
    index: u32,
    identifier: &str,
    utilization: Option<BTreeMap<u32, ProcessUtilization>>,
    include_pid: &mut dyn FnMut(u32) -> bool,
    out: &mut Vec<GpuProcessSample>,
) -> Option<String> {
    let compute = grown_list(|| device.running_compute_processes());
    let graphics = grown_list(|| device.running_graphics_processes());
    let failed: Vec<String> = [
        ("compute", compute.as_ref()),
        ("graphics", graphics.as_ref()),
    ]
    .into_iter()
    .filter_map(|(list, result)| Some(format!("its {list} process list: {}", result.err()?)))
    .collect();
    let (compute, graphics) = (compute.unwrap_or_default(), graphics.unwrap_or_default());
    let mut memory: BTreeMap<u32, Option<u64>> = BTreeMap::new();
    for process in compute.iter().chain(graphics.iter()) {
        let entry = memory.entry(process.pid).or_insert(None);
        *entry = (*entry).max(used_bytes(process));
    }
    if let Some(utilization) = &utilization {
        for &pid in utilization.keys() {
            memory.entry(pid).or_insert(None);
        }
    }
    for (pid, memory_used_bytes) in memory {
        if !include_pid(pid) {
            continue;
        }
        let sampled = utilization
            .as_ref()
            .and_then(|by_pid| by_pid.get(&pid).copied());
        out.push(GpuProcessSample {
            device_index: index,
            device_identifier: identifier.to_string(),
            pid,
            memory_used_bytes,
            sm_utilization_percent: sampled.map(|u| u.sm_percent),
            memory_utilization_percent: sampled.map(|u| u.memory_percent),
        });
    }
    (!failed.is_empty()).then(|| failed.join("; "))
}

fn used_bytes(process: &ProcessInfo) -> Option<u64> {
    match process.used_gpu_memory {
        UsedGpuMemory::Used(bytes) => Some(bytes),
        UsedGpuMemory::Unavailable => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_a_load_error_naming_the_path() {
        let error = load(Some(OsStr::new("/nonexistent/libnvidia-ml.so.1"))).unwrap_err();
        match &error {
            GpuError::Load { library, reason } => {
                assert_eq!(library, "/nonexistent/libnvidia-ml.so.1");
                assert!(reason.contains("No such file"), "{reason}");
            }
            other => panic!("expected a load error, got {other:?}"),
        }
    }

    #[test]
    fn a_failed_load_is_not_retried_within_the_interval() {
        let mut source = NvmlSource::new(NvmlOptions {
            library: Some(PathBuf::from("/nonexistent/libnvidia-ml.so.1")),
            ..NvmlOptions::default()
        });
        assert_eq!(source.unavailable_reason(), None);
        let first = source.sample(&mut |_| true).unwrap_err();
        let Session::Failed { at: first_at, .. } = source.session else {
            panic!("expected a failed session");
        };
        let second = source.sample(&mut |_| true).unwrap_err();
        let Session::Failed { at: second_at, .. } = source.session else {
            panic!("expected a failed session");
        };
        assert_eq!(first, second);
        assert_eq!(first_at, second_at, "the load was attempted again");
        source.set_retry_interval(Duration::ZERO);
        source.sample(&mut |_| true).unwrap_err();
        let Session::Failed { at: third_at, .. } = source.session else {
            panic!("expected a failed session");
        };
        assert!(
            third_at > first_at,
            "the load was not retried after the interval"
        );
        assert_eq!(source.unavailable_reason(), Some(first.to_string()));
    }
}
