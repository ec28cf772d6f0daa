//! What each eBPF program costs per event, from the kernel's own BPF statistics
//! (`run_time_ns / run_cnt` while `kernel.bpf_stats_enabled` is on), under a pipe ping-pong
//! between two threads (two context switches and two wake-ups per round trip).
//!
//! Needs root: `cargo bench -p relay-metrics-suite --bench ebpf_event_cost`. Prints one line
//! per program; take medians over several runs (single runs spread by ±20 % on a loaded
//! machine). Figures and their history are in docs/PERFORMANCE.md.

use std::io::{Read as _, Write as _};
use std::process::ExitCode;
use std::time::Instant;

use relay_metrics::internals::ebpf::{EbpfOptions, EbpfSource};

const ROUND_TRIPS: usize = 100_000;

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
    let source = EbpfSource::load(&EbpfOptions::default()).map_err(|e| e.to_string())?;
    let _stats = EbpfSource::enable_run_time_stats().map_err(|e| e.to_string())?;
    let before = source.program_run_stats();
    let started = Instant::now();
    ping_pong(ROUND_TRIPS).map_err(|e| format!("ping-pong: {e}"))?;
    let elapsed = started.elapsed();
    let after = source.program_run_stats();
    println!("ping-pong: {ROUND_TRIPS} round trips in {elapsed:?}");
    println!(
        "{:<22} {:>9} {:>12} {:>9}",
        "program", "runs", "ns", "ns/event"
    );
    for (b, a) in before.iter().zip(&after) {
        let runs = a.run_count - b.run_count;
        let ns = a.run_time_ns - b.run_time_ns;
        let per_event = ns
            .checked_div(runs)
            .map_or("-".to_owned(), |n| n.to_string());
        println!(
            "{:<22} {:>9} {:>12} {:>9}",
            a.spec.program, runs, ns, per_event
        );
    }
    Ok(())
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
