//! The loader child's side: load, describe the descriptors that keep the programs, send, exit.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd as _, AsRawFd as _, RawFd};
use std::path::PathBuf;

use aya::maps::{Map, MapData};

use super::{
    config_bytes, ProgramReport, Report, LOADER_ENV, PROC_ENV, PROTOCOL, SYS_ENV, TRACKED_ONLY_ENV,
};
use crate::source::ebpf::types::{EbpfUnavailable, ProgramState};
use crate::source::ebpf::{fds, load_programs, Loaded, MAP_NAMES};
use crate::source::Roots;

/// The child's side: load, describe, send, exit.
pub(super) fn serve_parent() -> ! {
    if std::env::var_os(LOADER_ENV).is_none_or(|version| version != PROTOCOL) {
        eprintln!("relay-metrics: {LOADER_ENV} is set to an unknown protocol version");
        std::process::exit(2);
    }
    let socket = fds::socket_on_stdin_or_exit(LOADER_ENV);
    let roots = Roots {
        proc: std::env::var_os(PROC_ENV).map_or_else(|| PathBuf::from("/proc"), PathBuf::from),
        sys: std::env::var_os(SYS_ENV).map_or_else(|| PathBuf::from("/sys"), PathBuf::from),
    };
    // `loaded` stays alive until the process exits: the descriptors sent are borrowed from it.
    let tracked_only = std::env::var_os(TRACKED_ONLY_ENV).is_some_and(|value| value == "1");
    let loaded = load_programs(&roots, tracked_only);
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
        EbpfUnavailable::TracingDisabled { why } => Report::TracingDisabled { why: why.clone() },
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
