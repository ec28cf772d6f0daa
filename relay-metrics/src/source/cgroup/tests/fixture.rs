//! The cgroup source over the fixture trees `tests/fixtures/cgroup-{v2,v1,hybrid}`, with exact
//! numbers (including Relay's reference cases), plus invalid-content cases on temporary trees.

use std::fs;
use std::path::{Path, PathBuf};

use super::super::*;
use crate::snapshot::MemoryEventCounts;
use crate::source::Roots;

fn fixture(name: &str) -> Roots {
    Roots::fixture(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name),
    )
}

fn layout(name: &str) -> (Roots, CgroupLayout) {
    let roots = fixture(name);
    let layout = discover(&roots).unwrap();
    (roots, layout)
}

fn read(name: &str, path: &str) -> CgroupSample {
    let (_, layout) = layout(name);
    let target = resolve(&layout, path).unwrap();
    CgroupReader::new()
        .read(&target, CgroupFields::ALL)
        .unwrap()
}

const V1: Option<CgroupVersion> = Some(CgroupVersion::V1);
const V2: Option<CgroupVersion> = Some(CgroupVersion::V2);
const GIB: u64 = 1 << 30;

// ------------------------------------------------------------------------------------ v2

#[test]
fn v2_layout_and_resolution() {
    let (roots, layout) = layout("cgroup-v2");
    assert_eq!(
        layout.v2.as_ref().unwrap().mount_point,
        roots.sys.join("fs/cgroup")
    );
    assert!(layout.v1.is_empty());
    let target = resolve(&layout, "/relay-test/").unwrap();
    assert_eq!(target.requested.as_deref(), Some("/relay-test"));
    assert_eq!(
        target.v2.as_ref().unwrap().dir,
        roots.sys.join("fs/cgroup/relay-test")
    );
    assert!(target.v1.is_empty());
    let error = resolve(&layout, "/no-such.scope").unwrap_err();
    assert!(matches!(error, CgroupError::NotFound { .. }), "{error}");
    assert!(error.to_string().contains("/no-such.scope"));
}

#[test]
fn v2_golden_workload() {
    let sample = read("cgroup-v2", "/relay-test");
    assert_eq!(
        sample.cpu,
        CpuSample {
            usage_version: V2,
            usage_ns: Some(2_004_871_000),
            user_usec: Some(1_998_102),
            system_usec: Some(6_769),
            throttling_version: V2,
            nr_periods: Some(101),
            nr_throttled: Some(98),
            throttled_usec: Some(7_912_345),
            limit_version: V2,
            effective_cpu_limit_lp: Some(0.2),
        }
    );
    assert_eq!(
        sample.memory,
        MemorySample {
            version: V2,
            limit_bytes: Some(67_108_864),
            current_bytes: Some(8_654_848),
            events: MemoryEventCounts {
                low: Some(0),
                high: Some(0),
                max: Some(3),
                oom: Some(0),
                oom_kill: Some(0),
            },
            under_oom: None,
        }
    );
    assert_eq!(
        sample.pids,
        PidsSample {
            version: V2,
            current: Some(2),
            limit: None,
            max_events: Some(0),
        }
    );
    assert_eq!(sample.pressure.version, V2);
    assert_eq!(
        sample.pressure.cpu,
        PsiTotals {
            some_usec: Some(7_890_123),
            full_usec: Some(7_801_234)
        }
    );
    assert_eq!(sample.pressure.io.some_usec, Some(1200));
}

#[test]
fn v2_relay_reference_fixture_numbers() {
    // Relay's linux_tests: throttled_usec 2000999, memory.max 4096, memory.current 2048,
    // PSI 3000999, oom 4, five limit events (cpu throttled, memory high/max/oom, pids max).
    let sample = read("cgroup-v2", "/limits.slice/tight.scope");
    assert_eq!(sample.cpu.throttled_usec, Some(2_000_999));
    assert_eq!(sample.cpu.nr_throttled, Some(7));
    assert_eq!(sample.memory.limit_bytes, Some(4096));
    assert_eq!(sample.memory.current_bytes, Some(2048));
    assert_eq!(sample.pressure.cpu.some_usec, Some(3_000_999));
    assert_eq!(sample.memory.events.oom, Some(4));
    assert_eq!(sample.memory.events.low, Some(6));
    assert_eq!(sample.memory.events.high, Some(1));
    assert_eq!(sample.memory.events.max, Some(2));
    assert_eq!(sample.pids.max_events, Some(5));
    // The tighter leaf wins over the parent's 0.5 LP / 1 GiB / 512 pids.
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(0.25));
    assert_eq!(sample.pids.limit, Some(64));
}

#[test]
fn v2_parent_limits_apply_to_an_unlimited_leaf() {
    let sample = read("cgroup-v2", "/limits.slice/loose.scope");
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(0.5));
    assert_eq!(sample.memory.limit_bytes, Some(GIB));
    assert_eq!(sample.pids.limit, Some(512));
}

#[test]
fn v2_cpuset_and_missing_limits() {
    assert_eq!(
        read("cgroup-v2", "/pinned.scope")
            .cpu
            .effective_cpu_limit_lp,
        Some(1.0)
    );
    let unlimited = read("cgroup-v2", "/nocpuset.slice/unlimited.scope");
    assert_eq!(
        unlimited.cpu.effective_cpu_limit_lp, None,
        "max without cpuset"
    );
    assert_eq!(unlimited.memory.limit_bytes, None, "all levels max");
    assert_eq!(unlimited.memory.current_bytes, Some(12288));
    // pids is not enabled for the leaf; only the parent's `pids.max` (`max`) was readable.
    assert_eq!(
        unlimited.pids,
        PidsSample {
            version: V2,
            current: None,
            limit: None,
            max_events: None,
        }
    );
}

#[test]
fn v2_child_without_controllers_reads_core_files_and_ancestor_limits() {
    let sample = read("cgroup-v2", "/relay-test/helper");
    assert_eq!(sample.cpu.usage_ns, Some(1_234_000));
    assert_eq!(sample.cpu.nr_throttled, None);
    // No cpu.max / memory.max of its own: the parent's limits bound it.
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(0.2));
    assert_eq!(sample.memory.limit_bytes, Some(67_108_864));
    assert_eq!(sample.memory.current_bytes, None);
    assert_eq!(sample.memory.events.max, None);
    assert_eq!(sample.pressure.cpu.some_usec, Some(15));
}

#[test]
fn v2_disabled_groups_read_nothing() {
    let (_, layout) = layout("cgroup-v2");
    let target = resolve(&layout, "/relay-test").unwrap();
    let mut reader = CgroupReader::new();
    let only_memory = CgroupFields {
        memory: true,
        ..CgroupFields::NONE
    };
    let sample = reader.read(&target, only_memory).unwrap();
    assert_eq!(sample.cpu, CpuSample::default());
    assert_eq!(sample.pressure, PressureSample::default());
    assert_eq!(sample.memory.limit_bytes, Some(67_108_864));
    assert_eq!(
        reader.read(&target, CgroupFields::NONE).unwrap(),
        CgroupSample::default()
    );
}

#[test]
fn v2_membership_and_exclusivity() {
    let (roots, layout) = layout("cgroup-v2");
    let target = resolve(&layout, "/relay-test").unwrap();
    let mut pids = vec![99];
    subtree_pids(&target, &mut pids).unwrap();
    assert_eq!(pids, vec![4242, 4243]);
    assert!(owns_exclusively(&target, &[4243, 4242]).unwrap());
    assert!(
        !owns_exclusively(&target, &[4242]).unwrap(),
        "child's pid missing"
    );
    assert!(!owns_exclusively(&target, &[4242, 4243, 9]).unwrap());
    let slice = resolve(&layout, "/limits.slice").unwrap();
    subtree_pids(&slice, &mut pids).unwrap();
    assert_eq!(pids, vec![5001, 5002, 5003]);

    let of_pid = resolve_for_pid(&layout, &roots, 4243).unwrap();
    assert_eq!(of_pid.requested, None);
    let v2 = of_pid.v2.as_ref().unwrap();
    assert_eq!(v2.path, "/relay-test/helper");
    assert_eq!(v2.dir, roots.sys.join("fs/cgroup/relay-test/helper"));
    assert!(resolve_for_pid(&layout, &roots, 1_000_000)
        .unwrap_err()
        .is_gone());
}

// ------------------------------------------------------------------------------------ v1

#[test]
fn v1_golden_workload() {
    let (roots, layout) = layout("cgroup-v1");
    assert!(layout.v2.is_none());
    let target = resolve(&layout, "/relay-test").unwrap();
    assert_eq!(
        target.v1_dir("cpuacct").unwrap().dir,
        roots.sys.join("fs/cgroup/cpu,cpuacct/relay-test")
    );
    let sample = CgroupReader::new()
        .read(&target, CgroupFields::ALL)
        .unwrap();
    assert_eq!(
        sample.cpu,
        CpuSample {
            usage_version: V1,
            usage_ns: Some(1_043_210_987),
            user_usec: Some(1_039_876),
            system_usec: Some(3_334),
            throttling_version: V1,
            nr_periods: Some(52),
            nr_throttled: Some(49),
            throttled_usec: Some(3_912_345),
            limit_version: V1,
            // quota 0.2, cpuset 0-1 → 2
            effective_cpu_limit_lp: Some(0.2),
        }
    );
    assert_eq!(
        sample.memory,
        MemorySample {
            version: V1,
            limit_bytes: Some(67_108_864),
            current_bytes: Some(8_654_848),
            events: MemoryEventCounts {
                low: None,
                high: None,
                max: Some(3),
                oom: Some(1),
                oom_kill: Some(1),
            },
            under_oom: Some(false),
        }
    );
    assert_eq!(
        sample.pids,
        PidsSample {
            version: V1,
            current: Some(1),
            limit: Some(32),
            max_events: Some(2),
        }
    );
    // v1 without psi_v1: no pressure files.
    assert_eq!(sample.pressure, PressureSample::default());
}

#[test]
fn v1_ancestor_limits() {
    let loose = read("cgroup-v1", "/limits/loose");
    assert_eq!(loose.cpu.effective_cpu_limit_lp, Some(0.5));
    assert_eq!(
        loose.memory.limit_bytes,
        Some(GIB),
        "root's unlimited ignored"
    );
    let tight = read("cgroup-v1", "/limits/tight");
    assert_eq!(tight.cpu.effective_cpu_limit_lp, Some(0.25));
    assert_eq!(tight.cpu.throttled_usec, Some(2_000_999), "2000999000 ns");
    assert_eq!(tight.memory.limit_bytes, Some(4096));
    assert_eq!(tight.memory.under_oom, Some(true));
    assert_eq!(tight.memory.events.max, Some(17));
    // Not in the cpuset or pids hierarchies.
    assert_eq!(tight.pids, PidsSample::default());
    let root = read("cgroup-v1", "/");
    assert_eq!(root.memory.limit_bytes, None);
    assert_eq!(root.cpu.effective_cpu_limit_lp, Some(2.0), "cpuset 0-1");
}

#[test]
fn v1_membership_and_pid_resolution() {
    let (roots, layout) = layout("cgroup-v1");
    let target = resolve(&layout, "/limits").unwrap();
    assert_eq!(
        target.membership_dir().unwrap().1.dir,
        roots.sys.join("fs/cgroup/memory/limits")
    );
    let mut pids = Vec::new();
    subtree_pids(&target, &mut pids).unwrap();
    assert_eq!(pids, vec![8001, 8002]);

    let of_pid = resolve_for_pid(&layout, &roots, 4242).unwrap();
    assert!(of_pid.v2.is_none());
    let paths: Vec<_> = of_pid
        .v1
        .iter()
        .map(|d| (d.controllers.join(","), d.name.clone(), d.dir.path.as_str()))
        .collect();
    assert_eq!(
        paths,
        vec![
            ("blkio".to_owned(), None, "/"),
            ("pids".to_owned(), None, "/relay-test"),
            ("memory".to_owned(), None, "/relay-test"),
            ("cpuset".to_owned(), None, "/relay-test"),
            ("cpu,cpuacct".to_owned(), None, "/relay-test"),
            (String::new(), Some("systemd".to_owned()), "/relay-test"),
        ]
    );
    let sample = CgroupReader::new()
        .read(&of_pid, CgroupFields::ALL)
        .unwrap();
    assert_eq!(sample.memory.limit_bytes, Some(67_108_864));
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(0.2));
}

// -------------------------------------------------------------------------------- hybrid

#[test]
fn hybrid_reads_controllers_from_v1_and_pressure_from_v2() {
    let sample = read("cgroup-hybrid", "/relay-test");
    assert_eq!(sample.cpu.usage_version, V1, "cpuacct is bound to v1");
    assert_eq!(sample.cpu.usage_ns, Some(215_432_109));
    assert_eq!(sample.cpu.throttling_version, V1);
    assert_eq!(sample.cpu.nr_throttled, Some(10));
    assert_eq!(sample.cpu.throttled_usec, Some(812_345));
    // Not in the cpuset hierarchy: the quota alone bounds it.
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(0.2));
    assert_eq!(sample.memory.version, V1);
    assert_eq!(sample.memory.limit_bytes, Some(67_108_864));
    assert_eq!(sample.pids.version, V1);
    assert_eq!(sample.pressure.version, V2);
    assert_eq!(sample.pressure.cpu.some_usec, Some(5000));
}

#[test]
fn hybrid_v2_only_cgroup_has_core_usage_but_no_controller_values() {
    let sample = read("cgroup-hybrid", "/v2-only.scope");
    assert_eq!(sample.cpu.usage_version, V2);
    assert_eq!(sample.cpu.usage_ns, Some(777_000));
    assert_eq!(sample.cpu.nr_throttled, None);
    assert_eq!(sample.cpu.effective_cpu_limit_lp, None);
    assert_eq!(sample.memory, MemorySample::default());
    assert_eq!(sample.pressure.cpu.some_usec, Some(42));
}

#[test]
fn hybrid_membership_prefers_the_v1_memory_hierarchy() {
    let (roots, layout) = layout("cgroup-hybrid");
    let target = resolve(&layout, "/relay-test").unwrap();
    let (version, dir) = target.membership_dir().unwrap();
    assert_eq!(version, CgroupVersion::V1);
    assert_eq!(dir.dir, roots.sys.join("fs/cgroup/memory/relay-test"));
    assert!(owns_exclusively(&target, &[4242]).unwrap());
    let of_pid = resolve_for_pid(&layout, &roots, 4243).unwrap();
    assert_eq!(of_pid.v2.as_ref().unwrap().path, "/");
    assert_eq!(of_pid.v1_dir("memory").unwrap().path, "/process_api/068ab");
    let sample = CgroupReader::new()
        .read(&of_pid, CgroupFields::ALL)
        .unwrap();
    assert_eq!(sample.memory.current_bytes, Some(3_907_584));
    assert_eq!(sample.memory.limit_bytes, None);
    assert_eq!(sample.cpu.effective_cpu_limit_lp, Some(2.0));
}

// ------------------------------------------------------------- invalid content, gone cgroups

/// A pure v2 tree in a temporary directory with one cgroup `/w`.
fn temp_v2(cpu_max: &str, cpuset: Option<&str>) -> (tempfile::TempDir, CgroupTarget) {
    let base = tempfile::tempdir().unwrap();
    let proc_self = base.path().join("proc/self");
    fs::create_dir_all(&proc_self).unwrap();
    fs::write(
        proc_self.join("mountinfo"),
        "25 24 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
    )
    .unwrap();
    let dir = base.path().join("sys/fs/cgroup/w");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("cpu.max"), cpu_max).unwrap();
    fs::write(dir.join("memory.max"), "4096\n").unwrap();
    if let Some(cpuset) = cpuset {
        fs::write(dir.join("cpuset.cpus.effective"), cpuset).unwrap();
    }
    let layout = discover(&Roots::fixture(base.path())).unwrap();
    let target = resolve(&layout, "/w").unwrap();
    (base, target)
}

fn lp(cpu_max: &str, cpuset: Option<&str>) -> Option<f64> {
    let (_base, target) = temp_v2(cpu_max, cpuset);
    CgroupReader::new()
        .read(&target, CgroupFields::ALL)
        .unwrap()
        .cpu
        .effective_cpu_limit_lp
}

#[test]
fn invalid_quotas_give_no_limit() {
    for bad in [
        "0 100000\n",
        "-1 100000\n",
        "NaN 100000\n",
        "inf 100000\n",
        "20000 0\n",
    ] {
        assert_eq!(lp(bad, Some("0-3\n")), None, "{bad:?}");
    }
    assert_eq!(lp("max 100000\n", None), None);
    assert_eq!(lp("max 100000\n", Some("0\n")), Some(1.0));
    assert_eq!(
        lp("300000 100000\n", Some("0-1\n")),
        Some(2.0),
        "cpuset caps"
    );
    assert_eq!(lp("max 100000\n", Some("3-1\n")), None, "bad cpuset range");
}

#[test]
fn an_unreadable_level_gives_no_limit() {
    let (base, target) = temp_v2("20000 100000\n", Some("0-3\n"));
    // A directory where the root's cpu.max would be: reading it fails with EISDIR.
    fs::create_dir(base.path().join("sys/fs/cgroup/cpu.max")).unwrap();
    let sample = CgroupReader::new()
        .read(&target, CgroupFields::ALL)
        .unwrap();
    assert_eq!(sample.cpu.effective_cpu_limit_lp, None);
    assert_eq!(sample.memory.limit_bytes, Some(4096));
}

#[test]
fn limits_are_read_again_after_limits_max_age_and_usage_at_every_read() {
    let (base, target) = temp_v2("20000 100000\n", Some("0-3\n"));
    let dir = base.path().join("sys/fs/cgroup/w");
    fs::write(dir.join("memory.current"), "1024\n").unwrap();
    let mut reader = CgroupReader::new();
    let first = reader.read(&target, CgroupFields::ALL).unwrap();
    assert_eq!(first.memory.limit_bytes, Some(4096));
    assert_eq!(first.memory.current_bytes, Some(1024));
    assert_eq!(first.cpu.effective_cpu_limit_lp, Some(0.2));

    fs::write(dir.join("memory.max"), "8192\n").unwrap();
    fs::write(dir.join("cpu.max"), "50000 100000\n").unwrap();
    fs::write(dir.join("memory.current"), "2048\n").unwrap();
    let next = reader.read(&target, CgroupFields::ALL).unwrap();
    assert_eq!(next.memory.current_bytes, Some(2048), "usage: every read");
    std::thread::sleep(super::super::values::LIMITS_MAX_AGE);
    let later = reader.read(&target, CgroupFields::ALL).unwrap();
    assert_eq!(later.memory.limit_bytes, Some(8192));
    assert_eq!(later.cpu.effective_cpu_limit_lp, Some(0.5));
    assert_eq!(later.memory.version, V2);
    assert_eq!(later.cpu.limit_version, V2);
}

#[test]
fn a_removed_cgroup_is_gone_not_zero() {
    let (base, target) = temp_v2("20000 100000\n", Some("0-3\n"));
    let mut reader = CgroupReader::new();
    assert!(reader.read(&target, CgroupFields::ALL).is_ok());
    let dir: PathBuf = base.path().join("sys/fs/cgroup/w");
    fs::remove_dir_all(&dir).unwrap();
    // A regular file system keeps held descriptors readable (kernfs does not: the live test
    // covers that), so a fresh reader shows the path as a collector restarting would.
    let error = CgroupReader::new()
        .read(&target, CgroupFields::ALL)
        .unwrap_err();
    assert!(error.is_gone(), "{error}");
    assert!(subtree_pids(&target, &mut Vec::new())
        .unwrap_err()
        .is_gone());
}

/// One read of the v1 fixture's `/relay-test` as a measured cgroup, with the cgroup iterator's
/// `kernel` values where given.
fn read_measured_v1(
    cadvisor: bool,
    kernel: Option<&crate::source::cgroup_iter::pass::KernelValues>,
) -> crate::snapshot::CgroupTargetReport {
    let (roots, layout) = layout("cgroup-v1");
    let target = resolve(&layout, "/relay-test").unwrap();
    let mut reader = CgroupValuesReader::measured(
        &target,
        true,
        MeasuredFiles {
            ticks_per_second: 100,
            cadvisor,
        },
        &roots,
    );
    let mut out = crate::snapshot::CgroupTargetReport::default();
    reader.read(&mut Vec::new(), &mut out, false, kernel);
    out
}

/// The iterator's values replace exactly the files they cover: a served value is taken (it
/// differs from its fixture file here), a value not served, or in a file not wholly served,
/// comes from the file.
#[test]
fn values_reader_takes_served_values_instead_of_their_files() {
    use crate::source::cgroup_iter::pass::KernelValues;
    let read = |kernel| read_measured_v1(false, kernel);
    let files = read(None);
    assert_eq!(files.memory_current_bytes, Some(8654848));
    assert_eq!(files.memory_events.max, Some(3));
    assert_eq!(files.memory_events.oom_kill, Some(1));
    assert_eq!(files.pids_current, Some(1));
    let kernel = KernelValues {
        memory_usage_bytes: Some(4096),
        memory_failcnt: Some(30),
        oom_kill: Some(10),
        pids_current: Some(7),
        cfs: Some((100, 20, 3000)),
        ..KernelValues::default()
    };
    let served = read(Some(&kernel));
    assert_eq!(served.memory_current_bytes, Some(4096));
    assert_eq!(served.memory_events.max, Some(30));
    assert_eq!(
        (served.memory_events.oom, served.memory_events.oom_kill),
        (Some(10), Some(10))
    );
    assert_eq!(served.pids_current, Some(7));
    assert_eq!(
        (
            served.cpu_periods,
            served.cpu_throttled_periods,
            served.cpu_throttled_ns
        ),
        (Some(100), Some(20), Some(3000))
    );
    // Not served: from the files, as before.
    assert_eq!(served.memory_peak_bytes, files.memory_peak_bytes);
    assert_eq!(served.memory_limit_bytes, files.memory_limit_bytes);
    assert_eq!(served.pids_limit, files.pids_limit);
    assert_eq!(served.cpu_limit_cores, files.cpu_limit_cores);
    assert_eq!(served.cpu_usage_ns, files.cpu_usage_ns);
    assert!(served.cpu_usage_ns.is_some());
}

/// The limits the iterator serves are taken as their files' text would be (the fixture's files
/// hold other values), unlimited ones included, with the cAdvisor naming's raw CPU settings.
#[test]
fn values_reader_takes_served_limits_instead_of_their_files() {
    use crate::snapshot::TargetCpuSpec;
    use crate::source::cgroup_iter::pass::KernelValues;
    let read = |kernel| read_measured_v1(true, kernel);
    let files = read(None);
    let file_limits = (
        files.memory_limit_bytes,
        files.pids_limit,
        files.cpu_limit_cores,
    );
    assert!(file_limits.0.is_some() && file_limits.1.is_some() && file_limits.2.is_some());
    let limited = KernelValues {
        memory_limit_bytes: Some(1 << 20),
        pids_limit: Some(5),
        cfs_limit: Some((25_000, 100_000)),
        ..KernelValues::default()
    };
    let served = read(Some(&limited));
    assert_ne!(
        (
            served.memory_limit_bytes,
            served.pids_limit,
            served.cpu_limit_cores
        ),
        file_limits
    );
    assert_eq!(
        (
            served.memory_limit_bytes,
            served.pids_limit,
            served.cpu_limit_cores
        ),
        (Some(1 << 20), Some(5), Some(0.25))
    );
    let spec = served.cpu_spec.unwrap();
    assert_eq!(
        (spec.quota_us, spec.period_us),
        (Some(25_000), Some(100_000))
    );
    assert_eq!(
        spec.shares,
        files.cpu_spec.unwrap().shares,
        "cpu.shares: its file"
    );
    // `max` / v1's sentinel / `-1`: no limit, as the files' text gives.
    let unlimited = KernelValues {
        memory_limit_bytes: Some(0x7FFF_FFFF_FFFF_F000),
        pids_limit: Some(u64::MAX),
        cfs_limit: Some((u64::MAX, 100_000)),
        ..KernelValues::default()
    };
    let served = read(Some(&unlimited));
    assert_eq!(
        (
            served.memory_limit_bytes,
            served.pids_limit,
            served.cpu_limit_cores
        ),
        (None, None, None)
    );
    assert_eq!(
        served.cpu_spec,
        Some(TargetCpuSpec {
            quota_us: None,
            period_us: Some(100_000),
            ..files.cpu_spec.unwrap()
        })
    );
}

/// The cumulative totals' files, read with the scope's: the high-water mark and the storage
/// bytes; the io version says whether an io file was read, so an empty `io.stat` (no I/O yet:
/// 0 bytes) is told from none.
#[test]
fn the_scope_reads_the_totals_high_water_mark_and_storage_bytes() {
    use crate::snapshot::CgroupTargetReport;
    let (base, target) = temp_v2("max 100000\n", None);
    let roots = Roots::fixture(base.path());
    let dir = base.path().join("sys/fs/cgroup/w");
    fs::write(dir.join("memory.current"), "4096\n").unwrap();
    fs::write(dir.join("memory.peak"), "65536\n").unwrap();
    let mut reader = CgroupValuesReader::scope(&target, CgroupFields::NONE, Some(&roots));
    assert!(reader.has_memory_controller());
    assert!(reader.counts_every_disk());
    let mut out = CgroupTargetReport::default();
    let mut read = |out: &mut CgroupTargetReport| {
        reader.read_scope(&mut Vec::new(), out).unwrap();
        reader.io_version()
    };
    assert_eq!(read(&mut out), None, "no io.stat: no storage bytes");
    assert_eq!(out.memory_peak_bytes, Some(65536));
    assert_eq!(out.memory_current_bytes, None, "no group asked for");
    assert_eq!(out.memory_limit_bytes, None, "no group asked for");
    // An io.stat made after the reader was (a controller enabled later): a file found
    // missing is tried again with the limits, once LIMITS_MAX_AGE old.
    fs::write(
        dir.join("io.stat"),
        "8:0 rbytes=10 wbytes=20 rios=1 wios=2\n",
    )
    .unwrap();
    assert_eq!(read(&mut out), None);
    std::thread::sleep(super::super::values::LIMITS_MAX_AGE);
    assert_eq!(read(&mut out), V2);
    let devices: Vec<_> = out
        .devices
        .iter()
        .map(|d| (d.device.as_str(), d.read_bytes, d.write_bytes))
        .collect();
    assert_eq!(devices, [("8:0", 10, 20)]);
    fs::write(dir.join("io.stat"), "").unwrap();
    assert_eq!(read(&mut out), V2, "an empty io.stat is read: no I/O");
    assert!(out.devices.is_empty());
    // A v2 directory without the memory controller has no memory.current.
    fs::remove_file(dir.join("memory.current")).unwrap();
    let reader = CgroupValuesReader::scope(&target, CgroupFields::NONE, Some(&roots));
    assert!(!reader.has_memory_controller());
}
