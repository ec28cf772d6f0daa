//! Relay's metric marks: the measurements of a snapshot (`relay_metrics::output::relay_names`,
//! the one table of Relay's names) as the dicts Relay's mark events carry in
//! `data["measurements"]`.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use relay_metrics::output::relay_names::{
    for_each_measurement, RelayAttributeValue, RelayMeasurement, RelayValue,
};
use relay_metrics::ResourceMetricsSnapshot;

/// One measurement as Relay's dict: `name`, `kind`, `value_type`, `value`, `unit`,
/// `description`, `attributes`, `boundaries`.
fn measurement<'py>(py: Python<'py>, m: &RelayMeasurement<'_>) -> PyResult<Bound<'py, PyDict>> {
    let attributes = PyDict::new(py);
    for (key, value) in m.attributes() {
        match value {
            RelayAttributeValue::Str(text) => {
                attributes.set_item(PyString::intern(py, key), *text)?
            }
            RelayAttributeValue::Int(number) => {
                attributes.set_item(PyString::intern(py, key), *number)?
            }
        }
    }
    let dict = PyDict::new(py);
    dict.set_item(intern!(py, "attributes"), attributes)?;
    dict.set_item(intern!(py, "boundaries"), py.None())?;
    dict.set_item(
        intern!(py, "description"),
        PyString::intern(py, m.description),
    )?;
    dict.set_item(intern!(py, "kind"), intern!(py, "gauge"))?;
    dict.set_item(intern!(py, "name"), PyString::intern(py, m.name))?;
    dict.set_item(intern!(py, "unit"), PyString::intern(py, m.unit.as_str()))?;
    match m.value {
        RelayValue::U64(value) => dict.set_item(intern!(py, "value"), value)?,
        RelayValue::F64(value) => dict.set_item(intern!(py, "value"), value)?,
    }
    dict.set_item(intern!(py, "value_type"), m.value.value_type())?;
    Ok(dict)
}

/// The measurement dicts of `snapshot`, in Relay's order.
pub(crate) fn measurements<'py>(
    py: Python<'py>,
    snapshot: &ResourceMetricsSnapshot,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    let mut failure = None;
    for_each_measurement(snapshot, |m| {
        if failure.is_some() {
            return;
        }
        if let Err(error) = measurement(py, &m).and_then(|dict| list.append(dict)) {
            failure = Some(error);
        }
    });
    match failure {
        Some(error) => Err(error),
        None => Ok(list),
    }
}

/// Calls `emit(timestamp, measurements)`: the timestamp as Relay's marks write it (RFC 3339,
/// nanoseconds, `+00:00`).
pub(crate) fn emit(
    py: Python<'_>,
    snapshot: &ResourceMetricsSnapshot,
    emit: &Py<PyAny>,
) -> PyResult<()> {
    let timestamp = snapshot
        .timestamp
        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, false);
    let list = measurements(py, snapshot)?;
    emit.bind(py).call1((timestamp, list))?;
    Ok(())
}
