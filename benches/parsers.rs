//! Every public parser on bytes captured from the dev machine (the crate's `testdata`) and on
//! cgroup files in the format of `tests/fixtures/cgroup-v2`.
//!
//! Run with `cargo bench -p relay-metrics-suite --bench parsers`.

mod support;

use std::hint::black_box;

use criterion::Criterion;
use relay_metrics::internals::{cgroup, procfs as parse, system};

macro_rules! testdata {
    ($path:literal) => {
        include_bytes!(concat!("../relay-metrics/src/source/", $path))
    };
}

const STAT: &[u8] = testdata!("procfs/testdata/sleep_stat");
const ODD_COMM_STAT: &[u8] = testdata!("procfs/testdata/odd_comm_stat");
const STATUS: &[u8] = testdata!("procfs/testdata/sleep_status");
const IO: &[u8] = testdata!("procfs/testdata/sleep_io");
const SCHEDSTAT: &[u8] = testdata!("procfs/testdata/sleep_schedstat");
const SMAPS_ROLLUP: &[u8] = testdata!("procfs/testdata/sleep_smaps_rollup");
const MEMINFO: &[u8] = testdata!("system/testdata/meminfo");
const PROC_STAT: &[u8] = testdata!("system/testdata/stat");
const PRESSURE_CPU: &[u8] = testdata!("system/testdata/pressure_cpu");
const NET_DEV: &[u8] = testdata!("net/testdata/net_dev");

const CHILDREN: &[u8] = b"1001 1002 1003 1004 1005 1006 1007 1008 ";
const CPU_MAX: &[u8] = b"150000 100000\n";
const CPU_MAX_UNLIMITED: &[u8] = b"max 100000\n";
const MEMORY_EVENTS: &[u8] = b"low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n";
const CPU_STAT: &[u8] = b"usage_usec 900000\nuser_usec 800000\nsystem_usec 100000\nnr_periods 40\n\
nr_throttled 2\nthrottled_usec 5000\nnr_bursts 0\nburst_usec 0\n";
const CPUSET_SHORT: &[u8] = b"0-1\n";
const CPUSET_LONG: &[u8] = b"0-3,8,10-11,16-31,40,42,44,46\n";
const MEMORY_MAX: &[u8] = b"1073741824\n";
const PROC_CGROUP_HYBRID: &[u8] = b"9:name=systemd:/\n8:pids:/\n7:blkio:/\n6:freezer:/\n\
5:devices:/\n4:memory:/process_api/52a2a47cbb402ba908303d786d843e60\n3:cpuset:/\n2:cpuacct:/\n\
1:cpu:/\n0::/\n";

fn procfs(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_procfs");
    group.bench_function("stat", |b| b.iter(|| parse::parse_stat(black_box(STAT))));
    group.bench_function("stat_odd_comm", |b| {
        b.iter(|| parse::parse_stat(black_box(ODD_COMM_STAT)))
    });
    group.bench_function("status_vm_hwm", |b| {
        b.iter(|| parse::parse_status_vm_hwm_kib(black_box(STATUS)))
    });
    group.bench_function("io", |b| b.iter(|| parse::parse_io(black_box(IO))));
    group.bench_function("schedstat", |b| {
        b.iter(|| parse::parse_schedstat(black_box(SCHEDSTAT)))
    });
    group.bench_function("smaps_rollup_private", |b| {
        b.iter(|| parse::parse_smaps_rollup_private_kib(black_box(SMAPS_ROLLUP)))
    });
    let mut pids = Vec::with_capacity(16);
    group.bench_function("children_8", |b| {
        b.iter(|| {
            pids.clear();
            parse::parse_children(black_box(CHILDREN), &mut pids)
        })
    });
    group.finish();
}

fn system_files(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_system");
    group.bench_function("meminfo", |b| {
        b.iter(|| system::parse_meminfo(black_box(MEMINFO)))
    });
    let mut per_cpu = Vec::with_capacity(8);
    group.bench_function("proc_stat_2cpu", |b| {
        b.iter(|| system::parse_stat(black_box(PROC_STAT), &mut per_cpu))
    });
    group.bench_function("pressure", |b| {
        b.iter(|| system::parse_pressure(black_box(PRESSURE_CPU)))
    });
    let mut interfaces = Vec::with_capacity(8);
    group.bench_function("net_dev_4if", |b| {
        b.iter(|| system::parse_net_dev(black_box(NET_DEV), &mut interfaces))
    });
    group.finish();
}

/// Four keys of a flat-keyed cgroup file, looked up as the sampler does.
fn keyed_4(content: &[u8], keys: [&[u8]; 4]) -> [Option<u64>; 4] {
    keys.map(|key| cgroup::keyed_u64(content, key))
}

fn cgroup_files(c: &mut Criterion) {
    let mut group = c.benchmark_group("parse_cgroup");
    group.bench_function("cpu_max", |b| {
        b.iter(|| cgroup::parse_cpu_max(black_box(CPU_MAX)))
    });
    group.bench_function("cpu_max_unlimited", |b| {
        b.iter(|| cgroup::parse_cpu_max(black_box(CPU_MAX_UNLIMITED)))
    });
    group.bench_function("v1_cpu_quota", |b| {
        b.iter(|| cgroup::parse_v1_cpu_quota(black_box(b"50000\n"), black_box(b"100000\n")))
    });
    group.bench_function("memory_events_4_keys", |b| {
        b.iter(|| {
            keyed_4(
                black_box(MEMORY_EVENTS),
                [b"high", b"max", b"oom", b"oom_kill"],
            )
        })
    });
    group.bench_function("cpu_stat_4_keys", |b| {
        b.iter(|| {
            keyed_4(
                black_box(CPU_STAT),
                [
                    b"usage_usec",
                    b"nr_periods",
                    b"nr_throttled",
                    b"throttled_usec",
                ],
            )
        })
    });
    group.bench_function("cpuset_list_short", |b| {
        b.iter(|| cgroup::parse_cpu_list_count(black_box(CPUSET_SHORT)))
    });
    group.bench_function("cpuset_list_long", |b| {
        b.iter(|| cgroup::parse_cpu_list_count(black_box(CPUSET_LONG)))
    });
    group.bench_function("limit", |b| {
        b.iter(|| cgroup::parse_limit(black_box(MEMORY_MAX)))
    });
    group.bench_function("v1_memory_limit", |b| {
        b.iter(|| cgroup::parse_v1_memory_limit(black_box(b"9223372036854771712\n")))
    });
    group.bench_function("psi", |b| {
        b.iter(|| cgroup::parse_psi(black_box(PRESSURE_CPU)))
    });
    group.bench_function("proc_cgroup_hybrid", |b| {
        b.iter(|| cgroup::parse_proc_cgroup(black_box(PROC_CGROUP_HYBRID)).count())
    });
    group.finish();
}

quick_main!(1; procfs, system_files, cgroup_files);
