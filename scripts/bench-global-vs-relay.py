"""`relay-metrics bench --scope global` against NeMo Relay 0.10.4's `await collect()` in the
global scope, in one run (figures in docs/PERFORMANCE.md).

Both get the same config: global scope, every category on (the defaults), filesystem paths `/`
and `/dev/shm`. Blocks alternate so that both see the same machine load: a block of Relay
awaits, then one `relay-metrics bench` run of the same number of collects (its median is of
collect() inside the binary, as Relay's is of the await). Prints one JSON line: the median of
all Relay awaits, the median of the bench blocks' medians, and the ratio.

Run in a virtualenv with `pip install nemo-relay==0.10.4` (scripts/install-deps.sh installs it
into the test virtualenv):
    python scripts/bench-global-vs-relay.py --binary target/release/relay-metrics [--blocks 10] [--per-block 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
import time

import nemo_relay.plugin as relay_plugin
import nemo_relay.resource_metrics as relay_rm

CONFIG = {"measurement_scope": "global", "disk": {"filesystem_paths": ["/", "/dev/shm"]}}


def load() -> str:
    with open("/proc/loadavg", encoding="ascii") as file:
        return " ".join(file.read().split()[:4])


def our_block(binary: str, config_path: str, count: int, source: str) -> dict:
    output = subprocess.run(
        [binary, "bench", "--config", config_path, "--scope", "global", "--iterations", str(count),
         "--process-source", source],
        check=True, capture_output=True, text=True,
    ).stdout
    return json.loads(output)


async def run(binary: str, blocks: int, per_block: int, source: str) -> dict:
    relay_times: list[float] = []
    our_medians: list[float] = []
    processes: list[int] = []
    loads = [load()]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        json.dump(CONFIG, file)
        config_path = file.name
    try:
        component = {"components": [{"kind": "resource_metrics", "config": CONFIG}]}
        async with relay_plugin.activate(component):
            for _ in range(5):
                await relay_rm.collect()
            for _ in range(blocks):
                for _ in range(per_block):
                    started = time.perf_counter_ns()
                    await relay_rm.collect()
                    relay_times.append((time.perf_counter_ns() - started) / 1000)
                report = our_block(binary, config_path, per_block, source)
                our_medians.append(report["median_us"])
                processes.append(report.get("processes", 0))
                loads.append(load())
    finally:
        os.unlink(config_path)
    relay_median = statistics.median(relay_times)
    our_median = statistics.median(our_medians)
    return {
        "relay_awaits": len(relay_times),
        "relay_median_us": round(relay_median, 1),
        "relay_metrics_blocks": len(our_medians),
        "relay_metrics_median_of_block_medians_us": round(our_median, 1),
        "relay_metrics_block_medians_us": [round(m, 1) for m in our_medians],
        "processes": processes,
        "ratio": round(relay_median / our_median, 1),
        "loadavg_during_run": loads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/release/relay-metrics")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--per-block", type=int, default=200)
    parser.add_argument("--process-source", default="auto")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args.binary, args.blocks, args.per_block, args.process_source))))


if __name__ == "__main__":
    main()
    # NeMo Relay's runtime can crash while the interpreter finalises: leave without finalising.
    os._exit(0)
