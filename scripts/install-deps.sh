#!/usr/bin/env bash
# Installs what the tests need on Debian 12, as root. Idempotent: quick when already installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# tracefs: the live tests read tracepoint formats; harmless if already mounted.
if [[ ! -e /sys/kernel/tracing/events ]]; then
    mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
fi
