#!/usr/bin/env python3
"""Observer effect of `relay-metrics run` (and of psrecord, for comparison): wall time of a
CPU-bound benchmark alone and under the recorder, interleaved, medians over --runs rounds.

    tools/observer_effect.py --runs 10 BINARY [--psrecord PATH]

Cases: 1 thread at --interval-ms 1; 2 threads (2 processes, saturating a 2-core machine) at 1
and 10 ms. psrecord runs at the same intervals (its --interval is in seconds). Prints a
Markdown table and the load average before and after.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

WORK = "x = 0\nfor i in range(12_000_000):\n    x += i\n"


def benchmark(threads):
    """A shell command running `threads` CPU-bound Python processes in parallel."""
    one = f"python3 -c '{WORK}'"
    return ["sh", "-c", " & ".join([one] * threads) + " & wait"]


def timed(argv):
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--psrecord")
    args = parser.parse_args()
    out = tempfile.mkdtemp(prefix="observer-")
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    rows = []
    for threads, interval in [(1, 1), (2, 1), (2, 10)]:
        bench = benchmark(threads)
        variants = {
            "alone": lambda: bench,
            "run": lambda: [args.binary, "run", "--interval-ms", str(interval),
                            "--output", os.path.join(out, "run.ndjson"), "--"] + bench,
        }
        if args.psrecord:
            # psrecord runs a command string through the shell; its interval is in seconds.
            variants["psrecord"] = lambda: [
                args.psrecord, bench[2], "--interval", str(interval / 1000),
                "--include-children", "--log", os.path.join(out, "psrecord.txt")]
        times = {name: [] for name in variants}
        for _ in range(args.runs):
            for name, argv in variants.items():
                times[name].append(timed(argv()))
        alone = statistics.median(times["alone"])
        for name, values in times.items():
            median = statistics.median(values)
            rows.append((threads, interval, name, median, 100 * (median / alone - 1)))
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print("| threads | interval | recorder | median wall (s) | above alone |")
    print("| ---: | ---: | --- | ---: | ---: |")
    for threads, interval, name, median, above in rows:
        print(f"| {threads} | {interval} ms | {name} | {median:.3f} | {above:+.1f} % |")


if __name__ == "__main__":
    main()
