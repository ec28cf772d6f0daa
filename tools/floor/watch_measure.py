#!/usr/bin/env python3
"""`relay-metrics watch --interval-ms 1` for 10 s after a 2 s warm-up: CPU % of one core over the
10 s (utime+stime from /proc/<pid>/stat), tick lateness median/p99/max and missed ticks over
those 10 s (from the NDJSON), VmHWM/VmRSS at the end.
Usage: watch_measure.py RELAY_METRICS_BIN [watch target args...]"""
import json, os, subprocess, sys, time

bin_, args = sys.argv[1], sys.argv[2:]
tck = os.sysconf("SC_CLK_TCK")
proc = subprocess.Popen([bin_, "watch", "--interval-ms", "1", *args],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

def cpu_s():
    fields = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tck

lines = []
def drain(until):
    while time.monotonic() < until:
        lines.append(proc.stdout.readline())

drain(time.monotonic() + 2.0)
c0, t0, n0 = cpu_s(), time.monotonic(), len(lines)
drain(t0 + 10.0)
c1, t1 = cpu_s(), time.monotonic()
status = dict(l.split(":", 1) for l in open(f"/proc/{proc.pid}/status"))
proc.kill(); proc.wait()
window = [json.loads(l)["extensions"]["sampler"] for l in lines[n0:]]
late = sorted(s["tick_lateness_usec"] for s in window)
q = lambda p: late[round((len(late) - 1) * p)]
print(json.dumps({
    "cpu_percent_of_one_core": round(100 * (c1 - c0) / (t1 - t0), 1),
    "ticks": len(window),
    "missed_ticks": window[-1]["missed_ticks_total"] - window[0]["missed_ticks_total"],
    "lateness_us_median": q(0.5), "lateness_us_p99": q(0.99), "lateness_us_max": late[-1],
    "vm_hwm": status["VmHWM"].strip(), "vm_rss": status["VmRSS"].strip(),
}))
