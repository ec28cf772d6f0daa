//! The kernel's floor for one relay-metrics collect.
//!
//! Records `relay-metrics bench --iterations 3 <args>` under strace, keeps the syscalls of the
//! last collect (between bench's two `getrusage` calls), then replays their read-type calls
//! (`pread64`, `read`, `lseek`, `getdents64`, `statfs`, `fstatfs`, `newfstatat`, `statx`, bpf map
//! lookups) in a tight loop on descriptors this tool opened once, and prints the median per
//! iteration. `openat`/`close` are counted, never replayed: a held-descriptor collector should
//! not need them, so they are overhead over the floor. BPF lookups run on maps this tool creates
//! with the collector's map types and sizes (its keys are not visible in the trace): hits on
//! present keys, misses on absent ones, as the collector's lookups returned.
//!
//! Usage: `floor [--iterations N] [--paced-us US] [--trace FILE] [--keep-trace FILE] -- RELAY_METRICS_BIN ARGS...`
//! (`--paced-us`: one replay per period, woken by the same sampler as `watch`, with the CPU
//! share of one core that costs, and the wake-ups' lateness and missed ticks; with `--bare`, the
//! same loop without the reads: the cost of waking up alone).
//! where ARGS are the `bench` target flags (`--pid`, `--config`, `--scope` ...).

mod replay;
mod trace;

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{bail, Context, Result};

const TRACED: &str =
    "pread64,read,getdents64,lseek,statfs,fstatfs,newfstatat,statx,openat,bpf,close,getrusage";
const COLLECTS: usize = 3;

fn main() -> Result<()> {
    let mut iterations = 5000usize;
    let mut paced_us: Option<u64> = None;
    let mut bare = false;
    let mut trace_file: Option<String> = None;
    let mut keep: Option<String> = None;
    let mut args = std::env::args().skip(1);
    let mut command = Vec::new();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--iterations" => iterations = args.next().context("--iterations N")?.parse()?,
            "--trace" => trace_file = Some(args.next().context("--trace FILE")?),
            "--paced-us" => paced_us = Some(args.next().context("--paced-us US")?.parse()?),
            "--bare" => bare = true,
            "--keep-trace" => keep = Some(args.next().context("--keep-trace FILE")?),
            "--" => command.extend(args.by_ref()),
            other => bail!("unknown argument {other}"),
        }
    }
    let text = match &trace_file {
        Some(path) => std::fs::read_to_string(path)?,
        None => record(&command, keep.as_deref())?,
    };
    let trace = trace::parse(&text, COLLECTS)?;
    report_calls(&trace);
    let mut plan = replay::Plan::new(&trace)?;
    if let Some(period_us) = paced_us {
        // As `watch` runs it: one replay per period, sleeping in between (cold caches).
        let paced = plan.run_paced(iterations, period_us, !bare);
        println!(
            "{} period_us={period_us} median_us={:.1} p99_us={:.1} cpu_percent_of_one_core={:.1} \
             lateness_us_median={:.0} lateness_us_p99={:.0} lateness_us_max={:.0} missed_ticks={}",
            if bare { "BARE" } else { "PACED" },
            paced.replay.median_us,
            paced.replay.p99_us,
            paced.cpu_percent,
            paced.lateness.median_us,
            paced.lateness.p99_us,
            paced.lateness.max_us,
            paced.missed_ticks
        );
        return Ok(());
    }
    let bare = replay::bare_syscall_ns();
    let timings = plan.run(iterations);
    let breakdown = plan.breakdown(iterations.min(2000));
    println!("\nfloor per file type (mean of per-call timings, µs per collect):");
    for (what, (calls, ns)) in &breakdown {
        println!(
            "  {what:<58} {:>5} calls  {:>8.1} µs  ({:.2} µs/call)",
            calls,
            *ns as f64 / 1e3,
            *ns as f64 / 1e3 / *calls as f64
        );
    }
    println!(
        "\nbare syscall (getppid): {:.3} µs; rewinds added: {}; calls on exited processes skipped: {}",
        bare as f64 / 1e3,
        plan.rewinds(),
        plan.skipped()
    );
    println!(
        "FLOOR median_us={:.1} p99_us={:.1} min_us={:.1} iterations={} replayed_calls={}",
        timings.median_us,
        timings.p99_us,
        timings.min_us,
        iterations,
        plan.len()
    );
    Ok(())
}

fn record(command: &[String], keep: Option<&str>) -> Result<String> {
    let Some((bin, rest)) = command.split_first() else {
        bail!("give `-- RELAY_METRICS_BIN bench-target-args...` or --trace FILE");
    };
    let path = keep.map_or_else(
        || format!("/tmp/relay-metrics-floor-{}.strace", std::process::id()),
        str::to_owned,
    );
    let status = Command::new("strace")
        // The maps must be created in the traced process, not in relay-metrics' loader child
        // (`relay_metrics::IN_PROCESS_ENV`): the replay recreates them from the trace.
        .env("RELAY_METRICS_EBPF_IN_PROCESS", "1")
        .args(["-f", "-qq", "-y", "-s", "0", "-e"])
        .arg(format!("trace={TRACED}"))
        .args(["-o", &path, bin, "bench", "--iterations"])
        .arg(COLLECTS.to_string())
        .args(rest)
        .status()
        .context("cannot run strace")?;
    if !status.success() {
        bail!("strace {bin} bench failed: {status}");
    }
    let text = std::fs::read_to_string(&path)?;
    if keep.is_none() {
        let _ = std::fs::remove_file(&path);
    }
    Ok(text)
}

fn report_calls(trace: &trace::Trace) {
    println!(
        "one steady-state collect: {} syscalls (window of {} collects {}periodic)",
        trace.collect.len(),
        trace.collects_seen,
        if trace.periodic { "" } else { "NOT " }
    );
    let mut per_kind: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_file: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for call in &trace.collect {
        let kind = trace::kind(call);
        *per_kind.entry(kind).or_default() += 1;
        let file = trace::call_path(call).map_or_else(String::new, |p| trace::file_type(&p));
        *per_file.entry((file, kind)).or_default() += 1;
    }
    println!("per kind:");
    for (kind, n) in &per_kind {
        println!("  {kind:<22} {n}");
    }
    println!("per file type:");
    for ((file, kind), n) in &per_file {
        println!("  {n:>5}  {kind:<22} {file}");
    }
    if trace.other_threads > 0 {
        println!(
            "  ({} trace lines of other threads in the window, not replayed)",
            trace.other_threads
        );
    }
    for line in &trace.unknown {
        println!("  NOT UNDERSTOOD: {line}");
    }
}
