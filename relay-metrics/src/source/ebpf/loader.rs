//! Loading in a short-lived child process, so that aya's parse of the kernel BTF never counts in
//! the long-running process.
//!
//! aya 0.14's `EbpfLoader::new()` always parses `/sys/kernel/btf/vmlinux` (~16 MiB resident at
//! its peak), although our tracepoint programs need no BTF relocation, and no public API skips
//! it. A program that calls [`init_child_loader`] first thing in `main` has [`EbpfSource::load`]
//! re-run its own executable (`/proc/self/exe`, shown as `relay-metrics-ebpf-loader`) with a
//! socket on stdin: the child loads and attaches the programs exactly as the in-process path
//! does, sends back the descriptors that keep them alive (the maps the source reads, each
//! program and its BPF link) with `SCM_RIGHTS`, and exits. Re-executing rather than forking keeps
//! it safe in a multi-threaded process.
//!
//! The child's failures come back as the same [`EbpfUnavailable`] values the in-process path
//! gives. Where that is impossible the parent loads in-process instead (and says so in
//! [`LoadedBy`]): the child could not be started, the object failed to load (aya's typed error
//! cannot cross processes, so the parent repeats the load to report it), the child lost
//! capabilities across `exec`, or a kernel before 5.15 attached a tracepoint without a BPF link
//! (its perf event cannot be named from outside aya).
//!
//! [`EbpfSource::load`]: super::EbpfSource::load

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use aya::maps::{Map, MapData};
use relay_metrics_common::Config;

use super::fds;
use super::types::{EbpfUnavailable, ProgramSpec, ProgramState, ProgramStatus, PROGRAMS};
use super::{Loaded, MAP_NAMES};
use crate::source::Roots;

/// Set (to the protocol version) in the loader child's environment.
const LOADER_ENV: &str = "RELAY_METRICS_EBPF_LOADER";
const PROC_ENV: &str = "RELAY_METRICS_EBPF_LOADER_PROC";
const SYS_ENV: &str = "RELAY_METRICS_EBPF_LOADER_SYS";
const PROTOCOL: &str = "1";
/// Verifier logs of failed programs can be long; anything past this is not a report.
const MAX_REPORT_BYTES: usize = 16 << 20;

/// Where the programs of an [`EbpfSource`](super::EbpfSource) were loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadedBy {
    /// In this process (the library's default: see [`init_child_loader`]).
    ThisProcess,
    /// By a loader child process, which has exited since.
    ChildProcess {
        /// The child's pid.
        pid: u32,
    },
    /// In this process, because the loader child could not hand the programs over (why).
    ThisProcessInstead(String),
}

/// How the loader child is started.
#[derive(Debug, Clone)]
pub(super) struct LoaderCommand {
    program: PathBuf,
    args: Vec<OsString>,
    arg0: Option<OsString>,
}

impl LoaderCommand {
    /// This executable, re-run: its `main` starts with [`init_child_loader`].
    fn this_executable() -> Self {
        Self {
            program: PathBuf::from("/proc/self/exe"),
            args: Vec::new(),
            arg0: Some(OsString::from("relay-metrics-ebpf-loader")),
        }
    }
}

static COMMAND: OnceLock<LoaderCommand> = OnceLock::new();

/// The child loader, when [`init_child_loader`] enabled it.
pub(super) fn command() -> Option<&'static LoaderCommand> {
    COMMAND.get()
}

/// Makes this program load its eBPF programs in a short-lived child process. Call it first thing
/// in `main`, before parsing arguments.
///
/// In the child (this executable re-run by [`EbpfSource::load`](super::EbpfSource::load), marked
/// by its environment) it loads and attaches the programs, hands them to the parent and exits:
/// it never returns there. Otherwise it returns at once, and every later `EbpfSource::load` (and
/// so every `Collector` with kernel events) of this process loads in such a child, so this
/// process's resident memory never holds aya's parse of the kernel BTF (~16 MiB at its peak).
/// Programs that do not call it load in-process, as before.
pub fn init_child_loader() {
    if std::env::var_os(LOADER_ENV).is_some() {
        serve_parent();
    }
    let _ = COMMAND.set(LoaderCommand::this_executable());
}

/// What the child tells its parent (JSON, with the descriptors alongside; indexes are into them).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum Report {
    Loaded {
        /// The [`Config`] given to the programs, as its bytes.
        config: Vec<u8>,
        programs: Vec<ProgramReport>,
        maps: Vec<(String, usize)>,
    },
    NotPrivileged {
        cap_eff: u64,
    },
    NoTracefs {
        errno: Option<i32>,
    },
    NothingAttached {
        failures: String,
    },
    /// The parent must load in-process (why).
    LoadInParent {
        why: String,
    },
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct ProgramReport {
    program: String,
    failed: Option<String>,
    program_fd: Option<usize>,
    link_fd: Option<usize>,
}

/// The child's side: load, describe, send, exit.
fn serve_parent() -> ! {
    if std::env::var_os(LOADER_ENV).is_none_or(|version| version != PROTOCOL) {
        eprintln!("relay-metrics: {LOADER_ENV} is set to an unknown protocol version");
        std::process::exit(2);
    }
    // SAFETY: the parent put the socket on stdin for this process, which uses stdin for nothing
    // else: taking ownership of fd 0 is sound.
    let socket = UnixStream::from(unsafe { OwnedFd::from_raw_fd(0) });
    if socket.local_addr().is_err() {
        eprintln!("relay-metrics: {LOADER_ENV} is set but stdin is not the loader's socket");
        std::process::exit(2);
    }
    let roots = Roots {
        proc: std::env::var_os(PROC_ENV).map_or_else(|| PathBuf::from("/proc"), PathBuf::from),
        sys: std::env::var_os(SYS_ENV).map_or_else(|| PathBuf::from("/sys"), PathBuf::from),
    };
    // `loaded` stays alive until the process exits: the descriptors sent are borrowed from it.
    let loaded = super::load_programs(&roots);
    let mut sent = Vec::new();
    let report = match &loaded {
        Ok(loaded) => describe(loaded, &roots, &mut sent),
        Err(error) => report_error(error),
    };
    let code = match serde_json::to_vec(&report)
        .map_err(io::Error::other)
        .and_then(|data| fds::send(&socket, &data, &sent))
    {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("relay-metrics-ebpf-loader: cannot hand over the programs: {error}");
            1
        }
    };
    // Exiting closes our copies; the kernel keeps each object alive through the parent's.
    std::process::exit(code);
}

fn report_error(error: &EbpfUnavailable) -> Report {
    match error {
        EbpfUnavailable::NotPrivileged { cap_eff, .. } => {
            Report::NotPrivileged { cap_eff: *cap_eff }
        }
        EbpfUnavailable::NoTracefs { source, .. } => Report::NoTracefs {
            errno: source.raw_os_error(),
        },
        EbpfUnavailable::NothingAttached(failures) => Report::NothingAttached {
            failures: failures.clone(),
        },
        EbpfUnavailable::Load(error) => Report::LoadInParent {
            why: format!("the object failed to load in the loader process ({error})"),
        },
    }
}

/// The map data of a map (the kinds our object declares).
fn map_data(map: &Map) -> Option<&MapData> {
    match map {
        Map::HashMap(data) | Map::LruHashMap(data) | Map::Array(data) | Map::RingBuf(data) => {
            Some(data)
        }
        _ => None,
    }
}

/// Lists the descriptors to send (into `sent`) and says what each is.
fn describe(loaded: &Loaded, roots: &Roots, sent: &mut Vec<RawFd>) -> Report {
    let mut maps = Vec::new();
    for name in MAP_NAMES {
        if let Some(data) = loaded.ebpf.map(name).and_then(map_data) {
            maps.push((name.to_owned(), sent.len()));
            sent.push(data.fd().as_fd().as_raw_fd());
        }
    }
    let links = match links_by_program(roots) {
        Ok(links) => links,
        Err(error) => {
            return Report::LoadInParent {
                why: format!("the loader process cannot list its descriptors: {error}"),
            }
        }
    };
    let mut programs = Vec::with_capacity(loaded.status.len());
    for status in &loaded.status {
        let name = status.spec.program;
        let mut report = ProgramReport {
            program: name.to_owned(),
            failed: None,
            program_fd: None,
            link_fd: None,
        };
        match &status.state {
            ProgramState::Failed(reason) => report.failed = Some(reason.clone()),
            ProgramState::Attached => {
                let program = loaded.ebpf.program(name);
                let fd = program.and_then(|p| p.fd().ok());
                let id = program.and_then(|p| p.info().ok()).map(|info| info.id());
                let (Some(fd), Some(link)) = (fd, id.and_then(|id| links.get(&id))) else {
                    return Report::LoadInParent {
                        why: format!(
                            "program {name} is attached without a BPF link the loader process \
                             can hand over (tracepoints attach by perf event before Linux 5.15)"
                        ),
                    };
                };
                report.program_fd = Some(sent.len());
                sent.push(fd.as_fd().as_raw_fd());
                report.link_fd = Some(sent.len());
                sent.push(*link);
            }
        }
        programs.push(report);
    }
    Report::Loaded {
        config: config_bytes(&loaded.config),
        programs,
        maps,
    }
}

/// This process's BPF link descriptors, by the id of the program each runs. aya keeps a
/// tracepoint's link descriptor private, so it is found in the descriptor table.
fn links_by_program(roots: &Roots) -> io::Result<HashMap<u32, RawFd>> {
    let own = roots.proc.join("self");
    let mut links = HashMap::new();
    let mut buf = Vec::with_capacity(256);
    for entry in std::fs::read_dir(own.join("fd"))? {
        let Ok(fd) = entry?.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        if fds::read_small(&own.join("fdinfo").join(fd.to_string()), &mut buf).is_err() {
            continue;
        }
        if let Some(program) = fds::link_program_id(&buf) {
            links.entry(program).or_insert(fd);
        }
    }
    Ok(links)
}

fn config_bytes(config: &Config) -> Vec<u8> {
    // SAFETY: Config is #[repr(C)] with explicit padding and integer fields only: all of its
    // size_of bytes are initialized.
    unsafe {
        std::slice::from_raw_parts(
            (config as *const Config).cast::<u8>(),
            std::mem::size_of::<Config>(),
        )
    }
    .to_vec()
}

fn config_from_bytes(bytes: &[u8]) -> Option<Config> {
    (bytes.len() == std::mem::size_of::<Config>()).then(|| {
        // SAFETY: the length is checked, Config has integer fields only (every bit pattern is
        // valid), and read_unaligned copes with the Vec's alignment.
        unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Config>()) }
    })
}

/// What the parent got from the child.
pub(super) enum ChildOutcome {
    /// The programs run; these descriptors keep them.
    Handed(Handover),
    /// Loading failed for a reason the in-process path would give too.
    Failed(EbpfUnavailable),
    /// The parent should load in-process (why).
    InProcess(String),
}

/// The descriptors and states handed over by the child.
pub(super) struct Handover {
    pub(super) pid: u32,
    pub(super) status: Vec<ProgramStatus>,
    pub(super) config: Config,
    pub(super) maps: Vec<(&'static str, Map)>,
    pub(super) links: Vec<OwnedFd>,
    pub(super) programs: Vec<(ProgramSpec, OwnedFd)>,
}

/// Runs the loader child for `roots` and takes what it hands over.
pub(super) fn load_in_child(roots: &Roots, command: &LoaderCommand) -> ChildOutcome {
    let (ours, theirs) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(error) => return ChildOutcome::InProcess(format!("no socket pair: {error}")),
    };
    let mut child_command = Command::new(&command.program);
    child_command
        .args(&command.args)
        .env(LOADER_ENV, PROTOCOL)
        .env(PROC_ENV, &roots.proc)
        .env(SYS_ENV, &roots.sys)
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    if let Some(arg0) = &command.arg0 {
        child_command.arg0(arg0);
    }
    let spawned = child_command.spawn();
    // Our copy of the child's end must be closed, or its exit would not end the stream.
    drop(child_command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            return ChildOutcome::InProcess(format!(
                "cannot start the loader process {}: {error}",
                command.program.display()
            ))
        }
    };
    let received = fds::receive_all(&ours, MAX_REPORT_BYTES);
    let exit = match child.wait() {
        Ok(status) => status.to_string(),
        Err(error) => format!("not waited for: {error}"),
    };
    let lost = |what: String| {
        ChildOutcome::Failed(EbpfUnavailable::NothingAttached(format!(
            "the eBPF loader process ({exit}) {what}"
        )))
    };
    let (data, descriptors) = match received {
        Ok(received) => received,
        Err(error) => return lost(format!("could not hand the programs over: {error}")),
    };
    let report: Report = match serde_json::from_slice(&data) {
        Ok(report) => report,
        Err(_) if data.is_empty() => return lost("ended before handing the programs over".into()),
        Err(error) => return lost(format!("sent an unreadable report: {error}")),
    };
    match report {
        Report::Loaded {
            config,
            programs,
            maps,
        } => match assemble(child.id(), &config, programs, maps, descriptors) {
            Ok(handover) => ChildOutcome::Handed(handover),
            Err(what) => lost(what),
        },
        Report::NotPrivileged { cap_eff } => ChildOutcome::InProcess(format!(
            "the loader process lost its capabilities across exec (CapEff {cap_eff:#x})"
        )),
        Report::NoTracefs { errno } => ChildOutcome::Failed(EbpfUnavailable::NoTracefs {
            path: roots.map(Path::new("/sys/kernel/tracing")),
            source: errno.map_or_else(
                || io::Error::from(io::ErrorKind::InvalidInput),
                io::Error::from_raw_os_error,
            ),
        }),
        Report::NothingAttached { failures } => {
            ChildOutcome::Failed(EbpfUnavailable::NothingAttached(failures))
        }
        Report::LoadInParent { why } => ChildOutcome::InProcess(why),
    }
}

/// Matches the report's indexes with the descriptors received.
fn assemble(
    pid: u32,
    config: &[u8],
    programs: Vec<ProgramReport>,
    maps: Vec<(String, usize)>,
    descriptors: Vec<OwnedFd>,
) -> Result<Handover, String> {
    let mut descriptors: Vec<Option<OwnedFd>> = descriptors.into_iter().map(Some).collect();
    let mut take = |index: Option<usize>| index.and_then(|i| descriptors.get_mut(i)?.take());
    let config = config_from_bytes(config).ok_or("sent a malformed configuration")?;
    let mut handover = Handover {
        pid,
        status: Vec::with_capacity(PROGRAMS.len()),
        config,
        maps: Vec::with_capacity(maps.len()),
        links: Vec::new(),
        programs: Vec::new(),
    };
    for (name, index) in maps {
        let Some(name) = MAP_NAMES.iter().find(|known| **known == name) else {
            continue;
        };
        let fd = take(Some(index)).ok_or("handed over fewer descriptors than it listed")?;
        let map = MapData::from_fd(fd)
            .and_then(Map::from_map_data)
            .map_err(|error| format!("handed over an unusable map {name}: {error}"))?;
        handover.maps.push((name, map));
    }
    let mut reports: HashMap<String, ProgramReport> = programs
        .into_iter()
        .map(|report| (report.program.clone(), report))
        .collect();
    for spec in PROGRAMS {
        let state = match reports.remove(spec.program) {
            None => ProgramState::Failed("not reported by the loader process".to_owned()),
            Some(ProgramReport {
                failed: Some(reason),
                ..
            }) => ProgramState::Failed(reason),
            Some(report) => match (take(report.program_fd), take(report.link_fd)) {
                (Some(program), Some(link)) => {
                    handover.programs.push((spec, program));
                    handover.links.push(link);
                    ProgramState::Attached
                }
                _ => return Err("handed over fewer descriptors than it listed".to_owned()),
            },
        };
        handover.status.push(ProgramStatus { spec, state });
    }
    Ok(handover)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::ebpf::{EbpfOptions, EbpfSource};

    /// Not a test of its own: the body of the loader children the tests start (a no-op without
    /// the loader's environment).
    #[test]
    fn loader_child() {
        if std::env::var_os(LOADER_ENV).is_some() {
            serve_parent();
        }
    }

    /// This test binary, re-run as a loader child (see [`loader_child`]).
    pub(in crate::source::ebpf) fn test_loader() -> LoaderCommand {
        LoaderCommand {
            program: std::env::current_exe().expect("test binary path"),
            args: [
                "--exact",
                "source::ebpf::loader::tests::loader_child",
                "--test-threads=1",
            ]
            .map(OsString::from)
            .to_vec(),
            arg0: None,
        }
    }

    fn fixture(cap_eff: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("proc/self")).expect("mkdir");
        std::fs::write(
            dir.path().join("proc/self/status"),
            format!("Name:\tx\nCapEff:\t{cap_eff}\n"),
        )
        .expect("status");
        dir
    }

    #[test]
    fn a_missing_tracefs_comes_back_from_the_child_as_in_process() {
        // Privileged according to the fixture, which has no sys/kernel/tracing: the child fails
        // to mount tracefs there.
        let dir = fixture("000001ffffffffff");
        let options = EbpfOptions {
            roots: Roots::fixture(dir.path()),
            ..EbpfOptions::default()
        };
        let in_process = EbpfSource::load_via(&options, None).expect_err("no tracefs");
        let outcome = load_in_child(&options.roots, &test_loader());
        let ChildOutcome::Failed(from_child) = outcome else {
            panic!("the child's error did not come back as an error");
        };
        assert!(
            matches!(from_child, EbpfUnavailable::NoTracefs { .. }),
            "{from_child}"
        );
        assert_eq!(from_child.to_string(), in_process.to_string());
        assert!(
            from_child.to_string().contains("sys/kernel/tracing"),
            "{from_child}"
        );
        // Through the public path too.
        let error =
            EbpfSource::load_via(&options, Some(&test_loader())).expect_err("must not load");
        assert_eq!(error.to_string(), in_process.to_string());
    }

    #[test]
    fn an_unprivileged_process_starts_no_child() {
        let dir = fixture("0000000000000000");
        let options = EbpfOptions {
            roots: Roots::fixture(dir.path()),
            ..EbpfOptions::default()
        };
        let missing = LoaderCommand {
            program: dir.path().join("no-such-loader"),
            args: Vec::new(),
            arg0: None,
        };
        let error = EbpfSource::load_via(&options, Some(&missing)).expect_err("must not load");
        assert!(
            matches!(error, EbpfUnavailable::NotPrivileged { cap_eff: 0, .. }),
            "{error}"
        );
    }

    #[test]
    fn a_loader_that_cannot_start_means_loading_in_process() {
        let dir = fixture("000001ffffffffff");
        let missing = LoaderCommand {
            program: dir.path().join("no-such-loader"),
            args: Vec::new(),
            arg0: None,
        };
        let ChildOutcome::InProcess(why) = load_in_child(&Roots::fixture(dir.path()), &missing)
        else {
            panic!("a missing loader must mean loading in-process");
        };
        assert!(why.contains("no-such-loader"), "{why}");
    }

    #[test]
    fn a_child_that_dies_is_reported() {
        let dir = fixture("000001ffffffffff");
        let dies = LoaderCommand {
            program: PathBuf::from("/bin/sh"),
            args: ["-c", "kill -KILL $$"].map(OsString::from).to_vec(),
            arg0: None,
        };
        let ChildOutcome::Failed(error) = load_in_child(&Roots::fixture(dir.path()), &dies) else {
            panic!("a dead loader must be an error");
        };
        let text = error.to_string();
        assert!(text.contains("signal: 9"), "{text}");
        assert!(text.contains("before handing"), "{text}");
    }

    /// The whole path as root: the child loads and attaches, this process reads and writes the
    /// maps it handed over, the programs outlive the child, and dropping the source detaches and
    /// unloads them.
    #[test]
    fn loads_in_a_child_counts_and_detaches_on_drop_as_root() {
        let _serial = crate::source::ebpf::tests::SERIAL
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        assert!(
            nix::unistd::geteuid().is_root(),
            "this eBPF test needs root (CAP_BPF, tracefs); run it as root as CI does"
        );
        let mut source = EbpfSource::load_via(&EbpfOptions::default(), Some(&test_loader()))
            .expect("loading through the child");
        let LoadedBy::ChildProcess { pid } = *source.loaded_by() else {
            panic!("loaded in-process: {:?}", source.loaded_by());
        };
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "the loader child {pid} is gone"
        );
        assert!(source
            .status()
            .iter()
            .all(|s| s.state == ProgramState::Attached));
        assert!(source.tgids.is_some() && source.cgroups.is_some());
        assert!(source.created_by.is_some() && source.oom_events.is_some());
        assert_eq!(source.drain_oom_victims(), 0);

        let mut shell = Command::new("sh")
            .args([
                "-c",
                "read go; for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done",
            ])
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawning sh");
        let root = shell.id();
        let before = source.global().expect("GLOBAL").processes_created;
        let scope = source.track_tree(&[root]).expect("tracking the tree");
        drop(shell.stdin.take());
        assert!(shell.wait().expect("waiting for sh").success());
        let mut counters = crate::source::ebpf::EbpfCounters::default();
        source
            .read_counters(&[root], Some(scope), &mut counters)
            .expect("reading counters");
        assert!(counters.processes_created >= 10, "{counters:?}");
        assert!(counters.processes_exited >= 10, "{counters:?}");
        let after = source.global().expect("GLOBAL").processes_created;
        assert!(after >= before + 10, "{before} -> {after}");
        source.untrack(scope).expect("untrack");

        let ids: Vec<u32> = source.program_run_stats().iter().map(|p| p.id).collect();
        assert_eq!(ids.len(), PROGRAMS.len());
        let loaded = || -> Vec<u32> {
            aya::programs::loaded_programs()
                .filter_map(Result::ok)
                .map(|info| info.id())
                .collect()
        };
        assert!(ids.iter().all(|id| loaded().contains(id)), "{ids:?}");
        drop(source);
        // Freeing may lag the last close by an RCU grace period.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut after = loaded();
        while ids.iter().any(|id| after.contains(id)) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            after = loaded();
        }
        assert!(
            ids.iter().all(|id| !after.contains(id)),
            "{ids:?} in {after:?}"
        );
    }

    #[test]
    fn the_configuration_survives_its_bytes() {
        let mut config = Config::unavailable();
        config.newtask_pid = 8;
        config.sleep_state_mask = 0x1234_5678_9abc;
        assert_eq!(config_from_bytes(&config_bytes(&config)), Some(config));
        assert_eq!(config_from_bytes(&[0; 47]), None);
    }
}
