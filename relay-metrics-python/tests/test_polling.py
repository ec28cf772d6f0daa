"""relay_metrics' polling thread and subscribers (beyond what Relay's marks are compared on)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

import relay_metrics.plugin as plugin
from relay_metrics import subscribers

CONFIG = plugin.PluginConfig(
    components=[
        plugin.ComponentSpec(
            kind="resource_metrics",
            config={"polling": {"enabled": True, "interval_millis": 100}, "extensions": {"kernel_events": False}},
        )
    ]
)


def test_a_callback_may_flush_and_a_failing_one_does_not_stop_the_others() -> None:
    seen: list[Any] = []

    def flushing(event: Any) -> None:
        subscribers.flush()  # on the delivering thread: returns at once instead of waiting for itself
        seen.append(event)

    def failing(event: Any) -> None:
        raise ValueError("subscriber failure (expected by the test)")

    async def run() -> None:
        subscribers.register("flushing", flushing)
        subscribers.register("failing", failing)
        try:
            async with plugin.activate(CONFIG):
                await asyncio.wait_for(_until(lambda: len(seen) >= 3), 10)
        finally:
            subscribers.deregister("flushing")
            subscribers.deregister("failing")

    asyncio.run(run())
    first = seen[0].data["measurements"][0]
    assert first["name"] == "nemo.relay.resource.sample_count" and first["value"] == 1
    # Fixed rate: consecutive marks carry consecutive (or skipped, never repeated) sample times.
    stamps = [event.timestamp for event in seen]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_a_deregistered_subscriber_gets_nothing_more() -> None:
    seen: list[Any] = []

    async def run() -> int:
        subscribers.register("counting", seen.append)
        async with plugin.activate(CONFIG):
            await asyncio.wait_for(_until(lambda: len(seen) >= 1), 10)
            assert subscribers.deregister("counting")
            await subscribers.flush_async()
            count = len(seen)
            await asyncio.sleep(0.35)
        return count

    count = asyncio.run(run())
    assert len(seen) == count


def test_flush_refuses_to_block_a_running_loop() -> None:
    async def run() -> str:
        try:
            subscribers.flush()
        except RuntimeError as error:
            return str(error)
        return "no error"

    assert "use 'await subscribers.flush_async()'" in asyncio.run(run())


def test_a_failing_subscriber_is_logged_once_with_its_traceback_then_at_most_once_a_minute(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(subscribers, "_clock", lambda: now[0])
    calls = [0]

    def failing(event: Any) -> None:
        calls[0] += 1
        raise ValueError(f"failure {calls[0]} (expected by the test)")

    subscribers.register("failing-often", failing)
    try:
        with caplog.at_level(logging.ERROR, logger="relay_metrics"):
            for _ in range(50):  # 50 ticks within a second
                subscribers._emit_mark("2026-01-01T00:00:00Z", [])
                subscribers.flush()
                now[0] += 0.02
            assert calls[0] == 50
            [first] = caplog.records
            assert first.exc_info is not None and "failure 1" in str(first.exc_info[1])
            assert "'failing-often' failed" in first.getMessage()
            now[0] += 60.0
            subscribers._emit_mark("2026-01-01T00:01:00Z", [])
            subscribers.flush()
            [_, second] = caplog.records
            assert second.exc_info is None
            message = second.getMessage()
            assert "ValueError: failure 51" in message, message
            assert "49 failures not reported since the last report" in message, message
            subscribers._emit_mark("2026-01-01T00:01:01Z", [])
            subscribers.flush()
            assert len(caplog.records) == 2
    finally:
        subscribers.deregister("failing-often")
    # A subscriber registered again under the name starts afresh: its traceback is logged.
    subscribers.register("failing-often", failing)
    try:
        with caplog.at_level(logging.ERROR, logger="relay_metrics"):
            subscribers._emit_mark("2026-01-01T00:02:00Z", [])
            subscribers.flush()
            assert caplog.records[-1].exc_info is not None and len(caplog.records) == 3
    finally:
        subscribers.deregister("failing-often")


def test_a_subscriber_failing_on_every_polling_tick_logs_one_traceback(caplog: pytest.LogCaptureFixture) -> None:
    calls = [0]

    def failing(event: Any) -> None:
        calls[0] += 1
        raise ValueError("subscriber failure (expected by the test)")

    async def run() -> None:
        subscribers.register("failing-each-tick", failing)
        try:
            async with plugin.activate(CONFIG):
                await asyncio.wait_for(_until(lambda: calls[0] >= 5), 20)
        finally:
            subscribers.deregister("failing-each-tick")

    with caplog.at_level(logging.ERROR, logger="relay_metrics"):
        asyncio.run(run())
    reports = [record for record in caplog.records if "failing-each-tick" in record.getMessage()]
    assert calls[0] >= 5
    assert len(reports) == 1 and reports[0].exc_info is not None, [r.getMessage() for r in reports]


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.02)


def test_a_slow_subscriber_delays_its_events_not_the_samples() -> None:
    # Relay queues the callbacks: sampling keeps its interval (100 ms) while a subscriber takes
    # 0.5 s per event, and every subscriber gets every sample, in order.
    import time
    from datetime import datetime

    slow: list[Any] = []
    fast: list[Any] = []

    def sleepy(event: Any) -> None:
        time.sleep(0.5)
        slow.append(event)

    async def run() -> None:
        subscribers.register("slow", sleepy)
        subscribers.register("fast", fast.append)
        try:
            async with plugin.activate(CONFIG):
                await asyncio.sleep(1.5)
            await subscribers.flush_async()
        finally:
            subscribers.deregister("slow")
            subscribers.deregister("fast")

    asyncio.run(run())
    assert len(fast) >= 10, len(fast)
    assert [e.timestamp for e in slow] == [e.timestamp for e in fast]
    stamps = [datetime.fromisoformat(e.timestamp) for e in fast]
    gaps = [(b - a).total_seconds() for a, b in zip(stamps, stamps[1:])]
    assert max(gaps) < 0.35, gaps


def test_subscriber_names_are_strings_as_in_relay() -> None:
    import nemo_relay.subscribers as relays

    for module in (subscribers, relays):
        with pytest.raises(TypeError, match="'int' object is not an instance of 'str'"):
            module.register(3, print)  # type: ignore[arg-type]


@pytest.mark.parametrize("config", [None, [], 3, "x"])
def test_a_component_config_that_is_no_map_is_refused_as_relay_refuses_it(config: Any) -> None:
    import nemo_relay.plugin as relays

    messages = []
    for module in (plugin, relays):
        spec = module.PluginConfig(components=[module.ComponentSpec(kind="resource_metrics", config=config)])
        with pytest.raises(ValueError) as raised:
            asyncio.run(module.initialize(spec))  # type: ignore[arg-type]
        messages.append(str(raised.value))
    assert messages[0] == messages[1], messages
