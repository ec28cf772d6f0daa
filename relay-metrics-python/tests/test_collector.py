"""The direct API: relay_metrics.Collector, beyond Relay."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import relay_metrics
from relay_metrics.resource_metrics import DurationUnit, ResourceMetricsSnapshot

REPO = Path(__file__).resolve().parents[2]
FAST = {"extensions": {"kernel_events": False}}


def keys(value: Any) -> Any:
    """The key structure of a JSON value (lists by their first item)."""
    if isinstance(value, dict):
        return {k: keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [keys(value[0])] if value else []
    return type(value).__name__ if value is not None else None


def cli() -> Path:
    binary = REPO / "target" / "debug" / "relay-metrics"
    assert binary.exists(), f"{binary} is missing: build the workspace first (cargo build)"
    return binary


def test_sync_and_async_collect_share_one_series() -> None:
    with relay_metrics.Collector(FAST) as collector:
        first = collector.collect()
        time.sleep(0.05)
        second = asyncio.run(collector.acollect())
    assert isinstance(first, ResourceMetricsSnapshot) and isinstance(second, ResourceMetricsSnapshot)
    assert first.measurement_scope == "process_tree"
    assert first.extensions is not None and second.extensions is not None
    assert second.extensions["collector"]["sequence"] == first.extensions["collector"]["sequence"] + 1
    assert first.cpu is not None and first.cpu.consumption_rate is None
    assert second.cpu is not None and second.cpu.consumption_rate is not None
    assert first.timestamp.tzinfo is not None and first.timestamp.utcoffset().total_seconds() == 0


def test_collectors_are_independent_series() -> None:
    a, b = relay_metrics.Collector(FAST), relay_metrics.Collector(FAST)
    a.collect()
    a.collect()
    only = b.collect()
    assert only.cpu is not None and only.cpu.consumption_rate is None
    assert only.extensions is not None and only.extensions["collector"]["sequence"] == 1
    a.close()
    b.close()


def test_to_json_and_to_dict_are_the_clis_json(tmp_path: Path) -> None:
    config = {**FAST, "disk": {"filesystem_paths": ["/"]}}
    with relay_metrics.Collector(config) as collector:
        snapshot = collector.collect()
    ours = snapshot.to_dict()
    assert json.loads(snapshot.to_json()) == ours
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    output = subprocess.run(
        [str(cli()), "snapshot", "--pid", str(os.getpid()), "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    theirs = json.loads(output.stdout)
    assert list(ours) == list(theirs)
    assert keys({k: v for k, v in ours.items() if k != "extensions"}) == keys(
        {k: v for k, v in theirs.items() if k != "extensions"}
    )
    assert sorted(ours["extensions"]) == sorted(theirs["extensions"])
    # The dataclasses and the JSON say the same.
    assert snapshot.cpu is not None and snapshot.cpu.user_time is not None
    assert ours["cpu"]["user_time"] == {"value": snapshot.cpu.user_time.value, "unit": "milliseconds"}
    assert ours["timestamp"].endswith("Z")


def test_a_replaced_snapshot_serialises_its_own_values() -> None:
    with relay_metrics.Collector(FAST) as collector:
        snapshot = collector.collect()
    trimmed = dataclasses.replace(snapshot, cpu=None)
    assert trimmed.to_dict()["cpu"] is None
    assert trimmed.to_dict()["memory"] == snapshot.to_dict()["memory"]


def test_asdict_gives_plain_extensions() -> None:
    with relay_metrics.Collector(FAST) as collector:
        snapshot = collector.collect()
    as_dict = dataclasses.asdict(snapshot)
    assert isinstance(as_dict["extensions"], dict)
    assert as_dict["cpu"]["user_time"]["unit"] is DurationUnit.MILLISECONDS


def test_config_from_a_file_and_from_a_plugins_toml(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**FAST, "measurement_scope": "global", "memory": {"enabled": False}}))
    with relay_metrics.Collector(path) as collector:
        snapshot = collector.collect()
    assert snapshot.measurement_scope == "global" and snapshot.memory is None
    toml = Path(__file__).parent / "programs" / "plugins.toml"
    with relay_metrics.Collector(str(toml)) as collector:
        snapshot = collector.collect()
    assert snapshot.measurement_scope == "global" and snapshot.cpu is None


def test_root_pid_and_cgroup_targets() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with relay_metrics.Collector(FAST, root_pid=child.pid) as collector:
            snapshot = collector.collect()
        assert snapshot.extensions is not None
        assert snapshot.extensions["target"]["root_pid"] == child.pid
        assert snapshot.process is not None and snapshot.process.active_count is not None
        assert snapshot.process.active_count.value == 1
    finally:
        child.kill()
        child.wait()
    with relay_metrics.Collector(FAST, cgroup_path="/") as collector:
        snapshot = collector.collect()
    assert snapshot.measurement_scope == "cgroup"


@pytest.mark.parametrize(
    ("config", "kwargs", "message"),
    [
        ({"polling": {"interval_millis": 0}}, {}, "invalid resource metrics config: invalid argument: "
         "resource_metrics.polling.interval_millis must be greater than zero"),
        ({"cpu": {"enabled": "yes"}}, {}, 'invalid resource metrics config: invalid type: string "yes", expected a boolean'),
        (FAST, {"cgroup_path": "relative"}, "resource_metrics.cgroup_path must be absolute"),
        (FAST, {"cgroup_path": "/no-such-cgroup-relay-metrics"}, "no-such-cgroup-relay-metrics"),
        ("/nonexistent/relay-metrics.json", {}, "cannot read config file /nonexistent/relay-metrics.json"),
    ],
)
def test_bad_configs_and_targets_raise_value_error(config: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as error:
        relay_metrics.Collector(config, **kwargs)
    assert message in str(error.value)


def test_a_missing_pid_is_refused() -> None:
    with pytest.raises(ValueError, match="4194303"):
        relay_metrics.Collector(FAST, root_pid=4194303)


def test_close_is_idempotent_and_later_collects_say_closed() -> None:
    collector = relay_metrics.Collector(FAST)
    collector.close()
    collector.close()
    assert collector.closed
    with pytest.raises(RuntimeError, match="this collector is closed"):
        collector.collect()
    with pytest.raises(RuntimeError, match="this collector is closed"):
        asyncio.run(collector.acollect())


def test_hundred_concurrent_awaits_on_one_collector_collect_in_turn() -> None:
    async def run() -> list[ResourceMetricsSnapshot]:
        with relay_metrics.Collector(FAST) as collector:
            return await asyncio.wait_for(asyncio.gather(*(collector.acollect() for _ in range(100))), 60)

    snapshots = asyncio.run(run())
    sequences = sorted(s.extensions["collector"]["sequence"] for s in snapshots if s.extensions is not None)
    assert sequences == list(range(1, 101))


def test_a_cancelled_await_leaves_the_collector_usable() -> None:
    # A task's first step either finds the worker's result there and completes without yielding
    # (nothing left to cancel), or yields the loop's future; the loop runs this coroutine again in
    # the same turn, before it can see the worker's wake-up, so a task not done here is surely in
    # flight. Requests are tried until one is caught in flight.
    async def run() -> tuple[int, ResourceMetricsSnapshot]:
        with relay_metrics.Collector(FAST) as collector:
            for completed in range(100):
                task = asyncio.ensure_future(collector.acollect())
                await asyncio.sleep(0)
                if task.done():
                    assert task.result().cpu is not None
                    continue
                assert task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                return completed, await collector.acollect()
            pytest.fail("each of 100 collections ended before its task could be cancelled")

    completed, after = asyncio.run(run())
    # The worker still made the cancelled request's collection, in turn, before the next one.
    assert after.extensions is not None
    assert after.extensions["collector"]["sequence"] == completed + 2
    assert after.cpu is not None


def test_a_cancelled_await_whose_loop_closed_before_the_collection_ended_is_harmless() -> None:
    # The worker completes a request whose task was cancelled and whose loop is gone.
    with relay_metrics.Collector({"measurement_scope": "global", **FAST}) as collector:

        async def cancel_and_leave() -> None:
            task = asyncio.ensure_future(collector.acollect())
            await asyncio.sleep(0)
            task.cancel()

        asyncio.run(cancel_and_leave())
        first = collector.collect()
        second = asyncio.run(collector.acollect())
    assert first.extensions is not None and second.extensions is not None
    assert second.extensions["collector"]["sequence"] > first.extensions["collector"]["sequence"]


def test_the_loop_runs_other_tasks_while_a_collection_is_awaited() -> None:
    async def run() -> int:
        ticks = 0
        done = False

        async def heartbeat() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        with relay_metrics.Collector({"measurement_scope": "global", **FAST}) as collector:
            beating = asyncio.ensure_future(heartbeat())
            await asyncio.sleep(0)
            during = 0
            # One collection can end on its thread before the await below starts (a loaded
            # machine can pause this thread that long), and then the await does not yield: a
            # loop blocked by the collections would tick during none of ten.
            for _ in range(10):
                before = ticks
                await collector.acollect()
                during += ticks - before
            done = True
            await beating
        return during

    assert asyncio.run(run()) > 0


def test_a_collection_awaited_after_it_ended_and_awaited_twice() -> None:
    async def run() -> None:
        with relay_metrics.Collector(FAST) as collector:
            pending = collector._native.acollect()
            time.sleep(0.2)  # the worker finishes first: the await then takes the ready result
            snapshot = await pending
            assert isinstance(snapshot, ResourceMetricsSnapshot)
            with pytest.raises(RuntimeError, match="already awaited"):
                await pending

    asyncio.run(run())


def test_awaits_with_the_worker_parked_between_them_and_from_several_loops() -> None:
    async def run(pause: float) -> list[int]:
        sequences = []
        for _ in range(3):
            snapshot = await collector.acollect()
            assert snapshot.extensions is not None
            sequences.append(snapshot.extensions["collector"]["sequence"])
            await asyncio.sleep(pause)
        return sequences

    with relay_metrics.Collector(FAST) as collector:
        assert asyncio.run(run(0)) == [1, 2, 3]
        assert asyncio.run(run(0.01)) == [4, 5, 6]  # each asyncio.run: a new loop and its waker
        loop = asyncio.new_event_loop()
        try:
            assert loop.run_until_complete(run(0)) == [7, 8, 9]
            assert loop.run_until_complete(run(0)) == [10, 11, 12]  # the same loop's waker again
        finally:
            loop.close()


def test_the_interpreter_exits_cleanly_right_after_an_await() -> None:
    # The worker must not be inside the interpreter when it finalises (it was, now and then,
    # when it woke the loop itself: "Fatal Python error: PyGILState_Release").
    program = (
        "import asyncio, relay_metrics\n"
        f"c = relay_metrics.Collector({FAST!r})\n"
        "asyncio.run(c.acollect())\n"
    )
    for _ in range(10):
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and not done.stderr, (done.returncode, done.stderr)


def test_fork_child_awaiting_the_parents_collector_gets_a_clear_error() -> None:
    with relay_metrics.Collector(FAST) as collector:
        asyncio.run(collector.acollect())
        message = _in_child(lambda: asyncio.run(collector.acollect()))
        assert message.startswith("RuntimeError: ") and "was inherited across fork" in message
        assert asyncio.run(collector.acollect()).cpu is not None


def test_fork_child_gets_a_clear_error_and_parent_goes_on() -> None:
    collector = relay_metrics.Collector(FAST)
    collector.collect()
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            collector.collect()
            message = "collected"
        except RuntimeError as error:
            message = str(error)
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    deadline = time.monotonic() + 10
    _, status = os.waitpid(pid, 0)
    assert time.monotonic() < deadline
    message = os.read(read_end, 4096).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    assert f"was created in process {os.getpid()} and was inherited across fork" in message
    assert collector.collect().cpu is not None
    collector.close()


def test_kernel_events_load_in_this_python_process_as_root() -> None:
    assert os.geteuid() == 0, "this test runs as root (scripts/test-all.sh): it loads eBPF programs"
    with relay_metrics.Collector() as collector:
        collector.collect()
        snapshot = collector.collect()
    assert snapshot.extensions is not None
    assert snapshot.extensions["kernel_events"]["active"] is True, snapshot.extensions["kernel_events"]


def _in_child(work: Any) -> str:
    """Runs `work()` in a fork child; returns what it returned (or raised) as text."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            message = str(work())
        except BaseException as error:  # noqa: BLE001 - reported to the parent
            message = f"{type(error).__name__}: {error}"
        os.write(write_end, message.encode())
        os._exit(0)
    os.close(write_end)
    _, status = os.waitpid(pid, 0)
    message = os.read(read_end, 65536).decode()
    os.close(read_end)
    assert os.waitstatus_to_exitcode(status) == 0
    return message


def test_without_privileges_the_snapshot_says_why_kernel_events_are_off() -> None:
    assert os.geteuid() == 0, "this test runs as root (scripts/test-all.sh): it drops to nobody"

    def unprivileged() -> str:
        os.setgid(65534)
        os.setuid(65534)
        with relay_metrics.Collector() as collector:
            snapshot = collector.collect()
        assert snapshot.extensions is not None
        return json.dumps(snapshot.extensions["kernel_events"])

    events = json.loads(_in_child(unprivileged))
    assert events["active"] is False
    assert events.get("reason"), events


def test_a_fork_child_can_activate_anew() -> None:
    import relay_metrics.plugin as plugin
    import relay_metrics.resource_metrics as resource_metrics

    config = plugin.PluginConfig(components=[plugin.ComponentSpec(kind="resource_metrics", config=FAST)])

    async def parent_side() -> plugin.PluginHostActivation:
        return await plugin.initialize(config)

    async def child_side() -> str:
        activation = await plugin.initialize(config)
        snapshot = await resource_metrics.collect()
        await activation.close()
        assert snapshot.extensions is not None
        return str(snapshot.extensions["target"]["root_pid"] == os.getpid())

    loop = asyncio.new_event_loop()
    activation = loop.run_until_complete(parent_side())
    try:
        assert _in_child(lambda: asyncio.run(child_side())) == "True"
    finally:
        loop.run_until_complete(activation.close())
        loop.close()


def test_a_fork_child_that_inherited_a_collector_exits_normally() -> None:
    # The parent's collector is freed when the child's interpreter exits: its helper threads do
    # not exist there, and joining them must not abort the child. Both before and after the
    # parent awaited a collection, for the synchronous collector and Relay's plugin.
    programs = [
        "c = relay_metrics.Collector({})\nc.collect()\n",
        "c = relay_metrics.Collector({})\n",
        "import asyncio, relay_metrics.plugin as plugin\n"
        "config = plugin.PluginConfig(components=[plugin.ComponentSpec(kind='resource_metrics', config={})])\n"
        "activation = asyncio.run(plugin.initialize(config))\n",
    ]
    for setup in programs:
        program = (
            "import os, sys, relay_metrics\n"
            + setup
            + "pid = os.fork()\n"
            "if pid == 0:\n"
            "    sys.exit(0)\n"
            "_, status = os.waitpid(pid, 0)\n"
            "print(os.waitstatus_to_exitcode(status))\n"
            "os._exit(0)\n"
        )
        done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (setup, done.returncode, done.stderr[-2000:])
        assert done.stdout.strip() == "0", (setup, done.stdout, done.stderr[-2000:])
