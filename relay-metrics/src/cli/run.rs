//! `relay-metrics run`: starts a command in its own process group, streams snapshots of its
//! process tree at a fixed rate, and ends with one snapshot taken as soon as the command exits.
//!
//! Lifecycle rules: SIGINT, SIGTERM and SIGHUP sent to `run` are passed on to the command's
//! process group; when `run` must stop early (it cannot write its stream), it ends the whole
//! group (SIGTERM, then SIGKILL after a grace period) instead of leaving the command running
//! under init; with a terminal, the command's group gets the foreground, as a shell would do.
//! A signal `run` cannot catch (SIGKILL, the OOM killer) is covered by a guard process, which
//! ends the group when `run` disappears without saying it is done, and removes `run`'s cgroup.
//!
//! Whole-run accounting: where it may (root, or a delegated cgroup v2 subtree), `run` starts the
//! command in a cgroup of its own ([`cgroup`]) and measures that cgroup, so the kernel's own
//! counters include every descendant; elsewhere (or with `--no-cgroup`) it measures the process
//! tree and says why in `extensions.cumulative.reason`. Either way `run` is a child subreaper:
//! orphans of the command are adopted and reaped by `run`, and their usage is counted. When the
//! command exits, whatever it left running in its cgroup is ended (the cgroup is removed).

use std::io::Write;
use std::path::PathBuf;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::Args;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use relay_metrics::config::{ResourceMetricsConfig, ScopeSetting};
use relay_metrics::{Collector, CollectorError, KernelEventsPreload};

use relay_metrics::internals::{own_children, wait4, Reaped};
use relay_metrics::summary::{Baseline, ExitStatus, ReapedUsage, RunEnd, SummaryBuilder};
use relay_metrics::ReapedProcess;

use super::ExitWith;

mod batch;
mod cgroup;
mod guard;
mod launch;
mod start;
mod stream;
mod tree;

use batch::LineBatch;
use cgroup::RunCgroup;
pub(crate) use guard::guard_if_requested;
use guard::{end_group, Guard};
use launch::{
    block_forwarded_signals, enter_cgroup, load_config, open_output, set_scope,
    spawn_event_threads, start_collector,
};
use stream::{stream_until_exit, Stream};

#[derive(Args)]
pub(crate) struct RunArgs {
    /// A Relay/relay-metrics config file (JSON or TOML); its scope is replaced by the
    /// command's process tree. Without one, the defaults apply, except that below one
    /// snapshot a second `memory.private` is re-read once a second
    /// (`extensions.private_memory_interval_millis = 1000`), and the network interfaces are
    /// not listed one by one, only their totals (`extensions.network_interfaces = false`).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Period between snapshots.
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = relay_metrics::config::parse_interval_millis)]
    interval_ms: u64,
    /// Write the NDJSON stream here instead of stdout. Lines are written in batches (up to
    /// 64 KiB), each at most about 100 ms after it was taken (plus one collect); the last line
    /// is written before `run` exits. A terminal gets each line at once.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Measure the command's process tree instead of starting it in a cgroup of its own.
    #[arg(long)]
    no_cgroup: bool,
    /// Print the run's summary on stderr at the end (the default when stderr is a terminal).
    #[arg(long)]
    summary: bool,
    /// The summary's format (implies --summary).
    #[arg(long, value_enum, value_name = "FORMAT")]
    summary_format: Option<SummaryFormat>,
    /// When the command exits, wait for the processes it left running (at most SECONDS when
    /// given, e.g. `--wait-all=60`), sampling on, instead of ending them at once. Either way
    /// they are named in the last line's `extensions.cumulative.reason` and the summary. A
    /// signal to `run` meanwhile ends the wait (and them).
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, require_equals = true, default_missing_value = "inf", value_parser = parse_wait_limit)]
    wait_all: Option<WaitLimit>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// How the end-of-run summary is written.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SummaryFormat {
    /// An aligned table.
    Text,
    /// One JSON object.
    Json,
}

/// Runs the command under measurement; returns its exit code.
pub(crate) fn run(args: RunArgs) -> Result<i32> {
    use std::io::IsTerminal as _;
    let summary = match args.summary_format {
        Some(format) => Some(format),
        None if args.summary || std::io::stderr().is_terminal() => Some(SummaryFormat::Text),
        None => None,
    };
    run_command(
        args.config,
        args.interval_ms,
        args.output,
        !args.no_cgroup,
        summary,
        args.wait_all.map(|limit| limit.0),
        &args.command,
    )
}

/// `--wait-all`'s limit (`None`: no limit).
#[derive(Clone, Copy)]
struct WaitLimit(Option<Duration>);

/// `--wait-all`'s limit: seconds (`inf`, the value without one, means none).
fn parse_wait_limit(value: &str) -> Result<WaitLimit, String> {
    let seconds: f64 = value
        .parse()
        .map_err(|_| format!("{value:?} is not a number of seconds"))?;
    if seconds.is_infinite() && seconds > 0.0 {
        return Ok(WaitLimit(None));
    }
    Duration::try_from_secs_f64(seconds)
        .map(|limit| WaitLimit(Some(limit)))
        .map_err(|_| format!("{value:?} is not a number of seconds (0 or more)"))
}

/// Without a config file, `memory.private` is re-read at most this often (ms).
const PRIVATE_MEMORY_INTERVAL_MS: u64 = 1000;

/// How long the command's group gets to exit after SIGTERM when `run` aborts.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// The signals `run` passes on to the command.
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// What the helper threads report to the sampling loop.
enum Event {
    /// The command exited (it is not reaped yet: its final counters are still readable).
    Exited,
    /// `run` received this signal.
    Signal(Signal),
}

/// The command's process group, ended (SIGKILL) and reaped if `run` leaves without reaping it.
struct CommandGroup {
    /// The command.
    pid: Pid,
    /// Its process group.
    group: Pid,
    reaped: bool,
    /// Ends the group should `run` be killed; released once `run` is done with the group.
    guard: Option<Guard>,
}

impl CommandGroup {
    fn new(pid: Pid, group: Pid, cgroup_dirs: &[PathBuf]) -> Self {
        let guard = Guard::start(group, cgroup_dirs)
            .inspect_err(|error| {
                tracing::warn!("the command is not guarded against run being killed: {error:#}");
            })
            .ok();
        Self {
            pid,
            group,
            reaped: false,
            guard,
        }
    }

    /// Ends every descendant of `run` but the guard: the processes that left the group
    /// (`setsid`) are among them, as `run` is their subreaper. With a cgroup too, so that they
    /// end before the last snapshot and are reaped here (their peak RSS counted), not killed
    /// unseen by the cgroup's removal.
    fn end_descendants(&self) {
        tree::end_own_descendants(self.guard.as_ref().map(Guard::pid));
    }

    fn signal(&self, signal: Signal) {
        // ESRCH: nobody left in the group.
        let _ = killpg(self.group, signal);
    }

    /// Ends the group: SIGTERM, up to [`ABORT_GRACE`] for the command to exit, then SIGKILL for
    /// whatever is left of the group (descendants that outlived it too).
    fn end(&mut self, events: &Receiver<Event>) {
        end_group(self.group, Signal::SIGTERM);
        let deadline = Instant::now() + ABORT_GRACE;
        loop {
            match events.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited) | Err(_) => break,
                Ok(Event::Signal(_)) => continue,
            }
        }
        self.signal(Signal::SIGKILL);
        self.end_descendants();
    }

    /// Reaps the command, with its resource usage (its reaped descendants included).
    fn reap(&mut self) -> Result<Reaped> {
        loop {
            match wait4(self.pid.as_raw(), false).context("cannot wait for the command")? {
                Some(reaped) if reaped.code.is_some() || reaped.signal.is_some() => {
                    self.reaped();
                    return Ok(reaped);
                }
                _ => continue,
            }
        }
    }

    /// From here on the group's id may be reused: the guard must no longer signal it.
    fn reaped(&mut self) {
        self.reaped = true;
        if let Some(guard) = &mut self.guard {
            guard.tell(b"g");
        }
    }

    /// `run` removed its cgroup (or has none): the guard has nothing left to do.
    fn release_guard(&mut self, cgroup_removed: bool) {
        if let Some(guard) = self.guard.take() {
            if cgroup_removed {
                guard.tell(b"c");
            }
            guard.finish();
        }
    }
}

/// The exit code `run` gives for the command's status (128 + signal when killed).
fn exit_code(reaped: &Reaped) -> i32 {
    reaped
        .code
        .unwrap_or_else(|| 128 + reaped.signal.unwrap_or(0))
}

impl Drop for CommandGroup {
    fn drop(&mut self) {
        if !self.reaped {
            self.signal(Signal::SIGKILL);
            self.end_descendants();
            let _ = waitpid(self.pid, None);
            self.reaped();
        }
        // Without a word from `run`, the guard removes the cgroup when it reads end-of-file.
        if let Some(guard) = self.guard.take() {
            guard.finish();
        }
    }
}

/// Hands the terminal's foreground to the command's group while it runs (so that it can read
/// the terminal and gets the terminal's Ctrl-C itself), and takes it back when dropped.
struct Foreground {
    ours: Pid,
}

impl Foreground {
    fn give_to(group: Pid) -> Option<Self> {
        let stdin = std::io::stdin();
        let ours = nix::unistd::getpgrp();
        if !nix::unistd::isatty(&stdin).unwrap_or(false)
            || nix::unistd::tcgetpgrp(&stdin).ok()? != ours
        {
            return None;
        }
        nix::unistd::tcsetpgrp(&stdin, group).ok()?;
        Some(Self { ours })
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        // SIGTTOU is blocked (see `block_forwarded_signals`), so a background group may take it back.
        let _ = nix::unistd::tcsetpgrp(std::io::stdin(), self.ours);
    }
}

/// Runs `command`, streaming snapshots of its cgroup (or process tree) to `output` (stdout if
/// `None`); prints the summary on stderr when asked; returns the command's exit code.
fn run_command(
    config: Option<PathBuf>,
    interval_ms: u64,
    output: Option<PathBuf>,
    use_cgroup: bool,
    summary: Option<SummaryFormat>,
    wait_all: Option<Option<Duration>>,
    command: &[String],
) -> Result<i32> {
    let mut config = load_config(config.as_deref(), interval_ms)?;
    let (program, arguments) = command.split_first().context("no command given")?;
    if let Some(exit) = unrunnable(program) {
        return Err(exit.into());
    }
    // Before the preload's thread forks its loader (see `start::Starter`).
    let starter = start::Starter::prepare();
    // The eBPF programs take tens of ms to load (the loader child parses the kernel's BTF, the
    // verifier checks each program): loaded meanwhile, they are ready when the command is
    // stopped in its cgroup. The scope is set below (a cgroup or a process tree, both loaded
    // the same way).
    let preload = {
        let mut scoped = config.clone();
        scoped.measurement_scope = ScopeSetting::ProcessTree;
        preload_with_signals_blocked(&scoped)?
    };
    let (mut out, batched) = open_output(output.as_deref())?;
    // Orphans of the command are re-parented to `run`, not to init: `run` reaps them and
    // counts what they used.
    let subreaper = nix::sys::prctl::set_child_subreaper(true)
        .inspect_err(|error| tracing::warn!("run cannot adopt the command's orphans: {error}"))
        .is_ok();
    let cgroup = if use_cgroup {
        RunCgroup::create()
    } else {
        Err("--no-cgroup was given".to_string())
    };
    let cgroup_dirs = cgroup
        .as_ref()
        .map(|cgroup| cgroup.dirs())
        .unwrap_or_default();
    // The command starts stopped (its process, forked by `run`'s starter, stops itself before
    // it execs the command), so the collector attaches before the command creates any process: the kernel event
    // counters then see every process it creates. Its own process group lets `run` signal it
    // and everything it starts at once.
    let (started, cgroup) = start_in(cgroup, starter, program, arguments, subreaper)?;
    let pid = started.pid;
    let pid_u32 = u32::try_from(pid.as_raw()).context("pid out of range")?;
    let mut group = CommandGroup::new(pid, started.group, &cgroup_dirs);
    let forwarded = block_forwarded_signals()?;
    wait_until_stopped(pid)?;
    let cgroup = enter_cgroup(cgroup, pid_u32);
    set_scope(&mut config, &cgroup, pid_u32);
    let collector = start_collector(config, preload, &cgroup, subreaper);
    let _foreground = Foreground::give_to(started.group);
    let collector = match collector {
        Ok(collector) => collector,
        Err(error) => return abandon(&mut group, cgroup.ok(), program, &error),
    };
    let events = spawn_event_threads(pid, forwarded)?;
    let period = Duration::from_millis(interval_ms);
    let mut lines = LineBatch::new(&mut *out, batched.then_some(period));
    let (result, builder, orphans) = stream_command(
        collector, &mut lines, period, &mut group, &cgroup, &events, wait_all,
    );
    // Whatever ended the stream, the lines taken so far are written (after a failed write, the
    // first error is the one reported).
    let flushed = lines.flush().context("cannot write the snapshot stream");
    let started = match result.and_then(|started| flushed.map(|()| started)) {
        Ok(started) => started,
        Err(error) => return end_early(&mut group, &events, cgroup.ok(), error),
    };
    // What the command left running was ended and reaped before the last line
    // (`stream_until_exit`); anything started since is ended here, and the cgroup's removal
    // ends what is left in it.
    group.end_descendants();
    let reaped = group.reap()?;
    let wall_time = started.elapsed();
    end_cgroup(cgroup.ok(), &mut group);
    print_summary(summary, command, wall_time, &reaped, &orphans, builder);
    Ok(exit_code(&reaped))
}

/// Starts the command stopped (`start::start_stopped`); if it cannot start, removes `run`'s
/// cgroup first: no guard watches it yet, and it would stay behind (a pids limit of the caller
/// that left no room for the command's shell did so).
fn start_in(
    cgroup: Result<RunCgroup, String>,
    starter: Result<start::Starter>,
    program: &str,
    arguments: &[String],
    subreaper: bool,
) -> Result<(start::Started, Result<RunCgroup, String>)> {
    match start::start_stopped(starter, program, arguments, subreaper) {
        Ok(started) => Ok((started, cgroup)),
        Err(error) => {
            if let Ok(cgroup) = cgroup {
                let _ = cgroup.remove();
            }
            Err(error)
        }
    }
}

/// The collector could not start: lets the command run to its end unmeasured, then fails.
fn abandon(
    group: &mut CommandGroup,
    cgroup: Option<RunCgroup>,
    program: &str,
    error: &CollectorError,
) -> Result<i32> {
    killpg(group.group, Signal::SIGCONT).context("cannot resume the command")?;
    let status = exit_code(&group.reap()?);
    end_cgroup(cgroup, group);
    bail!("cannot measure {program} (exit status {status}): {error}");
}

/// Streams the command's snapshots until it exits (see `stream_until_exit`); returns when it
/// was resumed, with the summary taken so far and what its reaped orphans used. The collector
/// is dropped before the lines are flushed.
fn stream_command(
    mut collector: Collector,
    lines: &mut LineBatch<'_>,
    period: Duration,
    group: &mut CommandGroup,
    cgroup: &Result<RunCgroup, String>,
    events: &Receiver<Event>,
    wait_all: Option<Option<Duration>>,
) -> (Result<Instant>, SummaryBuilder, Orphans) {
    let mut builder = SummaryBuilder::new(Baseline::Zero).with_interval(period);
    let mut orphans = Orphans::default();
    let guard_pid = group.guard.as_ref().map(Guard::pid);
    let process_group = group.group;
    let members = || match cgroup {
        Ok(cgroup) => cgroup
            .nested()
            .members()
            .into_iter()
            .filter_map(|pid| i32::try_from(pid).ok())
            .collect(),
        Err(_) => tree::own_descendants(&Vec::from_iter(guard_pid)),
    };
    let mut stream = Stream {
        group,
        events,
        builder: &mut builder,
        orphans: &mut orphans,
        wait_all,
        members: &members,
        tracker: cgroup
            .is_err()
            .then(|| tree::Tracker::new(process_group, guard_pid)),
    };
    let result = stream_until_exit(&mut collector, period, lines, &mut stream);
    (result, builder, orphans)
}

/// The stream failed: ends the command's group, reaps it, removes its cgroup; returns `error`.
fn end_early(
    group: &mut CommandGroup,
    events: &Receiver<Event>,
    cgroup: Option<RunCgroup>,
    error: anyhow::Error,
) -> Result<i32> {
    group.end(events);
    group.reap()?;
    end_cgroup(cgroup, group);
    Err(error)
}

/// Prints the summary on stderr in `format` (nothing when `None`).
fn print_summary(
    format: Option<SummaryFormat>,
    command: &[String],
    wall_time: Duration,
    reaped: &Reaped,
    orphans: &Orphans,
    builder: SummaryBuilder,
) {
    if let Some(format) = format {
        let end = RunEnd {
            command: Some(command.join(" ")),
            wall_time: Some(wall_time),
            exit_status: Some(match reaped.signal {
                Some(signal) => ExitStatus::killed(signal),
                None => ExitStatus::exited(reaped.code.unwrap_or(0)),
            }),
            reaped: Some(ReapedUsage {
                user: reaped.user + orphans.user,
                system: reaped.system + orphans.system,
                max_rss_bytes: reaped.max_rss_bytes.max(orphans.max_rss_bytes),
            }),
        };
        let summary = builder.finish(end);
        let text = match format {
            SummaryFormat::Text => summary.to_text(),
            SummaryFormat::Json => summary.to_json() + "\n",
        };
        // A closed stderr is not worth failing the run for.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// The signals `run` passes on to the command, as a set.
fn forwarded_signals() -> SigSet {
    let mut forwarded = SigSet::empty();
    for signal in FORWARDED {
        forwarded.add(signal);
    }
    forwarded
}

/// Starts the eBPF preload on a thread that blocks the signals the forwarding thread waits
/// for (a thread inherits its creator's mask), so that none of them is delivered to it.
fn preload_with_signals_blocked(config: &ResourceMetricsConfig) -> Result<KernelEventsPreload> {
    let mut blocked = forwarded_signals();
    blocked.add(Signal::SIGTTOU);
    let previous = blocked
        .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
        .context("cannot block the signals to forward")?;
    let preload = Collector::preload_kernel_events(config);
    previous
        .thread_set_mask()
        .context("cannot restore the signal mask")?;
    Ok(preload)
}

/// Removes `run`'s cgroup (ending what the command left in it), then lets the guard go.
fn end_cgroup(cgroup: Option<RunCgroup>, group: &mut CommandGroup) {
    let removed = match cgroup {
        Some(cgroup) => cgroup
            .remove()
            .inspect_err(|error| tracing::warn!("{error}"))
            .is_ok(),
        None => true,
    };
    group.release_guard(removed);
}

/// What the adopted orphans `run` reaped used.
#[derive(Default)]
struct Orphans {
    user: Duration,
    system: Duration,
    max_rss_bytes: u64,
}

impl Orphans {
    fn add(&mut self, reaped: &Reaped, collector: &mut Collector) {
        self.user += reaped.user;
        self.system += reaped.system;
        self.max_rss_bytes = self.max_rss_bytes.max(reaped.max_rss_bytes);
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        collector.add_reaped(&ReapedProcess {
            user_ns: ns(reaped.user),
            system_ns: ns(reaped.system),
            read_bytes: reaped.in_blocks.saturating_mul(512),
            write_bytes: reaped.out_blocks.saturating_mul(512),
        });
    }

    /// Reaps the exited orphans while the command runs (it is not a zombie then, so a peek
    /// finds only orphans): first those of the command's process group, then any other child
    /// outside `run`'s own group (an orphan that left the command's group or session, e.g. by
    /// `setsid`). `run`'s helpers stay in its own group and are left to those that wait for
    /// them: a peek that finds one stops there until its owner has reaped it.
    fn reap_exited(&mut self, command: Pid, group: Pid, collector: &mut Collector) {
        let own_group = nix::unistd::getpgrp();
        let peek = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        for in_group in [true, false] {
            let id = || if in_group { Id::PGid(group) } else { Id::All };
            while let Ok(status) = waitid(id(), peek) {
                let orphan = status.pid().filter(|&pid| {
                    pid != command && nix::unistd::getpgid(Some(pid)).is_ok_and(|g| g != own_group)
                });
                match orphan.map(|pid| wait4(pid.as_raw(), true)) {
                    Some(Ok(Some(reaped))) => self.add(&reaped, collector),
                    _ => break,
                }
            }
        }
    }

    /// Reaps every exited orphan once the command exited (a zombie itself, it would hide the
    /// others from a peek): `run`'s children outside its own process group (its helpers stay
    /// in it) are listed.
    fn reap_exited_at_end(&mut self, command: Pid, collector: &mut Collector) {
        let own_group = nix::unistd::getpgrp();
        for pid in own_children() {
            let pid = Pid::from_raw(pid);
            if pid == command || nix::unistd::getpgid(Some(pid)).is_ok_and(|g| g == own_group) {
                continue;
            }
            if let Ok(Some(reaped)) = wait4(pid.as_raw(), true) {
                self.add(&reaped, collector);
            }
        }
    }
}

/// Why `program` cannot be run, as `env` and the shells report it: exit status 127 when it is
/// not found (directly, or through `$PATH` as exec would search it), 126 when it is found but is
/// not an executable file. Checked here so that the error is ours rather than the wrapper
/// shell's.
fn unrunnable(program: &str) -> Option<ExitWith> {
    use std::os::unix::fs::PermissionsExt;
    enum Found {
        Runnable,
        NotExecutable(String),
        Missing,
    }
    let look = |path: &std::path::Path| match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Found::NotExecutable("is a directory".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Found::NotExecutable("not executable".into())
        }
        Ok(_) => Found::Runnable,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Found::Missing,
        // EACCES on a directory of the path, ELOOP, ...: found, but exec would fail.
        Err(error) => Found::NotExecutable(error.to_string()),
    };
    let found = if program.contains('/') {
        look(std::path::Path::new(program))
    } else {
        // As execvp: the first runnable match wins; a match that is not runnable is reported
        // only when there is no runnable one.
        let mut found = Found::Missing;
        for dir in std::env::var_os("PATH")
            .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
            .unwrap_or_default()
        {
            match look(&dir.join(program)) {
                Found::Runnable => {
                    found = Found::Runnable;
                    break;
                }
                Found::NotExecutable(why) if matches!(found, Found::Missing) => {
                    found = Found::NotExecutable(why);
                }
                _ => {}
            }
        }
        found
    };
    match found {
        Found::Runnable => None,
        Found::Missing => Some(ExitWith {
            code: 127,
            message: format!("cannot run {program}: command not found"),
        }),
        Found::NotExecutable(why) => Some(ExitWith {
            code: 126,
            message: format!("cannot run {program}: {why}"),
        }),
    }
}

/// Waits until the freshly started shell has stopped itself (or exited: then `run` goes on and
/// reports its exit status).
fn wait_until_stopped(pid: Pid) -> Result<()> {
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(pid), flags).context("cannot wait for the command to start")? {
        WaitStatus::Stopped(..) => {
            // Consume the stop notification so that later waits see only the exit.
            let _ = waitpid(pid, Some(WaitPidFlag::WUNTRACED | WaitPidFlag::WNOHANG));
            Ok(())
        }
        _ => Ok(()),
    }
}
