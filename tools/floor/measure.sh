#!/bin/bash
# Reproduces every figure of docs/PERFORMANCE.md on the live machine (needs root: v1 cgroups,
# eBPF, strace). Usage: tools/floor/measure.sh [OUT_DIR]   (release binaries must be built:
#   cargo build --release -p relay-metrics --features cli -p relay-metrics-floor)
# Each scenario: RUNS x `relay-metrics bench`, and RUNS x the floor tool, each run started only
# when the machine looked quiet (≥ 90 % idle over 1 s; waits up to 60 s, then runs anyway and
# says so).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/relay-metrics-perf}
RUNS=${RUNS:-5}
B=${B:-$PWD/target/release/relay-metrics}
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
# (Not in $(...): the subshell would wait for the sleeps and lose PIDS.)
spawn_tree() { setsid sh -c 'sleep 100000 & sleep 100000 & wait' >/dev/null 2>&1 & SPAWNED=$!; PIDS+=("$SPAWNED"); sleep 0.3; }

spawn_tree; TREE=$SPAWNED
spawn_tree; CGTREE=$SPAWNED
for c in cpu cpuacct memory pids; do
    mkdir /sys/fs/cgroup/$c/$CG
    for p in $CGTREE $(pgrep -P "$CGTREE"); do echo "$p" > /sys/fs/cgroup/$c/$CG/cgroup.procs; done
done
echo '{"disk": {"filesystem_paths": ["/", "/tmp"]}, "extensions": {"private_memory_interval_millis": 1000}}' > "$OUT/pm1s.json"
echo '{"disk": {"filesystem_paths": ["/", "/tmp"]}}' > "$OUT/pm0.json"
echo '{"disk": {"filesystem_paths": ["/", "/tmp"]}, "extensions": {"private_memory_interval_millis": 1000, "system_wide_interval_millis": 1000}}' > "$OUT/sw1s.json"

scenario() { # name iterations args...
    local name=$1 iterations=$2; shift 2
    FLOOR_ITERATIONS=$((iterations * 2))
    : > "$OUT/$name.bench"; : > "$OUT/$name.floor"; : > "$OUT/$name.log"
    for r in $(seq "$RUNS"); do
        echo "$name run $r $(wait_quiet) load=$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/$name.log"
        "$B" bench --iterations "$iterations" "$@" >> "$OUT/$name.bench"
        "$F" --iterations "$FLOOR_ITERATIONS" --keep-trace "$OUT/$name.strace" -- "$B" "$@" > "$OUT/$name.floor.$r" 2>&1
        grep '^FLOOR' "$OUT/$name.floor.$r" >> "$OUT/$name.floor"
    done
}
SCENARIOS=${SCENARIOS:-tree_pm1s tree_sw1s tree_pm0 cgroup global watch}
want() { [[ " $SCENARIOS " == *" $1 "* ]]; }
want tree_pm1s && scenario tree_pm1s 2000 --pid "$TREE" --config "$OUT/pm1s.json"
want tree_sw1s && scenario tree_sw1s 2000 --pid "$TREE" --config "$OUT/sw1s.json"
want tree_pm0 && scenario tree_pm0 1000 --pid "$TREE" --config "$OUT/pm0.json"
want cgroup && scenario cgroup 2000 --scope cgroup --cgroup "/$CG" --config "$OUT/pm1s.json"
want global && scenario global 300 --scope global --config "$OUT/pm1s.json"

# watch at 1 kHz for 10 s on the 3-process tree (after a 2 s warm-up), and the floor paced the
# same way (one replay per ms, woken by the same sampler), per config whose trace was taken
# above; then the same loop without reads (`--bare`): what waking up alone costs and how late
# this machine wakes a process that does nothing else.
want watch || exit 0
: > "$OUT/watch.jsonl"; : > "$OUT/paced.floor"
for r in $(seq 3); do
    for config in pm1s sw1s; do
        [ -s "$OUT/tree_$config.strace" ] || continue
        echo "watch $config run $r $(wait_quiet) load=$(cut -d' ' -f1 /proc/loadavg)" >> "$OUT/watch.log"
        echo "{\"config\": \"$config\", \"watch\": $(python3 tools/floor/watch_measure.py "$B" --pid "$TREE" --config "$OUT/$config.json")}" >> "$OUT/watch.jsonl"
        echo "$config $("$F" --trace "$OUT/tree_$config.strace" --iterations 10000 --paced-us 1000 | grep '^PACED')" >> "$OUT/paced.floor"
    done
    "$F" --trace "$OUT/tree_pm1s.strace" --iterations 10000 --paced-us 1000 --bare | grep '^BARE' >> "$OUT/paced.floor"
done
echo "done: $OUT"
