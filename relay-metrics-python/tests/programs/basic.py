# A Relay program: activate the component, await collect() twice, read the snapshot.
import asyncio
import json
import os

from describe import describe
from nemo_relay import plugin, resource_metrics


async def main() -> None:
    config = plugin.PluginConfig(
        components=[
            plugin.ComponentSpec(
                kind="resource_metrics",
                config={"disk": {"filesystem_paths": ["/", "/nonexistent-relay-metrics-probe"]}},
            )
        ]
    )
    async with plugin.activate(config):
        first = await resource_metrics.collect()
        await asyncio.sleep(0.3)
        second = await resource_metrics.collect()
    print(json.dumps({"first": describe(first), "second": describe(second)}))


asyncio.run(main())
os._exit(0)
