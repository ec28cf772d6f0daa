//! `NativeCollector`: one series of snapshots (one rate baseline), shared by the synchronous
//! `collect()`, the asynchronous `acollect()` and, for a polling series, the polling thread.
//!
//! Concurrency: the series' state sits behind one mutex, as in Relay (concurrent awaits collect
//! one after another, each with its own snapshot). Asynchronous requests queue to the collector's
//! own worker thread, which collects with no GIL held (`awaitable`), so the event loop's thread
//! never waits for a read.
//!
//! Fork: threads do not survive `fork()`, and a mutex held by one of them at that moment stays
//! locked forever in the child. Every entry point first compares the process id with the
//! creator's and refuses, before touching any lock, in another process.

mod awaitable;
mod polling;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use relay_metrics::config::ScopeSetting;
use relay_metrics::sampler::StopSignal;
use relay_metrics::snapshot::SamplerInfo;
use relay_metrics::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};

use crate::objects::schema;

use awaitable::Queue;
pub(crate) use awaitable::{Collecting, LoopWaker};
use polling::{poll, Polling};

/// A collected snapshot and its CLI JSON, made without the GIL.
type Collected = (Arc<ResourceMetricsSnapshot>, String);

/// State shared with the worker and polling threads.
struct Series {
    collector: Mutex<Option<Collector>>,
}

impl Series {
    /// One snapshot and its JSON. A panic inside becomes the error of this collection (and, as
    /// the lock is then poisoned, of the later ones), so that the worker and polling threads go
    /// on answering: a panic that ended the worker would leave every later await unanswered.
    fn collect(&self, sampler: Option<SamplerInfo>) -> Result<Collected, String> {
        let collect = || {
            let snapshot = self.snapshot(sampler)?;
            let json = cli_json(&snapshot)?;
            Ok((snapshot, json))
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(collect)).unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|text| (*text).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(format!("the collection panicked: {message}"))
        })
    }

    fn snapshot(
        &self,
        sampler: Option<SamplerInfo>,
    ) -> Result<Arc<ResourceMetricsSnapshot>, String> {
        let mut guard = self
            .collector
            .lock()
            .map_err(|_| "a previous collection of this collector panicked".to_owned())?;
        let collector = guard
            .as_mut()
            .ok_or_else(|| "this collector is closed".to_owned())?;
        Ok(match sampler {
            Some(sampler) => collector.collect_with_sampler(sampler),
            None => collector.collect(),
        })
    }
}

/// The snapshot's CLI JSON (kept for `to_json()` and `extensions`).
fn cli_json(snapshot: &ResourceMetricsSnapshot) -> Result<String, String> {
    let mut json = Vec::with_capacity(8192);
    snapshot.write_json(&mut json);
    String::from_utf8(json).map_err(|error| error.to_string())
}

/// A relay-metrics collector: one series of snapshots.
#[pyclass(frozen, module = "relay_metrics._native")]
pub(crate) struct NativeCollector {
    series: Arc<Series>,
    owner_pid: u32,
    queue: Arc<Queue>,
    polling: Mutex<Option<Polling>>,
}

#[pymethods]
impl NativeCollector {
    /// `config_json`: the component config as JSON text (or a Relay plugin config); or
    /// `config_path`: a JSON/TOML file. `root_pid` / `cgroup_path` override the config's.
    #[new]
    #[pyo3(signature = (config_json=None, config_path=None, root_pid=None, cgroup_path=None))]
    fn new(
        py: Python<'_>,
        config_json: Option<String>,
        config_path: Option<String>,
        root_pid: Option<u32>,
        cgroup_path: Option<String>,
    ) -> PyResult<Self> {
        let collector = py.detach(move || -> Result<Collector, String> {
            let mut config = match (&config_json, &config_path) {
                (_, Some(path)) => ResourceMetricsConfig::from_file(Path::new(path)),
                (Some(text), None) => ResourceMetricsConfig::from_text(text),
                (None, None) => Ok(ResourceMetricsConfig::default()),
            }
            .map_err(|error| error.to_string())?;
            if root_pid.is_some() {
                config.root_pid = root_pid;
            }
            if let Some(path) = cgroup_path {
                config.cgroup_path = Some(path);
                if config.measurement_scope == ScopeSetting::RuntimeDefault {
                    config.measurement_scope = ScopeSetting::Cgroup;
                }
            }
            Collector::new(config).map_err(|error| error.to_string())
        });
        let collector = collector.map_err(PyValueError::new_err)?;
        Ok(Self {
            series: Arc::new(Series {
                collector: Mutex::new(Some(collector)),
            }),
            owner_pid: std::process::id(),
            queue: Arc::new(Queue::new()),
            polling: Mutex::new(None),
        })
    }

    /// Takes a snapshot on the calling thread, with the GIL released while reading.
    fn collect<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.check_process()?;
        let series = Arc::clone(&self.series);
        let (snapshot, json) = py
            .detach(move || series.collect(None))
            .map_err(PyRuntimeError::new_err)?;
        schema(py)?.snapshot(py, &snapshot, &json)
    }

    /// Queues a snapshot to the collector's worker thread; the awaitable of its result.
    fn acollect(&self) -> Collecting {
        if std::process::id() != self.owner_pid {
            return Collecting::failed(inherited_message(self.owner_pid), self.owner_pid);
        }
        self.queue.submit(&self.series, self.owner_pid)
    }

    /// Starts the fixed-rate polling thread: every `interval_millis` it collects and calls
    /// `emit(timestamp, measurements)` with Relay's metric measurements (a list of dicts).
    fn start_polling(&self, interval_millis: u64, emit: Py<PyAny>) -> PyResult<()> {
        self.check_process()?;
        let mut polling = self
            .polling
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the polling lock is poisoned"))?;
        if polling.is_some() {
            return Err(PyRuntimeError::new_err("polling is already running"));
        }
        if interval_millis == 0 {
            return Err(PyValueError::new_err(
                "interval_millis must be greater than zero",
            ));
        }
        let stop = StopSignal::default();
        let series = Arc::clone(&self.series);
        let thread_stop = stop.clone();
        // As Relay, any positive interval is accepted; polls come at least once a day.
        let period =
            Duration::from_millis(interval_millis.min(relay_metrics::config::MAX_INTERVAL_MILLIS));
        let thread = std::thread::Builder::new()
            .name("relay-metrics-polling".into())
            .spawn(move || poll(&series, period, &thread_stop, &emit))
            .map_err(|error| {
                PyRuntimeError::new_err(format!(
                    "failed to start resource metrics polling thread: {error}"
                ))
            })?;
        *polling = Some(Polling { stop, thread });
        Ok(())
    }

    /// Stops polling (waiting for a tick in progress), stops the worker after the requests
    /// already queued, and releases the collector (and its eBPF programs). Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.stop(py, None);
        Ok(())
    }

    /// `close()`, waiting at most `timeout_s` for a tick in progress (a subscriber that does not
    /// return): past it the polling thread is left to end on its own, as a daemon thread is, and
    /// False is returned. For the interpreter's exit, which must not wait for ever.
    fn close_within(&self, py: Python<'_>, timeout_s: f64) -> bool {
        let timeout = Duration::try_from_secs_f64(timeout_s).unwrap_or(Duration::ZERO);
        self.stop(py, Some(timeout))
    }

    /// For the benchmark (`benches/await_breakdown.py`): `iterations` synchronous collections
    /// on this thread, each as nanoseconds spent collecting, writing the JSON and building the
    /// Python objects.
    fn _phase_times(&self, py: Python<'_>, iterations: usize) -> PyResult<Vec<(u64, u64, u64)>> {
        self.check_process()?;
        let nanos = |since: Instant| u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let schema = schema(py)?;
        let mut times = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let series = Arc::clone(&self.series);
            let (snapshot, json, collect, write) = py
                .detach(move || -> Result<_, String> {
                    let started = Instant::now();
                    let snapshot = series.snapshot(None)?;
                    let collect = nanos(started);
                    let started = Instant::now();
                    let json = cli_json(&snapshot)?;
                    Ok((snapshot, json, collect, nanos(started)))
                })
                .map_err(PyRuntimeError::new_err)?;
            let started = Instant::now();
            drop(schema.snapshot(py, &snapshot, &json)?);
            times.push((collect, write, nanos(started)));
        }
        Ok(times)
    }

    /// For the benchmark (`benches/collect_vs_relay.py`): collects once, then builds the Python
    /// objects of that snapshot `iterations` times; returns the build times in nanoseconds.
    fn _build_times<'py>(&self, py: Python<'py>, iterations: usize) -> PyResult<Vec<u64>> {
        self.check_process()?;
        let series = Arc::clone(&self.series);
        let (snapshot, json) = py
            .detach(move || series.collect(None))
            .map_err(PyRuntimeError::new_err)?;
        let schema = schema(py)?;
        let mut times = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let started = Instant::now();
            let object = schema.snapshot(py, &snapshot, &json)?;
            times.push(u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX));
            drop(object);
        }
        Ok(times)
    }

    /// Whether `close()` has not run yet (and this is the creating process).
    #[getter]
    fn is_open(&self) -> bool {
        std::process::id() == self.owner_pid
            && self
                .series
                .collector
                .lock()
                .map(|collector| collector.is_some())
                .unwrap_or(false)
    }

    /// The process that created this collector.
    #[getter]
    fn owner_pid(&self) -> u32 {
        self.owner_pid
    }
}

impl NativeCollector {
    /// Stops polling and the worker, then releases the collector; with a `timeout`, gives up
    /// waiting for the polling thread past it (the collector then stays with that thread).
    /// Whether the polling thread has ended.
    fn stop(&self, py: Python<'_>, timeout: Option<Duration>) -> bool {
        if std::process::id() != self.owner_pid {
            // The threads and any lock holder stayed in the parent: nothing here to stop or wait
            // for, and waiting could hang.
            return true;
        }
        let polling = self
            .polling
            .lock()
            .ok()
            .and_then(|mut polling| polling.take());
        self.queue.close();
        let series = Arc::clone(&self.series);
        py.detach(move || {
            if let Some(polling) = polling {
                polling.stop.request();
                if let Some(timeout) = timeout {
                    let deadline = Instant::now() + timeout;
                    while !polling.thread.is_finished() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    if !polling.thread.is_finished() {
                        // Dropping the handle detaches the thread.
                        return false;
                    }
                }
                // A panic in the thread has already been reported on stderr.
                let _ = polling.thread.join();
            }
            let collector = series.collector.lock().ok().and_then(|mut c| c.take());
            drop(collector);
            true
        })
    }

    fn check_process(&self) -> PyResult<()> {
        if std::process::id() == self.owner_pid {
            return Ok(());
        }
        Err(inherited_error(self.owner_pid))
    }
}

/// What using a collector in a fork child of its creator `owner_pid` says.
fn inherited_message(owner_pid: u32) -> String {
    format!(
        "this relay_metrics collector was created in process {owner_pid} and was inherited \
         across fork by process {}; create a new collector (or activate again) in the child",
        std::process::id()
    )
}

fn inherited_error(owner_pid: u32) -> PyErr {
    PyRuntimeError::new_err(inherited_message(owner_pid))
}

impl Drop for NativeCollector {
    fn drop(&mut self) {
        if std::process::id() != self.owner_pid {
            // Leave the parent's threads alone: joining a thread that does not exist here would
            // never return, and the collector's own helpers (the GPU sampler, the XID watcher)
            // would fail to join theirs when it is freed, which aborts the child. So nothing of
            // the parent's is freed here: a reference to it is leaked.
            if let Ok(mut polling) = self.polling.lock() {
                if let Some(polling) = polling.take() {
                    std::mem::forget(polling);
                }
            }
            std::mem::forget(Arc::clone(&self.series));
            std::mem::forget(Arc::clone(&self.queue));
            return;
        }
        self.queue.close();
        if let Ok(mut polling) = self.polling.lock() {
            if let Some(polling) = polling.take() {
                polling.stop.request();
                // Not joined: the thread may be waiting for the GIL that the dropping thread
                // holds. It sees the stop flag and ends on its own.
            }
        }
    }
}
