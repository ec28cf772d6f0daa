"""A Collector configured with a filesystem that never answers returns, and the interpreter exits.

The FUSE daemon (relay-metrics/tests/hung_fuse.py, run as root) answers INIT and then reads every
request without answering: a `statvfs` of the mount waits in the kernel, past SIGKILL. The
collector asks it in a helper process, so the collect returns with `None` and a reason, and the
interpreter's exit is not held by a thread stuck in the kernel.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

DAEMON = Path(__file__).resolve().parents[2] / "relay-metrics" / "tests" / "hung_fuse.py"
MARK_NAME = "RELAY_METRICS_HUNG_FS_TEST"
MNT_DETACH = 2

PROGRAM = """
import json, sys, time
import relay_metrics
started = time.monotonic()
collector = relay_metrics.Collector(
    {"disk": {"filesystem_paths": [sys.argv[1], "/"]}, "gpu": {"enabled": False}}
)
snapshot = collector.collect()
print(json.dumps({
    "seconds": time.monotonic() - started,
    "capacities": {f.path: f.total_capacity is not None for f in snapshot.disk.filesystems},
    "reasons": [u["reason"] for u in snapshot.extensions["unavailable"]],
}), flush=True)
"""


def marked(mark: str) -> list[tuple[int, str]]:
    """Processes carrying the mark in their environment (the interpreter and its helpers)."""
    entry = f"{MARK_NAME}={mark}".encode()
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if entry in environ.split(b"\0"):
            found.append((int(pid), stat.rsplit(") ", 1)[1][0]))
    return found


@pytest.mark.skipif(os.geteuid() != 0, reason="root: mounts a FUSE filesystem")
def test_collect_returns_and_the_interpreter_exits_with_a_hung_path() -> None:
    mountpoint = tempfile.mkdtemp(prefix="relay-metrics-hung-")
    daemon = subprocess.Popen([sys.executable, str(DAEMON), mountpoint], stdout=subprocess.PIPE, text=True)
    mark = f"python-{os.getpid()}"
    try:
        assert daemon.stdout is not None and daemon.stdout.readline().strip() == "ready"
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-c", PROGRAM, mountpoint],
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, MARK_NAME: mark},
        )
        exited_after = time.monotonic() - started
        assert result.returncode == 0, result.stderr[-3000:]
        out = json.loads(result.stdout.splitlines()[-1])
        assert out["capacities"] == {mountpoint: False, "/": True}, out
        assert any(mountpoint in r and "no answer within" in r for r in out["reasons"]), out
        # One deadline (1 s) for the collect; the interpreter's exit adds no wait of ours.
        assert out["seconds"] < 5, out
        assert exited_after < out["seconds"] + 5, (exited_after, out)
        # What is left is the helper stuck on the mount, nothing running, once what was ending
        # has ended (a helper for "/" orphaned by the exit may still be on its way out).
        deadline = time.monotonic() + 5
        left = marked(mark)
        while not all(state in "DZ" for _, state in left) and time.monotonic() < deadline:
            time.sleep(0.02)
            left = marked(mark)
        assert any(state == "D" for _, state in left), left
        assert all(state in "DZ" for _, state in left), left
    finally:
        daemon.kill()
        daemon.wait()
        ctypes.CDLL(None, use_errno=True).umount2(mountpoint.encode(), MNT_DETACH)
        os.rmdir(mountpoint)
    # The daemon's end aborts the connection: the helper's call returns and it exits.
    deadline = time.monotonic() + 5
    while marked(mark):
        assert time.monotonic() < deadline, marked(mark)
        time.sleep(0.05)
