//! The cgroup iterator on Debian's 6.1 kernel, pure cgroup v2 (the host's 6.18 has v1
//! hierarchies): the same kinds checked against their files, and the per-kind fallback; the
//! measured cgroups' pass with the iterator against the files.

use std::path::Path;

use crate::source::cgroup_iter::tests::{exercise, Layout};

#[test]
#[ignore = "vm: needs Debian's 6.1 kernel: cargo xtask vm-test runs it"]
fn cgroup_iterator_values_equal_the_files_on_6_1_v2_in_vm() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        release.starts_with("6.1."),
        "not the VM's 6.1 kernel: {release}"
    );
    let root = Path::new("/sys/fs/cgroup").to_owned();
    exercise(&Layout {
        memory: root.clone(),
        pids: root.clone(),
        cpu: root,
        v2: true,
    });
}

/// The measured cgroups' pass with `extensions.cgroup_source` `bpf_iter` gives the values of
/// `files` on pure v2 (memory usage and peak, pids in use), and a kind made to disagree falls
/// back to its file.
#[test]
#[ignore = "vm: needs Debian's 6.1 kernel: cargo xtask vm-test runs it"]
fn the_iterator_pass_gives_the_files_values_on_6_1_v2_in_vm() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        release.starts_with("6.1."),
        "not the VM's 6.1 kernel: {release}"
    );
    crate::collector::targets::iter_tests::exercise(true);
}
