"""`mypy --strict` on a Relay user's typed program, switched to relay_metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import program_text


def mypy_strict(module: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "typed_program.py"
        path.write_text(program_text("typed_program.py", module))
        return subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "MYPYPATH": ""},
        )


def test_relay_program_passes_mypy_strict_with_relay_metrics() -> None:
    result = mypy_strict("relay_metrics")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout


def test_the_typed_program_runs() -> None:

    # interpreter, with its result line checked for the scope.
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as file:
        file.write(program_text("typed_program.py", "relay_metrics"))
    try:
        result = subprocess.run([sys.executable, file.name], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(file.name)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("process_tree")


def test_package_is_typed() -> None:
    import relay_metrics

    assert (Path(relay_metrics.__file__).parent / "py.typed").exists()


def test_the_package_itself_passes_mypy_strict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "-p", "relay_metrics"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
