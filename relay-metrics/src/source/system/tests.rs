//! Reader tests: fixture trees through `Roots`, and live comparisons with this machine's files.

use super::*;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

fn fixture(files: &[(&str, &[u8])]) -> (tempfile::TempDir, Roots) {
    let dir = tempfile::tempdir().unwrap();
    for (name, content) in files {
        let path = dir.path().join("proc").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    let roots = Roots::fixture(dir.path());
    (dir, roots)
}

#[test]
fn reads_a_fixture_tree_without_psi_as_none_without_error() {
    let (_dir, roots) = fixture(&[
        ("meminfo", include_bytes!("testdata/meminfo")),
        ("stat", include_bytes!("testdata/stat")),
    ]);
    let sample = SystemReader::new(&roots).read(SystemFields::ALL);
    assert_eq!(sample.memory.unwrap().total_kib, Some(24_683_584));
    assert_eq!(sample.stat.unwrap().ctxt, Some(444_372));
    assert_eq!(sample.per_cpu.len(), 2);
    assert_eq!(sample.cpu_pressure, None);
    assert_eq!(sample.io_pressure, None);
    assert!(sample.errors.is_empty(), "{:?}", sample.errors);
}

#[test]
fn reads_psi_from_a_fixture_tree() {
    let (_dir, roots) = fixture(&[
        ("pressure/cpu", include_bytes!("testdata/pressure_cpu")),
        (
            "pressure/memory",
            include_bytes!("testdata/pressure_memory"),
        ),
        ("pressure/io", include_bytes!("testdata/pressure_io")),
    ]);
    let what = SystemFields {
        psi: true,
        ..SystemFields::NONE
    };
    let sample = SystemReader::new(&roots).read(what);
    assert_eq!(
        sample.cpu_pressure.unwrap().some_total_usec,
        Some(106_281_295)
    );
    assert_eq!(sample.io_pressure.unwrap().full_total_usec, Some(1_786_894));
    assert_eq!(sample.memory_pressure.unwrap().some_total_usec, Some(0));
    // Not requested: not read.
    assert_eq!(sample.memory, None);
    assert_eq!(sample.stat, None);
    assert!(sample.errors.is_empty(), "{:?}", sample.errors);
}

#[test]
fn missing_and_malformed_files_are_reported_with_their_path() {
    let (_dir, roots) = fixture(&[("stat", b"nothing useful here\n")]);
    let sample = SystemReader::new(&roots).read(SystemFields::ALL);
    assert_eq!(sample.memory, None);
    assert_eq!(sample.stat, None);
    assert!(sample.per_cpu.is_empty());
    let messages: Vec<String> = sample.errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "{messages:?}");
    assert!(messages[0].contains("proc/meminfo"), "{messages:?}");
    assert!(messages[1].contains("proc/stat: malformed"), "{messages:?}");
}

#[test]
fn read_into_reuses_the_samples_buffers() {
    let mut reader = SystemReader::new(&Roots::host());
    let mut sample = SystemSample::default();
    reader.read_into(SystemFields::ALL, &mut sample);
    let pointer = sample.per_cpu.as_ptr();
    let capacity = sample.per_cpu.capacity();
    for _ in 0..100 {
        reader.read_into(SystemFields::ALL, &mut sample);
    }
    assert_eq!(sample.per_cpu.as_ptr(), pointer);
    assert_eq!(sample.per_cpu.capacity(), capacity);
    assert!(reader.meminfo.is_open() && reader.stat.is_open());
}

#[test]
fn live_meminfo_total_matches_an_independent_read() {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let expected: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .map(|rest| rest.trim().trim_end_matches("kB").trim().parse().unwrap())
        .unwrap();
    let sample = SystemReader::new(&Roots::host()).read(SystemFields::ALL);
    assert!(sample.errors.is_empty(), "{:?}", sample.errors);
    let memory = sample.memory.unwrap();
    assert_eq!(memory.total_kib, Some(expected));
    assert!(memory.available_kib.unwrap() <= expected);
    assert!(memory.free_kib.unwrap() <= expected);
    assert!(memory.swap_free_kib.unwrap() <= memory.swap_total_kib.unwrap());
}

#[test]
fn live_stat_has_one_line_per_cpu_of_nproc() {
    let output = Command::new("nproc").output().unwrap();
    let nproc: usize = String::from_utf8(output.stdout)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let sample = SystemReader::new(&Roots::host()).read(SystemFields::ALL);
    assert_eq!(sample.per_cpu.len(), nproc);
    let stat = sample.stat.unwrap();
    let aggregate = stat.aggregate.unwrap();
    let summed_user: u64 = sample.per_cpu.iter().map(|cpu| cpu.user).sum();
    // The aggregate line is the per-CPU sum, give or take the ticks between the kernel's loops.
    assert!(aggregate.user.abs_diff(summed_user) <= 2 * nproc as u64);
    assert!(stat.ctxt.unwrap() > 0);
    assert!(stat.procs_running.unwrap() >= 1, "this test is running");
}

#[test]
fn live_psi_is_read_on_this_kernel() {
    let what = SystemFields {
        psi: true,
        ..SystemFields::NONE
    };
    let sample = SystemReader::new(&Roots::host()).read(what);
    assert!(sample.errors.is_empty(), "{:?}", sample.errors);
    for pressure in [
        sample.cpu_pressure,
        sample.memory_pressure,
        sample.io_pressure,
    ] {
        let pressure = pressure.expect("PSI files exist on this machine (DESIGN §3)");
        assert!(pressure.some_total_usec.is_some());
        assert!(pressure.full_total_usec.is_some());
    }
}

/// Pins the calling thread to one CPU.
fn pin_to_cpu(cpu: usize) {
    // SAFETY: `set` is a plain bitmask owned by this frame; pid 0 means the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

/// A thread spinning on CPU 0 keeps that CPU busy whatever else runs on the machine, so CPU 0's
/// share of the rate is ≈1 LP, and the machine-wide rate is at least that and at most the CPU
/// count.
#[test]
fn live_cpu_rate_of_a_busy_thread_is_one_logical_processor() {
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            pin_to_cpu(0);
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let mut reader = SystemReader::new(&Roots::host());
    let what = SystemFields {
        stat: true,
        ..SystemFields::NONE
    };
    let before = reader.read(what).per_cpu;
    std::thread::sleep(Duration::from_millis(300));
    let after = reader.read(what).per_cpu;
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();

    let cpu0 = cpu_rate_logical_processors(&before[..1], &after[..1]).unwrap();
    assert!((cpu0 - 1.0).abs() <= 0.3, "CPU 0 rate {cpu0}");
    let all = cpu_rate_logical_processors(&before, &after).unwrap();
    assert!(
        all >= 0.7 && all <= before.len() as f64 + 1e-9,
        "rate {all}"
    );
}
