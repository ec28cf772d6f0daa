//! `relay-metrics run` nests its cgroup below the caller's own in every hierarchy it uses: a
//! limit the caller is under applies to the command as it would without `run`. The witness: a
//! shell in a 256 MiB v1 memory cgroup runs a program touching 1 GiB; alone it is OOM-killed,
//! and under `run` it must be too. Root only (it makes cgroups).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{assert_root, json_lines, own_path, Below};

const BIN: &str = env!("CARGO_BIN_EXE_relay-metrics");
/// Touches 1 GiB (every byte written).
const ALLOC_1_GIB: &str = "x = b'x' * (1 << 30)";

/// Runs `command` (a shell line) from a shell that first moves itself into `cgroups`.
fn in_cgroups(cgroups: &[&Below], command: &str) -> Output {
    let enter: String = cgroups
        .iter()
        .map(|c| format!("echo $$ > {}/cgroup.procs && ", c.dir.display()))
        .collect();
    Command::new("sh")
        .args(["-c", &format!("{enter}exec {command}")])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn v1_host() -> bool {
    Path::new("/sys/fs/cgroup/memory/cgroup.procs").exists()
}

#[test]
#[ignore = "root: makes a v1 memory cgroup with a limit"]
fn a_command_under_run_is_oom_killed_by_the_callers_memory_limit_as_alone() {
    assert_root("makes a v1 memory cgroup");
    if !v1_host() {
        eprintln!("no v1 memory hierarchy: the VM tier tests v2");
        return;
    }
    let limited = Below::new("memory", "witness");
    std::fs::write(limited.dir.join("memory.limit_in_bytes"), "268435456").unwrap();
    let python = format!("/usr/bin/python3 -c \"{ALLOC_1_GIB}\"");
    let alone = in_cgroups(&[&limited], &python);
    assert_eq!(alone.status.signal(), Some(9), "alone: {alone:?}");
    let under_run = in_cgroups(&[&limited], &format!("{BIN} run -- {python}"));
    assert_eq!(
        under_run.status.code(),
        Some(137),
        "under run: {}",
        String::from_utf8_lossy(&under_run.stderr)
    );
    let last = json_lines(&under_run.stdout).pop().unwrap();
    let path = last["extensions"]["target"]["cgroup_path"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        path.starts_with(&format!("{}/relay-metrics-run-", limited.path)),
        "run's cgroup {path:?} is not below {}",
        limited.path
    );
}

#[test]
#[ignore = "root: makes v1 cgroups"]
fn run_nests_below_the_callers_path_in_each_hierarchy_and_leaves_cpu_alone() {
    assert_root("makes v1 cgroups");
    if !v1_host() {
        eprintln!("no v1 hierarchies: the VM tier tests v2");
        return;
    }
    // Different paths in different hierarchies, as a caller may have.
    let memory = Below::new("memory", "nest-mem");
    let pids = Below::new("pids", "nest-pids");
    let output = in_cgroups(
        &[&memory, &pids],
        &format!("{BIN} run -- cat /proc/self/cgroup"),
    );
    assert!(output.status.success(), "{output:?}");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = |field: &str| {
        text.lines()
            .find_map(|l| {
                l.split_once(&format!(":{field}:"))
                    .map(|(_, p)| p.to_string())
            })
            .unwrap_or_else(|| panic!("no {field} line in {text}"))
    };
    let memory_path = line("memory");
    let name = memory_path.rsplit('/').next().unwrap().to_string();
    assert!(name.starts_with("relay-metrics-run-"), "{memory_path}");
    assert_eq!(memory_path, format!("{}/{name}", memory.path));
    assert_eq!(line("pids"), format!("{}/{name}", pids.path));
    let cpuacct = own_path("cpuacct");
    assert_eq!(
        line("cpuacct"),
        format!("{}/{name}", cpuacct.trim_end_matches('/'))
    );
    // The command stays in the caller's cpu cgroup: no new peer of the caller's tasks.
    assert_eq!(line("cpu"), own_path("cpu"));
    // run removed what it made.
    assert!(!memory.dir.join(&name).exists());
    assert!(!pids.dir.join(&name).exists());
}
