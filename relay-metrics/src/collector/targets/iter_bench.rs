//! The measurement behind docs/PERFORMANCE.md's "Measured cgroups: files against the cgroup
//! iterator" (root; run with `cargo test --release -p relay-metrics --lib
//! collector::targets::iter_bench -- --ignored --nocapture`): the per-snapshot cost of the
//! measured cgroups' pass (`TargetSet::fill`: walk, selection, every cgroup's values) with
//! `extensions.cgroup_source` `files` and `bpf_iter`, side by side, medians of many rounds, for
//! hierarchies of 50 and 500 cgroups made here (in v1 `memory`, `pids`, `cpu`, `cpuacct`) and
//! some of them measured.

use std::path::{Path, PathBuf};
use std::time::Instant;

use super::*;
use crate::config::CgroupSource;

const ROUNDS: usize = 41;

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// `count` empty cgroups `/relay-bench-<pid>/c<n>` in each hierarchy, removed on drop.
struct Made(Vec<PathBuf>);

impl Made {
    fn new(count: usize) -> Self {
        let name = format!("relay-bench-{}", std::process::id());
        let mut dirs = Vec::new();
        for hierarchy in ["memory", "pids", "cpu", "cpuacct"] {
            let parent = Path::new("/sys/fs/cgroup").join(hierarchy).join(&name);
            std::fs::create_dir(&parent).unwrap();
            dirs.push(parent.clone());
            for at in 0..count {
                let dir = parent.join(format!("c{at}"));
                std::fs::create_dir(&dir).unwrap();
                dirs.push(dir);
            }
        }
        Self(dirs)
    }
}

impl Drop for Made {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

fn set(source: CgroupSource, measured: usize, made: usize) -> TargetSet {
    let roots = Roots::host();
    let layout = CgroupLayout::discover(&roots).unwrap();
    let mut config = ResourceMetricsConfig::default();
    let parent = format!("/relay-bench-{}", std::process::id());
    config.extensions.cgroups = if measured == made {
        vec![format!("{parent}/*")]
    } else {
        (0..measured).map(|at| format!("{parent}/c{at}")).collect()
    };
    config.extensions.max_targets = made;
    config.extensions.cgroup_source = source;
    TargetSet::new(&config, &roots, Some(&layout))
        .unwrap()
        .unwrap()
}

/// Medians (µs) of one snapshot's pass with the files and with the iterator, of the iterator's
/// reads alone, and the cgroups those walked.
fn measure(measured: usize, made: usize) -> (f64, f64, f64, usize) {
    let mut files = set(CgroupSource::Files, measured, made);
    let mut iter = set(CgroupSource::BpfIter, measured, made);
    let mut out = Targets::default();
    let mut times = (Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let start = Instant::now();
        files.fill(None, None, None, 100, None, &mut out);
        let files_us = start.elapsed().as_secs_f64() * 1e6;
        assert_eq!(out.cgroups.len(), measured, "{:?}", out.reasons);
        let start = Instant::now();
        iter.fill(None, None, None, 100, None, &mut out);
        let iter_us = start.elapsed().as_secs_f64() * 1e6;
        assert_eq!(out.cgroups.len(), measured, "{:?}", out.reasons);
        // The first round opens every held file: not a steady snapshot.
        if round > 0 {
            times.0.push(files_us);
            times.1.push(iter_us);
        }
    }
    let (source, reason) = iter.cgroup_source();
    assert_eq!(source, crate::source::cgroup_iter::pass::BPF_ITER);
    if let Some(reason) = reason {
        println!("(files for: {reason})");
    }
    let mut reads = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        iter.kernel_values.read(measured);
        reads.push(start.elapsed().as_secs_f64() * 1e6);
    }
    (
        median(times.0),
        median(times.1),
        median(reads),
        iter.kernel_values.walked(),
    )
}

#[test]
#[ignore = "root: makes up to 500 v1 cgroups per hierarchy; a measurement, run with --nocapture"]
fn measured_cgroups_pass_with_files_against_the_iterator() {
    assert!(nix::unistd::geteuid().is_root(), "run as root");
    println!("| cgroups made | measured | files µs | bpf_iter µs | files/iter | iterator reads µs | cgroups walked |");
    println!("|---|---|---|---|---|---|---|");
    for made in [50, 500] {
        let tree = Made::new(made);
        for measured in [1, 4, 8, 16, 50, 500] {
            if measured > made {
                continue;
            }
            let (files, iter, reads, walked) = measure(measured, made);
            println!(
                "| {made} | {measured} | {files:.0} | {iter:.0} | {:.2} | {reads:.0} | {walked} |",
                files / iter
            );
        }
        drop(tree);
    }
}
