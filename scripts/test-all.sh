#!/usr/bin/env bash
# The whole test suite: formatting, lints, and every test tier that this machine can run.
# Run as root on Debian 12 (no sudo needed or used): it installs what the tests need first
# (idempotent), and the root tests create their own cgroups and load eBPF programs. Any failure
# fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
    echo "scripts/test-all.sh: run as root (the root tests create cgroups and load eBPF programs; plain \`cargo test\` runs the rest)" >&2
    exit 1
fi

echo "== install test dependencies"
scripts/install-deps.sh

echo "== eBPF: rebuild the programs from source; fail if the committed object is stale"
cargo xtask check-ebpf-fresh

echo "== format, lints and API docs"
if git grep -nE '^(<<<<<<<|>>>>>>>) ' -- . ':!*.bpf.o'; then
    echo "conflict markers left by a merge (above)" >&2
    exit 1
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

# Every cgroup a test makes is named relay-*; one left behind slows every later walk of the host's
# cgroups and changes what the agent measures here (2,000 left by one failed measurement turned
# its cgroup source from the iterator to the files). The host and container tiers must remove
# every one they made: the cgroups listed here before are compared with those after.
relay_cgroups() { find /sys/fs/cgroup -mindepth 1 -type d -name 'relay-*' 2>/dev/null | sort || true; }
cgroups_before=$(relay_cgroups)

echo "== tests (host: unit, fixture trees, fake NVML, and the root tests: hybrid cgroups, live eBPF)"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# `--include-ignored` runs the tests marked `#[ignore = "root: …"]`; the VM tests (marked
# `#[ignore = "vm: …"]`, named `…_in_vm`) need a pure cgroup v2 kernel and run in the VM tier;
# the real-container tests (named `…_with_podman`) need the image and run after its build below.
cargo test --workspace --locked --no-fail-fast -- --include-ignored --skip _in_vm --skip _with_podman 2>&1 | tee "$log"

echo "== Python package: build relay_metrics into the test virtualenv, then pytest against NeMo Relay 0.10.4"
# pip builds the wheel in place with maturin (the README's `pip install ./relay-metrics-python`);
# the dev profile reuses the debug build above instead of a ~7 min optimised one.
PY_VENV=target/python-venv
PATH="$PWD/$PY_VENV/bin:$PATH" MATURIN_PEP517_ARGS="--profile dev" \
    "$PY_VENV/bin/pip" install -q --no-build-isolation --no-deps --force-reinstall ./relay-metrics-python
"$PY_VENV/bin/python" -m pytest -q -p no:cacheprovider relay-metrics-python/tests 2>&1 | tee -a "$log"
# pytest's summary ("N passed, M failed") is not cargo's: count it into the closing total.
sed -n 's/^\([0-9][0-9]*\) passed.*/test result: ok. \1 passed; 0 failed;/p' "$log" | tail -1 >> "$log"

echo "== container image: podman build from an mmdebstrap base, then run (skipped past 5 min)"
status=0
timeout 300 deploy/container/build-image.sh --binary target/debug/relay-metrics || status=$?
if [[ $status -eq 124 ]]; then
    echo "SKIPPED: the container image build took over 5 minutes (deploy/container/build-image.sh)"
    echo "SKIPPED: the real-container tests need that image: relay-metrics/tests/containers.rs (every test named …_with_podman)"
elif [[ $status -ne 0 ]]; then
    echo "the container image build failed ($status)" >&2
    exit 1
else
    echo "== real containers: podman runs the image with limits; the agent labels them, counts an OOM kill, drops removed ones"
    cargo test -p relay-metrics --locked --no-fail-fast --test containers -- --include-ignored _with_podman 2>&1 | tee -a "$log"
fi

echo "== no test cgroup left behind by the host and container tiers"
leaked=$(comm -13 <(echo "$cgroups_before") <(relay_cgroups))
if [[ -n $leaked ]]; then
    echo "tests left these cgroups behind:" >&2
    echo "$leaked" >&2
    exit 1
fi

echo "== fuzzing: every parser of kernel text and configuration, 400 s in all (scripts/fuzz.sh)"
scripts/fuzz.sh

echo "== tests in a pure cgroup v2 VM (qemu, Debian's 6.1 cloud kernel): eBPF and vm_tests"
cargo xtask vm-test 2>&1 | tee -a "$log"
echo "== the same VM booted with lockdown=confidentiality: the fallbacks and their reasons"
cargo xtask vm-test --lockdown 2>&1 | tee -a "$log"
echo "== the same VM booted with 2 online of 64 possible CPUs, as a big host sizes per-CPU data"
cargo xtask vm-test --many-cpus 2>&1 | tee -a "$log"

# cargo prints one result line per test binary, the last often a crate with no doc-tests
# ("0 passed"): close with the total, so the run's last line says what ran.
awk '/^test result:/ { passed += $4; failed += $6 } END { printf "%d passed, %d failed\n", passed, failed }' "$log"
