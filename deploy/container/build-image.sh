#!/usr/bin/env bash
# Builds the agent image with podman from a Debian base made by mmdebstrap, then checks it: the
# image's binary prints a global snapshot. As root on Debian 12 with podman, runc and mmdebstrap
# (scripts/install-deps.sh installs them).
#
#   deploy/container/build-image.sh [--binary PATH] [--tag NAME]
#
# PATH defaults to target/release/relay-metrics (build it first); NAME to
# localhost/relay-metrics:<version>. The base image localhost/relay-metrics-base:bookworm is made
# once and reused.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary=target/release/relay-metrics
version=$(sed -n 's/^version = "\(.*\)"/\1/p' relay-metrics/Cargo.toml | head -1)
tag=localhost/relay-metrics:$version
while [[ $# -gt 0 ]]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        *) echo "usage: $0 [--binary PATH] [--tag NAME]" >&2; exit 2 ;;
    esac
done
[[ -x $binary ]] || { echo "$0: no executable $binary (cargo build --release -p relay-metrics)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# crun refuses this kind of host (hybrid cgroups), and the host forbids raising rlimits to
# podman's defaults: use runc and limits the host allows.
cat > "$work/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
export CONTAINERS_CONF=$work/containers.conf

base=localhost/relay-metrics-base:bookworm
if ! podman image exists "$base"; then
    echo "== base image: mmdebstrap --variant=essential bookworm"
    mmdebstrap --quiet --variant=essential bookworm "$work/rootfs.tar"
    podman import --quiet "$work/rootfs.tar" "$base" >/dev/null
fi

echo "== podman build $tag"
mkdir "$work/context"
cp "$binary" "$work/context/relay-metrics"
podman build --quiet --build-arg "BASE=$base" -f deploy/container/Containerfile -t "$tag" "$work/context" >/dev/null

echo "== check: the image prints a global snapshot"
out=$(podman run --rm "$tag" snapshot --scope global)
grep -q '"measurement_scope":"global"' <<<"$out" || { echo "$0: unexpected output: ${out:0:300}" >&2; exit 1; }
podman run --rm "$tag" --version
echo "image $tag built and checked"
