use super::*;
use crate::source::procfs::{IoCounters, SchedStat};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed and reaped when dropped, also when an assertion fails.
pub(crate) struct Spawned(pub(crate) Child);

impl Spawned {
    pub(crate) fn shell(script: &str) -> Self {
        Self(
            Command::new("sh")
                .args(["-c", script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }

    /// A shell that starts with only stdin, stdout and stderr open: other tests of this binary
    /// create descriptors without close-on-exec now and then (pipes, sockets, a jobserver), and a
    /// child forked at that moment would inherit them.
    fn shell_without_inherited_fds(script: &str) -> Self {
        let mut command = Command::new("sh");
        command
            .args(["-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        // SAFETY: close_range is a plain system call, async-signal-safe; it only marks the
        // child's own descriptors close-on-exec (std's exec-error pipe already is).
        unsafe {
            command.pre_exec(|| {
                if libc::syscall(
                    libc::SYS_close_range,
                    3_u32,
                    u32::MAX,
                    libc::CLOSE_RANGE_CLOEXEC,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Self(command.spawn().unwrap())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Fields of a stat line by proc(5) number, parsed independently of `parse_stat`.
fn stat_fields(pid: &str) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, after_comm) = text.rsplit_once(')').unwrap();
    let mut fields = vec![String::new(), String::new(), String::new()];
    fields.extend(after_comm.split_whitespace().map(str::to_owned));
    fields
}

fn field(fields: &[String], number: usize) -> u64 {
    fields[number].parse().unwrap()
}

fn io_field(pid: &str, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    let line = text
        .lines()
        .find(|line| line.starts_with(&format!("{key}:")))
        .unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Waits until the process has exec'd and settled into sleeping with `threads` threads.
fn wait_sleeping(pid: u32, comm: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let comm_now = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let state = stat_fields(&pid.to_string())[3].clone();
        if comm_now.trim() == comm && state == "S" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "process {pid} never slept as {comm}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn reader(max_held_pids: usize) -> ProcessReader {
    ProcessReader::new(&Roots::host(), max_held_pids).unwrap()
}

#[test]
fn sample_of_a_sleeping_child_equals_an_independent_read() {
    // A sleeping process's counters stay still, so every field can be compared exactly.
    let child = Spawned::shell_without_inherited_fds("exec 3</dev/null 4</dev/null; exec sleep 30");
    wait_sleeping(child.pid(), "sleep");
    let pid = child.pid();
    let mut reader = reader(16);
    let sample = reader.sample(pid, &ProcessFields::ALL).unwrap();
    let fields = stat_fields(&pid.to_string());
    let page_size = page_size_bytes().unwrap();
    assert_eq!(sample.pid, pid);
    assert_eq!(sample.utime_ticks, field(&fields, 14));
    assert_eq!(sample.stime_ticks, field(&fields, 15));
    assert_eq!(sample.num_threads, 1);
    assert_eq!(sample.num_threads, field(&fields, 20));
    assert_eq!(sample.start_time_ticks, field(&fields, 22));
    assert_eq!(sample.vsize_bytes, field(&fields, 23));
    // ALL asks for the exact resident size: statm's, not stat's lagging rss.
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let resident_pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(sample.rss_bytes, resident_pages * page_size);
    let stat_only = reader.sample(pid, &ProcessFields::STAT_ONLY).unwrap();
    assert_eq!(stat_only.rss_bytes, field(&fields, 24) * page_size);
    let p = pid.to_string();
    assert_eq!(
        sample.io,
        Some(IoCounters {
            read_bytes: io_field(&p, "read_bytes"),
            write_bytes: io_field(&p, "write_bytes"),
            read_syscalls: io_field(&p, "syscr"),
            write_syscalls: io_field(&p, "syscw"),
        })
    );
    let schedstat: Vec<u64> = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(
        sample.schedstat,
        Some(SchedStat {
            run_ns: schedstat[0],
            wait_ns: schedstat[1],
        })
    );
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let hwm: u64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(sample.peak_resident_kib, Some(hwm));
    // Private vs shared depends on who else maps the same pages (other tests spawn `sleep` too),
    // so compare with an independent read taken right after, retrying a few times.
    let private_now = || {
        let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap();
        ["Private_Clean:", "Private_Dirty:", "Private_Hugetlb:"]
            .iter()
            .map(|key| {
                text.lines().find(|l| l.starts_with(key)).map_or(0, |l| {
                    l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap()
                })
            })
            .sum::<u64>()
    };
    assert!((0..20).any(|_| {
        let sampled = reader.sample(pid, &ProcessFields::ALL).unwrap().private_kib;
        sampled == Some(private_now())
    }));
    assert!(sample.private_kib.is_some_and(|kib| kib > 0));
    // The script opened two descriptors more than a plain `sleep`. Both start with only 0-2:
    // inheriting what the harness holds at the instant of each fork made the two differ by
    // one when another test had a descriptor open without close-on-exec (seen under load).
    let plain = Spawned::shell_without_inherited_fds("exec sleep 30");
    wait_sleeping(plain.pid(), "sleep");
    let plain_fds = reader
        .sample(plain.pid(), &ProcessFields::ALL)
        .unwrap()
        .open_fd_count
        .unwrap();
    assert_eq!(plain_fds, 3);
    assert_eq!(sample.open_fd_count, Some(plain_fds + 2));
    let listed = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64;
    assert_eq!(sample.open_fd_count, Some(listed));
    // A later sample goes through the held descriptors and must agree.
    let again = reader.sample(pid, &ProcessFields::ALL).unwrap();
    assert_eq!(
        again,
        ProcessSample {
            private_kib: again.private_kib,
            ..sample
        }
    );
}

#[test]
fn sample_of_own_process_lies_between_two_independent_reads() {
    let mut reader = reader(16);
    let pid = std::process::id();
    let fields = ProcessFields {
        private_memory: false,
        ..ProcessFields::ALL
    };
    reader.sample(pid, &fields).unwrap();
    // Burn some CPU so the counters move between the reads.
    let mut x = 0u64;
    for i in 0..5_000_000u64 {
        x = x.wrapping_mul(31).wrapping_add(i);
    }
    std::hint::black_box(x);
    let before = stat_fields("self");
    let io_before = io_field("self", "syscr");
    let sample = reader.sample(pid, &fields).unwrap();
    let after = stat_fields("self");
    let io_after = io_field("self", "syscr");
    assert_eq!(sample.start_time_ticks, field(&before, 22));
    for (number, value) in [(14, sample.utime_ticks), (15, sample.stime_ticks)] {
        assert!(
            (field(&before, number)..=field(&after, number)).contains(&value),
            "field {number}: {value}"
        );
    }
    let io = sample.io.unwrap();
    assert!((io_before..=io_after).contains(&io.read_syscalls));
    assert!(sample.schedstat.unwrap().run_ns > 0);
    assert!(sample.peak_resident_kib.unwrap() * 1024 >= field(&before, 24) * 4096 / 2);
    assert_eq!(sample.private_kib, None, "not requested");
}

#[test]
fn open_fd_count_of_own_process_leaves_out_the_held_descriptors() {
    let mut reader = reader(16);
    let pid = std::process::id();
    let fields = ProcessFields {
        open_fds: true,
        ..ProcessFields::STAT_ONLY
    };
    // Other tests open files concurrently: retry until two listings around the sample agree.
    // read_dir itself holds one descriptor on /proc/self/fd while it lists.
    for _ in 0..50 {
        reader.sample(pid, &fields).unwrap();
        let held_before = crate::source::held::held_descriptors() as u64;
        let count_before = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
        let counted = reader.sample(pid, &fields).unwrap().open_fd_count.unwrap();
        let count_after = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
        let held_after = crate::source::held::held_descriptors() as u64;
        if count_before == count_after && held_before == held_after {
            // This reader holds the proc root, /proc/<pid>, its stat and fd/ at least.
            assert!(held_before >= 4, "{held_before}");
            assert_eq!(counted, count_before - held_before);
            return;
        }
    }
    panic!("the descriptor count of this process never held still");
}

#[test]
fn a_killed_and_reaped_child_is_gone_and_its_handles_are_released() {
    let mut child = Spawned::shell("exec sleep 30");
    let pid = child.pid();
    let mut reader = reader(16);
    reader.sample(pid, &ProcessFields::ALL).unwrap();
    assert_eq!(reader.held_pids(), 1);
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let error = reader.sample(pid, &ProcessFields::ALL).unwrap_err();
    assert!(
        matches!(error, ProcessError::Gone { pid: gone } if gone == pid),
        "{error}"
    );
    assert_eq!(reader.held_pids(), 0);
    assert!(reader.start_time_ticks(pid).unwrap_err().is_gone());
    assert_eq!(reader.held_pids(), 0);
}

#[test]
fn a_zombie_is_sampled_without_its_memory_files() {
    // `sh` forks a child that exits at once and is never reaped while `sh` sleeps.
    let parent = Spawned::shell("true & exec sleep 30");
    let deadline = Instant::now() + Duration::from_secs(10);
    let zombie = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", parent.pid()))
                .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            let pid: u32 = pid.parse().unwrap();
            if stat_fields(&pid.to_string())[3] == "Z" {
                break pid;
            }
        }
        assert!(Instant::now() < deadline, "no zombie appeared");
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut reader = reader(16);
    let sample = reader.sample(zombie, &ProcessFields::ALL).unwrap();
    assert_eq!(
        sample.start_time_ticks,
        field(&stat_fields(&zombie.to_string()), 22)
    );
    assert_eq!(
        sample.private_kib, None,
        "smaps_rollup gives ESRCH for a zombie"
    );
    assert_eq!(sample.peak_resident_kib, None);
    // A zombie has no memory map, so the kernel's ptrace check on its `fd` directory refuses
    // everyone without CAP_SYS_PTRACE, even the zombie's own user: the count is unknown then.
    let expected_fds = nix::unistd::geteuid().is_root().then_some(0);
    assert_eq!(sample.open_fd_count, expected_fds);
    drop(parent);
    // Killing the parent lets init reap the zombie: now it is gone.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{zombie}")).exists() {
        assert!(Instant::now() < deadline, "zombie {zombie} never reaped");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(reader
        .sample(zombie, &ProcessFields::ALL)
        .unwrap_err()
        .is_gone());
}

#[test]
fn the_reader_holds_at_most_max_held_pids_and_reads_the_rest_correctly() {
    let children: Vec<Spawned> = (0..4).map(|_| Spawned::shell("exec sleep 30")).collect();
    let mut reader = reader(2);
    for _ in 0..3 {
        for child in &children {
            let pid = child.pid();
            let sample = reader.sample(pid, &ProcessFields::ALL).unwrap();
            assert_eq!(
                sample.start_time_ticks,
                field(&stat_fields(&pid.to_string()), 22)
            );
            assert!(sample.open_fd_count.is_some());
            assert!(reader.held_pids() <= 2);
        }
    }
    assert_eq!(reader.held_pids(), 2);
    // Directory, six files and fd/ for each held pid.
    assert_eq!(reader.held_descriptors(), 2 * 8);
    let first = children[0].pid();
    reader.retain(|pid| pid == first);
    assert_eq!(reader.held_pids(), 1);
    reader.forget(first);
    assert_eq!(reader.held_pids(), 0);
}

#[test]
fn kernel_thread_has_no_memory_files_but_a_sample() {
    let mut reader = reader(16);
    let sample = reader.sample(2, &ProcessFields::ALL).unwrap();
    assert_eq!(sample.vsize_bytes, 0);
    assert_eq!(sample.private_kib, None);
    assert_eq!(sample.peak_resident_kib, None);
    assert_eq!(sample.open_fd_count, Some(0));
}

#[test]
fn pid_1_io_refused_gives_none_not_an_error_when_refused() {
    // On this machine /proc/1/io answers EACCES even to root (DESIGN §4.7 of the reference).
    let refused = std::fs::read("/proc/1/io").is_err();
    let mut reader = reader(16);
    let sample = reader.sample(1, &ProcessFields::ALL).unwrap();
    assert_eq!(sample.io.is_none(), refused);
    assert_eq!(
        reader.sample(1, &ProcessFields::ALL).unwrap().io.is_none(),
        refused
    );
}

/// A fixture proc root with pid 8458 built from the captured `sleep` files.
fn fixture() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let pid_dir = dir.path().join("proc/8458");
    std::fs::create_dir_all(pid_dir.join("fd")).unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/source/procfs/testdata");
    for name in ["stat", "status", "io", "schedstat", "smaps_rollup"] {
        std::fs::copy(data.join(format!("sleep_{name}")), pid_dir.join(name)).unwrap();
    }
    for fd in ["0", "1", "2"] {
        std::fs::write(pid_dir.join("fd").join(fd), b"").unwrap();
    }
    dir
}

#[test]
fn reads_a_fixture_tree_through_held_descriptors() {
    let dir = fixture();
    let mut reader = ProcessReader::new(&Roots::fixture(dir.path()), 4).unwrap();
    let sample = reader.sample(8458, &ProcessFields::ALL).unwrap();
    let expected = ProcessSample {
        pid: 8458,
        ppid: 8455,
        start_time_ticks: 37904,
        utime_ticks: 0,
        stime_ticks: 0,
        cutime_ticks: Some(0),
        cstime_ticks: Some(0),
        num_threads: 1,
        rss_bytes: 424 * page_size_bytes().unwrap(),
        vsize_bytes: 2_990_080,
        schedstat: Some(SchedStat {
            run_ns: 701_341,
            wait_ns: 687_110,
        }),
        run_time_ns: None,
        peak_resident_kib: Some(1804),
        private_kib: parse::parse_smaps_rollup_private_kib(include_bytes!(
            "../testdata/sleep_smaps_rollup"
        )),
        open_fd_count: Some(3),
        io: Some(IoCounters {
            read_bytes: 0,
            write_bytes: 0,
            read_syscalls: 10,
            write_syscalls: 0,
        }),
    };
    assert_eq!(sample, expected);
    // Unlinked files stay readable through the held descriptors: proof that no reopen happens.
    for name in ["stat", "status", "io", "schedstat", "smaps_rollup"] {
        std::fs::remove_file(dir.path().join("proc/8458").join(name)).unwrap();
    }
    std::fs::remove_file(dir.path().join("proc/8458/fd/2")).unwrap();
    let again = reader.sample(8458, &ProcessFields::ALL).unwrap();
    assert_eq!(
        again,
        ProcessSample {
            open_fd_count: Some(2),
            ..expected
        }
    );
}

#[test]
fn fixture_with_missing_or_malformed_optional_files_gives_none_fields() {
    let dir = fixture();
    let pid_dir = dir.path().join("proc/8458");
    std::fs::remove_file(pid_dir.join("io")).unwrap();
    std::fs::write(pid_dir.join("schedstat"), b"1 2\n").unwrap();
    std::fs::remove_dir_all(pid_dir.join("fd")).unwrap();
    let mut reader = ProcessReader::new(&Roots::fixture(dir.path()), 4).unwrap();
    let sample = reader.sample(8458, &ProcessFields::ALL).unwrap();
    assert_eq!(sample.io, None);
    assert_eq!(sample.schedstat, None);
    assert_eq!(sample.open_fd_count, None);
    assert_eq!(sample.peak_resident_kib, Some(1804));
    assert_eq!(sample.start_time_ticks, 37904);
}

#[test]
fn fixture_errors_on_stat_are_process_errors() {
    let dir = fixture();
    let mut reader = ProcessReader::new(&Roots::fixture(dir.path()), 4).unwrap();
    assert!(reader
        .sample(9999, &ProcessFields::ALL)
        .unwrap_err()
        .is_gone());
    let pid_dir = dir.path().join("proc/8458");
    std::fs::write(pid_dir.join("stat"), b"8458 (sleep) S 1 2 x").unwrap();
    let error = reader.sample(8458, &ProcessFields::ALL).unwrap_err();
    assert!(
        matches!(&error, ProcessError::Failed(SourceError::Malformed { path, .. }) if path.ends_with("8458/stat")),
        "{error}"
    );
    // A stat line about another pid is not this process's.
    std::fs::write(
        pid_dir.join("stat"),
        include_bytes!("../testdata/odd_comm_stat"),
    )
    .unwrap();
    reader.forget(8458);
    assert!(matches!(
        reader.sample(8458, &ProcessFields::STAT_ONLY).unwrap_err(),
        ProcessError::Failed(SourceError::Malformed { .. })
    ));
    // A directory where stat should be: an I/O error that is neither gone nor denied.
    std::fs::remove_file(pid_dir.join("stat")).unwrap();
    std::fs::create_dir(pid_dir.join("stat")).unwrap();
    reader.forget(8458);
    assert!(matches!(
        reader.sample(8458, &ProcessFields::STAT_ONLY).unwrap_err(),
        ProcessError::Failed(SourceError::Io { .. })
    ));
}

#[test]
fn files_of_a_dead_process_cannot_be_opened_through_its_held_directory() {
    // The identity guarantee: once the process is gone, lookups below its held /proc/<pid>
    // directory fail, even if a new process received the same pid.
    let mut child = Spawned::shell("exec sleep 30");
    let proc_dir = OwnedFd::from(File::open("/proc").unwrap());
    let mut files = PidFiles::open(&proc_dir, child.pid()).unwrap();
    open_file_at(&files.dir, b"status").unwrap();
    assert!(files.count_fds(&mut DirentBuffer::default(), true).is_ok());
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let error = open_file_at(&files.dir, b"status").unwrap_err();
    assert!(is_gone(&error), "{error}");
    // The held fd/ directory of the dead process reports it gone too, by size and by listing.
    for size_is_count in [true, false] {
        let error = files
            .count_fds(&mut DirentBuffer::default(), size_is_count)
            .unwrap_err();
        assert!(is_gone(&error), "{error}");
    }
}

#[test]
fn fd_count_from_directory_size_equals_listing() {
    // Linux >= 6.2 reports the count as the size of /proc/<pid>/fd; both ways must agree.
    let child = Spawned::shell("exec 3</dev/null 4</dev/null 5</dev/null; exec sleep 30");
    wait_sleeping(child.pid(), "sleep");
    let proc_dir = OwnedFd::from(File::open("/proc").unwrap());
    let mut files = PidFiles::open(&proc_dir, child.pid()).unwrap();
    let mut dirents = DirentBuffer::default();
    let by_size = files.count_fds(&mut dirents, true).unwrap();
    let by_listing = files.count_fds(&mut dirents, false).unwrap();
    assert_eq!(by_size, by_listing);
    assert!(by_size >= 6);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut version = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = version.next().unwrap().parse().unwrap();
    let minor: u32 = version.next().unwrap().parse().unwrap();
    if (major, minor) >= (6, 2) {
        let fd_dir = files.fd_dir.as_ref().unwrap();
        let size = fstat(fd_dir.as_fd()).unwrap().st_size;
        assert_eq!(
            u64::try_from(size).unwrap(),
            by_size,
            "Linux {release} reports the count as size"
        );
    }
}

#[test]
fn private_memory_follows_the_process_across_exec() {
    // A held smaps_rollup descriptor is bound to the address space of the moment it was opened.
    let mut child = Spawned(
        Command::new("sh")
            .args(["-c", "read line; exec sleep 30"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.pid();
    wait_sleeping(pid, "sh");
    let mut reader = reader(16);
    let fields = ProcessFields {
        private_memory: true,
        ..ProcessFields::STAT_ONLY
    };
    assert!(reader.sample(pid, &fields).unwrap().private_kib.is_some());
    std::io::Write::write_all(child.0.stdin.as_mut().unwrap(), b"go\n").unwrap();
    wait_sleeping(pid, "sleep");
    let after_exec = reader.sample(pid, &fields).unwrap();
    assert!(after_exec.private_kib.is_some(), "{after_exec:?}");
    assert_eq!(
        reader.held_descriptors(),
        3,
        "directory, stat, smaps_rollup"
    );
}

/// A stopped process with four threads: its schedstat must be the sum over its threads, not
/// the main thread's alone.
#[test]
#[ignore = "tools: python3"]
fn schedstat_of_a_multi_threaded_process_sums_its_threads() {
    let child = Spawned(
        Command::new("python3")
            .args([
                "-c",
                "import threading, time\n\
                 def spin():\n    end = time.time() + 0.2\n    while time.time() < end: pass\n    time.sleep(60)\n\
                 [threading.Thread(target=spin).start() for _ in range(3)]\n\
                 time.sleep(60)",
            ])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.pid();
    let threads = || {
        std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while threads() < 4 {
        assert!(
            Instant::now() < deadline,
            "python did not start its threads"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(400));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let independent: (u64, u64) = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|entry| {
            let text = std::fs::read_to_string(entry.unwrap().path().join("schedstat")).unwrap();
            let mut fields = text.split_whitespace().map(|f| f.parse::<u64>().unwrap());
            (fields.next().unwrap(), fields.next().unwrap())
        })
        .fold((0, 0), |(run, wait), (r, w)| (run + r, wait + w));
    let main_thread: u64 = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();

    let sample = reader(4).sample(pid, &ProcessFields::ALL).unwrap();
    let schedstat = sample.schedstat.unwrap();
    assert_eq!(sample.num_threads, 4);
    assert_eq!((schedstat.run_ns, schedstat.wait_ns), independent);
    // The spinning threads ran: the process total exceeds the main thread's own time.
    assert!(
        schedstat.run_ns > main_thread,
        "{} vs main thread {main_thread}",
        schedstat.run_ns
    );
}
