//! Discovery of the cgroups measured one by one: one walk of one hierarchy per snapshot, which
//! also lists the processes of every cgroup it visits inside a selected subtree (so a target's
//! per-process sums cover its whole subtree, from one `cgroup.procs` read per directory).
//!
//! The walk descends only where a pattern can still match or inside a selected cgroup, skips
//! listing leaf directories (link count 2), opens directories relative to the mount's held
//! descriptor and reuses its buffers: its cost is a few syscalls per visited cgroup.

use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};

use super::layout::{CgroupLayout, Mount};
use super::membership::read_procs;
use super::pattern::CgroupPattern;
use super::CgroupVersion;
use crate::source::file::is_gone;
use crate::source::procfs::sys::{is_dot, open_dir_at, open_file_at, DirentBuffer};

/// Which cgroups are selected.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// Glob patterns; empty: every cgroup down to `depth` that holds a process.
    pub patterns: Vec<CgroupPattern>,
    /// The deepest selected level (`/a` is 1); `None`: unbounded (patterns only).
    pub depth: Option<u32>,
}

impl Selection {
    fn selects(&self, path: &str, depth: u32) -> bool {
        if self.depth.is_some_and(|max| depth > max) {
            return false;
        }
        if self.patterns.is_empty() {
            return depth >= 1;
        }
        self.patterns.iter().any(|pattern| pattern.matches(path))
    }

    fn may_select_below(&self, path: &str, depth: u32) -> bool {
        if self.depth.is_some_and(|max| depth >= max) {
            return false;
        }
        self.patterns.is_empty()
            || self
                .patterns
                .iter()
                .any(|pattern| pattern.may_match_below(path))
    }
}

/// One cgroup the walk visited.
#[derive(Debug, Clone)]
pub(crate) struct ScannedCgroup {
    /// Its path in [`Scan::text`].
    path: Range<usize>,
    /// `/a` is 1.
    pub depth: u32,
    /// Its nearest visited ancestor, by index.
    pub parent: Option<usize>,
    /// Selected by the patterns (or, without patterns, within the depth).
    pub selected: bool,
    /// Its own processes in [`Scan::pids`] (empty unless inside a selected subtree).
    pub pids: Range<usize>,
}

/// The result of one walk, reused from walk to walk.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The visited cgroups, parents before children.
    pub cgroups: Vec<ScannedCgroup>,
    /// The processes of the visited cgroups.
    pub pids: Vec<u32>,
    text: String,
    /// Why part of the tree could not be walked (a directory or `cgroup.procs` that cannot be
    /// read), one line per cause; the walk goes on without it.
    pub errors: Vec<String>,
}

impl Scan {
    /// The path of `cgroup`.
    pub(crate) fn path(&self, cgroup: &ScannedCgroup) -> &str {
        &self.text[cgroup.path.clone()]
    }
}

/// Walks one hierarchy each time it is asked.
#[derive(Debug)]
pub(crate) struct Scanner {
    mount: Mount,
    version: CgroupVersion,
    root: Option<OwnedFd>,
    dirents: DirentBuffer,
    names: Vec<u8>,
    buf: Vec<u8>,
    relative: Vec<u8>,
    stack: Vec<usize>,
}

impl Scanner {
    /// A scanner of the hierarchy that defines membership: on v1 and hybrid hosts the v1
    /// `memory` hierarchy (else `cpu`, `pids`, any), the unified one on pure v2 hosts. `None`
    /// without any cgroup mount.
    pub(crate) fn new(layout: &CgroupLayout) -> Option<Self> {
        let v1 = ["memory", "cpu", "cpuacct", "pids"]
            .iter()
            .find_map(|controller| layout.v1_hierarchy(controller))
            .map(|h| (CgroupVersion::V1, h.mount.clone()));
        let (version, mount) = v1
            .or_else(|| layout.v2.clone().map(|m| (CgroupVersion::V2, m)))
            .or_else(|| {
                layout
                    .v1
                    .first()
                    .map(|h| (CgroupVersion::V1, h.mount.clone()))
            })?;
        Some(Self {
            mount,
            version,
            root: None,
            dirents: DirentBuffer::default(),
            names: Vec::new(),
            buf: Vec::new(),
            relative: Vec::new(),
            stack: Vec::new(),
        })
    }

    /// The hierarchy walked.
    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Its mount point.
    pub(crate) fn mount_point(&self) -> &std::path::Path {
        &self.mount.mount_point
    }

    /// Walks the hierarchy into `scan` (cleared first).
    pub(crate) fn scan(&mut self, selection: &Selection, scan: &mut Scan) {
        scan.cgroups.clear();
        scan.pids.clear();
        scan.text.clear();
        scan.errors.clear();
        let root = match self.root.take() {
            Some(root) => root,
            None => match std::fs::File::open(&self.mount.mount_point) {
                Ok(file) => OwnedFd::from(file),
                Err(error) => {
                    scan.errors.push(format!(
                        "cannot open the cgroup mount {}: {error}",
                        self.mount.mount_point.display()
                    ));
                    return;
                }
            },
        };
        let base = self.mount.root.trim_end_matches('/').to_owned();
        scan.text
            .push_str(if base.is_empty() { "/" } else { &base });
        let root_path = 0..scan.text.len();
        let root_selected = selection.selects(&scan.text, 0);
        scan.cgroups.push(ScannedCgroup {
            path: root_path,
            depth: 0,
            parent: None,
            selected: root_selected,
            pids: 0..0,
        });
        self.stack.clear();
        self.stack.push(0);
        let mut inside = vec![root_selected];
        while let Some(index) = self.stack.pop() {
            let cgroup = scan.cgroups[index].clone();
            let path = scan.text[cgroup.path.clone()].to_owned();
            let is_inside = inside[index];
            let dir = if index == 0 {
                match root.try_clone() {
                    Ok(fd) => fd,
                    Err(error) => {
                        scan.errors.push(format!("{path}: {error}"));
                        continue;
                    }
                }
            } else {
                self.relative.clear();
                self.relative
                    .extend_from_slice(relative_part(&path, &base).as_bytes());
                match open_dir_at(root.as_fd(), &self.relative) {
                    Ok(fd) => fd,
                    // Removed since it was listed.
                    Err(error) if gone(&error) => continue,
                    Err(error) => {
                        scan.errors
                            .push(format!("cannot open cgroup {path}: {error}"));
                        continue;
                    }
                }
            };
            if is_inside {
                let start = scan.pids.len();
                let read = open_file_at(dir.as_fd(), b"cgroup.procs")
                    .and_then(|procs| read_procs(&procs, &mut self.buf, &mut scan.pids));
                match read {
                    Ok(()) => {}
                    Err(error) if gone(&error) => scan.pids.truncate(start),
                    Err(error) => {
                        scan.pids.truncate(start);
                        scan.errors.push(format!(
                            "cannot list the processes of cgroup {path}: {error}"
                        ));
                    }
                }
                scan.cgroups[index].pids = start..scan.pids.len();
            }
            if !is_inside && !selection.may_select_below(&path, cgroup.depth) {
                continue;
            }
            // A leaf cgroup (link count 2) has no subdirectory: its listing is skipped.
            if nix::sys::stat::fstat(dir.as_fd()).is_ok_and(|stat| stat.st_nlink == 2) {
                continue;
            }
            self.names.clear();
            let names = &mut self.names;
            let listed = self.dirents.for_each_typed(dir.as_fd(), |name, is_dir| {
                if is_dir && !is_dot(name) {
                    names.extend_from_slice(name);
                    names.push(0);
                }
            });
            match listed {
                Ok(()) => {}
                Err(error) if gone(&error) => continue,
                Err(error) => {
                    scan.errors
                        .push(format!("cannot list cgroup {path}: {error}"));
                    continue;
                }
            }
            let first_child = scan.cgroups.len();
            for name in self.names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
                let Ok(name) = std::str::from_utf8(name) else {
                    scan.errors.push(format!(
                        "a cgroup below {path} has a name that is not UTF-8: skipped"
                    ));
                    continue;
                };
                let start = scan.text.len();
                scan.text.push_str(&path);
                if !path.ends_with('/') {
                    scan.text.push('/');
                }
                scan.text.push_str(name);
                let depth = cgroup.depth + 1;
                let selected = selection.selects(&scan.text[start..], depth);
                scan.cgroups.push(ScannedCgroup {
                    path: start..scan.text.len(),
                    depth,
                    parent: Some(index),
                    selected,
                    pids: 0..0,
                });
                inside.push(is_inside || selected);
            }
            // Reversed: the stack pops them in listing order.
            self.stack.extend((first_child..scan.cgroups.len()).rev());
        }
        self.root = Some(root);
    }
}

/// `path` relative to the mount's root `base` (without a leading `/`).
fn relative_part<'p>(path: &'p str, base: &str) -> &'p str {
    path.strip_prefix(base)
        .unwrap_or(path)
        .trim_start_matches('/')
}

fn gone(error: &std::io::Error) -> bool {
    is_gone(error) || error.raw_os_error() == Some(libc::ENODEV)
}
