//! The parsers of kernel text and configuration, reachable from outside the crate for the fuzz
//! targets in `fuzz/` (each target feeds one of them arbitrary bytes). Nothing here is a supported
//! API: it moves whenever the code it points to moves.

/// Per-process procfs files (`/proc/<pid>/{stat,status,statm,io,schedstat,smaps_rollup}`,
/// `task/<tid>/children`).
pub mod procfs {
    pub use crate::source::procfs::parse::{
        parse_children, parse_io, parse_schedstat, parse_smaps_rollup_private_kib, parse_stat,
        parse_statm_resident_pages, parse_status_vm_hwm_kib,
    };
}

/// System-wide procfs files (`/proc/stat`, `/proc/meminfo`, `/proc/pressure/*`, `/proc/net/dev`).
pub mod system {
    pub use crate::source::net::parse_net_dev;
    pub use crate::source::system::{
        cpu_rate_logical_processors, parse_meminfo, parse_pressure, parse_stat,
    };
}

/// cgroup interface files, `/proc/<pid>/cgroup` and `/proc/self/mountinfo`.
pub mod cgroup {
    pub use crate::source::cgroup::{
        keyed_u64, parse_cpu_list_count, parse_cpu_max, parse_limit, parse_proc_cgroup, parse_psi,
        parse_v1_cpu_quota, parse_v1_memory_limit, CgroupLayout, CpuQuota,
    };
}

/// tracefs `format` files and the `fdinfo` of BPF objects.
pub mod ebpf {
    pub use crate::source::ebpf::fuzzing::{
        link_program_id, program_stats, sleep_state_mask, tracepoint_config, Formats,
    };
}

/// Configuration documents (JSON, TOML, Relay `plugins.toml`).
pub mod config {
    pub use crate::config::ResourceMetricsConfig;
}

/// DRM sysfs values and the `fdinfo` of DRM clients.
pub mod gpu {
    pub use crate::source::gpu::fdinfo::{
        engine_utilization_percent, parse_drm_fdinfo, utilization_percent, DrmFdinfo,
    };
}
