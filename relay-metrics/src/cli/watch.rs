//! `relay-metrics watch`: snapshots as NDJSON at a fixed rate.

use std::io::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;

use relay_metrics::Collector;

use super::{resolve_config, TargetArgs};

#[derive(Args)]
pub(crate) struct WatchArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Period between snapshots (fixed rate: deadlines do not drift). Default: the
    /// config's `polling.interval_millis` (5000 unless configured).
    #[arg(long, value_name = "MS", value_parser = relay_metrics::config::parse_interval_millis)]
    interval_ms: Option<u64>,
    /// Stop after this many snapshots.
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

/// Streams snapshots to stdout; returns the exit code.
pub(crate) fn run(args: WatchArgs) -> Result<i32> {
    let config = resolve_config(&args.target)?;
    let interval_ms = args.interval_ms.unwrap_or(
        config
            .polling
            .interval_millis
            .min(relay_metrics::config::MAX_INTERVAL_MILLIS),
    );
    let collector = Collector::new(config)?;
    let stdout = std::io::stdout().lock();
    stream(collector, interval_ms, args.count, stdout)?;
    Ok(0)
}

/// Writes one NDJSON line per tick until `count` lines are written. Ends with an error once the
/// target process is gone (its snapshots would only be empty).
fn stream(
    mut collector: Collector,
    interval_ms: u64,
    count: Option<u64>,
    mut out: impl Write,
) -> Result<()> {
    let mut written = 0u64;
    let mut line = Vec::with_capacity(16 * 1024);
    let mut snapshots = collector.every(Duration::from_millis(interval_ms));
    while count.is_none_or(|count| written < count) {
        let Some(snapshot) = snapshots.next() else {
            break;
        };
        if let Some(reason) = snapshots.collector().target_gone() {
            bail!("{reason}: stopping");
        }
        line.clear();
        snapshot.write_json(&mut line);
        line.push(b'\n');
        match out.write_all(&line).and_then(|()| out.flush()) {
            Ok(()) => {}
            // The reader went away (`watch | head`): stop quietly, as Unix tools do.
            Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(error) => return Err(error).context("cannot write the snapshot stream"),
        }
        written += 1;
    }
    Ok(())
}
