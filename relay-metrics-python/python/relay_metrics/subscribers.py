"""Global event subscribers, with ``nemo_relay.subscribers``' functions and signatures.

relay_metrics emits one kind of event: the ``nemo.relay.resource_metrics`` mark of each
polling tick (``polling.enabled = true`` in the ``resource_metrics`` component config). The
polling thread queues each tick's event and goes on sampling at its rate; a delivery thread
calls each subscriber with the events in order, so a slow subscriber delays its events, not the
samples (at most ``_QUEUE_MAX`` events wait: beyond, the oldest are dropped and the drops
logged). Whatever a callback raises (``BaseException`` included) stays on the delivery thread
and does not stop the others or the polling. It is logged (logger ``relay_metrics``) with its traceback the first time; after
that a subscriber's failures are reported at most once a minute, in one line with the latest
exception and the number of failures not reported since. A ``SystemExit`` raised there does not
exit the interpreter (only the main thread may); a ``KeyboardInterrupt`` is also handed to the
main thread (``_thread.interrupt_main()``), where it is raised as if the user pressed Ctrl-C.
"""

from __future__ import annotations

import _thread
import asyncio
import collections
import json
import logging
import os
import secrets
import sys
import threading
import time
import traceback
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

# Events the polling thread queued and the delivery thread has not delivered yet, oldest first.
_QUEUE_MAX = 10_000
_queue: collections.deque[MarkEvent] = collections.deque()
# Guards the queue, `_busy`, `_dropped` and `_deliverer`; notified when an event is queued and
# when the queue has drained (flush() waits for that).
_queued = threading.Condition()
_busy = False
_dropped = 0
_deliverer: threading.Thread | None = None

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
    if not isinstance(name, str):
        raise TypeError(f"'{type(name).__name__}' object is not an instance of 'str'")
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
    """Waits until the events queued so far reached every subscriber; on the delivery thread
    (a callback calling it) it returns at once, as Relay's does, instead of waiting for itself."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError(
            "subscribers.flush() cannot block a running asyncio event loop; "
            "use 'await subscribers.flush_async()'"
        )
    _wait_delivery()


async def flush_async() -> None:
    """Like :func:`flush`, without blocking the event loop."""
    await asyncio.to_thread(_wait_delivery)


def _wait_delivery() -> None:
    if threading.current_thread() is _deliverer:
        return
    with _queued:
        while _queue or _busy:
            _queued.wait()


def _emit_mark(timestamp: str, measurements: list[dict[str, Any]]) -> None:
    """Called by the polling thread with one tick's measurements: queues the event."""
    global _deliverer, _dropped
    with _lock:
        if not _subscribers:
            return
    event = MarkEvent(timestamp, {"measurements": measurements}, _root_uuid())
    with _queued:
        if len(_queue) == _QUEUE_MAX:
            _queue.popleft()
            _dropped += 1
        _queue.append(event)
        if _deliverer is None:
            # A daemon: a callback still running at exit does not keep the interpreter alive.
            _deliverer = threading.Thread(target=_deliver, name="relay_metrics-subscribers", daemon=True)
            _deliverer.start()
        _queued.notify_all()


def _deliver() -> None:
    """The delivery thread: each queued event to every subscriber registered when it is taken.
    What escapes the subscribers' own containment (a logging handler that raises) is written on
    stderr, at most once a minute, and the delivery goes on."""
    global _busy, _dropped
    escaped = _Failures(-_REPORT_EVERY)
    while True:
        with _queued:
            while not _queue:
                _queued.wait()
            event = _queue.popleft()
            _busy, dropped, _dropped = True, _dropped, 0
        try:
            _deliver_one(event, dropped)
        except BaseException as error:  # the delivery thread outlives whatever escapes
            _report_escaped(escaped, error)
        finally:
            with _queued:
                _busy = False
                _queued.notify_all()


def _deliver_one(event: MarkEvent, dropped: int) -> None:
    if dropped:
        _LOG.error(
            "%d %s events dropped: the subscribers took longer than the polling interval and "
            "%d events were waiting",
            dropped,
            EVENT_NAME,
            _QUEUE_MAX,
        )
    with _lock:
        callbacks = list(_subscribers.items())
    for name, callback in callbacks:
        try:
            callback(event)
        except BaseException as error:  # nothing a callback raises may end the delivery
            _contain(name, error)


def _report_escaped(state: _Failures, error: BaseException) -> None:
    now = _clock()
    if now - state.reported_at < _REPORT_EVERY:
        state.suppressed += 1
        return
    context = (
        f"relay_metrics' subscriber delivery thread, delivering a {EVENT_NAME} mark "
        f"({state.suppressed} failures not reported since the last report; reported at most "
        f"every {_REPORT_EVERY:g} s)"
    )
    state.reported_at, state.suppressed = now, 0
    try:  # written as the interpreter writes an unraisable exception; a failing stderr is let be
        print(f"Exception ignored in: {context}", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - nothing to report it to
        pass


def _after_fork_in_child() -> None:
    """The parent's delivery thread does not exist in a fork child: the child starts its own."""
    global _queued, _busy, _dropped, _deliverer
    _queue.clear()
    _queued, _busy, _dropped, _deliverer = threading.Condition(), False, 0, None


os.register_at_fork(after_in_child=_after_fork_in_child)


def _contain(name: str, error: BaseException) -> None:
    """Keeps a subscriber's exception on the delivery thread: raised further, a ``SystemExit``
    would end that thread, and no later event would be delivered."""
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
