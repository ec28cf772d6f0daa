//! `cargo xtask vm-test`: runs the eBPF host tests on a pure cgroup v2 kernel (Debian's 6.1
//! cloud kernel) under `qemu-system-x86_64 -accel tcg` (here `/dev/kvm` exists but hangs), with a
//! busybox initramfs holding the relay-metrics test binary and its shared libraries.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{ensure_apt_packages, output, run};

const VM_PACKAGES: [&str; 3] = ["qemu-system-x86", "busybox-static", "cpio"];
/// Printed by the VM's init with the test binary's exit code.
const EXIT_MARKER: &str = "VM-TEST-EXIT=";
/// Tests left out in the VM: per-event cost under TCG emulation says nothing about real hardware.
const SKIPPED: [&str; 1] = ["measures_per_event_cost"];

pub fn vm_test(root: &Path, filter: &str) -> Result<()> {
    let started = Instant::now();
    ensure_apt_packages(&VM_PACKAGES)?;
    let work = root.join("target").join("vm-test");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let kernel = kernel_image(&work)?;
    let tests = build_test_binary(root)?;
    let initramfs = make_initramfs(&work, &tests, filter)?;
    eprintln!("xtask: booting {} under qemu (TCG)", kernel.display());
    let out = Command::new("timeout")
        .arg("1200")
        .arg("qemu-system-x86_64")
        .args(["-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "1024"])
        .args(["-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(&kernel)
        .arg("-initrd")
        .arg(&initramfs)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .output()
        .context("starting qemu-system-x86_64")?;
    let console = String::from_utf8_lossy(&out.stdout);
    let log = work.join("console.log");
    fs::write(&log, console.as_bytes()).with_context(|| format!("writing {}", log.display()))?;
    // The serial console's own escape sequences are noise; the test lines are what matters.
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if line.starts_with("test ")
            || line.starts_with("kernel:")
            || line.starts_with("running ")
            || line.contains("panicked")
            || line.starts_with(EXIT_MARKER)
            || line.starts_with("---- ")
            || line.starts_with("    ")
        {
            println!("{line}");
        }
    }
    let code = console
        .lines()
        .find_map(|line| line.trim_end_matches('\r').strip_prefix(EXIT_MARKER))
        .map(str::to_owned);
    eprintln!(
        "xtask: VM run took {:.1} s; console log in {}",
        started.elapsed().as_secs_f64(),
        log.display()
    );
    match code.as_deref() {
        Some("0") => Ok(()),
        Some(code) => bail!("the tests failed in the VM (exit code {code})"),
        None => bail!(
            "the VM did not report a result (qemu: {}); see {}",
            out.status,
            log.display()
        ),
    }
}

/// Debian's newest 6.1 cloud kernel, downloaded and unpacked once into `work`.
fn kernel_image(work: &Path) -> Result<PathBuf> {
    let unpacked = work.join("kernel");
    if let Some(image) = find_vmlinuz(&unpacked) {
        return Ok(image);
    }
    let search = || {
        output(Command::new("apt-cache").args([
            "search",
            "--names-only",
            r"^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$",
        ]))
    };
    let mut found = search()?;
    if found.is_empty() {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        found = search()?;
    }
    let package = found
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .max_by_key(|name| {
            name.trim_start_matches("linux-image-6.1.0-")
                .split('-')
                .next()
                .and_then(|abi| abi.parse::<u32>().ok())
                .unwrap_or(0)
        })
        .context("no linux-image-6.1.0-*-cloud-amd64-unsigned package found")?
        .to_owned();
    let downloads = work.join("download");
    fs::create_dir_all(&downloads)?;
    run(Command::new("apt-get")
        .args(["download", &package])
        .current_dir(&downloads))?;
    let deb = fs::read_dir(&downloads)?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|ext| ext == "deb"))
        .context("apt-get download left no .deb")?;
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked))?;
    find_vmlinuz(&unpacked).context("the kernel package holds no boot/vmlinuz-*")
}

fn find_vmlinuz(unpacked: &Path) -> Option<PathBuf> {
    fs::read_dir(unpacked.join("boot"))
        .ok()?
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("vmlinuz-"))
        })
}

/// Builds relay-metrics' library tests and returns the test executable.
fn build_test_binary(root: &Path) -> Result<PathBuf> {
    let messages = output(
        Command::new("cargo")
            .current_dir(root)
            .args(["test", "-p", "relay-metrics", "--lib", "--no-run"])
            .args(["--message-format", "json"])
            .stderr(std::process::Stdio::inherit()),
    )?;
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["name"] == "relay_metrics")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .context("cargo test --no-run reported no relay-metrics test executable")
}

fn make_initramfs(work: &Path, tests: &Path, filter: &str) -> Result<PathBuf> {
    let tree = work.join("initramfs");
    if tree.exists() {
        fs::remove_dir_all(&tree)?;
    }
    for dir in ["bin", "proc", "sys", "dev", "tmp"] {
        fs::create_dir_all(tree.join(dir))?;
    }
    fs::copy("/bin/busybox", tree.join("bin/busybox")).context("copying /bin/busybox")?;
    fs::copy(tests, tree.join("relay-metrics-tests"))
        .with_context(|| format!("copying {}", tests.display()))?;
    let ldd = output(Command::new("ldd").arg(tests))?;
    for library in ldd.split_whitespace().filter(|word| word.starts_with('/')) {
        let source = Path::new(library);
        let target = tree.join(library.trim_start_matches('/'));
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::copy(source, &target).with_context(|| format!("copying {library}"))?;
    }
    let skips: String = SKIPPED
        .iter()
        .map(|test| format!(" --skip {test}"))
        .collect();
    let init = format!(
        "#!/bin/busybox sh\n\
         /bin/busybox --install -s /bin\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev\n\
         mount -t tmpfs tmp /tmp\n\
         mount -t cgroup2 none /sys/fs/cgroup\n\
         mount -t tracefs nodev /sys/kernel/tracing\n\
         echo \"kernel: $(uname -r); cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers)\"\n\
         cd /tmp\n\
         /relay-metrics-tests {filter} --test-threads=1{skips}\n\
         echo \"{EXIT_MARKER}$?\"\n\
         poweroff -f\n"
    );
    let init_path = tree.join("init");
    fs::write(&init_path, init)?;
    run(Command::new("chmod").arg("755").arg(&init_path))?;
    let image = work.join("initramfs.cpio.gz");
    run(Command::new("sh")
        .arg("-c")
        .arg("find . | cpio -o -H newc --quiet | gzip -1 > \"$0\"")
        .arg(&image)
        .current_dir(&tree))?;
    Ok(image)
}
