"""Checks OTLP/JSON export requests against PyPI's opentelemetry-semantic-conventions.

Usage: otel_semconv.py REQUEST.json...

Every metric name must be a convention's metric that is not deprecated, with the convention's
unit and instrument kind (gauge: an OTLP gauge; counter: a monotonic sum; updowncounter: a
non-monotonic sum), or sit in the relay_metrics.* namespace. Every data-point and resource
attribute key must be a convention's attribute that is not deprecated, or sit in relay_metrics.*;
where the convention enumerates an attribute's values, the value must be one of them. The
resource must carry host.name, os.type and service.instance.id.

The conventions are read from the package's modules (each constant's docstring says its
instrument, unit and deprecation), not from a list of ours. Prints one line per problem and exits
1 when there is any; otherwise prints `ok SEMCONV_METRICS OUR_METRICS ATTRIBUTE_KEYS`.
"""

import ast
import json
import pathlib
import re
import sys

import opentelemetry.semconv as semconv

OUR = "relay_metrics."
ROOT = pathlib.Path(semconv.__file__).parent


def constants(path):
    """(constant name, string value, docstring) of a module, and its enum classes' values."""
    tree = ast.parse(path.read_text())
    found, enums = [], {}
    body = tree.body
    for index, node in enumerate(body):
        target = value = None
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        if target and isinstance(value, ast.Constant) and isinstance(value.value, str):
            doc = ""
            if index + 1 < len(body):
                following = body[index + 1]
                if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                    doc = str(following.value.value)
            found.append((target, value.value, doc))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Values"):
            values = set()
            for item in node.body:
                if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                    values.add(item.value.value)
            enums[node.name] = values
    return found, enums


def deprecated(doc):
    # "Deprecated: Replaced by ..." is the convention's deprecation; "Deprecated in favor of
    # stable ..." only says the Python constant moved to the stable module.
    return re.search(r"(^|\n)Deprecated: ", doc) is not None


def camel(constant):
    return "".join(part.capitalize() for part in constant.lower().split("_")) + "Values"


def load():
    metrics, attributes, values = {}, {}, {}
    for kind in ("metrics", "attributes"):
        for folder in (ROOT / kind, ROOT / "_incubating" / kind):
            for path in sorted(folder.glob("*.py")):
                found, enums = constants(path)
                for constant, value, doc in found:
                    if kind == "metrics":
                        instrument = re.search(r"Instrument: (\w+)", doc)
                        unit = re.search(r"Unit: (\S+)", doc)
                        if not instrument or not unit:
                            continue
                        entry = (instrument.group(1), unit.group(1), deprecated(doc))
                        # The stable module's entry wins over the incubating one.
                        metrics.setdefault(value, entry)
                    else:
                        attributes.setdefault(value, deprecated(doc))
                        if camel(constant) in enums:
                            values.setdefault(value, enums[camel(constant)])
    return metrics, attributes, values


def main():
    metrics, attributes, values = load()
    if not metrics or not attributes:
        print(f"no conventions found under {ROOT}")
        return 1
    problems, conventional, ours, keys = [], set(), set(), set()

    def check_attributes(where, pairs):
        for pair in pairs:
            key = pair["key"]
            keys.add(key)
            value = pair.get("value", {}).get("stringValue")
            if key.startswith(OUR):
                if not re.fullmatch(r"[a-z0-9_.]+", key):
                    problems.append(f"{where}: attribute {key!r} is not a well-formed name")
                continue
            if key not in attributes:
                problems.append(f"{where}: attribute {key!r} is not in the conventions")
            elif attributes[key]:
                problems.append(f"{where}: attribute {key!r} is deprecated")
            elif key in values and value is not None and value not in values[key]:
                problems.append(f"{where}: {key}={value!r} is not one of {sorted(values[key])}")

    for path in sys.argv[1:]:
        request = json.loads(pathlib.Path(path).read_text())
        for resource_metrics in request["resourceMetrics"]:
            resource = resource_metrics["resource"]["attributes"]
            check_attributes("resource", resource)
            present = {pair["key"] for pair in resource}
            for required in ("host.name", "os.type", "service.instance.id"):
                if required not in present:
                    problems.append(f"resource: no {required}")
            for scope_metrics in resource_metrics["scopeMetrics"]:
                for metric in scope_metrics["metrics"]:
                    name, unit = metric["name"], metric.get("unit", "")
                    if "gauge" in metric:
                        kind, points = "gauge", metric["gauge"]["dataPoints"]
                    elif "sum" in metric:
                        monotonic = metric["sum"].get("isMonotonic", False)
                        kind = "counter" if monotonic else "updowncounter"
                        points = metric["sum"]["dataPoints"]
                    elif "histogram" in metric:
                        kind, points = "histogram", metric["histogram"]["dataPoints"]
                    else:
                        problems.append(f"{name}: neither a gauge, a sum nor a histogram")
                        continue
                    if name.startswith(OUR):
                        ours.add(name)
                        if not re.fullmatch(r"[a-z0-9_.]+", name):
                            problems.append(f"{name}: not a well-formed name")
                    elif name not in metrics:
                        problems.append(f"{name}: not a metric of the conventions")
                    else:
                        conventional.add(name)
                        instrument, expected_unit, is_deprecated = metrics[name]
                        if is_deprecated:
                            problems.append(f"{name}: deprecated in the conventions")
                        if instrument != kind:
                            problems.append(f"{name}: a {kind}, the conventions say {instrument}")
                        if unit != expected_unit:
                            problems.append(f"{name}: unit {unit!r}, the conventions say {expected_unit!r}")
                    for point in points:
                        check_attributes(name, point.get("attributes", []))
    for problem in problems:
        print(problem)
    if problems:
        return 1
    print(f"ok {len(conventional)} {len(ours)} {len(keys)}")
    print("conventional: " + " ".join(sorted(conventional)))
    print("ours: " + " ".join(sorted(ours)))
    print("keys: " + " ".join(sorted(keys)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
