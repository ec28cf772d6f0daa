//! Writable copies of the fixture trees for the collector's unit tests.

use std::path::Path;

use crate::source::cgroup::{self, CgroupTarget};
use crate::source::roots::copy_tree;
use crate::source::Roots;

/// A writable copy of the cgroup v2 fixture machine (`proc` and `sys`), with its cgroup
/// `/relay-test`: pid 4242 in it, 4243 in its child `helper`.
pub(super) fn cgroup_v2_machine() -> (tempfile::TempDir, CgroupTarget) {
    let dir = tempfile::tempdir().unwrap();
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/cgroup-v2");
    copy_tree(&fixture, dir.path()).unwrap();
    let layout = cgroup::discover(&Roots::fixture(dir.path())).unwrap();
    let target = cgroup::resolve(&layout, "/relay-test").unwrap();
    (dir, target)
}
