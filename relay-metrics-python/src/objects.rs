//! Snapshot → Python objects: the frozen dataclasses of `relay_metrics.resource_metrics`, built
//! without running their `__init__` (which goes through `object.__setattr__` once per field
//! because they are frozen). Each instance is made with `object.__new__(cls)` and its field
//! values go straight into its `__dict__`, the state `__init__` would have produced.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDateTime, PyDict, PyList, PyString, PyTzInfo};
use pyo3::{intern, IntoPyObjectExt};

use chrono::{Datelike, Timelike};
use relay_metrics::snapshot::{
    AcceleratorDeviceMetrics, AcceleratorProcessMetrics, CpuMetrics, DiskMetrics,
    FilesystemCapacityMetrics, GpuMetrics, MemoryMetrics, NetworkInterfaceMetrics, NetworkMetrics,
    NetworkTrafficMetrics, ProcessMetrics, ProcessSamplingMetadata, ResourceLimitEventCount,
    ResourceMetricsSnapshot,
};
use relay_metrics::units::{Measurement, MeasurementUnit, MeasurementValue};

/// Number of unit slots cached by discriminant; a unit beyond it is looked up by name.
const UNIT_SLOTS: usize = 40;

/// Which enum a field's unit belongs to, where values are shared between families.
#[derive(Clone, Copy)]
enum Family {
    /// `DataUnit` (disk and network amounts).
    Data,
    /// Every other family (`CapacityUnit` for the shared values).
    Other,
}

/// The Python classes and helpers the builder needs, registered once by
/// `relay_metrics.resource_metrics` at import.
pub(crate) struct Schema {
    object_new: Py<PyAny>,
    measurement: Py<PyAny>,
    snapshot: Py<PyAny>,
    sampling: Py<PyAny>,
    cpu: Py<PyAny>,
    memory: Py<PyAny>,
    process: Py<PyAny>,
    disk: Py<PyAny>,
    filesystem: Py<PyAny>,
    gpu: Py<PyAny>,
    device: Py<PyAny>,
    accelerator_process: Py<PyAny>,
    network: Py<PyAny>,
    interface: Py<PyAny>,
    traffic: Py<PyAny>,
    limit_event: Py<PyAny>,
    /// `relay_metrics.resource_metrics._Extensions`: a lazy view of the JSON's `extensions`.
    extensions: Py<PyAny>,
    /// Unit value → enum member, across the seven unit families.
    unit_members: Py<PyDict>,
    unit_cache: [PyOnceLock<Py<PyAny>>; UNIT_SLOTS],
    /// Unit value → `DataUnit` member, for the fields typed `DataUnit`.
    data_unit_members: Py<PyDict>,
    data_unit_cache: [PyOnceLock<Py<PyAny>>; UNIT_SLOTS],
    /// `fn() -> (future, LoopWaker)`: a future of the running loop for an await to yield, and
    /// the loop's waker.
    pub(crate) wait_future: Py<PyAny>,
}

static SCHEMA: PyOnceLock<Schema> = PyOnceLock::new();

/// Registers the classes (called by `relay_metrics.resource_metrics` at import).
#[pyfunction]
pub(crate) fn _install(py: Python<'_>, classes: &Bound<'_, PyDict>) -> PyResult<()> {
    let get = |name: &str| -> PyResult<Py<PyAny>> {
        classes
            .get_item(name)?
            .map(Bound::unbind)
            .ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))
    };
    let schema = Schema {
        object_new: py
            .import("builtins")?
            .getattr("object")?
            .getattr("__new__")?
            .unbind(),
        measurement: get("ResourceMeasurement")?,
        snapshot: get("ResourceMetricsSnapshot")?,
        sampling: get("ProcessSamplingMetadata")?,
        cpu: get("CpuMetrics")?,
        memory: get("MemoryMetrics")?,
        process: get("ProcessMetrics")?,
        disk: get("DiskMetrics")?,
        filesystem: get("FilesystemCapacityMetrics")?,
        gpu: get("GpuMetrics")?,
        device: get("AcceleratorDeviceMetrics")?,
        accelerator_process: get("AcceleratorProcessMetrics")?,
        network: get("NetworkMetrics")?,
        interface: get("NetworkInterfaceMetrics")?,
        traffic: get("NetworkTrafficMetrics")?,
        limit_event: get("ResourceLimitEventCount")?,
        extensions: get("_Extensions")?,
        unit_members: get("_unit_members")?
            .into_bound(py)
            .cast_into::<PyDict>()?
            .unbind(),
        unit_cache: std::array::from_fn(|_| PyOnceLock::new()),
        data_unit_members: get("_data_unit_members")?
            .into_bound(py)
            .cast_into::<PyDict>()?
            .unbind(),
        data_unit_cache: std::array::from_fn(|_| PyOnceLock::new()),
        wait_future: get("_wait_future")?,
    };
    // A second import (a reload) keeps the first registration: the classes are the same.
    let _ = SCHEMA.set(py, schema);
    Ok(())
}

/// The registered schema, or an error telling how this happened.
pub(crate) fn schema(py: Python<'_>) -> PyResult<&Schema> {
    SCHEMA.get(py).ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(
            "relay_metrics._native used before relay_metrics.resource_metrics was imported",
        )
    })
}

/// Makes an instance of `$cls` with the given field values in its `__dict__`.
macro_rules! instance {
    ($py:expr, $schema:expr, $cls:expr, { $($field:literal => $value:expr),* $(,)? }) => {{
        let py = $py;
        let object = $schema.object_new.bind(py).call1(($cls.bind(py),))?;
        let dict = object.getattr(intern!(py, "__dict__"))?.cast_into::<PyDict>()?;
        $( dict.set_item(intern!(py, $field), $value)?; )*
        object
    }};
}

impl Schema {
    fn unit<'py>(
        &self,
        py: Python<'py>,
        unit: MeasurementUnit,
        family: Family,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (members, cache) = match family {
            Family::Data => (&self.data_unit_members, &self.data_unit_cache),
            Family::Other => (&self.unit_members, &self.unit_cache),
        };
        let lookup = || -> PyResult<Py<PyAny>> {
            members
                .bind(py)
                .get_item(unit.as_str())?
                .map(Bound::unbind)
                .ok_or_else(|| {
                    pyo3::exceptions::PyKeyError::new_err(format!("unit {}", unit.as_str()))
                })
        };
        match cache.get(unit as usize) {
            Some(slot) => Ok(slot.get_or_try_init(py, lookup)?.bind(py).clone()),
            None => Ok(lookup()?.into_bound(py)),
        }
    }

    fn measurement<'py>(
        &self,
        py: Python<'py>,
        measurement: &Option<Measurement>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.typed_measurement(py, measurement, Family::Other)
    }

    /// A measurement of a field typed `DataUnit` (disk and network amounts).
    fn data<'py>(
        &self,
        py: Python<'py>,
        measurement: &Option<Measurement>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.typed_measurement(py, measurement, Family::Data)
    }

    fn typed_measurement<'py>(
        &self,
        py: Python<'py>,
        measurement: &Option<Measurement>,
        family: Family,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(measurement) = measurement else {
            return Ok(py.None().into_bound(py));
        };
        let value = match measurement.value {
            MeasurementValue::Integer(value) => value.into_bound_py_any(py)?,
            MeasurementValue::Decimal(value) => value.into_bound_py_any(py)?,
        };
        Ok(instance!(py, self, self.measurement, {
            "value" => value,
            "unit" => self.unit(py, measurement.unit, family)?,
        }))
    }

    fn limit_events<'py>(
        &self,
        py: Python<'py>,
        events: &[ResourceLimitEventCount],
    ) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for event in events {
            list.append(instance!(py, self, self.limit_event, {
                "resource" => PyString::intern(py, event.resource.as_str()),
                "event" => PyString::intern(py, event.event.as_str()),
                "count" => self.measurement(py, &event.count)?,
            }))?;
        }
        Ok(list)
    }

    /// The whole snapshot; `json` is its CLI JSON, kept for `to_json()` and `extensions`.
    pub(crate) fn snapshot<'py>(
        &self,
        py: Python<'py>,
        snapshot: &ResourceMetricsSnapshot,
        json: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let json = PyString::new(py, json);
        let object = instance!(py, self, self.snapshot, {
            "timestamp" => timestamp(py, &snapshot.timestamp)?,
            "operating_system" => PyString::intern(py, snapshot.operating_system.as_str()),
            "measurement_scope" => PyString::intern(py, snapshot.measurement_scope.as_str()),
            "process_sampling" => optional(py, &snapshot.process_sampling, |s| self.sampling(py, s))?,
            "cpu" => optional(py, &snapshot.cpu, |c| self.cpu(py, c))?,
            "memory" => optional(py, &snapshot.memory, |m| self.memory(py, m))?,
            "process" => optional(py, &snapshot.process, |p| self.process(py, p))?,
            "disk" => optional(py, &snapshot.disk, |d| self.disk(py, d))?,
            "gpu" => optional(py, &snapshot.gpu, |g| self.gpu(py, g))?,
            "network" => optional(py, &snapshot.network, |n| self.network(py, n))?,
            "extensions" => self.extensions.bind(py).call1((&json,))?,
            "_relay_metrics_json" => json,
        });
        Ok(object)
    }

    fn sampling<'py>(
        &self,
        py: Python<'py>,
        sampling: &ProcessSamplingMetadata,
    ) -> PyResult<Bound<'py, PyAny>> {
        let fields = PyDict::new(py);
        for (key, count) in sampling.field_sampled_processes.iter() {
            fields.set_item(PyString::intern(py, key), count)?;
        }
        Ok(instance!(py, self, self.sampling, {
            "visible_processes" => sampling.visible_processes,
            "sampled_processes" => sampling.sampled_processes,
            "field_sampled_processes" => fields,
        }))
    }

    fn cpu<'py>(&self, py: Python<'py>, cpu: &CpuMetrics) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.cpu, {
            "user_time" => self.measurement(py, &cpu.user_time)?,
            "system_time" => self.measurement(py, &cpu.system_time)?,
            "total_time" => self.measurement(py, &cpu.total_time)?,
            "consumption_rate" => self.measurement(py, &cpu.consumption_rate)?,
            "throttled_time" => self.measurement(py, &cpu.throttled_time)?,
            "effective_limit" => self.measurement(py, &cpu.effective_limit)?,
            "some_pressure_stall_time" => self.measurement(py, &cpu.some_pressure_stall_time)?,
            "full_pressure_stall_time" => self.measurement(py, &cpu.full_pressure_stall_time)?,
            "limit_events" => self.limit_events(py, &cpu.limit_events)?,
        }))
    }

    fn memory<'py>(&self, py: Python<'py>, m: &MemoryMetrics) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.memory, {
            "system_used" => self.measurement(py, &m.system_used)?,
            "system_total" => self.measurement(py, &m.system_total)?,
            "system_available" => self.measurement(py, &m.system_available)?,
            "resident" => self.measurement(py, &m.resident)?,
            "private" => self.measurement(py, &m.private)?,
            "physical_footprint" => self.measurement(py, &m.physical_footprint)?,
            "virtual_memory" => self.measurement(py, &m.virtual_memory)?,
            "peak_resident" => self.measurement(py, &m.peak_resident)?,
            "limit" => self.measurement(py, &m.limit)?,
            "environment_accounted" => self.measurement(py, &m.environment_accounted)?,
            "some_pressure_stall_time" => self.measurement(py, &m.some_pressure_stall_time)?,
            "full_pressure_stall_time" => self.measurement(py, &m.full_pressure_stall_time)?,
            "out_of_memory_event_count" => self.measurement(py, &m.out_of_memory_event_count)?,
            "limit_events" => self.limit_events(py, &m.limit_events)?,
        }))
    }

    fn process<'py>(&self, py: Python<'py>, p: &ProcessMetrics) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.process, {
            "active_count" => self.measurement(py, &p.active_count)?,
            "descendant_count" => self.measurement(py, &p.descendant_count)?,
            "thread_count" => self.measurement(py, &p.thread_count)?,
            "lifetime_creation_count" => self.measurement(py, &p.lifetime_creation_count)?,
            "open_file_descriptor_count" => self.measurement(py, &p.open_file_descriptor_count)?,
            "windows_handle_count" => self.measurement(py, &p.windows_handle_count)?,
            "limit_events" => self.limit_events(py, &p.limit_events)?,
        }))
    }

    fn disk<'py>(&self, py: Python<'py>, d: &DiskMetrics) -> PyResult<Bound<'py, PyAny>> {
        let filesystems = PyList::empty(py);
        for filesystem in &d.filesystems {
            filesystems.append(self.filesystem(py, filesystem)?)?;
        }
        Ok(instance!(py, self, self.disk, {
            "read_data" => self.data(py, &d.read_data)?,
            "write_data" => self.data(py, &d.write_data)?,
            "read_throughput" => self.measurement(py, &d.read_throughput)?,
            "write_throughput" => self.measurement(py, &d.write_throughput)?,
            "read_operations" => self.measurement(py, &d.read_operations)?,
            "write_operations" => self.measurement(py, &d.write_operations)?,
            "filesystems" => filesystems,
        }))
    }

    fn filesystem<'py>(
        &self,
        py: Python<'py>,
        f: &FilesystemCapacityMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.filesystem, {
            "path" => PyString::new(py, &f.path),
            "total_capacity" => self.measurement(py, &f.total_capacity)?,
            "available_capacity" => self.measurement(py, &f.available_capacity)?,
            "free_capacity" => self.measurement(py, &f.free_capacity)?,
        }))
    }

    fn gpu<'py>(&self, py: Python<'py>, g: &GpuMetrics) -> PyResult<Bound<'py, PyAny>> {
        let devices = optional(py, &g.device_metrics, |devices| {
            let list = PyList::empty(py);
            for device in devices {
                list.append(self.device(py, device)?)?;
            }
            Ok(list.into_any())
        })?;
        let processes = optional(py, &g.process_metrics, |processes| {
            let list = PyList::empty(py);
            for process in processes {
                list.append(self.accelerator_process(py, process)?)?;
            }
            Ok(list.into_any())
        })?;
        Ok(instance!(py, self, self.gpu, {
            "device_metrics" => devices,
            "process_metrics" => processes,
        }))
    }

    fn device<'py>(
        &self,
        py: Python<'py>,
        d: &AcceleratorDeviceMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.device, {
            "vendor" => PyString::intern(py, d.vendor.as_str()),
            "device_identifier" => PyString::new(py, &d.device_identifier),
            "device_index" => d.device_index,
            "memory_used" => self.measurement(py, &d.memory_used)?,
            "compute_utilization" => self.measurement(py, &d.compute_utilization)?,
        }))
    }

    fn accelerator_process<'py>(
        &self,
        py: Python<'py>,
        p: &AcceleratorProcessMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.accelerator_process, {
            "vendor" => PyString::intern(py, p.vendor.as_str()),
            "device_identifier" => PyString::new(py, &p.device_identifier),
            "device_index" => p.device_index,
            "process_id" => p.process_id,
            "memory_used" => self.measurement(py, &p.memory_used)?,
            "compute_utilization" => self.measurement(py, &p.compute_utilization)?,
        }))
    }

    fn network<'py>(&self, py: Python<'py>, n: &NetworkMetrics) -> PyResult<Bound<'py, PyAny>> {
        let interfaces = PyList::empty(py);
        for interface in &n.interfaces {
            interfaces.append(self.interface(py, interface)?)?;
        }
        Ok(instance!(py, self, self.network, {
            "measurement_scope" => PyString::intern(py, n.measurement_scope.as_str()),
            "system" => self.traffic(py, &n.system)?,
            "interfaces" => interfaces,
        }))
    }

    fn interface<'py>(
        &self,
        py: Python<'py>,
        i: &NetworkInterfaceMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.interface, {
            "name" => PyString::new(py, &i.name),
            "traffic" => self.traffic(py, &i.traffic)?,
        }))
    }

    fn traffic<'py>(
        &self,
        py: Python<'py>,
        t: &NetworkTrafficMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        Ok(instance!(py, self, self.traffic, {
            "received_data" => self.data(py, &t.received_data)?,
            "transmitted_data" => self.data(py, &t.transmitted_data)?,
            "receive_throughput" => self.measurement(py, &t.receive_throughput)?,
            "transmit_throughput" => self.measurement(py, &t.transmit_throughput)?,
            "received_packets" => self.measurement(py, &t.received_packets)?,
            "transmitted_packets" => self.measurement(py, &t.transmitted_packets)?,
            "receive_errors" => self.measurement(py, &t.receive_errors)?,
            "transmit_errors" => self.measurement(py, &t.transmit_errors)?,
        }))
    }
}

fn optional<'py, T>(
    py: Python<'py>,
    value: &Option<T>,
    build: impl FnOnce(&T) -> PyResult<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Some(value) => build(value),
        None => Ok(py.None().into_bound(py)),
    }
}

/// A UTC-aware `datetime` with microsecond precision (Python's), truncated as Relay's is.
fn timestamp<'py>(
    py: Python<'py>,
    at: &chrono::DateTime<chrono::Utc>,
) -> PyResult<Bound<'py, PyAny>> {
    let utc = PyTzInfo::utc(py)?;
    // A leap second's nanoseconds run past 1e9; Python has no such instant.
    let micros = (at.nanosecond() / 1_000).min(999_999);
    let narrow = |value: u32| u8::try_from(value).unwrap_or(u8::MAX);
    Ok(PyDateTime::new(
        py,
        at.year(),
        narrow(at.month()),
        narrow(at.day()),
        narrow(at.hour()),
        narrow(at.minute()),
        narrow(at.second()),
        micros,
        Some(&utc),
    )?
    .into_any())
}
