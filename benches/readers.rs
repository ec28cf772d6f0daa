//! The readers on this machine's live files: `/proc/net/dev` (and, for the choice made there,
//! Relay's alternative of six held sysfs files per interface), the system-wide files, and one
//! process's files per field set, held open and opened per read (beyond the held-file cap), and
//! the two syscall loops every collect runs, rustix's safe wrappers against the hand-rolled
//! `unsafe` code they replaced (kept here as the reference): listing `/proc` (`RawDir` against
//! raw `getdents64`) and re-reading a file (`pread` into spare capacity).
//!
//! Run with `cargo bench -p relay-metrics-suite --bench readers` (no root needed).

mod support;

use std::hint::black_box;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::path::Path;

use criterion::Criterion;
use relay_metrics::internals::procfs::{DirentBuffer, ProcessFields, ProcessReader};
use relay_metrics::internals::system::{NetReader, SYSFS_COUNTERS};
use relay_metrics::internals::system::{SystemFields, SystemReader, SystemSample};
use relay_metrics::internals::{pread_all, FileKind, HeldFile, Roots};

use support::or_die;

fn network(c: &mut Criterion) {
    let mut group = c.benchmark_group("readers/net");
    let mut reader = NetReader::new(&Roots::host());
    let mut interfaces = Vec::new();
    or_die(reader.read(&mut interfaces), "reading /proc/net/dev");
    group.bench_function(format!("proc_net_dev_{}if", interfaces.len()), |b| {
        b.iter(|| or_die(reader.read(black_box(&mut interfaces)), "reading"))
    });
    let mut files: Vec<HeldFile> = interfaces
        .iter()
        .flat_map(|interface| {
            SYSFS_COUNTERS.map(|counter| {
                HeldFile::new(
                    Path::new("/sys/class/net")
                        .join(&interface.name)
                        .join("statistics")
                        .join(counter),
                    FileKind::Whole,
                )
            })
        })
        .collect();
    let mut buf = Vec::new();
    group.bench_function(format!("sysfs_{}_held_files", files.len()), |b| {
        b.iter(|| {
            for file in &mut files {
                black_box(or_die(file.read(&mut buf), "reading sysfs").len());
            }
        })
    });
    group.finish();
}

fn system_wide(c: &mut Criterion) {
    let mut group = c.benchmark_group("readers/system");
    let mut reader = SystemReader::new(&Roots::host());
    let mut sample = SystemSample::default();
    for (name, what) in [
        ("all", SystemFields::ALL),
        (
            "meminfo",
            SystemFields {
                meminfo: true,
                ..SystemFields::NONE
            },
        ),
        (
            "stat",
            SystemFields {
                stat: true,
                ..SystemFields::NONE
            },
        ),
        (
            "psi",
            SystemFields {
                psi: true,
                ..SystemFields::NONE
            },
        ),
    ] {
        reader.read_into(what, &mut sample);
        assert!(sample.errors.is_empty(), "{:?}", sample.errors);
        group.bench_function(name, |b| {
            b.iter(|| reader.read_into(black_box(what), &mut sample))
        });
    }
    group.finish();
}

fn process(c: &mut Criterion) {
    let mut group = c.benchmark_group("readers/process");
    let pid = std::process::id();
    let all_but_private = ProcessFields {
        private_memory: false,
        ..ProcessFields::ALL
    };
    let only = |set: fn(&mut ProcessFields)| {
        let mut fields = ProcessFields::STAT_ONLY;
        set(&mut fields);
        fields
    };
    let configs = [
        ("all_but_private_memory", all_but_private),
        ("stat_only", ProcessFields::STAT_ONLY),
        ("stat_schedstat", only(|f| f.schedstat = true)),
        ("stat_io", only(|f| f.io = true)),
        ("stat_status_vm_hwm", only(|f| f.peak_resident = true)),
        ("stat_fd_count", only(|f| f.open_fds = true)),
        ("stat_smaps_rollup", only(|f| f.private_memory = true)),
    ];
    let mut held = or_die(ProcessReader::new(&Roots::host(), 16), "process reader");
    for (name, fields) in configs {
        or_die(held.sample(pid, &fields), "sampling this process");
        group.bench_function(name, |b| {
            b.iter(|| or_die(held.sample(pid, black_box(&fields)), "sampling"))
        });
    }
    // A cap of 0 holds nothing: every read opens, reads and closes (the beyond-the-cap path).
    let mut transient = or_die(ProcessReader::new(&Roots::host(), 0), "process reader");
    group.bench_function("all_but_private_memory_opened_per_read", |b| {
        b.iter(|| {
            or_die(
                transient.sample(pid, black_box(&all_but_private)),
                "sampling",
            )
        })
    });
    group.finish();
}

/// The collector's `getdents64` loop before rustix's `RawDir` replaced it, kept as the bench's
/// reference: `linux_dirent64` records parsed by offset from a reused buffer.
fn hand_rolled_listing(buf: &mut [u8], dir: BorrowedFd<'_>, mut entry: impl FnMut(&[u8])) {
    const RECLEN_OFFSET: usize = 16;
    const NAME_OFFSET: usize = 19;
    or_die(
        nix::unistd::lseek(dir, 0, nix::unistd::Whence::SeekSet),
        "rewinding",
    );
    loop {
        // SAFETY: the pointer and length describe `buf`, valid for writes of its whole length
        // for the call; the kernel writes at most that many bytes.
        let read = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buf.as_mut_ptr(),
                buf.len(),
            )
        };
        let filled = usize::try_from(read).unwrap_or(0).min(buf.len());
        if filled == 0 {
            return;
        }
        let mut offset = 0;
        while let Some(record) = buf.get(offset..filled) {
            let Some(reclen) = record
                .get(RECLEN_OFFSET..RECLEN_OFFSET + 2)
                .map(|bytes| usize::from(u16::from_ne_bytes([bytes[0], bytes[1]])))
            else {
                break;
            };
            assert!(reclen > NAME_OFFSET && reclen <= record.len());
            let name = &record[NAME_OFFSET..reclen];
            let name = name
                .iter()
                .position(|&b| b == 0)
                .map_or(name, |end| &name[..end]);
            entry(name);
            offset += reclen;
        }
    }
}

/// Listing `/proc` (every pid directory: the global scope's process list), one held descriptor,
/// old and new side by side in the same run.
fn listing(c: &mut Criterion) {
    let mut group = c.benchmark_group("readers/list_proc");
    let proc = or_die(std::fs::File::open("/proc"), "opening /proc");
    let mut dirents = DirentBuffer::default();
    let mut old_buf = vec![0u8; 32 * 1024];
    let is_pid = |name: &[u8]| usize::from(name.first().is_some_and(u8::is_ascii_digit));
    let mut new_count = 0usize;
    or_die(
        dirents.for_each(proc.as_fd(), |name| new_count += is_pid(name)),
        "listing",
    );
    let mut old_count = 0usize;
    hand_rolled_listing(&mut old_buf, proc.as_fd(), |name| old_count += is_pid(name));
    // The same pid directories, give or take the processes that came or went in between.
    assert!(
        new_count > 0 && old_count.abs_diff(new_count) < 10,
        "{new_count} vs {old_count}"
    );
    for round in 0..3 {
        group.bench_function(format!("rustix_raw_dir/{round}"), |b| {
            b.iter(|| {
                let mut pids = 0usize;
                or_die(
                    dirents.for_each(proc.as_fd(), |name| pids += name.len()),
                    "listing",
                );
                black_box(pids)
            })
        });
        group.bench_function(format!("hand_rolled_getdents64/{round}"), |b| {
            b.iter(|| {
                let mut pids = 0usize;
                hand_rolled_listing(&mut old_buf, proc.as_fd(), |name| pids += name.len());
                black_box(pids)
            })
        });
    }
    group.finish();
}

/// The collector's `pread_all` before rustix's `pread` into `spare_capacity` replaced it, kept as
/// the bench's reference.
fn hand_rolled_pread_all<'b>(file: &std::fs::File, buf: &'b mut Vec<u8>) -> &'b [u8] {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let filled = buf.len();
        let spare = buf.capacity() - filled;
        // SAFETY: the pointer is `spare` writable bytes of the vector's allocation, right after
        // its initialised part; the kernel writes at most `spare` bytes there.
        let read = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.as_mut_ptr().add(filled).cast(),
                spare,
                or_die(libc::off_t::try_from(filled), "offset"),
            )
        };
        let read = or_die(usize::try_from(read), "pread").min(spare);
        // SAFETY: the kernel initialised `read` bytes right after the `filled` ones.
        unsafe { buf.set_len(filled + read) };
        if read == 0 || read < spare {
            return buf.as_slice();
        }
        buf.reserve(buf.capacity());
    }
}

/// Re-reading `/proc/self/stat` (~300 bytes) and `/proc/self/status` (~1.5 kB) on one held
/// descriptor, old and new side by side in the same run.
fn rereading(c: &mut Criterion) {
    let mut group = c.benchmark_group("readers/pread");
    for name in ["stat", "status"] {
        let path = format!("/proc/self/{name}");
        let file = or_die(std::fs::File::open(&path), "opening");
        let mut buf = Vec::new();
        let new_len = or_die(pread_all(&file, &mut buf), "reading").len();
        let old_len = hand_rolled_pread_all(&file, &mut buf).len();
        assert!(new_len > 0 && old_len > 0, "{path}: {new_len} vs {old_len}");
        for round in 0..3 {
            group.bench_function(format!("{name}/rustix_spare_capacity/{round}"), |b| {
                b.iter(|| black_box(or_die(pread_all(&file, &mut buf), "reading").len()))
            });
            group.bench_function(format!("{name}/hand_rolled_pread/{round}"), |b| {
                b.iter(|| black_box(hand_rolled_pread_all(&file, &mut buf).len()))
            });
        }
    }
    group.finish();
}

quick_main!(2; network, system_wide, process, listing, rereading);
