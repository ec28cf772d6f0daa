//! Network counters per measured cgroup, from the network namespace its processes share.
//!
//! A container (a pod: its containers share one) has a network namespace of its own; its
//! interfaces' counters are those of `/proc/<pid>/net/dev` for any process inside it. So each
//! process of a measured cgroup's subtree is placed in its namespace (the inode number the task
//! iterator's record carries, else one `stat` of `/proc/<pid>/ns/net`), and each namespace a
//! target needs is read once per snapshot, through one of its processes, however many processes
//! and targets share it.
//!
//! Which namespace a target reports, as cAdvisor does for the containers it knows: the one all
//! the processes of its subtree share, unless that is the node's (pid 1's; the agent's own
//! where pid 1's cannot be told), whose interfaces the node's `/proc/net/dev` values already
//! carry: cAdvisor reads no network for a raw cgroup (a systemd unit). The root cgroup `/`
//! reports the node's namespace, as cAdvisor's root container does, read through the agent (a
//! node agent runs in the host's namespace: `hostNetwork`); an agent outside it (pid 1's
//! namespace is another) reports none for `/`, with the reason, rather than its pod's.
//! A subtree whose processes sit in several namespaces (a slice holding several containers)
//! reports none: a sum over namespaces would fall whenever one of them goes away.
//!
//! A namespace is read through one of a few of its processes placed earlier in the snapshot,
//! and counts only if that process is still in it after the read: one that exited meanwhile
//! fails the read, and its pid reused by a process elsewhere would read another namespace
//! (often the node's) as the container's; the next candidate is tried then.

use std::collections::HashMap;

use crate::snapshot::{TargetInterface, TargetNetwork};
use crate::source::net::{self, InterfaceCounters};
use crate::source::task_iter::TaskRecord;
use crate::source::Roots;

/// The network namespace a cgroup's processes share, as far as known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Shared {
    /// No process (seen).
    #[default]
    Empty,
    /// Every process seen is in `namespace`; `pids` are some of them.
    One { namespace: u64, pids: Candidates },
    /// Processes in several namespaces, or one whose namespace cannot be told.
    Mixed,
}

impl Shared {
    fn merge(self, other: Self) -> Self {
        match (self, other) {
            (Self::Empty, other) | (other, Self::Empty) => other,
            (
                Self::One { namespace, pids },
                Self::One {
                    namespace: b,
                    pids: more,
                },
            ) if namespace == b => Self::One {
                namespace,
                pids: pids.with(more),
            },
            _ => Self::Mixed,
        }
    }
}

/// Up to three processes of one namespace, through which it is read (see the module's text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Candidates {
    pids: [u32; 3],
    len: usize,
}

impl Candidates {
    fn one(pid: u32) -> Self {
        Self {
            pids: [pid, 0, 0],
            len: 1,
        }
    }

    /// These and then `more`, as many as fit.
    fn with(mut self, more: Self) -> Self {
        for pid in more.iter() {
            if self.len < self.pids.len() && !self.iter().any(|p| p == pid) {
                self.pids[self.len] = pid;
                self.len += 1;
            }
        }
        self
    }

    fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.pids[..self.len].iter().copied()
    }
}

/// Per cgroup `0..count`, the namespace its subtree's processes share into `out`. Only the
/// cgroups `needed` marks, and their descendants, have their processes (`pids`) placed, through
/// `namespace_of` (`Ok(None)`: the process is gone, left out; `Err`: unknown); each cgroup is
/// then folded into its parent (`parent`: parents come before children).
pub(super) fn shared_namespaces<'p>(
    count: usize,
    parent: impl Fn(usize) -> Option<usize>,
    pids: impl Fn(usize) -> &'p [u32],
    needed: &mut [bool],
    mut namespace_of: impl FnMut(u32) -> Result<Option<u64>, ()>,
    out: &mut Vec<Shared>,
) {
    out.clear();
    out.resize(count, Shared::Empty);
    for index in 0..count {
        if let Some(up) = parent(index) {
            needed[index] |= needed[up];
        }
        if !needed[index] {
            continue;
        }
        for &pid in pids(index) {
            let placed = match namespace_of(pid) {
                Ok(Some(namespace)) => Shared::One {
                    namespace,
                    pids: Candidates::one(pid),
                },
                Ok(None) => continue,
                Err(()) => Shared::Mixed,
            };
            out[index] = out[index].merge(placed);
            if out[index] == Shared::Mixed {
                break;
            }
        }
    }
    // Children come after their parents: one backward pass folds every subtree.
    for index in (0..count).rev() {
        if let Some(up) = parent(index) {
            out[up] = out[up].merge(out[index]);
        }
    }
}

/// Reads the namespaces the measured cgroups need, each once per snapshot.
#[derive(Debug)]
pub(super) struct NetworkReader {
    roots: Roots,
    /// The node's namespace (pid 1's, or the agent's own), once known.
    host: Option<u64>,
    /// Whether the agent is in the node's namespace (`/` is read through it).
    own_is_node: bool,
    /// Scratch: per scanned cgroup, whether a measured one is it or above it.
    pub(super) needed: Vec<bool>,
    /// Per scanned cgroup, the namespace its subtree shares.
    pub(super) shared: Vec<Shared>,
    /// This snapshot's reads, by namespace (`None`: the read failed).
    read: HashMap<u64, Option<Vec<InterfaceCounters>>>,
    buf: Vec<u8>,
    /// `/proc/<pid>/net/dev` files read since the start (the tests count them).
    pub(super) reads: u64,
    /// Processes placed by a `stat` of `/proc/<pid>/ns/net` since the start, not by their
    /// record (the tests count them).
    pub(super) placed_by_stat: u64,
    /// The first error of this snapshot telling a namespace.
    pub(super) error: Option<String>,
}

impl NetworkReader {
    pub(super) fn new(roots: &Roots) -> Self {
        Self {
            roots: roots.clone(),
            host: None,
            own_is_node: false,
            needed: Vec::new(),
            shared: Vec::new(),
            read: HashMap::new(),
            buf: Vec::new(),
            reads: 0,
            placed_by_stat: 0,
            error: None,
        }
    }

    /// Places the processes of the scanned cgroups `needed` marks (and below) in their
    /// namespaces and forgets the previous snapshot's reads. `records`: the task iterator's
    /// records of this snapshot's pass (empty where procfs served it); a process whose record
    /// carries its namespace costs no `stat`.
    pub(super) fn place<'p>(
        &mut self,
        count: usize,
        parent: impl Fn(usize) -> Option<usize>,
        pids: impl Fn(usize) -> &'p [u32],
        records: &[TaskRecord],
    ) {
        self.read.clear();
        self.error = None;
        if self.host.is_none() {
            let own = net::namespace_of(&self.roots, "self").ok().flatten();
            let init = net::namespace_of(&self.roots, 1).ok().flatten();
            (self.host, self.own_is_node) = node_namespace(own, init);
        }
        let (roots, error, by_stat) = (&self.roots, &mut self.error, &mut self.placed_by_stat);
        shared_namespaces(
            count,
            parent,
            pids,
            &mut self.needed,
            |pid| match recorded_namespace(records, pid) {
                Some(namespace) => Ok(Some(namespace)),
                None => {
                    *by_stat += 1;
                    net::namespace_of(roots, pid).map_err(|e| {
                        error.get_or_insert_with(|| e.to_string());
                    })
                }
            },
            &mut self.shared,
        );
    }

    /// Why `/` reports no network, where it does not: the agent is outside the node's namespace.
    pub(super) fn root_reason(&self) -> Option<&'static str> {
        (self.host.is_some() && !self.own_is_node).then_some(
            "network per cgroup: the agent is not in the node's network namespace (pid 1's; run it with hostNetwork), / reports no network",
        )
    }

    /// The network of the cgroup at scan index `index`, at `path`: its namespace read once per
    /// snapshot; `None` where it reports none (see the module's text).
    pub(super) fn network(&mut self, index: usize, path: &str) -> Option<TargetNetwork> {
        let (namespace, pids) = match (path, self.shared.get(index)) {
            ("/", _) if self.own_is_node => (self.host?, None),
            ("/", _) => return None,
            (_, Some(&Shared::One { namespace, pids })) if Some(namespace) != self.host => {
                (namespace, Some(pids))
            }
            _ => return None,
        };
        let (roots, buf, reads) = (&self.roots, &mut self.buf, &mut self.reads);
        let interfaces = self.read.entry(namespace).or_insert_with(|| {
            let mut read = |process: &dyn std::fmt::Display| {
                *reads += 1;
                let mut out = Vec::new();
                net::read_namespace(roots, process, buf, &mut out).ok()?;
                Some(out)
            };
            match pids {
                None => read(&"self"),
                Some(pids) => read_through(
                    namespace,
                    pids.iter(),
                    |pid| read(&pid),
                    |pid| net::namespace_of(roots, pid).ok().flatten(),
                ),
            }
        });
        Some(TargetNetwork {
            namespace_inode: namespace,
            interfaces: interfaces.as_ref()?.iter().map(interface).collect(),
        })
    }
}

/// The network namespace the record of `pid` carries, if any: `records` are in ascending tgid
/// order, as the iterator visits the pids. The record was taken earlier in the snapshot than a
/// `stat` would be; a namespace is still read only through a process a `stat` finds in it
/// afterwards ([`read_through`]).
fn recorded_namespace(records: &[TaskRecord], pid: u32) -> Option<u64> {
    let at = records
        .binary_search_by_key(&pid, |record| record.tgid)
        .ok()?;
    records[at].net_ns_inode
}

/// The node's namespace and whether the agent is in it, from the agent's own (`own`) and pid
/// 1's (`init`): pid 1's where it can be told (the agent may run in a pod's namespace), else the
/// agent's own.
fn node_namespace(own: Option<u64>, init: Option<u64>) -> (Option<u64>, bool) {
    match init {
        Some(init) => (Some(init), own == Some(init)),
        None => (own, own.is_some()),
    }
}

/// The counters of `namespace` read (`read`) through the first of `pids` still in it after
/// the read (`stat`: a process's namespace now); `None` when none is (see the module's text).
fn read_through(
    namespace: u64,
    pids: impl Iterator<Item = u32>,
    mut read: impl FnMut(u32) -> Option<Vec<InterfaceCounters>>,
    mut stat: impl FnMut(u32) -> Option<u64>,
) -> Option<Vec<InterfaceCounters>> {
    pids.into_iter().find_map(|pid| {
        let counters = read(pid)?;
        (stat(pid) == Some(namespace)).then_some(counters)
    })
}

fn interface(counters: &InterfaceCounters) -> TargetInterface {
    let c = counters.counts;
    TargetInterface {
        name: counters.name.clone(),
        receive_bytes: c.rx_bytes,
        transmit_bytes: c.tx_bytes,
        receive_packets: c.rx_packets,
        transmit_packets: c.tx_packets,
        receive_errors: c.rx_errors,
        transmit_errors: c.tx_errors,
        receive_dropped: c.rx_dropped,
        transmit_dropped: c.tx_dropped,
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    /// `/` (0) with `/a` (1, pids 10 and 11 in namespace 7) holding `/a/b` (2, pid 12 in 7),
    /// and `/c` (3, pid 13 in 7, pid 14 in 8).
    fn tree(needed: [bool; 4]) -> (Vec<Shared>, Vec<u32>) {
        let parents = [None, Some(0), Some(1), Some(0)];
        let pids: [&[u32]; 4] = [&[1], &[10, 11], &[12], &[13, 14]];
        let namespaces = HashMap::from([(1, 1), (10, 7), (11, 7), (12, 7), (13, 7), (14, 8)]);
        let mut asked = Vec::new();
        let mut out = Vec::new();
        let mut needed = needed;
        shared_namespaces(
            4,
            |i| parents[i],
            |i| pids[i],
            &mut needed,
            |pid| {
                asked.push(pid);
                Ok(namespaces.get(&pid).copied())
            },
            &mut out,
        );
        (out, asked)
    }

    #[test]
    fn a_subtree_shares_a_namespace_when_all_its_processes_are_in_it() {
        let (shared, asked) = tree([false, true, false, true]);
        let seven = |pids: &[u32]| Shared::One {
            namespace: 7,
            pids: pids.iter().fold(Candidates::default(), |all, &pid| {
                all.with(Candidates::one(pid))
            }),
        };
        // `/a/b` is placed because `/a` is needed; `/` is not needed: pid 1 is never asked.
        assert_eq!(asked, [10, 11, 12, 13, 14]);
        assert_eq!(shared[2], seven(&[12]));
        // Its own processes first, then its child's, as candidates to read through.
        assert_eq!(shared[1], seven(&[10, 11, 12]));
        assert_eq!(shared[3], Shared::Mixed);
        assert_eq!(shared[0], Shared::Mixed);
        // Nothing needed: nothing asked.
        let (shared, asked) = tree([false; 4]);
        assert!(asked.is_empty());
        assert_eq!(shared, [Shared::Empty; 4]);
    }

    #[test]
    fn a_process_gone_is_left_out_and_one_unknown_makes_the_subtree_mixed() {
        let mut out = Vec::new();
        let pids: [&[u32]; 1] = [&[5, 6, 7]];
        shared_namespaces(
            1,
            |_| None,
            |i| pids[i],
            &mut [true],
            |pid| match pid {
                5 => Ok(None),
                6 => Ok(Some(9)),
                _ => Err(()),
            },
            &mut out,
        );
        assert_eq!(out, [Shared::Mixed]);
        shared_namespaces(
            1,
            |_| None,
            |i| pids[i],
            &mut [true],
            |pid| Ok((pid == 6).then_some(3)),
            &mut out,
        );
        assert_eq!(
            out,
            [Shared::One {
                namespace: 3,
                pids: Candidates::one(6)
            }]
        );
    }

    /// Two measured cgroups whose processes share one namespace cost one read, and a namespace
    /// read whole gives every interface of the captured text.
    #[test]
    fn each_namespace_is_read_once_per_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        std::fs::create_dir_all(proc.join("10/net")).unwrap();
        std::fs::write(
            proc.join("10/net/dev"),
            include_bytes!("../../source/net/testdata/net_dev_container"),
        )
        .unwrap();
        // Its namespace after the read: the inode of a file standing for `ns/net`.
        std::fs::create_dir_all(proc.join("10/ns")).unwrap();
        std::fs::write(proc.join("10/ns/net"), "").unwrap();
        let seven = std::fs::metadata(proc.join("10/ns/net")).unwrap().ino();
        let mut reader = NetworkReader::new(&Roots::fixture(dir.path()));
        reader.host = Some(1);
        let one = |namespace, pid| Shared::One {
            namespace,
            pids: Candidates::one(pid),
        };
        reader.shared = vec![Shared::Mixed, one(seven, 10), one(seven, 11), one(1, 12)];
        let a = reader.network(1, "/a").unwrap();
        let b = reader.network(2, "/a/b").unwrap();
        assert_eq!(reader.reads, 1);
        assert_eq!(a, b);
        assert_eq!(a.namespace_inode, seven);
        let names: Vec<&str> = a.interfaces.iter().map(|i| &*i.name).collect();
        assert_eq!(names, ["eth0", "lo"]);
        let eth0 = &a.interfaces[0];
        assert_eq!(
            (
                eth0.receive_bytes,
                eth0.transmit_packets,
                eth0.receive_dropped,
                eth0.transmit_dropped
            ),
            (Some(1_342_201), Some(997), Some(4), Some(6))
        );
        // The host's namespace is the node's: not a container's.
        assert_eq!(reader.network(3, "/system.slice/x.service"), None);
        assert_eq!(reader.network(0, "/slice"), None);
        assert_eq!(reader.reads, 1);
    }

    /// A candidate whose read fails (it exited) or whose namespace after the read is another
    /// (its pid reused elsewhere: the node's counters) is passed over for the next.
    #[test]
    fn a_namespace_is_read_through_a_process_still_in_it_after_the_read() {
        let counters = |pid: u32| InterfaceCounters {
            name: format!("eth{pid}"),
            ..InterfaceCounters::default()
        };
        // 20 exited; 21's pid now belongs to a process in namespace 1; 22 and 23 are in 7.
        let now = HashMap::from([(21, 1), (22, 7), (23, 7)]);
        let mut asked = Vec::new();
        let got = read_through(
            7,
            [20, 21, 22, 23].into_iter(),
            |pid| {
                asked.push(pid);
                (pid != 20).then(|| vec![counters(pid)])
            },
            |pid| now.get(&pid).copied(),
        );
        assert_eq!(got, Some(vec![counters(22)]));
        assert_eq!(asked, [20, 21, 22]);
        // None left in it: no network (not the node's counters).
        let got = read_through(
            7,
            [20, 21].into_iter(),
            |pid| Some(vec![counters(pid)]),
            |pid| now.get(&pid).copied(),
        );
        assert_eq!(got, None);
    }

    /// A process whose task-iterator record carries its namespace is placed by it, with no
    /// `stat` (pid 10 has no `ns/net` in the fixture: a `stat` finds it gone); one whose record
    /// carries none (an exiting task) or that has no record is placed by a `stat`.
    #[test]
    fn a_record_carrying_the_namespace_spares_the_stat() {
        let dir = tempfile::tempdir().unwrap();
        let proc = dir.path().join("proc");
        for pid in [11, 12] {
            std::fs::create_dir_all(proc.join(format!("{pid}/ns"))).unwrap();
            std::fs::write(proc.join(format!("{pid}/ns/net")), "").unwrap();
        }
        let ino = |pid: u32| {
            std::fs::metadata(proc.join(format!("{pid}/ns/net")))
                .unwrap()
                .ino()
        };
        let records = [
            TaskRecord {
                tgid: 10,
                net_ns_inode: Some(7),
                ..TaskRecord::default()
            },
            TaskRecord {
                tgid: 11,
                net_ns_inode: None,
                ..TaskRecord::default()
            },
        ];
        let pids: [&[u32]; 4] = [&[], &[10], &[11], &[12]];
        let one = |namespace, pid| Shared::One {
            namespace,
            pids: Candidates::one(pid),
        };
        let mut reader = NetworkReader::new(&Roots::fixture(dir.path()));
        reader.needed = vec![false, true, true, true];
        reader.place(4, |i| (i > 0).then_some(0), |i| pids[i], &records);
        assert_eq!(reader.shared[1], one(7, 10));
        assert_eq!(reader.shared[2], one(ino(11), 11));
        assert_eq!(reader.shared[3], one(ino(12), 12));
        assert_eq!(reader.error, None);
        assert_eq!(reader.placed_by_stat, 2);
        // Without the records, pid 10 is placed by the `stat`, which finds it gone.
        reader.needed = vec![false, true, true, true];
        reader.place(4, |i| (i > 0).then_some(0), |i| pids[i], &[]);
        assert_eq!(reader.shared[1], Shared::Empty);
        assert_eq!(reader.shared[2], one(ino(11), 11));
    }

    #[test]
    fn the_node_is_pid_1s_namespace_where_it_can_be_told() {
        assert_eq!(node_namespace(Some(5), Some(5)), (Some(5), true));
        // The agent in a pod's namespace: a cgroup in 1 is the node's, `/` has none.
        assert_eq!(node_namespace(Some(5), Some(1)), (Some(1), false));
        assert_eq!(node_namespace(Some(5), None), (Some(5), true));
        assert_eq!(node_namespace(None, None), (None, false));
    }

    /// `/` through the agent's namespace when it is pid 1's (here a hard link: one inode), and
    /// none, with the reason, when pid 1's is another (a file of its own).
    #[test]
    fn an_agent_outside_the_nodes_namespace_reports_no_network_for_the_root() {
        for inside in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let proc = dir.path().join("proc");
            for sub in ["self/ns", "self/net", "1/ns"] {
                std::fs::create_dir_all(proc.join(sub)).unwrap();
            }
            std::fs::write(
                proc.join("self/net/dev"),
                include_bytes!("../../source/net/testdata/net_dev_container"),
            )
            .unwrap();
            std::fs::write(proc.join("self/ns/net"), "").unwrap();
            if inside {
                std::fs::hard_link(proc.join("self/ns/net"), proc.join("1/ns/net")).unwrap();
            } else {
                std::fs::write(proc.join("1/ns/net"), "").unwrap();
            }
            let mut reader = NetworkReader::new(&Roots::fixture(dir.path()));
            reader.needed = vec![false];
            reader.place(1, |_| None, |_| &[], &[]);
            let root = reader.network(0, "/");
            assert_eq!(reader.root_reason().is_none(), inside);
            if inside {
                let names: Vec<String> = root
                    .unwrap()
                    .interfaces
                    .iter()
                    .map(|i| i.name.to_string())
                    .collect();
                assert_eq!(names, ["eth0", "lo"]);
            } else {
                assert_eq!(root, None);
                assert_eq!(reader.reads, 0);
            }
        }
    }
}

#[cfg(test)]
mod root_tests;
