# A Relay program: global scope, disk capacity of /, two samples.
import asyncio
import json
import os

from describe import describe
from nemo_relay import plugin, resource_metrics


async def main() -> None:
    config = {
        "components": [
            {
                "kind": "resource_metrics",
                "config": {"measurement_scope": "global", "disk": {"filesystem_paths": ["/"]}},
            }
        ]
    }
    activation = await plugin.initialize(config)
    first = await resource_metrics.collect()
    await asyncio.sleep(0.3)
    second = await resource_metrics.collect()
    await activation.close()
    print(json.dumps({"first": describe(first), "second": describe(second)}))


asyncio.run(main())
os._exit(0)
