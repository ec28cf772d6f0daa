//! Network counters per measured cgroup, from the network namespace its processes share.
//!
//! A container (a pod: its containers share one) has a network namespace of its own; its
//! interfaces' counters are those of `/proc/<pid>/net/dev` for any process inside it. So each
//! process of a measured cgroup's subtree is placed in its namespace (one `stat` of
//! `/proc/<pid>/ns/net`), and each namespace a target needs is read once per snapshot, through
//! one of its processes, however many processes and targets share it.
//!
//! Which namespace a target reports, as cAdvisor does for the containers it knows: the one all
//! the processes of its subtree share, unless that is the agent's own, the node's (a node agent
//! runs in the host's namespace: `hostNetwork`), whose interfaces the node's `/proc/net/dev`
//! values already carry: cAdvisor reads no network for a raw cgroup (a systemd unit). The root
//! cgroup `/` reports the node's namespace, as cAdvisor's root container does (through pid 1).
//! A subtree whose processes sit in several namespaces (a slice holding several containers)
//! reports none: a sum over namespaces would fall whenever one of them goes away.

use std::collections::HashMap;

use crate::snapshot::{TargetInterface, TargetNetwork};
use crate::source::net::{self, InterfaceCounters};
use crate::source::Roots;

/// The network namespace a cgroup's processes share, as far as known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Shared {
    /// No process (seen).
    #[default]
    Empty,
    /// Every process seen is in `namespace`; `pid` is one of them.
    One { namespace: u64, pid: u32 },
    /// Processes in several namespaces, or one whose namespace cannot be told.
    Mixed,
}

impl Shared {
    fn merge(self, other: Self) -> Self {
        match (self, other) {
            (Self::Empty, other) | (other, Self::Empty) => other,
            (Self::One { namespace, pid }, Self::One { namespace: b, .. }) if namespace == b => {
                Self::One { namespace, pid }
            }
            _ => Self::Mixed,
        }
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
                Ok(Some(namespace)) => Shared::One { namespace, pid },
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
    /// The node's namespace (the agent's own), once known.
    host: Option<u64>,
    /// Scratch: per scanned cgroup, whether a measured one is it or above it.
    pub(super) needed: Vec<bool>,
    /// Per scanned cgroup, the namespace its subtree shares.
    pub(super) shared: Vec<Shared>,
    /// This snapshot's reads, by namespace (`None`: the read failed).
    read: HashMap<u64, Option<Vec<InterfaceCounters>>>,
    buf: Vec<u8>,
    /// `/proc/<pid>/net/dev` files read since the start (the tests count them).
    pub(super) reads: u64,
    /// The first error of this snapshot telling a namespace.
    pub(super) error: Option<String>,
}

impl NetworkReader {
    pub(super) fn new(roots: &Roots) -> Self {
        Self {
            roots: roots.clone(),
            host: None,
            needed: Vec::new(),
            shared: Vec::new(),
            read: HashMap::new(),
            buf: Vec::new(),
            reads: 0,
            error: None,
        }
    }

    /// Places the processes of the scanned cgroups `needed` marks (and below) in their
    /// namespaces and forgets the previous snapshot's reads.
    pub(super) fn place<'p>(
        &mut self,
        count: usize,
        parent: impl Fn(usize) -> Option<usize>,
        pids: impl Fn(usize) -> &'p [u32],
    ) {
        self.read.clear();
        self.error = None;
        if self.host.is_none() {
            self.host = net::namespace_of(&self.roots, "self").ok().flatten();
        }
        let (roots, error) = (&self.roots, &mut self.error);
        shared_namespaces(
            count,
            parent,
            pids,
            &mut self.needed,
            |pid| {
                net::namespace_of(roots, pid).map_err(|e| {
                    error.get_or_insert_with(|| e.to_string());
                })
            },
            &mut self.shared,
        );
    }

    /// The network of the cgroup at scan index `index`, at `path`: its namespace read once per
    /// snapshot; `None` where it reports none (see the module's text).
    pub(super) fn network(&mut self, index: usize, path: &str) -> Option<TargetNetwork> {
        let (namespace, pid) = match (path, self.shared.get(index)) {
            ("/", _) => (self.host?, None),
            (_, Some(&Shared::One { namespace, pid })) if Some(namespace) != self.host => {
                (namespace, Some(pid))
            }
            _ => return None,
        };
        let (roots, buf, reads) = (&self.roots, &mut self.buf, &mut self.reads);
        let interfaces = self.read.entry(namespace).or_insert_with(|| {
            *reads += 1;
            let mut out = Vec::new();
            let read = match pid {
                Some(pid) => net::read_namespace(roots, pid, buf, &mut out),
                None => net::read_namespace(roots, "self", buf, &mut out),
            };
            read.ok()?;
            Some(out)
        });
        Some(TargetNetwork {
            namespace_inode: namespace,
            interfaces: interfaces.as_ref()?.iter().map(interface).collect(),
        })
    }
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
        let seven = Shared::One {
            namespace: 7,
            pid: 12,
        };
        // `/a/b` is placed because `/a` is needed; `/` is not needed: pid 1 is never asked.
        assert_eq!(asked, [10, 11, 12, 13, 14]);
        assert_eq!(shared[2], seven);
        assert!(matches!(shared[1], Shared::One { namespace: 7, .. }));
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
                pid: 6
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
        let mut reader = NetworkReader::new(&Roots::fixture(dir.path()));
        reader.host = Some(1);
        reader.shared = vec![
            Shared::Mixed,
            Shared::One {
                namespace: 7,
                pid: 10,
            },
            Shared::One {
                namespace: 7,
                pid: 11,
            },
            Shared::One {
                namespace: 1,
                pid: 12,
            },
        ];
        let a = reader.network(1, "/a").unwrap();
        let b = reader.network(2, "/a/b").unwrap();
        assert_eq!(reader.reads, 1);
        assert_eq!(a, b);
        assert_eq!(a.namespace_inode, 7);
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
}

#[cfg(test)]
mod root_tests;
