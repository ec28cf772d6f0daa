"""relay_metrics' polling thread and subscribers (beyond what Relay's marks are compared on)."""

from __future__ import annotations

import asyncio
from typing import Any

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


async def _until(condition: Any) -> None:
    while not condition():
        await asyncio.sleep(0.02)
