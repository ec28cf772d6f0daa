"""Relay programs, run once with nemo_relay 0.10.4 and once with relay_metrics (imports switched).

They must give the same classes, unit enums, value types, null-ness and structure, and values
within tolerance. The two runs are two different processes (with different libraries loaded),
so a per-process value can only be compared loosely; machine-wide values closely.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest

# Values relay-metrics may fill where Relay 0.10.4 on Linux gives null: declared, not tolerated at
# random. Both are lifetime counts, filled only where relay-metrics has an exact lifetime source
# (a tree counted from its root's start, a cgroup's own OOM counters, v1 included; see
# docs/COMPATIBILITY.md).
FILLED_BEYOND_RELAY = {"process.lifetime_creation_count", "memory.out_of_memory_event_count"}
# Lists where relay-metrics may report more items than Relay: limit events it reads that Relay
# does not (cgroup v1, `terminated`).
LONGER_LISTS = {"cpu.limit_events", "memory.limit_events", "process.limit_events"}
# Machine-wide values: compared within 10 % (they change between the two runs a little).
CLOSE = {
    "memory.system_available",
    "disk.filesystems[].available_capacity",
    "disk.filesystems[].free_capacity",
}
# Used system memory moves by hundreds of MiB while other work compiles between the two runs:
# within a factor of 2 too (it is a small part of the total).
# Per-process values of two similar Python processes (one with Relay's runtime loaded, one with
# relay_metrics): within a factor of 2.
SIMILAR = {"memory.resident", "memory.private", "memory.virtual_memory", "memory.system_used"}
# Machine constants: equal.
EQUAL = {"memory.system_total", "disk.filesystems[].total_capacity", "network.measurement_scope"}


def _number(node: Any) -> float | None:
    if isinstance(node, dict):
        for key in ("__int__", "__float__"):
            if key in node:
                return float(node[key])
    return None


def compare(relay: Any, ours: Any, path: str, problems: list[str]) -> None:
    """Structural comparison of two `describe()` trees, collecting differences."""
    if path.endswith(".extensions") or path == "extensions":
        return
    if relay is None or ours is None:
        if relay is None and ours is not None and path in FILLED_BEYOND_RELAY:
            return
        if (relay is None) != (ours is None):
            problems.append(f"{path}: relay {'null' if relay is None else 'set'}, ours {'null' if ours is None else 'set'}")
        return
    if isinstance(relay, list):
        if not isinstance(ours, list):
            problems.append(f"{path}: relay list, ours {type(ours).__name__}")
            return
        if len(ours) != len(relay) and not (path in LONGER_LISTS and len(ours) > len(relay)):
            problems.append(f"{path}: relay {len(relay)} items, ours {len(ours)}")
            return
        for index, (a, b) in enumerate(zip(relay, ours)):
            compare(a, b, f"{path}[]", problems)
        return
    if not isinstance(relay, dict) or not isinstance(ours, dict):
        problems.append(f"{path}: relay {relay!r}, ours {ours!r}")
        return
    if "__class__" in relay:
        if relay["__class__"] != ours.get("__class__"):
            problems.append(f"{path}: class {relay['__class__']} vs {ours.get('__class__')}")
            return
        relay_fields = [k for k in relay if k != "__class__"]
        our_fields = [k for k in ours if k not in ("__class__", "extensions")]
        if relay_fields != our_fields:
            problems.append(f"{path}: fields {relay_fields} vs {our_fields}")
            return
        if relay["__class__"] == "ResourceMeasurement":
            compare_measurement(relay, ours, path, problems)
            return
        for key in relay_fields:
            compare(relay[key], ours[key], f"{path}.{key}" if path else key, problems)
        return
    if "__dict__" in relay:
        if sorted(relay["__dict__"]) != sorted(ours.get("__dict__", {})):
            problems.append(f"{path}: keys {sorted(relay['__dict__'])} vs {sorted(ours.get('__dict__', {}))}")
        return
    if "__datetime__" in relay:
        if relay["utc"] != ours.get("utc") or "__datetime__" not in ours:
            problems.append(f"{path}: datetime {relay} vs {ours}")
        return
    relay_kind = next(iter(relay))
    if relay_kind != next(iter(ours)):
        problems.append(f"{path}: relay {relay}, ours {ours}")
        return
    if relay_kind in ("__str__", "__bool__", "__enum__") and relay != ours:
        # Strings, booleans and enums are facts (scope, interface names, paths, units).
        problems.append(f"{path}: relay {relay}, ours {ours}")


def compare_measurement(relay: Any, ours: Any, path: str, problems: list[str]) -> None:
    if relay["unit"] != ours["unit"]:
        problems.append(f"{path}.unit: relay {relay['unit']}, ours {ours['unit']}")
    relay_kind, our_kind = next(iter(relay["value"])), next(iter(ours["value"]))
    if relay_kind != our_kind:
        problems.append(f"{path}.value: relay {relay_kind}, ours {our_kind}")
        return
    a, b = _number(relay["value"]), _number(ours["value"])
    assert a is not None and b is not None
    if path in EQUAL and a != b:
        problems.append(f"{path}: relay {a}, ours {b} (must be equal)")
    elif path in CLOSE and not math.isclose(a, b, rel_tol=0.1):
        problems.append(f"{path}: relay {a}, ours {b} (beyond 10 %)")
    elif path in SIMILAR and not (a / 2 <= b <= a * 2):
        problems.append(f"{path}: relay {a}, ours {b} (beyond a factor of 2)")
    elif (a < 0) != (b < 0):
        problems.append(f"{path}: relay {a}, ours {b} (sign)")


def differences(relay: Any, ours: Any) -> list[str]:
    problems: list[str] = []
    compare(relay, ours, "", problems)
    return problems


@pytest.mark.parametrize("sample", ["first", "second"])
def test_basic_program_matches_relay(both: Any, sample: str) -> None:
    relay, ours = both("basic.py")
    assert differences(relay[sample], ours[sample]) == []
    # The first sample has no rates in either; the second has them in both.
    rate = ours[sample]["cpu"]["consumption_rate"]
    assert (rate is None) == (sample == "first")
    assert ours[sample]["measurement_scope"] == {"__str__": "process_tree"}
    for count in ("active_count", "descendant_count"):
        assert ours[sample]["process"][count] == relay[sample]["process"][count], count


@pytest.mark.parametrize("sample", ["first", "second"])
def test_global_program_matches_relay(both: Any, sample: str) -> None:
    relay, ours = both("global_scope.py")
    assert differences(relay[sample], ours[sample]) == []
    # Process counts of the whole machine: the two runs see nearly the same processes.
    relay_active = relay[sample]["process"]["active_count"]["value"]["__int__"]
    our_active = ours[sample]["process"]["active_count"]["value"]["__int__"]
    # Other work (compilers) starts and ends processes between the two runs.
    assert abs(relay_active - our_active) <= max(20, relay_active // 2)


def test_disabled_categories_program_matches_relay(both: Any) -> None:
    relay, ours = both("categories.py")
    assert differences(relay, ours) == []
    assert ours["cpu"] is None and ours["network"] is None
    assert ours["disk"]["read_data"] is None
    assert ours["gpu"]["device_metrics"] is None


def test_units_program_matches_relay(both: Any) -> None:
    relay, ours = both("units.py")
    assert ours == relay
    assert ours["user_time_is_seconds"] and ours["frozen"] and ours["replace_cpu"]


def test_lifecycle_edges_match_relay(both: Any) -> None:
    relay, ours = both("edges.py")
    assert ours == relay


def test_hundred_concurrent_awaits(both: Any) -> None:
    relay, ours = both("concurrent_awaits.py")
    assert ours["count"] == relay["count"] == 100
    assert ours["with_cpu"] == 100
    assert ours["distinct_timestamps"] == 100
    assert ours["scopes"] == relay["scopes"]
    # The event loop kept running while the 100 collections ran off its thread.
    assert ours["ticks"] >= 5
    assert ours["max_tick_gap_ms"] < 500


def test_fork_child_gets_relays_documented_error_instead_of_hanging() -> None:
    from conftest import run_program

    ours = run_program("fork.py", "relay_metrics")
    assert ours["child"] == [
        "RuntimeError",
        "invalid argument: resource_metrics runtime was inherited across fork; "
        "exec and activate it in the child before collecting",
    ]
    assert ours["parent_ok"] is True


def test_relay_itself_hangs_in_a_fork_child() -> None:
    """Why the test above matters: Relay 0.10.4's child never gets an answer."""
    from conftest import run_program

    relay = run_program("fork.py", "nemo_relay")
    assert relay["child"][0] == "hang"


def _our_message(message: str) -> str:
    """Relay's message, from ours: our config accepts more keys and one more scope, and serde
    lists every accepted value in an unknown-key or unknown-variant message."""
    return message.replace(", `cgroup_path`, `root_pid`, `extensions`", "").replace(
        ", `process_tree`, `cgroup`", ", `process_tree`"
    )


def _normalized(report: Any) -> Any:
    if isinstance(report, dict):
        return {k: (_our_message(v) if k == "message" else _normalized(v)) for k, v in report.items()}
    if isinstance(report, list):
        return [_normalized(item) for item in report]
    return report


def test_validation_reports_and_messages_match_relay(both: Any) -> None:
    toml = os.path.join(os.path.dirname(__file__), "programs", "plugins.toml")
    relay, ours = both("validation.py", toml)
    assert sorted(ours) == sorted(relay)
    for case in relay:
        assert _normalized(ours[case]) == relay[case], case
    # The only normalisation is the list of accepted names; every other message is identical.
    changed = [case for case in relay if ours[case] != relay[case]]
    assert set(changed) <= {
        "bad_scope", "bad_scope:exact", "unknown_top_key", "unknown_top_key:exact", "disabled_invalid",
    }, changed
