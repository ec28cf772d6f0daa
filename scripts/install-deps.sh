#!/usr/bin/env bash
# Installs what the tests need on Debian 12, as root. Idempotent: quick when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# tracefs: the live tests read tracepoint formats; harmless if already mounted.
if [[ ! -e /sys/kernel/tracing/events ]]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi

# The eBPF toolchain (Debian's rustc with core for bpfel-unknown-none, LLVM 22, bpf-linker):
# only needed to rebuild the committed eBPF object, which CI does to prove it is fresh.
cargo xtask install-toolchain

# python3 allocates memory in the OOM tests (present on the image; installed if missing).
if ! command -v python3 >/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3
fi

# GNU time (`/usr/bin/time -v`): run's totals are checked against it
# (relay-metrics/tests/run_accounting.rs).
if [[ ! -x /usr/bin/time ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends time
fi

# Prometheus (server and promtool) for the agent endpoint tests.
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
fi

# The hung-filesystem tests (relay-metrics/tests/hung_filesystem.rs) mount a FUSE filesystem
# themselves through /dev/fuse: load the module where it is not built in.
if [[ ! -e /dev/fuse ]]; then
    modprobe fuse 2>/dev/null || true
fi

# curl decompresses the agent's gzip responses in the HTTP tests (relay-metrics/tests/serve_http.rs).
if ! command -v curl >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl
fi

# Headless Chromium loads the HTML report and takes its screenshot (relay-metrics/tests/report.rs,
# `tools: chromium`).
if ! command -v chromium >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
fi

# The OTLP tests' receivers (relay-metrics/tests/otlp_receiver.py) decode with PyPI's
# opentelemetry-proto (its generated gRPC service served by grpcio; RetryInfo from
# googleapis-common-protos), the deploy tests validate
# the Kubernetes manifest with kubernetes-validate (offline schemas), and the `--metric-names otel`
# test checks names against opentelemetry-semantic-conventions: one virtualenv in target/,
# pinned versions, from PyPI. The TLS tests make their certificates with openssl.
if ! command -v openssl >/dev/null; then
    apt-get update -qq && apt-get install -y -qq openssl
fi
OTLP_VENV=target/otlp-venv
OTLP_PACKAGES=(opentelemetry-proto==1.45.2 protobuf==7.36.2 grpcio==1.85.3 googleapis-common-protos==1.76.0
    kubernetes-validate==1.37.0 opentelemetry-semantic-conventions==0.66b2)
if ! "$OTLP_VENV/bin/python" -c 'import opentelemetry.proto, grpc, google.rpc.status_pb2, kubernetes_validate, opentelemetry.semconv' 2>/dev/null; then
    if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
        apt-get update -qq && apt-get install -y -qq python3-venv
    fi
    # Recreated whole: a virtualenv copied from another checkout still points at that one.
    rm -rf "$OTLP_VENV"
    python3 -m venv "$OTLP_VENV"
    "$OTLP_VENV/bin/pip" install -q "${OTLP_PACKAGES[@]}"
fi

# The Python package's tests (relay-metrics-python/tests): pytest, mypy, the build backend
# (maturin, so scripts/test-all.sh can build without pip's isolated build environment) and NeMo
# Relay 0.10.4 itself, the reference the tests compare against. Pinned, from PyPI.
PY_VENV=target/python-venv
PY_PACKAGES=(nemo-relay==0.10.4 pytest==9.2.0 mypy==2.4.1 maturin==1.16.0 pandas==3.1.1)
if ! "$PY_VENV/bin/python" - "${PY_PACKAGES[@]}" 2>/dev/null <<'PY'
import sys
from importlib.metadata import version
sys.exit(any(version(p.split("==")[0]) != p.split("==")[1] for p in sys.argv[1:]))
PY
then
    if ! python3 -c 'import ensurepip' 2>/dev/null; then
        apt-get update -qq && apt-get install -y -qq python3-venv
    fi
    rm -rf "$PY_VENV"
    python3 -m venv "$PY_VENV"
    "$PY_VENV/bin/pip" install -q "${PY_PACKAGES[@]}"
fi

# The deployment checks (relay-metrics/tests/deploy.rs, tests/capabilities.rs and the image build
# in scripts/test-all.sh): systemd-analyze, capsh (libcap2-bin), setpriv (util-linux), podman
# with runc and mmdebstrap (crun refuses this host's hybrid cgroups), and busybox-static.
deploy_tools=()
command -v systemd-analyze >/dev/null || deploy_tools+=(systemd)
command -v capsh >/dev/null || deploy_tools+=(libcap2-bin)
command -v setpriv >/dev/null || deploy_tools+=(util-linux)
command -v podman >/dev/null || deploy_tools+=(podman)
command -v runc >/dev/null || deploy_tools+=(runc)
command -v mmdebstrap >/dev/null || deploy_tools+=(mmdebstrap)
# The cAdvisor-naming podman tests (relay-metrics/tests/containers.rs) build a busybox image.
[[ -x /bin/busybox ]] || deploy_tools+=(busybox-static)
if [[ ${#deploy_tools[@]} -gt 0 ]]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${deploy_tools[@]}"
fi

# The CRI test (relay-metrics/tests/cri.rs) runs its own containerd (Debian's, with runc) and
# builds its pod sandbox image from a static C program (gcc, glibc's static library).
cri_tools=()
command -v containerd >/dev/null || cri_tools+=(containerd)
command -v runc >/dev/null || cri_tools+=(runc)
command -v gcc >/dev/null || cri_tools+=(gcc)
dpkg -s libc6-dev >/dev/null 2>&1 || cri_tools+=(libc6-dev)
if [[ ${#cri_tools[@]} -gt 0 ]]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${cri_tools[@]}"
fi

# Fuzzing (scripts/fuzz.sh): a nightly toolchain (libFuzzer's sanitizer flags; the image ships one
# with the AddressSanitizer runtime) and cargo-fuzz, pinned.
if ! cargo +nightly --version >/dev/null 2>&1; then
    rustup toolchain install nightly --profile minimal
fi
if [[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz 0.13.2" ]]; then
    cargo install cargo-fuzz --version 0.13.2 --locked
fi
