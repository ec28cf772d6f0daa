//! A cgroup of one's own for `relay-metrics run`, made below the caller's cgroup in every
//! hierarchy it uses, never beside it: every limit the caller is under (memory, CPU quota,
//! pids, I/O) is a limit of an ancestor, and the kernel applies it to the command as it would
//! without `run`. In v1 the caller's path differs per hierarchy (`/proc/self/cgroup` has one
//! line each), so each directory is made below that hierarchy's own line.
//!
//! What is never done: a cgroup in a hierarchy carrying `cpu` (a group of its own is scheduled
//! as one more peer of the caller's tasks, which changes how much CPU the command gets), a write
//! into a systemd unit that is not delegated (systemd owns it), and enabling a controller in the
//! caller's cgroup (it holds processes: v2's "no internal processes" rule would need moving
//! them). Where no cgroup can be made, the caller measures the process tree and says why.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::layout::{parse_proc_cgroup, CgroupLayout, Mount, ProcCgroupEntry, V1Hierarchy};
use super::target::{CgroupDir, CgroupTarget, V1Dir};

/// Controllers whose v1 hierarchy the cgroup must exist in (CPU totals, memory peak).
const REQUIRED_V1: [&str; 2] = ["cpuacct", "memory"];
/// Controllers used where their v1 hierarchy exists (storage, process counts).
const OPTIONAL_V1: [&str; 2] = ["blkio", "pids"];
/// Names systemd gives the cgroups of its units.
const UNIT_SUFFIXES: [&str; 3] = [".service", ".scope", ".slice"];
/// The extended attributes systemd sets on a delegated unit's cgroup (`Delegate=yes`): the
/// first by the system manager, the second by a user manager.
const DELEGATE_XATTRS: [&str; 2] = ["trusted.delegate", "user.delegate"];
/// How long removal waits for the cgroup to empty after killing what is left in it.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// One directory made for the cgroup.
#[derive(Debug, Clone)]
struct Made {
    /// The v1 hierarchy it is in; `None` for the unified one.
    v1: Option<V1Hierarchy>,
    /// Its cgroup path within that hierarchy.
    path: String,
    dir: PathBuf,
    mount_point: PathBuf,
}

/// A cgroup made below a process's own cgroups; its directories are removed by
/// [`NestedCgroup::remove`] (or [`remove_dirs`] from another process).
#[derive(Debug)]
pub struct NestedCgroup {
    made: Vec<Made>,
    v1_bound: Vec<String>,
    notes: Vec<String>,
}

impl NestedCgroup {
    /// Makes the cgroup `name` below this process's own cgroups (`/proc/self/cgroup`), or says
    /// why it cannot be made.
    pub fn create_below_own(layout: &CgroupLayout, name: &str) -> Result<Self, String> {
        let own = std::fs::read("/proc/self/cgroup")
            .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
        Self::create(layout, &own, name)
    }

    /// Makes the cgroup `name` below the cgroups listed in `caller` (the content of the
    /// caller's `/proc/<pid>/cgroup`), or says why it cannot be made (having removed what it
    /// made).
    pub fn create(layout: &CgroupLayout, caller: &[u8], name: &str) -> Result<Self, String> {
        let own: Vec<ProcCgroupEntry> = parse_proc_cgroup(caller).collect();
        let mut nested = Self {
            made: Vec::new(),
            v1_bound: layout
                .v1
                .iter()
                .flat_map(|h| h.controllers.iter().cloned())
                .collect(),
            notes: Vec::new(),
        };
        let v1_needed = REQUIRED_V1.iter().any(|c| layout.is_v1_bound(c));
        if v1_needed {
            if let Err(why) = nested.make_v1_dirs(layout, &own, name) {
                nested.remove_dirs_only();
                return Err(why);
            }
            if layout.is_v1_bound("cpu") {
                nested.notes.push(
                    "CPU throttling is not measured: run makes no cgroup in the v1 cpu hierarchy \
                     (one would be scheduled as a peer of the caller's tasks and change the \
                     command's share of CPU); a CPU quota the caller is under still applies"
                        .into(),
                );
            }
        }
        if let Some(mount) = &layout.v2 {
            match nested.make_v2_dir(mount, &own, name) {
                Ok(()) => {}
                // On a hybrid host the unified hierarchy carries no controller `run` reads.
                Err(why) if v1_needed => tracing::debug!("no v2 directory for run's cgroup: {why}"),
                Err(why) => {
                    nested.remove_dirs_only();
                    return Err(why);
                }
            }
        }
        if nested.made.is_empty() {
            return Err("no cgroup hierarchy is mounted".into());
        }
        Ok(nested)
    }

    fn make_v1_dirs(
        &mut self,
        layout: &CgroupLayout,
        own: &[ProcCgroupEntry],
        name: &str,
    ) -> Result<(), String> {
        let wanted = REQUIRED_V1
            .iter()
            .map(|c| (c, true))
            .chain(OPTIONAL_V1.iter().map(|c| (c, false)));
        for (controller, required) in wanted {
            let Some(hierarchy) = layout.v1_hierarchy(controller) else {
                if required {
                    return Err(format!(
                        "no cgroup v1 hierarchy carries the {controller} controller"
                    ));
                }
                continue;
            };
            if self.made.iter().any(|m| m.v1.as_ref() == Some(hierarchy)) {
                continue;
            }
            match self.make_v1_dir(layout, hierarchy, own, name) {
                Ok(()) => {}
                Err(why) if required => return Err(why),
                Err(why) => self.notes.push(format!("no {controller} cgroup: {why}")),
            }
        }
        Ok(())
    }

    fn make_v1_dir(
        &mut self,
        layout: &CgroupLayout,
        hierarchy: &V1Hierarchy,
        own: &[ProcCgroupEntry],
        name: &str,
    ) -> Result<(), String> {
        let controllers = hierarchy.controllers.join(",");
        if hierarchy.has("cpu") {
            return Err(format!(
                "the v1 {controllers} hierarchy carries cpu: a cgroup of run's own there would be \
                 scheduled as one more peer of the caller's tasks, which changes how much CPU the \
                 command gets"
            ));
        }
        let entry = own
            .iter()
            .find(|e| !e.is_v2() && hierarchy.matches_proc_field(&e.controllers))
            .ok_or_else(|| {
                format!("run's own cgroup in the v1 {controllers} hierarchy is not listed")
            })?;
        let parent = parent_dir(&hierarchy.mount, &entry.path, &controllers)?;
        // systemd marks delegation in its own hierarchy (the unified one, or name=systemd).
        let mut marks = vec![hierarchy.mount.clone()];
        marks.extend(layout.v2.iter().cloned());
        marks.extend(
            layout
                .v1
                .iter()
                .filter(|h| h.name.as_deref() == Some("systemd"))
                .map(|h| h.mount.clone()),
        );
        if let Some(unit) = undelegated_unit(&entry.path, &marks) {
            return Err(undelegated_reason(&entry.path, &unit));
        }
        let dir = make_dir(&parent, name)?;
        self.made.push(Made {
            v1: Some(hierarchy.clone()),
            path: child_path(&entry.path, name),
            dir,
            mount_point: hierarchy.mount.mount_point.clone(),
        });
        Ok(())
    }

    fn make_v2_dir(
        &mut self,
        mount: &Mount,
        own: &[ProcCgroupEntry],
        name: &str,
    ) -> Result<(), String> {
        let entry = own
            .iter()
            .find(|e| e.is_v2())
            .ok_or("run's own cgroup v2 is not listed")?;
        let parent = parent_dir(mount, &entry.path, "v2")?;
        if let Some(unit) = undelegated_unit(&entry.path, std::slice::from_ref(mount)) {
            return Err(undelegated_reason(&entry.path, &unit));
        }
        let dir = make_dir(&parent, name)?;
        // Nested without enabling anything: the parent holds the caller, and a controller
        // enabled below a cgroup with processes is refused (EBUSY), unless they move.
        let controllers =
            std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
        let missing: Vec<&str> = ["memory", "io", "pids"]
            .into_iter()
            .filter(|c| !controllers.split_whitespace().any(|have| have == *c))
            .collect();
        if !missing.is_empty() && self.made.is_empty() {
            self.notes.push(format!(
                "run's cgroup has no {} controller: it is nested below the caller's cgroup {}, \
                 which holds processes, and enabling a controller there would mean moving them \
                 (\"no internal processes\"); the caller's limits still apply",
                missing.join(", "),
                entry.path
            ));
        }
        self.made.push(Made {
            v1: None,
            path: child_path(&entry.path, name),
            dir,
            mount_point: mount.mount_point.clone(),
        });
        Ok(())
    }

    /// The cgroup's path, as the cgroup scope takes it: its path in the hierarchy that decides
    /// membership (v1 memory, else the unified one).
    pub fn path(&self) -> &str {
        self.made
            .iter()
            .find(|m| m.v1.as_ref().is_some_and(|h| h.has("memory")))
            .or_else(|| self.made.iter().find(|m| m.v1.is_none()))
            .or_else(|| self.made.first())
            .map_or("/", |m| m.path.as_str())
    }

    /// Its directories, one per hierarchy.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.made.iter().map(|m| m.dir.clone()).collect()
    }

    /// What the cgroup lacks, and why (a controller it could not have, a hierarchy left out).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// True when the memory controller's files are in the cgroup (v1 or v2).
    pub fn has_memory_controller(&self) -> bool {
        self.made.iter().any(|m| match &m.v1 {
            Some(h) => h.has("memory"),
            None => std::fs::read_to_string(m.dir.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory")),
        })
    }

    /// Moves `pid` (best stopped, so that it has no child yet) into every directory.
    pub fn enter(&self, pid: u32) -> Result<(), String> {
        for made in &self.made {
            let procs = made.dir.join("cgroup.procs");
            std::fs::write(&procs, pid.to_string()).map_err(|error| {
                format!("cannot move the command into {}: {error}", procs.display())
            })?;
        }
        Ok(())
    }

    /// The pids in the cgroup (from the membership directory), in no particular order.
    pub fn members(&self) -> Vec<u32> {
        let made = self
            .made
            .iter()
            .find(|m| m.v1.as_ref().is_some_and(|h| h.has("memory")))
            .or_else(|| self.made.first());
        made.and_then(|m| std::fs::read_to_string(m.dir.join("cgroup.procs")).ok())
            .map(|procs| {
                procs
                    .lines()
                    .filter_map(|l| l.trim().parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The directories as a cgroup target (only those made: a hierarchy left out is not read
    /// at the caller's level, which would count the caller's other processes).
    pub(crate) fn target(&self) -> CgroupTarget {
        let dir = |m: &Made| CgroupDir {
            path: m.path.clone(),
            dir: m.dir.clone(),
            mount_point: m.mount_point.clone(),
        };
        CgroupTarget {
            requested: None,
            v2: self.made.iter().find(|m| m.v1.is_none()).map(dir),
            v1: self
                .made
                .iter()
                .filter_map(|m| {
                    let h = m.v1.as_ref()?;
                    Some(V1Dir {
                        controllers: h.controllers.clone(),
                        name: h.name.clone(),
                        dir: dir(m),
                    })
                })
                .collect(),
            v1_bound: self.v1_bound.clone(),
        }
    }

    /// Ends what is left in the cgroup and removes it.
    pub fn remove(self) -> Result<(), String> {
        remove_dirs(&self.dirs())
    }

    fn remove_dirs_only(&mut self) {
        for made in self.made.drain(..).rev() {
            let _ = std::fs::remove_dir(&made.dir);
        }
    }
}

/// The caller's directory in `mount`, or why it is not visible there.
fn parent_dir(mount: &Mount, path: &str, hierarchy: &str) -> Result<PathBuf, String> {
    mount.dir_of(path).ok_or_else(|| {
        format!(
            "run's own cgroup {path} ({hierarchy}) lies outside the hierarchy's mount (which shows {})",
            mount.root
        )
    })
}

fn child_path(parent: &str, name: &str) -> String {
    format!("{}/{name}", parent.trim_end_matches('/'))
}

fn make_dir(parent: &Path, name: &str) -> Result<PathBuf, String> {
    let dir = parent.join(name);
    std::fs::create_dir(&dir).map_err(|error| {
        let hint = match error.raw_os_error() {
            Some(libc::EROFS) => {
                " (the cgroup file system is mounted read-only, as in many containers)"
            }
            Some(libc::EACCES | libc::EPERM) => " (needs root, or a delegated cgroup)",
            _ => "",
        };
        format!("cannot make the cgroup {}: {error}{hint}", dir.display())
    })?;
    Ok(dir)
}

fn undelegated_reason(path: &str, unit: &str) -> String {
    format!(
        "run's own cgroup {path} belongs to the systemd unit {unit}, which is not delegated \
         (Delegate=yes): systemd manages it, and run does not write into it"
    )
}

/// The deepest systemd unit on `path` (e.g. `session-3.scope`) when it is not delegated: no
/// delegate attribute on its directory in any of `mounts`. `None` when the path holds no unit
/// (not a systemd-managed cgroup) or the deepest unit is delegated.
fn undelegated_unit(path: &str, mounts: &[Mount]) -> Option<String> {
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let deepest = components
        .iter()
        .rposition(|c| UNIT_SUFFIXES.iter().any(|s| c.ends_with(s)))?;
    let unit_path = format!("/{}", components[..=deepest].join("/"));
    let delegated = mounts
        .iter()
        .filter_map(|m| m.dir_of(&unit_path))
        .any(|dir| is_delegated(&dir));
    (!delegated).then(|| components[deepest].to_string())
}

/// True when systemd marked `dir` as a delegated unit's cgroup.
fn is_delegated(dir: &Path) -> bool {
    DELEGATE_XATTRS.iter().any(|name| {
        crate::source::xattr::get(dir, name).is_some_and(|value| value.starts_with(b"1"))
    })
}

/// Kills every process still in the directories (the command's leftovers) and removes them,
/// deepest first; waits up to 2 s (`EMPTY_WAIT`) for the kernel to empty them.
pub fn remove_dirs(dirs: &[PathBuf]) -> Result<(), String> {
    let deadline = Instant::now() + EMPTY_WAIT;
    let mut failures = Vec::new();
    for dir in dirs {
        loop {
            kill_members(dir);
            match std::fs::remove_dir(dir) {
                Ok(()) => break,
                Err(error) if error.kind() == ErrorKind::NotFound => break,
                Err(error) if Instant::now() < deadline => {
                    tracing::debug!("{} not removed yet: {error}", dir.display());
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(error) => {
                    failures.push(format!("{}: {error}", dir.display()));
                    break;
                }
            }
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "cannot remove run's cgroup: {}",
            failures.join("; ")
        ))
    }
}

/// SIGKILL to every process listed in the directory (v2 `cgroup.kill` where it exists).
fn kill_members(dir: &Path) {
    if std::fs::write(dir.join("cgroup.kill"), "1").is_ok() {
        return;
    }
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    for pid in procs
        .lines()
        .filter_map(|line| line.trim().parse::<i32>().ok())
    {
        // ESRCH: it exited meanwhile.
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests;
