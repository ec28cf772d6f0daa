"""Python packaging conventions: ``__all__`` on every public module, ``__version__``."""

from __future__ import annotations

import importlib.metadata
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest

import relay_metrics
import relay_metrics.plugin
import relay_metrics.recording
import relay_metrics.resource_metrics
import relay_metrics.subscribers

PUBLIC_MODULES = [
    relay_metrics,
    relay_metrics.plugin,
    relay_metrics.recording,
    relay_metrics.resource_metrics,
    relay_metrics.subscribers,
]


def defined_here(module: Any) -> set[str]:
    """Public names the module defines itself (not what it imports)."""
    names = set()
    for name in dir(module):
        if name.startswith("_"):
            continue
        value = getattr(module, name)
        if getattr(value, "__module__", None) == module.__name__ or isinstance(
            value, (typing.TypeVar, type(typing.Literal["x"]))
        ):
            names.add(name)
    return names


@pytest.mark.parametrize("module", PUBLIC_MODULES, ids=lambda m: m.__name__)
def test_every_public_module_declares_all_and_each_name_resolves(module: Any) -> None:
    exported = module.__all__
    assert len(exported) == len(set(exported)), f"{module.__name__}.__all__ repeats a name"
    missing = [name for name in exported if not hasattr(module, name)]
    assert not missing, f"{module.__name__}.__all__ names what it lacks: {missing}"


def test_resource_metrics_exports_every_public_name_it_defines() -> None:
    module = relay_metrics.resource_metrics
    assert set(module.__all__) == defined_here(module), (
        "add the new name to relay_metrics.resource_metrics.__all__ (or make it private): "
        f"{sorted(defined_here(module) ^ set(module.__all__))}"
    )


def test_the_package_exports_its_submodules_and_every_public_name() -> None:
    public = {name for name in dir(relay_metrics) if not name.startswith("_")}
    assert set(relay_metrics.__all__) == public, sorted(public ^ set(relay_metrics.__all__))


def test_version_is_the_installed_distributions_and_the_pyproject_one() -> None:
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert relay_metrics.__version__ == importlib.metadata.version("relay-metrics")
    assert relay_metrics.__version__ == pyproject["project"]["version"]


def test_the_distribution_has_a_readme_and_project_urls() -> None:
    metadata = importlib.metadata.metadata("relay-metrics")
    assert "relay_metrics" in (metadata.get("Description") or metadata.get_payload() or "")
    urls = metadata.get_all("Project-URL") or []
    assert any(url.startswith("Repository, ") for url in urls), urls
