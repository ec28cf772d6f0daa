"""NeMo Relay's ``nemo_relay.plugin`` API, for the ``resource_metrics`` component.

``PluginConfig``, ``ComponentSpec``, ``ConfigPolicy``, ``initialize``, ``activate``,
``validate``, ``validate_exact`` and ``list_kinds`` behave as Relay 0.10.4's, with Relay's
diagnostics and exception messages. relay_metrics implements one component kind,
``resource_metrics``. A component of one of Relay's other kinds (``adaptive``,
``nemo_guardrails``, ``observability``, ``pii_redaction``, ``pricing``) is reported as a
warning diagnostic (code ``relay_metrics.unsupported_component``) and ignored; any other kind
is treated as Relay treats an unknown kind. Dynamic plugins (``register``, ``deregister``) are
not provided: they raise ``NotImplementedError``.
"""

from __future__ import annotations

import asyncio
import json
import os
import tomllib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, TypeAlias, TypedDict

from . import _host, _native

if TYPE_CHECKING:
    from .subscribers import MarkEvent

JsonObject: TypeAlias = dict[str, Any]
UnsupportedBehavior = Literal["ignore", "warn", "error"]
DynamicPluginKind = Literal["rust_dynamic", "worker"]
DynamicPluginCheckState = Literal["unknown", "valid", "invalid"]

RESOURCE_METRICS = "resource_metrics"
# NeMo Relay's other built-in component kinds: known, but not provided here.
RELAY_ONLY_KINDS = ("adaptive", "nemo_guardrails", "observability", "pii_redaction", "pricing")


class _ConfigDiagnosticRequired(TypedDict):
    level: Literal["warning", "error"]
    code: str
    message: str


class ConfigDiagnostic(_ConfigDiagnosticRequired, total=False):
    """One validation finding."""

    component: str
    field: str


class _RuntimeDiagnosticRequired(TypedDict):
    code: str
    component: str
    message: str
    count: int


class RuntimeDiagnostic(_RuntimeDiagnosticRequired, total=False):
    """A runtime finding (relay_metrics reports none)."""

    field: str
    session_id: str


class ConfigReport(TypedDict):
    """Validation findings."""

    diagnostics: list[ConfigDiagnostic]
    runtime_diagnostics: list[RuntimeDiagnostic]


class _DynamicPluginValidationStatusRequired(TypedDict):
    manifest: DynamicPluginCheckState
    compatibility: DynamicPluginCheckState
    integrity: DynamicPluginCheckState
    environment: DynamicPluginCheckState
    authenticity: DynamicPluginCheckState
    policy_satisfied: DynamicPluginCheckState


class DynamicPluginValidationStatus(_DynamicPluginValidationStatusRequired, total=False):
    """Relay's dynamic-plugin checks (never produced here)."""

    checked_at: str | None
    message: str | None


class DynamicPluginFailure(TypedDict):
    """Relay's dynamic-plugin failure (never produced here)."""

    phase: str
    code: str
    message: str


class _DynamicPluginValidationReportRequired(TypedDict):
    plugin_id: str
    manifest_ref: str
    kind: DynamicPluginKind
    status: DynamicPluginValidationStatus
    selected: bool


class DynamicPluginValidationReport(_DynamicPluginValidationReportRequired, total=False):
    """Relay's dynamic-plugin report (``dynamic_plugins`` is always empty here)."""

    failure: DynamicPluginFailure | None


class PluginHostReport(TypedDict):
    """What validation and activation report."""

    config: ConfigReport
    dynamic_plugins: list[DynamicPluginValidationReport]
    config_paths: list[str]
    resolved_config: JsonObject


class PluginContext(Protocol):
    """Relay's registration context for dynamic plugins (not provided by relay_metrics)."""

    def register_subscriber(self, name: str, callback: Callable[[MarkEvent], None]) -> None: ...


class Plugin(Protocol):
    """Relay's dynamic plugin protocol (not provided by relay_metrics)."""

    def validate(self, plugin_config: JsonObject) -> list[ConfigDiagnostic] | None: ...
    def register(self, plugin_config: JsonObject, context: PluginContext) -> None: ...


@dataclass
class ConfigPolicy:
    """Policy for unsupported plugin configuration."""

    unknown_component: UnsupportedBehavior = "warn"
    unknown_field: UnsupportedBehavior = "warn"
    unsupported_value: UnsupportedBehavior = "error"

    def to_dict(self) -> JsonObject:
        """The policy as a JSON object."""
        return {
            "unknown_component": self.unknown_component,
            "unknown_field": self.unknown_field,
            "unsupported_value": self.unsupported_value,
        }


@dataclass
class ComponentSpec:
    """One top-level plugin component."""

    kind: str
    enabled: bool = True
    config: JsonObject = field(default_factory=dict)

    def to_dict(self) -> JsonObject:
        """The component as a JSON object."""
        return {"kind": self.kind, "enabled": self.enabled, "config": self.config}


@dataclass
class PluginConfig:
    """Canonical plugin configuration document."""

    version: int = 1
    components: list[object] = field(default_factory=list)
    policy: ConfigPolicy = field(default_factory=ConfigPolicy)

    def to_dict(self) -> JsonObject:
        """The document as a JSON object."""
        return {
            "version": self.version,
            "components": [_component_dict(component) for component in self.components],
            "policy": self.policy.to_dict(),
        }


class PluginHostActivation:
    """The lifetime of one process-wide activation. Prefer ``async with`` or :meth:`close`."""

    def __init__(self, report: PluginHostReport, host: _host.Host) -> None:
        self._report = report
        self._host: _host.Host | None = host

    @property
    def report(self) -> PluginHostReport:
        """The validation report of the activated configuration."""
        return self._report

    @property
    def is_active(self) -> bool:
        """Whether :meth:`close` has not run yet."""
        return self._host is not None

    async def close(self) -> None:
        """Deactivates (stops polling, releases the collectors). Idempotent."""
        host, self._host = self._host, None
        if host is not None:
            await asyncio.to_thread(_host.release, host)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()


def _serde_kind(value: object) -> str:
    """How serde names an unexpected value, for Relay's `invalid type` messages."""
    if value is None:
        return "unit value"
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value}`"
    if isinstance(value, str):
        return f"string {json.dumps(value)}"
    if isinstance(value, (list, tuple)):
        return "sequence"
    return "map"


def _component_dict(component: object) -> JsonObject:
    to_dict = getattr(component, "to_dict", None)
    if callable(to_dict):
        value = to_dict()
    elif isinstance(component, Mapping):
        value = dict(component)
    else:
        raise ValueError(f"invalid type: {_serde_kind(component)}, expected struct ComponentSpec")
    if not isinstance(value, Mapping):
        raise ValueError(f"invalid type: {_serde_kind(value)}, expected struct ComponentSpec")
    return dict(value)


def _document(config: PluginConfig | JsonObject) -> JsonObject:
    """The config as a plain document with only the keys it set (dicts) or all (PluginConfig)."""
    if isinstance(config, PluginConfig):
        return config.to_dict()
    if not isinstance(config, Mapping):
        raise ValueError(f"invalid type: {_serde_kind(config)}, expected struct PluginConfig")
    document = dict(config)
    components = document.get("components", [])
    if not isinstance(components, list):
        raise ValueError(f"invalid type: {_serde_kind(components)}, expected a sequence")
    document["components"] = [_component_dict(component) for component in components]
    return document


def _normalized_component(component: JsonObject) -> JsonObject:
    kind = component.get("kind")
    if not isinstance(kind, str):
        raise ValueError("missing field `kind`")
    config = component.get("config", {})
    if not isinstance(config, Mapping):
        # As Relay: a component's config is a map (an explicit `None` included).
        kind = "null" if config is None else _serde_kind(config)
        raise ValueError(f"invalid type: {kind}, expected a map")
    return {"config": config, "enabled": bool(component.get("enabled", True)), "kind": kind}


def _merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    return override


def _merge_documents(file_document: JsonObject, document: JsonObject) -> JsonObject:
    """Programmatic values over file values; components of the same kind merge."""
    merged: JsonObject = _merge(
        {k: v for k, v in file_document.items() if k != "components"},
        {k: v for k, v in document.items() if k != "components"},
    )
    components = [dict(c) for c in file_document.get("components", [])]
    for component in document.get("components", []):
        same = next((c for c in components if c.get("kind") == component.get("kind")), None)
        if same is None:
            components.append(dict(component))
        else:
            same.update(_merge(same, component))
    merged["components"] = components
    return merged


def _diagnostic(level: str, code: str, message: str, **where: str) -> ConfigDiagnostic:
    entry: dict[str, str] = {"level": level, "code": code, "message": message, **where}
    return {key: entry[key] for key in sorted(entry)}  # type: ignore[return-value]


def _check(document: JsonObject) -> tuple[list[ConfigDiagnostic], JsonObject | None]:
    """Relay's diagnostics for a document, and the resource_metrics component config."""
    diagnostics: list[ConfigDiagnostic] = []
    version = document.get("version", 1)
    if version != 1:
        diagnostics.append(_diagnostic(
            "error", "plugin.unsupported_config_version",
            f"plugin config version {version} is unsupported", field="version",
        ))
    policy = {**ConfigPolicy().to_dict(), **(document.get("policy") or {})}
    components = [_normalized_component(c) for c in document.get("components", [])]
    ours = [c for c in components if c["kind"] == RESOURCE_METRICS]
    component_config: JsonObject | None = None
    if len(ours) > 1:
        diagnostics.append(_diagnostic(
            "error", "plugin.duplicate_component",
            f"plugin component kind '{RESOURCE_METRICS}' may only appear once",
            component=RESOURCE_METRICS,
        ))
    elif ours:
        try:
            _native.validate_config(json.dumps(ours[0]["config"]))
        except ValueError as error:
            diagnostics.append(_diagnostic(
                "error", "resource_metrics.invalid_config", str(error), component=RESOURCE_METRICS,
            ))
        else:
            if ours[0]["enabled"]:
                component_config = dict(ours[0]["config"])
    for component in components:
        kind = component["kind"]
        if kind == RESOURCE_METRICS:
            continue
        if kind in RELAY_ONLY_KINDS:
            diagnostics.append(_diagnostic(
                "warning", "relay_metrics.unsupported_component",
                f"plugin component kind '{kind}' is a NeMo Relay component that relay_metrics "
                "does not provide; it is ignored",
                component=kind,
            ))
        elif policy["unknown_component"] != "ignore":
            diagnostics.append(_diagnostic(
                "error" if policy["unknown_component"] == "error" else "warning",
                "plugin.unknown_component", f"plugin component kind '{kind}' is unsupported",
                component=kind,
            ))
    return diagnostics, component_config


def _report(
    config: PluginConfig | JsonObject,
    additional_plugins_toml: str | os.PathLike[str] | None,
    exact: bool,
) -> tuple[PluginHostReport, JsonObject | None, JsonObject]:
    document = _document(config)
    extra: list[ConfigDiagnostic] = []
    paths: list[str] = []
    file_version = False
    if additional_plugins_toml is not None:
        path = os.fspath(additional_plugins_toml)
        if os.path.exists(path):
            try:
                with open(path, "rb") as file:
                    file_document = tomllib.load(file)
            except (OSError, tomllib.TOMLDecodeError) as error:
                raise ValueError(f"invalid plugin configuration file {path}: {error}") from None
            programmatic = _only_set(config) if isinstance(config, PluginConfig) else document
            document = _merge_documents(file_document, programmatic)
            paths.append(path)
            file_version = "version" in file_document
        else:
            extra.append(_diagnostic(
                "warning", "plugin.configuration_file_missing",
                f"explicit plugin configuration file does not exist: {path}",
                field="additional_plugins_toml",
            ))
    diagnostics, component_config = _check(document)
    resolved: JsonObject = {
        "components": [_normalized_component(c) for c in document.get("components", [])]
    }
    default_policy = ConfigPolicy().to_dict()
    policy = document.get("policy") or {}
    if exact:
        resolved["policy"] = {**default_policy, **policy}
        resolved["version"] = document.get("version", 1)
    else:
        changed = {k: v for k, v in policy.items() if default_policy.get(k) != v}
        if changed:
            resolved["policy"] = changed
        if document.get("version", 1) != 1 or file_version:
            resolved["version"] = document.get("version", 1)
    report: PluginHostReport = {
        "config": {"diagnostics": extra + diagnostics},  # type: ignore[typeddict-item]
        "config_paths": paths,
        "dynamic_plugins": [],
        "resolved_config": resolved,
    }
    return report, component_config, document


def _only_set(config: PluginConfig) -> JsonObject:
    """A PluginConfig's document without the values left at their defaults, for merging."""
    document = config.to_dict()
    if config.version == 1:
        del document["version"]
    changed = {k: v for k, v in config.policy.to_dict().items() if ConfigPolicy().to_dict()[k] != v}
    if changed:
        document["policy"] = changed
    else:
        del document["policy"]
    return document


def validate(
    config: PluginConfig | JsonObject,
    additional_plugins_toml: str | os.PathLike[str] | None = None,
) -> PluginHostReport:
    """Validates a configuration (merged over ``additional_plugins_toml``) without activating."""
    return _report(config, additional_plugins_toml, exact=False)[0]


def validate_exact(config: PluginConfig | JsonObject) -> PluginHostReport:
    """Validates exactly this configuration, with no file merged in."""
    return _report(config, None, exact=True)[0]


async def initialize(
    config: PluginConfig | JsonObject,
    additional_plugins_toml: str | os.PathLike[str] | None = None,
) -> PluginHostActivation:
    """Activates the configuration process-wide; close the returned activation when done.

    ``ValueError("invalid config: …")`` when the configuration has an error diagnostic;
    ``RuntimeError`` when another activation is active; ``FileNotFoundError`` for an enabled
    component of a kind neither relay_metrics nor NeMo Relay knows.
    """
    _host.claim()
    report, component_config, document = _report(config, additional_plugins_toml, exact=False)
    for diagnostic in report["config"]["diagnostics"]:
        if diagnostic["level"] == "error":
            raise ValueError(f"invalid config: {diagnostic['message']}")
    for component in document.get("components", []):
        kind = _normalized_component(component)["kind"]
        enabled = _normalized_component(component)["enabled"]
        if enabled and kind != RESOURCE_METRICS and kind not in RELAY_ONLY_KINDS:
            raise FileNotFoundError(f"not found: plugin component '{kind}' is not registered")
    host = await asyncio.to_thread(_host.Host, component_config)
    _host.install(host)
    return PluginHostActivation(report, host)


@asynccontextmanager
async def activate(
    config: PluginConfig | JsonObject,
    additional_plugins_toml: str | os.PathLike[str] | None = None,
) -> AsyncIterator[PluginHostActivation]:
    """Activates the configuration for the duration of an ``async with`` block."""
    activation = await initialize(config, additional_plugins_toml)
    try:
        yield activation
    finally:
        await activation.close()


def list_kinds() -> list[str]:
    """The component kinds relay_metrics provides."""
    return [RESOURCE_METRICS]


def register(plugin_kind: str, plugin: Plugin) -> None:
    """Not provided: relay_metrics has no dynamic plugins (Relay's other plugin kinds)."""
    raise NotImplementedError(
        "relay_metrics.plugin.register: dynamic plugins are a NeMo Relay feature that "
        "relay_metrics does not provide (it implements only the resource_metrics component)"
    )


def deregister(plugin_kind: str) -> bool:
    """Not provided: relay_metrics has no dynamic plugins (Relay's other plugin kinds)."""
    raise NotImplementedError(
        "relay_metrics.plugin.deregister: dynamic plugins are a NeMo Relay feature that "
        "relay_metrics does not provide (it implements only the resource_metrics component)"
    )


__all__ = [
    "ComponentSpec",
    "ConfigDiagnostic",
    "RuntimeDiagnostic",
    "ConfigPolicy",
    "ConfigReport",
    "DynamicPluginCheckState",
    "DynamicPluginFailure",
    "DynamicPluginKind",
    "DynamicPluginValidationReport",
    "DynamicPluginValidationStatus",
    "PluginConfig",
    "PluginContext",
    "PluginHostActivation",
    "PluginHostReport",
    "Plugin",
    "activate",
    "initialize",
    "deregister",
    "list_kinds",
    "register",
    "validate",
    "validate_exact",
]
