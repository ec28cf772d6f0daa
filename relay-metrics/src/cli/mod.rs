//! The command line's grammar (one [`Command`] per subcommand, each with its arguments and its
//! body in its own module) and what the commands share: the target flags and the configuration
//! they resolve to.

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};
use clap::{Args, Parser, Subcommand, ValueEnum as _};

use relay_metrics::config::{ResourceMetricsConfig, ScopeSetting};

pub(crate) mod bench;
mod bench_sources;
pub(crate) mod completions;
pub(crate) mod man;
pub(crate) mod report;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod snapshot;
pub(crate) mod watch;

/// `--version`: the package version and the commit it was built from (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RELAY_METRICS_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "relay-metrics",
    version = VERSION,
    about = "Linux resource-metrics snapshots, compatible with NeMo Relay's resource_metrics"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Print one snapshot as JSON.
    Snapshot(snapshot::SnapshotArgs),
    /// Print snapshots as NDJSON at a fixed rate.
    Watch(watch::WatchArgs),
    /// Run as an agent: sample at a fixed rate and serve the latest snapshot over HTTP
    /// (`/metrics` in Prometheus text format, `/snapshot` as JSON, `/healthz`), optionally
    /// pushing each snapshot to an OpenTelemetry collector (OTLP over HTTP or gRPC).
    Serve(Box<serve::ServeArgs>),
    /// Measure the collector's own cost: collect() latency and CPU time per collect, as JSON.
    Bench(bench::BenchArgs),
    /// Run a command and stream snapshots of its process tree until it exits; exits with the
    /// command's exit code.
    Run(run::RunArgs),
    /// Print a shell completion script, e.g. `relay-metrics completions bash >
    /// /etc/bash_completion.d/relay-metrics`.
    Completions(completions::CompletionsArgs),
    /// Write the man pages (roff) into a directory; what `cargo xtask man` runs.
    #[command(hide = true)]
    Man(man::ManArgs),
    /// Write a report of a `run` or `watch` NDJSON stream: a self-contained HTML page with the
    /// run summary and charts over time, or the charts alone (SVG, PNG).
    Report(report::ReportArgs),
}

/// An error that ends the process with its own exit status instead of 1 (as `run`'s 127 and
/// 126 for a command that is not found or not executable).
#[derive(Debug)]
pub(crate) struct ExitWith {
    pub(crate) code: i32,
    pub(crate) message: String,
}

impl std::fmt::Display for ExitWith {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ExitWith {}

/// The exit status for a command's error: [`ExitWith`]'s, else 1.
pub(crate) fn exit_code(error: &anyhow::Error) -> i32 {
    error.downcast_ref::<ExitWith>().map_or(1, |exit| exit.code)
}

/// Writes a command's whole output to stdout; a reader that went away (`... | head`) is not an
/// error.
pub(crate) fn write_stdout(bytes: &[u8], what: &str) -> Result<i32> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(bytes) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        result => result
            .map(|()| 0)
            .with_context(|| format!("cannot write {what}")),
    }
}

// The measured target, shared by `snapshot`, `watch`, `serve` and `bench`.
#[derive(Args)]
pub(crate) struct TargetArgs {
    /// A Relay/relay-metrics config file (JSON or TOML; a Relay plugins.toml works too).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Measurement scope (default: the config's, else process_tree with --pid, cgroup with
    /// --cgroup, else global).
    #[arg(long, value_enum)]
    scope: Option<ScopeSetting>,
    /// Root process of process_tree / application_process (alone, implies process_tree).
    #[arg(long)]
    pid: Option<u32>,
    /// Cgroup to measure, e.g. /system.slice/foo.service (alone, implies the cgroup scope).
    #[arg(long, value_name = "PATH")]
    cgroup: Option<String>,
}

/// Parses the command line. A usage error (exit status 2, the convention) prints clap's message
/// as one line first (a message clap spreads over several lines is joined), then clap's usage
/// and hint; `--help` and `--version` print as clap prints them.
pub(crate) fn parse() -> Cli {
    let error = match Cli::try_parse() {
        Ok(cli) => return cli,
        Err(error) => error,
    };
    if !error.use_stderr()
        || error.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    {
        error.exit();
    }
    let rendered = error.render().to_string();
    let (message, rest) = rendered.split_once("\n\n").unwrap_or((&rendered, ""));
    let line = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    eprintln!("{line}");
    if !rest.is_empty() {
        eprint!("\n{rest}");
    }
    std::process::exit(2);
}

/// Builds the configuration from the file and the flags.
pub(crate) fn resolve_config(args: &TargetArgs) -> Result<ResourceMetricsConfig> {
    let mut config = match &args.config {
        Some(path) => ResourceMetricsConfig::from_file(path)?,
        None => ResourceMetricsConfig::default(),
    };
    // Precedence: --scope, then a scope written in the config, then the one --pid or --cgroup
    // implies, then global (Relay's CLI default).
    let configured = (config.measurement_scope != ScopeSetting::RuntimeDefault)
        .then_some(config.measurement_scope);
    let (scope, origin) = match (args.scope, configured, args.pid, &args.cgroup) {
        (Some(scope), ..) => (scope, "--scope"),
        (None, Some(scope), ..) => (scope, "the config's measurement_scope"),
        (None, None, Some(_), None) => (ScopeSetting::ProcessTree, "--pid"),
        (None, None, None, Some(_)) => (ScopeSetting::Cgroup, "--cgroup"),
        (None, None, Some(_), Some(_)) => {
            bail!("--pid and --cgroup select different scopes: give --scope")
        }
        (None, None, None, None) => (ScopeSetting::Global, "the default"),
    };
    config.measurement_scope = scope;
    let name = scope_name(scope);
    match scope {
        ScopeSetting::Global if args.pid.is_some() || args.cgroup.is_some() => {
            bail!("{origin} {name} measures every process: drop --pid / --cgroup")
        }
        ScopeSetting::ApplicationProcess | ScopeSetting::ProcessTree if args.cgroup.is_some() => {
            bail!("{origin} {name} measures processes: --cgroup needs the cgroup scope")
        }
        ScopeSetting::Cgroup if args.pid.is_some() => {
            bail!("{origin} {name} measures a cgroup: --pid needs process_tree or application_process")
        }
        _ => {}
    }
    if let Some(pid) = args.pid {
        config.root_pid = Some(pid);
    }
    if let Some(path) = &args.cgroup {
        config.cgroup_path = Some(path.clone());
    }
    if matches!(
        scope,
        ScopeSetting::ApplicationProcess | ScopeSetting::ProcessTree
    ) && config.root_pid.is_none()
    {
        bail!("{origin} {name} needs --pid (the CLI has no process of its own to measure)");
    }
    config.validate()?;
    Ok(config)
}

/// The `--scope` spelling (`runtime_default` never reaches here: it has none).
fn scope_name(scope: ScopeSetting) -> String {
    scope
        .to_possible_value()
        .map_or_else(|| format!("{scope:?}"), |value| value.get_name().to_owned())
}
