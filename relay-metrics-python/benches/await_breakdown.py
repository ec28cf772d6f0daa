"""Where the time of one `await collect()` goes, side by side with NeMo Relay 0.10.4 in one process.

For one component config it times, in alternating blocks (same machine load for every column):
- `relay`: NeMo Relay's `await resource_metrics.collect()`;
- `public`: relay_metrics' `await resource_metrics.collect()` (Relay's API, activated);
- `acollect`: `await Collector.acollect()` (the direct API; its own series, same config);
- `sync`: `Collector.collect()` on the loop's thread (no hand-off: the floor of the await paths);
- `collect_us`: the collector's own `extensions.collector.collect_duration_usec` of those calls;
- `smaps_rollup`: a bare Python `open`+`read` of `/proc/self/smaps_rollup` (the kernel walk that
  `memory.private` costs both collectors when it is read on every collect);
- `executor_hop`: `await loop.run_in_executor(None, f)` of a no-op: asyncio's stock hand-off to
  a thread and back (two thread wake-ups), as a yardstick for this machine's wake-up cost;
- `phases`: the sync collection's parts, measured in Rust: collecting, writing the CLI JSON,
  building the Python objects.

With `--no-relay`, NeMo Relay is neither activated nor measured: its runtime's threads then do
not share the process (with them active, our thread wake-ups measured faster and our synchronous
collect slower), which isolates relay_metrics' own await cost, for comparing two builds.

Run (after `pip install ./relay-metrics-python` and `pip install nemo-relay==0.10.4`):
    python benches/await_breakdown.py [--blocks 20] [--per-block 50] [--no-relay]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import nemo_relay.plugin as relay_plugin
import nemo_relay.resource_metrics as relay_rm

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
]


def component(config: dict[str, Any]) -> dict[str, Any]:
    return {"components": [{"kind": "resource_metrics", "config": config}]}


def read_smaps_rollup() -> None:
    with open("/proc/self/smaps_rollup", "rb") as file:
        file.read()


def collect_duration(snapshot: Any) -> float:
    return float(snapshot.extensions["collector"]["collect_duration_usec"])


async def breakdown(
    base: dict[str, Any], ours_extra: dict[str, Any], blocks: int, per_block: int, with_relay: bool
) -> dict[str, Any]:
    config = {**base, "disk": {"filesystem_paths": ["/"]}}
    ours = {**config, **ours_extra}
    loop = asyncio.get_running_loop()
    times: dict[str, list[float]] = {}
    collector = relay_metrics.Collector(ours)
    # Builds before the phase timer (for comparing against an older wheel) lack it.
    timed = hasattr(collector._native, "_phase_times")

    def noop() -> None:
        return None

    async def executor_hop() -> None:
        await loop.run_in_executor(None, noop)

    async def sync() -> Any:
        return collector.collect()

    async def acollect() -> Any:
        return await collector.acollect()

    async def smaps() -> None:
        read_smaps_rollup()

    columns: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        *([("relay", relay_rm.collect)] if with_relay else []),
        ("public", our_rm.collect),
        ("acollect", acollect),
        ("sync", sync),
        ("smaps_rollup", smaps),
        ("executor_hop", executor_hop),
    ]
    relay = relay_plugin.activate(component(config)) if with_relay else contextlib.nullcontext()
    async with relay, our_plugin.activate(component(ours)):
        for _, call in columns:
            for _ in range(5):
                await call()
        times.clear()
        for _ in range(blocks):
            for name, call in columns:
                column = times.setdefault(name, [])
                for _ in range(per_block):
                    started = time.perf_counter_ns()
                    value = await call()
                    column.append((time.perf_counter_ns() - started) / 1000)
                    if name in ("acollect", "sync"):
                        # Outside the timed span: `extensions` parses the snapshot's JSON.
                        times.setdefault("collect_us", []).append(collect_duration(value))
        phases = collector._native._phase_times(blocks * per_block) if timed else []
    collector.close()
    medians = {name: round(statistics.median(values), 1) for name, values in times.items()}
    for index, phase in enumerate(("collect", "json", "build") if phases else ()):
        medians[f"phase_{phase}"] = round(statistics.median(p[index] for p in phases) / 1000, 1)
    result: dict[str, Any] = {"calls_each": blocks * per_block, "median_us": medians}
    if with_relay:
        result["relay_over_8_us"] = round(medians["relay"] / 8, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--per-block", type=int, default=50)
    parser.add_argument("--no-relay", action="store_true", help="measure relay_metrics alone")
    args = parser.parse_args()
    print(json.dumps({"load_average": os.getloadavg()}))
    for name, base, extra in CASES:
        result = asyncio.run(breakdown(base, extra, args.blocks, args.per_block, not args.no_relay))
        print(json.dumps({"case": name, **result}))


if __name__ == "__main__":
    main()
    # NeMo Relay's runtime can crash while the interpreter finalises: leave without finalising.
    os._exit(0)
