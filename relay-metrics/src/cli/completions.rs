//! `relay-metrics completions SHELL`: the shell completion script (clap_complete) on stdout.

use anyhow::Result;
use clap::{Args, CommandFactory as _};
use clap_complete::Shell;

#[derive(Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    shell: Shell,
}

/// Prints the script; returns the exit code.
pub(crate) fn run(args: CompletionsArgs) -> Result<i32> {
    let mut command = super::Cli::command();
    let mut script = Vec::with_capacity(32 * 1024);
    clap_complete::generate(args.shell, &mut command, "relay-metrics", &mut script);
    super::write_stdout(&script, "the completion script")
}
