"""Polling marks against NeMo Relay's own marks, taken with polling on in the same program."""

from __future__ import annotations

import re
from typing import Any

import pytest

# Measurements relay-metrics emits where Relay 0.10.4 has null (eBPF counters; see the README).
BEYOND_RELAY = {
    "nemo.relay.resource.process.lifetime_creation_count",
    "nemo.relay.resource.memory.out_of_memory_event_count",
    "nemo.relay.resource.limit.event_count",
}


def by_name(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per measurement name: what every occurrence in every mark shares."""
    out: dict[str, dict[str, Any]] = {}
    for event in events:
        for m in event["measurements"]:
            facts = {
                "unit": m["unit"],
                "value_type": m["value_type"],
                "kind": m["kind"],
                "description": m["description"],
                "attribute_keys": sorted(m["attributes"]),
                "boundaries": m["boundaries"],
            }
            out.setdefault(m["name"], facts)
            assert out[m["name"]] == facts, m["name"]
    return out


@pytest.mark.parametrize("scope", ["process_tree", "global", "application_process"])
def test_marks_have_relays_schema_names_and_types(both: Any, scope: str) -> None:
    relay, ours = both("marks.py", scope)
    assert len(relay["events"]) >= 2, "Relay emitted too few marks to compare"
    # Fixed rate every 250 ms over 0.9 s: the first at once, then 3 more (one may be skipped
    # when this shared machine stalls the thread past a deadline).
    assert 2 <= len(ours["events"]) <= 5
    assert ours["marks_after_close"] == relay["marks_after_close"] == 0
    for event in ours["events"]:
        reference = relay["events"][0]
        for key in ("kind", "name", "data_schema", "atof_version", "dict_keys"):
            assert event[key] == reference[key], key
        assert set(reference["attributes"]) <= set(event["attributes"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}\+00:00", event["timestamp"])
        for m in event["measurements"]:
            assert isinstance(m["value"], int if m["value_type"] == "u64" else float), m
            assert m["value"] is not None
            assert m["attributes"]["nemo_relay.resource.operating_system"] == "linux"
    relay_names, our_names = by_name(relay["events"]), by_name(ours["events"])
    assert set(relay_names) <= set(our_names), set(relay_names) - set(our_names)
    assert set(our_names) - set(relay_names) <= BEYOND_RELAY
    for name, facts in relay_names.items():
        assert our_names[name] == facts, name


def test_marks_come_in_relays_order(both: Any) -> None:
    relay, ours = both("marks.py", "process_tree")
    relay_order = [m["name"] for m in relay["events"][-1]["measurements"]]
    our_order = [m["name"] for m in ours["events"][-1]["measurements"] if m["name"] not in BEYOND_RELAY]
    # Same names in the same order (the last marks of both have their rates).
    assert our_order == relay_order


def test_network_marks_are_global_whatever_the_scope(both: Any) -> None:
    _, ours = both("marks.py", "process_tree")
    for m in ours["events"][-1]["measurements"]:
        scope = m["attributes"]["nemo_relay.resource.measurement_scope"]
        assert scope == ("global" if ".network." in m["name"] else "process_tree"), m["name"]
