"""Global event subscribers, with ``nemo_relay.subscribers``' functions and signatures.

relay_metrics emits one kind of event: the ``nemo.relay.resource_metrics`` mark of each
polling tick (``polling.enabled = true`` in the ``resource_metrics`` component config). Each
subscriber is called with a :class:`MarkEvent` on relay_metrics' polling thread; whatever a
callback raises (``BaseException`` included) stays on that thread and does not stop the others
or the polling. It is logged (logger ``relay_metrics``) with its traceback the first time; after
that a subscriber's failures are reported at most once a minute, in one line with the latest
exception and the number of failures not reported since. A ``SystemExit`` raised there does not
exit the interpreter (only the main thread may); a ``KeyboardInterrupt`` is also handed to the
main thread (``_thread.interrupt_main()``), where it is raised as if the user pressed Ctrl-C.
"""

from __future__ import annotations

import _thread
import asyncio
import json
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

_LOG = logging.getLogger("relay_metrics")

_subscribers: dict[str, Callable[[MarkEvent], None]] = {}
_lock = threading.Lock()
# Seconds between two reports of a failing subscriber after its first (with the traceback).
_REPORT_EVERY = 60.0


class _Failures:
    """A failing subscriber's reports: when the last was made, how many failures were not."""

    __slots__ = ("reported_at", "suppressed")

    def __init__(self, reported_at: float) -> None:
        self.reported_at = reported_at
        self.suppressed = 0


# Per subscriber name, once it failed (reset by deregister()).
_failures: dict[str, _Failures] = {}
_clock = time.monotonic

# Held while a tick's events are delivered: flush() waits on it. Re-entrant, so that a callback
# calling flush() on the delivering thread returns at once (as Relay's does) instead of waiting
# for itself.
_delivery = threading.RLock()

EVENT_NAME = "nemo.relay.resource_metrics"
DATA_SCHEMA = {"name": "nemo.relay.metric_measurements", "version": "1"}


def _uuid7() -> str:
    """A time-ordered UUID (version 7), the kind Relay's events carry."""
    value = (time.time_ns() // 1_000_000) << 80 | secrets.randbits(80)
    value = (value & ~(0xF << 76)) | (0x7 << 76)
    value = (value & ~(0x3 << 62)) | (0x2 << 62)
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


# Marks are emitted under the process's root scope, as Relay does with no agent scope open.
_ROOT_UUID = _uuid7()
_ROOT_PID = os.getpid()


def _root_uuid() -> str:
    global _ROOT_UUID, _ROOT_PID
    if os.getpid() != _ROOT_PID:
        _ROOT_UUID, _ROOT_PID = _uuid7(), os.getpid()
    return _ROOT_UUID


class MarkEvent:
    """A mark event, with the attributes of Relay's ``MarkEvent``."""

    __slots__ = ("timestamp", "uuid", "parent_uuid", "data")

    atof_version: str = "0.1"
    kind: str = "mark"
    name: str = EVENT_NAME
    category: str | None = None
    category_profile: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    severity: str | None = None

    def __init__(self, timestamp: str, data: dict[str, Any], parent_uuid: str) -> None:
        self.timestamp = timestamp
        self.uuid = _uuid7()
        self.parent_uuid = parent_uuid
        self.data = data

    @property
    def data_schema(self) -> dict[str, str]:
        """The data's schema: ``nemo.relay.metric_measurements`` version 1."""
        return dict(DATA_SCHEMA)

    def to_dict(self) -> dict[str, Any]:
        """The event as Relay's ``to_dict()`` gives it."""
        return {
            "atof_version": self.atof_version,
            "category": self.category,
            "category_profile": self.category_profile,
            "data": self.data,
            "data_schema": self.data_schema,
            "kind": self.kind,
            "metadata": self.metadata,
            "name": self.name,
            "parent_uuid": self.parent_uuid,
            "propagation_root_uuid": self.parent_uuid,
            "timestamp": self.timestamp,
            "uuid": self.uuid,
        }

    def to_json(self) -> str:
        """The event as JSON."""
        return json.dumps(self.to_dict())

    def __repr__(self) -> str:
        return f"MarkEvent(name={self.name!r}, timestamp={self.timestamp!r}, uuid={self.uuid!r})"


def register(name: str, callback: Callable[[MarkEvent], None]) -> None:
    """Registers a global event subscriber; ``RuntimeError`` if the name is taken."""
    with _lock:
        if name in _subscribers:
            raise RuntimeError(f"already exists: {name} subscriber already exists")
        _subscribers[name] = callback


def deregister(name: str) -> bool:
    """Removes a subscriber; ``True`` if one was removed."""
    with _lock:
        _failures.pop(name, None)
        return _subscribers.pop(name, None) is not None


def flush() -> None:
    """Waits until the event being delivered (if any) reached every subscriber."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "subscribers.flush() cannot block a running asyncio event loop; "
            "use 'await subscribers.flush_async()'"
        )
    with _delivery:
        pass


async def flush_async() -> None:
    """Like :func:`flush`, without blocking the event loop."""
    await asyncio.to_thread(_wait_delivery)


def _wait_delivery() -> None:
    with _delivery:
        pass


def _emit_mark(timestamp: str, measurements: list[dict[str, Any]]) -> None:
    """Called by the polling thread with one tick's measurements."""
    with _lock:
        callbacks = list(_subscribers.items())
    if not callbacks:
        return
    event = MarkEvent(timestamp, {"measurements": measurements}, _root_uuid())
    with _delivery:
        for name, callback in callbacks:
            try:
                callback(event)
            except BaseException as error:  # nothing a callback raises may end the polling thread
                _contain(name, error)


def _contain(name: str, error: BaseException) -> None:
    """Keeps a subscriber's exception on the polling thread: raised further, a ``SystemExit``
    would be printed by the thread's native caller, which for that exception exits the process
    from a thread that is not the main one (a fatal error in the interpreter's shutdown)."""
    if isinstance(error, KeyboardInterrupt):
        # As Ctrl-C: the main thread decides what an interrupt ends.
        _thread.interrupt_main()
    _report_failure(name, error)


def _report_failure(name: str, error: BaseException) -> None:
    """Logs a subscriber's failure: the first with its traceback, then at most one line every
    ``_REPORT_EVERY`` seconds with the count of failures not reported in between."""
    now = _clock()
    state = _failures.get(name)
    if state is None:
        _failures[name] = _Failures(now)
        _LOG.error(
            "subscriber %r failed on %s (later failures are reported at most every %g s)",
            name,
            EVENT_NAME,
            _REPORT_EVERY,
            exc_info=error,
        )
        return
    if now - state.reported_at < _REPORT_EVERY:
        state.suppressed += 1
        return
    suppressed, state.reported_at, state.suppressed = state.suppressed, now, 0
    _LOG.error(
        "subscriber %r failed again on %s: %s: %s (%d failures not reported since the last report)",
        name,
        EVENT_NAME,
        type(error).__name__,
        error,
        suppressed,
    )


__all__ = ["deregister", "flush", "flush_async", "register"]
