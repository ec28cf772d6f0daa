//! `cargo xtask <command>`: orchestration around the eBPF object. Never the only way to build:
//! the committed object lets a plain `cargo build` work without any eBPF toolchain.
//!
//! - `install-toolchain`: installs (idempotently) Debian's rustc with the prebuilt `core` for
//!   `bpfel-unknown-none`, LLVM 22 and `bpf-linker` built against it, and clang 22 with
//!   libbpf's headers for the C task iterator.
//! - `build-ebpf`: builds `relay-metrics-ebpf` and copies the object to [`OBJECT`], with the
//!   toolchain versions in [`STAMP`]; compiles the C iterators ([`ITER_OBJECTS`]: the task and
//!   the cgroup iterator) into their committed objects, with clang's version beside each.
//! - `check-ebpf-fresh`: rebuilds both into a scratch directory and fails if a result differs
//!   from the committed object (byte for byte when the toolchain is the one in the stamp).
//! - `vm-test [FILTER] [--repeat N] [--lockdown | --many-cpus]`: runs relay-metrics' tests matching FILTER
//!   (default `source::ebpf`) on a pure cgroup v2 kernel in a qemu VM (see `vm.rs`), N times in
//!   one boot (to hunt intermittent failures); `--lockdown` boots it with
//!   `lockdown=confidentiality` (default FILTER `vm_tests::lockdown`), `--many-cpus` with 2 online
//!   of 64 possible CPUs (default FILTER `vm_tests::many_cpus`).
//! - `man [DIR]`: writes the man pages of the `relay-metrics` command (clap_mangen, from the
//!   command line's own definition) into DIR, default `target/man`: `relay-metrics.1` and one
//!   `relay-metrics-<command>.1` per command.

use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{bail, Context, Result};

mod elf_summary;
mod vm;

/// The committed object, relative to the workspace root.
const OBJECT: &str = "relay-metrics/src/source/ebpf/relay-metrics.bpf.o";
/// The toolchain that built [`OBJECT`] (`rustc -V` and `bpf-linker --version`).
const STAMP: &str = "relay-metrics/src/source/ebpf/relay-metrics.bpf.o.toolchain";
const EBPF_CRATE: &str = "relay-metrics-ebpf";
const TARGET: &str = "bpfel-unknown-none";
const DEBIAN_RUSTC: &str = "/usr/bin/rustc";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const APT_PACKAGES: [&str; 3] = ["rustc-web", "libstd-rust-web-dev-bpf", "llvm-22-dev"];
const BPF_LINKER_VERSION: &str = "0.13.0";
/// A C (CO-RE) iterator program: its source, its committed object and the stamp with the clang
/// that built it (`clang --version`, first line), relative to the workspace root.
struct CObject {
    source: &'static str,
    object: &'static str,
    stamp: &'static str,
}

/// The task iterator (process values) and the cgroup iterator (cgroup values).
const ITER_OBJECTS: [CObject; 2] = [
    CObject {
        source: "relay-metrics-ebpf/iter/task_iter.bpf.c",
        object: "relay-metrics/src/source/task_iter/task_iter.bpf.o",
        stamp: "relay-metrics/src/source/task_iter/task_iter.bpf.o.toolchain",
    },
    CObject {
        source: "relay-metrics-ebpf/iter/cgroup_iter.bpf.c",
        object: "relay-metrics/src/source/cgroup_iter/cgroup_iter.bpf.o",
        stamp: "relay-metrics/src/source/cgroup_iter/cgroup_iter.bpf.o.toolchain",
    },
];
const CLANG: &str = "/usr/bin/clang-22";
const ITER_APT_PACKAGES: [&str; 2] = ["clang-22", "libbpf-dev"];

const USAGE: &str = "cargo xtask <install-toolchain | build-ebpf | check-ebpf-fresh | \
                     vm-test [FILTER] [--repeat N] [--lockdown | --many-cpus] | man [DIR]>";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("install-toolchain") => install_toolchain(),
        Some("build-ebpf") => build_ebpf(),
        Some("check-ebpf-fresh") => check_ebpf_fresh(),
        Some("vm-test") => vm_test_args(&args[1..])
            .and_then(|args| vm::vm_test(&workspace_root()?, &args.filter, args.repeat, args.boot)),
        Some("man") if args.len() <= 2 => man(args.get(1).map(PathBuf::from)),
        _ => {
            eprintln!("usage: {USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("xtask: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// What `vm-test` runs: FILTER, `--repeat N`, `--lockdown` or `--many-cpus`.
#[derive(Debug, PartialEq, Eq)]
struct VmTestArgs {
    filter: String,
    repeat: u32,
    boot: vm::Boot,
}

/// `[FILTER] [--repeat N] [--lockdown | --many-cpus]` of `vm-test`.
fn vm_test_args(args: &[String]) -> Result<VmTestArgs> {
    let mut filter = None;
    let mut repeat = 1;
    let mut boot = vm::Boot::Plain;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        if arg == "--repeat" {
            let value = args.next().context("--repeat needs a count")?;
            repeat =
                value.parse().ok().filter(|&n| n > 0).with_context(|| {
                    format!("--repeat {value:?}: expected a count of at least 1")
                })?;
        } else if (arg == "--lockdown" || arg == "--many-cpus") && boot == vm::Boot::Plain {
            boot = if arg == "--lockdown" {
                vm::Boot::Lockdown
            } else {
                vm::Boot::ManyCpus
            };
        } else if filter.is_none() && !arg.starts_with('-') {
            filter = Some(arg.clone());
        } else {
            bail!("unexpected argument {arg:?}; usage: {USAGE}");
        }
    }
    Ok(VmTestArgs {
        filter: filter.unwrap_or_else(|| boot.default_filter().to_owned()),
        repeat,
        boot,
    })
}

fn workspace_root() -> Result<PathBuf> {
    let manifest = env::var_os("CARGO_MANIFEST_DIR").context("run through `cargo xtask`")?;
    Path::new(&manifest)
        .parent()
        .map(Path::to_path_buf)
        .context("xtask has no parent directory")
}

/// Builds the binary and has it render its man pages into `dir` (default `target/man`).
fn man(dir: Option<PathBuf>) -> Result<()> {
    let root = workspace_root()?;
    let dir = dir.unwrap_or_else(|| root.join("target/man"));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(Command::new(cargo)
        .current_dir(&root)
        .args([
            "run",
            "--quiet",
            "-p",
            "relay-metrics",
            "--features",
            "cli",
            "--",
        ])
        .args(["man", "--dir"])
        .arg(&dir))
}

fn run(command: &mut Command) -> Result<()> {
    eprintln!("xtask: running {command:?}");
    let status = command
        .status()
        .with_context(|| format!("starting {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed: {status}");
    }
    Ok(())
}

fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("starting {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed: {}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

/// Installs those of `packages` that are missing (apt-get update first).
fn ensure_apt_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|package| !dpkg_installed(package))
        .collect();
    if missing.is_empty() {
        eprintln!("xtask: apt packages already installed: {packages:?}");
        return Ok(());
    }
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(Command::new("apt-get")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing)
        .env("DEBIAN_FRONTEND", "noninteractive"))
}

fn bpf_linker_version() -> Option<String> {
    let out = Command::new("bpf-linker").arg("--version").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn install_toolchain() -> Result<()> {
    let started = Instant::now();
    ensure_apt_packages(&APT_PACKAGES)?;
    ensure_apt_packages(&ITER_APT_PACKAGES)?;
    match bpf_linker_version() {
        Some(version) if version.contains(BPF_LINKER_VERSION) => {
            eprintln!("xtask: {version} already installed");
        }
        _ => {
            // Without LLVM_PREFIX bpf-linker's build finds LLVM 14 and fails on -lLLVM.
            run(Command::new("cargo")
                .args(["install", "--locked", "bpf-linker", "--version"])
                .arg(BPF_LINKER_VERSION)
                .args(["--no-default-features", "--features", "llvm-22"])
                .env("LLVM_PREFIX", LLVM_PREFIX)
                .env("PATH", llvm_path()?))?;
        }
    }
    eprintln!(
        "xtask: toolchain ready in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn llvm_path() -> Result<OsString> {
    let mut paths = vec![PathBuf::from(LLVM_PREFIX).join("bin")];
    paths.extend(env::split_paths(&env::var_os("PATH").unwrap_or_default()));
    env::join_paths(paths).context("building PATH")
}

fn toolchain_stamp() -> Result<String> {
    let rustc = output(Command::new(DEBIAN_RUSTC).arg("-V"))
        .with_context(|| format!("{DEBIAN_RUSTC} missing: run `cargo xtask install-toolchain`"))?;
    let linker =
        bpf_linker_version().context("bpf-linker missing: run `cargo xtask install-toolchain`")?;
    Ok(format!("{rustc}\n{linker}\n"))
}

/// Builds the eBPF crate into `target_dir` and returns the object's path.
fn compile(root: &Path, target_dir: &Path) -> Result<PathBuf> {
    let crate_dir = root.join(EBPF_CRATE);
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    // Reproducibility: the build machine's paths must not reach the object.
    let rustflags = [
        "-Cdebuginfo=0".to_owned(),
        format!(
            "--remap-path-prefix={}=/relay-metrics-ebpf",
            crate_dir.display()
        ),
        format!(
            "--remap-path-prefix={}=/relay-metrics-common",
            root.join("relay-metrics-common").display()
        ),
        format!(
            "--remap-path-prefix={}=/cargo",
            cargo_home.join("registry").join("src").display()
        ),
    ]
    .join("\x1f");
    let mut command = Command::new("cargo");
    command
        .current_dir(&crate_dir)
        .args(["build", "--locked", "--release", "--target", TARGET])
        .arg("--target-dir")
        .arg(target_dir)
        // aya-ebpf needs one unstable feature; Debian's rustc ships core for this target.
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTC", DEBIAN_RUSTC)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags)
        .env("PATH", llvm_path()?)
        .env_remove("RUSTFLAGS")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .env_remove("CARGO_TARGET_DIR");
    run(&mut command)?;
    Ok(target_dir
        .join(TARGET)
        .join("release")
        .join("relay-metrics"))
}

fn clang_stamp() -> Result<String> {
    let version = output(Command::new(CLANG).arg("--version"))
        .with_context(|| format!("{CLANG} missing: run `cargo xtask install-toolchain`"))?;
    Ok(format!("{}\n", version.lines().next().unwrap_or_default()))
}

/// Compiles one C iterator into `out`. The build directory is mapped to a fixed name, so the
/// object is the same wherever the repository is checked out.
fn compile_iter(root: &Path, iter: &CObject, out: &Path) -> Result<()> {
    let source = root.join(iter.source);
    let file = source
        .file_name()
        .context("the iterator source has no file name")?;
    let dir = source
        .parent()
        .context("the iterator source has no directory")?;
    let mapped = "/relay-metrics-ebpf/iter";
    run(Command::new(CLANG)
        .current_dir(dir)
        .args(["-O2", "-g", "-target", "bpf", "-Wall", "-Werror"])
        .arg(format!("-fdebug-prefix-map={}={mapped}", dir.display()))
        .arg(format!("-fdebug-compilation-dir={mapped}"))
        .arg("-c")
        .arg(file)
        .arg("-o")
        .arg(out))
}

fn build_ebpf() -> Result<()> {
    let root = workspace_root()?;
    let iter_stamp = clang_stamp()?;
    for iter in &ITER_OBJECTS {
        let iter_object = root.join(iter.object);
        compile_iter(&root, iter, &iter_object)?;
        fs::write(root.join(iter.stamp), &iter_stamp).context("writing the clang stamp")?;
        eprintln!(
            "xtask: wrote {}\n{}",
            iter_object.display(),
            elf_summary::summarize(&fs::read(&iter_object)?)?
        );
    }
    let stamp = toolchain_stamp()?;
    let built = compile(&root, &root.join(EBPF_CRATE).join("target"))?;
    let object = root.join(OBJECT);
    fs::copy(&built, &object)
        .with_context(|| format!("copying {} to {}", built.display(), object.display()))?;
    fs::write(root.join(STAMP), stamp).context("writing the toolchain stamp")?;
    let summary = elf_summary::summarize(&fs::read(&object)?)?;
    eprintln!("xtask: wrote {}\n{summary}", object.display());
    Ok(())
}

fn check_ebpf_fresh() -> Result<()> {
    let root = workspace_root()?;
    let stamp = toolchain_stamp()?;
    let scratch = env::temp_dir().join(format!("relay-metrics-ebpf-check-{}", std::process::id()));
    let result = (|| {
        fs::create_dir_all(&scratch).context("creating the scratch directory")?;
        for (at, iter) in ITER_OBJECTS.iter().enumerate() {
            check_iter_fresh(&root, iter, &scratch.join(format!("iter-{at}.bpf.o")))?;
        }
        let built = compile(&root, &scratch)?;
        let fresh = fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
        let committed_path = root.join(OBJECT);
        let committed = fs::read(&committed_path)
            .with_context(|| format!("reading {}", committed_path.display()))?;
        let committed_stamp = fs::read_to_string(root.join(STAMP)).unwrap_or_default();
        let (fresh_summary, committed_summary) = (
            elf_summary::summarize(&fresh)?,
            elf_summary::summarize(&committed)?,
        );
        if fresh == committed {
            eprintln!("xtask: {OBJECT} is fresh (byte-identical rebuild)");
            return Ok(());
        }
        if committed_stamp == stamp {
            bail!(
                "{OBJECT} differs from a rebuild with the toolchain that built it:\n\
                 run `cargo xtask build-ebpf` and commit.\ncommitted:\n{committed_summary}\nfresh:\n{fresh_summary}"
            );
        }
        // Another compiler legitimately emits other bytes; the programs, maps and globals the
        // loader relies on must still match.
        if fresh_summary != committed_summary {
            bail!(
                "{OBJECT} is stale: its programs/maps/globals differ from the source's.\n\
                 committed:\n{committed_summary}\nfresh:\n{fresh_summary}"
            );
        }
        eprintln!(
            "xtask: {OBJECT}: same programs, maps and globals; bytes differ because the toolchain \
             differs (committed: {committed_stamp:?}, here: {stamp:?})"
        );
        Ok(())
    })();
    let _ = fs::remove_dir_all(&scratch);
    result
}

/// A C iterator's object against a rebuild: byte for byte with the clang that built it, else
/// the same programs, maps and globals.
fn check_iter_fresh(root: &Path, iter: &CObject, out: &Path) -> Result<()> {
    let (source, object) = (iter.source, iter.object);
    let stamp = clang_stamp()?;
    compile_iter(root, iter, out)?;
    let fresh = fs::read(out).with_context(|| format!("reading {}", out.display()))?;
    let committed = fs::read(root.join(object)).with_context(|| format!("reading {object}"))?;
    if fresh == committed {
        eprintln!("xtask: {object} is fresh (byte-identical rebuild)");
        return Ok(());
    }
    let committed_stamp = fs::read_to_string(root.join(iter.stamp)).unwrap_or_default();
    let (fresh_summary, committed_summary) = (
        elf_summary::summarize(&fresh)?,
        elf_summary::summarize(&committed)?,
    );
    if committed_stamp == stamp || fresh_summary != committed_summary {
        bail!(
            "{object} differs from a rebuild of {source}: run `cargo xtask build-ebpf` \
             and commit.\ncommitted:\n{committed_summary}\nfresh:\n{fresh_summary}"
        );
    }
    eprintln!(
        "xtask: {object}: same programs, maps and globals; bytes differ because clang \
         differs (committed: {committed_stamp:?}, here: {stamp:?})"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<(String, u32, bool)> {
        vm_test_args(&args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>())
            .map(|args| (args.filter, args.repeat, args.boot == vm::Boot::Lockdown))
    }

    #[test]
    fn vm_test_takes_a_filter_and_a_repeat_count_in_any_order() {
        assert_eq!(parse(&[]).unwrap(), ("source::ebpf".to_owned(), 1, false));
        assert_eq!(
            parse(&["vm_tests"]).unwrap(),
            ("vm_tests".to_owned(), 1, false)
        );
        assert_eq!(
            parse(&["--repeat", "3", "vm_tests"]).unwrap(),
            ("vm_tests".to_owned(), 3, false)
        );
    }

    #[test]
    fn vm_test_lockdown_defaults_to_the_lockdown_tests() {
        assert_eq!(
            parse(&["--lockdown"]).unwrap(),
            ("vm_tests::lockdown".to_owned(), 1, true)
        );
        assert_eq!(
            parse(&["vm_tests::lockdown::a", "--lockdown"]).unwrap(),
            ("vm_tests::lockdown::a".to_owned(), 1, true)
        );
        let many = vm_test_args(&["--many-cpus".to_owned()]).unwrap();
        assert_eq!(many.filter, "vm_tests::many_cpus");
        assert_eq!(many.boot, vm::Boot::ManyCpus);
        assert!(parse(&["--many-cpus", "--lockdown"]).is_err());
    }

    #[test]
    fn vm_test_rejects_bad_repeat_counts_and_extra_arguments() {
        for bad in [
            &["--repeat"][..],
            &["--repeat", "0"],
            &["--repeat", "x"],
            &["a", "b"],
            &["--fast"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
