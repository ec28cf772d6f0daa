"""The process-wide activation behind ``plugin.initialize`` and ``resource_metrics.collect``."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
from typing import Any

from . import _native, subscribers
from ._collector import Collector
from .resource_metrics import ResourceMetricsSnapshot

NOT_ACTIVE = "invalid argument: resource_metrics.collect() requires an active resource_metrics component"
INHERITED = (
    "invalid argument: resource_metrics runtime was inherited across fork; "
    "exec and activate it in the child before collecting"
)
CONFLICT = "conflict: plugin configuration is owned by an active dynamic plugin host"


class Host:
    """One activation: the on-demand series and, with polling on, the polling series."""

    def __init__(self, component_config: dict[str, Any] | None) -> None:
        self.pid = os.getpid()
        self.on_demand: Collector | None = None
        self._polling: _native.NativeCollector | None = None
        if component_config is None:
            return
        self.on_demand = Collector(component_config)
        polling = component_config.get("polling") or {}
        if polling.get("enabled") is True:
            # Relay's polling series has its own rate baselines: a collector of its own.
            self._polling = _native.NativeCollector(json.dumps(component_config), None, None, None)
            self._polling.start_polling(int(polling.get("interval_millis", 5000)), subscribers._emit_mark)

    def close(self, polling_timeout: float | None = None) -> None:
        """Stops polling (waiting at most ``polling_timeout`` seconds for a tick in progress,
        if given) and releases the collectors."""
        if self._polling is not None:
            if polling_timeout is None:
                self._polling.close()
            else:
                self._polling.close_within(polling_timeout)
            self._polling = None
        if self.on_demand is not None:
            self.on_demand.close()
            self.on_demand = None


_lock = threading.Lock()
_active: Host | None = None


def claim() -> None:
    """Fails when another activation owns the process (one inherited over fork does not)."""
    global _active
    with _lock:
        if _active is not None and _active.pid == os.getpid():
            raise RuntimeError(CONFLICT)
        _active = None


def install(host: Host) -> None:
    global _active
    with _lock:
        if _active is not None and _active.pid == os.getpid():
            host.close()
            raise RuntimeError(CONFLICT)
        _active = host


def release(host: Host) -> None:
    global _active
    with _lock:
        if _active is host:
            _active = None
    host.close()


async def collect_active() -> ResourceMetricsSnapshot:
    asyncio.get_running_loop()
    host = _active
    if host is not None and host.pid != os.getpid():
        raise RuntimeError(INHERITED)
    if host is None or host.on_demand is None:
        raise RuntimeError(NOT_ACTIVE)
    return await host.on_demand.acollect()


# Seconds the interpreter's exit waits for the polling thread to stop.
_EXIT_WAIT = 2.0


@atexit.register
def _close_at_exit() -> None:
    """Stops the polling thread before the interpreter finalizes: a thread that asks for the GIL
    of a finalizing interpreter is ended inside native code (a crash, not a clean exit). A
    subscriber that does not return within ``_EXIT_WAIT`` is left running, as a daemon thread
    is, rather than holding the exit for ever."""
    global _active
    with _lock:
        host, _active = _active, None
    if host is not None and host.pid == os.getpid():
        host.close(polling_timeout=_EXIT_WAIT)
