//! NEEDS ROOT: a real network namespace with a veth pair to the host, processes in it in v1
//! cgroups of their own, known traffic, and the counters of the measured cgroups against
//! whole-file reads of the namespace's `/proc/<pid>/net/dev` taken right before and after.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use super::super::*;
use crate::snapshot::TargetNetwork;
use crate::source::net::{parse_net_dev, InterfaceCounters};

fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status().unwrap();
    assert!(status.success(), "{program} {args:?}: {status}");
}

/// The namespace, its veth pair (`rmh<n>` on the host, `rmn<n>` inside), the cgroups and
/// their processes; all removed when dropped.
struct Setup {
    netns: String,
    host_link: String,
    cgroup: PathBuf,
    children: Vec<Child>,
}

impl Setup {
    fn new() -> Self {
        let n = std::process::id() % 10_000;
        let setup = Self {
            netns: format!("relay-net-{n}"),
            host_link: format!("rmh{n}"),
            cgroup: PathBuf::from(format!("/sys/fs/cgroup/memory/relay-net-{n}")),
            children: Vec::new(),
        };
        let (ns, host, inside) = (&setup.netns, &setup.host_link, format!("rmn{n}"));
        run("ip", &["netns", "add", ns]);
        run(
            "ip",
            &[
                "link", "add", host, "type", "veth", "peer", "name", &inside, "netns", ns,
            ],
        );
        run("ip", &["addr", "add", "10.231.7.1/30", "dev", host]);
        run("ip", &["link", "set", host, "up"]);
        for args in [
            vec!["addr", "add", "10.231.7.2/30", "dev", &inside],
            vec!["link", "set", &inside, "up"],
            vec!["link", "set", "lo", "up"],
        ] {
            let mut all = vec!["-n", ns.as_str()];
            all.extend(args);
            run("ip", &all);
        }
        std::fs::create_dir_all(setup.cgroup.join("pod/b")).unwrap();
        std::fs::create_dir_all(setup.cgroup.join("host")).unwrap();
        setup
    }

    /// A sleeping process in cgroup `sub`, inside the namespace or not. Moved by the test
    /// (`ip netns exec` gives its command a view of `/sys` without the cgroup mounts).
    fn start(&mut self, sub: &str, in_netns: bool) -> u32 {
        let mut command = Command::new("ip");
        if in_netns {
            command.args(["netns", "exec", &self.netns, "sleep", "600"]);
        } else {
            command = Command::new("sleep");
            command.arg("600");
        }
        let child = command.stdin(Stdio::null()).spawn().unwrap();
        let pid = child.id();
        self.children.push(child);
        let procs = self.cgroup.join(sub).join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).unwrap();
        // In its namespace once `ip` has become `sleep`.
        for _ in 0..200 {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sleep" {
                return pid;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("process {pid} did not start sleep");
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for dir in [
            self.cgroup.join("pod/b"),
            self.cgroup.join("pod"),
            self.cgroup.join("host"),
            self.cgroup.clone(),
        ] {
            for _ in 0..100 {
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_link])
            .status();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .status();
    }
}

/// The namespace's counters, the whole file read by `std::fs::read` (the oracle).
fn oracle(pid: u32) -> Vec<InterfaceCounters> {
    let bytes = std::fs::read(format!("/proc/{pid}/net/dev")).unwrap();
    let mut out = Vec::new();
    parse_net_dev(&bytes, &mut out).unwrap();
    out
}

/// Each of our counters lies between the oracle's before and after.
fn bracketed(ours: &TargetNetwork, before: &[InterfaceCounters], after: &[InterfaceCounters]) {
    let names: Vec<&str> = ours.interfaces.iter().map(|i| &*i.name).collect();
    let expected: Vec<&str> = after.iter().map(|i| &*i.name).collect();
    assert_eq!(names, expected);
    for ((ours, before), after) in ours.interfaces.iter().zip(before).zip(after) {
        let (b, a) = (before.counts, after.counts);
        let pairs = [
            (ours.receive_bytes, b.rx_bytes, a.rx_bytes),
            (ours.transmit_bytes, b.tx_bytes, a.tx_bytes),
            (ours.receive_packets, b.rx_packets, a.rx_packets),
            (ours.transmit_packets, b.tx_packets, a.tx_packets),
            (ours.receive_errors, b.rx_errors, a.rx_errors),
            (ours.transmit_errors, b.tx_errors, a.tx_errors),
            (ours.receive_dropped, b.rx_dropped, a.rx_dropped),
            (ours.transmit_dropped, b.tx_dropped, a.tx_dropped),
        ];
        for (value, low, high) in pairs {
            let (value, low, high) = (value.unwrap(), low.unwrap(), high.unwrap());
            assert!(
                low <= value && value <= high,
                "{}: {low} <= {value} <= {high}",
                ours.name
            );
        }
    }
}

/// Known traffic: 5 datagrams of 1,000 bytes out of the namespace, 5 into it.
fn send_traffic(netns: &str) {
    let send = "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); \
                [s.sendto(b'x' * 1000, (sys.argv[1], 9)) for _ in range(5)]";
    run(
        "ip",
        &["netns", "exec", netns, "python3", "-c", send, "10.231.7.1"],
    );
    run("python3", &["-c", send, "10.231.7.2"]);
    // Past the neighbour resolution the datagrams waited for.
    std::thread::sleep(std::time::Duration::from_millis(500));
}

#[test]
#[ignore = "root: makes a network namespace, a veth pair and v1 cgroups"]
fn measured_cgroups_report_their_namespaces_counters_read_once() {
    assert!(nix::unistd::geteuid().is_root(), "run as root");
    let mut setup = Setup::new();
    let name = setup
        .cgroup
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let a = setup.start("pod", true);
    let b = setup.start("pod/b", true);
    setup.start("host", false);
    let mut config = ResourceMetricsConfig::default();
    config.extensions.cgroups = vec![format!("/{name}"), format!("/{name}/**")];
    let roots = Roots::host();
    let layout = CgroupLayout::discover(&roots).unwrap();
    let mut set = TargetSet::new(&config, &roots, Some(&layout))
        .unwrap()
        .unwrap();
    let mut out = Targets::default();
    let inside = format!("rmn{}", std::process::id() % 10_000);
    let mut first: Option<(u64, u64)> = None;
    // The first round places the processes by a `stat` each, the second by the namespaces the
    // task iterator's records carry.
    let mut iter = crate::source::task_iter::TaskIter::load(&roots, false).unwrap();
    let mut records = Vec::new();
    for round in 0..2 {
        if round == 1 {
            send_traffic(&setup.netns);
            iter.read(&mut records).unwrap();
        }
        let reads = set.network.as_ref().unwrap().reads;
        let by_stat = set.network.as_ref().unwrap().placed_by_stat;
        let before = oracle(a);
        set.fill(
            None,
            (round == 1).then_some(&records[..]),
            None,
            100,
            None,
            &mut out,
        );
        let after = oracle(b);
        assert_eq!(
            set.network.as_ref().unwrap().placed_by_stat - by_stat,
            if round == 1 { 0 } else { 3 },
            "processes placed by a stat in round {round}"
        );
        // Both measured cgroups of the namespace (two processes, two targets): one read.
        assert_eq!(
            set.network.as_ref().unwrap().reads,
            reads + 1,
            "{:?}",
            out.reasons
        );
        let report = |path: String| {
            out.cgroups
                .iter()
                .find(|c| *c.cgroup == *path)
                .unwrap_or_else(|| panic!("{path}: {} {:?}", out.hierarchy, out.cgroups))
        };
        let pod = report(format!("/{name}/pod"));
        let network = pod.network.as_ref().expect("the namespace's counters");
        bracketed(network, &before, &after);
        assert_eq!(
            report(format!("/{name}/pod/b")).network.as_ref(),
            Some(network)
        );
        // A cgroup of the node's namespace reports none (its interfaces are the node's), nor
        // does one holding both.
        assert_eq!(report(format!("/{name}/host")).network, None);
        assert_eq!(report(format!("/{name}")).network, None);
        let veth = network
            .interfaces
            .iter()
            .find(|i| i.name == inside)
            .unwrap();
        let now = (veth.transmit_bytes.unwrap(), veth.receive_bytes.unwrap());
        if let Some(first) = first.replace(now) {
            // Each datagram: 1,000 bytes of data, 8 of UDP, 20 of IP, 14 of Ethernet.
            assert!(now.0 - first.0 >= 5 * 1042, "{first:?} then {veth:?}");
            assert!(now.1 - first.1 >= 5 * 1042, "{first:?} then {veth:?}");
        }
    }
}
