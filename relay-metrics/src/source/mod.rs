//! Everything that touches files, syscalls, BPF or NVML lives here. Each reader returns raw
//! counters (`Option`s where a value can be absent); rates, sums and units are computed later by
//! `model`, which never does I/O.

#[cfg(feature = "agent")]
pub(crate) mod allocator;
pub(crate) mod cgroup;
pub(crate) mod cgroup_iter;
#[cfg(feature = "agent")]
pub(crate) mod cri;
#[cfg(feature = "agent")]
pub(crate) mod docker;
pub(crate) mod ebpf;
pub(crate) mod file;
pub(crate) mod fs;
pub(crate) mod gpu;
pub(crate) mod held;
pub(crate) mod net;
pub(crate) mod parse;
pub(crate) mod procfs;
pub(crate) mod reap;
pub(crate) mod roots;
#[cfg(feature = "agent")]
pub(crate) mod runtime_api;
pub(crate) mod system;
pub(crate) mod task_iter;
pub(crate) mod xattr;

pub use file::HeldFile;
pub(crate) use file::SourceError;
pub use roots::Roots;
