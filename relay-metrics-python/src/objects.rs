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
    AcceleratorDeviceMetrics, AcceleratorProcessMetrics, CpuMetrics, DiskMetrics, FieldUnit,
    FilesystemCapacityMetrics, GpuMetrics, MemoryMetrics, NetworkInterfaceMetrics, NetworkMetrics,
    NetworkTrafficMetrics, ProcessMetrics, ProcessSamplingMetadata, ResourceLimitEventCount,
    ResourceMetricsSnapshot, SchemaField, SECTIONS,
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

/// The schema table (`relay_metrics::snapshot::SECTIONS`): section name → list of
/// `(field, unit enum name or None)`, in order, for the tests that hold the dataclasses to it.
#[pyfunction]
pub(crate) fn _schema_table(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let table = PyDict::new(py);
    for section in SECTIONS {
        let fields = PyList::empty(py);
        for field in section.fields {
            let unit = field.unit.map(FieldUnit::python_enum);
            fields.append((field.name, unit))?;
        }
        table.set_item(section.name, fields)?;
    }
    Ok(table)
}

/// The registered schema, or an error telling how this happened.
pub(crate) fn schema(py: Python<'_>) -> PyResult<&Schema> {
    SCHEMA.get(py).ok_or_else(|| {
        pyo3::exceptions::PyRuntimeError::new_err(
            "relay_metrics._native used before relay_metrics.resource_metrics was imported",
        )
    })
}

/// Makes an instance of `$cls` with the given field values in its `__dict__`. A key is a field
/// name (an identifier, as destructured) or a string literal.
macro_rules! instance {
    ($py:expr, $schema:expr, $cls:expr, { $($key:tt => $value:expr),* $(,)? }) => {{
        let py = $py;
        let object = $schema.object_new.bind(py).call1(($cls.bind(py),))?;
        let dict = object.getattr(intern!(py, "__dict__"))?.cast_into::<PyDict>()?;
        $( dict.set_item(intern!(py, key!($key)), $value)?; )*
        object
    }};
}

/// A dataclass field's name: the destructured field's identifier, or a literal.
macro_rules! key {
    ($field:ident) => {
        stringify!($field)
    };
    ($key:literal) => {
        $key
    };
}

// Each builder destructures its struct completely, so a field added to the schema table does
// not compile until it is built here; the keys are the fields' own names.
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

    /// A measurement field; `field` (its schema-table entry) says whether its Python unit is a
    /// `DataUnit` (disk and network amounts) or the unit family's own enum.
    fn measurement<'py>(
        &self,
        py: Python<'py>,
        measurement: &Option<Measurement>,
        field: SchemaField,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(measurement) = measurement else {
            return Ok(py.None().into_bound(py));
        };
        let family = match field.unit {
            Some(FieldUnit::Data) => Family::Data,
            _ => Family::Other,
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
            let ResourceLimitEventCount {
                resource,
                event,
                count,
            } = event;
            list.append(instance!(py, self, self.limit_event, {
                resource => PyString::intern(py, resource.as_str()),
                event => PyString::intern(py, event.as_str()),
                count => self.measurement(py, count, ResourceLimitEventCount::count)?,
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
        let ResourceMetricsSnapshot {
            timestamp: at,
            operating_system,
            measurement_scope,
            process_sampling,
            cpu,
            memory,
            process,
            disk,
            gpu,
            network,
            // Built lazily from the JSON by `_Extensions`.
            extensions: _,
        } = snapshot;
        let json = PyString::new(py, json);
        let object = instance!(py, self, self.snapshot, {
            timestamp => timestamp(py, at)?,
            operating_system => PyString::intern(py, operating_system.as_str()),
            measurement_scope => PyString::intern(py, measurement_scope.as_str()),
            process_sampling => optional(py, process_sampling, |s| self.sampling(py, s))?,
            cpu => optional(py, cpu, |c| self.cpu(py, c))?,
            memory => optional(py, memory, |m| self.memory(py, m))?,
            process => optional(py, process, |p| self.process(py, p))?,
            disk => optional(py, disk, |d| self.disk(py, d))?,
            gpu => optional(py, gpu, |g| self.gpu(py, g))?,
            network => optional(py, network, |n| self.network(py, n))?,
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
        let ProcessSamplingMetadata {
            visible_processes,
            sampled_processes,
            field_sampled_processes,
        } = sampling;
        let fields = PyDict::new(py);
        for (key, count) in field_sampled_processes.iter() {
            fields.set_item(PyString::intern(py, key), count)?;
        }
        Ok(instance!(py, self, self.sampling, {
            visible_processes => *visible_processes,
            sampled_processes => *sampled_processes,
            field_sampled_processes => fields,
        }))
    }

    fn cpu<'py>(&self, py: Python<'py>, cpu: &CpuMetrics) -> PyResult<Bound<'py, PyAny>> {
        type S = CpuMetrics;
        let CpuMetrics {
            user_time,
            system_time,
            total_time,
            consumption_rate,
            throttled_time,
            effective_limit,
            some_pressure_stall_time,
            full_pressure_stall_time,
            limit_events,
        } = cpu;
        Ok(instance!(py, self, self.cpu, {
            user_time => self.measurement(py, user_time, S::user_time)?,
            system_time => self.measurement(py, system_time, S::system_time)?,
            total_time => self.measurement(py, total_time, S::total_time)?,
            consumption_rate => self.measurement(py, consumption_rate, S::consumption_rate)?,
            throttled_time => self.measurement(py, throttled_time, S::throttled_time)?,
            effective_limit => self.measurement(py, effective_limit, S::effective_limit)?,
            some_pressure_stall_time => self.measurement(py, some_pressure_stall_time, S::some_pressure_stall_time)?,
            full_pressure_stall_time => self.measurement(py, full_pressure_stall_time, S::full_pressure_stall_time)?,
            limit_events => self.limit_events(py, limit_events)?,
        }))
    }

    fn memory<'py>(&self, py: Python<'py>, m: &MemoryMetrics) -> PyResult<Bound<'py, PyAny>> {
        type S = MemoryMetrics;
        let MemoryMetrics {
            system_used,
            system_total,
            system_available,
            resident,
            private,
            physical_footprint,
            virtual_memory,
            peak_resident,
            limit,
            environment_accounted,
            some_pressure_stall_time,
            full_pressure_stall_time,
            out_of_memory_event_count,
            limit_events,
        } = m;
        Ok(instance!(py, self, self.memory, {
            system_used => self.measurement(py, system_used, S::system_used)?,
            system_total => self.measurement(py, system_total, S::system_total)?,
            system_available => self.measurement(py, system_available, S::system_available)?,
            resident => self.measurement(py, resident, S::resident)?,
            private => self.measurement(py, private, S::private)?,
            physical_footprint => self.measurement(py, physical_footprint, S::physical_footprint)?,
            virtual_memory => self.measurement(py, virtual_memory, S::virtual_memory)?,
            peak_resident => self.measurement(py, peak_resident, S::peak_resident)?,
            limit => self.measurement(py, limit, S::limit)?,
            environment_accounted => self.measurement(py, environment_accounted, S::environment_accounted)?,
            some_pressure_stall_time => self.measurement(py, some_pressure_stall_time, S::some_pressure_stall_time)?,
            full_pressure_stall_time => self.measurement(py, full_pressure_stall_time, S::full_pressure_stall_time)?,
            out_of_memory_event_count => self.measurement(py, out_of_memory_event_count, S::out_of_memory_event_count)?,
            limit_events => self.limit_events(py, limit_events)?,
        }))
    }

    fn process<'py>(&self, py: Python<'py>, p: &ProcessMetrics) -> PyResult<Bound<'py, PyAny>> {
        type S = ProcessMetrics;
        let ProcessMetrics {
            active_count,
            descendant_count,
            thread_count,
            lifetime_creation_count,
            open_file_descriptor_count,
            windows_handle_count,
            limit_events,
        } = p;
        Ok(instance!(py, self, self.process, {
            active_count => self.measurement(py, active_count, S::active_count)?,
            descendant_count => self.measurement(py, descendant_count, S::descendant_count)?,
            thread_count => self.measurement(py, thread_count, S::thread_count)?,
            lifetime_creation_count => self.measurement(py, lifetime_creation_count, S::lifetime_creation_count)?,
            open_file_descriptor_count => self.measurement(py, open_file_descriptor_count, S::open_file_descriptor_count)?,
            windows_handle_count => self.measurement(py, windows_handle_count, S::windows_handle_count)?,
            limit_events => self.limit_events(py, limit_events)?,
        }))
    }

    fn disk<'py>(&self, py: Python<'py>, d: &DiskMetrics) -> PyResult<Bound<'py, PyAny>> {
        type S = DiskMetrics;
        let DiskMetrics {
            read_data,
            write_data,
            read_throughput,
            write_throughput,
            read_operations,
            write_operations,
            filesystems,
        } = d;
        let list = PyList::empty(py);
        for filesystem in filesystems {
            list.append(self.filesystem(py, filesystem)?)?;
        }
        Ok(instance!(py, self, self.disk, {
            read_data => self.measurement(py, read_data, S::read_data)?,
            write_data => self.measurement(py, write_data, S::write_data)?,
            read_throughput => self.measurement(py, read_throughput, S::read_throughput)?,
            write_throughput => self.measurement(py, write_throughput, S::write_throughput)?,
            read_operations => self.measurement(py, read_operations, S::read_operations)?,
            write_operations => self.measurement(py, write_operations, S::write_operations)?,
            filesystems => list,
        }))
    }

    fn filesystem<'py>(
        &self,
        py: Python<'py>,
        f: &FilesystemCapacityMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        type S = FilesystemCapacityMetrics;
        let FilesystemCapacityMetrics {
            path,
            total_capacity,
            available_capacity,
            free_capacity,
        } = f;
        Ok(instance!(py, self, self.filesystem, {
            path => PyString::new(py, path),
            total_capacity => self.measurement(py, total_capacity, S::total_capacity)?,
            available_capacity => self.measurement(py, available_capacity, S::available_capacity)?,
            free_capacity => self.measurement(py, free_capacity, S::free_capacity)?,
        }))
    }

    fn gpu<'py>(&self, py: Python<'py>, g: &GpuMetrics) -> PyResult<Bound<'py, PyAny>> {
        let GpuMetrics {
            device_metrics,
            process_metrics,
        } = g;
        let devices = optional(py, device_metrics, |devices| {
            let list = PyList::empty(py);
            for device in devices {
                list.append(self.device(py, device)?)?;
            }
            Ok(list.into_any())
        })?;
        let processes = optional(py, process_metrics, |processes| {
            let list = PyList::empty(py);
            for process in processes {
                list.append(self.accelerator_process(py, process)?)?;
            }
            Ok(list.into_any())
        })?;
        Ok(instance!(py, self, self.gpu, {
            device_metrics => devices,
            process_metrics => processes,
        }))
    }

    fn device<'py>(
        &self,
        py: Python<'py>,
        d: &AcceleratorDeviceMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        type S = AcceleratorDeviceMetrics;
        let AcceleratorDeviceMetrics {
            vendor,
            device_identifier,
            device_index,
            memory_used,
            compute_utilization,
        } = d;
        Ok(instance!(py, self, self.device, {
            vendor => PyString::intern(py, vendor.as_str()),
            device_identifier => PyString::new(py, device_identifier),
            device_index => *device_index,
            memory_used => self.measurement(py, memory_used, S::memory_used)?,
            compute_utilization => self.measurement(py, compute_utilization, S::compute_utilization)?,
        }))
    }

    fn accelerator_process<'py>(
        &self,
        py: Python<'py>,
        p: &AcceleratorProcessMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        type S = AcceleratorProcessMetrics;
        let AcceleratorProcessMetrics {
            vendor,
            device_identifier,
            device_index,
            process_id,
            memory_used,
            compute_utilization,
        } = p;
        Ok(instance!(py, self, self.accelerator_process, {
            vendor => PyString::intern(py, vendor.as_str()),
            device_identifier => PyString::new(py, device_identifier),
            device_index => *device_index,
            process_id => *process_id,
            memory_used => self.measurement(py, memory_used, S::memory_used)?,
            compute_utilization => self.measurement(py, compute_utilization, S::compute_utilization)?,
        }))
    }

    fn network<'py>(&self, py: Python<'py>, n: &NetworkMetrics) -> PyResult<Bound<'py, PyAny>> {
        let NetworkMetrics {
            measurement_scope,
            system,
            interfaces,
        } = n;
        let list = PyList::empty(py);
        for interface in interfaces {
            list.append(self.interface(py, interface)?)?;
        }
        Ok(instance!(py, self, self.network, {
            measurement_scope => PyString::intern(py, measurement_scope.as_str()),
            system => self.traffic(py, system)?,
            interfaces => list,
        }))
    }

    fn interface<'py>(
        &self,
        py: Python<'py>,
        i: &NetworkInterfaceMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        let NetworkInterfaceMetrics { name, traffic } = i;
        Ok(instance!(py, self, self.interface, {
            name => PyString::new(py, name),
            traffic => self.traffic(py, traffic)?,
        }))
    }

    fn traffic<'py>(
        &self,
        py: Python<'py>,
        t: &NetworkTrafficMetrics,
    ) -> PyResult<Bound<'py, PyAny>> {
        type S = NetworkTrafficMetrics;
        let NetworkTrafficMetrics {
            received_data,
            transmitted_data,
            receive_throughput,
            transmit_throughput,
            received_packets,
            transmitted_packets,
            receive_errors,
            transmit_errors,
        } = t;
        Ok(instance!(py, self, self.traffic, {
            received_data => self.measurement(py, received_data, S::received_data)?,
            transmitted_data => self.measurement(py, transmitted_data, S::transmitted_data)?,
            receive_throughput => self.measurement(py, receive_throughput, S::receive_throughput)?,
            transmit_throughput => self.measurement(py, transmit_throughput, S::transmit_throughput)?,
            received_packets => self.measurement(py, received_packets, S::received_packets)?,
            transmitted_packets => self.measurement(py, transmitted_packets, S::transmitted_packets)?,
            receive_errors => self.measurement(py, receive_errors, S::receive_errors)?,
            transmit_errors => self.measurement(py, transmit_errors, S::transmit_errors)?,
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
