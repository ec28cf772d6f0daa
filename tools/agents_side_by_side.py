#!/usr/bin/env python3
"""Runs several agent builds at once on the same cgroups and prints each one's CPU per round.

    tools/bench_node_agent.py --no-agent --no-netdata --sizes 500 --window 600 --rounds 1 &
    tools/agents_side_by_side.py --slice /relay-bench-<pid>-500.slice --window 60 --rounds 6 \\
        BUILD_A BUILD_B

`bench_node_agent.py` runs one agent at a time, so two builds are compared across runs minutes
apart, in different phases of a noisy VM. Here every build serves the same cgroups in the same
minutes (`serve --interval-ms 1000 --scope global --cgroups '<slice>/*'`, the bench's agent
command), each scraped every second on 127.0.0.1 as Prometheus scrapes (keep-alive, gzip, its
Accept header), and each round reads every build's CPU time (utime + stime, /proc/<pid>/stat)
over the same window. The builds share the machine's caches and CPUs, so a figure here is not
one of `bench_node_agent.py`'s; the comparison between the builds is what it is for.
"""
import argparse
import http.client
import os
import signal
import subprocess
import sys
import threading
import time

# Prometheus 2.x's scrape Accept header, as in bench_node_agent.py.
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
          "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
FIRST_PORT = 47100
SETTLE_S = 30


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape_every_second(port, offset, stop):
    time.sleep(offset)
    conn = None
    due = time.monotonic()
    while not stop.is_set():
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", "/metrics", headers={"Accept": ACCEPT,
                                                     "Accept-Encoding": "gzip"})
            conn.getresponse().read()
        except (OSError, http.client.HTTPException):
            conn = None
        # A request that timed out does not make the next ones come back to back.
        due = max(due + 1.0, time.monotonic())
        stop.wait(max(0.0, due - time.monotonic()))


def exit_if_one_ended(agents):
    for build, _, process in agents:
        if process.poll() is not None:
            sys.exit(f"{build} exited with {process.returncode}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slice", required=True, help="the cgroup whose children are measured")
    parser.add_argument("--window", type=int, default=60, help="seconds per round (≤ 600)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds (≤ 20)")
    parser.add_argument("builds", nargs="+", help="relay-metrics binaries (2 to 4)")
    args = parser.parse_args()
    if not 1 <= args.window <= 600 or not 1 <= args.rounds <= 20:
        sys.exit("--window is 1 to 600 s, --rounds 1 to 20")
    if not 2 <= len(args.builds) <= 4:
        sys.exit("give 2 to 4 builds")
    slice_dir = args.slice.rstrip("/")
    if not any(os.path.isdir(f"{mount}{slice_dir}") for mount in
               ["/sys/fs/cgroup"] + [e.path for e in os.scandir("/sys/fs/cgroup") if e.is_dir()]):
        sys.exit(f"{args.slice}: no such cgroup under /sys/fs/cgroup")
    for build in args.builds:
        if not os.access(build, os.X_OK):
            sys.exit(f"{build}: not an executable")
    agents = []
    stop = threading.Event()
    # The agents run in sessions of their own: a SIGTERM (`timeout`) must stop them too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    try:
        for i, build in enumerate(args.builds):
            port = FIRST_PORT + i
            argv = [build, "serve", "--listen", f"127.0.0.1:{port}", "--interval-ms", "1000",
                    "--scope", "global", "--cgroups", f"{args.slice}/*", "--max-targets", "5000"]
            agents.append((build, port, subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True)))
        scrapers = [threading.Thread(target=scrape_every_second, args=(port, 0.3 + 0.1 * i, stop),
                                     daemon=True) for i, (_, port, _) in enumerate(agents)]
        for scraper in scrapers:
            scraper.start()
        time.sleep(SETTLE_S)
        names = [os.path.basename(build) for build, _, _ in agents]
        print("| round (UTC) | " + " | ".join(f"{name} CPU %" for name in names) + " | load |")
        print("| --- |" + " ---: |" * len(names) + " ---: |")
        totals = [0.0] * len(agents)
        for _ in range(args.rounds):
            exit_if_one_ended(agents)
            before = [cpu_seconds(process.pid) for _, _, process in agents]
            started = time.monotonic()
            time.sleep(args.window)
            elapsed = time.monotonic() - started
            after = [cpu_seconds(process.pid) for _, _, process in agents]
            exit_if_one_ended(agents)
            shares = [100 * (a - b) / elapsed for a, b in zip(after, before)]
            totals = [t + s for t, s in zip(totals, shares)]
            print(f"| {time.strftime('%H:%M:%S', time.gmtime())} | "
                  + " | ".join(f"{share:.3f}" for share in shares)
                  + f" | {os.getloadavg()[0]:.1f} |", flush=True)
        print("| mean | " + " | ".join(f"{t / args.rounds:.3f}" for t in totals) + " | |")
    finally:
        stop.set()
        for _, _, process in agents:
            process.terminate()
        for _, _, process in agents:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    main()
