//! The one place that knows every loader child: a process started as one (marked by its
//! environment) serves its parent here and exits. The children's modules import only
//! `spawn`, so none of them imports another.

use super::{loader, spawn};
use crate::source::task_iter;

/// Set to `1`, [`init_child_loader`] leaves loading in this process.
pub const IN_PROCESS_ENV: &str = "RELAY_METRICS_EBPF_IN_PROCESS";

/// Makes this program load its eBPF programs in a short-lived child process. Call it first thing
/// in `main`, before parsing arguments.
///
/// In the child (this executable re-run by [`EbpfSource::load`](super::EbpfSource::load) or by
/// the task iterator's load, marked by its environment) it loads and attaches the programs,
/// hands them to the parent and exits: it never returns there. Otherwise it returns at once,
/// and every later `EbpfSource::load` (and so every `Collector` with kernel events) of this
/// process loads in such a child, so this process's resident memory never holds aya's parse of
/// the kernel BTF (~16 MiB at its peak). Programs that do not call it load in-process, as
/// before, and so does this one when [`IN_PROCESS_ENV`] is set to `1` (for tools that must see
/// the map creations, such as the floor tool's trace, and for debugging).
pub fn init_child_loader() {
    serve_if_child();
    if std::env::var_os(IN_PROCESS_ENV).is_some_and(|value| value == "1") {
        return;
    }
    spawn::use_this_executable();
}

/// In a loader child: serves the parent and exits. Returns at once in any other process.
pub(crate) fn serve_if_child() {
    loader::serve_if_child();
    task_iter::serve_if_child();
}
