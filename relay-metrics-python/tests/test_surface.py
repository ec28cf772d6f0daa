"""The public surface of relay_metrics against NeMo Relay 0.10.4's, by introspection.

Importing nemo_relay activates nothing, so both modules are compared in this process.
Declared differences: MeasurementScope gains "cgroup"; ResourceMetricsSnapshot gains a last
field, `extensions` (default None), and two methods, `to_dict` and `to_json`.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import typing
from typing import Any

import nemo_relay.plugin as relay_plugin
import nemo_relay.resource_metrics as relay
import nemo_relay.subscribers as relay_subscribers
import pytest

import relay_metrics.plugin as our_plugin
import relay_metrics.resource_metrics as ours
import relay_metrics.subscribers as our_subscribers


def public(module: Any) -> dict[str, Any]:
    """Names defined by the module itself (classes, functions, aliases, type variables)."""
    names = {}
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        defined_here = getattr(value, "__module__", None) == module.__name__
        if defined_here or isinstance(value, (typing.TypeVar, type(typing.Literal["x"]))):
            names[name] = value
    return names


def test_same_public_names() -> None:
    assert sorted(public(ours)) == sorted(public(relay))


UNIT_ENUMS = ["DurationUnit", "CapacityUnit", "DataUnit", "BandwidthUnit", "CpuUnit", "UtilizationUnit", "CountUnit"]


@pytest.mark.parametrize("name", UNIT_ENUMS)
def test_unit_enums_have_relays_members_and_values(name: str) -> None:
    theirs, mine = getattr(relay, name), getattr(ours, name)
    assert issubclass(mine, enum.StrEnum)
    assert [(m.name, m.value) for m in mine] == [(m.name, m.value) for m in theirs]
    assert mine.__doc__ == theirs.__doc__


def test_seven_unit_enums_and_no_other_enum() -> None:
    enums = sorted(n for n, v in public(relay).items() if isinstance(v, type) and issubclass(v, enum.Enum))
    assert enums == sorted(UNIT_ENUMS)


LITERALS = ["OperatingSystem", "MeasurementScope", "AcceleratorVendor", "ResourceLimitResource", "ResourceLimitEventKind"]


@pytest.mark.parametrize("name", LITERALS)
def test_literal_aliases(name: str) -> None:
    theirs, mine = typing.get_args(getattr(relay, name)), typing.get_args(getattr(ours, name))
    if name == "MeasurementScope":
        # Declared difference: the cgroup scope.
        assert mine == (*theirs, "cgroup")
    else:
        assert mine == theirs


@pytest.mark.parametrize("name", ["MeasurementValue", "UnitType"])
def test_type_variables(name: str) -> None:
    theirs, mine = getattr(relay, name), getattr(ours, name)
    assert isinstance(mine, typing.TypeVar)
    assert mine.__name__ == theirs.__name__
    assert mine.__constraints__ == theirs.__constraints__
    assert (mine.__covariant__, mine.__contravariant__) == (theirs.__covariant__, theirs.__contravariant__)
    # The bounds name the same types (each module's own unit enums).
    assert str(mine.__bound__).replace("relay_metrics.", "nemo_relay.") == str(theirs.__bound__)


DATACLASSES = sorted(n for n, v in public(relay).items() if dataclasses.is_dataclass(v))


def test_fifteen_dataclasses() -> None:
    assert len(DATACLASSES) == 15
    assert sum(len(dataclasses.fields(getattr(relay, n))) for n in DATACLASSES) == 85


@pytest.mark.parametrize("name", DATACLASSES)
def test_dataclass_fields_order_and_annotations(name: str) -> None:
    theirs, mine = getattr(relay, name), getattr(ours, name)
    assert dataclasses.is_dataclass(mine)
    assert mine.__dataclass_params__.frozen and theirs.__dataclass_params__.frozen
    assert repr(mine.__dataclass_params__) == repr(theirs.__dataclass_params__)
    their_fields = [(f.name, f.type) for f in dataclasses.fields(theirs)]
    my_fields = [(f.name, f.type) for f in dataclasses.fields(mine)]
    if name == "ResourceMetricsSnapshot":
        # Declared difference: one more, last field with a default.
        assert my_fields[:-1] == their_fields
        extensions = dataclasses.fields(mine)[-1]
        assert extensions.name == "extensions" and extensions.default is None
    else:
        assert my_fields == their_fields
    assert mine.__doc__ == theirs.__doc__
    assert mine.__mro__[1:] == theirs.__mro__[1:] or [c.__name__ for c in mine.__mro__] == [
        c.__name__ for c in theirs.__mro__
    ]


@pytest.mark.parametrize("name", DATACLASSES)
def test_dataclass_methods(name: str) -> None:
    theirs, mine = getattr(relay, name), getattr(ours, name)
    their_methods = {n for n, v in vars(theirs).items() if callable(v) and not n.startswith("__")}
    my_methods = {n for n, v in vars(mine).items() if callable(v) and not n.startswith("__")}
    extra = {"to_dict", "to_json", "_repr_html_", "_repr_pretty_"} if name == "ResourceMetricsSnapshot" else set()
    assert my_methods == their_methods | extra


def test_collect_is_a_coroutine_function_with_relays_signature() -> None:
    assert inspect.iscoroutinefunction(ours.collect) and inspect.iscoroutinefunction(relay.collect)
    assert str(inspect.signature(ours.collect)) == str(inspect.signature(relay.collect))
    assert ours.collect.__doc__ == relay.collect.__doc__


def test_plugin_has_every_name_of_relays_plugin_all() -> None:
    assert our_plugin.__all__ == relay_plugin.__all__
    for name in relay_plugin.__all__:
        assert hasattr(our_plugin, name), name


@pytest.mark.parametrize("name", ["initialize", "activate", "validate", "validate_exact", "list_kinds", "register", "deregister"])
def test_plugin_functions_have_relays_signatures(name: str) -> None:
    theirs, mine = getattr(relay_plugin, name), getattr(our_plugin, name)
    assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(theirs)
    assert list(inspect.signature(mine).parameters) == list(inspect.signature(theirs).parameters)


@pytest.mark.parametrize("name", ["PluginConfig", "ComponentSpec", "ConfigPolicy"])
def test_plugin_config_classes(name: str) -> None:
    theirs, mine = getattr(relay_plugin, name), getattr(our_plugin, name)
    assert [(f.name, f.type) for f in dataclasses.fields(mine)] == [(f.name, f.type) for f in dataclasses.fields(theirs)]
    assert repr(theirs()) == repr(mine()) if name != "ComponentSpec" else True
    if name == "ComponentSpec":
        assert repr(theirs(kind="k")) == repr(mine(kind="k"))
        assert theirs(kind="k").to_dict() == mine(kind="k").to_dict()
    else:
        assert theirs().to_dict() == mine().to_dict()


@pytest.mark.parametrize("name", ["ConfigDiagnostic", "RuntimeDiagnostic", "ConfigReport", "PluginHostReport",
                                  "DynamicPluginFailure", "DynamicPluginValidationReport", "DynamicPluginValidationStatus"])
def test_plugin_typed_dicts(name: str) -> None:
    theirs, mine = getattr(relay_plugin, name), getattr(our_plugin, name)
    assert sorted(mine.__required_keys__) == sorted(theirs.__required_keys__)
    assert sorted(mine.__optional_keys__) == sorted(theirs.__optional_keys__)


def test_activation_members() -> None:
    for member in ("report", "is_active", "close", "__aenter__", "__aexit__"):
        assert hasattr(our_plugin.PluginHostActivation, member)
    assert inspect.iscoroutinefunction(our_plugin.PluginHostActivation.close)


def test_dynamic_plugins_raise_not_implemented_saying_so() -> None:
    with pytest.raises(NotImplementedError, match="dynamic plugins are a NeMo Relay feature"):
        our_plugin.register("kind", object())  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="does not provide"):
        our_plugin.deregister("kind")


def test_list_kinds_names_what_relay_metrics_provides() -> None:
    assert our_plugin.list_kinds() == ["resource_metrics"]


def test_subscribers_functions() -> None:
    assert our_subscribers.__all__ == relay_subscribers.__all__
    for name in relay_subscribers.__all__:
        theirs, mine = getattr(relay_subscribers, name), getattr(our_subscribers, name)
        assert inspect.iscoroutinefunction(mine) == inspect.iscoroutinefunction(theirs), name
        assert list(inspect.signature(mine).parameters) == list(inspect.signature(theirs).parameters), name


def test_subscriber_names_are_unique_as_in_relay() -> None:
    our_subscribers.register("surface-test", print)
    try:
        with pytest.raises(RuntimeError, match="^already exists: surface-test subscriber already exists$"):
            our_subscribers.register("surface-test", print)
    finally:
        assert our_subscribers.deregister("surface-test") is True
    assert our_subscribers.deregister("surface-test") is False
