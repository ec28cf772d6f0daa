//! One test per fixture case: the golden comparison plus the key numbers asserted explicitly.

use serde_json::json;

use crate::support::*;

/// `/relay-test` on a pure v2 host: 4242 and 4243 (in the child `helper`).
#[test]
fn cgroup_v2_relay_test() {
    let case = case("cgroup_v2_relay_test");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(at(&s, "/measurement_scope"), "cgroup");
    assert_eq!(at(&s, "/process_sampling/visible_processes"), 2);
    assert_eq!(at(&s, "/process_sampling/sampled_processes"), 2);
    // CPU: (150 + 50) and (50 + 50) ticks.
    assert_eq!(int(&s, "/cpu/user_time", "milliseconds"), 2000);
    assert_eq!(int(&s, "/cpu/system_time", "milliseconds"), 1000);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 3000);
    is_null(&s, "/cpu/consumption_rate");
    // cpu.stat throttled_usec 7912345 → 7912 ms (truncated); cpu.max 20000/100000 with 4 CPUs.
    assert_eq!(int(&s, "/cpu/throttled_time", "milliseconds"), 7912);
    assert_close(
        num(&s, "/cpu/effective_limit", "logical_processors"),
        0.2,
        "effective_limit",
    );
    assert_eq!(
        int(&s, "/cpu/some_pressure_stall_time", "milliseconds"),
        7890
    );
    assert_eq!(
        int(&s, "/cpu/full_pressure_stall_time", "milliseconds"),
        7801
    );
    assert_eq!(limit_events(&s, "cpu"), events(&[("cpu", "throttled", 98)]));
    // Memory: 64 MiB limit; memory.current 8654848 B = 8452 KiB.
    assert_eq!(int(&s, "/memory/limit", "kibibytes"), 65_536);
    assert_eq!(int(&s, "/memory/environment_accounted", "kibibytes"), 8452);
    assert_eq!(int(&s, "/memory/resident", "kibibytes"), 8192 + 1024);
    assert_eq!(
        int(&s, "/memory/virtual_memory", "kibibytes"),
        20_480 + 10_240
    );
    assert_eq!(int(&s, "/memory/private", "kibibytes"), 4000 + 500);
    is_null(&s, "/memory/peak_resident");
    is_null(&s, "/memory/physical_footprint");
    assert_eq!(
        int(&s, "/memory/some_pressure_stall_time", "milliseconds"),
        0
    );
    assert_eq!(int(&s, "/memory/out_of_memory_event_count", "events"), 0);
    assert_eq!(
        limit_events(&s, "memory"),
        events(&[
            ("memory", "high", 0),
            ("memory", "maximum", 3),
            ("memory", "out_of_memory", 0),
            ("memory", "terminated", 0),
        ])
    );
    // Process: the cgroup scope counts the sampled processes and has no descendants.
    assert_eq!(int(&s, "/process/active_count", "processes"), 2);
    is_null(&s, "/process/descendant_count");
    assert_eq!(int(&s, "/process/thread_count", "threads"), 3);
    assert_eq!(
        int(
            &s,
            "/process/open_file_descriptor_count",
            "file_descriptors"
        ),
        9
    );
    assert_eq!(
        limit_events(&s, "process"),
        events(&[("processes", "maximum", 0)])
    );
    // Disk.
    assert_eq!(int(&s, "/disk/read_data", "bytes"), 409_700);
    assert_eq!(int(&s, "/disk/write_data", "bytes"), 205_000);
    assert_eq!(int(&s, "/disk/read_operations", "operations"), 43);
    assert_eq!(int(&s, "/disk/write_operations", "operations"), 24);
    is_null(&s, "/disk/read_throughput");
    assert_system_values(&s);
    // Extensions: the cgroup's own counters.
    let report = at(&s, "/extensions/cgroups/0");
    assert_eq!(report["role"], "target");
    assert_eq!(report["path"], "/relay-test");
    assert_eq!(report["cpu_version"], "v2");
    assert_eq!(report["cpu_usage_ns"], 2_004_871_000u64);
    assert_eq!(report["cpu_periods"], 101);
    assert_eq!(report["memory_limit_bytes"], 67_108_864);
    assert_eq!(report["pids_current"], 2);
    assert!(report["pids_max"].is_null(), "pids.max is `max`");
    assert_eq!(
        at(&s, "/extensions/precise_cpu/cgroup_usage_ns"),
        2_004_871_000u64
    );
    assert_eq!(at(&s, "/extensions/target/cgroup_path"), "/relay-test");
}

/// In the cgroup scope a schedstat sum that covers only some processes is `null`, as in the
/// tree scopes: 4242 has two threads whose schedstat covers only the main thread, so a sum would
/// be 4243's run time alone, presented as the cgroup's.
#[test]
fn cgroup_scope_precise_run_time_is_never_a_partial_sum() {
    let s = run(&case("cgroup_v2_relay_test"));
    is_null(&s, "/extensions/precise_cpu/run_time_ns");
    is_null(&s, "/extensions/precise_cpu/run_queue_wait_ns");
}

/// `/relay-test` on a pure v1 host (cpu,cpuacct co-mounted): only 4242.
#[test]
fn cgroup_v1_relay_test() {
    let case = case("cgroup_v1_relay_test");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(at(&s, "/process_sampling/sampled_processes"), 1);
    assert_eq!(int(&s, "/cpu/user_time", "milliseconds"), 1500);
    assert_eq!(int(&s, "/cpu/system_time", "milliseconds"), 500);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 2000);
    // v1 cpu.stat throttled_time is in ns: 3912345678 ns → 3912 ms.
    assert_eq!(int(&s, "/cpu/throttled_time", "milliseconds"), 3912);
    // min(quota 20000/100000, cpuset 0-1 = 2).
    assert_close(
        num(&s, "/cpu/effective_limit", "logical_processors"),
        0.2,
        "effective_limit",
    );
    assert_eq!(limit_events(&s, "cpu"), events(&[("cpu", "throttled", 49)]));
    // v1 has no PSI.
    is_null(&s, "/cpu/some_pressure_stall_time");
    is_null(&s, "/memory/some_pressure_stall_time");
    assert_eq!(int(&s, "/memory/limit", "kibibytes"), 65_536);
    assert_eq!(int(&s, "/memory/environment_accounted", "kibibytes"), 8452);
    assert_eq!(int(&s, "/memory/resident", "kibibytes"), 8192);
    // v1: failcnt → maximum, oom_control oom_kill → terminated; no high/oom counters.
    // v1 has no count of OOM situations: the kill count feeds both (source/cgroup/sample.rs).
    assert_eq!(
        limit_events(&s, "memory"),
        events(&[
            ("memory", "maximum", 3),
            ("memory", "out_of_memory", 1),
            ("memory", "terminated", 1),
        ])
    );
    assert_eq!(int(&s, "/memory/out_of_memory_event_count", "events"), 1);
    assert_eq!(int(&s, "/process/active_count", "processes"), 1);
    assert_eq!(int(&s, "/process/thread_count", "threads"), 2);
    assert_eq!(
        limit_events(&s, "process"),
        events(&[("processes", "maximum", 2)])
    );
    assert_eq!(int(&s, "/disk/read_data", "bytes"), 409_600);
    assert_system_values(&s);
    let report = at(&s, "/extensions/cgroups/0");
    assert_eq!(report["cpu_version"], "v1");
    assert_eq!(report["memory_version"], "v1");
    assert_eq!(report["cpu_usage_ns"], 1_043_210_987u64);
    assert_eq!(report["pids_max"], 32);
}

/// `/relay-test` on a hybrid host: v1 controllers plus PSI from the v2 hierarchy.
#[test]
fn cgroup_hybrid_relay_test() {
    let case = case("cgroup_hybrid_relay_test");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(at(&s, "/process_sampling/sampled_processes"), 1);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 2000);
    // 812345678 ns → 812 ms.
    assert_eq!(int(&s, "/cpu/throttled_time", "milliseconds"), 812);
    assert_close(
        num(&s, "/cpu/effective_limit", "logical_processors"),
        0.2,
        "effective_limit",
    );
    assert_eq!(limit_events(&s, "cpu"), events(&[("cpu", "throttled", 10)]));
    // PSI from unified/relay-test: 5000 µs / 1000 µs.
    assert_eq!(int(&s, "/cpu/some_pressure_stall_time", "milliseconds"), 5);
    assert_eq!(int(&s, "/cpu/full_pressure_stall_time", "milliseconds"), 1);
    assert_eq!(
        int(&s, "/memory/some_pressure_stall_time", "milliseconds"),
        0
    );
    assert_eq!(int(&s, "/memory/limit", "kibibytes"), 65_536);
    // memory.usage_in_bytes 389120 = 380 KiB.
    assert_eq!(int(&s, "/memory/environment_accounted", "kibibytes"), 380);
    assert_eq!(
        limit_events(&s, "memory"),
        events(&[
            ("memory", "maximum", 0),
            ("memory", "out_of_memory", 0),
            ("memory", "terminated", 0),
        ])
    );
    assert_eq!(
        limit_events(&s, "process"),
        events(&[("processes", "maximum", 0)])
    );
    assert_system_values(&s);
}

/// Root 100 with children 101 and 102 (102 has three threads), alone in `/app.slice`.
#[test]
fn process_tree() {
    let case = case("process_tree");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(at(&s, "/measurement_scope"), "process_tree");
    assert_eq!(at(&s, "/process_sampling/visible_processes"), 3);
    assert_eq!(at(&s, "/process_sampling/sampled_processes"), 3);
    assert_eq!(
        field_counts(&s),
        counts(&[
            ("cpu.user_time", 3),
            ("cpu.system_time", 3),
            ("cpu.total_time", 3),
            ("memory.resident", 3),
            ("memory.private", 3),
            ("memory.physical_footprint", 0),
            ("memory.virtual_memory", 3),
            ("process.thread_count", 3),
            ("process.open_file_descriptor_count", 3),
            ("process.windows_handle_count", 0),
            ("disk.read_data", 3),
            ("disk.write_data", 3),
            ("disk.read_operations", 3),
            ("disk.write_operations", 3),
            ("disk.read_throughput", 0),
            ("disk.write_throughput", 0),
        ])
    );
    // utime 300+200+100, stime 100+50+50 ticks (cutime/cstime of 100 ignored).
    assert_eq!(int(&s, "/cpu/user_time", "milliseconds"), 6000);
    assert_eq!(int(&s, "/cpu/system_time", "milliseconds"), 2000);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 8000);
    is_null(&s, "/cpu/consumption_rate");
    // The tree owns /app.slice: 150000/100000 quota, cpuset 0-1 → 1.5.
    assert_close(
        num(&s, "/cpu/effective_limit", "logical_processors"),
        1.5,
        "effective_limit",
    );
    assert_eq!(int(&s, "/cpu/throttled_time", "milliseconds"), 250);
    assert_eq!(
        int(&s, "/cpu/some_pressure_stall_time", "milliseconds"),
        300
    );
    assert_eq!(
        int(&s, "/cpu/full_pressure_stall_time", "milliseconds"),
        100
    );
    assert_eq!(limit_events(&s, "cpu"), events(&[("cpu", "throttled", 5)]));
    assert_eq!(
        int(&s, "/memory/resident", "kibibytes"),
        10_240 + 4096 + 2048
    );
    assert_eq!(
        int(&s, "/memory/virtual_memory", "kibibytes"),
        102_400 + 51_200 + 25_600
    );
    assert_eq!(int(&s, "/memory/private", "kibibytes"), 5120 + 2048 + 1024);
    is_null(&s, "/memory/peak_resident");
    assert_eq!(int(&s, "/memory/limit", "kibibytes"), 262_144);
    assert_eq!(
        int(&s, "/memory/environment_accounted", "kibibytes"),
        16_384
    );
    assert_eq!(
        int(&s, "/memory/some_pressure_stall_time", "milliseconds"),
        40
    );
    assert_eq!(
        int(&s, "/memory/full_pressure_stall_time", "milliseconds"),
        20
    );
    assert_eq!(
        limit_events(&s, "memory"),
        events(&[
            ("memory", "high", 2),
            ("memory", "maximum", 1),
            ("memory", "out_of_memory", 0),
            ("memory", "terminated", 0),
        ])
    );
    assert_eq!(int(&s, "/process/active_count", "processes"), 3);
    assert_eq!(int(&s, "/process/descendant_count", "processes"), 2);
    assert_eq!(int(&s, "/process/thread_count", "threads"), 1 + 1 + 3);
    assert_eq!(
        int(
            &s,
            "/process/open_file_descriptor_count",
            "file_descriptors"
        ),
        8 + 4 + 3
    );
    is_null(&s, "/process/lifetime_creation_count");
    is_null(&s, "/process/windows_handle_count");
    assert_eq!(int(&s, "/disk/read_data", "bytes"), 7 * 1024 * 1024);
    assert_eq!(int(&s, "/disk/write_data", "bytes"), 7 * 512 * 1024);
    assert_eq!(int(&s, "/disk/read_operations", "operations"), 600);
    assert_eq!(int(&s, "/disk/write_operations", "operations"), 300);
    is_null(&s, "/disk/read_throughput");
    is_null(&s, "/disk/write_throughput");
    assert_eq!(at(&s, "/disk/filesystems"), &json!([]));
    assert_system_values(&s);
    // schedstat covers only the main thread: 102 has three, so no exact run time for the tree.
    is_null(&s, "/extensions/precise_cpu/run_time_ns");
    assert_eq!(at(&s, "/extensions/target/root_pid"), 100);
    assert_eq!(at(&s, "/extensions/cgroups/0/role"), "containing");
    assert_eq!(at(&s, "/extensions/cgroups/0/path"), "/app.slice");
    assert!(
        unavailable_fields(&s).is_empty(),
        "{}",
        at(&s, "/extensions")
    );
}

/// Root 4242 with child 4243: together they are all of `/relay-test` (4243 in its child).
#[test]
fn process_tree_cgroup_v2() {
    let case = case("process_tree_cgroup_v2");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(int(&s, "/process/active_count", "processes"), 2);
    assert_eq!(int(&s, "/process/descendant_count", "processes"), 1);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 3000);
    // Exclusive owner: the same cgroup values as the cgroup scope.
    assert_eq!(int(&s, "/cpu/throttled_time", "milliseconds"), 7912);
    assert_close(
        num(&s, "/cpu/effective_limit", "logical_processors"),
        0.2,
        "effective_limit",
    );
    assert_eq!(int(&s, "/memory/limit", "kibibytes"), 65_536);
    assert_eq!(int(&s, "/memory/environment_accounted", "kibibytes"), 8452);
    assert_eq!(limit_events(&s, "cpu"), events(&[("cpu", "throttled", 98)]));
}

/// Process 100 alone: `peak_resident` appears; its cgroup also holds 101 and 102, so no
/// cgroup value applies.
#[test]
fn application_process() {
    let case = case("application_process");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(at(&s, "/measurement_scope"), "application_process");
    assert_eq!(at(&s, "/process_sampling/visible_processes"), 1);
    assert_eq!(
        at(
            &s,
            "/process_sampling/field_sampled_processes/memory.peak_resident"
        ),
        1
    );
    assert_eq!(int(&s, "/cpu/user_time", "milliseconds"), 3000);
    assert_eq!(int(&s, "/cpu/system_time", "milliseconds"), 1000);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 4000);
    assert_eq!(int(&s, "/memory/peak_resident", "kibibytes"), 20_480);
    assert_eq!(int(&s, "/memory/resident", "kibibytes"), 10_240);
    assert_eq!(int(&s, "/memory/virtual_memory", "kibibytes"), 102_400);
    assert_eq!(int(&s, "/memory/private", "kibibytes"), 5120);
    assert_eq!(int(&s, "/process/active_count", "processes"), 1);
    assert_eq!(int(&s, "/process/descendant_count", "processes"), 0);
    assert_eq!(int(&s, "/process/thread_count", "threads"), 1);
    assert_eq!(
        int(
            &s,
            "/process/open_file_descriptor_count",
            "file_descriptors"
        ),
        8
    );
    assert_eq!(int(&s, "/disk/read_data", "bytes"), 1024 * 1024);
    assert_eq!(int(&s, "/disk/write_data", "bytes"), 512 * 1024);
    // Not the exclusive owner of /app.slice.
    is_null(&s, "/cpu/effective_limit");
    is_null(&s, "/cpu/throttled_time");
    is_null(&s, "/cpu/some_pressure_stall_time");
    is_null(&s, "/memory/limit");
    is_null(&s, "/memory/environment_accounted");
    is_null(&s, "/memory/out_of_memory_event_count");
    assert_eq!(at(&s, "/cpu/limit_events"), &json!([]));
    assert_eq!(at(&s, "/memory/limit_events"), &json!([]));
    assert_eq!(at(&s, "/process/limit_events"), &json!([]));
    assert_eq!(unavailable_fields(&s), ["cgroup"]);
    // procfs has no file for a process's whole run time (its exited threads included): a sum
    // of the live threads' schedstat would fall whenever one exits.
    is_null(&s, "/extensions/precise_cpu/run_time_ns");
    assert_eq!(
        at(&s, "/extensions/precise_cpu/run_queue_wait_ns"),
        250_000_000u64
    );
    assert_system_values(&s);
}

/// Every process of `global-small`: 1 (no io file), 100, 101, 102, 200.
#[test]
fn global_small() {
    let case = case("global_small");
    let s = run(&case);
    check_golden(case.name, &s);

    assert_eq!(at(&s, "/measurement_scope"), "global");
    assert_eq!(at(&s, "/process_sampling/visible_processes"), 5);
    assert_eq!(at(&s, "/process_sampling/sampled_processes"), 5);
    assert_eq!(
        field_counts(&s),
        counts(&[
            ("cpu.user_time", 5),
            ("cpu.system_time", 5),
            ("cpu.total_time", 5),
            ("process.thread_count", 5),
            ("process.open_file_descriptor_count", 5),
            ("process.windows_handle_count", 0),
            ("disk.read_data", 4),
            ("disk.write_data", 4),
            ("disk.read_operations", 4),
            ("disk.write_operations", 4),
            ("disk.read_throughput", 0),
            ("disk.write_throughput", 0),
        ])
    );
    // utime 5+300+200+100+1, stime 15+100+50+50+2 ticks.
    assert_eq!(int(&s, "/cpu/user_time", "milliseconds"), 6060);
    assert_eq!(int(&s, "/cpu/system_time", "milliseconds"), 2170);
    assert_eq!(int(&s, "/cpu/total_time", "milliseconds"), 8230);
    is_null(&s, "/cpu/consumption_rate");
    is_null(&s, "/cpu/effective_limit");
    is_null(&s, "/cpu/throttled_time");
    // System PSI: 123456789 µs, memory 2000999 / 1000999 µs.
    assert_eq!(
        int(&s, "/cpu/some_pressure_stall_time", "milliseconds"),
        123_456
    );
    assert_eq!(int(&s, "/cpu/full_pressure_stall_time", "milliseconds"), 0);
    assert_eq!(
        int(&s, "/memory/some_pressure_stall_time", "milliseconds"),
        2000
    );
    assert_eq!(
        int(&s, "/memory/full_pressure_stall_time", "milliseconds"),
        1000
    );
    // No per-process memory in global scope.
    is_null(&s, "/memory/resident");
    is_null(&s, "/memory/private");
    is_null(&s, "/memory/virtual_memory");
    is_null(&s, "/memory/limit");
    assert_eq!(int(&s, "/process/active_count", "processes"), 5);
    is_null(&s, "/process/descendant_count");
    assert_eq!(int(&s, "/process/thread_count", "threads"), 7);
    assert_eq!(
        int(
            &s,
            "/process/open_file_descriptor_count",
            "file_descriptors"
        ),
        30
    );
    // Pid 1 has no io file: partial sums over the other four.
    assert_eq!(int(&s, "/disk/read_data", "bytes"), 7 * 1024 * 1024);
    assert_eq!(int(&s, "/disk/write_data", "bytes"), 7 * 512 * 1024 + 4096);
    assert_eq!(int(&s, "/disk/read_operations", "operations"), 620);
    assert_eq!(int(&s, "/disk/write_operations", "operations"), 310);
    assert_system_values(&s);
    assert_eq!(at(&s, "/extensions/cgroups"), &json!([]));
    // Lifetime counts: /proc/vmstat's OOM kills since boot; no since-boot source for OOM
    // episodes or for processes without threads.
    assert_eq!(
        limit_events(&s, "memory"),
        events(&[("memory", "terminated", 3)])
    );
    is_null(&s, "/memory/out_of_memory_event_count");
    is_null(&s, "/process/lifetime_creation_count");
}

/// cpu, disk, network (and gpu) off: those are `null`, the others complete.
#[test]
fn disabled_categories() {
    let case = case("disabled_categories");
    let s = run(&case);
    check_golden(case.name, &s);

    for category in ["cpu", "disk", "gpu", "network"] {
        is_null(&s, &format!("/{category}"));
    }
    assert_eq!(
        field_counts(&s),
        counts(&[
            ("memory.resident", 3),
            ("memory.private", 3),
            ("memory.physical_footprint", 0),
            ("memory.virtual_memory", 3),
            ("process.thread_count", 3),
            ("process.open_file_descriptor_count", 3),
            ("process.windows_handle_count", 0),
        ])
    );
    assert_eq!(int(&s, "/memory/resident", "kibibytes"), 16_384);
    assert_eq!(int(&s, "/memory/limit", "kibibytes"), 262_144);
    assert_eq!(int(&s, "/process/active_count", "processes"), 3);
    assert!(at(&s, "/extensions/precise_cpu").is_null());
}

/// Non-default units, on the second snapshot of a series (rates are 0 over unchanged files).
#[test]
fn units() {
    let case = case("units");
    let s = run(&case);
    check_golden(case.name, &s);

    // 6000 ms = 6 s exactly; 250 ms = 0.25 s becomes a decimal.
    assert_eq!(int(&s, "/cpu/user_time", "seconds"), 6);
    assert_eq!(int(&s, "/cpu/system_time", "seconds"), 2);
    assert_eq!(int(&s, "/cpu/total_time", "seconds"), 8);
    assert_close(num(&s, "/cpu/throttled_time", "seconds"), 0.25, "throttled");
    assert_close(
        num(&s, "/cpu/some_pressure_stall_time", "seconds"),
        0.3,
        "cpu some",
    );
    // Not converted: the default unit stays.
    assert_eq!(
        int(&s, "/cpu/full_pressure_stall_time", "milliseconds"),
        100
    );
    assert_close(
        num(&s, "/cpu/effective_limit", "millicores"),
        1500.0,
        "limit",
    );
    assert_eq!(num(&s, "/cpu/consumption_rate", "millicores"), 0.0);
    assert_eq!(int(&s, "/memory/system_total", "mebibytes"), 8192);
    assert_eq!(int(&s, "/memory/system_used", "kibibytes"), 2_097_152);
    assert_eq!(int(&s, "/memory/resident", "mebibytes"), 16);
    assert_eq!(int(&s, "/memory/private", "mebibytes"), 8);
    assert_eq!(int(&s, "/memory/virtual_memory", "mebibytes"), 175);
    assert_eq!(int(&s, "/memory/limit", "mebibytes"), 256);
    assert_eq!(int(&s, "/memory/environment_accounted", "mebibytes"), 16);
    assert_eq!(int(&s, "/disk/read_data", "kibibytes"), 7168);
    assert_eq!(num(&s, "/disk/read_throughput", "megabits_per_second"), 0.0);
    assert_eq!(num(&s, "/disk/write_throughput", "bytes_per_second"), 0.0);
    assert_eq!(
        num(
            &s,
            "/network/system/receive_throughput",
            "megabits_per_second"
        ),
        0.0
    );
    assert_eq!(
        num(
            &s,
            "/network/system/transmit_throughput",
            "bytes_per_second"
        ),
        0.0
    );
    // 1000000 B = 1000 kB exactly; lo's 1000 B = 1 kB.
    assert_eq!(
        int(
            &s,
            "/network/interfaces/0/traffic/received_data",
            "kilobytes"
        ),
        1000
    );
    assert_eq!(int(&s, "/network/system/received_data", "bytes"), 1_001_000);
    // The DRM device: 1 GiB of VRAM, 25 % busy.
    assert_eq!(int(&s, "/gpu/device_metrics/0/memory_used", "gibibytes"), 1);
    assert_close(
        num(&s, "/gpu/device_metrics/0/compute_utilization", "fraction"),
        0.25,
        "gpu busy",
    );
}

/// GPU on, NVML missing: the AMD DRM device is still reported, NVML's failure has a reason.
#[test]
fn gpu_missing_nvml() {
    let case = case("gpu_missing_nvml");
    let s = run(&case);
    check_golden(case.name, &s);

    is_null(&s, "/process_sampling");
    let devices = at(&s, "/gpu/device_metrics").as_array().unwrap();
    assert_eq!(devices.len(), 1, "card0 only; card0-DP-1 is a connector");
    assert_eq!(devices[0]["vendor"], "amd");
    assert_eq!(devices[0]["device_identifier"], "0000:03:00.0");
    assert!(devices[0]["device_index"].is_null());
    assert_eq!(
        int(&s, "/gpu/device_metrics/0/memory_used", "kibibytes"),
        1_048_576
    );
    assert_close(
        num(
            &s,
            "/gpu/device_metrics/0/compute_utilization",
            "percentage",
        ),
        25.0,
        "gpu busy",
    );
    assert_eq!(at(&s, "/gpu/process_metrics"), &json!([]));
    let reasons = at(&s, "/extensions/unavailable").as_array().unwrap();
    assert!(
        reasons
            .iter()
            .any(|u| u["field"] == "gpu" && u["reason"].as_str().unwrap().contains(MISSING_NVML)),
        "the NVML failure names the library: {reasons:?}"
    );
}

// ------------------------------------------------------------------------------------------
// Shape
// ------------------------------------------------------------------------------------------
