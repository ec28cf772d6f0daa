use super::*;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

#[test]
fn drm_device_numbers_are_major_226_with_any_minor() {
    assert_eq!(drm_device_minor(libc::makedev(226, 0)), Some(0));
    assert_eq!(drm_device_minor(libc::makedev(226, 128)), Some(128));
    assert_eq!(drm_device_minor(libc::makedev(226, 1 << 12)), Some(1 << 12));
    assert_eq!(drm_device_minor(libc::makedev(1, 3)), None, "/dev/null");
    assert_eq!(drm_device_minor(libc::makedev(136, 0)), None, "/dev/pts/0");
}

#[test]
fn the_device_number_check_ignores_non_drm_descriptors() {
    let file = tempfile::tempfile().unwrap();
    let null = std::fs::File::open("/dev/null").unwrap();
    let (read, _write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
    // Under /dev/ but a regular file (tmpfs): stat'ed, and not a device.
    let shm = tempfile::tempfile_in("/dev/shm").unwrap();
    for fd in [
        file.as_raw_fd(),
        null.as_raw_fd(),
        read.as_raw_fd(),
        shm.as_raw_fd(),
    ] {
        let link = PathBuf::from(format!("/proc/self/fd/{fd}"));
        assert_eq!(DrmFdCheck::DeviceNumber.drm_minor(&link), None, "{fd}");
    }
    assert_eq!(
        DrmFdCheck::DeviceNumber.drm_minor(Path::new("/proc/self/fd/999999")),
        None
    );
}

#[test]
fn link_names_of_dri_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let link = |name: &str, target: &str| {
        let path = dir.path().join(name);
        symlink(target, &path).unwrap();
        DrmFdCheck::LinkName.drm_minor(&path)
    };
    assert_eq!(link("a", "/dev/dri/renderD128"), Some(128));
    assert_eq!(link("b", "/dev/dri/card1"), Some(1));
    assert_eq!(link("c", "/dev/dri/by-path"), None);
    assert_eq!(link("d", "/dev/dri/card"), None);
    assert_eq!(link("e", "/dev/null"), None);
    assert_eq!(link("f", "socket:[1234]"), None);
}

use std::os::fd::AsRawFd;

/// A `/proc` tree in a temporary directory.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        // A DRM device: without one a scan walks no process.
        std::fs::create_dir_all(dir.path().join("sys/class/drm/renderD128")).unwrap();
        Self { dir }
    }

    fn roots(&self) -> Roots {
        Roots::fixture(self.dir.path())
    }

    fn process(&self, pid: u32, start_ticks: u64) {
        let proc = self.dir.path().join(format!("proc/{pid}"));
        std::fs::create_dir_all(proc.join("fd")).unwrap();
        std::fs::create_dir_all(proc.join("fdinfo")).unwrap();
        std::fs::write(
            proc.join("stat"),
            format!("{pid} (gpu app) S 1 {pid} {pid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 {start_ticks} 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n"),
        )
        .unwrap();
    }

    fn fd(&self, pid: u32, fd: u32, target: &str, fdinfo: &str) {
        let proc = self.dir.path().join(format!("proc/{pid}"));
        let link = proc.join(format!("fd/{fd}"));
        let _ = std::fs::remove_file(&link);
        symlink(target, link).unwrap();
        std::fs::write(proc.join(format!("fdinfo/{fd}")), fdinfo).unwrap();
    }
}

fn xe(client: u64, cycles: u64, total: u64, resident: &str) -> String {
    format!("pos:\t0\nflags:\t02080002\ndrm-driver:\txe\ndrm-client-id:\t{client}\ndrm-pdev:\t0000:00:02.0\ndrm-resident-system:\t{resident}\ndrm-cycles-rcs:\t{cycles}\ndrm-total-cycles-rcs:\t{total}\n")
}

fn scan(scanner: &mut DrmClientScanner) -> Vec<DrmProcessSample> {
    let mut out = Vec::new();
    scanner.scan(&mut out).unwrap();
    out
}

#[test]
fn scans_clients_once_each_and_pairs_them_across_scans() {
    let tree = Tree::new();
    tree.process(300, 5000);
    // Two descriptors of one client (dup), a second client, a non-DRM fd and a nouveau client.
    tree.fd(300, 3, "/dev/dri/renderD128", &xe(7, 1000, 10_000, "4 MiB"));
    tree.fd(300, 4, "/dev/dri/renderD128", &xe(7, 1000, 10_000, "4 MiB"));
    tree.fd(300, 5, "/dev/dri/card0", &xe(8, 0, 10_000, "4096"));
    tree.fd(300, 6, "/dev/null", &xe(9, 0, 1, "1 MiB"));
    tree.fd(
        300,
        7,
        "/dev/dri/renderD129",
        "drm-driver:\tnouveau\ndrm-client-id:\t3\ndrm-resident-vram:\t1 MiB\n",
    );
    tree.process(301, 6000);
    tree.fd(301, 0, "/dev/pts/0", "pos:\t0\nflags:\t02\n");
    let mut scanner = DrmClientScanner::new(&tree.roots(), DrmFdCheck::LinkName, &[]);
    let first = scan(&mut scanner);
    assert_eq!(
        first,
        vec![DrmProcessSample {
            vendor: DrmVendor::Intel,
            identifier: "0000:00:02.0".into(),
            pid: 300,
            start_time_ticks: 5000,
            memory_used_bytes: Some(4 * 1024 * 1024 + 4096),
            utilization_percent: None,
        }]
    );

    // Client 7 ran 1000 of 4000 cycles, client 8 500 of 4000: 25 % + 12.5 %.
    tree.fd(300, 3, "/dev/dri/renderD128", &xe(7, 2000, 14_000, "4 MiB"));
    tree.fd(300, 4, "/dev/dri/renderD128", &xe(7, 2000, 14_000, "4 MiB"));
    tree.fd(300, 5, "/dev/dri/card0", &xe(8, 500, 14_000, "4096"));
    let second = scan(&mut scanner);
    assert_eq!(second[0].utilization_percent, Some(37.5));

    // The pid is reused by another process (new start time): no pairing with the old counters.
    tree.process(300, 9000);
    tree.fd(300, 3, "/dev/dri/renderD128", &xe(7, 3000, 18_000, "4 MiB"));
    assert_eq!(scan(&mut scanner)[0].utilization_percent, None);
}

#[test]
fn vendors_selectors_and_devices_without_pdev() {
    let tree = Tree::new();
    tree.process(10, 1);
    tree.fd(
        10,
        3,
        "/dev/dri/renderD128",
        "drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\t0000:03:00.0\ndrm-engine-gfx:\t5 ns\n",
    );
    tree.fd(
        10,
        4,
        "/dev/dri/renderD130",
        "drm-driver:\tpanfrost\ndrm-client-id:\t2\ndrm-engine-fragment:\t5 ns\n",
    );
    // The sysfs node of minor 129 leads to its PCI device.
    let pci = tree.dir.path().join("sys/devices/pci0000:00/0000:00:02.0");
    std::fs::create_dir_all(&pci).unwrap();
    std::fs::create_dir_all(tree.dir.path().join("sys/dev/char/226:129")).unwrap();
    symlink(&pci, tree.dir.path().join("sys/dev/char/226:129/device")).unwrap();
    tree.fd(
        10,
        5,
        "/dev/dri/renderD129",
        "drm-driver:\ti915\ndrm-client-id:\t3\ndrm-engine-render:\t5 ns\n",
    );

    let mut scanner = DrmClientScanner::new(&tree.roots(), DrmFdCheck::LinkName, &[]);
    let records: Vec<(DrmVendor, String)> = scan(&mut scanner)
        .into_iter()
        .map(|r| (r.vendor, r.identifier))
        .collect();
    assert_eq!(
        records,
        vec![
            (DrmVendor::Intel, "0000:00:02.0".to_string()),
            (DrmVendor::Amd, "0000:03:00.0".to_string()),
            (DrmVendor::Other, "drm-minor-130".to_string()),
        ]
    );
    let selected = ["0000:03:00.0".to_string(), "0".to_string()];
    let mut scanner = DrmClientScanner::new(&tree.roots(), DrmFdCheck::LinkName, &selected);
    let records = scan(&mut scanner);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].identifier, "0000:03:00.0");
    assert_eq!(records[0].memory_used_bytes, None, "no resident keys");
}

#[test]
fn a_missing_proc_is_an_error_and_vanishing_processes_are_not() {
    let tree = Tree::new();
    tree.process(10, 1);
    tree.fd(10, 3, "/dev/dri/renderD128", &xe(1, 0, 1, "1 KiB"));
    // A process without a readable stat (it exited between the fd and stat reads) is skipped.
    std::fs::remove_file(tree.dir.path().join("proc/10/stat")).unwrap();
    tree.process(11, 1);
    std::fs::remove_dir_all(tree.dir.path().join("proc/11/fd")).unwrap();
    let mut scanner = DrmClientScanner::new(&tree.roots(), DrmFdCheck::LinkName, &[]);
    assert_eq!(scan(&mut scanner), vec![]);
    // A DRM device but no /proc.
    let gone = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(gone.path().join("sys/class/drm/card0")).unwrap();
    let mut scanner =
        DrmClientScanner::new(&Roots::fixture(gone.path()), DrmFdCheck::LinkName, &[]);
    assert!(scanner.scan(&mut Vec::new()).is_err());
}

#[test]
fn without_a_drm_device_no_process_is_walked() {
    let tree = Tree::new();
    tree.process(10, 1);
    tree.fd(10, 3, "/dev/dri/renderD128", &xe(1, 0, 1, "1 KiB"));
    let mut scanner = DrmClientScanner::new(&tree.roots(), DrmFdCheck::LinkName, &[]);
    assert_eq!(
        scan(&mut scanner).len(),
        1,
        "with renderD128 in /sys/class/drm"
    );
    // Connectors and other entries are not devices.
    let class = tree.dir.path().join("sys/class/drm");
    std::fs::remove_dir(class.join("renderD128")).unwrap();
    for other in ["card0-DP-1", "version", "card", "renderDx"] {
        std::fs::create_dir(class.join(other)).unwrap();
    }
    assert_eq!(scan(&mut scanner), vec![]);
    // Not even /proc is read: its absence is no error then.
    let bare = tempfile::tempdir().unwrap();
    let mut scanner =
        DrmClientScanner::new(&Roots::fixture(bare.path()), DrmFdCheck::LinkName, &[]);
    assert!(scanner.scan(&mut Vec::new()).is_ok());
    // A device that appears is seen at the next scan.
    std::fs::create_dir(class.join("card1")).unwrap();
    let mut scanner = DrmClientScanner::new(&tree.roots(), DrmFdCheck::LinkName, &[]);
    assert_eq!(scan(&mut scanner).len(), 1);
}

#[test]
fn the_live_scan_of_this_machine_reads_without_error() {
    // With a DRM device every process's fds are walked without failing; without one (this
    // machine) nothing is walked and nothing found.
    let mut scanner = DrmClientScanner::new(&Roots::host(), DrmFdCheck::DeviceNumber, &[]);
    let mut out = Vec::new();
    scanner.scan(&mut out).unwrap();
    if !Path::new("/dev/dri").exists() {
        assert_eq!(out, vec![]);
    }
}
