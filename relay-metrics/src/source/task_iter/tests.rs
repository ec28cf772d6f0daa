use std::collections::HashMap;

use super::*;

#[test]
fn cputime_adjust_splits_the_run_time_in_the_ticks_ratio() {
    // 3 user ticks and 1 system tick of 10 ms, 100 ms of run time: 25 ms system.
    assert_eq!(
        cputime_adjust(30_000_000, 10_000_000, 100_000_000, 0, 0),
        (75_000_000, 25_000_000)
    );
    // The division truncates like mul_u64_u64_div_u64: 1 * 10 / 3 = 3.
    assert_eq!(cputime_adjust(2, 1, 10, 0, 0), (7, 3));
}

#[test]
fn cputime_adjust_gives_all_time_to_the_side_with_ticks() {
    assert_eq!(cputime_adjust(0, 0, 500, 0, 0), (500, 0));
    assert_eq!(cputime_adjust(10, 0, 500, 0, 0), (500, 0));
    assert_eq!(cputime_adjust(0, 10, 500, 0, 0), (0, 500));
}

#[test]
fn cputime_adjust_never_goes_below_what_was_reported() {
    // Scaled stime (20) is below the previous 40: stime stays 40, utime takes the rest.
    assert_eq!(cputime_adjust(80, 20, 100, 10, 40), (60, 40));
    // Then utime (100 - 95 = 5) would fall below the previous 50: utime stays.
    assert_eq!(cputime_adjust(5, 95, 100, 50, 10), (50, 50));
    // Run time not above what was reported: the previous values, unchanged.
    assert_eq!(cputime_adjust(80, 20, 100, 60, 40), (60, 40));
    assert_eq!(cputime_adjust(80, 20, 90, 60, 40), (60, 40));
}

#[test]
fn cputime_adjust_does_not_overflow_on_large_values() {
    let big = u64::MAX / 2;
    assert_eq!(
        cputime_adjust(big, big, big, 0, 0),
        (big - big / 2, big / 2)
    );
}

#[test]
fn ns_to_ticks_truncates_and_refuses_rates_that_do_not_divide_a_second() {
    assert_eq!(ns_to_ticks(158_285_389_272, 100), Some(15_828));
    assert_eq!(ns_to_ticks(9_999_999, 100), Some(0));
    assert_eq!(ns_to_ticks(5, 0), None);
    assert_eq!(ns_to_ticks(5, 7), None);
}

fn record_bytes(fields: [u64; RECORD_FIELDS]) -> Vec<u8> {
    fields
        .iter()
        .flat_map(|field| field.to_le_bytes())
        .collect()
}

#[test]
fn a_record_parses_field_by_field() {
    let mut fields: [u64; RECORD_FIELDS] = std::array::from_fn(|index| index as u64 + 1);
    fields[14] = u64::MAX; // rss_shmem = -1
    fields[3] = STATUS_HAS_MM | STATUS_RSS_ATOMIC;
    let record = TaskRecord::parse(&record_bytes(fields)).unwrap();
    assert_eq!(record.tgid, 1);
    assert_eq!(record.ppid, 2);
    assert_eq!(record.start_boottime_ns, 5);
    assert_eq!(record.rss_pages, [13, 14, -1]);
    assert_eq!(record.io, [16, 17, 18, 19]);
    assert_eq!(record.open_fds, 20);
    assert_eq!(record.cgroup_id, 21);
    assert_eq!(record.live_runtime_ns, 22);
    assert_eq!(record.run_delay_ns, 23);
    assert_eq!(record.v1_cgroup_id, 27);
    // Controller 28 is none of the four.
    assert_eq!(record.v1_controller, None);
    // Without STATUS_RSS_SUMMED the sums are not there.
    assert_eq!(record.rss_sum_pages, None);
    // A negative counter counts as 0, as get_mm_counter clamps it.
    assert_eq!(record.stat_rss_pages(), 27);
    assert_eq!(record.resident_source(true), ResidentSource::Exact);
    assert!(record.is_complete());

    fields[3] = STATUS_HAS_MM | STATUS_RSS_PERCPU | STATUS_RSS_SUMMED;
    fields[25] = u64::MAX; // summed shmem = -1
    fields[27] = 2; // cpu
    let record = TaskRecord::parse(&record_bytes(fields)).unwrap();
    assert_eq!(record.v1_controller, Some(1));
    assert_eq!(record.rss_sum_pages, Some([24, 25, -1]));
    assert_eq!(record.summed_rss_pages(), Some(49));
    assert_eq!(
        (
            record.switches,
            record.busy_threads,
            record.cpuacct_cgroup_id
        ),
        (29, 30, 31)
    );
    assert_eq!(record.net_ns_inode, Some(32));
    // No namespace (an exiting task): none, and the agent stats `ns/net` instead.
    fields[31] = 0;
    assert_eq!(
        TaskRecord::parse(&record_bytes(fields))
            .unwrap()
            .net_ns_inode,
        None
    );
    assert!(!record.has_split_cgroups());
    fields[3] |= STATUS_SPLIT_CGROUPS;
    assert!(TaskRecord::parse(&record_bytes(fields))
        .unwrap()
        .has_split_cgroups());
    assert_eq!(record.resident_source(true), ResidentSource::Summed);
    // Where statm prints the central counts, the sums are not what it prints.
    assert_eq!(
        record.resident_source(false),
        ResidentSource::CentralCountOnly
    );
}

#[test]
fn statm_sums_the_per_cpu_parts_from_6_16() {
    assert!(statm_sums_per_cpu_parts("6.18.44-fc-v1147\n"));
    assert!(statm_sums_per_cpu_parts("6.16.0"));
    assert!(statm_sums_per_cpu_parts("7.0.1"));
    assert!(!statm_sums_per_cpu_parts("6.15.9-arch1"));
    assert!(!statm_sums_per_cpu_parts("6.1.0-41-cloud-amd64"));
    assert!(!statm_sums_per_cpu_parts(""));
    assert!(!statm_sums_per_cpu_parts("garbage"));
}

/// 6.1's verifier gives up on the program with the unchanged-cgroup rule's per-thread reads
/// (the VM test's kernel): it loads without them there.
#[test]
fn the_rules_fields_are_tried_from_6_6() {
    assert!(super::tries_activity_fields("6.18.44-fc-v1147\n"));
    assert!(super::tries_activity_fields("6.6.0"));
    assert!(!super::tries_activity_fields("6.1.0-41-cloud-amd64"));
    assert!(!super::tries_activity_fields("5.15.0"));
    assert!(!super::tries_activity_fields(""));
}

#[test]
fn only_gapless_possible_cpu_lists_are_summed() {
    assert!(possible_cpus_are_contiguous("0-1\n"));
    assert!(possible_cpus_are_contiguous("0"));
    assert!(possible_cpus_are_contiguous("0-255"));
    assert!(!possible_cpus_are_contiguous("0-3,8-11"));
    assert!(!possible_cpus_are_contiguous("1-3"));
    assert!(!possible_cpus_are_contiguous(""));
}

#[test]
fn short_long_and_out_of_range_records_are_refused() {
    let fields = [1u64; RECORD_FIELDS];
    let bytes = record_bytes(fields);
    assert!(TaskRecord::parse(&bytes[..RECORD_BYTES - 1]).is_none());
    let mut long = bytes.clone();
    long.push(0);
    assert!(TaskRecord::parse(&long).is_none());
    let mut huge_pid = fields;
    huge_pid[0] = u64::from(u32::MAX) + 1;
    assert!(TaskRecord::parse(&record_bytes(huge_pid)).is_none());
}

#[test]
fn status_bits_choose_the_resident_source_and_flag_incomplete_records() {
    let with = |status: u64| TaskRecord {
        status,
        ..TaskRecord::default()
    };
    assert_eq!(with(0).resident_source(true), ResidentSource::None);
    assert_eq!(
        with(STATUS_HAS_MM | STATUS_RSS_PERCPU).resident_source(true),
        ResidentSource::CentralCountOnly
    );
    assert!(with(STATUS_HAS_MM).is_complete());
    for incomplete in [STATUS_THREADS_TRUNCATED, STATUS_FDS_TRUNCATED, STATUS_TORN] {
        assert!(!with(STATUS_HAS_MM | incomplete).is_complete());
    }
    assert!(with(STATUS_TORN).is_torn() && !with(STATUS_THREADS_TRUNCATED).is_torn());
}

/// A record of process `pid` (started at 7) with these CPU times and the kernel's clamp state.
fn cpu_record(pid: u32, (utime, stime, runtime): (u64, u64, u64), prev: (u64, u64)) -> TaskRecord {
    TaskRecord {
        tgid: pid,
        start_boottime_ns: 7,
        utime_ns: utime,
        stime_ns: stime,
        runtime_ns: runtime,
        prev_utime_ns: prev.0,
        prev_stime_ns: prev.1,
        ..TaskRecord::default()
    }
}

#[test]
fn a_split_never_goes_back_from_one_read_to_the_next() {
    const MS: u64 = 1_000_000;
    let mut splits = Splits::default();
    // 4 ms of system ticks, no user tick, 20 ms run: all of it system time.
    let mut first = [cpu_record(10, (0, 4 * MS, 20 * MS), (0, 0))];
    splits.apply(&mut first);
    assert_eq!(first[0].split_ns, (0, 20 * MS));
    // Then a user tick: from the kernel's state alone (no `stat` read advanced it) the split
    // would be 11 ms and 11 ms, system time going back from 20 ms.
    let record = cpu_record(10, (4 * MS, 4 * MS, 22 * MS), (0, 0));
    assert_eq!(record.split_after((0, 0)), (11 * MS, 11 * MS));
    let mut second = [record];
    splits.apply(&mut second);
    assert_eq!(second[0].split_ns, (2 * MS, 20 * MS));
    // Another process with the same pid starts from the kernel's state.
    let mut reused = [cpu_record(10, (4 * MS, 4 * MS, 22 * MS), (0, 0))];
    reused[0].start_boottime_ns = 8;
    splits.apply(&mut reused);
    assert_eq!(reused[0].split_ns, (11 * MS, 11 * MS));
}

#[test]
fn splits_follow_each_process_through_reads_of_other_processes() {
    const MS: u64 = 1_000_000;
    let mut splits = Splits::default();
    let mut first = [
        cpu_record(3, (0, 4 * MS, 20 * MS), (0, 0)),
        cpu_record(5, (0, 4 * MS, 20 * MS), (0, 0)),
        cpu_record(9, (0, 4 * MS, 20 * MS), (0, 0)),
    ];
    splits.apply(&mut first);
    // 3 is gone, 4 is new, 5 was read across a thread's exit, 9 ran on.
    let mut second = [
        cpu_record(4, (4 * MS, 4 * MS, 22 * MS), (0, 0)),
        cpu_record(5, (4 * MS, 4 * MS, 22 * MS), (0, 0)),
        cpu_record(9, (4 * MS, 4 * MS, 22 * MS), (0, 0)),
    ];
    second[1].status = STATUS_TORN;
    splits.apply(&mut second);
    assert_eq!(second[0].split_ns, (11 * MS, 11 * MS));
    assert_eq!(second[2].split_ns, (2 * MS, 20 * MS));
    // The torn read of 5 is not what its next split starts from: the one before it is.
    let mut third = [cpu_record(5, (4 * MS, 4 * MS, 24 * MS), (0, 0))];
    splits.apply(&mut third);
    assert_eq!(third[0].split_ns, (4 * MS, 20 * MS));
}

#[test]
fn a_fixture_proc_root_is_refused_with_its_reason() {
    let error = TaskIter::load(&Roots::fixture("/nonexistent"), false).unwrap_err();
    assert!(error.0.contains("fixture"), "{error}");
}

/// The iterator's record of this very process against /proc/self: the fields that a running
/// process does not change between two reads.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn the_iterator_describes_this_process_as_procfs_does() {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    let mut iter = TaskIter::load(&Roots::host(), true).unwrap();
    let mut records = Vec::new();
    let pid = std::process::id();
    let stat = || {
        let text = std::fs::read(format!("/proc/{pid}/stat")).unwrap();
        let stat = crate::source::procfs::parse::parse_stat(&text).unwrap();
        (stat.ppid, stat.vsize_bytes)
    };
    // This binary's other tests map and unmap memory as they run (a thread's stack, a 64 MiB
    // malloc arena: 689799168 vs 756908032 bytes was seen under load), so the address space is
    // compared only when procfs gives the same size before and after the iterator's read.
    let mut seen = Vec::new();
    let matched = (0..50).any(|_| {
        let before = stat();
        iter.read(&mut records).unwrap();
        let after = stat();
        let own = records.iter().find(|record| record.tgid == pid).unwrap();
        let from_iter = (own.ppid, own.total_vm_pages * 4096);
        seen.push((before, from_iter, after));
        before == after && from_iter == before
    });
    assert!(
        matched,
        "(procfs before, the iterator, procfs after) as (ppid, vsize): {seen:?}"
    );
    assert!(records.len() > 10, "{} records", records.len());
    assert!(records.windows(2).all(|pair| pair[0].tgid < pair[1].tgid));
    // Kernel threads are there, without an address space.
    let kthreadd = records.iter().find(|record| record.tgid == 2).unwrap();
    assert!(kthreadd.is_kernel_thread());
    assert_eq!(kthreadd.resident_source(true), ResidentSource::None);
}

/// Every record's network namespace is the inode number a `stat` of `/proc/<pid>/ns/net` gives,
/// for every process on the machine and for one in a namespace of its own (`unshare --net`).
/// Each process is stat'ed before and after the read; one that changed namespace or exited
/// meanwhile is left out, one that carries none must be gone (or exiting) by then.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn the_records_network_namespace_is_the_inode_of_ns_net() {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    assert_records_carry_the_inode_of_ns_net();
}

/// The check of [`the_records_network_namespace_is_the_inode_of_ns_net`], which the VM's 6.1
/// kernel runs too (`vm_tests::task_iter`).
pub(crate) fn assert_records_carry_the_inode_of_ns_net() {
    use std::os::unix::fs::MetadataExt as _;
    let inode = |pid: u32| {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .ok()
            .map(|metadata| metadata.ino())
    };
    let own = inode(std::process::id()).unwrap();
    let mut child = std::process::Command::new("unshare")
        .args(["--net", "sleep", "60"])
        .spawn()
        .unwrap();
    let pid = child.id();
    // unshare execs sleep once it is in the new namespace.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while inode(pid) == Some(own) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let fresh = inode(pid).unwrap();
    assert_ne!(
        fresh, own,
        "unshare --net did not move {pid} to a namespace of its own"
    );

    let mut iter = TaskIter::load(&Roots::host(), false).unwrap();
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let before: HashMap<u32, Option<u64>> = pids.iter().map(|&pid| (pid, inode(pid))).collect();
    let mut records = Vec::new();
    iter.read(&mut records).unwrap();
    let mut compared = 0;
    let mut differing = Vec::new();
    for record in &records {
        let Some(&stable) = before.get(&record.tgid) else {
            continue;
        };
        let after = inode(record.tgid);
        if stable != after {
            continue;
        }
        compared += 1;
        if record.net_ns_inode != after {
            differing.push((record.tgid, record.net_ns_inode, after));
        }
    }
    let in_fresh = records.iter().find(|record| record.tgid == pid).copied();
    let _ = child.kill();
    let _ = child.wait();
    assert!(differing.is_empty(), "(pid, iterator, stat): {differing:?}");
    assert!(compared > 10, "only {compared} processes compared");
    assert_eq!(in_fresh.and_then(|record| record.net_ns_inode), Some(fresh));
}

/// The record's cgroup ids are the inode numbers of this process's cgroup directories: the
/// unified one, and on a v1 or hybrid host the one in the hierarchy of the first of memory,
/// cpu, cpuacct and pids mounted as v1.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn the_records_cgroup_ids_are_the_inodes_of_the_process_cgroup_directories() {
    use std::os::unix::fs::MetadataExt as _;
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    let layout = crate::source::cgroup::CgroupLayout::discover(&Roots::host()).unwrap();
    let pid = std::process::id();
    let target = crate::source::cgroup::resolve_for_pid(&layout, &Roots::host(), pid).unwrap();
    let mut iter = TaskIter::load(&Roots::host(), false).unwrap();
    let mut records = Vec::new();
    iter.read(&mut records).unwrap();
    let own = records.iter().find(|record| record.tgid == pid).unwrap();
    let ino = |dir: &std::path::Path| std::fs::metadata(dir).unwrap().ino();
    if let Some(v2) = &target.v2 {
        assert_eq!(own.cgroup_id, ino(&v2.dir), "{}", v2.dir.display());
    }
    let controller = membership_controller(&layout);
    assert_eq!(own.v1_controller, controller);
    match controller {
        Some(at) => {
            let dir = target.v1_dir(V1_CONTROLLERS[at]).unwrap();
            assert_eq!(own.v1_cgroup_id, ino(&dir.dir), "{}", dir.dir.display());
        }
        None => assert_eq!(own.v1_cgroup_id, 0),
    }
}

/// `/proc/<pid>/statm`'s resident pages; `None` once the process is gone.
fn statm_resident_pages(pid: u32) -> Option<u64> {
    let text = std::fs::read(format!("/proc/{pid}/statm")).ok()?;
    crate::source::procfs::parse::parse_statm_resident_pages(&text)
}

/// Every process whose resident size stands still across the read (its `statm` the same before
/// and after) has the record's: summed where `statm` sums the per-CPU parts (this host), the
/// central counts where they are exact. Thirty fresh processes are among them: a process's
/// page faults leave parts below the counters' batch on the CPUs it ran on, so some parts are
/// not zero and their reads are checked, not only the central counts.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn every_still_processes_resident_size_is_statms() {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    // A process still starting is left out by the before/after comparison below.
    let _sleepers = crate::long_files::Sleepers::new(30);
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut iter = TaskIter::load(&Roots::host(), true).unwrap();
    let mut records = Vec::new();
    let before: HashMap<u32, u64> = pids
        .iter()
        .filter_map(|&pid| Some((pid, statm_resident_pages(pid)?)))
        .collect();
    iter.read(&mut records).unwrap();
    let (mut compared, mut with_parts) = (0, 0);
    // This test binary's own threads map and unmap memory throughout.
    let others = records
        .iter()
        .filter(|record| record.tgid != std::process::id());
    for record in others {
        let Some(&resident) = before.get(&record.tgid) else {
            continue;
        };
        if statm_resident_pages(record.tgid) != Some(resident) {
            continue;
        }
        let from_record = match record.resident_source(iter.statm_sums()) {
            ResidentSource::Summed => record.summed_rss_pages().unwrap(),
            ResidentSource::Exact => record.stat_rss_pages(),
            _ => continue,
        };
        assert_eq!(from_record, resident, "pid {}: {record:?}", record.tgid);
        compared += 1;
        with_parts += usize::from(from_record != record.stat_rss_pages());
    }
    assert!(compared >= 20, "only {compared} processes compared");
    if iter.statm_sums() {
        assert!(
            with_parts > 0,
            "none of {compared} processes had per-CPU parts: their reads went unchecked"
        );
    }
}

/// Where `statm` sums the per-CPU parts (6.16+, this host), the program's own sums are what it
/// prints, for a process that stands still; before 6.2 the record's atomics are.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn the_records_resident_size_is_statms_for_a_stopped_process() {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    let mut child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = child.id();
    // SAFETY: a signal to our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGSTOP) }, 0);
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        })
    };
    while !stopped() {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let mut iter = TaskIter::load(&Roots::host(), true).unwrap();
    let mut records = Vec::new();
    iter.read(&mut records).unwrap();
    let record = *records.iter().find(|record| record.tgid == pid).unwrap();
    let statm = statm_resident_pages(pid).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    match record.resident_source(iter.statm_sums()) {
        ResidentSource::Summed => assert_eq!(record.summed_rss_pages(), Some(statm)),
        ResidentSource::Exact => assert_eq!(record.stat_rss_pages(), statm),
        other => {
            assert!(
                !statm_sums_per_cpu_parts(&release),
                "kernel {release} sums statm, but the record gives {other:?}"
            );
        }
    }
}

/// Where the unchanged-cgroup rule's per-thread reads are tried (6.6+, this host), the verifier
/// takes them: the load falls back to a program without them, which would leave the rule off
/// with every other test passing. Elsewhere the program without them loads.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn the_verifier_takes_the_rules_reads_where_they_are_tried() {
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let tried = super::tries_activity_fields(&release);
    for sum_rss in [false, true] {
        let loaded = super::load_and_attach_with(sum_rss, tried);
        assert!(
            loaded.is_ok(),
            "kernel {release}: activity fields {tried}, sums {sum_rss}: {loaded:?}"
        );
    }
    let mut iter = TaskIter::load(&Roots::host(), true).unwrap();
    let mut records = Vec::new();
    iter.read(&mut records).unwrap();
    assert!(records.len() > 10, "{} records", records.len());
    assert!(
        records
            .iter()
            .all(|record| record.has_activity_fields() == tried),
        "kernel {release}: activity fields tried {tried}"
    );
}

/// Threads of this process start and exit while the iterator reads it again and again. The
/// program reads the dead threads' totals and then walks the live threads; an exit in between
/// (the kernel adds the thread to the totals and unlists it in one step) would leave its run
/// time in neither: the program marks such a record torn, and user space reads that process
/// through procfs. Each other record's run time must be at least the one read before it.
#[test]
#[ignore = "root: loads the BPF task iterator"]
fn records_read_while_threads_exit_never_lose_run_time() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
    let mut iter = TaskIter::load(&Roots::host(), true).unwrap();
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    // Idle threads make the walk of the live ones longer, and an exit during it likelier.
    let idle: Vec<_> = (0..64)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let churn = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut started = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let threads: Vec<_> = (0..8)
                    .map(|_| {
                        std::thread::spawn(|| {
                            let until = Instant::now() + Duration::from_micros(300);
                            while Instant::now() < until {
                                std::hint::spin_loop();
                            }
                        })
                    })
                    .collect();
                for thread in threads {
                    thread.join().unwrap();
                }
                started += 8;
            }
            started
        })
    };
    let pid = std::process::id();
    let mut records = Vec::new();
    let (mut reads, mut torn, mut last, mut lost) = (0, 0, 0u64, Vec::new());
    let until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < until {
        iter.read(&mut records).unwrap();
        reads += 1;
        let own = records.iter().find(|record| record.tgid == pid).unwrap();
        if own.is_torn() {
            torn += 1;
            continue;
        }
        if own.runtime_ns < last {
            lost.push(last - own.runtime_ns);
        }
        last = last.max(own.runtime_ns);
    }
    stop.store(true, Ordering::Relaxed);
    let started = churn.join().unwrap();
    for thread in idle {
        thread.join().unwrap();
    }
    eprintln!(
        "{reads} reads ({torn} torn), {started} threads started, {} lost run time",
        lost.len()
    );
    assert!(started > 1000, "{started} threads started in {reads} reads");
    assert!(
        lost.is_empty(),
        "{} of {reads} reads lost run time ({torn} torn, {started} threads started): {lost:?}",
        lost.len()
    );
}
