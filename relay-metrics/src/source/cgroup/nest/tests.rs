//! Nesting on fake hierarchies (plain directories): where each directory is made, and what is
//! refused. The live cases are in `tests/run_nesting.rs` (hybrid host) and the VM tier (v2).

use super::*;

// Removal is not tried on plain directories (it writes `cgroup.kill`, which only a cgroup
// file system refuses to create): the live tests check it.

/// A layout of plain directories under `base`: v1 hierarchies named by their controllers
/// (mounted at `root`), and a unified one at `base/unified`.
fn layout(base: &Path, v1: &[(&str, &str)], v2_root: Option<&str>) -> CgroupLayout {
    let mut layout = CgroupLayout::default();
    for (controllers, root) in v1 {
        let mount_point = base.join(controllers.replace(',', "+"));
        std::fs::create_dir_all(&mount_point).unwrap();
        layout.v1.push(V1Hierarchy {
            mount: Mount {
                root: (*root).to_string(),
                mount_point,
            },
            controllers: controllers.split(',').map(str::to_string).collect(),
            name: None,
        });
    }
    if let Some(root) = v2_root {
        let mount_point = base.join("unified");
        std::fs::create_dir_all(&mount_point).unwrap();
        layout.v2 = Some(Mount {
            root: root.to_string(),
            mount_point,
        });
    }
    layout
}

#[test]
fn each_v1_directory_is_made_below_the_callers_own_path_in_that_hierarchy() {
    let base = tempfile::tempdir().unwrap();
    let layout = layout(
        base.path(),
        &[
            ("cpu", "/"),
            ("cpuacct", "/"),
            ("memory", "/"),
            ("pids", "/"),
        ],
        Some("/"),
    );
    for dir in ["memory/limited/job", "pids/other"] {
        std::fs::create_dir_all(base.path().join(dir)).unwrap();
    }
    let caller = b"4:pids:/other\n3:memory:/limited/job\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    let nested = NestedCgroup::create(&layout, caller, "run-1").unwrap();
    let dirs = nested.dirs();
    for expected in [
        "memory/limited/job/run-1",
        "pids/other/run-1",
        "cpuacct/run-1",
        "unified/run-1",
    ] {
        assert!(
            dirs.contains(&base.path().join(expected)),
            "{expected} not in {dirs:?}"
        );
        assert!(base.path().join(expected).is_dir());
    }
    // No group in the cpu hierarchy (a peer of the caller's tasks), and it is said.
    assert!(!base.path().join("cpu/run-1").exists());
    assert!(nested
        .notes()
        .iter()
        .any(|n| n.contains("v1 cpu hierarchy")));
    assert_eq!(nested.path(), "/limited/job/run-1");
    let target = nested.target();
    assert_eq!(
        target.v1_dir("memory").unwrap().dir,
        base.path().join("memory/limited/job/run-1")
    );
    assert!(
        target.v1_dir("cpu").is_none(),
        "the caller's cpu cgroup is not read"
    );
}

#[test]
fn a_cpuacct_hierarchy_shared_with_cpu_is_refused_with_the_reason() {
    let base = tempfile::tempdir().unwrap();
    let layout = layout(base.path(), &[("cpu,cpuacct", "/"), ("memory", "/")], None);
    let caller = b"2:memory:/\n1:cpu,cpuacct:/\n";
    let error = NestedCgroup::create(&layout, caller, "run-2").unwrap_err();
    assert!(error.contains("carries cpu"), "{error}");
    // Nothing is left behind.
    assert!(!base.path().join("memory/run-2").exists());
}

#[test]
fn a_path_outside_the_mount_is_refused_and_nothing_is_made_at_the_root() {
    let base = tempfile::tempdir().unwrap();
    // The memory hierarchy shows only /other: the caller's /mine cannot be reached from it.
    let layout = layout(base.path(), &[("cpuacct", "/"), ("memory", "/other")], None);
    let caller = b"2:memory:/mine\n1:cpuacct:/\n";
    let error = NestedCgroup::create(&layout, caller, "run-3").unwrap_err();
    assert!(error.contains("outside the hierarchy's mount"), "{error}");
    assert!(!base.path().join("memory/run-3").exists());
    assert!(!base.path().join("cpuacct/run-3").exists());
}

#[test]
fn a_v2_caller_is_nested_in_its_own_cgroup_even_at_a_namespace_root() {
    let base = tempfile::tempdir().unwrap();
    let layout = layout(base.path(), &[], Some("/"));
    std::fs::create_dir_all(base.path().join("unified/job")).unwrap();
    let nested = NestedCgroup::create(&layout, b"0::/job\n", "run-4").unwrap();
    assert_eq!(nested.dirs(), [base.path().join("unified/job/run-4")]);
    assert_eq!(nested.path(), "/job/run-4");
    // No controller files in a plain directory: the lack is said, not hidden.
    assert!(nested
        .notes()
        .iter()
        .any(|n| n.contains("no internal processes")));
    // A cgroup namespace shows `0::/`: the directory goes at the (namespace's) mount root.
    let nested = NestedCgroup::create(&layout, b"0::/\n", "run-5").unwrap();
    assert_eq!(nested.dirs(), [base.path().join("unified/run-5")]);
}

#[test]
fn a_systemd_unit_is_written_into_only_when_delegated() {
    let base = tempfile::tempdir().unwrap();
    let layout = layout(base.path(), &[], Some("/"));
    let session = "user.slice/user-0.slice/session-3.scope";
    let service = "system.slice/build.service";
    for dir in [session, service] {
        std::fs::create_dir_all(base.path().join("unified").join(dir)).unwrap();
    }
    let error =
        NestedCgroup::create(&layout, format!("0::/{session}\n").as_bytes(), "run-6").unwrap_err();
    assert!(
        error.contains("session-3.scope") && error.contains("not delegated"),
        "{error}"
    );
    assert!(!base
        .path()
        .join("unified")
        .join(session)
        .join("run-6")
        .exists());
    let caller = format!("0::/{service}\n");
    assert!(NestedCgroup::create(&layout, caller.as_bytes(), "run-7").is_err());
    // Delegate=yes: systemd sets the attribute (a user manager sets `user.delegate`).
    let unit_dir = base.path().join("unified").join(service);
    if crate::source::xattr::set(&unit_dir, "user.delegate", b"1").is_err() {
        eprintln!("this file system takes no user attributes: the delegated half is not run");
        return;
    }
    let nested = NestedCgroup::create(&layout, caller.as_bytes(), "run-7").unwrap();
    assert_eq!(nested.dirs(), [unit_dir.join("run-7")]);
    // Below a delegated unit, the caller's own sub-cgroup is fine too.
    std::fs::create_dir(unit_dir.join("worker")).unwrap();
    let caller = format!("0::/{service}/worker\n");
    let nested = NestedCgroup::create(&layout, caller.as_bytes(), "run-8").unwrap();
    assert_eq!(nested.dirs(), [unit_dir.join("worker/run-8")]);
}
