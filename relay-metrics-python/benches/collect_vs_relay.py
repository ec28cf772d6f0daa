"""`await collect()` of relay_metrics and of NeMo Relay 0.10.4, side by side in one process.

Both are activated through their public plugin API with the same component config
({"measurement_scope": S, "disk": {"filesystem_paths": ["/"]}}, all else default). Blocks of
awaits alternate between the two so that both see the same machine load; the figures are
medians over all calls. Also measured: building the Python objects of one snapshot (relay_metrics'
builder, and Relay's own dict-to-dataclass parse of its native dict).

Run (after `pip install ./relay-metrics-python` and `pip install nemo-relay==0.10.4`):
    python benches/collect_vs_relay.py [--blocks 20] [--per-block 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

import nemo_relay.plugin as relay_plugin
import nemo_relay.resource_metrics as relay_rm
from nemo_relay._native import _collect_resource_metrics

import relay_metrics
import relay_metrics.plugin as our_plugin
import relay_metrics.resource_metrics as our_rm

CASES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("process_tree", {"measurement_scope": "process_tree"}, {}),
    (
        "process_tree, private memory every 1 s",
        {"measurement_scope": "process_tree"},
        {"extensions": {"private_memory_interval_millis": 1000}},
    ),
    ("global", {"measurement_scope": "global"}, {}),
]


def component(config: dict[str, Any]) -> dict[str, Any]:
    return {"components": [{"kind": "resource_metrics", "config": config}]}


async def timed_block(collect: Any, count: int) -> list[float]:
    times = []
    for _ in range(count):
        started = time.perf_counter_ns()
        await collect()
        times.append((time.perf_counter_ns() - started) / 1000)
    return times


async def compare(name: str, base: dict[str, Any], ours_extra: dict[str, Any], blocks: int, per_block: int) -> dict[str, Any]:
    config = {**base, "disk": {"filesystem_paths": ["/"]}}
    relay_times: list[float] = []
    our_times: list[float] = []
    async with relay_plugin.activate(component(config)), our_plugin.activate(component({**config, **ours_extra})):
        # Warm-up: first collects prime baselines, caches and (for Relay) NVML probing.
        await timed_block(relay_rm.collect, 5)
        await timed_block(our_rm.collect, 5)
        for _ in range(blocks):
            relay_times += await timed_block(relay_rm.collect, per_block)
            our_times += await timed_block(our_rm.collect, per_block)
    relay_median, our_median = statistics.median(relay_times), statistics.median(our_times)
    return {
        "case": name,
        "calls_each": len(our_times),
        "relay_median_us": round(relay_median, 1),
        "relay_metrics_median_us": round(our_median, 1),
        "relay_metrics_p90_us": round(statistics.quantiles(our_times, n=10)[-1], 1),
        "speedup": round(relay_median / our_median, 1),
    }


async def relay_parse_times(iterations: int) -> list[float]:
    """Relay's own parse of its native dict into its dataclasses (the cost its collect() adds)."""
    config = {"measurement_scope": "process_tree", "disk": {"filesystem_paths": ["/"]}}
    async with relay_plugin.activate(component(config)):
        await relay_rm.collect()
        raw = await _collect_resource_metrics()
    parse = relay_rm._snapshot  # Relay's private parser: what its collect() runs on the dict.
    times = []
    for _ in range(iterations):
        started = time.perf_counter_ns()
        parse(raw)
        times.append((time.perf_counter_ns() - started) / 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--per-block", type=int, default=50)
    parser.add_argument("--build-iterations", type=int, default=2000)
    args = parser.parse_args()
    results = [asyncio.run(compare(n, b, e, args.blocks, args.per_block)) for n, b, e in CASES]
    collector = relay_metrics.Collector({"disk": {"filesystem_paths": ["/"]}})
    build = [t / 1000 for t in collector._native._build_times(args.build_iterations)]
    collector.close()
    relay_parse = asyncio.run(relay_parse_times(args.build_iterations))
    results.append(
        {
            "case": "Python objects of one process_tree snapshot",
            "relay_metrics_build_median_us": round(statistics.median(build), 1),
            "relay_parse_median_us": round(statistics.median(relay_parse), 1),
        }
    )
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
    # NeMo Relay's runtime can crash while the interpreter finalises: leave without finalising.
    os._exit(0)
