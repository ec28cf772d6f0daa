//! Records the commit the binary is built from, for `--version`: `git rev-parse --short HEAD`,
//! or `unknown` where there is no git or no repository (a source archive); that part never fails
//! the build. With the `cli` feature, also compiles `run`'s starter (`src/cli/run/starter.c`)
//! with the target's C compiler into `$OUT_DIR/starter`, which the binary embeds.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(std::env::var_os("CARGO_MANIFEST_DIR")?)
        .output()
        .ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (output.status.success() && !text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RELAY_METRICS_COMMIT");
    let commit = std::env::var("RELAY_METRICS_COMMIT")
        .ok()
        .filter(|commit| !commit.is_empty())
        .or_else(|| git(&["rev-parse", "--short", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_owned());
    // Built again when HEAD moves: a new commit on the branch, or another branch checked out.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from) {
        watch(&dir.join("HEAD"));
        if let Some(common) = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]) {
            let common = Path::new(&common);
            watch(&common.join("packed-refs"));
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watch(&common.join(branch));
            }
        }
    }
    println!("cargo:rustc-env=RELAY_METRICS_COMMIT={commit}");
    if std::env::var_os("CARGO_FEATURE_CLI").is_some() {
        compile_starter();
    }
}

/// Compiles `run`'s starter, an executable (the `cc` crate picks the compiler and target flags).
fn compile_starter() {
    let source = Path::new("src/cli/run/starter.c");
    println!("cargo:rerun-if-changed={}", source.display());
    // With `cargo_metadata(false)`, the `cc` crate does not ask for these itself.
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rerun-if-env-changed=CFLAGS");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").unwrap_or_default());
    let compiler = match cc::Build::new().cargo_metadata(false).try_get_compiler() {
        Ok(compiler) => compiler,
        Err(error) => panic!("no C compiler for run's starter: {error}"),
    };
    // `-z now`: the dynamic linker resolves every symbol in the starter before it forks. Lazily
    // bound, each function the command's process calls first (before its exec) made it read
    // libc's symbol tables, and the file pages mapped around each fault were counted in its RSS:
    // 0.6–0.7 MiB resident at the exec instead of 0.25 MiB.
    let status = compiler
        .to_command()
        .args(["-Os", "-Wall", "-Wl,-z,now", "-o"])
        .arg(out_dir.join("starter"))
        .arg(source)
        .status();
    match status {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("compiling {} failed: {status}", source.display()),
        Err(error) => panic!(
            "cannot run the C compiler for {}: {error}",
            source.display()
        ),
    }
}

/// Reruns this script when `path` changes. A path that does not exist is not watched: cargo
/// would rerun the script on every build.
fn watch(path: &Path) {
    if path.exists() {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
