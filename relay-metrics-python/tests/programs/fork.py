# A Relay program that forks after activating; the child awaits collect() with a deadline.
import asyncio
import json
import os
import sys

from nemo_relay import plugin, resource_metrics

DEADLINE_S = 5.0


async def child_collect() -> list[str]:
    try:
        await asyncio.wait_for(resource_metrics.collect(), DEADLINE_S)
    except asyncio.TimeoutError:
        return ["hang", f"no result within {DEADLINE_S} s"]
    except BaseException as error:  # noqa: BLE001
        return [type(error).__name__, str(error)]
    return ["ok", ""]


async def main() -> None:
    config = plugin.PluginConfig(components=[plugin.ComponentSpec(kind="resource_metrics")])
    activation = await plugin.initialize(config)
    await resource_metrics.collect()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        result = asyncio.run(child_collect())
        os.write(write_end, json.dumps(result).encode())
        os._exit(0)
    os.close(write_end)
    chunks = []
    while chunk := await asyncio.to_thread(os.read, read_end, 65536):
        chunks.append(chunk)
    os.waitpid(pid, 0)
    parent_after = await resource_metrics.collect()
    await activation.close()
    print(json.dumps({"child": json.loads(b"".join(chunks)), "parent_ok": parent_after is not None}))


asyncio.run(main())
sys.stdout.flush()
os._exit(0)
