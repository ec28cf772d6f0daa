#!/usr/bin/env bash
# Builds the pod sandbox ("pause") image of the CRI test (relay-metrics/tests/cri.rs) without a
# registry: a static C program that waits for a signal, alone in an OCI image (no base), written
# as an OCI image layout archive that `ctr images import` reads.
#
#   relay-metrics/tests/cri_image.sh OUT.tar NAME:TAG
#
# Needs gcc and glibc's static library (Debian's gcc and libc6-dev, which building Rust here
# needs anyway), tar and sha256sum.
set -euo pipefail
[[ $# -eq 2 ]] || { echo "usage: $0 OUT.tar NAME:TAG" >&2; exit 2; }
out=$1
ref=$2

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs" "$work/oci/blobs/sha256"

cat > "$work/pause.c" <<'C'
#include <signal.h>
#include <unistd.h>

static void quit(int sig) { (void)sig; _exit(0); }

int main(void) {
    signal(SIGTERM, quit);
    signal(SIGINT, quit);
    for (;;)
        pause();
}
C
gcc -static -Os -s -o "$work/rootfs/pause" "$work/pause.c"

# Adds FILE as a blob; prints its digest and size.
blob() {
    local digest
    digest=$(sha256sum "$1" | cut -d' ' -f1)
    mv "$1" "$work/oci/blobs/sha256/$digest"
    echo "$digest $(stat -c %s "$work/oci/blobs/sha256/$digest")"
}

tar -C "$work/rootfs" --owner=0 --group=0 --numeric-owner --mtime=@0 -cf "$work/layer.tar" pause
read -r layer layer_size < <(blob "$work/layer.tar")
printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$layer" > "$work/config.json"
read -r config config_size < <(blob "$work/config.json")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
    "$config" "$config_size" "$layer" "$layer_size" > "$work/manifest.json"
read -r manifest manifest_size < <(blob "$work/manifest.json")
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$manifest_size" "$ref" "${ref##*:}" > "$work/oci/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
tar -C "$work/oci" -cf "$out" oci-layout index.json blobs
