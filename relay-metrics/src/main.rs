//! The `relay-metrics` command line: one snapshot, a fixed-rate stream, or a measured command.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};

use relay_metrics::config::{ProcessSource, ResourceMetricsConfig, ScopeSetting};
use relay_metrics::output::otlp::{OtlpFlags, OtlpSettings};
use relay_metrics::output::serve;
use relay_metrics::Collector;

// The binary's own modules live under src/cli/ (src/ is the library's).
#[path = "cli/bench_sources.rs"]
mod bench_sources;
#[path = "cli/run.rs"]
mod run;

#[derive(Parser)]
#[command(
    name = "relay-metrics",
    version,
    about = "Linux resource-metrics snapshots, compatible with NeMo Relay's resource_metrics"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print one snapshot as JSON.
    Snapshot {
        #[command(flatten)]
        target: TargetArgs,
        /// Take a baseline, wait this long, then report the second sample (fills the rates).
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        interval_ms: Option<u64>,
        /// Indent the JSON.
        #[arg(long)]
        pretty: bool,
    },
    /// Print snapshots as NDJSON at a fixed rate.
    Watch {
        #[command(flatten)]
        target: TargetArgs,
        /// Period between snapshots (fixed rate: deadlines do not drift). Default: the
        /// config's `polling.interval_millis` (5000 unless configured).
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
        interval_ms: Option<u64>,
        /// Stop after this many snapshots.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
    },
    /// Run as an agent: sample at a fixed rate and serve the latest snapshot over HTTP
    /// (`/metrics` in Prometheus text format, `/snapshot` as JSON, `/healthz`), optionally
    /// pushing each snapshot to an OpenTelemetry collector (OTLP over HTTP or gRPC).
    Serve {
        #[command(flatten)]
        target: TargetArgs,
        /// Address to listen on (port 0 picks a free port; the bound address is printed).
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
        listen: String,
        /// Period between snapshots. Default: the config's `polling.interval_millis`.
        #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..))]
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
    },
    /// Measure the collector's own cost: collect() latency and CPU time per collect, as JSON.
    Bench {
        #[command(flatten)]
        target: TargetArgs,
        /// Timed collects (after 10 untimed warm-up collects), at most 10,000,000 (their
        /// latencies are kept to compute the percentiles: 80 MB at the cap).
        #[arg(long, value_name = "N", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=MAX_BENCH_ITERATIONS))]
        iterations: u64,
        /// Where per-process values come from (overrides `extensions.process_source`); `both`
        /// measures the task-iterator and procfs paths side by side, alternating collects.
        #[arg(long, value_enum)]
        process_source: Option<ProcessSourceArg>,
    },
    /// Run a command and stream snapshots of its process tree until it exits; exits with the
    /// command's exit code.
    Run {
        /// A Relay/relay-metrics config file (JSON or TOML); its scope is replaced by the
        /// command's process tree.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Period between snapshots.
        #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
        interval_ms: u64,
        /// Write the NDJSON stream here instead of stdout.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
}

#[derive(Args)]
struct TargetArgs {
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

#[derive(Clone, Copy, ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
enum ProcessSourceArg {
    Auto,
    BpfIter,
    Procfs,
    Both,
}

fn main() {
    // The guard of `run`'s command (this binary re-run) never returns from here.
    run::guard_if_requested();
    // First of all: in the eBPF loader child (this binary re-run) this loads the programs, hands
    // them over and exits. Here it makes kernel events load in that child, so aya's parse of the
    // kernel BTF (~16 MiB at its peak) never counts in this long-running process.
    relay_metrics::init_child_loader();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("relay-metrics: error: {error:#}");
            std::process::exit(1);
        }
    }
}

fn run(cli: Cli) -> Result<i32> {
    match cli.command {
        Command::Snapshot {
            target,
            interval_ms,
            pretty,
        } => {
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
        Command::Watch {
            target,
            interval_ms,
            count,
        } => {
            let config = resolve_config(&target)?;
            let interval_ms = interval_ms.unwrap_or(config.polling.interval_millis);
            let collector = Collector::new(config)?;
            let stdout = std::io::stdout().lock();
            stream(collector, interval_ms, count, stdout)?;
            Ok(0)
        }
        Command::Run {
            config,
            interval_ms,
            output,
            command,
        } => run::run_command(config, interval_ms, output, &command),
        Command::Serve {
            target,
            listen,
            interval_ms,
            otlp,
            web_config_file,
            log_format,
        } => {
            serve::init_logging(match log_format {
                LogFormatArg::Text => serve::LogFormat::Text,
                LogFormatArg::Json => serve::LogFormat::Json,
            });
            let flags = otlp;
            let mut otlp = OtlpSettings::resolve(&flags, &|name| std::env::var(name).ok())?;
            let mut config = resolve_config(&target)?;
            if let Some(names) = flags.metric_names {
                config.extensions.metric_names = names;
            }
            if let Some(settings) = &mut otlp {
                settings.metric_names = config.extensions.metric_names;
            }
            let period =
                Duration::from_millis(interval_ms.unwrap_or(config.polling.interval_millis));
            let collector = Collector::new(config)?;
            let options = serve::AgentOptions {
                listen,
                period,
                otlp,
                // After `Collector::new`, which raised the open-file limit.
                limits: serve::Limits::for_open_file_limit(),
                web: web_config_file
                    .map(|path| serve::WebConfig::load(&path))
                    .transpose()?,
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start the async runtime")?;
            runtime.block_on(serve::run(collector, options))?;
            Ok(0)
        }
        Command::Bench {
            target,
            iterations,
            process_source,
        } => {
            let mut config = resolve_config(&target)?;
            config.extensions.process_source = match process_source {
                None => config.extensions.process_source,
                Some(ProcessSourceArg::Auto) => ProcessSource::Auto,
                Some(ProcessSourceArg::BpfIter) => ProcessSource::BpfIter,
                Some(ProcessSourceArg::Procfs) => ProcessSource::Procfs,
                Some(ProcessSourceArg::Both) => ProcessSource::Auto,
            };
            let mut line = if matches!(process_source, Some(ProcessSourceArg::Both)) {
                serde_json::to_vec(&bench_sources::run(&config, iterations)?)?
            } else {
                serde_json::to_vec(&bench(Collector::new(config)?, iterations))?
            };
            line.push(b'\n');
            match std::io::stdout().lock().write_all(&line) {
                // The reader went away (`bench | true`): nothing left to report to.
                Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
                result => result.map(|()| 0).context("cannot write the report"),
            }
        }
    }
}

/// Builds the configuration from the file and the flags.
fn resolve_config(args: &TargetArgs) -> Result<ResourceMetricsConfig> {
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

/// The most collects `bench` times.
const MAX_BENCH_ITERATIONS: u64 = 10_000_000;

/// What `bench` prints.
#[derive(serde::Serialize)]
struct BenchReport {
    scope: relay_metrics::snapshot::MeasurementScope,
    iterations: u64,
    median_us: f64,
    p99_us: f64,
    max_us: f64,
    /// Process CPU time (user + system, all threads) per collect.
    cpu_us_per_collect: f64,
    /// Processes in the last snapshot.
    processes: Option<u64>,
}

fn bench(mut collector: Collector, iterations: u64) -> BenchReport {
    for _ in 0..10 {
        drop(collector.collect());
    }
    let mut latencies_us = Vec::with_capacity(usize::try_from(iterations).unwrap_or(0));
    let cpu_before = process_cpu_us();
    let mut processes = None;
    for _ in 0..iterations {
        let started = Instant::now();
        let snapshot = collector.collect();
        latencies_us.push(started.elapsed().as_secs_f64() * 1e6);
        processes = snapshot
            .process_sampling
            .as_ref()
            .map(|s| s.sampled_processes);
    }
    let cpu_us = process_cpu_us() - cpu_before;
    latencies_us.sort_by(f64::total_cmp);
    let at = |quantile: f64| {
        let index = ((latencies_us.len() as f64 - 1.0) * quantile).round() as usize;
        latencies_us.get(index).copied().unwrap_or(0.0)
    };
    BenchReport {
        scope: collector.scope(),
        iterations,
        median_us: at(0.5),
        p99_us: at(0.99),
        max_us: at(1.0),
        cpu_us_per_collect: cpu_us / iterations as f64,
        processes,
    }
}

/// CPU time of this process so far (user + system), µs.
fn process_cpu_us() -> f64 {
    match nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let us = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 * 1e6 + t.tv_usec() as f64;
            us(usage.user_time()) + us(usage.system_time())
        }
        Err(_) => f64::NAN,
    }
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
