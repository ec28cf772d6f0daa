//! Runs NVML, and the scan of DRM clients, on their own thread so that the sampling path never
//! waits on the driver or on listing every process's fds.
//!
//! The thread queries at a fixed period and publishes each result as an `Arc<GpuSample>`; readers
//! lock a mutex only long enough to clone that `Arc`, then read the sample and its age at leisure.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{
    DrmClientScanner, DrmProcessSample, GpuDeviceSample, GpuProcessSample, LostDevice, NvmlSource,
};

/// The result of one NVML query and DRM client scan, as handed over by [`GpuSampler`].
#[derive(Debug, Clone, PartialEq)]
pub struct GpuSample {
    /// Selected devices, in NVML index order.
    pub devices: Vec<GpuDeviceSample>,
    /// Every process NVML reported on the selected devices (not yet filtered to a scope: use
    /// [`GpuSample::processes_matching`]).
    pub processes: Vec<GpuProcessSample>,
    /// Devices NVML could not open in the query.
    pub lost: Vec<LostDevice>,
    /// Every process's use of DRM devices from the last scan (not yet filtered to a scope);
    /// empty when the sampler has no DRM scanner.
    pub drm_processes: Vec<DrmProcessSample>,
    /// When the query and the scan finished.
    pub taken_at: Instant,
    /// Why there are no NVML records (library not loadable, init or device count failed).
    pub error: Option<String>,
    /// Why there are no DRM process records (`/proc` could not be listed).
    pub drm_error: Option<String>,
}

impl GpuSample {
    /// Time since the query finished.
    pub fn age(&self) -> Duration {
        self.taken_at.elapsed()
    }

    /// The process records whose PID `include_pid` accepts (the PIDs in scope).
    pub fn processes_matching<'a>(
        &'a self,
        mut include_pid: impl FnMut(u32) -> bool + 'a,
    ) -> impl Iterator<Item = &'a GpuProcessSample> + 'a {
        self.processes
            .iter()
            .filter(move |process| include_pid(process.pid))
    }
}

struct State {
    latest: Option<Arc<GpuSample>>,
    stop: bool,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the sampling thread early to stop.
    stop_requested: Condvar,
    /// Wakes readers waiting for a newer sample.
    published: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is a plain value swap: still consistent if a holder panicked.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Queries an [`NvmlSource`] on a dedicated thread every `period` and keeps the latest result.
/// Dropping the sampler stops and joins the thread (the NVML session closes with it).
pub struct GpuSampler {
    shared: Arc<Shared>,
    period: Duration,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for GpuSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuSampler")
            .field("period", &self.period)
            .field("running", &self.thread.is_some())
            .finish()
    }
}

impl GpuSampler {
    /// Starts the thread; the first query runs immediately, then one per `period` (measured from
    /// the start of each query, so slow queries do not stretch the period).
    pub fn spawn(source: NvmlSource, period: Duration) -> std::io::Result<Self> {
        Self::spawn_with_drm(source, None, period)
    }

    /// As [`GpuSampler::spawn`], with a DRM client scan after each NVML query.
    pub fn spawn_with_drm(
        source: NvmlSource,
        drm: Option<DrmClientScanner>,
        period: Duration,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                latest: None,
                stop: false,
            }),
            stop_requested: Condvar::new(),
            published: Condvar::new(),
        });
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("relay-metrics-nvml".to_string())
            .spawn(move || run(source, drm, period, &thread_shared))?;
        Ok(Self {
            shared,
            period,
            thread: Some(thread),
        })
    }

    /// The query period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// The latest sample, `None` until the first query has finished. Never waits on NVML.
    pub fn latest(&self) -> Option<Arc<GpuSample>> {
        self.shared.lock().latest.clone()
    }

    /// Waits up to `timeout` for a sample taken after `after` (or for any sample when `after` is
    /// `None`); returns the latest sample either way.
    pub fn wait_for_sample(
        &self,
        after: Option<Instant>,
        timeout: Duration,
    ) -> Option<Arc<GpuSample>> {
        let keep_waiting = |state: &mut State| match (&state.latest, after) {
            (Some(sample), Some(after)) => sample.taken_at <= after,
            (Some(_), None) => false,
            (None, _) => true,
        };
        let guard = self.shared.lock();
        let (guard, _) = self
            .shared
            .published
            .wait_timeout_while(guard, timeout, keep_waiting)
            .unwrap_or_else(PoisonError::into_inner);
        guard.latest.clone()
    }
}

impl Drop for GpuSampler {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.stop_requested.notify_all();
        if let Some(thread) = self.thread.take() {
            // A panic on the sampling thread has already been reported by the panic hook.
            let _ = thread.join();
        }
    }
}

fn run(
    mut source: NvmlSource,
    mut drm: Option<DrmClientScanner>,
    period: Duration,
    shared: &Shared,
) {
    loop {
        let started = Instant::now();
        let (devices, processes, lost, error) = match source.sample(&mut |_| true) {
            Ok(nvml) => (nvml.devices, nvml.processes, nvml.lost, None),
            Err(error) => (Vec::new(), Vec::new(), Vec::new(), Some(error.to_string())),
        };
        let mut drm_processes = Vec::new();
        let drm_error = drm
            .as_mut()
            .and_then(|scanner| scanner.scan(&mut drm_processes).err())
            .map(|error| format!("cannot list the processes for DRM clients: {error}"));
        let sample = GpuSample {
            devices,
            processes,
            lost,
            drm_processes,
            taken_at: Instant::now(),
            error,
            drm_error,
        };
        let mut state = shared.lock();
        state.latest = Some(Arc::new(sample));
        shared.published.notify_all();
        let deadline = started + period;
        while !state.stop {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            state = shared
                .stop_requested
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        if state.stop {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::NvmlOptions;
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn an_unloadable_library_is_published_as_an_error_sample() {
        let source = NvmlSource::new(NvmlOptions {
            library: Some(PathBuf::from("/nonexistent/libnvidia-ml.so.1")),
            ..NvmlOptions::default()
        });
        let sampler = GpuSampler::spawn(source, Duration::from_millis(10)).unwrap();
        let first = sampler
            .wait_for_sample(None, Duration::from_secs(10))
            .unwrap();
        assert!(first.devices.is_empty());
        let error = first.error.as_deref().unwrap();
        assert!(
            error.starts_with("NVML library /nonexistent/libnvidia-ml.so.1 could not be loaded"),
            "{error}"
        );
        let second = sampler
            .wait_for_sample(Some(first.taken_at), Duration::from_secs(10))
            .unwrap();
        assert!(second.taken_at > first.taken_at);
        assert!(second.age() < Duration::from_secs(10));
        assert!(second.drm_processes.is_empty() && second.drm_error.is_none());
        drop(sampler);
    }

    #[test]
    fn drm_clients_are_scanned_on_the_gpu_thread() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc/42");
        std::fs::create_dir_all(dir.path().join("sys/class/drm/renderD128")).unwrap();
        std::fs::create_dir_all(proc.join("fd")).unwrap();
        std::fs::create_dir_all(proc.join("fdinfo")).unwrap();
        std::fs::write(
            proc.join("stat"),
            "42 (x) S 1 42 42 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 1000 10 0\n",
        )
        .unwrap();
        std::os::unix::fs::symlink("/dev/dri/renderD128", proc.join("fd/3")).unwrap();
        std::fs::write(
            proc.join("fdinfo/3"),
            "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:03:00.0\ndrm-resident-vram:\t8 KiB\n",
        )
        .unwrap();
        let sample = first_sample_without_nvml(crate::source::Roots::fixture(dir.path()));
        assert_eq!(sample.drm_processes.len(), 1, "{sample:?}");
        assert_eq!(sample.drm_processes[0].pid, 42);
        assert_eq!(sample.drm_processes[0].start_time_ticks, 777);
        assert_eq!(sample.drm_processes[0].memory_used_bytes, Some(8192));
        assert!(sample.error.is_some(), "NVML is missing and says so");

        // A tree without /proc: the scan's failure is published, NVML's result still is.
        std::fs::create_dir_all(dir.path().join("nowhere/sys/class/drm/card0")).unwrap();
        let gone = crate::source::Roots::fixture(dir.path().join("nowhere"));
        let sample = first_sample_without_nvml(gone);
        let error = sample.drm_error.as_deref().unwrap();
        assert!(error.contains("nowhere"), "{error}");
    }

    /// The first sample of a sampler whose NVML library is missing and whose DRM client scan
    /// reads `roots`.
    fn first_sample_without_nvml(roots: crate::source::Roots) -> Arc<GpuSample> {
        let scanner =
            super::super::DrmClientScanner::new(&roots, super::super::DrmFdCheck::LinkName, &[]);
        let source = NvmlSource::new(NvmlOptions {
            library: Some(PathBuf::from("/nonexistent/libnvidia-ml.so.1")),
            ..NvmlOptions::default()
        });
        let sampler =
            GpuSampler::spawn_with_drm(source, Some(scanner), Duration::from_millis(10)).unwrap();
        sampler
            .wait_for_sample(None, Duration::from_secs(10))
            .unwrap()
    }
}
