//! `relay-metrics snapshot`: one snapshot as JSON.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use relay_metrics::Collector;

use super::{resolve_config, TargetArgs};

#[derive(Args)]
pub(crate) struct SnapshotArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Take a baseline, wait this long, then report the second sample (fills the rates).
    #[arg(long, value_name = "MS", value_parser = relay_metrics::config::parse_interval_millis)]
    interval_ms: Option<u64>,
    /// Indent the JSON.
    #[arg(long)]
    pretty: bool,
}

/// Prints one snapshot; returns the exit code.
pub(crate) fn run(args: SnapshotArgs) -> Result<i32> {
    let SnapshotArgs {
        target,
        interval_ms,
        pretty,
    } = args;
    let mut config = resolve_config(&target)?;
    if interval_ms.is_none() {
        // Kernel event counters start at zero when the collector starts: a lone snapshot
        // would only report zeros, after ~1 s of attaching programs. The reason says so.
        config.extensions.kernel_events = false;
    }
    let mut collector = Collector::new(config)?;
    if let Some(ms) = interval_ms {
        collector.collect();
        std::thread::sleep(Duration::from_millis(ms));
    }
    let snapshot = collector.collect();
    let mut text = if pretty {
        serde_json::to_vec_pretty(&*snapshot)?
    } else {
        let mut text = Vec::with_capacity(16 * 1024);
        snapshot.write_json(&mut text);
        text
    };
    text.push(b'\n');
    std::io::stdout()
        .lock()
        .write_all(&text)
        .context("cannot write the snapshot")?;
    Ok(0)
}
