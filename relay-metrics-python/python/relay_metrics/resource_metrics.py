"""Typed resource-metrics snapshots: NeMo Relay's ``nemo_relay.resource_metrics`` API.

The names, enum values, dataclass fields and annotations are those of NeMo Relay 0.10.4, so a
program written for Relay runs unchanged once it imports this module instead. Two deliberate
differences: ``MeasurementScope`` also allows ``"cgroup"`` (relay-metrics measures any cgroup),
and ``ResourceMetricsSnapshot`` has one more, last field, ``extensions`` (relay-metrics' own
detail; ``None`` when built by hand). Collected snapshots also offer ``to_dict()`` and
``to_json()``: the relay-metrics CLI's JSON of the same snapshot.
"""

from __future__ import annotations

import asyncio
import copy
import json
import weakref
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, Generic, Literal, TypeAlias, TypeVar

from . import _native


class DurationUnit(StrEnum):
    """Units for duration measurements."""

    MICROSECONDS = "microseconds"
    MILLISECONDS = "milliseconds"
    SECONDS = "seconds"
    MINUTES = "minutes"


class CapacityUnit(StrEnum):
    """Units for capacity measurements."""

    BYTES = "bytes"
    KILOBYTES = "kilobytes"
    MEGABYTES = "megabytes"
    GIGABYTES = "gigabytes"
    TERABYTES = "terabytes"
    KIBIBYTES = "kibibytes"
    MEBIBYTES = "mebibytes"
    GIBIBYTES = "gibibytes"
    TEBIBYTES = "tebibytes"


class DataUnit(StrEnum):
    """Units for data measurements."""

    BYTES = "bytes"
    KILOBYTES = "kilobytes"
    MEGABYTES = "megabytes"
    GIGABYTES = "gigabytes"
    TERABYTES = "terabytes"
    KIBIBYTES = "kibibytes"
    MEBIBYTES = "mebibytes"
    GIBIBYTES = "gibibytes"
    TEBIBYTES = "tebibytes"


class BandwidthUnit(StrEnum):
    """Units for bandwidth measurements."""

    BYTES_PER_SECOND = "bytes_per_second"
    KIBIBYTES_PER_SECOND = "kibibytes_per_second"
    MEBIBYTES_PER_SECOND = "mebibytes_per_second"
    GIBIBYTES_PER_SECOND = "gibibytes_per_second"
    BITS_PER_SECOND = "bits_per_second"
    MEGABITS_PER_SECOND = "megabits_per_second"
    GIGABITS_PER_SECOND = "gigabits_per_second"


class CpuUnit(StrEnum):
    """Units for CPU measurements."""

    LOGICAL_PROCESSORS = "logical_processors"
    MILLICORES = "millicores"


class UtilizationUnit(StrEnum):
    """Units for utilization measurements."""

    PERCENTAGE = "percentage"
    FRACTION = "fraction"


class CountUnit(StrEnum):
    """Units for count measurements."""

    PROCESSES = "processes"
    THREADS = "threads"
    FILE_DESCRIPTORS = "file_descriptors"
    HANDLES = "handles"
    EVENTS = "events"
    OPERATIONS = "operations"
    PACKETS = "packets"
    ERRORS = "errors"


OperatingSystem: TypeAlias = Literal["linux", "macos", "windows", "unsupported"]
# relay-metrics adds "cgroup": every process of a cgroup subtree.
MeasurementScope: TypeAlias = Literal["global", "application_process", "process_tree", "cgroup"]
AcceleratorVendor: TypeAlias = Literal["nvidia", "amd", "intel", "apple", "other"]
ResourceLimitResource: TypeAlias = Literal["cpu", "memory", "processes"]
ResourceLimitEventKind: TypeAlias = Literal["throttled", "high", "maximum", "out_of_memory", "terminated"]

MeasurementValue = TypeVar("MeasurementValue", bound=int | float)
UnitType = TypeVar(
    "UnitType",
    bound=DurationUnit | CapacityUnit | DataUnit | BandwidthUnit | CpuUnit | UtilizationUnit | CountUnit,
)


@dataclass(frozen=True)
class ResourceMeasurement(Generic[MeasurementValue, UnitType]):
    """One available value and its selected unit."""

    value: MeasurementValue
    unit: UnitType


@dataclass(frozen=True)
class ResourceLimitEventCount:
    """One typed cumulative resource-limit event counter."""

    resource: ResourceLimitResource
    event: ResourceLimitEventKind
    count: ResourceMeasurement[int | float, CountUnit] | None


@dataclass(frozen=True)
class AcceleratorDeviceMetrics:
    """Device-wide accelerator measurements."""

    vendor: AcceleratorVendor
    device_identifier: str
    device_index: int | None
    memory_used: ResourceMeasurement[int | float, CapacityUnit] | None
    compute_utilization: ResourceMeasurement[float, UtilizationUnit] | None


@dataclass(frozen=True)
class AcceleratorProcessMetrics:
    """Accelerator measurements attributed to one process in the selected scope."""

    vendor: AcceleratorVendor
    device_identifier: str
    device_index: int | None
    process_id: int
    memory_used: ResourceMeasurement[int | float, CapacityUnit] | None
    compute_utilization: ResourceMeasurement[float, UtilizationUnit] | None


@dataclass(frozen=True)
class FilesystemCapacityMetrics:
    """Capacity for one configured filesystem path."""

    path: str
    total_capacity: ResourceMeasurement[int | float, CapacityUnit] | None
    available_capacity: ResourceMeasurement[int | float, CapacityUnit] | None
    free_capacity: ResourceMeasurement[int | float, CapacityUnit] | None


@dataclass(frozen=True)
class CpuMetrics:
    """CPU measurements and CPU limit events."""

    user_time: ResourceMeasurement[int | float, DurationUnit] | None
    system_time: ResourceMeasurement[int | float, DurationUnit] | None
    total_time: ResourceMeasurement[int | float, DurationUnit] | None
    consumption_rate: ResourceMeasurement[float, CpuUnit] | None
    throttled_time: ResourceMeasurement[int | float, DurationUnit] | None
    effective_limit: ResourceMeasurement[float, CpuUnit] | None
    some_pressure_stall_time: ResourceMeasurement[int | float, DurationUnit] | None
    full_pressure_stall_time: ResourceMeasurement[int | float, DurationUnit] | None
    limit_events: list[ResourceLimitEventCount]


@dataclass(frozen=True)
class MemoryMetrics:
    """System and process memory measurements and memory limit events."""

    system_used: ResourceMeasurement[int | float, CapacityUnit] | None
    system_total: ResourceMeasurement[int | float, CapacityUnit] | None
    system_available: ResourceMeasurement[int | float, CapacityUnit] | None
    resident: ResourceMeasurement[int | float, CapacityUnit] | None
    private: ResourceMeasurement[int | float, CapacityUnit] | None
    physical_footprint: ResourceMeasurement[int | float, CapacityUnit] | None
    virtual_memory: ResourceMeasurement[int | float, CapacityUnit] | None
    peak_resident: ResourceMeasurement[int | float, CapacityUnit] | None
    limit: ResourceMeasurement[int | float, CapacityUnit] | None
    environment_accounted: ResourceMeasurement[int | float, CapacityUnit] | None
    some_pressure_stall_time: ResourceMeasurement[int | float, DurationUnit] | None
    full_pressure_stall_time: ResourceMeasurement[int | float, DurationUnit] | None
    out_of_memory_event_count: ResourceMeasurement[int | float, CountUnit] | None
    limit_events: list[ResourceLimitEventCount]


@dataclass(frozen=True)
class ProcessMetrics:
    """Process counts, limits, handles, and descriptors."""

    active_count: ResourceMeasurement[int | float, CountUnit] | None
    descendant_count: ResourceMeasurement[int | float, CountUnit] | None
    thread_count: ResourceMeasurement[int | float, CountUnit] | None
    lifetime_creation_count: ResourceMeasurement[int | float, CountUnit] | None
    open_file_descriptor_count: ResourceMeasurement[int | float, CountUnit] | None
    windows_handle_count: ResourceMeasurement[int | float, CountUnit] | None
    limit_events: list[ResourceLimitEventCount]


@dataclass(frozen=True)
class DiskMetrics:
    """Disk I/O for the measured process scope and filesystem capacity."""

    read_data: ResourceMeasurement[int | float, DataUnit] | None
    write_data: ResourceMeasurement[int | float, DataUnit] | None
    read_throughput: ResourceMeasurement[float, BandwidthUnit] | None
    write_throughput: ResourceMeasurement[float, BandwidthUnit] | None
    read_operations: ResourceMeasurement[int | float, CountUnit] | None
    write_operations: ResourceMeasurement[int | float, CountUnit] | None
    filesystems: list[FilesystemCapacityMetrics]


@dataclass(frozen=True)
class GpuMetrics:
    """Accelerator device-wide and process-attributed measurements."""

    device_metrics: list[AcceleratorDeviceMetrics] | None
    process_metrics: list[AcceleratorProcessMetrics] | None


@dataclass(frozen=True)
class NetworkTrafficMetrics:
    """System interface traffic counters and transfer rates."""

    received_data: ResourceMeasurement[int | float, DataUnit] | None
    transmitted_data: ResourceMeasurement[int | float, DataUnit] | None
    receive_throughput: ResourceMeasurement[float, BandwidthUnit] | None
    transmit_throughput: ResourceMeasurement[float, BandwidthUnit] | None
    received_packets: ResourceMeasurement[int | float, CountUnit] | None
    transmitted_packets: ResourceMeasurement[int | float, CountUnit] | None
    receive_errors: ResourceMeasurement[int | float, CountUnit] | None
    transmit_errors: ResourceMeasurement[int | float, CountUnit] | None


@dataclass(frozen=True)
class NetworkInterfaceMetrics:
    """Traffic measured on one system network interface."""

    name: str
    traffic: NetworkTrafficMetrics


@dataclass(frozen=True)
class NetworkMetrics:
    """System-wide traffic, independent of the process measurement scope."""

    measurement_scope: MeasurementScope
    system: NetworkTrafficMetrics
    interfaces: list[NetworkInterfaceMetrics]


@dataclass(frozen=True)
class ProcessSamplingMetadata:
    """Coverage of process queries used for process-summed measurements."""

    visible_processes: int
    sampled_processes: int
    field_sampled_processes: dict[str, int]


@dataclass(frozen=True)
class ResourceMetricsSnapshot:
    """One point-in-time observation, its metadata, and enabled categories."""

    timestamp: datetime
    operating_system: OperatingSystem
    measurement_scope: MeasurementScope
    process_sampling: ProcessSamplingMetadata | None
    cpu: CpuMetrics | None
    memory: MemoryMetrics | None
    process: ProcessMetrics | None
    disk: DiskMetrics | None
    gpu: GpuMetrics | None
    network: NetworkMetrics | None
    # relay-metrics addition: collector detail (precise CPU, cgroups, kernel events, why values
    # are null), a read-only mapping of the JSON's "extensions" object.
    extensions: Mapping[str, Any] | None = field(default=None)

    def to_json(self) -> str:
        """This snapshot as the relay-metrics CLI's JSON (compact, Relay's key order)."""
        cached = self.__dict__.get("_relay_metrics_json")
        if cached is not None:
            return str(cached)
        return json.dumps(_plain(self), separators=(",", ":"))

    def to_dict(self) -> dict[str, Any]:
        """This snapshot as the relay-metrics CLI's JSON object (plain dicts, lists, numbers)."""
        value: dict[str, Any] = json.loads(self.to_json())
        return value

    def __repr__(self) -> str:
        """One short line of the headline values in human units (the dataclass's own repr, every
        field with raw units, is ~10 KB): ``to_dict()`` has everything."""
        return "ResourceMetricsSnapshot(" + ", ".join(f"{k}={v}" for k, v in _headline(self)) + ")"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's display: the same short line as ``repr()``."""
        printer.text("ResourceMetricsSnapshot(...)" if cycle else repr(self))

    def _repr_html_(self) -> str:
        """Jupyter's display: a compact table of the headline values."""
        from html import escape

        cells = "".join(
            f"<tr><th style=\"text-align:left\">{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in _headline(self)
        )
        return f"<table class=\"relay-metrics-snapshot\"><caption>ResourceMetricsSnapshot</caption>{cells}</table>"


# Each unit as (base unit, factor to it): seconds, bytes, bytes per second, cores, or the count.
_TO_BASE: dict[str, tuple[str, float]] = {
    "microseconds": ("s", 1e-6),
    "milliseconds": ("s", 1e-3),
    "seconds": ("s", 1.0),
    "minutes": ("s", 60.0),
    "bytes": ("B", 1.0),
    "kilobytes": ("B", 1e3),
    "megabytes": ("B", 1e6),
    "gigabytes": ("B", 1e9),
    "terabytes": ("B", 1e12),
    "kibibytes": ("B", 1024.0),
    "mebibytes": ("B", 1024.0**2),
    "gibibytes": ("B", 1024.0**3),
    "tebibytes": ("B", 1024.0**4),
    "bytes_per_second": ("B/s", 1.0),
    "kibibytes_per_second": ("B/s", 1024.0),
    "mebibytes_per_second": ("B/s", 1024.0**2),
    "gibibytes_per_second": ("B/s", 1024.0**3),
    "bits_per_second": ("B/s", 1 / 8),
    "megabits_per_second": ("B/s", 1e6 / 8),
    "gigabits_per_second": ("B/s", 1e9 / 8),
    "logical_processors": ("cores", 1.0),
    "millicores": ("cores", 1e-3),
    "percentage": ("%", 1.0),
}


def _human(measurement: Any) -> str:
    """A measurement as a person reads it: ``44.9 MiB``, ``1.2 MiB/s``, ``0.52 cores``, ``3``."""
    if measurement is None:
        return "n/a"
    unit = str(getattr(measurement.unit, "value", measurement.unit))
    base, factor = _TO_BASE.get(unit, ("", 1.0))
    value = float(measurement.value) * factor
    if base in ("B", "B/s"):
        suffix = "/s" if base == "B/s" else ""
        for prefix in ("", "Ki", "Mi", "Gi", "Ti"):
            if abs(value) < 1024 or prefix == "Ti":
                return (f"{value:.0f} B" if prefix == "" else f"{value:.1f} {prefix}B") + suffix
            value /= 1024
    if base == "s":
        return f"{value * 1e3:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    if base == "cores":
        return f"{value:.2f} cores"
    if base == "%":
        return f"{value:.3g} %"
    # Counts: the number alone (the field names what it counts).
    return f"{value:.0f}" if value == int(value) else f"{value:.3g}"


def _headline(self: ResourceMetricsSnapshot) -> list[tuple[str, str]]:
    """The few values a person looks at first, as (label, text) pairs."""
    rows = [("timestamp", self.timestamp.isoformat()), ("scope", str(self.measurement_scope))]
    if self.cpu is not None:
        rows.append(("cpu", _human(self.cpu.consumption_rate)))
    if self.memory is not None:
        rows.append(("resident", _human(self.memory.resident)))
    if self.process is not None:
        rows.append(("processes", _human(self.process.active_count)))
    if self.disk is not None:
        rows.append(("disk read/write", f"{_human(self.disk.read_throughput)} / {_human(self.disk.write_throughput)}"))
    if self.gpu is not None and self.gpu.device_metrics:
        rows.append(("gpus", str(len(self.gpu.device_metrics))))
    return rows


def _plain(value: Any) -> Any:
    """A snapshot built by hand (or by ``dataclasses.replace``) as JSON-ready values."""
    if isinstance(value, datetime):
        return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, _Extensions):
        return value._load()
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
        if isinstance(value, ResourceMetricsSnapshot) and out.get("extensions") is None:
            out.pop("extensions", None)
        return out
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


class _Extensions(Mapping[str, Any]):
    """The ``extensions`` object of a collected snapshot, parsed from its JSON on first use."""

    __slots__ = ("_json", "_value")

    def __init__(self, raw_json: str) -> None:
        self._json = raw_json
        self._value: dict[str, Any] | None = None

    def _load(self) -> dict[str, Any]:
        if self._value is None:
            self._value = json.loads(self._json).get("extensions", {})
        return self._value

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, _Extensions):
            return self._load() == other._load()
        if isinstance(other, Mapping):
            return self._load() == dict(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._load())

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        # dataclasses.asdict() deep-copies non-dataclass values: give it plain data.
        return copy.deepcopy(self._load(), memo)


def _unit_members(*families: type[StrEnum]) -> dict[str, StrEnum]:
    return {member.value: member for family in families for member in family}


# One waker per event loop, registered with the loop once and dropped with it.
_loop_wakers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _native.LoopWaker] = (
    weakref.WeakKeyDictionary()
)


def _wait_future() -> tuple[asyncio.Future[None], _native.LoopWaker]:
    """A future for a relay_metrics await to yield on the running loop, and that loop's waker."""
    loop = asyncio.get_running_loop()
    waker = _loop_wakers.get(loop)
    if waker is None:
        waker = _native.LoopWaker()
        loop.add_reader(waker.fileno(), waker.drain)
        _loop_wakers[loop] = waker
    future = loop.create_future()
    future._asyncio_future_blocking = True
    return future, waker


_native._install(
    {
        **{cls.__name__: cls for cls in (
            ResourceMeasurement, ResourceMetricsSnapshot, ProcessSamplingMetadata, CpuMetrics,
            MemoryMetrics, ProcessMetrics, DiskMetrics, FilesystemCapacityMetrics, GpuMetrics,
            AcceleratorDeviceMetrics, AcceleratorProcessMetrics, NetworkMetrics,
            NetworkInterfaceMetrics, NetworkTrafficMetrics, ResourceLimitEventCount,
        )},
        "_Extensions": _Extensions,
        # DataUnit shares its values with CapacityUnit: the builder asks for data units only for
        # the fields typed DataUnit (disk and network amounts).
        "_unit_members": _unit_members(
            DurationUnit, CapacityUnit, BandwidthUnit, CpuUnit, UtilizationUnit, CountUnit
        ),
        "_data_unit_members": _unit_members(DataUnit),
        "_wait_future": _wait_future,
    }
)


async def collect() -> ResourceMetricsSnapshot:
    """Acquire a fresh sample using the active resource_metrics plugin configuration."""
    from . import _host

    return await _host.collect_active()


__all__ = [
    "AcceleratorDeviceMetrics",
    "AcceleratorProcessMetrics",
    "AcceleratorVendor",
    "BandwidthUnit",
    "CapacityUnit",
    "CountUnit",
    "CpuMetrics",
    "CpuUnit",
    "DataUnit",
    "DiskMetrics",
    "DurationUnit",
    "FilesystemCapacityMetrics",
    "GpuMetrics",
    "MeasurementScope",
    "MeasurementValue",
    "MemoryMetrics",
    "NetworkInterfaceMetrics",
    "NetworkMetrics",
    "NetworkTrafficMetrics",
    "OperatingSystem",
    "ProcessMetrics",
    "ProcessSamplingMetadata",
    "ResourceLimitEventCount",
    "ResourceLimitEventKind",
    "ResourceLimitResource",
    "ResourceMeasurement",
    "ResourceMetricsSnapshot",
    "UnitType",
    "UtilizationUnit",
    "collect",
]
