//! What each eBPF program costs per event, from the kernel's own BPF statistics
//! (`run_time_ns / run_cnt` while `kernel.bpf_stats_enabled` is on), under a pipe ping-pong
//! between two threads (two context switches and two wake-ups per round trip).
//!
//! Two copies of the programs are attached side by side, so that every event runs both and the
//! machine's load hits both alike: one counts every thread (`EbpfOptions::tracked_only` off: a
//! single process is measured), one only tracked processes (a process tree or cgroup is
//! measured) with a sleeping child as its scope. The ping-pong runs first untracked, then
//! tracked (this process joins the scope).
//!
//! A third program, empty, on `sched_switch` gives the floor of any program there (built from
//! `support/empty_tracepoint.bpf.c` with clang-22, which `cargo xtask install-toolchain`
//! installs; left out when that fails).
//!
//! Needs root: `cargo bench -p relay-metrics-suite --bench ebpf_event_cost`. Prints each run
//! and the medians over the runs (single runs spread by ±20 % on a loaded machine). Figures and
//! their history are in docs/PERFORMANCE.md.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::Instant;

use aya::programs::TracePoint;

use relay_metrics::internals::ebpf::{EbpfOptions, EbpfSource};

const ROUND_TRIPS: usize = 100_000;
const RUNS: usize = 5;
/// The programs a ping-pong exercises.
const PROGRAMS: [&str; 2] = ["sched_switch", "sched_wakeup"];

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; a plain `cargo test --benches` runs nothing here.
    if !std::env::args().any(|arg| arg == "--bench") {
        return ExitCode::SUCCESS;
    }
    match measure() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ebpf_event_cost: {error} (the bench loads eBPF programs: run it as root)");
            ExitCode::FAILURE
        }
    }
}

fn measure() -> Result<(), String> {
    let empty = match load_empty_program() {
        Ok(empty) => Some(empty),
        Err(error) => {
            println!("empty program left out: {error}");
            None
        }
    };
    let mut every = EbpfSource::load(&EbpfOptions::default()).map_err(|e| e.to_string())?;
    let mut scoped = EbpfSource::load(&EbpfOptions {
        tracked_only: true,
        ..EbpfOptions::default()
    })
    .map_err(|e| e.to_string())?;
    let mut sleeper = Command::new("sleep")
        .arg("3600")
        .spawn()
        .map_err(|e| format!("spawning sleep: {e}"))?;
    let result = (|| {
        let scope = scoped
            .track_tree(&[sleeper.id()])
            .map_err(|e| e.to_string())?;
        let _stats = EbpfSource::enable_run_time_stats().map_err(|e| e.to_string())?;
        let sources = [("every thread", &every), ("tracked only", &scoped)];
        let untracked = phase("untracked ping-pong", &sources, empty.as_ref())?;
        // Tracked in both, so that both count into a scope as well.
        scoped
            .add_to_scope(scope, &[std::process::id()])
            .map_err(|e| e.to_string())?;
        every
            .track_tree(&[std::process::id()])
            .map_err(|e| e.to_string())?;
        let sources = [("every thread", &every), ("tracked only", &scoped)];
        let tracked = phase("tracked ping-pong", &sources, empty.as_ref())?;
        println!("\nmedians over {RUNS} runs of {ROUND_TRIPS} round trips, ns per event:");
        println!(
            "{:<14} {:<14} {:>14} {:>14} {:>14}",
            "program", "workload", "every thread", "tracked only", "empty program"
        );
        for (workload, (medians, empty)) in [("untracked", untracked), ("tracked", tracked)] {
            for (program, [all, only]) in PROGRAMS.iter().zip(medians) {
                let empty = match (*program, empty) {
                    ("sched_switch", Some(ns)) => ns.to_string(),
                    _ => "-".to_owned(),
                };
                println!("{program:<14} {workload:<14} {all:>14} {only:>14} {empty:>14}");
            }
        }
        Ok(())
    })();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    result
}

/// Median ns per event, per program of [`PROGRAMS`] and source, and of the empty program.
type Medians = (Vec<[u64; 2]>, Option<u64>);

/// Runs the ping-pong [`RUNS`] times; returns the medians.
fn phase(
    name: &str,
    sources: &[(&str, &EbpfSource); 2],
    empty: Option<&aya::Ebpf>,
) -> Result<Medians, String> {
    println!("{name}:");
    let mut per_event: Vec<[Vec<u64>; 2]> = PROGRAMS.iter().map(|_| Default::default()).collect();
    let mut empty_per_event = Vec::new();
    for run in 1..=RUNS {
        let before = sources.map(|(_, source)| run_stats(source));
        let empty_before = empty.map(empty_stats).transpose()?;
        let started = Instant::now();
        ping_pong(ROUND_TRIPS).map_err(|e| format!("ping-pong: {e}"))?;
        let elapsed = started.elapsed();
        let after = sources.map(|(_, source)| run_stats(source));
        let empty_after = empty.map(empty_stats).transpose()?;
        print!("  run {run} ({elapsed:.2?}):");
        for (index, program) in PROGRAMS.iter().enumerate() {
            for side in 0..2 {
                let (runs, ns) = delta(&before[side], &after[side], program)?;
                let cost = ns.checked_div(runs).unwrap_or(0);
                print!(" {program} {}: {cost} ns ({runs} runs);", sources[side].0);
                per_event[index][side].push(cost);
            }
        }
        if let (Some((runs_0, ns_0)), Some((runs_1, ns_1))) = (empty_before, empty_after) {
            let cost = (ns_1 - ns_0).checked_div(runs_1 - runs_0).unwrap_or(0);
            print!(
                " empty on sched_switch: {cost} ns ({} runs);",
                runs_1 - runs_0
            );
            empty_per_event.push(cost);
        }
        println!();
    }
    let medians = per_event
        .into_iter()
        .map(|sides| sides.map(median))
        .collect();
    let empty = (!empty_per_event.is_empty()).then(|| median(empty_per_event));
    Ok((medians, empty))
}

/// Compiles, loads and attaches the empty program to `sched:sched_switch`.
fn load_empty_program() -> Result<aya::Ebpf, String> {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/support/empty_tracepoint.bpf.c");
    let object = std::env::temp_dir().join(format!("empty-tracepoint-{}.o", std::process::id()));
    let status = Command::new("clang-22")
        .args(["-O2", "-target", "bpf", "-c"])
        .arg(&source)
        .arg("-o")
        .arg(&object)
        .status()
        .map_err(|e| format!("running clang-22: {e}"))?;
    let bytes = std::fs::read(&object);
    let _ = std::fs::remove_file(&object);
    if !status.success() {
        return Err(format!("clang-22 failed: {status}"));
    }
    let bytes = bytes.map_err(|e| e.to_string())?;
    let mut ebpf = aya::Ebpf::load(&bytes).map_err(|e| e.to_string())?;
    let program: &mut TracePoint = ebpf
        .program_mut("empty")
        .ok_or("no program named empty")?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| e.to_string())?;
    program.load().map_err(|e| e.to_string())?;
    program
        .attach("sched", "sched_switch")
        .map_err(|e| e.to_string())?;
    Ok(ebpf)
}

/// The empty program's run count and run time (ns).
fn empty_stats(ebpf: &aya::Ebpf) -> Result<(u64, u64), String> {
    let info = ebpf
        .program("empty")
        .ok_or("no program named empty")?
        .info()
        .map_err(|e| e.to_string())?;
    Ok((
        info.run_count(),
        u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
    ))
}

/// Each attached program's name, run count and run time (ns).
fn run_stats(source: &EbpfSource) -> Vec<(&'static str, u64, u64)> {
    source
        .program_run_stats()
        .iter()
        .map(|stats| (stats.spec.program, stats.run_count, stats.run_time_ns))
        .collect()
}

/// Runs and run time of `program` between two readings of [`run_stats`].
fn delta(
    before: &[(&str, u64, u64)],
    after: &[(&str, u64, u64)],
    program: &str,
) -> Result<(u64, u64), String> {
    let find = |stats: &[(&str, u64, u64)]| {
        stats
            .iter()
            .find(|(name, _, _)| *name == program)
            .map(|&(_, runs, ns)| (runs, ns))
            .ok_or_else(|| format!("{program} is not attached"))
    };
    let ((runs_0, ns_0), (runs_1, ns_1)) = (find(before)?, find(after)?);
    Ok((runs_1 - runs_0, ns_1 - ns_0))
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

/// Two threads ping-ponging one byte over a pair of pipes.
fn ping_pong(round_trips: usize) -> std::io::Result<()> {
    let (ping_read, ping_write) = nix::unistd::pipe()?;
    let (pong_read, pong_write) = nix::unistd::pipe()?;
    let mut ping_read = std::fs::File::from(ping_read);
    let mut ping_write = std::fs::File::from(ping_write);
    let mut pong_read = std::fs::File::from(pong_read);
    let mut pong_write = std::fs::File::from(pong_write);
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let mut byte = [0u8; 1];
        for _ in 0..round_trips {
            ping_read.read_exact(&mut byte)?;
            pong_write.write_all(&byte)?;
        }
        Ok(())
    });
    let mut byte = [7u8; 1];
    for _ in 0..round_trips {
        ping_write.write_all(&byte)?;
        pong_read.read_exact(&mut byte)?;
    }
    echo.join()
        .map_err(|_| std::io::Error::other("the echo thread panicked"))?
}
