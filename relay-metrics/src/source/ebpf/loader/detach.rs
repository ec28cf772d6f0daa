//! Detaching in a child process, so that dropping a collector (and exiting after it) is quick.
//!
//! Closing the last descriptor of a tracepoint's BPF link detaches the program, and the kernel
//! waits for RCU grace periods before that close returns: tenths of a second for our programs
//! (`docs/PERFORMANCE.md`), even when the links are closed concurrently. A process that exits
//! waits for its own closes before its parent sees the exit, so `relay-metrics run` would end
//! that long after its command. Instead, the links go to a short-lived child (this executable
//! re-run, shown as `relay-metrics-ebpf-detach`) over `SCM_RIGHTS`; our closes then only drop
//! references, and the child's last closes do the detaching after we are gone. The programs
//! stay attached for that fraction of a second, counting into maps nobody reads.

use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::process::{Child, Stdio};
use std::time::Instant;

use crate::source::ebpf::fds;
use crate::source::ebpf::spawn::{LoaderCommand, LOADER_TIMEOUT};

/// Set in the detaching child's environment.
pub(in crate::source::ebpf) const DETACH_ENV: &str = "RELAY_METRICS_EBPF_DETACH";
/// The one message the child accepts, sent with the descriptors.
const MESSAGE: &[u8] = b"detach";

/// Hands `links` to a detaching child started with `command`, and closes ours; gives them back
/// when the child cannot take them (then the caller detaches here). Returns the child's pid.
pub(in crate::source::ebpf) fn hand_over(
    command: &LoaderCommand,
    links: Vec<OwnedFd>,
) -> Result<u32, (Vec<OwnedFd>, String)> {
    if links.len() > fds::MAX_FDS {
        let why = format!("{} links are too many to send", links.len());
        return Err((links, why));
    }
    let (ours, theirs) = match UnixStream::pair() {
        Ok(pair) => pair,
        Err(error) => return Err((links, format!("no socket pair: {error}"))),
    };
    let mut child_command = command.command();
    child_command
        .env(DETACH_ENV, "1")
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        // Nothing of ours stays open in the child: a reader of our output sees its end when we
        // exit, not when the child does.
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if command.arg0.is_some() {
        use std::os::unix::process::CommandExt as _;
        child_command.arg0("relay-metrics-ebpf-detach");
    }
    let spawned = child_command.spawn();
    drop(child_command);
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            return Err((
                links,
                format!("cannot start the detaching process: {error}"),
            ))
        }
    };
    let raw: Vec<RawFd> = links.iter().map(|link| link.as_raw_fd()).collect();
    if let Err(error) = fds::send(&ours, MESSAGE, &raw) {
        let _ = child.kill();
        let _ = child.wait();
        return Err((links, format!("cannot hand the links over: {error}")));
    }
    // In flight or received, the child's references keep the programs attached: ours go now.
    drop(links);
    drop(ours);
    let pid = child.id();
    reap_in_background(child);
    Ok(pid)
}

/// Reaps the child without waiting for it here. A program that exits meanwhile leaves the
/// child to init, which reaps it.
fn reap_in_background(mut child: Child) {
    let pid = child.id();
    let waiter = std::thread::Builder::new()
        .name("ebpf-detach-reaper".into())
        .spawn(move || {
            let _ = child.wait();
        });
    if waiter.is_err() {
        // No thread (the closure and its `Child` are gone): never leave a zombie; waiting here
        // only costs the time this module saves.
        if let Ok(pid) = i32::try_from(pid) {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        }
    }
}

/// Closes `links` concurrently: each detach waits for RCU grace periods, and concurrent waits
/// can share them, which is quicker than closing one after another.
pub(crate) fn close_concurrently(links: Vec<OwnedFd>) {
    std::thread::scope(|scope| {
        for link in links {
            // A thread that cannot start drops its link right here instead.
            let _ = std::thread::Builder::new().spawn_scoped(scope, move || drop(link));
        }
    });
}

/// The detaching child's side: takes the links from stdin, closes them, exits.
pub(in crate::source::ebpf) fn serve_parent() -> ! {
    let socket = fds::socket_on_stdin_or_exit(DETACH_ENV);
    let deadline = Instant::now() + LOADER_TIMEOUT;
    let code = match fds::receive_all(&socket, MESSAGE.len(), deadline) {
        Ok((message, links)) if message == MESSAGE => {
            close_concurrently(links);
            0
        }
        // Whatever came along is closed by our exit all the same.
        Ok(_) | Err(_) => 1,
    };
    std::process::exit(code);
}
