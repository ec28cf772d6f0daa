//! The readers on this machine's live files: `/proc/net/dev` (and, for the choice made there,
//! Relay's alternative of six held sysfs files per interface), the system-wide files, and one
//! process's files per field set, held open and opened per read (beyond the held-file cap).
//!
//! Run with `cargo bench -p relay-metrics-suite --bench readers` (no root needed).

mod support;

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use relay_metrics::internals::procfs::{ProcessFields, ProcessReader};
use relay_metrics::internals::system::NetReader;
use relay_metrics::internals::system::{SystemFields, SystemReader, SystemSample};
use relay_metrics::internals::{HeldFile, Roots};

use support::{or_die, quick};

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
            [
                "rx_bytes",
                "tx_bytes",
                "rx_packets",
                "tx_packets",
                "rx_errors",
                "tx_errors",
            ]
            .map(|counter| {
                HeldFile::new(
                    Path::new("/sys/class/net")
                        .join(&interface.name)
                        .join("statistics")
                        .join(counter),
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

criterion_group! {
    name = benches;
    config = quick(Duration::from_secs(2));
    targets = network, system_wide, process
}
criterion_main!(benches);
