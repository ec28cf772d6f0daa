//! Starting the command stopped, from a small, freshly executed process rather than from
//! `run`'s address space.
//!
//! `execve` folds the exiting image's peak RSS into the process's `ru_maxrss`, and a fork's
//! memory starts as a copy of its parent's. So the command is not started by `run` (a child of
//! `run` carries `run`'s peak: `/bin/true` reported 6.5–7.3 MB against GNU time's 1.0 MB), nor
//! by a shell that execs `env` and another shell before it (each image's peak, 1.6 MB, was
//! folded in: 1.6–1.7 MB). `run` executes its starter (`starter.c`, compiled by the build
//! script and embedded here, executed from a memfd), which forks the command's process and
//! exits. That process starts with the starter's little memory (0.25 MiB resident at its exec
//! here, against 0.56 MiB from GNU time's own fork and 1.0 MiB for `/bin/true` alone), stops
//! itself, and once resumed execs the command (with `PATH` search, as a shell would). As `run`
//! is a child subreaper, it becomes `run`'s child, in the process group `run` made for the
//! starter.
//!
//! The guarantees: the command is stopped before it runs (the collector attaches first), it
//! has `run`'s stdin and its own process group, and its signal dispositions are those `run` was
//! started with (exec resets `run`'s own handlers; std resets the signal mask). Where the
//! starter cannot be used (no subreaper: the command would be re-parented to init; a system
//! that refuses to execute a memfd), `run` starts the command's shell itself, and the command's
//! `ru_maxrss` then starts at `run`'s peak (a warning says so).

use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;

use anyhow::{bail, Context, Result};
use nix::sys::memfd::{memfd_create, MFdFlags};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

/// `run`'s starter: `starter.c`, compiled by the build script for the target.
const STARTER: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/starter"));

/// The shell that stops itself, then becomes the command (without the starter).
const STOP_THEN_EXEC: &str = "kill -STOP $$ && exec \"$0\" \"$@\"";

/// The command, started and stopped (or already exited).
pub(super) struct Started {
    /// The command's pid.
    pub(super) pid: Pid,
    /// Its process group.
    pub(super) group: Pid,
}

/// Starts `program` stopped in a process group of its own.
pub(super) fn start_stopped(
    program: &str,
    arguments: &[String],
    subreaper: bool,
) -> Result<Started> {
    if !subreaper {
        return start_directly(program, arguments);
    }
    match spawn_starter(program, arguments) {
        Ok(starter) => started_by(starter, program),
        Err(error) => {
            tracing::warn!(
                "{error:#}: run starts {program} itself, and its max RSS includes run's own"
            );
            start_directly(program, arguments)
        }
    }
}

/// Executes the starter (from a memfd holding [`STARTER`]) in a new process group, with the
/// command as its arguments.
fn spawn_starter(program: &str, arguments: &[String]) -> Result<std::process::Child> {
    let memfd = memfd_create(c"relay-metrics-start", MFdFlags::MFD_CLOEXEC)
        .context("cannot create a memfd for run's starter")?;
    let mut written = std::fs::File::from(memfd);
    written
        .write_all(STARTER)
        .context("cannot write run's starter to a memfd")?;
    // Executed through a read-only descriptor, the writable one closed first: a kernel that
    // refuses to execute a file open for writing (ETXTBSY) sees no writer.
    let file = std::fs::File::open(format!("/proc/self/fd/{}", written.as_raw_fd()))
        .context("cannot reopen run's starter read-only")?;
    drop(written);
    // The child executes this path before its descriptors close on exec (ELF: no need to keep
    // it open); `run`'s copy closes when `file` is dropped.
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    std::process::Command::new(path)
        .arg0("relay-metrics-start")
        .arg(program)
        .args(arguments)
        .process_group(0)
        .spawn()
        .context("cannot execute run's starter")
}

/// Waits for the starter to exit, then for the command's process it forked (now `run`'s child,
/// alone in the starter's group) to stop itself.
fn started_by(mut starter: std::process::Child, program: &str) -> Result<Started> {
    let group = Pid::from_raw(i32::try_from(starter.id()).context("pid out of range")?);
    let status = starter.wait().context("cannot wait for run's starter")?;
    if !status.success() {
        bail!("cannot start {program}: run's starter exited with {status}");
    }
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    let pid = loop {
        match waitid(Id::PGid(group), flags) {
            Ok(WaitStatus::Stopped(pid, _) | WaitStatus::Exited(pid, _))
            | Ok(WaitStatus::Signaled(pid, _, _)) => break pid,
            Ok(other) => bail!("cannot start {program}: unexpected state {other:?}"),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(error) => bail!("cannot start {program}: it is not run's child ({error})"),
        }
    };
    Ok(Started { pid, group })
}

/// `run` starts the command's shell itself (its `ru_maxrss` then starts at `run`'s peak).
fn start_directly(program: &str, arguments: &[String]) -> Result<Started> {
    let child = std::process::Command::new("/bin/sh")
        .args(["-c", STOP_THEN_EXEC, program])
        .args(arguments)
        .process_group(0)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let pid = Pid::from_raw(i32::try_from(child.id()).context("pid out of range")?);
    Ok(Started { pid, group: pid })
}
