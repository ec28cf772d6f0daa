//! NOT API: the one door to the library's internals, for the workspace's own fuzz targets
//! (`fuzz/`: each feeds one parser arbitrary bytes), benches (`benches/`), tools (`tools/`) and
//! end-to-end tests (`tests/`: collectors over fixture trees, the fake-NVML tests). Nothing here is
//! a supported API: it moves whenever the code it points to moves.

pub use crate::source::file::{pread_all, pread_whole, FileKind};
pub use crate::source::reap::{own_children, wait4, Reaped};
pub use crate::source::{HeldFile, Roots};

use crate::{Collector, CollectorError, ResourceMetricsConfig};

/// A collector reading `/proc` and `/sys` below `roots` (a fixture tree).
pub fn collector_with_roots(
    config: ResourceMetricsConfig,
    roots: Roots,
) -> Result<Collector, CollectorError> {
    Collector::with_roots(config, roots)
}

/// How many collects listed the target's processes (the others reused a listing).
pub fn process_listings(collector: &Collector) -> u64 {
    collector.process_listings()
}

/// Copies a fixture tree (directories, files, symlinks as symlinks) into `to`, writable.
pub use crate::source::roots::copy_tree;

/// Per-process procfs files (`/proc/<pid>/{stat,status,statm,io,schedstat,smaps_rollup}`,
/// `task/<tid>/children`), and their reader.
pub mod procfs {
    pub use crate::source::procfs::parse::{
        parse_children, parse_io, parse_schedstat, parse_smaps_rollup_private_kib, parse_stat,
        parse_statm_resident_pages, parse_status_vm_hwm_kib,
    };
    pub use crate::source::procfs::sys::DirentBuffer;
    pub use crate::source::procfs::{children_of, command_line, start_and_exited};
    pub use crate::source::procfs::{ProcessFields, ProcessReader};
}

/// System-wide procfs files (`/proc/stat`, `/proc/meminfo`, `/proc/pressure/*`, `/proc/net/dev`),
/// and their readers.
pub mod system {
    pub use crate::model::InterfaceCounts;
    pub use crate::source::net::{parse_net_dev, NetReader, SYSFS_COUNTERS};
    pub use crate::source::system::{
        cpu_rate_logical_processors, parse_meminfo, parse_pressure, parse_stat, SystemFields,
        SystemReader, SystemSample,
    };
}

/// cgroup interface files, `/proc/<pid>/cgroup` and `/proc/self/mountinfo`.
pub mod cgroup {
    pub use crate::source::cgroup::{
        keyed_u64, parse_cpu_list_count, parse_cpu_max, parse_limit, parse_proc_cgroup, parse_psi,
        parse_v1_cpu_quota, parse_v1_memory_limit, remove_dirs, CgroupLayout, CpuQuota,
        NestedCgroup,
    };
}

/// tracefs `format` files and the `fdinfo` of BPF objects; the programs themselves.
pub mod ebpf {
    pub use crate::source::ebpf::fuzzing::{
        link_program_id, program_stats, sleep_state_mask, tracepoint_config, Formats,
    };
    pub use crate::source::ebpf::{EbpfOptions, EbpfSource};
}

/// Configuration documents (JSON, TOML, Relay `plugins.toml`).
pub mod config {
    pub use crate::config::ResourceMetricsConfig;
}

/// DRM sysfs values and the `fdinfo` of DRM clients; the NVML source and its sampler.
pub mod gpu {
    pub use crate::source::gpu::fdinfo::{
        engine_utilization_percent, parse_drm_fdinfo, utilization_percent, DrmFdinfo,
    };
    pub use crate::source::gpu::{
        throttle_reason_names, GpuDeviceSample, GpuError, GpuProcessSample, GpuSampler,
        GpuThrottleEvent, LostDevice, NvmlDeviceValues, NvmlOptions, NvmlSample, NvmlSource,
        ThrottleCounts, XidCounts, XidDevice, XidWatcher, NVML_LIBRARY_ENV, THROTTLE_REASONS,
    };
}
