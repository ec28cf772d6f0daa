# A Relay program: polling on, a subscriber records the resource-metrics marks.
import asyncio
import json
import os
import sys

from nemo_relay import plugin, subscribers

marks = []


def on_event(event) -> None:
    if event.name == "nemo.relay.resource_metrics":
        marks.append(event)


async def main() -> None:
    scope = sys.argv[1]
    config = plugin.PluginConfig(
        components=[
            plugin.ComponentSpec(
                kind="resource_metrics",
                config={
                    "measurement_scope": scope,
                    "polling": {"enabled": True, "interval_millis": 250},
                    "disk": {"filesystem_paths": ["/"]},
                    "units": {"cpu": {"user_time": "seconds"}, "memory": {"resident": "mebibytes"}},
                },
            )
        ]
    )
    subscribers.register("marks-test", on_event)
    async with plugin.activate(config):
        await asyncio.sleep(0.9)
        await subscribers.flush_async()
    subscribers.deregister("marks-test")
    count_after_close = len(marks)
    await asyncio.sleep(0.6)
    events = []
    for event in marks:
        events.append(
            {
                "kind": event.kind,
                "name": event.name,
                "data_schema": event.data_schema,
                "atof_version": event.atof_version,
                "attributes": sorted(a for a in dir(event) if not a.startswith("_")),
                "dict_keys": sorted(event.to_dict()),
                "timestamp": event.timestamp,
                "measurements": event.data["measurements"],
            }
        )
    print(json.dumps({"events": events, "marks_after_close": len(marks) - count_after_close}))


asyncio.run(main())
os._exit(0)
