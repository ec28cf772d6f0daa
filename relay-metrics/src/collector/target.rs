//! What a collector measures, resolved once when it is created.

use crate::config::{validate_cgroup_path, ResourceMetricsConfig, ScopeSetting};
use crate::snapshot::MeasurementScope;
use crate::source::cgroup::{self, CgroupLayout, CgroupTarget};
use crate::source::procfs::{is_kernel_thread, thread_group_id, ProcessFields, ProcessReader};
use crate::source::Roots;

use super::CollectorError;

/// The resolved measurement target.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Every process of the system.
    Global,
    /// A root process (and, for a tree, its live descendants).
    Process {
        /// Root pid.
        pid: u32,
        /// Its start time (ticks since boot), captured at creation: a different start time
        /// later means the pid now belongs to another process.
        start_time_ticks: u64,
        /// True for `process_tree`, false for `application_process`.
        tree: bool,
    },
    /// Every process of a cgroup subtree.
    Cgroup {
        /// The path as configured.
        path: String,
        /// The directories of that cgroup in each hierarchy.
        resolved: Box<CgroupTarget>,
    },
}

impl Target {
    /// The snapshot scope of this target.
    pub(crate) fn scope(&self) -> MeasurementScope {
        match self {
            Self::Global => MeasurementScope::Global,
            Self::Process { tree: true, .. } => MeasurementScope::ProcessTree,
            Self::Process { tree: false, .. } => MeasurementScope::ApplicationProcess,
            Self::Cgroup { .. } => MeasurementScope::Cgroup,
        }
    }

    /// Resolves the configured scope. `runtime_default` means the calling process's tree, as in
    /// Relay's embedded APIs. Fails with a clear message for an unknown pid or cgroup.
    pub(crate) fn resolve(
        config: &ResourceMetricsConfig,
        roots: &Roots,
        layout: Option<&CgroupLayout>,
    ) -> Result<Self, CollectorError> {
        let root_pid = config.root_pid.unwrap_or_else(std::process::id);
        match config.measurement_scope {
            ScopeSetting::Global => Ok(Self::Global),
            ScopeSetting::RuntimeDefault | ScopeSetting::ProcessTree => {
                Self::process(roots, root_pid, true)
            }
            ScopeSetting::ApplicationProcess => Self::process(roots, root_pid, false),
            ScopeSetting::Cgroup => {
                let path = config.cgroup_path.clone().ok_or_else(|| {
                    CollectorError::Target("the cgroup scope needs a cgroup path".into())
                })?;
                validate_cgroup_path(&path).map_err(CollectorError::Target)?;
                let layout = layout.ok_or_else(|| {
                    CollectorError::Target("no cgroup file system is mounted".into())
                })?;
                let resolved = cgroup::resolve(layout, &path)
                    .map_err(|error| CollectorError::Target(error.to_string()))?;
                Ok(Self::Cgroup {
                    path,
                    resolved: Box::new(resolved),
                })
            }
        }
    }

    /// The cgroup scope on directories already resolved (a cgroup made for the target).
    pub(crate) fn made(
        config: &ResourceMetricsConfig,
        resolved: CgroupTarget,
    ) -> Result<Self, CollectorError> {
        let path = match (&config.measurement_scope, &config.cgroup_path) {
            (ScopeSetting::Cgroup, Some(path)) => path.clone(),
            _ => {
                return Err(CollectorError::Target(
                    "a cgroup made for the target needs the cgroup scope and its path".into(),
                ))
            }
        };
        Ok(Self::Cgroup {
            path,
            resolved: Box::new(resolved),
        })
    }

    fn process(roots: &Roots, pid: u32, tree: bool) -> Result<Self, CollectorError> {
        let mut reader = ProcessReader::new(roots, 1)
            .map_err(|error| CollectorError::Target(error.to_string()))?;
        let sample = reader
            .sample(pid, &ProcessFields::STAT_ONLY)
            .map_err(|error| match error.is_gone() {
                true => CollectorError::Target(format!("process {pid} does not exist")),
                false => CollectorError::Target(format!("cannot read process {pid}: {error}")),
            })?;
        check_is_user_process(roots, pid)?;
        Ok(Self::Process {
            pid,
            start_time_ticks: sample.start_time_ticks,
            tree,
        })
    }
}

/// Refuses a thread id (`/proc/<tid>` opens like a process, so it would be measured as its
/// whole process under the wrong pid) and a kernel thread (no memory, no files, no children of
/// its own: every value would be empty). A status or stat file that cannot be read or parsed
/// (a fixture tree without one) is no evidence against the pid.
fn check_is_user_process(roots: &Roots, pid: u32) -> Result<(), CollectorError> {
    let mut buf = Vec::new();
    if let Some(tgid) = thread_group_id(roots, pid, &mut buf) {
        if tgid != pid {
            return Err(CollectorError::Target(format!(
                "{pid} is a thread of process {tgid}, not a process: measure process {tgid}"
            )));
        }
    }
    if is_kernel_thread(roots, pid, &mut buf) == Some(true) {
        return Err(CollectorError::Target(format!(
            "process {pid} is a kernel thread: it has no memory, files or processes of its own to measure"
        )));
    }
    Ok(())
}
