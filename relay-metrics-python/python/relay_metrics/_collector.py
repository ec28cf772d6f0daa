"""The direct API: a collector object, without Relay's process-wide plugin activation."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from . import _native
from .resource_metrics import ResourceMetricsSnapshot


def _config_arguments(
    config: Mapping[str, Any] | str | os.PathLike[str] | None,
) -> tuple[str | None, str | None]:
    """``config`` as the native constructors take it: the JSON of a dict, or a file path."""
    if isinstance(config, Mapping):
        return json.dumps(dict(config)), None
    if config is not None:
        return None, os.fspath(config)
    return None, None


class _EndsWithBlock:
    """A ``with`` block's end calls :meth:`_end_block`, also when the block raises (the
    exception propagates)."""

    def _end_block(self) -> None:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._end_block()


class Collector(_EndsWithBlock):
    """One series of snapshots of a process tree, a process, a cgroup or the whole system.

    ``config`` is Relay's ``resource_metrics`` component config (a dict), a JSON or TOML file
    path (the component config or a ``plugins.toml`` with one ``resource_metrics`` component),
    or ``None`` for Relay's defaults. ``root_pid`` and ``cgroup_path`` override the config's
    target (``cgroup_path`` alone selects the ``cgroup`` scope). Rates (CPU consumption,
    throughputs) are relative to this collector's previous snapshot: each collector is its own
    series, and any number can coexist. Invalid configs raise ``ValueError`` with Relay's
    message.
    """

    def __init__(
        self,
        config: Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        root_pid: int | None = None,
        cgroup_path: str | None = None,
    ) -> None:
        config_json, config_path = _config_arguments(config)
        self._native = _native.NativeCollector(config_json, config_path, root_pid, cgroup_path)

    def collect(self) -> ResourceMetricsSnapshot:
        """Takes a snapshot now, on this thread (the GIL is released while reading)."""
        snapshot: ResourceMetricsSnapshot = self._native.collect()
        return snapshot

    async def acollect(self) -> ResourceMetricsSnapshot:
        """Takes a snapshot on the collector's own thread; the event loop keeps running."""
        snapshot: ResourceMetricsSnapshot = await self._native.acollect()
        return snapshot

    def close(self) -> None:
        """Releases the collector (open files, eBPF programs). Idempotent."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (or this process is a fork child of the creator)."""
        return not self._native.is_open

    def __enter__(self) -> Collector:
        return self

    def _end_block(self) -> None:
        self.close()
