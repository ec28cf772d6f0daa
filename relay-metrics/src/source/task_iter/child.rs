//! Loading the iterator in a short-lived child, as the event programs are (see
//! `source::ebpf::spawn`; `source::ebpf::dispatch` runs [`serve_if_child`]): aya parses the whole kernel BTF to relocate the program (~16 MiB
//! resident at its peak), which a long-running collector should never hold. The child loads,
//! attaches, sends the one link descriptor back with `SCM_RIGHTS` and exits.

use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::net::UnixStream;
use std::process::Stdio;
use std::time::Instant;

use crate::source::ebpf::fds;
use crate::source::ebpf::spawn::LoaderCommand;

/// Set in the loader child's environment.
const LOADER_ENV: &str = "RELAY_METRICS_TASK_ITER_LOADER";

const LOADED: &[u8] = b"loaded";
/// [`LOADER_ENV`]'s value asking for the per-CPU rss sums.
const SUM_RSS: &str = "sum-rss";
const FAILED: &[u8] = b"failed: ";

/// In the iterator's loader child: serves the parent and exits. Returns at once elsewhere.
pub(crate) fn serve_if_child() {
    if std::env::var_os(LOADER_ENV).is_some() {
        serve_parent();
    }
}

/// The child's side: load, send the link (or why not), exit.
fn serve_parent() -> ! {
    let socket = fds::socket_on_stdin_or_exit(LOADER_ENV);
    // The parent sets the variable to SUM_RSS when it wants the per-CPU rss sums.
    let sum_rss = std::env::var_os(LOADER_ENV).is_some_and(|value| value == SUM_RSS);
    let (data, link) = match super::load_and_attach(sum_rss) {
        Ok(link) => (LOADED.to_vec(), Some(link)),
        Err(reason) => ([FAILED, reason.as_bytes()].concat(), None),
    };
    let raw: Vec<_> = link.iter().map(|fd| fd.as_raw_fd()).collect();
    let code = match fds::send(&socket, &data, &raw) {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("relay-metrics-task-iter-loader: cannot hand over the iterator: {error}");
            1
        }
    };
    std::process::exit(code);
}

/// The parent's side: runs the child and takes the link it sends.
pub(super) fn load_in_child(command: &LoaderCommand, sum_rss: bool) -> Result<OwnedFd, String> {
    let (ours, theirs) = UnixStream::pair().map_err(|error| format!("no socket pair: {error}"))?;
    let mut child_command = command.command();
    child_command
        .env(LOADER_ENV, if sum_rss { SUM_RSS } else { "1" })
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    let spawned = child_command.spawn();
    // Our copy of the child's end must be closed, or its exit would not end the stream.
    drop(child_command);
    let mut child =
        spawned.map_err(|error| format!("cannot start the task iterator loader: {error}"))?;
    let received = fds::receive_all(&ours, 1 << 20, Instant::now() + command.timeout());
    drop(ours);
    if received.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    let (data, mut descriptors) =
        received.map_err(|error| format!("the task iterator loader process: {error}"))?;
    if data == LOADED && descriptors.len() == 1 {
        return Ok(descriptors.remove(0));
    }
    match data.strip_prefix(FAILED) {
        Some(reason) => Err(String::from_utf8_lossy(reason).into_owned()),
        None => Err("the task iterator loader process sent no link".to_owned()),
    }
}
