# Relay's validation reports for a list of configurations (validate, validate_exact).
import json
import os
import sys

from nemo_relay import plugin

CASES = {
    "empty": {},
    "zero_interval": {"polling": {"interval_millis": 0}},
    "zero_interval_polling_off": {"polling": {"enabled": False, "interval_millis": 0}},
    "relative_path": {"disk": {"filesystem_paths": ["relative"]}},
    "empty_path": {"disk": {"filesystem_paths": ["/", ""]}},
    "blank_interface": {"network": {"interfaces": ["eth0", "  "]}},
    "blank_gpu": {"gpu": {"devices": [""]}},
    "wrong_unit_family": {"units": {"cpu": {"user_time": "mebibytes"}}},
    "unknown_unit": {"units": {"memory": {"resident": "furlongs"}}},
    "unknown_units_key": {"units": {"disk": {"read_operations": "operations"}}},
    "wrong_type_bool": {"cpu": {"enabled": "yes"}},
    "negative_interval": {"polling": {"interval_millis": -1}},
    "float_interval": {"polling": {"interval_millis": 1.5}},
    "bad_scope": {"measurement_scope": "everything"},
    "unknown_section_key": {"disk": {"process_io": True, "paths": []}},
    "unknown_top_key": {"memory_inspection": {"enabled": True}},
    "huge_interval": {"polling": {"interval_millis": 18446744073709551615}},
    "missing_absolute_path_ok": {"disk": {"filesystem_paths": ["/nonexistent"]}},
}


def spec(config, kind="resource_metrics", enabled=True):
    return plugin.PluginConfig(components=[plugin.ComponentSpec(kind=kind, enabled=enabled, config=config)])


out = {}
for name, config in CASES.items():
    out[name] = plugin.validate(spec(config))
    out[name + ":exact"] = plugin.validate_exact(spec(config))
out["disabled_invalid"] = plugin.validate(spec({"foo": 1}, enabled=False))
out["duplicate"] = plugin.validate(
    plugin.PluginConfig(components=[plugin.ComponentSpec(kind="resource_metrics"), plugin.ComponentSpec(kind="resource_metrics")])
)
out["unknown_kind"] = plugin.validate(spec({}, kind="no_such_kind"))
out["unknown_kind_error_policy"] = plugin.validate(
    plugin.PluginConfig(components=[plugin.ComponentSpec(kind="no_such_kind")], policy=plugin.ConfigPolicy(unknown_component="error"))
)
out["unknown_kind_ignore_policy"] = plugin.validate(
    plugin.PluginConfig(components=[plugin.ComponentSpec(kind="no_such_kind")], policy=plugin.ConfigPolicy(unknown_component="ignore"))
)
out["version_2"] = plugin.validate(plugin.PluginConfig(version=2))
out["dict_form"] = plugin.validate({"components": [{"kind": "resource_metrics", "config": {"measurement_scope": "global"}}]})
out["missing_toml"] = plugin.validate(spec({}), "/nonexistent-relay-metrics.toml")
out["toml_merge"] = plugin.validate(spec({"memory": {"enabled": False}}), sys.argv[1])
try:
    plugin.validate(42)  # type: ignore[arg-type]
except ValueError as error:
    out["not_a_config"] = ["ValueError", str(error)]
out["to_dict"] = spec({"a": 1}).to_dict()
out["repr"] = repr(spec({}))
print(json.dumps(out))
os._exit(0)
