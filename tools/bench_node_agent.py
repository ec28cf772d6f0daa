#!/usr/bin/env python3
"""The node agent against netdata, side by side in one run, on cgroups this script makes.

    tools/bench_node_agent.py --binary target/release/relay-metrics --sizes 500 2000 \
        --window 60 --rounds 3 [--json out.json]

For each size N: makes N cgroups, each holding 2 sleeping processes, plus one busy cgroup (a
shell loop held to --busy-quota of a core by a CFS quota), in every hierarchy the host has (on
a hybrid host the v1 cpu, cpuacct, memory, pids and blkio hierarchies and the unified tree; on a
pure v2 host the one tree, with those controllers enabled). Then starts Debian's netdata (only
its cgroups collector, every 1 s, on this script's cgroups; web server on 127.0.0.1) and
`relay-metrics serve` (every 1 s, `--cgroups` over the same cgroups) at the same time, waits
until each reports every cgroup (netdata: a chart per cgroup in its API; the agent: a `cgroup`
label per cgroup on /metrics), then for --rounds windows of --window seconds scrapes each
every second, or every --scrape-every seconds (keep-alive, gzip, Prometheus' Accept header: netdata's
/api/v1/allmetrics?format=prometheus, the agent's /metrics) and measures:

- CPU in % of one core: utime+stime+cutime+cstime (/proc/<pid>/stat) summed over the whole
  process tree of each (netdata's spawn server and any plugin or helper it runs included;
  what ended in the window is in its parent's cutime/cstime);
- resident memory: the tree's VmRSS sum sampled every second (peak and end of the window),
  and the main process's VmHWM;
- scrape latency (request sent to the last body byte) p50, p99 and max, failures, body size.

Before the windows it checks that netdata collects those cgroups at 1 s (chart update_every
and the busy cgroup's CPU chart: one point a second, about its quota); afterwards that the busy
cgroup's points cover the windows, and that the agent's CPU counter of the busy cgroup grew by
about its quota. Each size's working directory (netdata's config, logs and database, the agent's
stderr) is removed afterwards unless the run failed or --keep-workdir is given. Prints a Markdown table per size and the load averages;
--json writes everything. Every cgroup and process it made is removed at the end, also on
Ctrl-C, SIGTERM or an error. Root only; 127.0.0.1 only.
"""

import argparse
import gzip
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

CGROUP_ROOT = "/sys/fs/cgroup"
V1_CONTROLLERS = ["cpu", "cpuacct", "memory", "pids", "blkio"]
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
# Prometheus 2.x's scrape Accept header.
ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
          "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
DEFAULT_AGENT_ARGS = ("serve --listen 127.0.0.1:{port} --interval-ms 1000 --scope global "
                      "--cgroups {pattern} --max-targets {max_targets}")


class Stop(Exception):
    """SIGINT, SIGTERM or SIGHUP arrived: clean up and leave."""


def on_signal(signum, _frame):
    raise Stop(signal.Signals(signum).name)


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def quantile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else None


# ---- cgroups -------------------------------------------------------------------------------

class Hierarchies:
    """Where this host's cgroup hierarchies are, and how to make a cgroup in all of them."""

    def __init__(self):
        self.pure_v2 = os.path.exists(f"{CGROUP_ROOT}/cgroup.controllers")
        if self.pure_v2:
            self.roots = [CGROUP_ROOT]
        else:
            mounted = {}
            with open("/proc/self/mountinfo") as f:
                for line in f:
                    fields = line.split()
                    sep = fields.index("-")
                    fstype, options = fields[sep + 1], fields[sep + 3].split(",")
                    if fstype == "cgroup":
                        for controller in V1_CONTROLLERS:
                            if controller in options:
                                mounted.setdefault(controller, fields[4])
                    elif fstype == "cgroup2":
                        mounted.setdefault("unified", fields[4])
            missing = [c for c in V1_CONTROLLERS if c not in mounted]
            if missing:
                sys.exit(f"no v1 hierarchy for {', '.join(missing)} and no pure cgroup v2 mount")
            # Co-mounted controllers (cpu,cpuacct) share one directory: make each once.
            self.roots = list(dict.fromkeys(mounted[c] for c in V1_CONTROLLERS))
            if "unified" in mounted:
                self.roots.append(mounted["unified"])
            self.cpu_root = mounted["cpu"]

    def layout(self):
        if self.pure_v2:
            return "pure cgroup v2"
        return "hybrid: v1 " + ", ".join(self.roots[:-1]) + " + unified " + self.roots[-1] \
            if self.roots[-1].endswith("unified") else "v1 " + ", ".join(self.roots)

    def make(self, path):
        for root in self.roots:
            os.mkdir(f"{root}{path}")

    def enable_controllers(self, path):
        """Pure v2: let the children of `path` (and `path` itself) have the controllers."""
        if not self.pure_v2:
            return
        for cgroup in ["", path]:
            with open(f"{CGROUP_ROOT}{cgroup}/cgroup.controllers") as f:
                available = f.read().split()
            wanted = [c for c in ["cpu", "memory", "pids", "io"] if c in available]
            with open(f"{CGROUP_ROOT}{cgroup}/cgroup.subtree_control", "w") as f:
                f.write(" ".join("+" + c for c in wanted))

    def enter(self, path, pid):
        for root in self.roots:
            with open(f"{root}{path}/cgroup.procs", "w") as f:
                f.write(str(pid))

    def cpu_quota(self, path, fraction):
        period = 100_000
        if self.pure_v2:
            with open(f"{CGROUP_ROOT}{path}/cpu.max", "w") as f:
                f.write(f"{int(fraction * period)} {period}")
        else:
            with open(f"{self.cpu_root}{path}/cpu.cfs_period_us", "w") as f:
                f.write(str(period))
            with open(f"{self.cpu_root}{path}/cpu.cfs_quota_us", "w") as f:
                f.write(str(int(fraction * period)))

    def remove(self, path):
        """Removes `path` in every hierarchy (deepest first); returns what could not be."""
        left = []
        for root in self.roots:
            full = f"{root}{path}"
            if not os.path.isdir(full):
                continue
            for current, dirs, _ in sorted(os.walk(full), key=lambda w: -w[0].count("/")):
                del dirs
                for attempt in range(50):
                    try:
                        os.rmdir(current)
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
                else:
                    left.append(current)
        return left


class Load:
    """The cgroups and processes of one size: N sleeping pairs and a busy cgroup."""

    def __init__(self, hierarchies, slice_path, count, busy_quota):
        self.h = hierarchies
        self.slice = slice_path
        self.count = count
        self.busy_quota = busy_quota
        self.pids = []
        self.names = []

    def start(self):
        self.h.make(self.slice)
        self.h.enable_controllers(self.slice)
        started = time.monotonic()
        for i in range(self.count):
            name = f"c-{i:04d}.scope"
            self.h.make(f"{self.slice}/{name}")
            self.names.append(name)
            # The shell joins the cgroup before anything runs, so the two sleeps start in it
            # (their CPU and memory charged there, as a container's): one in the background,
            # the other replacing the shell.
            self.spawn(name, "sleep infinity & exec sleep infinity")
        busy = "busy.scope"
        self.h.make(f"{self.slice}/{busy}")
        self.h.cpu_quota(f"{self.slice}/{busy}", self.busy_quota)
        self.spawn(busy, "while :; do :; done")
        self.names.append(busy)
        log(f"{self.count} cgroups with 2 sleeping processes each and busy.scope "
            f"({self.busy_quota:.0%} of a core) under {self.slice} in {time.monotonic() - started:.1f} s")

    def spawn(self, name, script):
        procs = [f"{root}{self.slice}/{name}/cgroup.procs" for root in self.h.roots]
        pid = os.posix_spawn("/bin/sh", ["sh", "-c", 'for f; do echo $$ > "$f" || exit 1; done; '
                                         + script, "sh"] + procs, os.environ)
        self.pids.append(pid)

    def processes(self):
        """Every process in this load's cgroups (from the first hierarchy)."""
        found = []
        for name in self.names:
            try:
                with open(f"{self.h.roots[0]}{self.slice}/{name}/cgroup.procs") as f:
                    found.extend(int(p) for p in f.read().split())
            except FileNotFoundError:
                pass
        return found

    def stop(self):
        for pid in set(self.pids) | set(self.processes()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.pids = []
        left = self.h.remove(self.slice)
        if left:
            log(f"could not remove {len(left)} cgroups, e.g. {left[0]}")


# ---- processes: CPU and memory of a tree ---------------------------------------------------

def tree(pid):
    """pid and its descendants (through every thread's children file)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for tid in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{tid}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError):
            continue
    return found


def cpu_ticks(pid):
    """utime + stime + cutime + cstime of one process, in clock ticks (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0
    # fields[0] is the state (field 3); utime is field 14.
    return sum(int(v) for v in fields[11:15])


def status_kib(pid, key):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


class Measured:
    """One program under test: its process, its endpoint, and what was measured of it."""

    def __init__(self, name, process, port, path, stderr_path):
        self.name = name
        self.process = process
        self.port = port
        self.path = path
        self.stderr_path = stderr_path
        self.reset()

    def reset(self):
        self.latencies = []
        self.failures = []
        self.body_bytes = []
        self.rss_kib = []
        self.cpu_start = None
        self.cpu_end = None
        self.t_start = None
        self.t_end = None
        self.tree_sizes = []
        self.gone = {}

    def cpu_now(self):
        """Cumulative CPU ticks of the tree; a process seen before that is gone keeps adding
        its last value until its parent's cutime holds it (only if the parent reaps it)."""
        return sum(cpu_ticks(pid) for pid in tree(self.process.pid))

    def sample_memory(self):
        pids = tree(self.process.pid)
        self.tree_sizes.append(len(pids))
        self.rss_kib.append(sum(status_kib(pid, "VmRSS:") for pid in pids))

    def hwm_kib(self):
        return status_kib(self.process.pid, "VmHWM:")

    def alive(self):
        return self.process.poll() is None


# ---- HTTP ----------------------------------------------------------------------------------

class Scraper:
    """A keep-alive client scraping one endpoint as Prometheus does."""

    def __init__(self, port, path, timeout=10):
        self.port = port
        self.path = path
        self.timeout = timeout
        self.conn = None

    def get(self, decompress=False):
        """Returns (seconds, status, body bytes as received, body decompressed or None)."""
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            started = time.perf_counter()
            try:
                self.conn.request("GET", self.path, headers={
                    "Accept": ACCEPT, "Accept-Encoding": "gzip", "User-Agent": "Prometheus/2.42.0"})
                response = self.conn.getresponse()
                body = response.read()
                elapsed = time.perf_counter() - started
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                # A keep-alive connection the server closed meanwhile: one retry, fresh.
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
                continue
            except Exception:
                self.conn.close()
                self.conn = None
                raise
            if response.getheader("Connection", "").lower() == "close":
                self.conn.close()
                self.conn = None
            text = None
            if decompress:
                raw = gzip.decompress(body) if response.getheader("Content-Encoding") == "gzip" else body
                text = raw.decode("utf-8", "replace")
            return elapsed, response.status, len(body), text
        raise RuntimeError("unreachable")

    def get_json(self, path):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {path}: HTTP {response.status}: {body[:200]!r}")
            return json.loads(body)
        finally:
            conn.close()


# ---- the two programs ----------------------------------------------------------------------

NETDATA_CONF = """\
[global]
	run as user = root
	hostname = relay-bench
	process scheduling policy = keep
[db]
	update every = 1
[directories]
	cache = {dir}/cache
	lib = {dir}/lib
	log = {dir}/log
	run = {dir}/run
	config = {dir}/etc
	home = {dir}
[logs]
	debug log = none
	error log = {dir}/log/error.log
	access log = none
[web]
	bind to = 127.0.0.1:{port}
[ml]
	enabled = no
[health]
	enabled = no
[registry]
	enabled = no
[plugins]
	enable running new plugins = no
	cgroups = yes
	proc = no
	diskspace = no
	tc = no
	idlejitter = no
	timex = no
	checks = no
	apps = no
	charts.d = no
	python.d = no
	go.d = no
	node.d = no
	fping = no
	perf = no
	slabinfo = no
	ebpf = no
	nfacct = no
	ioping = no
	cups = no
	statsd = no
	netdata monitoring = no
[statsd]
	enabled = no
[plugin:cgroups]
	update every = 1
	use unified cgroups = {unified}
	max cgroups to allow = {max_cgroups}
	enable by default cgroups matching = {slice}/* !*
	search for cgroups in subpaths matching = / {slice} !*
	enable cpuacct stat (total CPU) = yes
	run script to rename cgroups matching = !*
	script to get cgroup network interfaces = /bin/true
"""


def start_netdata(args, workdir, slice_path, count, hierarchies):
    port = free_port()
    for sub in ["cache", "lib", "log", "run", "etc"]:
        os.makedirs(f"{workdir}/{sub}", exist_ok=True)
    conf = NETDATA_CONF.format(
        dir=workdir, port=port, max_cgroups=count + 100, slice=slice_path,
        # On a hybrid host netdata's "auto" picks the unified tree, which has no controllers
        # here: no memory, no blkio, no throttling. Read the v1 controllers, as the agent does.
        unified="yes" if hierarchies.pure_v2 else "no")
    with open(f"{workdir}/netdata.conf", "w") as f:
        f.write(conf)
    stderr_path = f"{workdir}/stderr"
    process = subprocess.Popen(
        [args.netdata, "-D", "-c", f"{workdir}/netdata.conf", "-P", f"{workdir}/run/netdata.pid"],
        stdout=subprocess.DEVNULL, stderr=open(stderr_path, "w"), start_new_session=True)
    return Measured("netdata", process, port, "/api/v1/allmetrics?format=prometheus&server=bench",
                    stderr_path)


def start_agent(args, workdir, slice_path, count):
    port = free_port()
    template = args.agent_args or DEFAULT_AGENT_ARGS
    argv = [args.binary] + [a.format(port=port, pattern=f"{slice_path}/*", slice=slice_path,
                                     max_targets=count + 100)
                            for a in shlex.split(template)]
    stderr_path = f"{workdir}/agent.stderr"
    log("agent: " + shlex.join(argv))
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(stderr_path, "w"),
                               start_new_session=True)
    measured = Measured("relay-metrics", process, port, "/metrics", stderr_path)
    measured.argv = argv
    return measured


def stop_process(measured):
    if measured is None or measured.process.poll() is not None:
        return
    try:
        os.killpg(measured.process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        measured.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(measured.process.pid, signal.SIGKILL)
        measured.process.wait()
    # Whatever its group left (netdata's spawn server ends on EOF; be sure).
    try:
        os.killpg(measured.process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except FileNotFoundError:
        return ""


# ---- checks: does each collect every cgroup? -----------------------------------------------

def netdata_chart_id(cgroup):
    """netdata's chart id of a cgroup path (no rename script): the path without its leading
    '/', '/' as '_', '.' as '-'."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", cgroup.lstrip("/")).replace(".", "-")


def netdata_cgroup_charts(scraper, slice_path, names):
    """{cgroup name: its CPU chart id} for the cgroups netdata charts, and the update_every
    values of their charts."""
    charts = scraper.get_json("/api/v1/charts")["charts"]
    by_cgroup = {}
    for chart_id, chart in charts.items():
        if chart_id.startswith("cgroup_"):
            by_cgroup.setdefault(chart_id[len("cgroup_"):].rsplit(".", 1)[0], []).append(
                (chart_id, chart["update_every"]))
    found, every = {}, set()
    for name in names:
        charted = by_cgroup.get(netdata_chart_id(f"{slice_path}/{name}"), [])
        cpu = [c for c, _ in charted if c.endswith(".cpu")]
        if cpu:
            found[name] = cpu[0]
            every.update(e for _, e in charted)
    return found, every


AGENT_CGROUP = re.compile(r'cgroup="([^"]*)"')


def agent_cgroups(scraper, slice_path):
    _, status, _, text = scraper.get(decompress=True)
    if status != 200:
        return set(), 0, text
    seen = {m for m in AGENT_CGROUP.findall(text) if m.startswith(slice_path + "/")}
    series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    return seen, series, text


def wait_until_complete(args, load, netdata, agent, slice_path):
    """Waits until netdata charts every cgroup at 1 s and the agent labels every cgroup."""
    names = load.names
    deadline = time.monotonic() + args.discovery_timeout
    nd_scraper = Scraper(netdata.port, netdata.path) if netdata else None
    ag_scraper = Scraper(agent.port, agent.path) if agent else None
    nd_done = netdata is None
    ag_done = agent is None
    info = {}
    while time.monotonic() < deadline:
        for m in [netdata, agent]:
            if m and not m.alive():
                raise RuntimeError(f"{m.name} exited with {m.process.returncode}:\n{tail(m.stderr_path)}")
        if not nd_done:
            try:
                found, every = netdata_cgroup_charts(nd_scraper, slice_path, names)
                if len(found) == len(names):
                    if every != {1}:
                        raise RuntimeError(f"netdata charts cgroups every {sorted(every)} s, not 1 s")
                    nd_done = True
                    info["netdata_charts"] = len(found)
                    info["netdata_busy_chart"] = found["busy.scope"]
                    log(f"netdata: a CPU chart for each of the {len(found)} cgroups, every 1 s")
            except (OSError, http.client.HTTPException, ValueError, KeyError):
                pass
        if not ag_done:
            try:
                seen, series, _ = agent_cgroups(ag_scraper, slice_path)
                if len(seen) == len(names):
                    ag_done = True
                    info["agent_cgroups"] = len(seen)
                    log(f"agent: a cgroup label for each of the {len(seen)} cgroups ({series} series)")
            except (OSError, http.client.HTTPException):
                pass
        if nd_done and ag_done:
            return info
        time.sleep(1)
    missing = []
    if not nd_done:
        found, _ = netdata_cgroup_charts(nd_scraper, slice_path, names)
        missing.append(f"netdata charts {len(found)} of {len(names)} cgroups")
    if not ag_done:
        seen, _, _ = agent_cgroups(ag_scraper, slice_path)
        missing.append(f"the agent labels {len(seen)} of {len(names)} cgroups")
    raise RuntimeError(f"after {args.discovery_timeout} s: " + "; ".join(missing))


def check_netdata_points(netdata, chart, seconds, quota):
    """The busy cgroup's CPU chart: one point a second over the last `seconds`, about its
    quota. Returns (points, median total CPU %)."""
    scraper = Scraper(netdata.port, netdata.path)
    data = scraper.get_json(f"/api/v1/data?chart={chart}&after=-{seconds}&points={seconds}"
                            "&group=average&format=json&options=seconds,nonzero,absolute")
    labels, rows = data["labels"], data["data"]
    times = sorted(row[0] for row in rows)
    steps = {b - a for a, b in zip(times, times[1:])}
    totals = [sum(v for v in row[1:] if v is not None) for row in rows]
    median = statistics.median(totals) if totals else 0
    if steps - {1}:
        raise RuntimeError(f"netdata's {chart} has points {sorted(steps)} s apart, not 1 s")
    if len(rows) < seconds - 3:
        raise RuntimeError(f"netdata's {chart}: {len(rows)} points in {seconds} s")
    if not (quota * 100 * 0.5 <= median <= quota * 100 * 1.5):
        raise RuntimeError(f"netdata's {chart} ({labels}): median {median:.1f} % of a core, "
                           f"its quota is {quota:.0%}")
    return len(rows), median


def agent_busy_usage(agent, slice_path):
    """(time, the busy cgroup's CPU usage counter in seconds) from the agent's /metrics."""
    _, _, _, text = Scraper(agent.port, agent.path).get(decompress=True)
    busy = f'cgroup="{slice_path}/busy.scope"'
    for line in text.splitlines():
        if line.startswith("relay_metrics_cgroup_cpu_usage_seconds_total{") and busy in line:
            return time.monotonic(), float(line.rsplit(" ", 1)[1])
    raise RuntimeError("the agent exports no relay_metrics_cgroup_cpu_usage_seconds_total "
                       "for the busy cgroup")


# ---- one window ----------------------------------------------------------------------------

def measure_window(measured_list, seconds, scrape_every):
    """Scrapes each every `scrape_every` seconds (one thread each, fixed rate) and samples the
    trees' memory every second, for `seconds`; CPU from the start and end of the window."""
    stop = threading.Event()
    for m in measured_list:
        m.reset()

    def scrape_loop(m, offset):
        scraper = Scraper(m.port, m.path)
        next_at = time.monotonic() + offset
        while not stop.is_set():
            delay = next_at - time.monotonic()
            if delay > 0 and stop.wait(delay):
                break
            next_at += scrape_every
            try:
                elapsed, status, size, _ = scraper.get()
                if status == 200:
                    m.latencies.append(elapsed)
                    m.body_bytes.append(size)
                else:
                    m.failures.append(f"HTTP {status}")
            except Exception as error:  # noqa: BLE001 - every failure is counted and shown
                m.failures.append(repr(error))

    for m in measured_list:
        m.t_start = time.monotonic()
        m.cpu_start = m.cpu_now()
    threads = [threading.Thread(target=scrape_loop, args=(m, 0.5 * i), daemon=True)
               for i, m in enumerate(measured_list)]
    for t in threads:
        t.start()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for m in measured_list:
            m.sample_memory()
            if not m.alive():
                raise RuntimeError(f"{m.name} exited during the window:\n{tail(m.stderr_path)}")
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
    for m in measured_list:
        m.cpu_end = m.cpu_now()
        m.t_end = time.monotonic()
        m.sample_memory()
    stop.set()
    for t in threads:
        t.join(timeout=15)
    results = {}
    for m in measured_list:
        wall = m.t_end - m.t_start
        results[m.name] = {
            "cpu_percent": 100 * (m.cpu_end - m.cpu_start) / CLK_TCK / wall,
            "rss_peak_mib": max(m.rss_kib) / 1024,
            "rss_end_mib": m.rss_kib[-1] / 1024,
            "hwm_main_mib": m.hwm_kib() / 1024,
            "processes": max(m.tree_sizes),
            "scrapes": len(m.latencies),
            "failures": len(m.failures),
            "failure_examples": m.failures[:3],
            "p50_ms": 1000 * quantile(m.latencies, 0.5) if m.latencies else None,
            "p99_ms": 1000 * quantile(m.latencies, 0.99) if m.latencies else None,
            "max_ms": 1000 * max(m.latencies) if m.latencies else None,
            "body_kib": statistics.median(m.body_bytes) / 1024 if m.body_bytes else None,
        }
    return results


# ---- main ----------------------------------------------------------------------------------

def run_size(args, hierarchies, count, report):
    slice_path = f"/relay-bench-{os.getpid()}-{count}.slice"
    load = Load(hierarchies, slice_path, count, args.busy_quota)
    netdata = agent = None
    workdir = tempfile.mkdtemp(prefix=f"bench-node-agent-{count}-")
    entry = {"cgroups": count, "slice": slice_path, "layout": hierarchies.layout(),
             "scrape_every_s": args.scrape_every,
             "load_before": os.getloadavg()}
    completed = False
    try:
        load.start()
        if not args.no_netdata:
            netdata = start_netdata(args, workdir, slice_path, count, hierarchies)
        if not args.no_agent:
            agent = start_agent(args, workdir, slice_path, count)
            entry["agent_command"] = shlex.join(agent.argv)
        started = time.monotonic()
        entry.update(wait_until_complete(args, load, netdata, agent, slice_path))
        entry["discovery_s"] = time.monotonic() - started
        # Let both settle (netdata's first minute allocates its round-robin databases).
        time.sleep(args.settle)
        measured = [m for m in [agent, netdata] if m]
        entry["rounds"] = []
        busy_before = agent_busy_usage(agent, slice_path) if agent else None
        for round_index in range(args.rounds):
            before = os.getloadavg()
            results = measure_window(measured, args.window, args.scrape_every)
            results["load_before"] = before
            results["load_after"] = os.getloadavg()
            entry["rounds"].append(results)
            log(f"{count} cgroups, round {round_index + 1}: " + "; ".join(
                f"{name} {r['cpu_percent']:.2f} % CPU, {r['rss_peak_mib']:.1f} MiB, "
                f"p99 {r['p99_ms']:.1f} ms" for name, r in results.items()
                if isinstance(r, dict) and r.get("p99_ms") is not None)
                + f" (load {before[0]:.1f})")
        total = args.rounds * args.window
        if netdata:
            points, median = check_netdata_points(netdata, entry["netdata_busy_chart"],
                                                  min(total, 1000), args.busy_quota)
            entry["netdata_busy_points"] = points
            entry["netdata_busy_cpu_percent_median"] = median
            log(f"netdata: {points} points 1 s apart for the busy cgroup over the windows, "
                f"median {median:.1f} % of a core")
        if agent:
            at, usage = agent_busy_usage(agent, slice_path)
            cores = (usage - busy_before[1]) / (at - busy_before[0])
            entry["agent_busy_cores"] = cores
            log(f"agent: the busy cgroup used {cores:.3f} cores over the windows")
            if not args.busy_quota * 0.5 <= cores <= args.busy_quota * 1.5:
                raise RuntimeError(f"the agent saw the busy cgroup at {cores:.3f} cores, "
                                   f"its quota is {args.busy_quota}")
            entry["agent_errors"] = [line for line in tail(agent.stderr_path, 200).splitlines()
                                     if "ERROR" in line or "WARN" in line][:5]
        completed = True
    finally:
        quiet = {signum: signal.signal(signum, signal.SIG_IGN)
                 for signum in [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]}
        stop_process(agent)
        stop_process(netdata)
        load.stop()
        entry["load_after"] = os.getloadavg()
        # netdata's logs and database, and the agent's stderr: kept when the run failed.
        if args.keep_workdir or not completed:
            log(f"logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        for signum, handler in quiet.items():
            signal.signal(signum, handler)
    report.append(entry)
    return entry


def summarise(entry):
    names = [n for n in ["relay-metrics", "netdata"] if n in entry["rounds"][0]]
    print(f"\n### {entry['cgroups']} cgroups + 1 busy ({entry['layout']}); "
          f"load {entry['load_before'][0]:.1f} before, {entry['load_after'][0]:.1f} after; "
          f"scraped every {entry['scrape_every_s']:g} s")
    if "agent_command" in entry:
        print(f"agent: `{entry['agent_command']}`")
    print("\n| program | round | CPU % of a core | RSS peak / end (MiB) | main VmHWM (MiB) | "
          "/metrics p50 / p99 / max (ms) | scrapes (failed) | body (KiB, gzip) | load 1 min |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        for i, r in enumerate(entry["rounds"]):
            x = r[name]
            lat = (f"{x['p50_ms']:.1f} / {x['p99_ms']:.1f} / {x['max_ms']:.1f}"
                   if x["p50_ms"] is not None else "none")
            body = f"{x['body_kib']:.0f}" if x["body_kib"] is not None else "-"
            print(f"| {name} | {i + 1} | {x['cpu_percent']:.2f} | {x['rss_peak_mib']:.1f} / "
                  f"{x['rss_end_mib']:.1f} | {x['hwm_main_mib']:.1f} | {lat} | {x['scrapes']} "
                  f"({x['failures']}) | {body} | {r['load_before'][0]:.1f} |")
    if len(names) == 2:
        ratios = [r["relay-metrics"]["cpu_percent"] / r["netdata"]["cpu_percent"]
                  for r in entry["rounds"] if r["netdata"]["cpu_percent"] > 0]
        if ratios:
            print(f"\nagent CPU / netdata CPU per round: {', '.join(f'{x:.3f}' for x in ratios)}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--binary", default="target/release/relay-metrics")
    parser.add_argument("--agent-args", help="the agent's arguments, a shell-quoted template "
                        "with {port}, {pattern}, {slice} and {max_targets}; default: "
                        + DEFAULT_AGENT_ARGS)
    parser.add_argument("--netdata", default="/usr/sbin/netdata")
    parser.add_argument("--sizes", type=int, nargs="+", default=[500])
    parser.add_argument("--window", type=int, default=60, help="seconds per round (≤ 600)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settle", type=int, default=10)
    parser.add_argument("--discovery-timeout", type=int, default=240)
    parser.add_argument("--busy-quota", type=float, default=0.25,
                        help="the busy cgroup's CPU quota, in cores (default 0.25)")
    parser.add_argument("--scrape-every", type=float, default=1.0,
                        help="seconds between scrapes of each program (Prometheus' default "
                             "scrape interval is 60 s, deploy/prometheus's 15 s)")
    parser.add_argument("--no-netdata", action="store_true")
    parser.add_argument("--no-agent", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--keep-workdir", action="store_true",
                        help="keep netdata's logs and database and the agent's stderr")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: it makes cgroups and moves processes into them")
    if not 1 <= args.window <= 600 or not 1 <= args.rounds <= 10:
        sys.exit("--window is 1 to 600 s, --rounds 1 to 10")
    if not 0.1 <= args.scrape_every <= args.window:
        sys.exit("--scrape-every is 0.1 s to --window")
    if not args.no_netdata and not os.access(args.netdata, os.X_OK):
        sys.exit(f"no netdata at {args.netdata} (apt-get install netdata)")
    if not args.no_agent and not os.access(args.binary, os.X_OK):
        sys.exit(f"no agent binary at {args.binary} "
                 "(cargo build --release -p relay-metrics --features cli)")
    for signum in [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]:
        signal.signal(signum, on_signal)
    hierarchies = Hierarchies()
    report = []
    status = 0
    try:
        for count in args.sizes:
            summarise(run_size(args, hierarchies, count, report))
    except Stop as stop:
        log(f"{stop}: cleaned up, stopping")
        status = 130
    except RuntimeError as error:
        log(f"failed: {error}")
        status = 1
    if len(report) >= 2:
        first, last = report[0], report[-1]
        span = last["cgroups"] - first["cgroups"]
        if span > 0:
            print(f"\n### Growth per cgroup, {first['cgroups']} to {last['cgroups']} "
                  "(medians of the rounds)")
            print("\n| program | CPU (% of a core per 1,000 cgroups) | RSS peak (KiB per cgroup) | "
                  "/metrics p99 (ms per 1,000 cgroups) |")
            print("| --- | ---: | ---: | ---: |")
            for name in ["relay-metrics", "netdata"]:
                if name not in first["rounds"][0]:
                    continue

                def med(entry, key):
                    return statistics.median(r[name][key] for r in entry["rounds"])
                print(f"| {name} | {1000 * (med(last, 'cpu_percent') - med(first, 'cpu_percent')) / span:.2f} | "
                      f"{1024 * (med(last, 'rss_peak_mib') - med(first, 'rss_peak_mib')) / span:.1f} | "
                      f"{1000 * (med(last, 'p99_ms') - med(first, 'p99_ms')) / span:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    sys.exit(status)


if __name__ == "__main__":
    main()
