"""``relay_metrics.record()`` (module ``relay_metrics.recording``): what a block of code cost, sampled on the collector's own thread.

::

    with relay_metrics.record(interval_ms=10) as rec:
        work()
    rec.summary()            # the numbers of `relay-metrics run`'s summary, as a dict
    rec.to_pandas()          # one row per snapshot
    rec.report("run.html")   # the same page as `relay-metrics report`

``record`` also decorates a function: each call is recorded, the last recording is the
function's ``recording`` attribute. Without ``config`` it measures this process and its
descendants (``process_tree``); the recording thread itself is part of that, as any observer.
"""

from __future__ import annotations

import functools
import importlib
from html import escape
import json
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from . import _native
from ._collector import _config_arguments, _EndsWithBlock
from .resource_metrics import ResourceMetricsSnapshot

__all__ = ["Recording", "record"]

F = TypeVar("F", bound=Callable[..., Any])


class Recording(_EndsWithBlock):
    """A recording: started by ``with`` (or a decorated call), stopped when the block ends,
    also when it raises (the exception propagates)."""

    def __init__(
        self,
        interval_ms: int = 10,
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(interval_ms, bool) or not isinstance(interval_ms, int) or interval_ms <= 0:
            raise ValueError("interval_ms must be a positive integer")
        self.interval_ms = interval_ms
        self._config = config
        self._native: _native.NativeRecorder | None = None

    def start(self) -> Recording:
        """Starts sampling (the first snapshot is taken at once)."""
        if self._native is not None:
            raise RuntimeError("this recording has already started")
        config_json, config_path = _config_arguments(self._config)
        self._native = _native.NativeRecorder(self.interval_ms, config_json, config_path)
        return self

    def stop(self) -> None:
        """Takes one last snapshot and stops sampling. Idempotent."""
        if self._native is not None:
            self._native.stop()

    @property
    def running(self) -> bool:
        """Whether sampling goes on."""
        return self._native is not None and self._native.running

    def _recorder(self) -> _native.NativeRecorder:
        if self._native is None:
            raise RuntimeError("this recording has not started")
        return self._native

    def __enter__(self) -> Recording:
        return self.start()

    def _end_block(self) -> None:
        self.stop()

    def __call__(self, function: F) -> F:
        """``@record(...)``: records each call of ``function`` (see ``function.recording``)."""

        @functools.wraps(function)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            recording = Recording(self.interval_ms, self._config)
            recorded.recording = recording  # type: ignore[attr-defined]
            with recording:
                return function(*args, **kwargs)

        return recorded  # type: ignore[return-value]

    def summary(self) -> dict[str, Any]:
        """The run summary as a dict: the same Rust code and fields as ``relay-metrics run
        --summary-format json`` (a ``null`` value has its reason in ``unknown``)."""
        result: dict[str, Any] = json.loads(self._recorder().summary_json())
        return result

    def summary_text(self) -> str:
        """The summary as the aligned table ``relay-metrics run`` prints."""
        return self._recorder().summary_text()

    @property
    def snapshots(self) -> list[ResourceMetricsSnapshot]:
        """The snapshots taken so far, oldest first."""
        snapshots: list[ResourceMetricsSnapshot] = self._recorder().snapshots()
        return snapshots

    def to_pandas(self) -> Any:
        """One row per snapshot: ``timestamp`` (datetime64, UTC) and the numeric values in base
        units (``cpu_cores``, ``cpu_user_s``, ``cpu_system_s``, ``memory_resident_bytes``,
        ``disk_read_bytes``, ``disk_write_bytes``, ``process_count``, ``thread_count``), ``NaN``
        where a snapshot has no value. Needs pandas (imported only here)."""
        try:
            # Through importlib: pandas ships no type stubs, and it stays optional.
            pandas: Any = importlib.import_module("pandas")
        except ImportError as error:
            raise ImportError(
                "Recording.to_pandas() needs pandas: pip install pandas"
            ) from error
        rows = [_row(snapshot) for snapshot in self._recorder().snapshots()]
        frame = pandas.DataFrame(rows, columns=list(_COLUMNS))
        frame["timestamp"] = pandas.to_datetime(frame["timestamp"], utc=True)
        for column in _COLUMNS[1:]:
            frame[column] = frame[column].astype("float64")
        return frame

    def __repr__(self) -> str:
        if self._native is None:
            state = "not started"
        else:
            state = f"{'running' if self._native.running else 'stopped'}, {len(self._native)} snapshots"
        return f"<Recording interval_ms={self.interval_ms}: {state}>"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's display: the summary table that ``relay-metrics run`` prints."""
        if cycle or self._native is None:
            printer.text(repr(self))
            return
        printer.text(f"{self!r}\n{self.summary_text()}")

    def _repr_html_(self) -> str:
        """Jupyter's display: the summary table, then the report's charts inline (SVG)."""
        if self._native is None:
            return f"<pre>{escape(repr(self))}</pre>"
        parts = [
            f"<div class=\"relay-metrics-recording\"><p>{escape(repr(self))}</p>",
            f"<pre>{escape(self.summary_text())}</pre>",
        ]
        try:
            svg = self._native.report_svg()
        except (RuntimeError, ValueError) as error:
            parts.append(f"<p>no charts: {escape(str(error))}</p>")
        else:
            # Inline SVG: the XML declaration belongs to a file, not to a page.
            parts.append(svg[svg.find("<svg") :] if "<svg" in svg else escape(svg))
        parts.append("</div>")
        return "".join(parts)

    def report(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Writes the report: ``html`` (summary and charts, self-contained), ``svg`` or ``png``
        (the charts alone); by default from the file's extension, else HTML."""
        path = os.fspath(path)
        if format is None:
            extension = os.path.splitext(path)[1].lower()
            format = {".svg": "svg", ".png": "png"}.get(extension, "html")
        self._recorder().report(path, format)


_COLUMNS = (
    "timestamp",
    "cpu_cores",
    "cpu_user_s",
    "cpu_system_s",
    "memory_resident_bytes",
    "disk_read_bytes",
    "disk_write_bytes",
    "process_count",
    "thread_count",
)

_FACTORS = {
    "microseconds": 1e-6,
    "milliseconds": 1e-3,
    "seconds": 1.0,
    "minutes": 60.0,
    "bytes": 1.0,
    "kilobytes": 1e3,
    "megabytes": 1e6,
    "gigabytes": 1e9,
    "terabytes": 1e12,
    "kibibytes": 1024.0,
    "mebibytes": 1024.0**2,
    "gibibytes": 1024.0**3,
    "tebibytes": 1024.0**4,
    "logical_processors": 1.0,
    "millicores": 1e-3,
}


def _base(measurement: Any) -> float | None:
    """A measurement in its base unit (s, bytes, cores, or the count itself)."""
    if measurement is None:
        return None
    unit = getattr(measurement.unit, "value", measurement.unit)
    return float(measurement.value) * _FACTORS.get(str(unit), 1.0)


def _row(snapshot: Any) -> tuple[Any, ...]:
    cpu, memory, disk, process = snapshot.cpu, snapshot.memory, snapshot.disk, snapshot.process
    return (
        snapshot.timestamp,
        _base(cpu.consumption_rate) if cpu else None,
        _base(cpu.user_time) if cpu else None,
        _base(cpu.system_time) if cpu else None,
        _base(memory.resident) if memory else None,
        _base(disk.read_data) if disk else None,
        _base(disk.write_data) if disk else None,
        _base(process.active_count) if process else None,
        _base(process.thread_count) if process else None,
    )


def record(
    interval_ms: int = 10,
    config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
) -> Recording:
    """A recording of what the enclosed block (or each call of a decorated function) cost:
    ``with record() as rec:`` or ``@record()``."""
    return Recording(interval_ms, config)
