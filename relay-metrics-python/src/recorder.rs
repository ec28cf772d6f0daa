//! `NativeRecorder`: the recording behind `relay_metrics.record()`. A thread of its own samples
//! at a fixed rate (no GIL), feeds each snapshot to the run summary and the report's charts
//! (the same Rust code as `relay-metrics run` and `report`), and keeps the snapshots.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use relay_metrics::config::ScopeSetting;
use relay_metrics::report::{Report, ReportBuilder};
use relay_metrics::sampler::StopSignal;
use relay_metrics::summary::{Baseline, RunEnd};
use relay_metrics::{Collector, ResourceMetricsConfig, ResourceMetricsSnapshot};

use crate::objects::schema;

/// How often `memory.private` is re-read by default, as `relay-metrics run` does.
const PRIVATE_MEMORY_INTERVAL_MS: u64 = 1000;

/// What the sampling thread shares with Python.
struct Recorded {
    builder: ReportBuilder,
    snapshots: Vec<Arc<ResourceMetricsSnapshot>>,
    started: Instant,
    wall_time: Option<Duration>,
}

impl Recorded {
    /// The report of the recording so far: its wall time is the run's, or the time since the
    /// start while it runs.
    fn report(&self) -> Result<Report, String> {
        let wall_time = self.wall_time.or(Some(self.started.elapsed()));
        self.builder
            .finish(RunEnd {
                wall_time,
                ..RunEnd::default()
            })
            .map_err(|error| error.to_string())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic in the sampling thread leaves the data as it was: still worth reading.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running or finished recording.
#[pyclass(frozen, module = "relay_metrics._native")]
pub(crate) struct NativeRecorder {
    recorded: Arc<Mutex<Recorded>>,
    stop: StopSignal,
    thread: Mutex<Option<JoinHandle<()>>>,
    owner_pid: u32,
}

fn record(
    mut collector: Collector,
    period: Duration,
    recorded: &Mutex<Recorded>,
    stop: &StopSignal,
) {
    let keep = |snapshot: Arc<ResourceMetricsSnapshot>| {
        let mut recorded = lock(recorded);
        recorded.builder.observe(&snapshot);
        recorded.snapshots.push(snapshot);
    };
    {
        let mut snapshots = collector.every(period);
        while let Some(snapshot) = snapshots.next_unless(|deadline| !stop.wait_until(deadline)) {
            keep(snapshot);
        }
    }
    // The end of the block: one last snapshot, so the totals reach the stop.
    let last = collector.collect();
    let mut guard = lock(recorded);
    guard.wall_time = Some(guard.started.elapsed());
    drop(guard);
    keep(last);
}

#[pymethods]
impl NativeRecorder {
    /// Starts recording: `config_json` / `config_path` as for `NativeCollector`; without a
    /// config, the process tree of this process.
    #[new]
    #[pyo3(signature = (interval_millis, config_json=None, config_path=None))]
    fn new(
        py: Python<'_>,
        interval_millis: u64,
        config_json: Option<String>,
        config_path: Option<String>,
    ) -> PyResult<Self> {
        if interval_millis == 0 {
            return Err(PyValueError::new_err(
                "interval_ms must be greater than zero",
            ));
        }
        let collector = py
            .detach(move || -> Result<Collector, String> {
                let mut config = match (&config_json, &config_path) {
                    (_, Some(path)) => ResourceMetricsConfig::from_file(Path::new(path)),
                    (Some(text), None) => ResourceMetricsConfig::from_text(text),
                    (None, None) => Ok(ResourceMetricsConfig::default()),
                }
                .map_err(|error| error.to_string())?;
                if config_json.is_none() && config_path.is_none() {
                    config.measurement_scope = ScopeSetting::ProcessTree;
                    config.root_pid = Some(std::process::id());
                    // As `relay-metrics run`: `memory.private`'s only exact source,
                    // `smaps_rollup`, walks every page of a process (45 % of a core for a 1 GiB
                    // process at 10 ms); below one snapshot a second it is re-read once a second.
                    if interval_millis < PRIVATE_MEMORY_INTERVAL_MS {
                        config.extensions.private_memory_interval_millis =
                            PRIVATE_MEMORY_INTERVAL_MS;
                    }
                }
                Collector::new(config).map_err(|error| error.to_string())
            })
            .map_err(PyValueError::new_err)?;
        let recorded = Arc::new(Mutex::new(Recorded {
            builder: ReportBuilder::new(Baseline::FirstSample),
            snapshots: Vec::new(),
            started: Instant::now(),
            wall_time: None,
        }));
        let stop = StopSignal::default();
        let (thread_recorded, thread_stop) = (Arc::clone(&recorded), stop.clone());
        let period = Duration::from_millis(interval_millis);
        let thread = std::thread::Builder::new()
            .name("relay-metrics-record".into())
            .spawn(move || record(collector, period, &thread_recorded, &thread_stop))
            .map_err(|error| {
                PyRuntimeError::new_err(format!("cannot start the recording thread: {error}"))
            })?;
        Ok(Self {
            recorded,
            stop,
            thread: Mutex::new(Some(thread)),
            owner_pid: std::process::id(),
        })
    }

    /// Stops recording after one last snapshot; idempotent.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        if std::process::id() != self.owner_pid {
            return Ok(());
        }
        let thread = lock(&self.thread).take();
        if let Some(thread) = thread {
            self.stop.request();
            py.detach(|| thread.join())
                .map_err(|_| PyRuntimeError::new_err("the recording thread panicked"))?;
        }
        Ok(())
    }

    /// Whether the recording is still running.
    #[getter]
    fn running(&self) -> bool {
        lock(&self.thread).is_some()
    }

    /// Snapshots taken so far.
    fn __len__(&self) -> usize {
        lock(&self.recorded).snapshots.len()
    }

    /// The run summary as JSON (the same code and fields as `run --summary-format json`).
    fn summary_json(&self) -> PyResult<String> {
        let report = lock(&self.recorded)
            .report()
            .map_err(PyRuntimeError::new_err)?;
        Ok(report.summary.to_json())
    }

    /// The summary as the aligned text table `run` prints.
    fn summary_text(&self) -> PyResult<String> {
        let report = lock(&self.recorded)
            .report()
            .map_err(PyRuntimeError::new_err)?;
        Ok(report.summary.to_text())
    }

    /// The snapshots as the package's dataclasses.
    fn snapshots<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let snapshots = lock(&self.recorded).snapshots.clone();
        let schema = schema(py)?;
        snapshots
            .iter()
            .map(|snapshot| {
                let mut json = Vec::with_capacity(8192);
                snapshot.write_json(&mut json);
                let json = String::from_utf8(json)
                    .map_err(|error| PyRuntimeError::new_err(error.to_string()))?;
                schema.snapshot(py, snapshot, &json)
            })
            .collect()
    }

    /// The report's charts as one SVG document (for a notebook's inline display).
    fn report_svg(&self, py: Python<'_>) -> PyResult<String> {
        let recorded = Arc::clone(&self.recorded);
        py.detach(move || -> Result<String, String> {
            let report = lock(&recorded).report()?;
            report.to_svg().map_err(|error| error.to_string())
        })
        .map_err(PyRuntimeError::new_err)
    }

    /// Writes the report: `html` (summary and charts), `svg` or `png` (the charts alone).
    fn report(&self, py: Python<'_>, path: String, format: &str) -> PyResult<()> {
        let recorded = Arc::clone(&self.recorded);
        let format = format.to_owned();
        py.detach(move || -> Result<(), String> {
            let report = lock(&recorded).report()?;
            let cannot = |error: std::io::Error| format!("cannot write {path}: {error}");
            match format.as_str() {
                "html" => {
                    let html = report.to_html().map_err(|error| error.to_string())?;
                    std::fs::write(&path, html).map_err(cannot)
                }
                "svg" => {
                    let svg = report.to_svg().map_err(|error| error.to_string())?;
                    std::fs::write(&path, svg).map_err(cannot)
                }
                "png" => {
                    let file = std::fs::File::create(&path).map_err(cannot)?;
                    let mut out = std::io::BufWriter::new(file);
                    report
                        .write_png(&mut out)
                        .map_err(|error| error.to_string())?;
                    std::io::Write::flush(&mut out).map_err(cannot)
                }
                other => Err(format!("unknown report format {other:?}: html, svg or png")),
            }
        })
        .map_err(PyValueError::new_err)
    }
}

impl Drop for NativeRecorder {
    fn drop(&mut self) {
        if std::process::id() != self.owner_pid {
            return;
        }
        self.stop.request();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}
