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
    /// Also measure every cgroup matching these glob patterns over cgroup paths, one series
    /// set each (`*`, `?`, `[…]` within a path component, `**` any number of components), e.g.
    /// '/system.slice/*.service' '/kubepods.slice/**'. Default: the config's
    /// `extensions.cgroups`.
    #[arg(long, value_name = "PATTERN", num_args = 1.., value_parser = parse_pattern)]
    cgroups: Vec<String>,
    /// Bounds the depth of the cgroups measured one by one (`/a` is 1); without --cgroups,
    /// measure every cgroup down to this depth that holds a process.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    cgroup_depth: Option<u32>,
    /// At most this many cgroups are measured one by one (the rest are dropped with a warning
    /// and counted in relay_metrics_targets_dropped). Default: 2000.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=100_000))]
    max_targets: Option<u64>,
    /// The Docker Engine API socket that names the containers among the measured cgroups
    /// (container_name, container_image labels), e.g. /run/docker.sock or podman's
    /// /run/podman/podman.sock. Asked off the sampling thread with bounded timeouts.
    #[arg(long, value_name = "PATH")]
    docker_socket: Option<String>,
    /// The Kubernetes CRI endpoint that names the pods among the measured cgroups (pod_name,
    /// pod_namespace labels; container_name, container_image where --docker-socket does not
    /// name a container), e.g. unix:///run/containerd/containerd.sock or CRI-O's
    /// unix:///run/crio/crio.sock. Asked off the sampling thread with bounded timeouts.
    #[arg(long, value_name = "ENDPOINT", value_parser = parse_cri_endpoint)]
    cri_endpoint: Option<String>,
    #[command(flatten)]
    budget: BudgetArgs,
    /// Log lines on stderr as text or JSON objects (filter: `RUST_LOG`, default `info`).
    #[arg(long, value_name = "FORMAT", value_enum, default_value = "text")]
    log_format: LogFormatArg,
}

/// The series budget: which families and interfaces are exported (on `/metrics` and over
/// OTLP). Globs over family names as the naming gives them (`*` any run, `?` one character).
#[derive(Args)]
struct BudgetArgs {
    /// Export only the families matching one of these globs, e.g. 'container_cpu_*'
    /// 'container_memory_working_set_bytes'. Default: every family.
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    metrics: Vec<String>,
    /// Do not export the families matching one of these globs, e.g.
    /// 'relay_metrics_cgroup_pressure_*' 'container_fs_*'.
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    no_metrics: Vec<String>,
    /// Do not export histograms (the per-cgroup run-queue delay: 14 series per cgroup).
    #[arg(long)]
    no_histograms: bool,
    /// Export only the series of the interfaces matching one of these globs.
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    interfaces: Vec<String>,
    /// Do not export the series of the interfaces matching one of these globs, e.g. 'veth*'
    /// 'cali*'.
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    no_interfaces: Vec<String>,
}

fn parse_cri_endpoint(text: &str) -> Result<String, String> {
    relay_metrics::config::cri_socket(text).map(|_| text.to_owned())
}

fn parse_pattern(text: &str) -> Result<String, String> {
    relay_metrics::config::check_cgroup_pattern(text).map(|()| text.to_owned())
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
        cgroups,
        cgroup_depth,
        max_targets,
        docker_socket,
        cri_endpoint,
        budget,
    } = args;
    let budget = relay_metrics::output::budget::SeriesBudget::new(
        budget.metrics,
        budget.no_metrics,
        !budget.no_histograms,
        budget.interfaces,
        budget.no_interfaces,
    )?;
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
    if !cgroups.is_empty() {
        config.extensions.cgroups = cgroups;
    }
    if cgroup_depth.is_some() {
        config.extensions.cgroup_depth = cgroup_depth;
    }
    if docker_socket.is_some() {
        config.extensions.docker_socket = docker_socket;
    }
    if cri_endpoint.is_some() {
        config.extensions.cri_endpoint = cri_endpoint;
    }
    if let Some(max) = max_targets {
        config.extensions.max_targets = usize::try_from(max).unwrap_or(usize::MAX);
    }
    if let Some(settings) = &mut otlp {
        settings.metric_names = config.extensions.metric_names;
        settings.budget = budget.clone();
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
        budget,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve::run(collector, options))?;
    Ok(0)
}
