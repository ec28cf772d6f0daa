//! Loading steps: privilege check, tracefs, format files, attaching one program.

use std::io;
use std::path::{Path, PathBuf};

use aya::programs::TracePoint;
use aya::Ebpf;
use relay_metrics_common::{Config, NO_FIELD};

use super::format;
use super::types::{EbpfUnavailable, ProgramSpec};
use crate::error_chain;
use crate::source::file::read_once;
use crate::source::Roots;

const CAP_SYS_ADMIN: u64 = 1 << 21;
const CAP_PERFMON: u64 = 1 << 38;
const CAP_BPF: u64 = 1 << 39;

fn effective_capabilities(status: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(status).ok()?;
    let line = text.lines().find(|line| line.starts_with("CapEff:"))?;
    u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()
}

pub(super) fn check_privilege(roots: &Roots) -> Result<(), EbpfUnavailable> {
    let path = roots.proc.join("self/status");
    let mut buf = Vec::new();
    let cap_eff = read_once(&path, &mut buf)
        .ok()
        .and_then(effective_capabilities)
        .unwrap_or(0);
    let tracing = CAP_BPF | CAP_PERFMON;
    if cap_eff & CAP_SYS_ADMIN != 0 || cap_eff & tracing == tracing {
        Ok(())
    } else {
        Err(EbpfUnavailable::NotPrivileged { cap_eff, path })
    }
}

/// Finds tracefs' `events` directory, mounting tracefs at `/sys/kernel/tracing` when needed.
pub(super) fn tracefs_events(roots: &Roots) -> Result<PathBuf, EbpfUnavailable> {
    let tracing = roots.map(Path::new("/sys/kernel/tracing"));
    let events = tracing.join("events");
    if events.is_dir() {
        return Ok(events);
    }
    let legacy = roots.map(Path::new("/sys/kernel/debug/tracing/events"));
    if legacy.is_dir() {
        return Ok(legacy);
    }
    let no_tracefs = |source| EbpfUnavailable::NoTracefs {
        path: tracing.clone(),
        source,
    };
    nix::mount::mount(
        Some("nodev"),
        &tracing,
        Some("tracefs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .map_err(|errno| no_tracefs(io::Error::from(errno)))?;
    Ok(events)
}

pub(crate) fn read_formats(events: &Path) -> format::Formats {
    let read = |category: &str, name: &str| {
        let mut buf = Vec::new();
        match read_once(&events.join(category).join(name).join("format"), &mut buf) {
            Ok(_) => buf,
            Err(_) => Vec::new(),
        }
    };
    format::Formats {
        newtask: read("task", "task_newtask"),
        exit: read("sched", "sched_process_exit"),
        switch: read("sched", "sched_switch"),
        wakeup: read("sched", "sched_wakeup"),
        wakeup_new: read("sched", "sched_wakeup_new"),
        mark_victim: read("oom", "mark_victim"),
        throttled: read("vmscan", "mm_vmscan_throttled"),
    }
}

/// The record field a program cannot work without, when this kernel's format lacks it.
fn missing_field(program: &str, config: &Config) -> Option<&'static str> {
    let missing = |offset: u16| offset == NO_FIELD;
    match program {
        "task_newtask" if missing(config.newtask_pid) || missing(config.newtask_clone_flags) => {
            Some("task_newtask pid/clone_flags")
        }
        "sched_switch"
            if missing(config.switch_prev_pid)
                || missing(config.switch_prev_state)
                || missing(config.switch_next_pid) =>
        {
            Some("sched_switch prev_pid/prev_state/next_pid")
        }
        "sched_wakeup" if missing(config.wakeup_pid) => Some("sched_wakeup pid"),
        "sched_wakeup_new" if missing(config.wakeup_new_pid) => Some("sched_wakeup_new pid"),
        "oom_mark_victim" if missing(config.victim_pid) => Some("mark_victim pid"),
        _ => None,
    }
}

pub(super) fn clock_ns(clock: nix::time::ClockId) -> i128 {
    nix::time::clock_gettime(clock)
        .map(|ts| i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec()))
        .unwrap_or(0)
}

pub(super) fn attach(
    ebpf: &mut Ebpf,
    spec: ProgramSpec,
    config: &Config,
    events: &Path,
) -> Result<(), String> {
    if let Some(field) = missing_field(spec.program, config) {
        return Err(format!(
            "tracepoint field {field} missing or of an unexpected size"
        ));
    }
    if !events.join(spec.category).join(spec.tracepoint).is_dir() {
        return Err(format!(
            "tracepoint {}:{} does not exist on this kernel",
            spec.category, spec.tracepoint
        ));
    }
    let program: &mut TracePoint = ebpf
        .program_mut(spec.program)
        .ok_or_else(|| format!("program {} missing from the object", spec.program))?
        .try_into()
        .map_err(|error| format!("{error}"))?;
    program
        .load()
        .map_err(|error| format!("load failed: {}", error_chain(&error)))?;
    program
        .attach(spec.category, spec.tracepoint)
        .map_err(|error| format!("attach failed: {}", error_chain(&error)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_effective_capabilities() {
        let status = b"Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_capabilities(status), Some(0x1ff_ffff_ffff));
        assert_eq!(effective_capabilities(b"CapEff:\tzz\n"), None);
        assert_eq!(effective_capabilities(b""), None);
    }

    /// The mount path: a fixture tree with an empty `sys/kernel/tracing` gets tracefs mounted
    /// there (a second superblock view of the host's tracefs), found through its `events`.
    #[test]
    #[ignore = "root: mounts tracefs"]
    fn mounts_tracefs_where_it_is_missing_as_root() {
        assert_eq!(nix::unistd::geteuid().as_raw(), 0, "run as root");
        let base = tempfile::tempdir().expect("tempdir");
        let tracing = base.path().join("sys/kernel/tracing");
        std::fs::create_dir_all(&tracing).expect("mkdir");
        let roots = Roots::fixture(base.path());
        let events = tracefs_events(&roots);
        let mounted = std::fs::read_dir(tracing.join("events/sched")).map(|dir| dir.count());
        nix::mount::umount(&tracing).expect("umount");
        assert_eq!(events.expect("mounted"), tracing.join("events"));
        assert!(mounted.expect("events/sched listed") > 0);

        // A mount point that is not a directory: the mount's error, with the path.
        let file_base = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(file_base.path().join("sys/kernel")).expect("mkdir");
        std::fs::write(file_base.path().join("sys/kernel/tracing"), b"").expect("write");
        match tracefs_events(&Roots::fixture(file_base.path())) {
            Err(EbpfUnavailable::NoTracefs { path, source }) => {
                assert_eq!(path, file_base.path().join("sys/kernel/tracing"));
                assert_eq!(source.raw_os_error(), Some(libc::ENOTDIR), "{source}");
            }
            other => panic!("expected NoTracefs, got {other:?}"),
        }
    }
}
