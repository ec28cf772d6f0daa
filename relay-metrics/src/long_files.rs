//! Real kernel files longer than one page, made on this machine for the readers' tests. NEEDS
//! ROOT: a network namespace with hundreds of interfaces, a mount namespace with a thousand
//! mounts, a shell with 1,500 children in a cgroup of its own, loop devices. Each is removed
//! when dropped, also when an assertion fails. The oracle the tests compare with is
//! `std::fs::read`, which reads until the end of file.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// One page: the most a record-by-record seq_file hands out per read.
pub(crate) const PAGE: usize = 4096;

/// A name unique to this test process and call.
fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program)
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// A child that printed `ready` on its stdout, then sleeps until killed.
fn start_holder(mut command: Command) -> (Child, BufReader<ChildStdout>) {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("holder's first line");
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        panic!("holder {command:?} failed: {line:?}");
    }
    (child, stdout)
}

fn end(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// A network namespace with `count` interfaces (veth pairs: this kernel has no `dummy` driver)
/// besides `lo`, and a process in it: its `/proc/<pid>/net/dev` is the namespace's
/// `/proc/net/dev`.
pub(crate) struct Interfaces {
    name: String,
    holder: Child,
}

impl Interfaces {
    pub(crate) fn new(count: usize) -> Self {
        let name = unique("relay-long");
        run("ip", &["netns", "add", &name]);
        let mut batch = tempfile::NamedTempFile::new().expect("batch file");
        assert!(count.is_multiple_of(2), "interfaces come in pairs");
        for i in 0..count / 2 {
            writeln!(batch, "link add a{i} type veth peer name b{i}").expect("batch line");
        }
        let made = Command::new("ip")
            .args(["-n", &name, "-batch"])
            .arg(batch.path())
            .status();
        let mut holder = Command::new("ip");
        holder.args([
            "netns",
            "exec",
            &name,
            "sh",
            "-c",
            "echo ready; exec sleep 600",
        ]);
        if !made.is_ok_and(|s| s.success()) {
            run("ip", &["netns", "del", &name]);
            panic!("adding {count} veth interfaces in {name} failed");
        }
        let (holder, _) = start_holder(holder);
        Self { name, holder }
    }

    /// `/proc/<pid>` of the process in the namespace.
    pub(crate) fn proc_dir(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}", self.holder.id()))
    }
}

impl Drop for Interfaces {
    fn drop(&mut self) {
        end(&mut self.holder);
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A process in a mount namespace of its own that mounted `count` tmpfs on one directory and
/// then mounted the v1 `pids` hierarchy again, so that hierarchy's line is the last of its
/// `mountinfo`, far past the first page.
pub(crate) struct Mounts {
    holder: Child,
}

impl Mounts {
    pub(crate) fn new(count: usize) -> Self {
        let script = format!(
            "set -e; i=0; while [ $i -lt {count} ]; do mount -t tmpfs -o size=4k relay-long /mnt; i=$((i+1)); done; \
             umount /sys/fs/cgroup/pids; mount -t cgroup -o pids cgroup /sys/fs/cgroup/pids; \
             echo ready; exec sleep 600"
        );
        let mut command = Command::new("unshare");
        command.args(["-m", "--propagation", "private", "sh", "-c", &script]);
        let (holder, _) = start_holder(command);
        Self { holder }
    }

    pub(crate) fn proc_dir(&self) -> PathBuf {
        PathBuf::from(format!("/proc/{}", self.holder.id()))
    }
}

impl Drop for Mounts {
    fn drop(&mut self) {
        end(&mut self.holder);
    }
}

/// A v1 `pids` cgroup of this test holding a shell and its `count` sleeping children: the
/// cgroup's `cgroup.procs` and the shell's `task/<pid>/children` are both many pages long.
pub(crate) struct Sleepers {
    pub(crate) cgroup: PathBuf,
    shell: Child,
}

impl Sleepers {
    pub(crate) fn new(count: usize) -> Self {
        let cgroup = Path::new("/sys/fs/cgroup/pids").join(unique("relay-long"));
        fs::create_dir(&cgroup).unwrap_or_else(|e| panic!("{}: {e}", cgroup.display()));
        let procs = cgroup.join("cgroup.procs");
        let script = format!(
            "echo $$ > {procs} || exit 1; i=0; while [ $i -lt {count} ]; do sleep 600 & i=$((i+1)); done; \
             echo ready; wait",
            procs = procs.display()
        );
        let mut command = Command::new("sh");
        command.args(["-c", &script]);
        let (shell, _) = start_holder(command);
        Self { cgroup, shell }
    }

    pub(crate) fn shell_pid(&self) -> u32 {
        self.shell.id()
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        // The children first (they are in the cgroup), then the shell, then the cgroup.
        let _ = Command::new("pkill")
            .args(["-KILL", "-P", &self.shell.id().to_string()])
            .status();
        end(&mut self.shell);
        for _ in 0..200 {
            if fs::remove_dir(&self.cgroup).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("cleanup: {} not removed", self.cgroup.display());
    }
}

/// `count` loop devices over small files, detached when dropped.
pub(crate) struct LoopDevices {
    pub(crate) devices: Vec<String>,
    _dir: tempfile::TempDir,
}

impl LoopDevices {
    pub(crate) fn new(count: usize) -> Self {
        let mut made = Self {
            devices: Vec::new(),
            _dir: tempfile::tempdir().expect("temp dir"),
        };
        for i in 0..count {
            let file = made._dir.path().join(format!("disk{i}"));
            fs::write(&file, vec![0u8; 1 << 20]).expect("backing file");
            let out = Command::new("losetup")
                .args(["--find", "--show"])
                .arg(&file)
                .output()
                .expect("losetup");
            assert!(out.status.success(), "losetup: {out:?}");
            made.devices
                .push(String::from_utf8_lossy(&out.stdout).trim().to_string());
        }
        made
    }
}

impl Drop for LoopDevices {
    fn drop(&mut self) {
        for device in &self.devices {
            let _ = Command::new("losetup").args(["-d", device]).status();
        }
    }
}
