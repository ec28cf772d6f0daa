//! A filesystem that never answers: the test mounts a FUSE filesystem itself (opening
//! `/dev/fuse` and mounting it, as a FUSE daemon does) and then never reads a request, so every
//! `statvfs` of it blocks in the kernel. A snapshot with that path configured must still return,
//! with `null` and a reason for it and values for the others, and the agent must keep sampling
//! and stay live. Closing the device at the end aborts the connection, which releases the
//! blocked calls.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::os::fd::AsRawFd;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A FUSE mount whose requests are never answered; unmounted and aborted when dropped.
struct HungMount {
    dir: tempfile::TempDir,
    device: Option<std::fs::File>,
}

impl HungMount {
    fn new() -> Self {
        common::assert_root("this test mounts a FUSE filesystem");
        let dir = tempfile::tempdir().unwrap();
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .unwrap_or_else(|error| panic!("/dev/fuse (the fuse module): {error}"));
        let options = format!(
            "fd={},rootmode=40000,user_id=0,group_id=0",
            device.as_raw_fd()
        );
        nix::mount::mount(
            Some("relay-metrics-hung"),
            dir.path(),
            Some("fuse"),
            nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
            Some(options.as_str()),
        )
        .unwrap_or_else(|error| panic!("mount fuse on {}: {error}", dir.path().display()));
        Self {
            dir,
            device: Some(device),
        }
    }

    fn path(&self) -> String {
        self.dir.path().display().to_string()
    }
}

impl Drop for HungMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
        // The last descriptor of the connection: closing it aborts every pending request.
        drop(self.device.take());
    }
}

fn config(dir: &tempfile::TempDir, paths: &[&str]) -> String {
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        serde_json::json!({
            "disk": {"filesystem_paths": paths},
            "gpu": {"enabled": false},
            "extensions": {"kernel_events": false}
        })
        .to_string(),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn a_hung_filesystem_gives_null_with_a_reason_and_snapshot_returns() {
    let mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, &[&hung, "/"]);
    let started = Instant::now();
    let mut child = Command::new(common::binary())
        .args(["snapshot", "--scope", "global", "--config", &config])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (sender, output) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut text);
        let _ = sender.send(text);
    });
    let text = output.recv_timeout(Duration::from_secs(30));
    let _ = child.kill();
    let status = child.wait().unwrap();
    let text = text.unwrap_or_else(|_| panic!("snapshot did not return within 30 s"));
    assert!(status.success(), "{status}");
    eprintln!("snapshot took {:?}", started.elapsed());
    let snapshot: Value = serde_json::from_str(&text).unwrap();
    let filesystems = snapshot["disk"]["filesystems"].as_array().unwrap();
    let entry = |path: &str| {
        filesystems
            .iter()
            .find(|f| f["path"] == path)
            .unwrap_or_else(|| panic!("{path} not in {filesystems:?}"))
    };
    assert!(entry(&hung)["total_capacity"].is_null());
    assert!(entry("/")["total_capacity"]["value"].as_u64().unwrap() > 0);
    let reasons = snapshot["extensions"]["unavailable"].as_array().unwrap();
    let reason = reasons
        .iter()
        .find(|r| r["field"] == "disk.filesystems" && r["reason"].as_str().unwrap().contains(&hung))
        .unwrap_or_else(|| panic!("no reason for {hung} in {reasons:?}"));
    assert!(
        reason["reason"]
            .as_str()
            .unwrap()
            .contains("no answer within"),
        "{reason}"
    );
}

#[test]
#[ignore = "root: mounts a FUSE filesystem"]
fn an_agent_with_a_hung_path_keeps_sampling_and_stays_live() {
    let mount = HungMount::new();
    let hung = mount.path();
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir, &["/", &hung]);
    let agent = common::start_agent(&["--scope", "global", "--config", &config]);
    let sequence = |address: &str| -> u64 {
        let snapshot: Value =
            serde_json::from_slice(&common::get(address, "/snapshot").body).unwrap();
        snapshot["extensions"]["collector"]["sequence"]
            .as_u64()
            .unwrap()
    };
    common::wait_ready(&agent.address);
    let first = sequence(&agent.address);
    // Well past three periods (200 ms) and past the first call's deadline.
    std::thread::sleep(Duration::from_secs(3));
    let later = sequence(&agent.address);
    assert!(later >= first + 5, "sampling stalled: {first} -> {later}");
    let health = common::get(&agent.address, "/healthz");
    assert_eq!(health.status, 200, "{}", health.text());
    let metrics = common::get(&agent.address, "/metrics").text();
    assert!(
        metrics.contains("path=\"/\""),
        "the other path's series are missing"
    );
    // The hung path was asked once: it is reported as still pending, not asked again.
    let snapshot: Value =
        serde_json::from_slice(&common::get(&agent.address, "/snapshot").body).unwrap();
    let reasons = snapshot["extensions"]["unavailable"].to_string();
    assert!(reasons.contains("has not returned"), "{reasons}");
}
