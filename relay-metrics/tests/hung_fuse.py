"""A FUSE daemon that answers INIT and nothing else: `python3 hung_fuse.py MOUNTPOINT` (as root).

It mounts MOUNTPOINT, answers the kernel's INIT, prints "ready", then reads every request and
never answers. A `statfs` of the mount waits in the kernel for that answer, and since the daemon
has read the request even SIGKILL cannot end the wait. Killing the daemon closes the device,
which aborts the connection and releases every waiting call; the mount itself stays until
unmounted (MNT_DETACH).
"""

import ctypes
import os
import struct
import sys

FUSE_INIT = 26
mountpoint = sys.argv[1]
# A request must be read (after which even SIGKILL cannot end the caller's wait) before the
# caller's own deadline, however loaded the machine: ahead of every ordinary task, the daemon
# reads each request as it comes. It never runs for long: it only reads.
os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
fd = os.open("/dev/fuse", os.O_RDWR)
libc = ctypes.CDLL(None, use_errno=True)
options = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
MS_NOSUID, MS_NODEV = 2, 4
if libc.mount(b"relay-metrics-hung", mountpoint.encode(), b"fuse", MS_NOSUID | MS_NODEV, options):
    sys.exit(f"mount {mountpoint}: {os.strerror(ctypes.get_errno())}")
while True:
    request = os.read(fd, 1 << 20)
    # fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid, extlen, padding.
    _, opcode, unique = struct.unpack_from("<IIQ", request)
    if opcode == FUSE_INIT:
        major, minor, max_readahead = struct.unpack_from("<III", request, 40)
        # fuse_init_out (7.31, 64 bytes): major, minor, max_readahead, flags, max_background,
        # congestion_threshold, max_write, time_gran, max_pages, map_alignment, then unused.
        body = struct.pack("<IIIIHHIIHH", 7, 31, max_readahead, 0, 16, 12, 4096, 1, 1, 0)
        body += bytes(64 - len(body))
        os.write(fd, struct.pack("<IiQ", 16 + len(body), 0, unique) + body)
        print("ready", flush=True)
    # Any other request is read and never answered.
