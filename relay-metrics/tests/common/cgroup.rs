//! A cgroup of the test's own, removed at the end: at the root ([`TestCgroup`]) or below the
//! test's own cgroup in one v1 hierarchy ([`Below`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A cgroup of the test's own on a v2 host, or in each of the given v1 hierarchies that this
/// host mounts; removed when dropped.
pub struct TestCgroup {
    dirs: Vec<PathBuf>,
    /// Its path, as `--cgroup` and `cgroup_path` take it (`/relay-metrics-test-NAME-PID`).
    pub path: String,
}

impl TestCgroup {
    /// Creates `/relay-metrics-test-{name}-{pid}` (in `v1_hierarchies` on a v1 host).
    pub fn new(name: &str, v1_hierarchies: &[&str]) -> Self {
        let path = format!("/relay-metrics-test-{name}-{}", std::process::id());
        let root = Path::new("/sys/fs/cgroup");
        let mut dirs = Vec::new();
        if root.join("cgroup.controllers").exists() {
            dirs.push(root.join(&path[1..]));
        } else {
            for hierarchy in v1_hierarchies {
                if root.join(hierarchy).join("cgroup.procs").exists() {
                    dirs.push(root.join(hierarchy).join(&path[1..]));
                }
            }
        }
        for dir in &dirs {
            std::fs::create_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        Self { dirs, path }
    }

    /// Moves `pid` into the cgroup (in every hierarchy).
    pub fn enter(&self, pid: u32) {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())
                .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", dir.display()));
        }
    }
}

impl Drop for TestCgroup {
    /// Removes the cgroup, waiting up to 5 s per directory for its last member's exit.
    fn drop(&mut self) {
        for dir in &self.dirs {
            for _ in 0..250 {
                if std::fs::remove_dir(dir).is_ok() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The test's own cgroup path in the v1 hierarchy whose `/proc/self/cgroup` field is
/// `controllers`.
pub fn own_path(controllers: &str) -> String {
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .unwrap_or_else(|e| panic!("/proc/self/cgroup: {e}"));
    own.lines()
        .find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let (_, field, path) = (parts.next()?, parts.next()?, parts.next()?);
            (field == controllers).then(|| path.to_string())
        })
        .unwrap_or_else(|| panic!("no {controllers} line in /proc/self/cgroup"))
}

/// A v1 cgroup of the test's own, below the test's own cgroup in `hierarchy`; removed when
/// dropped (waiting up to 5 s for its last member's exit).
pub struct Below {
    /// Its directory.
    pub dir: PathBuf,
    /// Its path in the hierarchy.
    pub path: String,
}

impl Below {
    /// Creates `<own path>/relay-metrics-test-{name}-{pid}` in `hierarchy`.
    pub fn new(hierarchy: &str, name: &str) -> Self {
        let parent = own_path(hierarchy);
        let path = format!(
            "{}/relay-metrics-test-{name}-{}",
            parent.trim_end_matches('/'),
            std::process::id()
        );
        let dir = Path::new("/sys/fs/cgroup").join(hierarchy).join(&path[1..]);
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self { dir, path }
    }

    /// Writes `value` to the cgroup's `file` (a limit).
    pub fn write(&self, file: &str, value: &str) {
        std::fs::write(self.dir.join(file), value)
            .unwrap_or_else(|e| panic!("{}/{file}: {e}", self.dir.display()));
    }
}

impl Drop for Below {
    fn drop(&mut self) {
        for _ in 0..250 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
