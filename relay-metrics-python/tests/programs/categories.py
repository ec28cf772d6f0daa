# A Relay program: categories and sub-groups switched off.
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
                config={
                    "measurement_scope": "application_process",
                    "cpu": {"enabled": False},
                    "network": {"enabled": False},
                    "disk": {"process_io": False},
                    "gpu": {"device_metrics": False},
                },
            )
        ]
    )
    async with plugin.activate(config):
        snapshot = await resource_metrics.collect()
    print(json.dumps(describe(snapshot)))


asyncio.run(main())
os._exit(0)
