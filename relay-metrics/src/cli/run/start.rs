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
//! started with (exec resets `run`'s own handlers; std resets the signal mask), but for
//! `SIGPIPE`, which is always the default: std's runtime ignores it in `run` before `main`, so
//! the disposition `run` was started with is not known, and std resets it in the children it
//! spawns. Where the starter cannot be used (no subreaper: the command would be re-parented to
//! init; a system that refuses to execute a memfd; a starter that exits with none of its own
//! statuses, as when its dynamic linker fails), `run` starts the command's shell itself, and the
//! command's `ru_maxrss` then starts at `run`'s peak (a warning says so).

use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::process::ExitStatus;

use anyhow::{anyhow, bail, Context, Result};
use nix::errno::Errno;
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

/// [`STARTER`] in a memfd, open read-only, with no writable descriptor left anywhere.
///
/// Prepared before `run` starts any thread: a process forked (by another thread) while the
/// memfd is open for writing holds a writable copy, and the kernel refuses to execute a file
/// open for writing (`ETXTBSY`): the eBPF preload's loader child did so, and `run` then started
/// the command itself.
pub(super) struct Starter(File);

impl Starter {
    pub(super) fn prepare() -> Result<Self> {
        let memfd = create_memfd()?;
        let mut written = File::from(memfd);
        written
            .write_all(STARTER)
            .context("cannot write run's starter to a memfd")?;
        let file = File::open(format!("/proc/self/fd/{}", written.as_raw_fd()))
            .context("cannot reopen run's starter read-only")?;
        drop(written);
        Ok(Self(file))
    }
}

/// A memfd, marked executable where the kernel knows the flag (Linux 6.3 and later warn about a
/// memfd created without `MFD_EXEC` or `MFD_NOEXEC_SEAL`; older ones refuse it with `EINVAL`).
fn create_memfd() -> Result<std::os::fd::OwnedFd> {
    let name = c"relay-metrics-start";
    let exec = MFdFlags::from_bits_retain(libc::MFD_EXEC);
    match memfd_create(name, MFdFlags::MFD_CLOEXEC | exec) {
        Err(Errno::EINVAL) => memfd_create(name, MFdFlags::MFD_CLOEXEC),
        created => created,
    }
    .context("cannot create a memfd for run's starter")
}

/// Starts `program` stopped in a process group of its own, with `starter` where it can be used.
pub(super) fn start_stopped(
    starter: Result<Starter>,
    program: &str,
    arguments: &[String],
    subreaper: bool,
) -> Result<Started> {
    if !subreaper {
        return start_directly(program, arguments);
    }
    let unusable = match starter.and_then(|starter| spawn_starter(&starter, program, arguments)) {
        Ok(child) => match started_by(child, program)? {
            Ok(started) => return Ok(started),
            Err(unusable) => unusable,
        },
        Err(error) => error,
    };
    tracing::warn!("{unusable:#}: run starts {program} itself, and its max RSS includes run's own");
    start_directly(program, arguments)
}

/// Executes `starter` in a new process group, with the command as its arguments.
fn spawn_starter(
    starter: &Starter,
    program: &str,
    arguments: &[String],
) -> Result<std::process::Child> {
    // The child executes this path before its descriptors close on exec (ELF: no need to keep
    // it open).
    let path = format!("/proc/self/fd/{}", starter.0.as_raw_fd());
    std::process::Command::new(path)
        .arg0("relay-metrics-start")
        .arg(program)
        .args(arguments)
        .process_group(0)
        .spawn()
        .context("cannot execute run's starter")
}

/// What the starter's exit status says.
#[derive(Debug, PartialEq, Eq)]
enum StarterExit {
    /// 0: it forked the command's process.
    Forked,
    /// 1 (its fork failed) or 2 (`run` called it wrongly): the command cannot start.
    Failed,
    /// Any other status, or a signal: not the starter's own (its dynamic linker exits 127).
    Unusable,
}

fn starter_exit(status: ExitStatus) -> StarterExit {
    match status.code() {
        Some(0) => StarterExit::Forked,
        Some(1 | 2) => StarterExit::Failed,
        _ => StarterExit::Unusable,
    }
}

/// Waits for the starter to exit, then for the command's process it forked (now `run`'s child,
/// alone in the starter's group) to stop itself. The inner error: the starter could not be
/// used, and nothing was started.
fn started_by(
    mut starter: std::process::Child,
    program: &str,
) -> Result<Result<Started, anyhow::Error>> {
    let group = Pid::from_raw(i32::try_from(starter.id()).context("pid out of range")?);
    let status = starter.wait().context("cannot wait for run's starter")?;
    match starter_exit(status) {
        StarterExit::Forked => {}
        StarterExit::Failed => bail!("cannot start {program}: run's starter exited with {status}"),
        StarterExit::Unusable => return Ok(Err(anyhow!("run's starter exited with {status}"))),
    }
    let flags = WaitPidFlag::WSTOPPED | WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    let pid = loop {
        match waitid(Id::PGid(group), flags) {
            Ok(WaitStatus::Stopped(pid, _) | WaitStatus::Exited(pid, _))
            | Ok(WaitStatus::Signaled(pid, _, _)) => break pid,
            Ok(other) => bail!("cannot start {program}: unexpected state {other:?}"),
            Err(Errno::EINTR) => continue,
            Err(error) => bail!("cannot start {program}: it is not run's child ({error})"),
        }
    };
    Ok(Ok(Started { pid, group }))
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

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt as _;

    use super::*;

    #[test]
    fn only_the_starters_own_statuses_are_its_answer() {
        let exited = |code: i32| ExitStatus::from_raw(code << 8);
        assert_eq!(starter_exit(exited(0)), StarterExit::Forked);
        assert_eq!(starter_exit(exited(1)), StarterExit::Failed);
        assert_eq!(starter_exit(exited(2)), StarterExit::Failed);
        // The dynamic linker's 127, any other code, a signal: run starts the command itself.
        assert_eq!(starter_exit(exited(127)), StarterExit::Unusable);
        assert_eq!(starter_exit(exited(3)), StarterExit::Unusable);
        assert_eq!(
            starter_exit(ExitStatus::from_raw(libc::SIGSEGV)),
            StarterExit::Unusable
        );
    }

    #[test]
    fn a_prepared_starter_has_no_writer_and_runs() {
        let starter = Starter::prepare().unwrap();
        let fd = starter.0.as_raw_fd();
        let flags = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = flags
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .unwrap();
        let mode = u32::from_str_radix(flags.trim(), 8).unwrap() & 3;
        assert_eq!(mode, 0, "open read-only (flags {flags})");
        // With no writable descriptor, the starter executes (with no arguments: its usage, 2).
        // Another test's thread may have forked while `prepare` wrote (run has no other thread
        // then): that child's writable copy closes at its exec.
        let mut tries = 0;
        let status = loop {
            let spawned = std::process::Command::new(format!("/proc/self/fd/{fd}"))
                .stderr(std::process::Stdio::null())
                .status();
            match spawned {
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 10 => tries += 1,
                spawned => break spawned.unwrap(),
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(2));
    }
}
