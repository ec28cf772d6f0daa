//! The loader child's path: errors that come back, a child that dies or cannot start, and the
//! whole handover as root.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::source::ebpf::spawn::LOADER_TIMEOUT;
use crate::source::ebpf::tests::{held_shell, release_and_wait};
use crate::source::ebpf::{EbpfOptions, EbpfSource};

/// The loader child's body, when this test binary runs as one (`crate::test_children`);
/// returns at once without the loader's environment.
pub(crate) fn run_child_if_requested() {
    serve_if_child();
}

/// This test binary, re-run as a loader child (see [`run_child_if_requested`]).
pub(in crate::source::ebpf) fn test_loader() -> LoaderCommand {
    LoaderCommand {
        program: std::env::current_exe().expect("test binary path"),
        args: Vec::new(),
        arg0: None,
        timeout: LOADER_TIMEOUT,
    }
}

/// `sh -c SCRIPT` as a loader, with the socket on its stdin.
fn shell_loader(script: &str, timeout: Duration) -> LoaderCommand {
    LoaderCommand {
        program: PathBuf::from("/bin/sh"),
        args: ["-c", script].map(OsString::from).to_vec(),
        arg0: None,
        timeout,
    }
}

/// A fixture root whose `proc/self/status` shows the effective capabilities `cap_eff` (hex).
pub(in crate::source::ebpf) fn fixture(cap_eff: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("proc/self")).expect("mkdir");
    std::fs::write(
        dir.path().join("proc/self/status"),
        format!("Name:\tx\nCapEff:\t{cap_eff}\n"),
    )
    .expect("status");
    dir
}

#[test]
fn a_missing_tracefs_comes_back_from_the_child_as_in_process() {
    // Privileged according to the fixture, which has no sys/kernel/tracing: the child fails
    // to mount tracefs there.
    let dir = fixture("000001ffffffffff");
    let options = EbpfOptions {
        roots: Roots::fixture(dir.path()),
        ..EbpfOptions::default()
    };
    let in_process = EbpfSource::load_via(&options, None).expect_err("no tracefs");
    let outcome = load_in_child(&options.roots, false, &test_loader());
    let ChildOutcome::Failed(from_child) = outcome else {
        panic!("the child's error did not come back as an error");
    };
    assert!(
        matches!(from_child, EbpfUnavailable::NoTracefs { .. }),
        "{from_child}"
    );
    assert_eq!(from_child.to_string(), in_process.to_string());
    assert!(
        from_child.to_string().contains("sys/kernel/tracing"),
        "{from_child}"
    );
    // Through the public path too.
    let error = EbpfSource::load_via(&options, Some(&test_loader())).expect_err("must not load");
    assert_eq!(error.to_string(), in_process.to_string());
}

#[test]
fn an_unprivileged_process_starts_no_child() {
    let dir = fixture("0000000000000000");
    let options = EbpfOptions {
        roots: Roots::fixture(dir.path()),
        ..EbpfOptions::default()
    };
    let missing = LoaderCommand {
        program: dir.path().join("no-such-loader"),
        args: Vec::new(),
        arg0: None,
        timeout: LOADER_TIMEOUT,
    };
    let error = EbpfSource::load_via(&options, Some(&missing)).expect_err("must not load");
    assert!(
        matches!(error, EbpfUnavailable::NotPrivileged { cap_eff: 0, .. }),
        "{error}"
    );
}

#[test]
fn a_loader_that_cannot_start_means_loading_in_process() {
    let dir = fixture("000001ffffffffff");
    let missing = LoaderCommand {
        program: dir.path().join("no-such-loader"),
        args: Vec::new(),
        arg0: None,
        timeout: LOADER_TIMEOUT,
    };
    let ChildOutcome::InProcess(why) = load_in_child(&Roots::fixture(dir.path()), false, &missing)
    else {
        panic!("a missing loader must mean loading in-process");
    };
    assert!(why.contains("no-such-loader"), "{why}");
}

#[test]
fn a_child_that_dies_is_reported() {
    let dir = fixture("000001ffffffffff");
    let dies = LoaderCommand {
        program: PathBuf::from("/bin/sh"),
        args: ["-c", "kill -KILL $$"].map(OsString::from).to_vec(),
        arg0: None,
        timeout: LOADER_TIMEOUT,
    };
    let ChildOutcome::Failed(error) = load_in_child(&Roots::fixture(dir.path()), false, &dies)
    else {
        panic!("a dead loader must be an error");
    };
    let text = error.to_string();
    assert!(text.contains("signal: 9"), "{text}");
    assert!(text.contains("before handing"), "{text}");
}

#[test]
fn a_child_that_hands_nothing_over_in_time_is_killed() {
    let dir = fixture("000001ffffffffff");
    let started = Instant::now();
    let silent = shell_loader("exec sleep 30", Duration::from_millis(300));
    let ChildOutcome::Failed(error) = load_in_child(&Roots::fixture(dir.path()), false, &silent)
    else {
        panic!("a silent loader must be an error");
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited for the child"
    );
    let text = error.to_string();
    assert!(text.contains("signal: 9"), "killed: {text}");
    assert!(text.contains("in time"), "{text}");
}

#[test]
fn a_child_that_sends_too_much_is_cut_off_not_waited_for() {
    let dir = fixture("000001ffffffffff");
    // Far more than the report limit; the child would block on a full socket for ever.
    let flood = shell_loader("head -c 40000000 /dev/zero >&0", LOADER_TIMEOUT);
    let started = Instant::now();
    let ChildOutcome::Failed(error) = load_in_child(&Roots::fixture(dir.path()), false, &flood)
    else {
        panic!("a flooding loader must be an error");
    };
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited for the child"
    );
    assert!(
        error.to_string().contains("bytes from the loader"),
        "{error}"
    );
}

#[test]
fn a_loader_that_is_not_this_program_means_loading_in_process() {
    let dir = fixture("000001ffffffffff");
    // A wrapper (ld.so, valgrind) behind /proc/self/exe exits on the loader's arguments (its
    // message would go to the shared stderr, where the VM tier matches libtest's lines).
    let wrapper = shell_loader("exit 1", LOADER_TIMEOUT);
    let ChildOutcome::InProcess(why) = load_in_child(&Roots::fixture(dir.path()), false, &wrapper)
    else {
        panic!("a loader that is not ours must mean loading in-process");
    };
    assert!(why.contains("exit status: 1"), "{why}");
    assert!(why.contains("no report"), "{why}");
}

/// Loads the programs through the test loader child, holding the eBPF tests' lock (as root).
fn load_through_the_child_as_root() -> (std::sync::MutexGuard<'static, ()>, EbpfSource) {
    let serial = crate::source::ebpf::tests::SERIAL
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    assert!(
        nix::unistd::geteuid().is_root(),
        "this eBPF test needs root (CAP_BPF, tracefs); run it as root as CI does"
    );
    let source = EbpfSource::load_via(&EbpfOptions::default(), Some(&test_loader()))
        .expect("loading through the child");
    (serial, source)
}

/// The whole path as root: the child loads and attaches, this process reads and writes the
/// maps it handed over, the programs outlive the child, and dropping the source detaches and
/// unloads them.
#[test]
#[ignore = "root: the loader child loads eBPF programs (CAP_BPF, tracefs)"]
fn loads_in_a_child_counts_and_detaches_on_drop_as_root() {
    let (_serial, mut source) = load_through_the_child_as_root();
    let LoadedBy::ChildProcess { pid } = *source.loaded_by() else {
        panic!("loaded in-process: {:?}", source.loaded_by());
    };
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "the loader child {pid} is gone"
    );
    assert!(source
        .status()
        .iter()
        .all(|s| s.state == ProgramState::Attached));
    assert!(source.tgids.is_some() && source.cgroups.is_some());
    assert!(source.created_by.is_some() && source.oom_events.is_some());
    // The handed-over map descriptors can be mapped like the ones of an in-process load.
    assert!(source.counters_mapped());
    assert_eq!(source.drain_oom_victims(), 0);

    let mut shell = held_shell("for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done");
    let root = shell.id();
    let before = source.global().expect("GLOBAL").processes_created;
    let scope = source.track_tree(&[root]).expect("tracking the tree");
    release_and_wait(&mut shell);
    let mut counters = crate::source::ebpf::EbpfCounters::default();
    source
        .scope_counters(scope, &mut counters)
        .expect("reading counters");
    assert!(counters.processes_created >= 10, "{counters:?}");
    assert!(counters.processes_exited >= 10, "{counters:?}");
    let after = source.global().expect("GLOBAL").processes_created;
    assert!(after >= before + 10, "{before} -> {after}");
    source.untrack(scope).expect("untrack");

    crate::source::ebpf::tests::assert_drop_unloads_every_program(source);
}

#[test]
#[ignore = "root: the loader child loads eBPF programs (CAP_BPF, tracefs)"]
fn dropping_hands_the_links_to_a_detaching_child_as_root() {
    let (_serial, mut source) = load_through_the_child_as_root();
    let ids: Vec<u32> = source.program_run_stats().iter().map(|p| p.id).collect();
    let our_links = || -> Vec<u32> {
        std::fs::read_dir("/proc/self/fdinfo")
            .expect("fdinfo")
            .filter_map(|entry| std::fs::read(entry.ok()?.path()).ok())
            .filter_map(|fdinfo| fds::link_program_id(&fdinfo))
            .filter(|id| ids.contains(id))
            .collect()
    };
    assert_eq!(our_links().len(), ids.len(), "one link per program before");

    let pid = source
        .attachment
        .detach()
        .expect("handed to a detaching child");
    assert!(
        our_links().is_empty(),
        "our link descriptors are closed at once"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(
            Instant::now() < deadline,
            "the detaching child {pid} is still there after 10 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Dropping now has nothing left to detach, and unloads every program.
    crate::source::ebpf::tests::assert_drop_unloads_every_program(source);
}

#[test]
fn the_configuration_survives_its_bytes() {
    let mut config = Config::unavailable();
    config.newtask_pid = 8;
    config.sleep_state_mask = 0x1234_5678_9abc;
    assert_eq!(config_from_bytes(&config_bytes(&config)), Some(config));
    assert_eq!(config_from_bytes(&[0; 47]), None);
}
