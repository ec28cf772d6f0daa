//! A kernel without BTF, simulated: the binary runs in its own mount namespace where an empty
//! tmpfs hides `/sys/kernel/btf`, so `/sys/kernel/btf/vmlinux` is missing as on a kernel built
//! without `CONFIG_DEBUG_INFO_BTF`. The task iterator needs BTF (procfs serves, with the
//! reason); the kernel-event programs read no kernel struct and still run.

use std::process::Command;

use serde_json::Value;

#[test]
#[ignore = "root: mounts over /sys/kernel/btf in a private mount namespace and loads eBPF"]
fn without_kernel_btf_procfs_serves_with_the_reason_and_kernel_events_still_count_as_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test needs root (unshare --mount, eBPF); run it as root as CI does"
    );
    let output = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(
            "mount -t tmpfs none /sys/kernel/btf && test ! -e /sys/kernel/btf/vmlinux && \
             exec \"$0\" snapshot --scope global --interval-ms 200",
        )
        .arg(env!("CARGO_BIN_EXE_relay-metrics"))
        .output()
        .expect("unshare runs");
    assert!(
        output.status.success(),
        "exit {:?}, stderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let snapshot: Value = serde_json::from_slice(&output.stdout).expect("a JSON snapshot");
    let collector = &snapshot["extensions"]["collector"];
    assert_eq!(collector["process_source"], "procfs", "{collector}");
    assert_eq!(
        collector["process_source_reason"],
        "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing)",
        "{collector}"
    );
    let events = &snapshot["extensions"]["kernel_events"];
    assert_eq!(events["active"], true, "{events}");
    assert_eq!(events["reason"], Value::Null, "{events}");
    assert!(events["processes_created"].is_u64(), "{events}");
    let active = &snapshot["process"]["active_count"]["value"];
    assert!(active.as_u64().is_some_and(|n| n > 0), "{snapshot}");
}
