//! `run`'s own cgroup: made for the command (unique name with `run`'s pid) in every hierarchy
//! that holds a controller it needs, so that CPU, memory peak, I/O, pressure, throttling and OOM
//! kills come from the kernel and include every descendant. `run` writes only into the
//! directories it made, and removes them when it ends (the guard does it when `run` is killed).

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use relay_metrics::internals::cgroup::CgroupLayout;
use relay_metrics::internals::Roots;

/// Controllers whose v1 hierarchy the cgroup must exist in (CPU totals, memory peak).
const REQUIRED_V1: [&str; 2] = ["cpuacct", "memory"];
/// Controllers used where their v1 hierarchy exists (storage, process counts). Not `cpu`
/// where it is a hierarchy of its own: a new group there is scheduled as one more peer of the
/// root's tasks, which changes how much CPU the command gets (it ran up to twice as fast beside
/// a loaded machine's other tasks), and a group without a quota is never throttled.
const OPTIONAL_V1: [&str; 2] = ["blkio", "pids"];

/// How long removal waits for the cgroup to empty after killing what is left in it.
const EMPTY_WAIT: Duration = Duration::from_secs(2);

/// The directories of `run`'s cgroup.
pub(super) struct RunCgroup {
    /// The path relative to the hierarchies' roots, as the cgroup scope takes it.
    path: String,
    dirs: Vec<PathBuf>,
}

impl RunCgroup {
    /// Makes the cgroup, or says why it cannot be made (having removed what it made).
    pub(super) fn create() -> Result<Self, String> {
        let layout =
            CgroupLayout::discover(&Roots::host()).map_err(|e| format!("no cgroup layout: {e}"))?;
        let name = format!("relay-metrics-run-{}", std::process::id());
        let mut made = Self {
            path: String::new(),
            dirs: Vec::new(),
        };
        let v1_needed = REQUIRED_V1.iter().any(|c| layout.is_v1_bound(c));
        let mut parents: Vec<(PathBuf, String)> = Vec::new();
        if v1_needed {
            for controller in REQUIRED_V1 {
                let Some(hierarchy) = layout.v1_hierarchy(controller) else {
                    return Err(format!(
                        "no cgroup v1 hierarchy carries the {controller} controller"
                    ));
                };
                parents.push((
                    hierarchy.mount.mount_point.clone(),
                    hierarchy.mount.root.clone(),
                ));
            }
            for controller in OPTIONAL_V1 {
                if let Some(hierarchy) = layout.v1_hierarchy(controller) {
                    parents.push((
                        hierarchy.mount.mount_point.clone(),
                        hierarchy.mount.root.clone(),
                    ));
                }
            }
        }
        parents.sort();
        parents.dedup();
        // The unified hierarchy counts CPU even without controllers; on a pure v2 host it is
        // the only one. As an ordinary user, a delegated subtree is the cgroup `run` is in.
        let v2 = layout
            .v2
            .as_ref()
            .map(|mount| (mount.mount_point.clone(), mount.root.clone()));
        let root_of = |root: &str| root.trim_end_matches('/').to_string();
        let mut prefix: Option<String> = None;
        for (mount_point, root) in &parents {
            let dir = mount_point.join(&name);
            if let Err(error) = std::fs::create_dir(&dir) {
                made.remove_dirs_only();
                return Err(format!(
                    "cannot make the cgroup {}: {error} (needs root, or a delegated cgroup v2 subtree)",
                    dir.display()
                ));
            }
            made.dirs.push(dir);
            let this = root_of(root);
            if prefix.get_or_insert_with(|| this.clone()) != &this {
                made.remove_dirs_only();
                return Err("the cgroup hierarchies are mounted at different roots".into());
            }
        }
        if let Some((mount_point, root)) = v2 {
            let dir = mount_point.join(&name);
            match std::fs::create_dir(&dir) {
                Ok(()) => made.dirs.push(dir),
                Err(error) if v1_needed => {
                    tracing::debug!("no v2 directory for run's cgroup: {error}");
                }
                Err(error) => {
                    // Pure v2: try the subtree delegated to us (the cgroup we are in).
                    match delegated_dir(&mount_point, &name) {
                        Some((dir, relative)) if std::fs::create_dir(&dir).is_ok() => {
                            made.dirs.push(dir);
                            made.path = format!("{}{relative}", root_of(&root));
                            return Ok(made);
                        }
                        _ => {
                            return Err(format!(
                                "cannot make the cgroup {}: {error} (needs root, or a delegated cgroup v2 subtree)",
                                dir.display()
                            ))
                        }
                    }
                }
            }
            prefix.get_or_insert_with(|| root_of(&root));
        }
        if made.dirs.is_empty() {
            return Err("no cgroup hierarchy is mounted".into());
        }
        made.path = format!("{}/{name}", prefix.unwrap_or_default());
        Ok(made)
    }

    /// The cgroup's path, as the cgroup scope takes it.
    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// Its directories, one per hierarchy.
    pub(super) fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Moves `pid` (stopped, so it has no child yet) into every directory.
    pub(super) fn enter(&self, pid: Pid) -> Result<(), String> {
        for dir in &self.dirs {
            let procs = dir.join("cgroup.procs");
            std::fs::write(&procs, pid.as_raw().to_string()).map_err(|error| {
                format!("cannot move the command into {}: {error}", procs.display())
            })?;
        }
        Ok(())
    }

    /// Ends what is left in the cgroup and removes it.
    pub(super) fn remove(self) -> Result<(), String> {
        remove_dirs(&self.dirs)
    }

    fn remove_dirs_only(&mut self) {
        for dir in self.dirs.drain(..).rev() {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// The pure-v2 directory below the cgroup `run` is in (a delegated subtree), and its path
/// relative to the mount.
fn delegated_dir(mount_point: &Path, name: &str) -> Option<(PathBuf, String)> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let path = own.lines().find_map(|line| line.strip_prefix("0::"))?;
    let relative = format!("{}/{name}", path.trim_end_matches('/'));
    Some((mount_point.join(relative.trim_start_matches('/')), relative))
}

/// Kills every process still in the directories (the command's leftovers: they are ours) and
/// removes them, deepest first; waits up to [`EMPTY_WAIT`] for the kernel to empty them.
pub(super) fn remove_dirs(dirs: &[PathBuf]) -> Result<(), String> {
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
