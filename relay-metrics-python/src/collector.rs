//! `NativeCollector`: one series of snapshots (one rate baseline), shared by the synchronous
//! `collect()`, the asynchronous `acollect()` and, for a polling series, the polling thread.
//!
//! Concurrency: the series' state sits behind one mutex, as in Relay (concurrent awaits collect
//! one after another, each with its own snapshot). Asynchronous requests queue to the collector's
//! own worker thread, which collects with no GIL held and completes the asyncio future through
//! `loop.call_soon_threadsafe`, so the event loop's thread never waits for a read.
//!
//! Fork: threads do not survive `fork()`, and a mutex held by one of them at that moment stays
//! locked forever in the child. Every entry point first compares the process id with the
//! creator's and refuses, before touching any lock, in another process.

use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use relay_metrics::config::ScopeSetting;
use relay_metrics::snapshot::SamplerInfo;
use relay_metrics::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};

use crate::objects::schema;

/// A collected snapshot and its CLI JSON, made without the GIL.
type Collected = (Arc<ResourceMetricsSnapshot>, String);

/// State shared with the worker and polling threads.
struct Series {
    collector: Mutex<Option<Collector>>,
}

impl Series {
    fn collect(&self, sampler: Option<SamplerInfo>) -> Result<Collected, String> {
        let mut guard = self
            .collector
            .lock()
            .map_err(|_| "a previous collection of this collector panicked".to_owned())?;
        let collector = guard
            .as_mut()
            .ok_or_else(|| "this collector is closed".to_owned())?;
        let snapshot = match sampler {
            Some(sampler) => collector.collect_with_sampler(sampler),
            None => collector.collect(),
        };
        drop(guard);
        let mut json = Vec::with_capacity(8192);
        snapshot.write_json(&mut json);
        let json = String::from_utf8(json).map_err(|error| error.to_string())?;
        Ok((snapshot, json))
    }
}

/// One asynchronous request: the loop to answer on and the future to complete.
struct Job {
    event_loop: Py<PyAny>,
    future: Py<PyAny>,
}

/// The polling thread and its stop signal.
struct Polling {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: JoinHandle<()>,
}

/// A relay-metrics collector: one series of snapshots.
#[pyclass(frozen, module = "relay_metrics._native")]
pub(crate) struct NativeCollector {
    series: Arc<Series>,
    owner_pid: u32,
    worker: Mutex<Option<mpsc::Sender<Job>>>,
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
            worker: Mutex::new(None),
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

    /// Queues a snapshot for `future` (an asyncio future of `event_loop`): the worker thread
    /// collects, builds the objects and completes the future on the loop's thread.
    fn submit(&self, event_loop: Py<PyAny>, future: Py<PyAny>) -> PyResult<()> {
        self.check_process()?;
        let mut worker = self
            .worker
            .lock()
            .map_err(|_| PyRuntimeError::new_err("the collector's worker lock is poisoned"))?;
        let job = Job { event_loop, future };
        let job = match worker.as_ref() {
            Some(sender) => match sender.send(job) {
                Ok(()) => return Ok(()),
                // The worker is gone (it only ends when its channel closes): start another.
                Err(mpsc::SendError(job)) => job,
            },
            None => job,
        };
        let (sender, receiver) = mpsc::channel();
        let series = Arc::clone(&self.series);
        std::thread::Builder::new()
            .name("relay-metrics-collect".into())
            .spawn(move || work(&series, &receiver))
            .map_err(|error| {
                PyRuntimeError::new_err(format!("cannot start the collector thread: {error}"))
            })?;
        sender
            .send(job)
            .map_err(|_| PyRuntimeError::new_err("the collector thread ended at start"))?;
        *worker = Some(sender);
        Ok(())
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
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let series = Arc::clone(&self.series);
        let thread_stop = Arc::clone(&stop);
        let period = Duration::from_millis(interval_millis);
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
        if std::process::id() != self.owner_pid {
            // The threads and any lock holder stayed in the parent: nothing here to stop or wait
            // for, and waiting could hang.
            return Ok(());
        }
        let polling = self
            .polling
            .lock()
            .ok()
            .and_then(|mut polling| polling.take());
        let worker = self.worker.lock().ok().and_then(|mut worker| worker.take());
        let series = Arc::clone(&self.series);
        py.detach(move || {
            if let Some(polling) = polling {
                if let Ok(mut stopped) = polling.stop.0.lock() {
                    *stopped = true;
                }
                polling.stop.1.notify_all();
                // A panic in the thread has already been reported on stderr.
                let _ = polling.thread.join();
            }
            drop(worker);
            let collector = series.collector.lock().ok().and_then(|mut c| c.take());
            drop(collector);
        });
        Ok(())
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
    fn check_process(&self) -> PyResult<()> {
        let pid = std::process::id();
        if pid == self.owner_pid {
            return Ok(());
        }
        Err(PyRuntimeError::new_err(format!(
            "this relay_metrics collector was created in process {} and was inherited across \
             fork by process {pid}; create a new collector (or activate again) in the child",
            self.owner_pid
        )))
    }
}

impl Drop for NativeCollector {
    fn drop(&mut self) {
        if std::process::id() != self.owner_pid {
            // Leave the parent's threads alone: joining a thread that does not exist here would
            // never return.
            if let Ok(mut polling) = self.polling.lock() {
                if let Some(polling) = polling.take() {
                    std::mem::forget(polling);
                }
            }
            return;
        }
        if let Ok(mut polling) = self.polling.lock() {
            if let Some(polling) = polling.take() {
                if let Ok(mut stopped) = polling.stop.0.lock() {
                    *stopped = true;
                }
                polling.stop.1.notify_all();
                // Not joined: the thread may be waiting for the GIL that the dropping thread
                // holds. It sees the stop flag and ends on its own.
            }
        }
    }
}

/// The worker thread: one collection per request, in order.
fn work(series: &Series, receiver: &mpsc::Receiver<Job>) {
    while let Ok(job) = receiver.recv() {
        let collected = series.collect(None);
        Python::attach(|py| {
            let Ok(schema) = schema(py) else {
                return;
            };
            let (value, error) = match collected
                .map_err(PyRuntimeError::new_err)
                .and_then(|(snapshot, json)| schema.snapshot(py, &snapshot, &json))
            {
                Ok(value) => (value, py.None().into_bound(py)),
                Err(error) => (
                    py.None().into_bound(py),
                    error.into_value(py).into_any().into_bound(py),
                ),
            };
            // Fails only when the loop is closed: then nobody awaits the future any more.
            let _ = job.event_loop.bind(py).call_method1(
                pyo3::intern!(py, "call_soon_threadsafe"),
                (schema.resolve.bind(py), job.future.bind(py), value, error),
            );
        });
    }
}

/// The polling thread: fixed-rate ticks (deadlines `start + n × period`); a tick that a slow
/// collection overran is skipped and counted, never fired late in a burst.
fn poll(series: &Series, period: Duration, stop: &(Mutex<bool>, Condvar), emit: &Py<PyAny>) {
    let start = Instant::now();
    let period_ns = period.as_nanos().max(1);
    let mut tick: u64 = 0;
    let mut missed: u64 = 0;
    loop {
        let deadline = start
            + Duration::from_nanos(u64::try_from(period_ns * u128::from(tick)).unwrap_or(u64::MAX));
        if wait_until(stop, deadline) {
            return;
        }
        let lateness = Instant::now().saturating_duration_since(deadline);
        let sampler = SamplerInfo {
            interval_usec: u64::try_from(period.as_micros()).unwrap_or(u64::MAX),
            tick_index: tick,
            tick_lateness_usec: u64::try_from(lateness.as_micros()).unwrap_or(u64::MAX),
            missed_ticks_total: missed,
        };
        match series.collect(Some(sampler)) {
            Ok((snapshot, _)) => Python::attach(|py| {
                if let Err(error) = crate::marks::emit(py, &snapshot, emit) {
                    error.print(py);
                }
            }),
            // Relay logs a failed poll and goes on with the next one.
            Err(error) => eprintln!("relay_metrics: resource metrics poll failed: {error}"),
        }
        let elapsed = start.elapsed().as_nanos();
        let next = u64::try_from(elapsed / period_ns + 1).unwrap_or(u64::MAX);
        missed += next.saturating_sub(tick + 1);
        tick = next;
    }
}

/// Sleeps until `deadline`; true when asked to stop meanwhile.
fn wait_until(stop: &(Mutex<bool>, Condvar), deadline: Instant) -> bool {
    let (flag, wake) = stop;
    let Ok(mut stopped) = flag.lock() else {
        return true;
    };
    loop {
        if *stopped {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        match wake.wait_timeout(stopped, deadline - now) {
            Ok((guard, _)) => stopped = guard,
            Err(_) => return true,
        }
    }
}
