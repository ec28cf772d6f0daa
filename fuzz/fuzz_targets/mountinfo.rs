//! `/proc/self/mountinfo` into the cgroup layout, then the lines of a `/proc/<pid>/cgroup` file
//! resolved through it, as the cgroup scope does. The input is the mountinfo content, a NUL, and
//! the `/proc/<pid>/cgroup` content.
#![no_main]
use libfuzzer_sys::fuzz_target;
use relay_metrics::internals::cgroup::{parse_proc_cgroup, CgroupLayout};
use relay_metrics::internals::Roots;

fuzz_target!(|data: &[u8]| {
    let (mountinfo, proc_cgroup) = match data.iter().position(|&b| b == 0) {
        Some(nul) => (&data[..nul], &data[nul + 1..]),
        None => (data, &b"0::/\n"[..]),
    };
    let layout = CgroupLayout::from_mountinfo(mountinfo, &Roots::host());
    for controller in ["cpu", "memory", "pids", "cpuset", "cpuacct"] {
        let _ = layout.is_v1_bound(controller);
        let _ = layout.v1_hierarchy(controller);
    }
    for entry in parse_proc_cgroup(proc_cgroup) {
        let mount = if entry.is_v2() {
            layout.v2.as_ref()
        } else {
            layout
                .v1
                .iter()
                .find(|h| h.matches_proc_field(&entry.controllers))
                .map(|h| &h.mount)
        };
        if let Some(mount) = mount {
            if let Some(dir) = mount.dir_of(&entry.path) {
                assert!(dir.starts_with(&mount.mount_point));
            }
        }
    }
});
