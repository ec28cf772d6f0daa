//! How a loader child is started: this executable re-run (see [`super::init_child_loader`]).
//! Shared by the event programs' loader and detacher (`loader`) and the task iterator's
//! loader (`source::task_iter`); which child a started process is, `dispatch` decides.

use std::ffi::OsString;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

/// How long a loader child may take to hand the programs over (it takes 30–80 ms here): past
/// it the child is killed and the kernel events are off with the reason.
pub(super) const LOADER_TIMEOUT: Duration = Duration::from_secs(30);

/// How a loader child is started.
#[derive(Debug, Clone)]
pub(crate) struct LoaderCommand {
    pub(super) program: PathBuf,
    pub(super) args: Vec<OsString>,
    pub(super) arg0: Option<OsString>,
    pub(super) timeout: Duration,
}

impl LoaderCommand {
    /// The command to start: the executable, its arguments and name; each child kind adds its
    /// environment.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.args(&self.args);
        if let Some(arg0) = &self.arg0 {
            command.arg0(arg0);
        }
        command
    }

    /// How long a loader child may take.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }
}

static COMMAND: OnceLock<LoaderCommand> = OnceLock::new();

/// The child loader, when [`super::init_child_loader`] enabled it.
pub(crate) fn command() -> Option<&'static LoaderCommand> {
    COMMAND.get()
}

/// Loads from now on go through this executable, re-run: its `main` starts with
/// [`super::init_child_loader`].
pub(super) fn use_this_executable() {
    let _ = COMMAND.set(LoaderCommand {
        program: PathBuf::from("/proc/self/exe"),
        args: Vec::new(),
        arg0: Some(OsString::from("relay-metrics-ebpf-loader")),
        timeout: LOADER_TIMEOUT,
    });
}
