"""Turns a snapshot into JSON-ready facts: class names, value types, unit enums, null-ness.

Imported by the programs; contains no Relay or relay_metrics import, so it serves both.
"""

import dataclasses
import datetime
import enum


def describe(value, path="snapshot"):
    if dataclasses.is_dataclass(value):
        out = {"__class__": type(value).__name__}
        for field in dataclasses.fields(value):
            out[field.name] = describe(getattr(value, field.name), f"{path}.{field.name}")
        return out
    if isinstance(value, enum.Enum):
        return {"__enum__": type(value).__name__, "value": value.value}
    if isinstance(value, datetime.datetime):
        return {"__datetime__": True, "utc": value.utcoffset() == datetime.timedelta(0), "iso": value.isoformat()}
    if isinstance(value, list):
        return [describe(item, f"{path}[]") for item in value]
    if isinstance(value, dict):
        return {"__dict__": {str(k): describe(v, f"{path}.{k}") for k, v in value.items()}}
    if isinstance(value, bool):
        return {"__bool__": value}
    if isinstance(value, int):
        return {"__int__": value}
    if isinstance(value, float):
        return {"__float__": value}
    if value is None:
        return None
    if isinstance(value, str):
        return {"__str__": value}
    return {"__other__": type(value).__name__}
