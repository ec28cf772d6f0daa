//! Copies a fixture tree into a temporary directory, for tests that edit it. Shared by the
//! library's unit tests and the fixture snapshot tests (two crates: the library includes it
//! by `#[path]`).

use std::path::Path;

/// Copies a fixture tree (directories, files, symlinks as symlinks) into `to`.
pub(crate) fn copy_tree(from: &Path, to: &Path) {
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
