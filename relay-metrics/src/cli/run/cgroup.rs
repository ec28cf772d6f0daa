//! `run`'s own cgroup: made for the command (unique name with `run`'s pid) below `run`'s own
//! cgroup in every hierarchy it uses ([`NestedCgroup`]), so that every limit `run`'s caller is
//! under applies to the command as it would without `run`, and CPU, memory peak, I/O, pressure
//! and OOM kills come from the kernel and include every descendant. `run` writes only into the
//! directories it made, and removes them when it ends (the guard does it when `run` is killed).

use std::path::PathBuf;

use relay_metrics::internals::cgroup::{CgroupLayout, NestedCgroup};
use relay_metrics::internals::Roots;

pub(super) use relay_metrics::internals::cgroup::remove_dirs;

/// The directories of `run`'s cgroup.
pub(super) struct RunCgroup {
    nested: NestedCgroup,
}

impl RunCgroup {
    /// Makes the cgroup below `run`'s own, or says why it cannot be made (having removed what
    /// it made).
    pub(super) fn create() -> Result<Self, String> {
        let layout =
            CgroupLayout::discover(&Roots::host()).map_err(|e| format!("no cgroup layout: {e}"))?;
        let name = format!("relay-metrics-run-{}", std::process::id());
        NestedCgroup::create_below_own(&layout, &name).map(|nested| Self { nested })
    }

    /// The cgroup's path, as the cgroup scope takes it.
    pub(super) fn path(&self) -> &str {
        self.nested.path()
    }

    /// Its directories, one per hierarchy.
    pub(super) fn dirs(&self) -> Vec<PathBuf> {
        self.nested.dirs()
    }

    /// The made cgroup, for the collector.
    pub(super) fn nested(&self) -> &NestedCgroup {
        &self.nested
    }

    /// Moves `pid` (stopped, so it has no child yet) into every directory.
    pub(super) fn enter(&self, pid: u32) -> Result<(), String> {
        self.nested.enter(pid)
    }

    /// Ends what is left in the cgroup and removes it.
    pub(super) fn remove(self) -> Result<(), String> {
        self.nested.remove()
    }
}
