"""One ``record()`` of a real workload and its independent witness, printed as one JSON line.

Run by ``test_record_witness.py`` as the test's user and, from root, as ``nobody``:

    python record_witness_program.py SCOPE DIRECTORY buffered|direct

SCOPE is what the recording measures:

- ``self``: ``record()`` as a user writes it (no config: this process and its descendants); the
  workload runs inside the ``with`` block, in this process and its children. The witness is this
  process's own account: ``os.times()`` (its threads, the recorder's included, and its reaped
  children) and ``/proc/self/io`` (reaped children's bytes included), read after the first
  snapshot and at the block's end (CPU: after the block).
- ``tree``: ``process_tree`` rooted at a driver child that contains only the workload; the driver
  waits on its stdin until the recording has started, runs the workload, prints its own
  ``os.times()``, ``/proc/self/io`` and ``getrusage(RUSAGE_SELF)`` deltas, and waits again until
  the recording has stopped, so nothing of it runs outside the recording.

Each run also prints an outer witness (``outer``): the same counters read before the recording
started and after it stopped. The recording lies between the two, so ours lies between the inner
and the outer witness; both are equal when nothing ran in the gaps (a page fault there reads from
disk when the page cache is under pressure).
- ``process``: ``application_process`` of the same driver (its children are not in scope): the
  witness is the driver's own times and bytes, and its ``ru_maxrss`` for the one-process max RSS.
- ``cgroup`` (root): ``cgroup`` scope of a cgroup made for the driver alone, moved there before
  it says it is ready; its CPU is the scheduler's count, witnessed by ``getrusage``
  (microseconds) rather than ``os.times()`` (clock ticks).

The workload: one child that burns 0.4 s of CPU, ``SHORT_PROCESSES`` short children, 64 MiB
written with ``fsync`` (buffered or ``O_DIRECT``) and read back with ``O_DIRECT``, and 200 MiB
allocated and held for 0.3 s.
"""

from __future__ import annotations

import json
import mmap
import os
import resource
import subprocess
import sys
import time
from typing import Any

SHORT_PROCESSES = 20
BLOCK = 1 << 20
FILE_BYTES = 64 * BLOCK
HELD_BYTES = 200 << 20
# The interpreter of the workload's processes (stdlib only). The test virtualenv's interpreter may
# link into root's home, which `nobody` cannot search (it still starts this program through the
# link, but not a child): then the system's.
PYTHON = sys.executable if os.access(sys.executable, os.X_OK) else "/usr/bin/python3"
SPIN = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"


def own_io() -> dict[str, int]:
    """This process's `/proc/self/io` (reaped children included)."""
    with open("/proc/self/io") as file:
        return {key: int(value) for key, value in (line.split(": ") for line in file)}


def cpu_seconds() -> tuple[float, float, float, float]:
    """(own user, own system, reaped children's user, reaped children's system)."""
    times = os.times()
    return times.user, times.system, times.children_user, times.children_system


def write_and_read_back(path: str, direct: bool) -> int:
    """Writes the file and reads it back; returns the bytes the read-back alone read from
    storage (this process's `read_bytes` around it)."""
    # O_DIRECT needs an aligned buffer: an anonymous mapping is page-aligned.
    buffer = mmap.mmap(-1, BLOCK)
    buffer.write(b"x" * BLOCK)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0)
    fd = os.open(path, flags, 0o600)
    try:
        for _ in range(FILE_BYTES // BLOCK):
            os.write(fd, buffer)
        os.fsync(fd)
    finally:
        os.close(fd)
    # Read back past the page cache: exactly the file's bytes from the device.
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    before = own_io()["read_bytes"]
    try:
        while os.readv(fd, [buffer]) > 0:
            pass
    finally:
        read_back = own_io()["read_bytes"] - before
        os.close(fd)
    os.unlink(path)
    return read_back


def work(directory: str, direct: bool) -> tuple[int, int]:
    """The workload; returns the processes it created and the bytes its read-back read."""
    subprocess.run([PYTHON, "-c", SPIN], check=True)
    for _ in range(SHORT_PROCESSES):
        subprocess.run(["/bin/true"], check=True)
    read_back = write_and_read_back(os.path.join(directory, f"written-{os.getpid()}"), direct)
    held = bytearray(HELD_BYTES)
    for offset in range(0, HELD_BYTES, 4096):
        held[offset] = 1
    time.sleep(0.3)
    del held
    return 1 + SHORT_PROCESSES, read_back


def rusage_seconds() -> float:
    """User + system of this process and its reaped children, in microseconds (`getrusage`):
    finer than `os.times()`'s clock ticks, for a scope whose CPU is the scheduler's own count."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def witness_after(
    start: tuple[float, float, float, float], io: dict[str, int], rusage_start: float
) -> dict[str, Any]:
    end, io_end = cpu_seconds(), own_io()
    delta = [b - a for a, b in zip(start, end)]
    return {
        "rusage_total_s": rusage_seconds() - rusage_start,
        "own_user_s": delta[0],
        "own_system_s": delta[1],
        "user_s": delta[0] + delta[2],
        "system_s": delta[1] + delta[3],
        "written_bytes": io_end["write_bytes"] - io["write_bytes"],
        "read_bytes": io_end["read_bytes"] - io["read_bytes"],
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }


def driver(directory: str, direct: bool) -> None:
    """The workload's own process: says it is ready (its interpreter's start is not part of the
    workload), waits for the recording, works, reports, waits for the recording's end, reports
    again (the outer witness: from before it said it was ready to after the recording)."""
    outer = cpu_seconds(), own_io(), rusage_seconds()
    print("ready", flush=True)
    sys.stdin.readline()
    start, io, rusage, began = cpu_seconds(), own_io(), rusage_seconds(), time.monotonic()
    created, read_back = work(directory, direct)
    witness = witness_after(start, io, rusage)
    witness.update(processes_created=created, read_back_bytes=read_back, work_s=time.monotonic() - began)
    print(json.dumps(witness), flush=True)
    sys.stdin.readline()
    print(json.dumps(witness_after(*outer)), flush=True)
    sys.stdin.readline()


def own_cgroup_dirs(name: str) -> list[str]:
    """A cgroup `/<name>` that the driver alone will be in: on v2 one directory, on a v1 host
    one per hierarchy `cgroup` scope reads (the same path in each, as `cgroup_path` is one)."""
    root = "/sys/fs/cgroup"
    if os.path.exists(f"{root}/cgroup.controllers"):
        dirs = [f"{root}/{name}"]
    else:
        dirs = [f"{root}/{h}/{name}" for h in ("cpuacct", "memory", "blkio", "pids")]
    for path in dirs:
        os.mkdir(path)
    return dirs


def cgroup_usage_s(dirs: list[str]) -> float | None:
    """The cgroup's CPU time as its own file counts it (v1 `cpuacct.usage`, v2 `cpu.stat`
    `usage_usec`), seconds; `None` without a cgroup."""
    for path in dirs:
        if os.path.exists(f"{path}/cpuacct.usage"):
            with open(f"{path}/cpuacct.usage") as file:
                return int(file.read()) / 1e9
    for path in dirs:
        if os.path.exists(f"{path}/cpu.stat"):
            with open(f"{path}/cpu.stat") as file:
                return int(dict(line.split() for line in file)["usage_usec"]) / 1e6
    return None


def remove_cgroup(dirs: list[str]) -> None:
    for path in dirs:
        for _ in range(250):  # the driver's exit may still be under way
            try:
                os.rmdir(path)
                break
            except OSError:
                time.sleep(0.02)


def record_driver(scope: str, directory: str, direct: bool) -> dict[str, Any]:
    from relay_metrics import record

    child = subprocess.Popen(
        [PYTHON, __file__, "driver", directory, "direct" if direct else "buffered"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    config: dict[str, Any] = {"measurement_scope": scope, "root_pid": child.pid}
    cgroup: list[str] = []
    if scope == "cgroup":
        name = f"relay-metrics-record-witness-{os.getpid()}"
        cgroup = own_cgroup_dirs(name)
        for path in cgroup:
            with open(f"{path}/cgroup.procs", "w") as procs:
                procs.write(str(child.pid))
        config = {"measurement_scope": "cgroup", "cgroup_path": f"/{name}"}
    assert child.stdout.readline() == "ready\n"
    began = time.monotonic()
    # The driver is blocked on its stdin at both reads: the cgroup's file counts between them
    # what the recording counts.
    usage_before = cgroup_usage_s(cgroup)
    with record(interval_ms=10, config=config) as rec:
        while len(rec.snapshots) < 2:
            time.sleep(0.005)
        child.stdin.write("go\n")
        child.stdin.flush()
        witness = json.loads(child.stdout.readline())
    block_s = time.monotonic() - began
    usage_after = cgroup_usage_s(cgroup)
    child.stdin.write("stopped\n")
    child.stdin.flush()
    outer = json.loads(child.stdout.readline())
    child.stdin.close()
    assert child.wait() == 0
    remove_cgroup(cgroup)
    witness["block_s"] = block_s
    if usage_before is not None and usage_after is not None:
        witness["cgroup_usage_s"] = usage_after - usage_before
    return {"summary": rec.summary(), "samples": len(rec.snapshots), "witness": witness, "outer": outer}


def record_self(directory: str, direct: bool) -> dict[str, Any]:
    from relay_metrics import record

    began = time.monotonic()
    outer = cpu_seconds(), own_io(), rusage_seconds()
    with record(interval_ms=10) as rec:
        # The recording's baseline is its first snapshot: the witness starts after it.
        while len(rec.snapshots) < 1:
            time.sleep(0.001)
        start, io, rusage, work_began = cpu_seconds(), own_io(), rusage_seconds(), time.monotonic()
        created, read_back = work(directory, direct)
        work_s = time.monotonic() - work_began
        io_end = own_io()
    witness = witness_after(start, io, rusage)
    # The bytes are the inner witness's up to the block's end (the recorder's last snapshot
    # comes after it); its CPU runs to after the block, as the recorder thread's is this
    # process's.
    witness.update(
        processes_created=created,
        read_back_bytes=read_back,
        work_s=work_s,
        block_s=time.monotonic() - began,
        written_bytes=io_end["write_bytes"] - io["write_bytes"],
        read_bytes=io_end["read_bytes"] - io["read_bytes"],
    )
    return {
        "summary": rec.summary(),
        "samples": len(rec.snapshots),
        "witness": witness,
        "outer": witness_after(*outer),
    }


def main() -> None:
    scope, directory, kind = sys.argv[1:4]
    direct = kind == "direct"
    if scope == "driver":
        driver(directory, direct)
        return
    if scope == "self":
        result = record_self(directory, direct)
    else:
        result = record_driver(
            {"tree": "process_tree", "process": "application_process", "cgroup": "cgroup"}[scope],
            directory,
            direct,
        )
    result.update(uid=os.getuid(), cpus=len(os.sched_getaffinity(0)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
