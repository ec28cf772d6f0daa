#!/usr/bin/env python3
"""Derives relay-metrics' seccomp profile from a container runtime's default profile.

    deploy/kubernetes/seccomp/derive-profile.py [DEFAULT.json] > relay-metrics.json

DEFAULT.json defaults to /usr/share/containers/seccomp.json (Debian's containers-common: the
default profile of podman and CRI-O, of the same lineage as Docker's and containerd's). The
result is the default profile with two changes, each for a reason:

- `bpf` and `perf_event_open` are allowed. The defaults allow them only with CAP_SYS_ADMIN
  (containerd 1.7+: `bpf` with CAP_BPF, `perf_event_open` with CAP_PERFMON); the agent holds
  CAP_BPF and CAP_PERFMON, never CAP_SYS_ADMIN, and the kernel still checks those capabilities
  on each call.
- The mount family (`mount`, `umount`, `umount2`, `mount_setattr`, `move_mount`, `open_tree`,
  `fsopen`, `fsconfig`, `fsmount`, `fspick`, `pivot_root`) is no longer allowed without
  CAP_SYS_ADMIN: the agent mounts nothing when the node's tracefs is visible under the mounted
  /sys (the DaemonSet mounts the node's /sys recursively), and has no CAP_SYS_ADMIN to mount
  with anyway.

Everything else (the default action, the architectures, every other rule) is the default's.
"""

import json
import sys

EBPF = ["bpf", "perf_event_open"]
MOUNTS = {
    "mount", "umount", "umount2", "mount_setattr", "move_mount", "open_tree",
    "fsopen", "fsconfig", "fsmount", "fspick", "pivot_root",
}


def derive(profile):
    rules = []
    for rule in profile["syscalls"]:
        rule = dict(rule)
        caps = rule.get("includes", {}).get("caps", [])
        if rule["action"] == "SCMP_ACT_ALLOW" and "CAP_SYS_ADMIN" not in caps:
            rule["names"] = [n for n in rule["names"] if n not in MOUNTS]
        else:
            # The default's own rules for bpf and perf_event_open (allowed with CAP_SYS_ADMIN,
            # refused without it) give way to the one rule below.
            rule["names"] = [n for n in rule["names"] if n not in EBPF]
        if rule["names"]:
            rules.append(rule)
    rules.append({
        "names": EBPF,
        "action": "SCMP_ACT_ALLOW",
        "args": [],
        "comment": "relay-metrics: eBPF programs and tracepoint attachment (the kernel checks CAP_BPF and CAP_PERFMON)",
        "includes": {},
        "excludes": {},
    })
    derived = dict(profile)
    derived["syscalls"] = rules
    return derived


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/containers/seccomp.json"
    with open(path, encoding="utf-8") as source:
        profile = json.load(source)
    json.dump(derive(profile), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
