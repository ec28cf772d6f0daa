//! Everything that touches files, syscalls, BPF or NVML lives here. Each reader returns raw
//! counters (`Option`s where a value can be absent); rates, sums and units are computed later by
//! `model`, which never does I/O.

pub mod cgroup;
pub mod ebpf;
pub mod file;
pub mod fs;
pub mod gpu;
pub(crate) mod held;
pub mod net;
pub(crate) mod parse;
pub mod procfs;
pub mod reap;
pub mod roots;
pub mod system;
pub mod task_iter;

pub use file::{HeldFile, SourceError};
pub use roots::Roots;
