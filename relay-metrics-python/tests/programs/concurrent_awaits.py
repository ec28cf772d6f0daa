# A Relay program: 100 concurrent awaits of collect() while the event loop keeps ticking.
import asyncio
import json
import os
import time

from nemo_relay import plugin, resource_metrics


async def ticker(stop: asyncio.Event, ticks: list[float]) -> None:
    while not stop.is_set():
        ticks.append(time.monotonic())
        await asyncio.sleep(0.001)


async def main() -> None:
    config = plugin.PluginConfig(components=[plugin.ComponentSpec(kind="resource_metrics")])
    async with plugin.activate(config):
        stop = asyncio.Event()
        ticks: list[float] = []
        tick_task = asyncio.create_task(ticker(stop, ticks))
        await asyncio.sleep(0.01)
        snapshots = await asyncio.wait_for(
            asyncio.gather(*(resource_metrics.collect() for _ in range(100))), timeout=60
        )
        stop.set()
        await tick_task
    gaps = [b - a for a, b in zip(ticks, ticks[1:])]
    print(
        json.dumps(
            {
                "count": len(snapshots),
                "scopes": sorted({s.measurement_scope for s in snapshots}),
                "distinct_timestamps": len({s.timestamp for s in snapshots}),
                "with_cpu": sum(1 for s in snapshots if s.cpu is not None and s.cpu.total_time is not None),
                "ticks": len(ticks),
                "max_tick_gap_ms": max(gaps) * 1000 if gaps else None,
            }
        )
    )


asyncio.run(main())
os._exit(0)
