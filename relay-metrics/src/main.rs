//! The `relay-metrics` command line: parses the arguments and hands them to the command's module
//! in `cli/` (one file per command).

// The binary's own modules live under src/cli/ (src/ is the library's).
mod cli;

use cli::Command;

fn main() {
    // The guard of `run`'s command (this binary re-run) never returns from here.
    cli::run::guard_if_requested();
    // First of all: in the eBPF loader child (this binary re-run) this loads the programs, hands
    // them over and exits. Here it makes kernel events load in that child, so aya's parse of the
    // kernel BTF (~16 MiB at its peak) never counts in this long-running process.
    relay_metrics::init_child_loader();
    let cli = cli::parse();
    let result = match cli.command {
        Command::Snapshot(args) => cli::snapshot::run(args),
        Command::Watch(args) => cli::watch::run(args),
        Command::Serve(args) => cli::serve::run(*args),
        Command::Bench(args) => cli::bench::run(args),
        Command::Run(args) => cli::run::run(args),
        Command::Completions(args) => cli::completions::run(args),
        Command::Man(args) => cli::man::run(args),
        Command::Report(args) => cli::report::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(error) => {
            eprintln!("relay-metrics: error: {error:#}");
            std::process::exit(cli::exit_code(&error));
        }
    }
}
