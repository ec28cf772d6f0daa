#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser of kernel text and configuration (fuzz/, cargo-fuzz with
# libFuzzer and AddressSanitizer, optimised with overflow checks on), for a fixed total budget
# shared equally by the targets. Any crash, panic, overflow or failed property fails the script;
# libFuzzer leaves the input in fuzz/artifacts/<target>/ (make it a unit test next to the parser).
#
#   scripts/fuzz.sh                       CI: FUZZ_TOTAL_SECONDS=400 over all targets (with start-up, under 8 minutes)
#   FUZZ_TOTAL_SECONDS=60 scripts/fuzz.sh proc_pid_stat config    some targets only
#   FUZZ_RUNS=10000000 FUZZ_SANITIZER=none FUZZ_TARGET_DIR=target/long scripts/fuzz.sh
#                                         the long run (executions per target; see docs/RELIABILITY.md)
#
# Each target starts from its committed seeds (fuzz/seeds/<target>/, small inputs taken from the
# fixture trees) plus whatever earlier runs left in fuzz/corpus/<target>/ (not committed).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

total=${FUZZ_TOTAL_SECONDS:-400}
runs=${FUZZ_RUNS:-}
sanitizer=${FUZZ_SANITIZER:-address}
if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
per_target=$((total / ${#targets[@]}))
if [[ -z $runs && $per_target -lt 1 ]]; then
    echo "scripts/fuzz.sh: FUZZ_TOTAL_SECONDS=$total is less than a second per target" >&2
    exit 1
fi
flags=(-O -a --sanitizer "$sanitizer")
# A build without the sanitizer needs its own target directory to leave the CI build alone.
if [[ -n ${FUZZ_TARGET_DIR:-} ]]; then
    flags+=(--target-dir "$FUZZ_TARGET_DIR")
fi

started=$(date +%s)
cargo +nightly fuzz build "${flags[@]}"
built=$(date +%s)
echo "== fuzz: built ${#targets[@]} targets in $((built - started)) s"

if [[ -n $runs ]]; then
    limit=(-runs="$runs")
    echo "== fuzz: $runs executions per target"
else
    limit=(-max_total_time="$per_target")
    echo "== fuzz: ${per_target} s per target, ${total} s in all"
fi
summary=()
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    log=$(mktemp)
    # -timeout: an input that takes 10 s is a hang (generous: CI machines are shared); -rss_limit_mb: a parser must not balloon.
    if ! cargo +nightly fuzz run "${flags[@]}" "$target" "corpus/$target" "seeds/$target" -- \
        "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
        # The panic message or sanitizer report, then libFuzzer's reproduction hints.
        grep -E -A4 "panicked at|ERROR: (AddressSanitizer|libFuzzer)" "$log" | head -n 40 >&2 || true
        tail -n 25 "$log" >&2
        echo "scripts/fuzz.sh: target $target failed; the input is in fuzz/artifacts/$target/" >&2
        rm -f "$log"
        exit 1
    fi
    last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
    runs_done=$(grep -E '^stat::number_of_executed_units:' "$log" | awk '{print $2}')
    cov=$(sed -nE 's/.* cov: ([0-9]+) ft: ([0-9]+).*/cov \1 ft \2/p' <<<"$last")
    summary+=("$(printf '%-24s %12s execs  %s' "$target" "$runs_done" "$cov")")
    rm -f "$log"
done
echo "== fuzz: done in $(($(date +%s) - started)) s ($(($(date +%s) - built)) s fuzzing), no crash"
printf '%s\n' "${summary[@]}"
