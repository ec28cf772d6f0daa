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

mod child;
mod detach;
#[cfg(test)]
pub(super) mod tests;

use std::collections::HashMap;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use aya::maps::{Map, MapData};
use relay_metrics_common::Config;

use super::fds;
use super::spawn::LoaderCommand;
use super::types::{EbpfUnavailable, ProgramSpec, ProgramState, ProgramStatus, PROGRAMS};
use super::MAP_NAMES;
use crate::source::Roots;
pub(super) use detach::{close_concurrently, hand_over};

/// Set (to the protocol version) in the loader child's environment.
const LOADER_ENV: &str = "RELAY_METRICS_EBPF_LOADER";
const PROC_ENV: &str = "RELAY_METRICS_EBPF_LOADER_PROC";
const SYS_ENV: &str = "RELAY_METRICS_EBPF_LOADER_SYS";
/// `1` when the scheduler programs count only tracked processes (`EbpfOptions::tracked_only`).
const TRACKED_ONLY_ENV: &str = "RELAY_METRICS_EBPF_LOADER_TRACKED_ONLY";
const PROTOCOL: &str = "1";
/// Verifier logs of failed programs can be long; anything past this is not a report.
const MAX_REPORT_BYTES: usize = 16 << 20;

/// In a loader child of the event programs (load, or detach): serves the parent and exits.
pub(super) fn serve_if_child() {
    if std::env::var_os(LOADER_ENV).is_some() {
        child::serve_parent();
    }
    if std::env::var_os(detach::DETACH_ENV).is_some() {
        detach::serve_parent();
    }
}

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
    TracingDisabled {
        why: String,
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

fn config_bytes(config: &Config) -> Vec<u8> {
    zerocopy::IntoBytes::as_bytes(config).to_vec()
}

fn config_from_bytes(bytes: &[u8]) -> Option<Config> {
    <Config as zerocopy::FromBytes>::read_from_bytes(bytes).ok()
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

/// Runs the loader child for `roots` (and [`EbpfOptions::tracked_only`](super::EbpfOptions))
/// and takes what it hands over.
pub(super) fn load_in_child(
    roots: &Roots,
    tracked_only: bool,
    command: &LoaderCommand,
) -> ChildOutcome {
    let (ours, mut child) = match spawn_loader(roots, tracked_only, command) {
        Ok(spawned) => spawned,
        Err(why) => return ChildOutcome::InProcess(why),
    };
    let received = fds::receive_all(&ours, MAX_REPORT_BYTES, Instant::now() + command.timeout);
    // A child still writing (an oversized report) or stuck must not keep us waiting: close our
    // end, so its writes fail, and kill it before reaping it.
    drop(ours);
    if received.is_err() {
        let _ = child.kill();
    }
    let status = child.wait();
    let exit = match &status {
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
        // Exited by itself without a word: not our loader (e.g. /proc/self/exe is a wrapper
        // such as ld.so or valgrind). Killed by a signal: a real failure (say the OOM killer
        // in a tight container), which loading in-process would only repeat in this process.
        Err(_) if data.is_empty() && matches!(&status, Ok(status) if status.code().is_some()) => {
            return ChildOutcome::InProcess(format!(
                "the loader process ({exit}) sent no report; {} may not be this program",
                command.program.display()
            ))
        }
        Err(_) if data.is_empty() => return lost("ended before handing the programs over".into()),
        Err(error) => return lost(format!("sent an unreadable report: {error}")),
    };
    outcome_of(report, child.id(), descriptors, roots, lost)
}

/// Starts the loader child with its end of a socket pair on stdin; returns ours and the child,
/// or why it could not start (the parent then loads in-process).
fn spawn_loader(
    roots: &Roots,
    tracked_only: bool,
    command: &LoaderCommand,
) -> Result<(UnixStream, std::process::Child), String> {
    let (ours, theirs) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(error) => return Err(format!("no socket pair: {error}")),
    };
    let mut child_command = command.command();
    child_command
        .env(LOADER_ENV, PROTOCOL)
        .env(PROC_ENV, &roots.proc)
        .env(SYS_ENV, &roots.sys)
        .env(TRACKED_ONLY_ENV, if tracked_only { "1" } else { "0" })
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let spawned = child_command.spawn();
    // Our copy of the child's end must be closed, or its exit would not end the stream.
    drop(child_command);
    match spawned {
        Ok(child) => Ok((ours, child)),
        Err(error) => Err(format!(
            "cannot start the loader process {}: {error}",
            command.program.display()
        )),
    }
}

/// What the parent does with the child's report: take the programs it handed over, load them
/// in-process, or give up with the child's reason (`lost` words a failure of the child's).
fn outcome_of(
    report: Report,
    pid: u32,
    descriptors: Vec<OwnedFd>,
    roots: &Roots,
    lost: impl Fn(String) -> ChildOutcome,
) -> ChildOutcome {
    match report {
        Report::Loaded {
            config,
            programs,
            maps,
        } => match assemble(pid, &config, programs, maps, descriptors) {
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
        Report::TracingDisabled { why } => {
            ChildOutcome::Failed(EbpfUnavailable::TracingDisabled { why })
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
