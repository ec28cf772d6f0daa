#!/usr/bin/env python3
"""CPU time per sample of `relay-metrics run`, for one or more binaries side by side.

    tools/run_cpu_per_sample.py REPS SECONDS BINARY [BINARY...]
    [INTERVALS=100,10,1] [PSRECORD=PATH] tools/run_cpu_per_sample.py ...

Runs `BINARY run --interval-ms I --output FILE -- sleep SECONDS` for I = 10 and 1 (or the
`INTERVALS` of the environment), the binaries
alternated, REPS times each, and reads the CPU time of each whole run (its children included)
from getrusage(RUSAGE_CHILDREN), as /usr/bin/time does but to the microsecond. Also times
`run -- true` (3 runs each), the fixed start and end, and prints per binary and interval the
median CPU per run and per line, with and without that fixed cost. With `PSRECORD`, also runs
`psrecord 'sleep SECONDS' --interval I/1000 --include-children --log FILE` in the same rounds:
psrecord's own CPU per second of recording beside `run`'s. Prints the load average before and
after.
"""

import os
import resource
import statistics
import subprocess
import sys
import tempfile


def cpu_of(argv):
    """User and system CPU seconds of running `argv` to its end."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    reps, seconds, binaries = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    output = os.path.join(tempfile.mkdtemp(prefix="run-cpu-"), "run.ndjson")
    print(f"load before: {os.getloadavg()}", flush=True)
    fixed = {binary: [] for binary in binaries}
    for _ in range(3):
        for binary in binaries:
            fixed[binary].append(cpu_of(
                [binary, "run", "--interval-ms", "10", "--output", output, "--", "true"]))
    for binary in binaries:
        print(f"`run -- true`, {binary}: {statistics.median(fixed[binary]) * 1e3:.1f} ms CPU")
    intervals = [int(i) for i in os.environ.get("INTERVALS", "10,1").split(",")]
    psrecord = os.environ.get("PSRECORD")
    for interval in intervals:
        runs = {binary: [] for binary in binaries}
        recorded = []
        for _ in range(reps):
            for binary in binaries:
                cpu = cpu_of([binary, "run", "--interval-ms", str(interval), "--output", output,
                              "--", "sleep", seconds])
                with open(output, "rb") as lines:
                    runs[binary].append((cpu, sum(1 for _ in lines)))
            if psrecord:
                recorded.append(cpu_of([psrecord, f"sleep {seconds}", "--interval",
                                        str(interval / 1000), "--include-children",
                                        "--log", output]))
        if psrecord:
            cpu = statistics.median(recorded)
            print(f"{interval} ms, psrecord: CPU {cpu:.3f} s ({min(recorded):.3f}–"
                  f"{max(recorded):.3f}), {cpu / float(seconds) * 100:.2f} % of a core")
        for binary in binaries:
            cpus = [cpu for cpu, _ in runs[binary]]
            cpu = statistics.median(cpus)
            lines = statistics.median(n for _, n in runs[binary])
            start_end = statistics.median(fixed[binary])
            print(f"{interval} ms, {binary}: CPU {cpu:.3f} s ({min(cpus):.3f}–{max(cpus):.3f}), "
                  f"{lines:.0f} lines, {cpu / lines * 1e6:.0f} µs per line, "
                  f"{(cpu - start_end) / lines * 1e6:.0f} µs without the start and end, "
                  f"{cpu / float(seconds) * 100:.2f} % of a core")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
