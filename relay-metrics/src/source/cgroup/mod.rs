//! cgroup source for v2, v1 and hybrid hosts.
//!
//! - [`discover`] finds the hierarchies in `/proc/self/mountinfo` ([`CgroupLayout`]).
//! - [`resolve`] / [`resolve_for_pid`] turn a cgroup path or a process into a [`CgroupTarget`]:
//!   its directory in the unified hierarchy and in each v1 hierarchy.
//! - [`CgroupValuesReader`] is the one reader of a cgroup's files, through held descriptors: a
//!   measured cgroup's own counters and settings, the cumulative totals' memory high-water mark
//!   and storage bytes per device, and the scope's values with its effective limits.
//! - [`CgroupReader`] gives the scope's values as a [`CgroupSample`], each value group tagged
//!   with the cgroup version it came from.
//! - [`subtree_pids`] / [`owns_exclusively`] give a subtree's processes and Relay's exclusive-
//!   cgroup rule.
//!
//! A controller is read from v1 when the layout binds it to a v1 hierarchy and from v2 otherwise;
//! a controller is bound to exactly one hierarchy, so there is never a choice between two numbers.

mod blkio;
mod io;
mod layout;
mod membership;
mod nest;
mod parse;
mod pattern;
mod reader;
mod sample;
mod scan;
mod stat;
mod target;
mod values;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

use crate::source::file::SourceError;

pub(crate) use blkio::UNCOUNTED as BLKIO_UNCOUNTED;
#[cfg(test)]
pub(crate) use layout::discover;
#[cfg(test)]
pub(crate) use layout::Mount;
pub use layout::{parse_proc_cgroup, CgroupLayout};
pub(crate) use membership::cgroup_id;
pub(crate) use membership::SubtreeWalker;
#[cfg(test)]
pub(crate) use membership::{owns_exclusively, subtree_pids};
pub use nest::{remove_dirs, NestedCgroup};
pub(crate) use parse::PsiTotals;
pub use parse::{
    keyed_u64, parse_cpu_list_count, parse_cpu_max, parse_limit, parse_psi, parse_v1_cpu_quota,
    parse_v1_memory_limit, CpuQuota,
};
pub(crate) use pattern::CgroupPattern;
pub(crate) use reader::{CgroupReader, ScopeTotals};
pub(crate) use sample::{CgroupFields, CgroupSample};
#[cfg(test)]
pub(crate) use sample::{CpuSample, MemorySample, PidsSample, PressureSample};
pub(crate) use scan::{MembershipId, Scan, Scanner, Selection};
pub(crate) use stat::working_set;
pub(crate) use target::{resolve, resolve_for_pid, CgroupTarget};
#[cfg(test)]
pub(crate) use values::SETTINGS_EVERY;
pub(crate) use values::{CgroupValuesReader, MeasuredFiles};

/// The cgroup interface a value was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CgroupVersion {
    /// A v1 hierarchy (`/sys/fs/cgroup/<controller>` on hybrid hosts).
    V1,
    /// The unified hierarchy.
    V2,
}

/// Why a cgroup could not be found or read.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// The path given is not a usable cgroup path.
    #[error("invalid cgroup path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The cgroup exists in no mounted hierarchy.
    #[error("cgroup {path:?} does not exist in any mounted cgroup hierarchy")]
    NotFound {
        /// The cgroup path (or a description of the process whose cgroups were looked up).
        path: String,
    },
    /// The cgroup (or process) was removed; expected during churn, not a failure.
    #[error("{path}: cgroup or process is gone")]
    Gone {
        /// The directory or file that disappeared.
        path: PathBuf,
    },
    /// Reading a file failed.
    #[error(transparent)]
    Source(#[from] SourceError),
}

impl CgroupError {
    /// True for [`CgroupError::Gone`].
    pub fn is_gone(&self) -> bool {
        matches!(self, Self::Gone { .. })
    }
}
