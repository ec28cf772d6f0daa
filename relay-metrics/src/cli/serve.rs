//! `relay-metrics serve`: the agent (HTTP endpoint, optional OTLP push).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use relay_metrics::output::otlp::{OtlpFlags, OtlpSettings};
use relay_metrics::output::serve;
use relay_metrics::Collector;

use super::{resolve_config, TargetArgs};

#[derive(Args)]
pub(crate) struct ServeArgs {
    #[command(flatten)]
    target: TargetArgs,
    /// Address to listen on (port 0 picks a free port; the bound address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    listen: String,
    /// Period between snapshots. Default: the config's `polling.interval_millis`.
    #[arg(long, value_name = "MS", value_parser = relay_metrics::config::parse_interval_millis)]
    interval_ms: Option<u64>,
    #[command(flatten)]
    otlp: OtlpFlags,
    /// TLS and basic auth for the endpoint, in Prometheus exporter-toolkit's YAML format
    /// (`tls_server_config`, `basic_auth_users`).
    #[arg(long, value_name = "FILE")]
    web_config_file: Option<PathBuf>,
    /// Log lines on stderr as text or JSON objects (filter: `RUST_LOG`, default `info`).
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    log_format: LogFormatArg,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

/// Runs the agent until it is stopped; returns the exit code.
pub(crate) fn run(args: ServeArgs) -> Result<i32> {
    let ServeArgs {
        target,
        listen,
        interval_ms,
        otlp: flags,
        web_config_file,
        log_format,
    } = args;
    serve::init_logging(match log_format {
        LogFormatArg::Text => serve::LogFormat::Text,
        LogFormatArg::Json => serve::LogFormat::Json,
    });
    let mut otlp = OtlpSettings::resolve(&flags, &|name| std::env::var(name).ok())?;
    // Every input file is read and checked before the collector starts.
    if let Some(settings) = &otlp {
        settings.check_tls_files()?;
    }
    let web = web_config_file
        .map(|path| serve::WebConfig::load(&path))
        .transpose()?;
    let mut config = resolve_config(&target)?;
    if let Some(names) = flags.metric_names {
        config.extensions.metric_names = names;
    }
    if let Some(settings) = &mut otlp {
        settings.metric_names = config.extensions.metric_names;
    }
    let period = interval_ms.map_or_else(|| config.polling.period(), Duration::from_millis);
    let collector = Collector::new(config)?;
    let options = serve::AgentOptions {
        listen,
        period,
        otlp,
        // After `Collector::new`, which raised the open-file limit.
        limits: serve::Limits::for_open_file_limit(),
        web,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve::run(collector, options))?;
    Ok(0)
}
