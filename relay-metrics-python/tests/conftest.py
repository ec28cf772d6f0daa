"""Shared helpers: NeMo Relay 0.10.4 (installed from PyPI) is the reference.

Relay's activation is process-wide and its native runtime can crash at interpreter exit, so every
program that activates anything runs in its own interpreter and ends with ``os._exit``. A
"Relay program" is a file written for ``nemo_relay``; it runs once as written and once with its
``nemo_relay`` imports replaced by ``relay_metrics`` (the one-line switch a user makes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

PROGRAMS = Path(__file__).parent / "programs"
TIMEOUT_S = 120


def program_text(name: str, module: str) -> str:
    text = (PROGRAMS / name).read_text()
    assert "nemo_relay" in text, f"{name} is not written for nemo_relay"
    if module == "relay_metrics":
        text = text.replace("nemo_relay", "relay_metrics")
    return text


def run_program(name: str, module: str, *args: str) -> Any:
    """Runs a program under `module`; returns the JSON it printed last."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(program_text(name, module))
        path = file.name
    try:
        result = subprocess.run(
            [sys.executable, path, *args],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            cwd=PROGRAMS,
            env={**os.environ, "PYTHONPATH": str(PROGRAMS)},
        )
    finally:
        os.unlink(path)
    assert result.returncode == 0, (
        f"{name} under {module} exited with {result.returncode}\n"
        f"stdout: {result.stdout[-3000:]}\nstderr: {result.stderr[-3000:]}"
    )
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines, f"{name} under {module} printed nothing; stderr: {result.stderr[-3000:]}"
    return json.loads(lines[-1])


@pytest.fixture(scope="session")
def both() -> Any:
    """Runs a program under both modules: `both("basic.py")` → (relay, ours)."""
    cache: dict[tuple[str, tuple[str, ...]], Any] = {}

    def run(name: str, *args: str) -> tuple[Any, Any]:
        key = (name, args)
        if key not in cache:
            cache[key] = (run_program(name, "nemo_relay", *args), run_program(name, "relay_metrics", *args))
        return cache[key]

    return run
