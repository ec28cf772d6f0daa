//! The task iterator on Debian's 6.1 kernel, whose `rss_stat` is an atomic array (the host's
//! 6.18 has per-CPU counters): the iterator and procfs paths agree on stopped processes, in the
//! global scope and in a cgroup (pure cgroup v2 here), and the resident size there comes from
//! the record itself; each record's network namespace is the inode of `/proc/<pid>/ns/net`.

use crate::collector::{assert_paths_agree_on_stopped_processes, IterTestScope};

#[test]
#[ignore = "vm: needs Debian's 6.1 kernel: cargo xtask vm-test runs it"]
fn iterator_and_procfs_agree_on_stopped_processes_on_6_1_in_vm() {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(
        release.starts_with("6.1."),
        "not the VM's 6.1 kernel: {release}"
    );
    for scope in [IterTestScope::Global, IterTestScope::Cgroup] {
        assert_eq!(
            assert_paths_agree_on_stopped_processes(scope),
            3,
            "{scope:?}"
        );
    }
    crate::source::task_iter::tests::assert_records_carry_the_inode_of_ns_net();
}
