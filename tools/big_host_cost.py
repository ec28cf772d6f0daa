#!/usr/bin/env python3
"""The collector's cost on a big host beside this machine's defaults, side by side in one run.

As root: takes `relay-metrics bench --scope global` and the agent's CPU (serve, sampled and
scraped every second, with --cgroups over the test's cgroups) on this host as it is, then builds a
big host (300 veth pairs, 2,000 v1 memory+pids cgroups, 5,000 sleeping processes in one), takes
the same figures, removes it and takes the defaults once more. Prints one line per figure.

    tools/big_host_cost.py target/release/relay-metrics
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

BINARY = sys.argv[1] if len(sys.argv) > 1 else "target/release/relay-metrics"
NAME = f"relay-cost-{os.getpid()}"
HIERARCHIES = ["/sys/fs/cgroup/memory", "/sys/fs/cgroup/pids"]
PAIRS, CGROUPS, PROCESSES = 300, 2000, 5000


def bench(iterations=200):
    out = subprocess.run([BINARY, "bench", "--scope", "global", "--iterations", str(iterations)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def agent_cpu(seconds=30):
    """Percent of one core the agent used over `seconds`, scraped every second."""
    agent = subprocess.Popen([BINARY, "serve", "--listen", "127.0.0.1:0", "--scope", "global",
                              "--interval-ms", "1000", "--cgroups", f"/{NAME}/*", "--max-targets", "2500"],
                             stderr=subprocess.PIPE, text=True)
    address = None
    for line in agent.stderr:
        if "serving http://" in line:
            address = line.split("serving http://")[1].split("/")[0]
            break
    time.sleep(5)  # discovery and the first snapshots
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu():
        fields = open(f"/proc/{agent.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / ticks

    start, at = cpu(), time.monotonic()
    for _ in range(seconds):
        urllib.request.urlopen(f"http://{address}/metrics").read()
        time.sleep(1)
    used = (cpu() - start) / (time.monotonic() - at) * 100
    agent.send_signal(signal.SIGTERM)
    agent.wait()
    return used


def report(label):
    b = bench()
    print(f"{label}: collect median {b['median_us']} us, p99 {b['p99_us']} us, "
          f"cpu {b['cpu_us_per_collect']} us/collect; agent {agent_cpu():.2f} % of a core", flush=True)


def build():
    with tempfile.NamedTemporaryFile("w", delete=False) as batch:
        for i in range(PAIRS):
            batch.write(f"link add rmc{i} type veth peer name p{i} netns {NAME}\n")
    subprocess.run(["ip", "netns", "add", NAME], check=True)
    subprocess.run(["ip", "-batch", batch.name], check=True)
    for h in HIERARCHIES:
        os.mkdir(f"{h}/{NAME}")
        for i in range(CGROUPS):
            os.mkdir(f"{h}/{NAME}/c{i:04}")
    enter = "".join(f"echo $$ > {h}/{NAME}/c0000/cgroup.procs; " for h in HIERARCHIES)
    shell = subprocess.Popen(["sh", "-c", f"{enter}i=0; while [ $i -lt {PROCESSES} ]; do sleep 3600 & "
                              "i=$((i+1)); done; echo ready; wait"], stdout=subprocess.PIPE, text=True)
    shell.stdout.readline()
    return shell


def tear_down(shell):
    subprocess.run(["pkill", "-KILL", "-P", str(shell.pid)])
    shell.kill()
    shell.wait()
    subprocess.run(["ip", "netns", "del", NAME])
    for h in HIERARCHIES:
        for i in reversed(range(CGROUPS)):
            path = f"{h}/{NAME}/c{i:04}"
            for _ in range(100):
                try:
                    os.rmdir(path)
                    break
                except OSError:
                    time.sleep(0.05)
        os.rmdir(f"{h}/{NAME}")


def main():
    for h in HIERARCHIES:  # the agent's pattern must find the parent, even empty
        os.mkdir(f"{h}/{NAME}")
    report("this host")
    for h in HIERARCHIES:
        os.rmdir(f"{h}/{NAME}")
    shell = build()
    try:
        report(f"big host ({PAIRS} veth pairs, {CGROUPS} cgroups, {PROCESSES} processes)")
    finally:
        tear_down(shell)
    # The kernel frees the removed cgroups and namespace in the background for a while.
    time.sleep(15)
    for h in HIERARCHIES:
        os.mkdir(f"{h}/{NAME}")
    report("this host, again")
    for h in HIERARCHIES:
        os.rmdir(f"{h}/{NAME}")


if __name__ == "__main__":
    main()
