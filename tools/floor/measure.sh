#!/bin/bash
# Reproduces every figure of docs/PERFORMANCE.md on the live machine (needs root: v1 cgroups,
# eBPF, strace). Usage: tools/floor/measure.sh [OUT_DIR]   (release binaries must be built:
#   cargo build --release -p relay-metrics -p relay-metrics-floor)
# Each scenario: RUNS x `relay-metrics bench`, and RUNS x the floor tool, each run started only
# when the machine looked quiet (≥ 90 % idle over 1 s; waits up to 60 s, then runs anyway and
# says so).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/relay-metrics-perf}
RUNS=${RUNS:-5}
B=$PWD/target/release/relay-metrics
F=$PWD/target/release/relay-metrics-floor
mkdir -p "$OUT"
CG=relay-metrics-perf-$$
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill -- -"$p" 2>/dev/null || true; done
    sleep 0.2
    for c in cpu cpuacct memory pids; do rmdir /sys/fs/cgroup/$c/$CG 2>/dev/null || true; done
}
trap cleanup EXIT

idle_pct() {
    read -r _ u n s i w q sq st _ < /proc/stat; local t1=$((u+n+s+i+w+q+sq+st)) i1=$i
    sleep 1
    read -r _ u n s i w q sq st _ < /proc/stat; local t2=$((u+n+s+i+w+q+sq+st)) i2=$i
    echo $(( 100 * (i2 - i1) / (t2 - t1) ))
}
wait_quiet() {
    for _ in $(seq 60); do
        local idle; idle=$(idle_pct)
        if [ "$idle" -ge 90 ]; then echo "idle=$idle"; return; fi
    done
    echo "idle=NOT-QUIET"
}

# A shell with two sleeping children, in its own process group.
spawn_tree() { setsid sh -c 'sleep 100000 & sleep 100000 & wait' & local p=$!; sleep 0.3; PIDS+=("$p"); echo "$p"; }

TREE=$(spawn_tree)
CGTREE=$(spawn_tree)
for c in cpu cpuacct memory pids; do
    mkdir /sys/fs/cgroup/$c/$CG
    for p in $CGTREE $(pgrep -P "$CGTREE"); do echo "$p" > /sys/fs/cgroup/$c/$CG/cgroup.procs; done
done
echo '{"disk": {"filesystem_paths": ["/", "/tmp"]}, "extensions": {"private_memory_interval_millis": 1000}}' > "$OUT/pm1s.json"
echo '{"disk": {"filesystem_paths": ["/", "/tmp"]}}' > "$OUT/pm0.json"

scenario() { # name iterations args...
    local name=$1 iterations=$2; shift 2
    : > "$OUT/$name.bench"; : > "$OUT/$name.floor"
    for r in $(seq "$RUNS"); do
        echo "$name run $r $(wait_quiet) load=$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/$name.log"
        "$B" bench --iterations "$iterations" "$@" >> "$OUT/$name.bench"
        "$F" --keep-trace "$OUT/$name.strace" -- "$B" "$@" > "$OUT/$name.floor.$r" 2>&1
        grep '^FLOOR' "$OUT/$name.floor.$r" >> "$OUT/$name.floor"
    done
}
scenario tree_pm1s 2000 --pid "$TREE" --config "$OUT/pm1s.json"
scenario tree_pm0 1000 --pid "$TREE" --config "$OUT/pm0.json"
scenario cgroup 2000 --scope cgroup --cgroup "/$CG" --config "$OUT/pm1s.json"
scenario global 300 --scope global --config "$OUT/pm1s.json"

# watch at 1 kHz for 10 s on the 3-process tree.
for r in $(seq 3); do
    echo "watch run $r $(wait_quiet)" >> "$OUT/watch.log"
    /usr/bin/time -v "$B" watch --interval-ms 1 --count 10000 --pid "$TREE" --config "$OUT/pm1s.json" \
        > "$OUT/watch.$r.ndjson" 2> "$OUT/watch.$r.time"
done
echo "done: $OUT"
