//! Writable copies of the fixture trees for the collector's unit tests.

use std::path::Path;

use crate::source::cgroup::{self, CgroupTarget};
use crate::source::Roots;

/// Copies a fixture tree (directories, files, symlinks as symlinks) into `to`.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let kind = entry.file_type().unwrap();
        let target = to.join(entry.file_name());
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), &target).unwrap();
        } else if kind.is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A writable copy of the cgroup v2 fixture machine (`proc` and `sys`), with its cgroup
/// `/relay-test`: pid 4242 in it, 4243 in its child `helper`.
pub(super) fn cgroup_v2_machine() -> (tempfile::TempDir, CgroupTarget) {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cgroup-v2");
    copy_tree(&fixture, dir.path());
    let layout = cgroup::discover(&Roots::fixture(dir.path())).unwrap();
    let target = cgroup::resolve(&layout, "/relay-test").unwrap();
    (dir, target)
}
