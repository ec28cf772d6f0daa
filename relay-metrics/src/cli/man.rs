//! `relay-metrics man --dir DIR` (hidden; run by `cargo xtask man`): the man pages, rendered by
//! clap_mangen from the command line's own definition: `relay-metrics.1`, and
//! `relay-metrics-<command>.1` for each command.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use clap::{Args, CommandFactory as _};

#[derive(Args)]
pub(crate) struct ManArgs {
    /// The directory to write the pages into (created if missing).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

/// Writes the pages and prints their paths; returns the exit code.
pub(crate) fn run(args: ManArgs) -> Result<i32> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let mut command = super::Cli::command();
    command.build();
    let mut written = vec![write_page(&args.dir, command.clone())?];
    for sub in command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
    {
        let name = format!("relay-metrics-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .bin_name(format!("relay-metrics {}", sub.get_name()))
            .version(command.get_version().unwrap_or_default().to_owned());
        written.push(write_page(&args.dir, page)?);
    }
    let list: String = written
        .iter()
        .map(|path| format!("{}\n", path.display()))
        .collect();
    super::write_stdout(list.as_bytes(), "the list of pages")
}

/// Renders one page into `dir/<name>.1`; returns its path.
fn write_page(dir: &Path, command: clap::Command) -> Result<PathBuf> {
    let path = dir.join(format!("{}.1", command.get_name()));
    let mut roff = Vec::with_capacity(16 * 1024);
    clap_mangen::Man::new(command)
        .render(&mut roff)
        .context("cannot render the man page")?;
    std::fs::write(&path, roff).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}
