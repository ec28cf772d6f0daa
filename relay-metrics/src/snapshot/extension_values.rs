//! The values tables of the other sections of `extensions`: every number of the collector's
//! status, the measured scope, the nanosecond CPU times, the kernel events, the sample ages, the
//! sampler, the cumulative totals, the measured cgroups' walk, the GPU devices and their limit
//! events and the per-CPU modes, declared once with its JSON path (under `extensions`), unit
//! and source. The scope's cgroups (`cgroups[]`) and the measured cgroups (`targets.cgroups[]`)
//! have their own tables (`snapshot/scope_values.rs`, `snapshot/target_values.rs`); the
//! measured cgroups' numbers that no family of theirs carries as it is (their per-device,
//! per-GPU and per-interface lists, histogram, OOM victims and the parts only the cAdvisor
//! naming reads) are rows here.
//!
//! A section's numbers are one table over [`Extensions`]; the items of a list are a table over
//! the item's struct, its paths relative to the item. The tests hold each table to its struct
//! (every number of the struct's JSON has one row, which reads it), the tables together to
//! the whole `extensions` object (every number of it is a row of one table), and
//! docs/METRICS.md's list to the tables. `output/metrics` (the collector's and cumulative
//! families) and `output/gpu_metrics` are checked against them by their own tests.

use super::values::{Number, ValueRow, ValueUnit};
use super::{
    CgroupTargetReport, CpuModeSeconds, DeviceIo, Extensions, GpuDeviceReport, GpuLimitEvent,
    MigInstanceReport, OomVictim, TargetDeviceIo, TargetGpuUse, TargetInterface, TargetOomVictim,
    XidErrorCount,
};

/// A row of a section that is always there: `$section.$field` of [`Extensions`].
macro_rules! field {
    ($section:ident . $field:ident, $unit:ident, $source:literal) => {
        ValueRow::<Extensions> {
            json_path: concat!(stringify!($section), ".", stringify!($field)),
            unit: ValueUnit::$unit,
            source: $source,
            read: |e| e.$section.$field.number(),
        }
    };
}

/// A row of a section that may be `null`: `$section.$field` of [`Extensions`] (or of `$ty`).
macro_rules! inside {
    ($section:ident . $field:ident, $unit:ident, $source:literal) => {
        inside!(Extensions: $section.$field, $unit, $source)
    };
    ($ty:ty: $section:ident . $field:ident, $unit:ident, $source:literal) => {
        ValueRow::<$ty> {
            json_path: concat!(stringify!($section), ".", stringify!($field)),
            unit: ValueUnit::$unit,
            source: $source,
            read: |e| e.$section.as_ref().and_then(|s| s.$field.number()),
        }
    };
}

/// A row of a list's item: its field `$field` (of its part `$via`, which serde flattens).
macro_rules! item {
    ($item:ty: $field:ident $(in $via:ident)?, $unit:ident, $source:literal) => {
        ValueRow::<$item> {
            json_path: stringify!($field),
            unit: ValueUnit::$unit,
            source: $source,
            read: |i| i.$($via.)?$field.number(),
        }
    };
}

/// The numbers of `extensions` outside lists, in the JSON's order.
#[rustfmt::skip]
pub const EXTENSION_VALUES: &[ValueRow<Extensions>] = &[
    field!(collector.sequence, Count, "snapshots taken by this collector, this one included"),
    field!(collector.collect_duration_usec, Microseconds, "wall time this collection took"),
    field!(collector.online_cpus, Count,
        "CPUs online on the collecting machine when the collector started (the bound of a \
         recording's CPU rates)"),
    field!(collector.unchanged_rule_misses, Count,
        "measured cgroups the backstop found changed although the unchanged-cgroup rule said \
         they could not be (a bug in the rule: always 0)"),
    field!(collector.unchanged_reused_reads, Count,
        "measured cgroup reads that reused the last CPU usage and pressure values, the rule \
         having proved them unchanged"),
    field!(target.root_pid, Identifier, "root process of `process_tree` / `application_process`"),
    inside!(precise_cpu.run_time_ns, Nanoseconds,
        "Σ each process's scheduler run time, its exited threads included (task iterator: `signal->sum_sched_runtime` + the live threads' `se.sum_exec_runtime`); `null` on the procfs source, which has no file for it"),
    inside!(precise_cpu.run_queue_wait_ns, Nanoseconds,
        "Σ `/proc/<pid>/schedstat` time runnable but waiting for a CPU"),
    inside!(precise_cpu.run_rate_logical_processors, Cores,
        "rate of `run_time_ns` since the previous sample"),
    inside!(precise_cpu.cgroup_usage_ns, Nanoseconds,
        "cgroup CPU usage: v2 `cpu.stat` `usage_usec`, v1 `cpuacct.usage`"),
    inside!(precise_cpu.cgroup_usage_rate_logical_processors, Cores,
        "rate of `cgroup_usage_ns` since the previous sample"),
    field!(kernel_events.processes_created, Count, "eBPF: processes created in scope"),
    field!(kernel_events.processes_exited, Count, "eBPF: processes of the scope that exited"),
    field!(kernel_events.involuntary_switches, Count, "eBPF: involuntary context switches in scope"),
    field!(kernel_events.run_queue_delay_count, Count, "eBPF: run-queue delays observed in scope"),
    field!(kernel_events.run_queue_delay_total_ns, Nanoseconds, "eBPF: their total"),
    field!(kernel_events.reclaim_stall_count, Count, "eBPF: memory-reclaim stalls in scope"),
    field!(kernel_events.reclaim_stall_total_ns, Nanoseconds, "eBPF: their total time"),
    field!(kernel_events.oom_kills, Count, "eBPF: OOM kills of processes in scope"),
    field!(kernel_events.ring_buffer_drops, Count, "eBPF: events lost to a full ring buffer"),
    field!(sample_ages.private_memory_ms, Milliseconds, "age of `memory.private`"),
    field!(sample_ages.gpu_ms, Milliseconds, "age of the GPU values"),
    field!(sample_ages.cgroups_ms, Milliseconds, "age of `extensions.cgroups`"),
    field!(sample_ages.system_wide_ms, Milliseconds,
        "age of the machine-wide values (system memory, filesystems, network interfaces)"),
    field!(sample_ages.filesystems_ms, Milliseconds, "age of the filesystem capacities"),
    inside!(sampler.interval_usec, Microseconds, "the sampling period"),
    inside!(sampler.tick_index, Count, "index of this tick since the series started"),
    inside!(sampler.tick_lateness_usec, Microseconds, "how late this tick woke up"),
    inside!(sampler.missed_ticks_total, Count, "ticks skipped because a collection overran them"),
    inside!(cumulative.cpu_user_ns, Nanoseconds,
        "user-mode CPU time since `since`, by `method` (`/proc/stat`, the cgroup's `cpu.stat` \
         or `cpuacct`, the process tree's live and reaped times)"),
    inside!(cumulative.cpu_system_ns, Nanoseconds, "kernel-mode CPU time, as `cpu_user_ns`"),
    inside!(cumulative.storage_read_bytes, Bytes,
        "bytes read from block devices (`/proc/diskstats`, `io.stat` / `blkio`, `read_bytes`)"),
    inside!(cumulative.storage_write_bytes, Bytes, "bytes written, as `storage_read_bytes`"),
    inside!(cumulative.syscall_read_bytes, Bytes, "bytes passed to read-like system calls (`rchar`)"),
    inside!(cumulative.syscall_write_bytes, Bytes,
        "bytes passed to write-like system calls (`wchar`)"),
    inside!(cumulative.processes_created, Count,
        "processes created in the scope (eBPF in every scope, threads not counted; `null` without the eBPF programs, with the reason)"),
    inside!(cumulative.processes_exited, Count, "processes of the scope that exited"),
    inside!(cumulative.memory_peak_bytes, Bytes,
        "v2 `memory.peak`, v1 `memory.max_usage_in_bytes` (cgroup methods only)"),
    inside!(targets.depth, Count, "the deepest level of the measured cgroups' walk, if bounded"),
    inside!(targets.matched, Count, "cgroups selected by the last walk, before `max_targets`"),
    inside!(targets.dropped, Count, "selected cgroups left out at `max_targets`"),
];

/// A run-queue delay histogram (`kernel_events.run_queue_delay_log2_ns[]`, and a measured
/// cgroup's `kernel_events.run_queue_histogram[]`): one row, its buckets.
pub const RUN_QUEUE_DELAY_BUCKET_VALUES: &[ValueRow<u64>] = &[ValueRow {
    json_path: "",
    unit: ValueUnit::Count,
    source: "eBPF: bucket `i` counts the run-queue delays in `[2^i, 2^(i+1))` ns",
    read: |count| count.number(),
}];

/// `kernel_events.recent_oom_victims[]`.
#[rustfmt::skip]
pub const OOM_VICTIM_VALUES: &[ValueRow<OomVictim>] = &[
    item!(OomVictim: pid, Identifier, "eBPF: the OOM killer's victim"),
    item!(OomVictim: rss_kib, Kibibytes, "eBPF: its anonymous, file and shmem resident memory"),
    item!(OomVictim: time_ns, Nanoseconds, "eBPF: when, since boot (`CLOCK_MONOTONIC`)"),
];

/// `cumulative.devices[]`.
#[rustfmt::skip]
pub const CUMULATIVE_DEVICE_VALUES: &[ValueRow<DeviceIo>] = &[
    item!(DeviceIo: read_bytes, Bytes, "the cgroup's `io.stat` `rbytes` (v1 `blkio`) on the device"),
    item!(DeviceIo: write_bytes, Bytes, "the cgroup's `io.stat` `wbytes` (v1 `blkio`) on the device"),
];

/// `gpu.devices[]`: NVML (NVIDIA) or the DRM device's sysfs and hwmon files.
#[rustfmt::skip]
pub const GPU_DEVICE_VALUES: &[ValueRow<GpuDeviceReport>] = &[
    item!(GpuDeviceReport: index, Identifier, "NVML index (NVIDIA only)"),
    item!(GpuDeviceReport: violation_power_seconds, Seconds,
        "NVML violation time: clocks held down by the power limit, since the driver loaded"),
    item!(GpuDeviceReport: violation_thermal_seconds, Seconds, "… by thermal limits"),
    item!(GpuDeviceReport: violation_board_limit_seconds, Seconds, "… by the board limit"),
    item!(GpuDeviceReport: violation_reliability_seconds, Seconds, "… by the reliability limit"),
    item!(GpuDeviceReport: utilization_percent, Percent,
        "DRM `gpu_busy_percent`, or NVML's utilisation"),
    item!(GpuDeviceReport: power_watts in readings, Watts, "power draw"),
    item!(GpuDeviceReport: power_limit_watts in readings, Watts, "enforced power limit"),
    item!(GpuDeviceReport: energy_joules in readings, Joules, "energy since the driver loaded"),
    item!(GpuDeviceReport: temperature_celsius in readings, Celsius, "GPU temperature"),
    item!(GpuDeviceReport: memory_temperature_celsius in readings, Celsius, "memory temperature"),
    item!(GpuDeviceReport: sm_clock_hz in readings, Hertz, "SM clock"),
    item!(GpuDeviceReport: memory_clock_hz in readings, Hertz, "memory clock"),
    item!(GpuDeviceReport: graphics_clock_hz in readings, Hertz, "graphics clock"),
    item!(GpuDeviceReport: sm_clock_max_hz in readings, Hertz, "maximum SM clock"),
    item!(GpuDeviceReport: memory_clock_max_hz in readings, Hertz, "maximum memory clock"),
    item!(GpuDeviceReport: graphics_clock_max_hz in readings, Hertz, "maximum graphics clock"),
    item!(GpuDeviceReport: ecc_corrected_volatile in readings, Count,
        "corrected ECC errors since the driver loaded"),
    item!(GpuDeviceReport: ecc_uncorrected_volatile in readings, Count,
        "uncorrected ECC errors since the driver loaded"),
    item!(GpuDeviceReport: ecc_corrected_aggregate in readings, Count,
        "corrected ECC errors over the device's life"),
    item!(GpuDeviceReport: ecc_uncorrected_aggregate in readings, Count,
        "uncorrected ECC errors over the device's life"),
    item!(GpuDeviceReport: remapped_rows_correctable in readings, Count,
        "rows remapped after correctable errors"),
    item!(GpuDeviceReport: remapped_rows_uncorrectable in readings, Count,
        "rows remapped after uncorrectable errors"),
    item!(GpuDeviceReport: pcie_tx_bytes_per_second in readings, BytesPerSecond,
        "PCIe transmit throughput (the driver's 20 ms sample)"),
    item!(GpuDeviceReport: pcie_rx_bytes_per_second in readings, BytesPerSecond,
        "PCIe receive throughput (the driver's 20 ms sample)"),
    item!(GpuDeviceReport: pcie_replays in readings, Count, "PCIe replays since the driver loaded"),
    item!(GpuDeviceReport: encoder_utilization_percent in readings, Percent,
        "video encoder utilisation"),
    item!(GpuDeviceReport: decoder_utilization_percent in readings, Percent,
        "video decoder utilisation"),
];

/// `gpu.devices[].xid_errors[]`.
#[rustfmt::skip]
pub const XID_ERROR_VALUES: &[ValueRow<XidErrorCount>] = &[
    item!(XidErrorCount: xid, Identifier, "the XID code (NVML events)"),
    item!(XidErrorCount: count, Count, "errors of that code since the collector started"),
];

/// `gpu.devices[].mig_instances[]`.
#[rustfmt::skip]
pub const MIG_INSTANCE_VALUES: &[ValueRow<MigInstanceReport>] = &[
    item!(MigInstanceReport: index, Identifier, "position among the device's MIG devices"),
    item!(MigInstanceReport: memory_used_bytes, Bytes, "NVML: memory in use by the instance"),
    item!(MigInstanceReport: memory_total_bytes, Bytes, "NVML: memory of the instance"),
];

/// `gpu.limit_events[]`.
#[rustfmt::skip]
pub const GPU_LIMIT_EVENT_VALUES: &[ValueRow<GpuLimitEvent>] = &[
    item!(GpuLimitEvent: index, Identifier, "NVML index of the device"),
    item!(GpuLimitEvent: count, Count,
        "sampling periods with the reason active (`power_cap`, `thermal`, `hw_slowdown`), or \
         XID errors (`xid`), since counting began"),
    item!(GpuLimitEvent: sampled_periods, Count,
        "GPU sampling periods in which the reasons could be read (`null` for `xid`)"),
    item!(GpuLimitEvent: throttled_seconds, Seconds,
        "NVML violation time since counting began (`power_cap`, `thermal`; else `null`)"),
];

/// `cpu_modes[]`: `/proc/stat`'s `cpuN` lines (global scope, `cadvisor` naming).
#[rustfmt::skip]
pub const CPU_MODE_VALUES: &[ValueRow<CpuModeSeconds>] = &[
    item!(CpuModeSeconds: cpu, Identifier, "the CPU's number"),
    item!(CpuModeSeconds: user, Seconds, "user mode since boot"),
    item!(CpuModeSeconds: nice, Seconds, "niced user mode"),
    item!(CpuModeSeconds: system, Seconds, "kernel mode"),
    item!(CpuModeSeconds: idle, Seconds, "idle"),
    item!(CpuModeSeconds: iowait, Seconds, "idle with I/O outstanding"),
    item!(CpuModeSeconds: irq, Seconds, "hard interrupts"),
    item!(CpuModeSeconds: softirq, Seconds, "soft interrupts"),
    item!(CpuModeSeconds: steal, Seconds, "taken by the hypervisor"),
];

/// `targets.cgroups[]`: the numbers of a measured cgroup that no family of `TARGET_FAMILIES`
/// (`snapshot/target_values.rs`) reads; the cAdvisor naming reads them (`memory_stat`,
/// `cpu_spec`: present only where it asks) or they label the per-interface series.
#[rustfmt::skip]
pub const TARGET_EXTRA_VALUES: &[ValueRow<CgroupTargetReport>] = &[
    inside!(CgroupTargetReport: memory_stat.rss_bytes, Bytes,
        "anonymous memory: v1 `memory.stat` `total_rss`, v2 `anon`"),
    inside!(CgroupTargetReport: memory_stat.cache_bytes, Bytes,
        "page cache: v1 `memory.stat` `total_cache`, v2 `file`"),
    inside!(CgroupTargetReport: memory_stat.swap_bytes, Bytes,
        "swap in use: v1 `memory.stat` `total_swap`, v2 `memory.swap.current`"),
    inside!(CgroupTargetReport: memory_stat.mapped_file_bytes, Bytes,
        "mapped files: v1 `memory.stat` `total_mapped_file`, v2 `file_mapped`"),
    inside!(CgroupTargetReport: memory_stat.inactive_file_bytes, Bytes,
        "inactive page cache: v1 `memory.stat` `total_inactive_file`, v2 `inactive_file`"),
    inside!(CgroupTargetReport: cpu_spec.quota_us, Microseconds,
        "CFS quota per period: v2 `cpu.max`, v1 `cpu.cfs_quota_us` (`null`: none)"),
    inside!(CgroupTargetReport: cpu_spec.period_us, Microseconds,
        "CFS period: v2 `cpu.max`, v1 `cpu.cfs_period_us`"),
    inside!(CgroupTargetReport: cpu_spec.shares, Count,
        "v1 `cpu.shares`; v2 `cpu.weight` as shares (`2 + (weight - 1) × 262142 / 9999`)"),
    inside!(CgroupTargetReport: network.namespace_inode, Identifier,
        "the inode number of a member process's `/proc/<pid>/ns/net`"),
];

/// `targets.cgroups[].devices[]`: v2 `io.stat`, v1 `blkio` per block device.
#[rustfmt::skip]
pub const TARGET_DEVICE_VALUES: &[ValueRow<TargetDeviceIo>] = &[
    item!(TargetDeviceIo: read_bytes, Bytes, "v2 `io.stat` `rbytes`; v1 `blkio` bytes read"),
    item!(TargetDeviceIo: write_bytes, Bytes, "v2 `io.stat` `wbytes`; v1 `blkio` bytes written"),
    item!(TargetDeviceIo: read_operations, Count, "v2 `io.stat` `rios`; v1 `blkio` reads"),
    item!(TargetDeviceIo: write_operations, Count, "v2 `io.stat` `wios`; v1 `blkio` writes"),
];

/// `targets.cgroups[].gpus[]`: sums over NVML's per-process records of the subtree.
#[rustfmt::skip]
pub const TARGET_GPU_VALUES: &[ValueRow<TargetGpuUse>] = &[
    item!(TargetGpuUse: index, Identifier, "NVML index of the device"),
    item!(TargetGpuUse: processes, Count, "processes of the subtree NVML lists on the device"),
    item!(TargetGpuUse: memory_used_bytes, Bytes, "device memory they use"),
    item!(TargetGpuUse: sm_utilization_percent, Percent,
        "sum of their SM utilisation since the previous query"),
    item!(TargetGpuUse: memory_utilization_percent, Percent,
        "sum of their memory-controller utilisation since the previous query"),
];

/// `targets.cgroups[].kernel_events.oom_victims[]`.
#[rustfmt::skip]
pub const TARGET_OOM_VICTIM_VALUES: &[ValueRow<TargetOomVictim>] = &[
    item!(TargetOomVictim: pid, Identifier, "eBPF: the OOM killer's victim"),
    item!(TargetOomVictim: time_boot_ns, Nanoseconds, "eBPF: when, since boot"),
    item!(TargetOomVictim: anon_rss_kib, Kibibytes, "eBPF: its anonymous resident memory"),
];

/// `targets.cgroups[].network.interfaces[]`: a member process's `/proc/<pid>/net/dev`.
#[rustfmt::skip]
pub const TARGET_INTERFACE_VALUES: &[ValueRow<TargetInterface>] = &[
    item!(TargetInterface: receive_bytes, Bytes, "bytes received"),
    item!(TargetInterface: transmit_bytes, Bytes, "bytes transmitted"),
    item!(TargetInterface: receive_packets, Count, "packets received"),
    item!(TargetInterface: transmit_packets, Count, "packets transmitted"),
    item!(TargetInterface: receive_errors, Count, "receive errors"),
    item!(TargetInterface: transmit_errors, Count, "transmit errors"),
    item!(TargetInterface: receive_dropped, Count, "received packets dropped"),
    item!(TargetInterface: transmit_dropped, Count, "packets dropped on transmit"),
];

#[cfg(test)]
#[path = "extension_values_tests.rs"]
mod tests;
