//! Turning a cgroup path (or a process) into the directories that hold its interface files.

use std::path::{Path, PathBuf};

use super::layout::{parse_proc_cgroup, CgroupLayout, Mount};
use super::{CgroupError, CgroupVersion};
use crate::source::file::read_once;
use crate::source::Roots;

/// A cgroup's directory in one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupDir {
    /// The cgroup path within its hierarchy (`/system.slice/foo.service`).
    pub path: String,
    /// Its directory, mapped through [`Roots`].
    pub dir: PathBuf,
    /// The hierarchy's mount point: limits are looked up from `dir` up to here, inclusive.
    pub mount_point: PathBuf,
}

impl CgroupDir {
    fn new(mount: &Mount, path: &str) -> Option<Self> {
        Some(Self {
            path: path.to_owned(),
            dir: mount.dir_of(path)?,
            mount_point: mount.mount_point.clone(),
        })
    }

    /// `dir` and each ancestor up to and including the mount point, leaf first. A directory not
    /// below the mount point (which resolution never builds) yields only itself.
    pub(crate) fn levels(&self) -> impl Iterator<Item = &Path> {
        let below = self.dir.starts_with(&self.mount_point);
        let mut next = Some(self.dir.as_path());
        std::iter::from_fn(move || {
            let current = next?;
            next = if below && current != self.mount_point {
                current.parent()
            } else {
                None
            };
            Some(current)
        })
    }
}

/// A cgroup's directory in a v1 hierarchy, with that hierarchy's controllers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct V1Dir {
    /// Controllers bound to the hierarchy (empty for named hierarchies such as `name=systemd`).
    pub controllers: Vec<String>,
    /// The hierarchy's `name=`, if any.
    pub name: Option<String>,
    /// The directory.
    pub dir: CgroupDir,
}

/// Where one cgroup (or the set of cgroups containing a process) lives in every hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CgroupTarget {
    /// The path given to [`resolve`]; `None` for [`resolve_for_pid`], where each hierarchy may
    /// place the process at a different path (see each [`CgroupDir::path`]).
    pub requested: Option<String>,
    /// The directory in the unified hierarchy, if it exists there.
    pub v2: Option<CgroupDir>,
    /// Directories in v1 hierarchies where it exists.
    pub v1: Vec<V1Dir>,
    /// Controllers the layout binds to v1: those are never read from v2 (a controller is bound to
    /// at most one hierarchy, so the v2 directory has no such files or only core ones).
    pub v1_bound: Vec<String>,
}

impl CgroupTarget {
    /// The directory in the v1 hierarchy carrying `controller`.
    pub(crate) fn v1_dir(&self, controller: &str) -> Option<&CgroupDir> {
        self.v1
            .iter()
            .find(|d| d.controllers.iter().any(|c| c == controller))
            .map(|d| &d.dir)
    }

    /// Where `controller`'s files are: its v1 hierarchy when it is bound to v1, the unified
    /// hierarchy otherwise. `None` when the target has no directory there.
    pub(crate) fn controller_dir(&self, controller: &str) -> Option<(CgroupVersion, &CgroupDir)> {
        if self.v1_bound.iter().any(|c| c == controller) {
            self.v1_dir(controller).map(|d| (CgroupVersion::V1, d))
        } else {
            self.v2.as_ref().map(|d| (CgroupVersion::V2, d))
        }
    }

    /// When the cgroup was made, seconds since the epoch, as cAdvisor tells a container's
    /// creation time: the earliest modification time of its directory in each hierarchy and of
    /// the file there that is rarely written after the directory is made (v1
    /// `cgroup.clone_children`, v2 `cgroup.events`), never before `boot` (seconds since the
    /// epoch). `None` when no time can be read.
    ///
    /// Never before the creation, and exact only if the directory was looked up as it was made
    /// (a runtime writing the first process into `cgroup.procs` does): the kernel stamps a
    /// cgroup's directory and each of its files when they are first looked up, not at `mkdir`,
    /// and once the directory's attributes are set (`chmod`, `chown`) it moves the directory's
    /// time to that moment and to each child's creation. So the caller reads it once, when it
    /// first sees the cgroup (at latest the walk after it was made).
    pub(crate) fn creation_time(&self, boot: Option<u64>) -> Option<f64> {
        let modified = |path: &Path| {
            let time = std::fs::metadata(path).ok()?.modified().ok()?;
            Some(
                time.duration_since(std::time::UNIX_EPOCH)
                    .ok()?
                    .as_secs_f64(),
            )
        };
        let v1 = self
            .v1
            .iter()
            .map(|d| (&d.dir.dir, "cgroup.clone_children"));
        let v2 = self.v2.iter().map(|d| (&d.dir, "cgroup.events"));
        let earliest = v1
            .chain(v2)
            .flat_map(|(dir, file)| [modified(dir), modified(&dir.join(file))])
            .flatten()
            .reduce(f64::min)?;
        Some(boot.map_or(earliest, |boot| earliest.max(boot as f64)))
    }

    /// The directory whose `cgroup.procs` tree defines membership: on hybrid/v1 the v1
    /// hierarchy of memory, then cpu, then pids; then the unified hierarchy; then any v1 one.
    pub(crate) fn membership_dir(&self) -> Option<(CgroupVersion, &CgroupDir)> {
        ["memory", "cpu", "pids"]
            .iter()
            .find_map(|c| self.v1_dir(c).map(|d| (CgroupVersion::V1, d)))
            .or_else(|| self.v2.as_ref().map(|d| (CgroupVersion::V2, d)))
            .or_else(|| self.v1.first().map(|d| (CgroupVersion::V1, &d.dir)))
    }
}

fn v1_bound(layout: &CgroupLayout) -> Vec<String> {
    layout
        .v1
        .iter()
        .flat_map(|h| h.controllers.iter().cloned())
        .collect()
}

/// Checks that `cgroup_path` is absolute and has no `..` component, and drops trailing slashes.
fn validate(cgroup_path: &str) -> Result<&str, CgroupError> {
    let invalid = |reason: &str| CgroupError::InvalidPath {
        path: cgroup_path.to_owned(),
        reason: reason.to_owned(),
    };
    if !cgroup_path.starts_with('/') {
        return Err(invalid("a cgroup path must be absolute (start with '/')"));
    }
    if cgroup_path.split('/').any(|part| part == "..") {
        return Err(invalid("a cgroup path must not contain '..' components"));
    }
    if cgroup_path.contains('\0') {
        return Err(invalid("a cgroup path must not contain NUL bytes"));
    }
    let trimmed = cgroup_path.trim_end_matches('/');
    Ok(if trimmed.is_empty() { "/" } else { trimmed })
}

/// Finds `cgroup_path` (as in `/proc/<pid>/cgroup`, e.g. `/system.slice/foo.service`) in the
/// unified hierarchy and every v1 hierarchy where its directory exists.
pub(crate) fn resolve(
    layout: &CgroupLayout,
    cgroup_path: &str,
) -> Result<CgroupTarget, CgroupError> {
    let path = validate(cgroup_path)?;
    let v2 = layout
        .v2
        .as_ref()
        .and_then(|mount| CgroupDir::new(mount, path))
        .filter(|dir| dir.dir.is_dir());
    let v1: Vec<V1Dir> = layout
        .v1
        .iter()
        .filter_map(|h| {
            let dir = CgroupDir::new(&h.mount, path).filter(|dir| dir.dir.is_dir())?;
            Some(V1Dir {
                controllers: h.controllers.clone(),
                name: h.name.clone(),
                dir,
            })
        })
        .collect();
    if v2.is_none() && v1.is_empty() {
        return Err(CgroupError::NotFound {
            path: path.to_owned(),
        });
    }
    Ok(CgroupTarget {
        requested: Some(path.to_owned()),
        v2,
        v1,
        v1_bound: v1_bound(layout),
    })
}

/// The cgroups containing process `pid`, from `<proc>/<pid>/cgroup`: its unified cgroup and its
/// cgroup in each mounted v1 hierarchy. A path outside a mount's root (another cgroup namespace,
/// a bind mount of a subtree) is left out. An exited process gives [`CgroupError::Gone`].
pub(crate) fn resolve_for_pid(
    layout: &CgroupLayout,
    roots: &Roots,
    pid: u32,
) -> Result<CgroupTarget, CgroupError> {
    let file = roots.proc.join(pid.to_string()).join("cgroup");
    let mut buf = Vec::new();
    let content = match read_once(&file, &mut buf) {
        Ok(content) => content,
        Err(error) if error.is_gone() => return Err(CgroupError::Gone { path: file }),
        Err(error) => return Err(error.into()),
    };
    let mut v2 = None;
    let mut v1 = Vec::new();
    for entry in parse_proc_cgroup(content) {
        if entry.is_v2() {
            if v2.is_none() {
                v2 = layout
                    .v2
                    .as_ref()
                    .and_then(|mount| CgroupDir::new(mount, &entry.path));
            }
            continue;
        }
        let Some(hierarchy) = layout
            .v1
            .iter()
            .find(|h| h.matches_proc_field(&entry.controllers))
        else {
            continue;
        };
        if let Some(dir) = CgroupDir::new(&hierarchy.mount, &entry.path) {
            v1.push(V1Dir {
                controllers: hierarchy.controllers.clone(),
                name: hierarchy.name.clone(),
                dir,
            });
        }
    }
    if v2.is_none() && v1.is_empty() {
        return Err(CgroupError::NotFound {
            path: format!("cgroups of process {pid} ({})", file.display()),
        });
    }
    Ok(CgroupTarget {
        requested: None,
        v2,
        v1,
        v1_bound: v1_bound(layout),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_walk_up_to_the_mount_point() {
        let dir = CgroupDir {
            path: "/a/b".into(),
            dir: PathBuf::from("/m/a/b"),
            mount_point: PathBuf::from("/m"),
        };
        let levels: Vec<_> = dir.levels().collect();
        assert_eq!(
            levels,
            vec![Path::new("/m/a/b"), Path::new("/m/a"), Path::new("/m")]
        );
        let outside = CgroupDir {
            path: "/x".into(),
            dir: PathBuf::from("/elsewhere/x"),
            mount_point: PathBuf::from("/m"),
        };
        assert_eq!(outside.levels().count(), 1);
    }

    #[test]
    fn invalid_paths_are_rejected_with_the_path() {
        let layout = CgroupLayout::default();
        for bad in ["relay-test", "", "/a/../b", "/..", "/a/.."] {
            let error = resolve(&layout, bad).unwrap_err();
            assert!(
                matches!(error, CgroupError::InvalidPath { .. }),
                "{bad}: {error}"
            );
            assert!(error.to_string().contains(&format!("{bad:?}")), "{error}");
        }
        assert_eq!(validate("/a/b/").unwrap(), "/a/b");
        assert_eq!(validate("/").unwrap(), "/");
        assert_eq!(validate("/a..b").unwrap(), "/a..b");
    }
}
