"""The hand-written dataclasses against the schema table of the Rust crate.

The table (``relay-metrics/src/snapshot/mod.rs``, read here through ``_native._schema_table``)
declares every section and field of a snapshot once; the dataclasses of
``relay_metrics/resource_metrics.py`` are the package's public face and stay written by hand.
These tests fail naming the field and the place when the two disagree, and check that the
native builder fills exactly the dataclass fields, with the unit enum the table gives.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import relay_metrics
import relay_metrics.resource_metrics as rm
from relay_metrics import _native

TABLE = "relay-metrics/src/snapshot/mod.rs"
PYTHON = "relay-metrics-python/python/relay_metrics/resource_metrics.py"
SCHEMA: dict[str, list[tuple[str, str | None]]] = _native._schema_table()


def test_every_section_of_the_table_is_a_dataclass_and_every_dataclass_a_section() -> None:
    classes = {
        name
        for name, value in vars(rm).items()
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == rm.__name__
    }
    # The generic `{value, unit}` wrapper is every measurement's type, not a section.
    classes.discard("ResourceMeasurement")
    missing = sorted(set(SCHEMA) - classes)
    extra = sorted(classes - set(SCHEMA))
    assert not missing, f"sections of the schema table ({TABLE}) without a dataclass in {PYTHON}: {missing}"
    assert not extra, f"dataclasses in {PYTHON} that are not sections of the schema table ({TABLE}): {extra}"


@pytest.mark.parametrize("section", sorted(SCHEMA))
def test_dataclass_fields_match_the_table_field_for_field(section: str) -> None:
    table = [name for name, _ in SCHEMA[section]]
    python = [f.name for f in dataclasses.fields(getattr(rm, section))]
    for name in table:
        assert name in python, f"{section}.{name} is in the schema table ({TABLE}) but not in the dataclass in {PYTHON}"
    for name in python:
        assert name in table, f"{section}.{name} is in the dataclass in {PYTHON} but not in the schema table ({TABLE})"
    assert python == table, f"{section}: field order differs between {PYTHON} {python} and the schema table {table}"


@pytest.mark.parametrize("section", sorted(SCHEMA))
def test_measurement_fields_are_annotated_with_the_tables_unit_enum(section: str) -> None:
    hints = {f.name: str(f.type) for f in dataclasses.fields(getattr(rm, section))}
    for name, unit in SCHEMA[section]:
        if unit is None:
            assert "ResourceMeasurement" not in hints[name], f"{section}.{name}: not a measurement in {TABLE}"
        else:
            assert hints[name].endswith(f", {unit}] | None"), (
                f"{section}.{name} is a {unit} measurement in {TABLE} but {PYTHON} annotates it {hints[name]!r}"
            )


def instances(value: Any) -> list[Any]:
    """Every dataclass instance in a snapshot, depth first."""
    found: list[Any] = []
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        found.append(value)
        for f in dataclasses.fields(value):
            found.extend(instances(getattr(value, f.name)))
    elif isinstance(value, list):
        for item in value:
            found.extend(instances(item))
    return found


def test_the_native_builder_fills_exactly_the_fields_with_the_tables_units() -> None:
    config = {"extensions": {"kernel_events": False}}
    with relay_metrics.Collector(config) as collector:
        collector.collect()
        snapshot = collector.collect()
    seen = set()
    for obj in instances(snapshot):
        section = type(obj).__name__
        names = {key for key in vars(obj) if not key.startswith("_")}
        assert names == {f.name for f in dataclasses.fields(obj)}, f"{section}: built with {sorted(names)}"
        if section == "ResourceMeasurement":
            continue
        seen.add(section)
        for name, unit in SCHEMA[section]:
            value = getattr(obj, name)
            if unit is not None and value is not None:
                assert isinstance(value, rm.ResourceMeasurement), f"{section}.{name}"
                assert isinstance(value.unit, getattr(rm, unit)), (
                    f"{section}.{name}: unit {value.unit!r} is not a {unit} (schema table, {TABLE})"
                )
    # A process-tree snapshot of this process carries these sections at least.
    assert {"ResourceMetricsSnapshot", "CpuMetrics", "MemoryMetrics", "ProcessMetrics"} <= seen, sorted(seen)
