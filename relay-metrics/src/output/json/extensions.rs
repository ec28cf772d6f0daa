//! The `extensions` object.

use super::Writer;
use crate::snapshot::*;

pub(super) fn write_extensions(w: &mut Writer<'_>, extensions: &Extensions) {
    let Extensions {
        collector,
        target,
        precise_cpu,
        cgroups,
        kernel_events,
        sample_ages,
        sampler,
        unavailable,
        cumulative,
        targets,
        gpu,
        cpu_modes,
    } = extensions;
    w.first("collector");
    collector_info(w, collector);
    w.key("target");
    target_info(w, target);
    w.key("precise_cpu").option(precise_cpu, write_precise_cpu);
    w.key("cgroups").list(cgroups, cgroup_report);
    w.key("kernel_events");
    write_kernel_events(w, kernel_events);
    w.key("sample_ages");
    write_sample_ages(w, sample_ages);
    w.key("sampler").option(sampler, sampler_info);
    w.key("unavailable").list(unavailable, |w, entry| {
        let Unavailable { field, reason } = entry;
        w.first("field").string(field);
        w.key("reason").string(reason);
        w.close();
    });
    w.key("cumulative").option(cumulative, write_cumulative);
    // Absent unless asked for, so that other snapshots keep their shape.
    if let Some(targets) = targets {
        w.key("targets").serde(targets);
    }
    // Absent rather than `null` when no GPU reported (as serde skips it).
    if let Some(gpu) = gpu {
        w.key("gpu");
        super::gpu::write_gpu(w, gpu);
    }
    if let Some(modes) = cpu_modes {
        w.key("cpu_modes").serde(modes);
    }
    w.close();
}

fn write_cumulative(w: &mut Writer<'_>, cumulative: &Cumulative) {
    let Cumulative {
        since,
        method,
        reason,
        cpu_user_ns,
        cpu_system_ns,
        storage_read_bytes,
        storage_write_bytes,
        syscall_read_bytes,
        syscall_write_bytes,
        processes_created,
        processes_exited,
        memory_peak_bytes,
        devices,
    } = cumulative;
    w.first("since")
        .option(since, |w, since| w.timestamp(since));
    w.key("method").name(method.as_str());
    w.key("reason").opt_string(reason.as_deref());
    w.key("cpu_user_ns").opt_u64(*cpu_user_ns);
    w.key("cpu_system_ns").opt_u64(*cpu_system_ns);
    w.key("storage_read_bytes").opt_u64(*storage_read_bytes);
    w.key("storage_write_bytes").opt_u64(*storage_write_bytes);
    w.key("syscall_read_bytes").opt_u64(*syscall_read_bytes);
    w.key("syscall_write_bytes").opt_u64(*syscall_write_bytes);
    w.key("processes_created").opt_u64(*processes_created);
    w.key("processes_exited").opt_u64(*processes_exited);
    w.key("memory_peak_bytes").opt_u64(*memory_peak_bytes);
    w.key("devices").list(devices, |w, device| {
        let DeviceIo {
            device,
            read_bytes,
            write_bytes,
        } = device;
        w.first("device").string(device);
        w.key("read_bytes").u64(*read_bytes);
        w.key("write_bytes").u64(*write_bytes);
        w.close();
    });
    w.close();
}

fn collector_info(w: &mut Writer<'_>, collector: &CollectorInfo) {
    let CollectorInfo {
        name,
        version,
        sequence,
        collect_duration_usec,
        online_cpus,
        process_source,
        process_source_reason,
        unchanged_rule_misses,
        unchanged_reused_reads,
        cgroup_source,
        cgroup_source_reason,
    } = collector;
    w.first("name").string(name);
    w.key("version").string(version);
    w.key("sequence").u64(*sequence);
    w.key("collect_duration_usec").u64(*collect_duration_usec);
    w.key("online_cpus").opt_u32(*online_cpus);
    w.key("process_source").string(process_source);
    w.key("process_source_reason")
        .opt_string(process_source_reason.as_deref());
    w.key("unchanged_rule_misses").u64(*unchanged_rule_misses);
    w.key("unchanged_reused_reads").u64(*unchanged_reused_reads);
    w.key("cgroup_source").opt_string(cgroup_source.as_deref());
    w.key("cgroup_source_reason")
        .opt_string(cgroup_source_reason.as_deref());
    w.close();
}

fn target_info(w: &mut Writer<'_>, target: &TargetInfo) {
    let TargetInfo {
        root_pid,
        cgroup_path,
    } = target;
    w.first("root_pid").opt_u32(*root_pid);
    w.key("cgroup_path").opt_string(cgroup_path.as_deref());
    w.close();
}

fn write_precise_cpu(w: &mut Writer<'_>, cpu: &PreciseCpu) {
    let PreciseCpu {
        run_time_ns,
        run_queue_wait_ns,
        run_rate_logical_processors,
        cgroup_usage_ns,
        cgroup_usage_rate_logical_processors,
    } = cpu;
    w.first("run_time_ns").opt_u64(*run_time_ns);
    w.key("run_queue_wait_ns").opt_u64(*run_queue_wait_ns);
    w.key("run_rate_logical_processors")
        .opt_f64(*run_rate_logical_processors);
    w.key("cgroup_usage_ns").opt_u64(*cgroup_usage_ns);
    w.key("cgroup_usage_rate_logical_processors")
        .opt_f64(*cgroup_usage_rate_logical_processors);
    w.close();
}

fn cgroup_report(w: &mut Writer<'_>, cgroup: &CgroupReport) {
    let CgroupReport {
        role,
        path,
        cpu_version,
        memory_version,
        pids_version,
        cpu_usage_ns,
        cpu_periods,
        cpu_throttled_periods,
        cpu_throttled_usec,
        cpu_effective_limit_logical_processors,
        memory_limit_bytes,
        memory_current_bytes,
        memory_events,
        pids_current,
        pids_max,
        pids_max_events,
        pressure,
    } = cgroup;
    let version = |w: &mut Writer<'_>, version: &Option<CgroupVersionName>| {
        w.option(version, |w, version| w.name(version.as_str()));
    };
    w.first("role").name(role.as_str());
    w.key("path").string(path);
    w.key("cpu_version");
    version(w, cpu_version);
    w.key("memory_version");
    version(w, memory_version);
    w.key("pids_version");
    version(w, pids_version);
    w.key("cpu_usage_ns").opt_u64(*cpu_usage_ns);
    w.key("cpu_periods").opt_u64(*cpu_periods);
    w.key("cpu_throttled_periods")
        .opt_u64(*cpu_throttled_periods);
    w.key("cpu_throttled_usec").opt_u64(*cpu_throttled_usec);
    w.key("cpu_effective_limit_logical_processors")
        .opt_f64(*cpu_effective_limit_logical_processors);
    w.key("memory_limit_bytes").opt_u64(*memory_limit_bytes);
    w.key("memory_current_bytes").opt_u64(*memory_current_bytes);
    for (key, value) in MemoryEventCounts::SCOPE_KEYS
        .iter()
        .zip(memory_events.values())
    {
        w.key(key).opt_u64(value);
    }
    w.key("pids_current").opt_u64(*pids_current);
    w.key("pids_max").opt_u64(*pids_max);
    w.key("pids_max_events").opt_u64(*pids_max_events);
    w.key("pressure").option(pressure, pressure_totals);
    w.close();
}

fn pressure_totals(w: &mut Writer<'_>, pressure: &PressureTotals) {
    let PressureTotals {
        cpu_some_usec,
        cpu_full_usec,
        memory_some_usec,
        memory_full_usec,
        io_some_usec,
        io_full_usec,
    } = pressure;
    w.first("cpu_some_usec").opt_u64(*cpu_some_usec);
    w.key("cpu_full_usec").opt_u64(*cpu_full_usec);
    w.key("memory_some_usec").opt_u64(*memory_some_usec);
    w.key("memory_full_usec").opt_u64(*memory_full_usec);
    w.key("io_some_usec").opt_u64(*io_some_usec);
    w.key("io_full_usec").opt_u64(*io_full_usec);
    w.close();
}

fn write_kernel_events(w: &mut Writer<'_>, events: &KernelEvents) {
    let KernelEvents {
        active,
        reason,
        counting_since,
        processes_created,
        processes_exited,
        involuntary_switches,
        run_queue_delay_count,
        run_queue_delay_total_ns,
        run_queue_delay_log2_ns,
        reclaim_stall_count,
        reclaim_stall_total_ns,
        oom_kills,
        recent_oom_victims,
        ring_buffer_drops,
    } = events;
    w.first("active").bool(*active);
    w.key("reason").opt_string(reason.as_deref());
    w.key("counting_since")
        .option(counting_since, |w, since| w.timestamp(since));
    w.key("processes_created").opt_u64(*processes_created);
    w.key("processes_exited").opt_u64(*processes_exited);
    w.key("involuntary_switches").opt_u64(*involuntary_switches);
    w.key("run_queue_delay_count")
        .opt_u64(*run_queue_delay_count);
    w.key("run_queue_delay_total_ns")
        .opt_u64(*run_queue_delay_total_ns);
    w.key("run_queue_delay_log2_ns")
        .option(run_queue_delay_log2_ns, |w, buckets| {
            w.list(buckets, |w, count| w.u64(*count));
        });
    w.key("reclaim_stall_count").opt_u64(*reclaim_stall_count);
    w.key("reclaim_stall_total_ns")
        .opt_u64(*reclaim_stall_total_ns);
    w.key("oom_kills").opt_u64(*oom_kills);
    w.key("recent_oom_victims")
        .list(recent_oom_victims, |w, victim| {
            let OomVictim {
                pid,
                comm,
                rss_kib,
                time_ns,
            } = victim;
            w.first("pid").u32(*pid);
            w.key("comm").string(comm);
            w.key("rss_kib").u64(*rss_kib);
            w.key("time_ns").u64(*time_ns);
            w.close();
        });
    w.key("ring_buffer_drops").opt_u64(*ring_buffer_drops);
    w.close();
}

fn write_sample_ages(w: &mut Writer<'_>, ages: &SampleAges) {
    let SampleAges {
        private_memory_ms,
        gpu_ms,
        cgroups_ms,
        system_wide_ms,
        filesystems_ms,
    } = ages;
    w.first("private_memory_ms").opt_u64(*private_memory_ms);
    w.key("gpu_ms").opt_u64(*gpu_ms);
    w.key("cgroups_ms").opt_u64(*cgroups_ms);
    w.key("system_wide_ms").opt_u64(*system_wide_ms);
    w.key("filesystems_ms").opt_u64(*filesystems_ms);
    w.close();
}

fn sampler_info(w: &mut Writer<'_>, sampler: &SamplerInfo) {
    let SamplerInfo {
        interval_usec,
        tick_index,
        tick_lateness_usec,
        missed_ticks_total,
    } = sampler;
    w.first("interval_usec").u64(*interval_usec);
    w.key("tick_index").u64(*tick_index);
    w.key("tick_lateness_usec").u64(*tick_lateness_usec);
    w.key("missed_ticks_total").u64(*missed_ticks_total);
    w.close();
}
