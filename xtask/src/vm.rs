//! `cargo xtask vm-test`: runs the eBPF host tests on a pure cgroup v2 kernel (Debian's 6.1
//! cloud kernel) under `qemu-system-x86_64 -accel tcg` (here `/dev/kvm` exists but hangs), with a
//! busybox initramfs holding the relay-metrics test binary and its shared libraries.
//!
//! The VM runs as root, so every run includes the ignored tests (`#[ignore = "root: …"]` and
//! `#[ignore = "vm: …"]`): first FILTER's tests except `vm_tests`, then `vm_tests` (the cgroup v2
//! limit-event tests, which the host never runs); a FILTER inside `vm_tests` runs only those. The
//! run fails unless every test listed on the host for each run printed `ok` in the VM and each
//! run's `test result:` line counts exactly those tests as passed.
//!
//! `--lockdown` boots the kernel with `lockdown=confidentiality` and runs only FILTER (by default
//! `vm_tests::lockdown`, the tests of the fallbacks there, which the other runs skip).
//! `--many-cpus` boots it with 2 online of 64 possible CPUs (`-smp 2,maxcpus=64`, as a big host
//! sizes per-CPU data) and runs only FILTER (by default `vm_tests::many_cpus`, which the other
//! runs skip): a boot of its own, since 64 possible CPUs slow every test under TCG.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::{ensure_apt_packages, output, run};

const VM_PACKAGES: [&str; 3] = ["qemu-system-x86", "busybox-static", "cpio"];
/// Printed by the VM's init with the test binary's exit code.
const EXIT_MARKER: &str = "VM-TEST-EXIT=";
/// Printed by the VM's init after each test run, with its exit code.
const RUN_EXIT_MARKER: &str = "VM-TEST-RUN-EXIT=";
/// Starts the lines of a VM test's watchdog report (relay-metrics/src/vm_tests/watchdog.rs).
const WATCHDOG_PREFIX: &str = "watchdog: ";
/// The module of tests that only the VM runs (the host's test command skips them).
const VM_ONLY_TESTS: &str = "vm_tests";
/// The tests that only the lockdown boot runs.
pub const LOCKDOWN_TESTS: &str = "vm_tests::lockdown";
/// The tests that only the many-CPUs boot runs.
pub const MANY_CPUS_TESTS: &str = "vm_tests::many_cpus";

/// How the VM's kernel is booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Boot {
    /// 2 CPUs, no lockdown: every test but those of the other boots.
    Plain,
    /// `lockdown=confidentiality`.
    Lockdown,
    /// 2 online of 64 possible CPUs.
    ManyCpus,
}

impl Boot {
    /// The tests this boot runs when no FILTER is given.
    pub fn default_filter(self) -> &'static str {
        match self {
            Self::Plain => "source::ebpf",
            Self::Lockdown => LOCKDOWN_TESTS,
            Self::ManyCpus => MANY_CPUS_TESTS,
        }
    }

    /// The guest kernel's command line. `softlockup_panic=1`: a soft lockup (seen twice under
    /// TCG, cause unknown) panics at once, printing the stuck CPU's stack even at `quiet`, and
    /// `panic=-1` ends the boot, so the retry comes minutes sooner than qemu's time limit.
    fn append(self) -> &'static str {
        match self {
            Self::Lockdown => {
                "console=ttyS0 panic=-1 softlockup_panic=1 quiet lockdown=confidentiality"
            }
            Self::Plain | Self::ManyCpus => "console=ttyS0 panic=-1 softlockup_panic=1 quiet",
        }
    }

    fn smp(self) -> &'static str {
        match self {
            Self::ManyCpus => "2,maxcpus=64",
            Self::Plain | Self::Lockdown => "2",
        }
    }
}

/// One invocation of the test binary in the VM.
#[derive(Clone)]
struct TestRun {
    filter: String,
    /// Test-name filters left out (`vm_tests`, which have a run of their own; the lockdown
    /// tests, which need their own boot).
    skips: Vec<String>,
    /// The tests it must run, as listed by the same binary on the host.
    expected: Vec<String>,
}

impl TestRun {
    fn args(&self) -> Vec<String> {
        let mut args = vec![
            self.filter.clone(),
            "--test-threads=1".to_owned(),
            "--include-ignored".to_owned(),
        ];
        for skip in &self.skips {
            args.extend(["--skip".to_owned(), skip.clone()]);
        }
        args
    }
}

/// FILTER's tests but `vm_tests`, then every `vm_tests` test (a FILTER inside `vm_tests`
/// selects just those), the tests of the other boots left out; under another boot, FILTER alone.
fn plan(filter: &str, boot: Boot) -> Vec<TestRun> {
    let run = |filter: &str, skips: &[&str]| TestRun {
        filter: filter.to_owned(),
        skips: skips.iter().map(|skip| (*skip).to_owned()).collect(),
        expected: Vec::new(),
    };
    let own_boots = [
        format!("{LOCKDOWN_TESTS}::"),
        format!("{MANY_CPUS_TESTS}::"),
    ];
    let own_boots = [own_boots[0].as_str(), own_boots[1].as_str()];
    if boot != Boot::Plain {
        vec![run(filter, &[])]
    } else if filter.starts_with(VM_ONLY_TESTS) {
        vec![run(filter, &own_boots)]
    } else {
        vec![
            run(filter, &[&format!("{VM_ONLY_TESTS}::")]),
            run(VM_ONLY_TESTS, &own_boots),
        ]
    }
}

/// Lists each run's tests with the test binary on the host (listing runs nothing), so that a
/// test that never runs in the VM is noticed.
fn list_expected(tests: &Path, runs: &mut [TestRun]) -> Result<()> {
    for run in runs {
        let listing = output(Command::new(tests).args(run.args()).arg("--list"))?;
        run.expected = listing
            .lines()
            .filter_map(|line| line.strip_suffix(": test"))
            .map(str::to_owned)
            .collect();
        if run.expected.is_empty() {
            bail!("no test matches {:?}", run.filter);
        }
    }
    Ok(())
}

/// Why the console shows that the runs did not all pass, if it does.
fn check_console(console: &str, runs: &[TestRun]) -> Vec<String> {
    let lines: Vec<&str> = console.lines().map(|l| l.trim_end_matches('\r')).collect();
    let mut problems = Vec::new();
    let results: Vec<&str> = lines
        .iter()
        .filter(|line| line.starts_with("test result: "))
        .copied()
        .collect();
    if results.len() != runs.len() {
        problems.push(format!(
            "expected {} `test result:` lines, found {}: {results:?}",
            runs.len(),
            results.len()
        ));
    }
    for (run, result) in runs.iter().zip(&results) {
        let passed = format!(" {} passed; 0 failed; 0 ignored;", run.expected.len());
        if !result.starts_with("test result: ok.") || !result.contains(&passed) {
            problems.push(format!(
                "run {:?}: expected{passed} got {result:?}",
                run.filter
            ));
        }
        for test in &run.expected {
            let ok = format!("test {test} ... ok");
            if !lines.iter().any(|line| *line == ok) {
                problems.push(format!("{test} did not pass (or did not run)"));
            }
        }
    }
    for (index, code) in lines
        .iter()
        .filter_map(|line| line.strip_prefix(RUN_EXIT_MARKER))
        .enumerate()
    {
        if code != "0" {
            problems.push(format!("run {index} exited with {code}"));
        }
    }
    problems
}

pub fn vm_test(root: &Path, filter: &str, repeat: u32, boot: Boot) -> Result<()> {
    let started = Instant::now();
    ensure_apt_packages(&VM_PACKAGES)?;
    let work = root.join("target").join("vm-test");
    fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let kernel = kernel_image(&work)?;
    let tests = build_test_binary(root)?;
    let mut once = plan(filter, boot);
    list_expected(&tests, &mut once)?;
    let runs: Vec<TestRun> = (0..repeat).flat_map(|_| once.iter().cloned()).collect();
    announce(&once, repeat);
    let initramfs = make_initramfs(&work, &tests, &runs)?;
    eprintln!(
        "xtask: booting {} under qemu (TCG) with {:?}",
        kernel.display(),
        boot.append()
    );
    // One pass takes about a minute under TCG; the margin is for a slow machine.
    let timeout_secs = 600 + 300 * (u64::from(repeat) - 1);
    let out = boot_retrying_a_stall(&work, || boot_qemu(&kernel, &initramfs, boot, timeout_secs))?;
    let console = String::from_utf8_lossy(&out.stdout);
    let log = work.join("console.log");
    fs::write(&log, console.as_bytes()).with_context(|| format!("writing {}", log.display()))?;
    print_test_lines(&console);
    let code = console
        .lines()
        .find_map(|line| line.trim_end_matches('\r').strip_prefix(EXIT_MARKER))
        .map(str::to_owned);
    eprintln!(
        "xtask: VM run took {:.1} s; console log in {}",
        started.elapsed().as_secs_f64(),
        log.display()
    );
    let problems = check_console(&console, &runs);
    for problem in &problems {
        eprintln!("xtask: {problem}");
    }
    match code.as_deref() {
        Some("0") if problems.is_empty() => Ok(()),
        Some("0") => bail!(
            "the VM runs did not all pass ({} problems above); see {}",
            problems.len(),
            log.display()
        ),
        Some(code) => bail!("the tests failed in the VM (exit code {code})"),
        None => bail!(
            "the VM did not report a result (qemu: {}); see {}",
            out.status,
            log.display()
        ),
    }
}

/// Says what runs in the VM.
fn announce(once: &[TestRun], repeat: u32) {
    for run in once {
        eprintln!(
            "xtask: in the VM{}: {} ({} tests)",
            if repeat > 1 {
                format!(", {repeat} times")
            } else {
                String::new()
            },
            run.args().join(" "),
            run.expected.len()
        );
    }
}

/// Boots the VM once under qemu (TCG), with `timeout_secs` for the whole run; its console is
/// the output's stdout.
fn boot_qemu(
    kernel: &Path,
    initramfs: &Path,
    boot: Boot,
    timeout_secs: u64,
) -> Result<std::process::Output> {
    Command::new("timeout")
        .arg(timeout_secs.to_string())
        .arg("qemu-system-x86_64")
        .args([
            "-accel",
            "tcg",
            "-cpu",
            "max",
            "-smp",
            boot.smp(),
            "-m",
            "1024",
        ])
        .args(["-nographic", "-no-reboot"])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initramfs)
        .args(["-append", boot.append()])
        .output()
        .context("starting qemu-system-x86_64")
}

/// Boots with `boot`, and once more when the guest kernel stalled (its console kept in
/// `work/console-stalled.log`).
fn boot_retrying_a_stall(
    work: &Path,
    boot: impl Fn() -> Result<std::process::Output>,
) -> Result<std::process::Output> {
    let out = boot()?;
    let stall = guest_kernel_stall(&String::from_utf8_lossy(&out.stdout)).map(str::to_owned);
    let Some(stall) = stall else {
        return Ok(out);
    };
    // The guest kernel itself locked up, so the tests could not report (seen in a CI run: a
    // soft lockup of Debian's 6.1 kernel under TCG in a loader test whose code had not
    // changed; the same build passed on the next boot). That is the emulated kernel's
    // failure, not a test's: boot once more, saying so. A test that fails, or a hang the
    // in-VM watchdog reports, is never retried.
    eprintln!(
        "xtask: RETRY: the guest kernel stalled and no result came back ({}; first line: {stall}); booting once more",
        out.status
    );
    let first = work.join("console-stalled.log");
    fs::write(&first, &out.stdout).with_context(|| format!("writing {}", first.display()))?;
    for line in panic_report(&String::from_utf8_lossy(&out.stdout)) {
        eprintln!("xtask: stalled guest: {line}");
    }
    boot()
}

/// The guest kernel's panic report, from its `Kernel panic` line or the stack before it, at
/// most 60 lines: where a stalled CPU was stuck, for the log of a run whose files are gone.
fn panic_report(console: &str) -> impl Iterator<Item = &str> {
    let lines: Vec<&str> = console.lines().map(|l| l.trim_end_matches('\r')).collect();
    let start = lines
        .iter()
        .position(|line| line.contains("Kernel panic") || line.contains("Call Trace:"))
        .unwrap_or(lines.len());
    lines.into_iter().skip(start).take(60)
}

/// Prints the console's test lines. The serial console's own escape sequences are noise; the
/// test lines are what matters, and libtest's failure report (from `failures:` to its
/// `test result:`) in full.
fn print_test_lines(console: &str) {
    let mut in_failures = false;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if line == "failures:" {
            in_failures = true;
        }
        if in_failures
            || line.starts_with("test ")
            // The first console line starts with the terminal reset of the serial console.
            || line.contains("kernel: ")
            || line.starts_with("running ")
            || line.contains("panicked")
            || line.starts_with(WATCHDOG_PREFIX)
            || line.starts_with(EXIT_MARKER)
            || line.starts_with(RUN_EXIT_MARKER)
        {
            println!("{line}");
        }
        if line.starts_with("test result: ") {
            in_failures = false;
        }
    }
}

/// The guest kernel's first lockup report, when the console has one and no run's result: the
/// emulated kernel stopped, not a test.
fn guest_kernel_stall(console: &str) -> Option<&str> {
    if console
        .lines()
        .any(|line| line.trim_end_matches('\r').starts_with(EXIT_MARKER))
    {
        return None;
    }
    console
        .lines()
        .map(|line| line.trim_end_matches('\r'))
        .find(|line| {
            line.contains("watchdog: BUG: soft lockup")
                || line.contains("rcu_sched self-detected stall")
                || line.contains("rcu: INFO: rcu_sched detected stalls")
        })
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

fn make_initramfs(work: &Path, tests: &Path, runs: &[TestRun]) -> Result<PathBuf> {
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
    // Each run's exit code is printed; the last marker is the first failing code (or 0).
    let commands: String = runs
        .iter()
        .map(|run| {
            format!(
                "/relay-metrics-tests {}\n\
                 code=$?\n\
                 echo \"{RUN_EXIT_MARKER}$code\"\n\
                 [ \"$status\" = 0 ] && status=$code\n",
                run.args().join(" ")
            )
        })
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
         mount -t securityfs none /sys/kernel/security\n\
         echo '+cpu +memory +pids' > /sys/fs/cgroup/cgroup.subtree_control\n\
         echo \"kernel: $(uname -r); cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers); \
         enabled for children: $(cat /sys/fs/cgroup/cgroup.subtree_control); \
         softlockup_panic: $(cat /proc/sys/kernel/softlockup_panic)\"\n\
         # Kernel messages (OOM kill reports) would split the test lines on the console.\n\
         echo 1 > /proc/sys/kernel/printk\n\
         cd /tmp\n\
         status=0\n\
         {commands}\
         [ \"$status\" = 0 ] || dmesg | tail -n 40 | sed 's/^/kernel: /'\n\
         echo \"{EXIT_MARKER}$status\"\n\
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

#[cfg(test)]
mod tests {
    use super::*;

    fn runs() -> Vec<TestRun> {
        let mut runs = plan("source::ebpf", Boot::Plain);
        runs[0].expected = vec!["source::ebpf::a".into()];
        runs[1].expected = vec!["vm_tests::b".into(), "vm_tests::c".into()];
        runs
    }

    const PASSING: &str = "running 1 test\r\n\
        test source::ebpf::a ... ok\r\n\
        test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 9 filtered out\r\n\
        VM-TEST-RUN-EXIT=0\r\n\
        test vm_tests::b ... ok\r\n\
        test vm_tests::c ... ok\r\n\
        test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 9 filtered out\r\n\
        VM-TEST-RUN-EXIT=0\r\n";

    #[test]
    fn the_default_runs_filter_but_vm_tests_then_every_vm_test_all_including_ignored() {
        let runs = plan("source::ebpf", Boot::Plain);
        assert_eq!(runs.len(), 2);
        let skip_vm_tests = ["--skip".to_owned(), "vm_tests::".to_owned()];
        let skip_lockdown = ["--skip".to_owned(), "vm_tests::lockdown::".to_owned()];
        assert!(runs[0].args().contains(&"--include-ignored".to_owned()));
        assert!(runs[0].args().windows(2).any(|pair| pair == skip_vm_tests));
        assert_eq!(runs[1].filter, "vm_tests");
        assert!(runs[1].args().contains(&"--include-ignored".to_owned()));
        assert!(runs[1].args().windows(2).any(|pair| pair == skip_lockdown));
        assert!(!runs[1].args().windows(2).any(|pair| pair == skip_vm_tests));
        let only = plan("vm_tests::oom", Boot::Plain);
        assert_eq!(only.len(), 1);
        assert!(only[0].args().contains(&"--include-ignored".to_owned()));
        assert!(only[0].args().windows(2).any(|pair| pair == skip_lockdown));
    }

    #[test]
    fn the_lockdown_boot_runs_its_filter_alone() {
        let runs = plan(LOCKDOWN_TESTS, Boot::Lockdown);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].filter, "vm_tests::lockdown");
        assert!(runs[0].args().contains(&"--include-ignored".to_owned()));
        assert!(!runs[0].args().contains(&"--skip".to_owned()));
        let runs = plan(MANY_CPUS_TESTS, Boot::ManyCpus);
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].filter, "vm_tests::many_cpus");
        assert!(!runs[0].args().contains(&"--skip".to_owned()));
        let skip_many = ["--skip".to_owned(), "vm_tests::many_cpus::".to_owned()];
        assert!(plan("source::ebpf", Boot::Plain)[1]
            .args()
            .windows(2)
            .any(|pair| pair == skip_many));
    }

    #[test]
    fn a_guest_kernel_stall_without_a_result_is_told_apart_from_a_test_failure() {
        let stalled = "running 33 tests\r\ntest a ... [   56.5] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [t:131]\r\n";
        assert_eq!(
            guest_kernel_stall(stalled),
            Some("test a ... [   56.5] watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [t:131]")
        );
        // A result came back: whatever the kernel said, the tests decide.
        let reported = format!("{stalled}{EXIT_MARKER}1\r\n");
        assert_eq!(guest_kernel_stall(&reported), None);
        // A test that hangs without a kernel stall is the in-VM watchdog's to report.
        assert_eq!(guest_kernel_stall("running 1 test\ntest a ... "), None);
    }

    #[test]
    fn a_stalled_guests_panic_report_is_kept_from_its_first_stack() {
        let console = "test a ... [ 56.5] watchdog: BUG: soft lockup - CPU#1 stuck for 45s!\r\n\
                       [ 56.6] CPU: 1 PID: 585 Comm: t\r\n\
                       [ 56.6] Call Trace:\r\n\
                       [ 56.6]  <IRQ>\r\n\
                       [ 56.7] Kernel panic - not syncing: softlockup: hung tasks\r\n";
        let report: Vec<&str> = panic_report(console).collect();
        assert_eq!(report.len(), 3);
        assert!(report[0].ends_with("Call Trace:"));
        assert!(report[2].contains("Kernel panic"));
        assert_eq!(panic_report("test a ... ok\n").count(), 0);
        let long = "Call Trace:\n".repeat(100);
        assert_eq!(panic_report(&long).count(), 60);
    }

    #[test]
    fn a_clean_console_has_no_problems() {
        assert_eq!(check_console(PASSING, &runs()), Vec::<String>::new());
    }

    #[test]
    fn a_test_that_did_not_run_is_a_problem() {
        let console = PASSING.replace("test vm_tests::c ... ok\r\n", "").replace(
            "2 passed; 0 failed; 0 ignored",
            "1 passed; 0 failed; 1 ignored",
        );
        let problems = check_console(&console, &runs());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[1].contains("vm_tests::c"), "{problems:?}");
    }

    #[test]
    fn a_missing_run_or_a_failed_exit_is_a_problem() {
        let truncated = &PASSING[..PASSING.find("test vm_tests::b").unwrap_or(0)];
        assert!(!check_console(truncated, &runs()).is_empty());
        let failed = PASSING.replacen("VM-TEST-RUN-EXIT=0", "VM-TEST-RUN-EXIT=101", 1);
        assert_eq!(check_console(&failed, &runs()).len(), 1);
    }
}
