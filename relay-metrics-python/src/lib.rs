//! `relay_metrics._native`: the relay-metrics collector for the Python package `relay_metrics`.
//!
//! The Python modules (`python/relay_metrics/`) hold Relay's API; this module holds what must be
//! fast or off the interpreter: collecting (always with the GIL released, on the caller's thread
//! for `collect()` or on the collector's own worker thread for `await acollect()`), turning a
//! snapshot into the Python dataclasses, and the fixed-rate polling thread that emits Relay's
//! metric marks.

mod collector;
mod marks;
mod objects;
mod recorder;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<collector::NativeCollector>()?;
    module.add_class::<collector::Collecting>()?;
    module.add_class::<collector::LoopWaker>()?;
    module.add_class::<recorder::NativeRecorder>()?;
    module.add_function(wrap_pyfunction!(objects::_install, module)?)?;
    module.add_function(wrap_pyfunction!(objects::_schema_table, module)?)?;
    module.add_function(wrap_pyfunction!(validate_config, module)?)?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}

/// Validates a `resource_metrics` component config (JSON text) without building a collector:
/// `ValueError` with Relay's message (`invalid resource metrics config: …`) when invalid.
#[pyfunction]
fn validate_config(config_json: &str) -> PyResult<()> {
    relay_metrics::ResourceMetricsConfig::from_text(config_json)
        .map(drop)
        .map_err(|error| pyo3::exceptions::PyValueError::new_err(error.to_string()))
}
