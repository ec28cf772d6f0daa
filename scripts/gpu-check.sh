#!/usr/bin/env bash
# Real-GPU check: relay-metrics' GPU values against nvidia-smi and pynvml, sampled at the same
# moments around a bf16 matmul load (PyTorch), printed as one table.
#
#   scripts/gpu-check.sh prepare        # here: release binary (+ wheel) into target/gpu-check/
#   scripts/gpu-check.sh run [SECONDS]  # on the GPU machine (nvidia-smi, PyTorch, pynvml)
#
# `run` needs no Rust: it uses target/gpu-check/relay-metrics (and a wheel there, if any). It
# starts `relay-metrics serve --scope global`, then `relay-metrics run` around the load, and
# every second reads the agent's /snapshot, `nvidia-smi --query-gpu=...` and pynvml, back to
# back. Checks: power within 5 %, temperature within 2 °C, clocks exact, used memory within
# 1 %, the energy increase within 10 % of mean power x time, per-process memory within 1 %,
# throttle reasons, ECC and PCIe replay counters equal to pynvml's, each measured cgroup's GPU
# memory (`serve --cgroup-depth 8`) within 1 % of nvidia-smi's processes below it, the `run`
# stream carrying extensions.gpu, and the wheel's collect() seeing the devices. A value neither
# side has (unsupported) passes; one that only one side has fails when more than a tenth of the
# moments lack it. Exit 1 when a check fails.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR="$ROOT/target/gpu-check"

prepare() {
    cd "$ROOT"
    cargo build --release --locked -p relay-metrics
    mkdir -p "$DIR"
    cp target/release/relay-metrics "$DIR/relay-metrics"
    if [ -x target/python-venv/bin/maturin ]; then
        target/python-venv/bin/maturin build --release -m relay-metrics-python/Cargo.toml \
            -o "$DIR" --interpreter python3
    else
        echo "gpu-check: no target/python-venv/bin/maturin (scripts/install-deps.sh): no wheel" >&2
    fi
    ls -l "$DIR"
}

run() {
    local seconds="${1:-60}"
    local bin="$DIR/relay-metrics"
    [ -x "$bin" ] || { echo "gpu-check: $bin missing: run 'scripts/gpu-check.sh prepare' first" >&2; exit 2; }
    command -v nvidia-smi >/dev/null || { echo "gpu-check: nvidia-smi not found" >&2; exit 2; }
    python3 -c 'import torch, pynvml' || { echo "gpu-check: python3 needs torch and pynvml" >&2; exit 2; }
    local work
    work="$(mktemp -d)"
    local port=19464
    "$bin" serve --scope global --listen "127.0.0.1:$port" --interval-ms 200 --cgroup-depth 8 \
        >"$work/serve.log" 2>&1 &
    # Global, not local: the EXIT trap runs after run() has returned.
    serve_pid=$!
    trap 'kill "${serve_pid:-}" 2>/dev/null || true' EXIT
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        sleep 0.1
    done
    cat >"$work/load.py" <<'EOF'
import sys, time, torch
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + seconds
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
print("load done", flush=True)
EOF
    "$bin" run --interval-ms 500 --output "$work/run.ndjson" --summary -- \
        python3 "$work/load.py" "$seconds" >"$work/run.log" 2>&1 &
    local run_pid=$!
    local status=0
    python3 - "$port" "$run_pid" "$work" "$DIR" <<'EOF' || status=$?
import glob, json, os, subprocess, sys, time, urllib.request
import pynvml

port, run_pid, work, dist = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
pynvml.nvmlInit()
count = pynvml.nvmlDeviceGetCount()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
QUERY = ("index,uuid,power.draw,enforced.power.limit,temperature.gpu,clocks.sm,clocks.mem,"
         "clocks.gr,clocks.max.sm,clocks.max.mem,memory.used")

def alive(pid):
    # The shell's child, not ours: a zombie until the shell waits, so read its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def smi():
    out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    rows = {}
    for line in out.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        num = lambda s: float(s) if s not in ("[N/A]", "N/A", "") else None
        rows[f[1]] = dict(power=num(f[2]), limit=num(f[3]), temp=num(f[4]), sm=num(f[5]),
                          mem=num(f[6]), gr=num(f[7]), sm_max=num(f[8]), mem_max=num(f[9]),
                          used_mib=num(f[10]))
    return rows

def smi_apps():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    apps = {}
    for line in out.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) == 3 and f[2].isdigit():
            apps[(f[0], int(f[1]))] = float(f[2]) * 1024 * 1024
    return apps

def nvml(h):
    v = {}
    def get(name, call):
        try:
            v[name] = call()
        except pynvml.NVMLError:
            v[name] = None
    get("power", lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000)
    get("energy", lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h) / 1000)
    get("temp", lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU))
    get("sm", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    get("mem", lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM))
    get("throttle", lambda: pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h))
    get("ecc", lambda: pynvml.nvmlDeviceGetTotalEccErrors(
        h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC))
    get("replays", lambda: pynvml.nvmlDeviceGetPcieReplayCounter(h))
    get("used", lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used)
    return v

def snapshot():
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/snapshot", timeout=5) as r:
        return json.load(r)

UNITS = {"bytes": 1, "kibibytes": 1024, "mebibytes": 1024**2, "gibibytes": 1024**3,
         "kilobytes": 1000, "megabytes": 1000**2, "gigabytes": 1000**3}

def relay_used(snap, uuid):
    for d in (snap.get("gpu") or {}).get("device_metrics") or []:
        if d["device_identifier"] == uuid and d.get("memory_used"):
            return d["memory_used"]["value"] * UNITS.get(d["memory_used"]["unit"], 1)
    return None

def relay_apps(snap):
    apps = {}
    for p in (snap.get("gpu") or {}).get("process_metrics") or []:
        if p.get("memory_used"):
            apps[(p["device_identifier"], p["process_id"])] = (
                p["memory_used"]["value"] * UNITS.get(p["memory_used"]["unit"], 1))
    return apps

def cgroup_of(pid, hierarchy):
    """The path of `pid`'s cgroup in the hierarchy the agent walks ("v2 /sys/fs/cgroup" or
    "v1 /sys/fs/cgroup/memory")."""
    version, _, mount = hierarchy.partition(" ")
    wanted = set(os.path.basename(mount).split(",")) if version == "v1" else {""}
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if wanted <= set(controllers.split(",")):
                    return path
    except OSError:
        pass
    return None

def cgroup_pairs(snap, apps):
    """(agent's GPU memory of a measured cgroup on a device, sum of nvidia-smi's per-process
    memory of the processes in its subtree), per measured cgroup and device; None when the agent
    measures no cgroup (its reasons say why)."""
    targets = (snap.get("extensions") or {}).get("targets") or {}
    hierarchy = targets.get("hierarchy") or ""
    if not hierarchy:
        return None
    where = {key: cgroup_of(key[1], hierarchy) for key in apps}
    pairs = []
    for target in targets.get("cgroups") or []:
        path = target["cgroup"]
        below = lambda p: p is not None and (path == "/" or p == path or p.startswith(path + "/"))
        for uuid in {key[0] for key in apps}:
            expected = sum(used for key, used in apps.items() if key[0] == uuid and below(where[key]))
            ours = next((g.get("memory_used_bytes") for g in target.get("gpus") or []
                         if g["uuid"] == uuid), 0 if target.get("gpus") is not None else None)
            if expected or ours:
                pairs.append((ours, expected))
    return pairs

samples = []
start = time.time()
while alive(run_pid) or time.time() - start < 5:
    t0 = time.time()
    try:
        snap = snapshot()
    except OSError as error:
        print("gpu-check: /snapshot:", error, file=sys.stderr)
        time.sleep(1)
        continue
    s, n = smi(), [nvml(h) for h in handles]
    samples.append(dict(t=t0, snap=snap, smi=s, nvml=n, apps=smi_apps()))
    time.sleep(max(0.0, 1.0 - (time.time() - t0)))
    if time.time() - start > 600:
        break

rows, failed = [], False
def row(name, ok, ours, theirs, rule):
    global failed
    failed |= not ok
    rows.append((name, ours, theirs, rule, "ok" if ok else "FAIL"))

def compare(name, pairs, within, rule):
    both = [(a, b) for a, b in pairs if a is not None and b is not None]
    # A value one side has and the other not is a disagreement; a few such moments are allowed
    # (a process seen by one side a sampling period before the other).
    one_sided = sum(1 for a, b in pairs if (a is None) != (b is None))
    if not both:
        if pairs and one_sided == 0:
            row(name, True, "null", "unsupported", f"{rule}: neither side has the value")
        else:
            row(name, False, "no value", f"{len(pairs) - one_sided}/{len(pairs)}", rule)
        return
    bad = [(a, b) for a, b in both if not within(a, b)]
    worst = max(both, key=lambda p: abs(p[0] - p[1]))
    ok = not bad and one_sided <= 0.1 * len(pairs)
    row(name, ok, f"{worst[0]:g}", f"{worst[1]:g}",
        f"{rule}; {len(both) - len(bad)}/{len(pairs)} moments agree, {one_sided} one-sided (worst shown)")

for index, h in enumerate(handles):
    uuid = pynvml.nvmlDeviceGetUUID(h)
    uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    ours = []
    for s in samples:
        devs = ((s["snap"].get("extensions") or {}).get("gpu") or {}).get("devices") or []
        d = next((d for d in devs if d["uuid"] == uuid), None)
        ours.append((d, s["smi"].get(uuid, {}), s["nvml"][index], s))
    present = [x for x in ours if x[0] is not None]
    p = f"GPU {index} "
    compare(p + "power W vs nvidia-smi", [(d["power_watts"], m["power"]) for d, m, _, _ in present],
            lambda a, b: abs(a - b) <= 0.05 * b, "within 5 %")
    compare(p + "power W vs pynvml", [(d["power_watts"], v["power"]) for d, _, v, _ in present],
            lambda a, b: abs(a - b) <= 0.05 * b, "within 5 %")
    compare(p + "power limit W", [(d["power_limit_watts"], m["limit"]) for d, m, _, _ in present],
            lambda a, b: abs(a - b) <= 0.01 * b, "within 1 %")
    compare(p + "temperature C", [(d["temperature_celsius"], m["temp"]) for d, m, _, _ in present],
            lambda a, b: abs(a - b) <= 2, "within 2 C")
    for key, clock in (("sm", "sm_clock_hz"), ("mem", "memory_clock_hz"), ("gr", "graphics_clock_hz"),
                       ("sm_max", "sm_clock_max_hz"), ("mem_max", "memory_clock_max_hz")):
        compare(f"{p}{key} clock MHz",
                [(d[clock] / 1e6 if d[clock] is not None else None, m[key]) for d, m, _, _ in present],
                lambda a, b: a == b, "exact")
    compare(p + "memory used B",
            [(relay_used(s["snap"], uuid), m["used_mib"] * 1024 * 1024 if m.get("used_mib") is not None else None)
             for _, m, _, s in present],
            lambda a, b: abs(a - b) <= 0.01 * max(b, 1), "within 1 %")
    mask = lambda d: sum(bit for bit, name in (
        (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
        (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
        (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
        (0x100, "display_clock_setting")) if name in (d["throttle_reasons"] or []))
    compare(p + "throttle reasons mask", [(mask(d) if d["throttle_reasons"] is not None else None,
                                           v["throttle"] & 0x1FF if v["throttle"] is not None else None)
                                          for d, _, v, _ in present],
            lambda a, b: True, "reported (timing differs: informative)")
    compare(p + "ECC corrected volatile", [(d["ecc_corrected_volatile"], v["ecc"]) for d, _, v, _ in present],
            lambda a, b: a == b, "equal")
    compare(p + "PCIe replays", [(d["pcie_replays"], v["replays"]) for d, _, v, _ in present],
            lambda a, b: a == b, "equal")
    if len(present) >= 2:
        first, last = present[0], present[-1]
        elapsed = last[3]["t"] - first[3]["t"]
        powers = [v["power"] for _, _, v, _ in present if v["power"] is not None]
        ours_delta = (last[0]["energy_joules"] or 0) - (first[0]["energy_joules"] or 0)
        expected = sum(powers) / len(powers) * elapsed if powers else 0
        row(p + "energy J over the run", expected > 0 and abs(ours_delta - expected) <= 0.10 * expected,
            f"{ours_delta:.0f}", f"{expected:.0f}", f"within 10 % of mean power x {elapsed:.0f} s")
    xids = [x for d, _, _, _ in present for x in d["xid_errors"]]
    row(p + "XID errors", True, str(xids or "none"), "", "reported")

apps_pairs = []
for s in samples:
    ours = relay_apps(s["snap"])
    for key, used in s["apps"].items():
        apps_pairs.append((ours.get(key), used))
compare("per-process memory B", apps_pairs, lambda a, b: abs(a - b) <= 0.01 * max(b, 1), "within 1 %")

per_cgroup = [cgroup_pairs(s["snap"], s["apps"]) for s in samples]
if all(p is None for p in per_cgroup):
    reasons = ((samples[-1]["snap"].get("extensions") or {}).get("targets") or {}).get("reasons") if samples else None
    row("per-cgroup GPU memory B", True, "not measured", str(reasons)[-120:], "no cgroup file system: nothing to check")
else:
    compare("per-cgroup GPU memory B", [x for p in per_cgroup if p for x in p],
            lambda a, b: abs(a - b) <= 0.01 * max(b, 1),
            "serve --cgroup-depth 8: each cgroup's sum vs nvidia-smi's processes below it, within 1 %")

lines = [json.loads(l) for l in open(os.path.join(work, "run.ndjson")) if l.strip().startswith("{")]
with_gpu = [l for l in lines if ((l.get("extensions") or {}).get("gpu") or {}).get("devices")]
row("relay-metrics run: snapshots with extensions.gpu", bool(with_gpu), f"{len(with_gpu)}/{len(lines)}", "", "> 0")

wheels = glob.glob(os.path.join(dist, "*.whl"))
if wheels:
    venv = os.path.join(work, "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index", wheels[0]],
                         capture_output=True, text=True)
    code = ("import relay_metrics\n"
            "with relay_metrics.Collector({'measurement_scope': 'global'}) as c:\n"
            "    c.collect(); s = c.collect()\n"
            "print(len(s.gpu.device_metrics or []))\n")
    out = subprocess.run([os.path.join(venv, "bin", "python"), "-c", code], capture_output=True, text=True)
    seen = out.stdout.strip()
    row("wheel: Collector().collect() GPU devices", pip.returncode == 0 and seen == str(count),
        seen or (pip.stderr + out.stderr)[-200:], str(count), "equal")
else:
    row("wheel", False, "no wheel in " + dist, "", "carried")

width = [max(len(str(r[i])) for r in rows + [("check", "relay-metrics", "reference", "rule", "result")]) for i in range(5)]
for r in [("check", "relay-metrics", "reference", "rule", "result")] + rows:
    print(" | ".join(str(c).ljust(w) for c, w in zip(r, width)))
print(f"{len(samples)} moments; driver {pynvml.nvmlSystemGetDriverVersion()}")
sys.exit(1 if failed else 0)
EOF
    wait "$run_pid" || true
    kill "$serve_pid" 2>/dev/null || true
    wait "$serve_pid" 2>/dev/null || true
    echo "--- relay-metrics run summary (tail)"
    tail -n 20 "$work/run.log"
    return "$status"
}

case "${1:-}" in
    prepare) prepare ;;
    run) shift; run "$@" ;;
    *) echo "usage: $0 prepare | run [SECONDS]" >&2; exit 2 ;;
esac
