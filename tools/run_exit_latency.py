#!/usr/bin/env python3
"""How long `relay-metrics run` takes to exit after its command does, for one or more binaries
side by side (interleaved, medians over many runs).

    tools/run_exit_latency.py --runs 20 target/release/relay-metrics /tmp/old-relay-metrics

The command prints the time it ends (ns since the epoch) and exits; the script notes when `run`
exited and reports the difference. A pause between runs lets the kernel finish detaching the
previous run's eBPF programs, which would otherwise delay the next run's attach (not its exit).
Run as root for the eBPF programs to load.
"""

import argparse
import statistics
import subprocess
import time


def one_run(binary: str) -> float:
    done = subprocess.run(
        [binary, "run", "--interval-ms", "100000", "--", "sh", "-c", "date +%s%N >&2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=True,
    )
    exited_ns = time.time_ns()
    command_end_ns = int(done.stderr.decode().strip().splitlines()[-1])
    return (exited_ns - command_end_ns) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("binaries", nargs="+")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--pause", type=float, default=1.5, help="seconds between runs")
    args = parser.parse_args()
    results: dict[str, list[float]] = {b: [] for b in args.binaries}
    for _ in range(args.runs):
        for binary in args.binaries:
            results[binary].append(one_run(binary))
            time.sleep(args.pause)
    for binary, ms in results.items():
        ms.sort()
        print(
            f"{binary}: median {statistics.median(ms):.1f} ms, "
            f"min {ms[0]:.1f}, max {ms[-1]:.1f} ms over {len(ms)} runs"
        )


if __name__ == "__main__":
    main()
