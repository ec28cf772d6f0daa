#!/usr/bin/env python3
"""Observer effect of `relay-metrics run` (and of psrecord, for comparison): wall time of a
CPU-bound benchmark alone and under the recorder, interleaved, medians over --runs rounds.

    tools/observer_effect.py --runs 10 [--seconds 1] [--case 1:1 --case 2:10] BINARY [--psrecord PATH]
        [--baseline OTHER_BINARY]

Cases (THREADS:INTERVAL_MS, default 1:1, 2:1 and 2:10): THREADS CPU-bound Python processes in
parallel (2 saturate a 2-core machine) under `run --interval-ms INTERVAL_MS`. --seconds sets
the benchmark's length alone (the loop is calibrated once at the start): the fixed start and
end of `run` weigh on a 1 s benchmark, much less on a 10 s one. psrecord runs at the same
interval (its --interval is in seconds). --baseline runs a second `relay-metrics` binary (say,
the previous build) in the same rounds, so that a change is compared on the same load. Also
timed, unless --no-fixed: `run --interval-ms 10 -- true`, the fixed cost alone. Prints a
Markdown table and the load average before and after.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

# The interpreter running this script: the benchmark starts no wrapper (such as a pyenv shim).
PYTHON = sys.executable


def work(iterations):
    return f"x = 0\nfor i in range({iterations}):\n    x += i\n"


def benchmark(threads, iterations):
    """A shell command running `threads` CPU-bound Python processes in parallel."""
    one = f"{PYTHON} -c '{work(iterations)}'"
    return ["sh", "-c", " & ".join([one] * threads) + " & wait"]


def timed(argv):
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def calibrate(seconds):
    """Loop iterations for `seconds` of one process alone (the median of three timings)."""
    probe = 3_000_000
    took = statistics.median(timed(benchmark(1, probe)) for _ in range(3))
    return max(1, int(probe * seconds / took))


def case(text):
    threads, interval = text.split(":")
    return int(threads), int(interval)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--case", type=case, action="append", dest="cases")
    parser.add_argument("--no-fixed", action="store_true")
    parser.add_argument("--psrecord")
    parser.add_argument("--baseline")
    args = parser.parse_args()
    cases = args.cases or [(1, 1), (2, 1), (2, 10)]
    out = tempfile.mkdtemp(prefix="observer-")
    print(f"load before: {os.getloadavg()}", file=sys.stderr)
    iterations = calibrate(args.seconds)
    print(f"{iterations} iterations for ~{args.seconds} s", file=sys.stderr)
    rows = []
    if not args.no_fixed:
        fixed = [args.binary, "run", "--interval-ms", "10", "--output", os.devnull, "--", "true"]
        values = sorted(timed(fixed) for _ in range(args.runs))
        rows.append(("-", 10, "`run -- true` alone", statistics.median(values), None,
                     (values[0], values[-1])))
    for threads, interval in cases:
        bench = benchmark(threads, iterations)
        def under(binary):
            return [binary, "run", "--interval-ms", str(interval),
                    "--output", os.path.join(out, "run.ndjson"), "--"] + bench

        variants = {"alone": lambda: bench, "run": lambda: under(args.binary)}
        if args.baseline:
            variants["run (baseline)"] = lambda: under(args.baseline)
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
            rows.append((threads, interval, name, median, 100 * (median / alone - 1),
                         (min(values), max(values))))
    print(f"load after: {os.getloadavg()}", file=sys.stderr)
    print("| threads | interval | recorder | median wall (s) | min–max (s) | above alone |")
    print("| ---: | ---: | --- | ---: | ---: | ---: |")
    for threads, interval, name, median, above, (low, high) in rows:
        above = "" if above is None else f"{above:+.1f} %"
        print(f"| {threads} | {interval} ms | {name} | {median:.3f} | {low:.3f}–{high:.3f} | {above} |")


if __name__ == "__main__":
    main()
