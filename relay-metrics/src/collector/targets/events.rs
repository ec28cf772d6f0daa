//! Kernel events keyed by measured cgroup. The eBPF programs count per process (tgid): run-queue
//! waits with their log2 histogram, involuntary switches, reclaim stalls, processes created.
//! Each snapshot adds every member process's increase since the previous snapshot to the
//! cgroups that hold it (its cgroup and the measured ancestors), so the totals never decrease
//! although processes come and go; a process that exits is counted as an exit of the cgroup it
//! was last seen in. OOM victims are attributed by pid to the cgroup that held them.
//!
//! Attribution is by pid, through the walk's membership (see the parent module), in the
//! hierarchy it walks: on hybrid hosts the unified hierarchy's cgroup id, which the eBPF
//! programs see, is the root for every process.
//!
//! Every counter is counted in the process's own context (a switch in or out, a reclaim stall,
//! a fork): a process that did not run adds nothing. The members of a cgroup that the unchanged
//! rule (`super::unchanged`) found quiet since the last pass are therefore not looked up again:
//! their counters as last seen are their counters now.

use std::collections::HashSet;
use std::sync::Arc;

use crate::snapshot::{TargetKernelEvents, TargetOomVictim};
use crate::source::cgroup::Scan;
use crate::source::ebpf::EbpfSource;
use crate::FastMap;
use relay_metrics_common::RUNQ_HIST_BUCKETS;

/// Victims kept per cgroup (the newest).
const MAX_VICTIMS: usize = 16;

/// One process's counters at the previous snapshot.
#[derive(Debug, Clone)]
struct Seen {
    runq_count: u64,
    runq_total_ns: u64,
    runq_hist: [u64; RUNQ_HIST_BUCKETS],
    preemptions: u64,
    reclaim_count: u64,
    reclaim_ns: u64,
    created: u64,
    /// The scanned cgroup it was in (its path).
    cgroup: Arc<str>,
    /// The snapshot that last saw it.
    walk: u64,
}

/// The per-process state between snapshots.
#[derive(Debug, Default)]
pub(super) struct EventTracker {
    seen: FastMap<u32, Seen>,
    walk: u64,
    /// Victims already attributed (pid, boot time).
    attributed: HashSet<(u32, u64)>,
    /// Scratch: per scanned cgroup, the increase of its subtree (no victims: those are
    /// attributed by [`Self::new_victims`]).
    pub(super) deltas: Vec<TargetKernelEvents>,
    /// Scratch: scanned cgroup paths, shared with `seen`.
    paths: FastMap<Box<str>, Arc<str>>,
}

impl EventTracker {
    /// Reads every member process's counters and fills [`Self::deltas`] (per scanned cgroup,
    /// its subtree's increase since the previous call). Exits are counted for the cgroup each
    /// process was last seen in, if that cgroup was scanned again. `quiet` tells whether the
    /// cgroup at a scan index is unchanged since the last pass: its members, which did not run,
    /// keep the counters they had.
    pub(super) fn update(
        &mut self,
        source: &EbpfSource,
        scan: &Scan,
        quiet: impl Fn(usize) -> bool,
    ) {
        self.walk += 1;
        self.reset_deltas(scan.cgroups.len());
        for (index, cgroup) in scan.cgroups.iter().enumerate() {
            let path = scan.path(cgroup);
            if !cgroup.pids.is_empty() {
                let shared = self.shared_path(path);
                let pids = &scan.pids[cgroup.pids.clone()];
                if quiet(index) {
                    self.keep_quiet(pids, &shared);
                }
                self.count_members(source, pids, &shared, index);
            }
        }
        self.count_exits(scan);
        self.paths.retain(|_, shared| Arc::strong_count(shared) > 1);
        for index in (1..scan.cgroups.len()).rev() {
            if let Some(parent) = scan.cgroups[index].parent {
                // Parents come before their children.
                let (before, from) = self.deltas.split_at_mut(index);
                accumulate(&mut before[parent], &from[0]);
            }
        }
    }

    /// One zeroed delta per scanned cgroup, reset in place: the histograms keep their
    /// allocation from snapshot to snapshot.
    fn reset_deltas(&mut self, cgroups: usize) {
        self.deltas
            .resize_with(cgroups, TargetKernelEvents::default);
        for delta in &mut self.deltas {
            let mut histogram = std::mem::take(&mut delta.run_queue_histogram);
            histogram.clear();
            histogram.resize(RUNQ_HIST_BUCKETS, 0);
            *delta = TargetKernelEvents {
                run_queue_histogram: histogram,
                ..TargetKernelEvents::default()
            };
        }
    }

    /// The cgroup path as the `Seen` records share it.
    fn shared_path(&mut self, path: &str) -> Arc<str> {
        match self.paths.get(path) {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared: Arc<str> = Arc::from(path);
                self.paths.insert(Box::from(path), Arc::clone(&shared));
                shared
            }
        }
    }

    /// Marks those of `pids` (quiet members of `cgroup`) seen before as seen now, with the
    /// counters they had: [`Self::count_members`] then skips them.
    fn keep_quiet(&mut self, pids: &[u32], cgroup: &Arc<str>) {
        for pid in pids {
            if let Some(seen) = self.seen.get_mut(pid) {
                seen.walk = self.walk;
                if !Arc::ptr_eq(&seen.cgroup, cgroup) {
                    seen.cgroup = Arc::clone(cgroup);
                }
            }
        }
    }

    /// Adds the increase of each of `pids` (members of the cgroup at `index`, `cgroup`) since
    /// the previous update to that cgroup's delta; a process already seen in this update
    /// ([`Self::keep_quiet`]) is skipped.
    fn count_members(
        &mut self,
        source: &EbpfSource,
        pids: &[u32],
        cgroup: &Arc<str>,
        index: usize,
    ) {
        let first = self.walk == 1;
        for &pid in pids {
            if self
                .seen
                .get(&pid)
                .is_some_and(|seen| seen.walk == self.walk)
            {
                continue;
            }
            // A process the programs have not seen run since they attached (one asleep
            // since before the agent started) has counted nothing yet, but it is this
            // cgroup's: its exit and an OOM kill are attributed here.
            let Ok(stats) = source.tgid(pid) else {
                continue;
            };
            let stats = stats.unwrap_or(relay_metrics_common::TgidStats::ZERO);
            let events = stats.events;
            let now = Seen {
                runq_count: events.runq_count,
                runq_total_ns: events.runq_total_ns,
                runq_hist: events.runq_hist,
                preemptions: events.involuntary_switches,
                reclaim_count: events.reclaim_count,
                reclaim_ns: events.reclaim_total_ns,
                created: stats.processes_created,
                cgroup: Arc::clone(cgroup),
                walk: self.walk,
            };
            let delta = &mut self.deltas[index];
            match self.seen.get(&pid) {
                // Counted from the agent's start: what a process had before is not added.
                None if first => {}
                // A process new since the previous snapshot: all of it.
                None => add(delta, &now, None),
                Some(before) => add(delta, &now, Some(before)),
            }
            self.seen.insert(pid, now);
        }
    }

    /// Processes not seen in this update: exited (or moved out of every scanned cgroup); each
    /// counts as an exit of the cgroup it was last seen in, if that cgroup was scanned again.
    fn count_exits(&mut self, scan: &Scan) {
        let walk = self.walk;
        let mut exited = Vec::new();
        self.seen.retain(|_, seen| {
            let gone = seen.walk != walk;
            if gone {
                exited.push(Arc::clone(&seen.cgroup));
            }
            !gone
        });
        if exited.is_empty() {
            return;
        }
        for cgroup in exited {
            if let Some(index) = scan.index_of_path(&cgroup) {
                self.deltas[index].processes_exited += 1;
            }
        }
    }

    /// The scanned cgroup that held `pid` at the last update.
    pub(super) fn cgroup_of(&self, pid: u32) -> Option<&str> {
        self.seen.get(&pid).map(|seen| &*seen.cgroup)
    }

    /// OOM victims not attributed yet, each with the cgroup path that held it.
    pub(super) fn new_victims(&mut self, source: &EbpfSource) -> Vec<(String, TargetOomVictim)> {
        let mut found = Vec::new();
        for victim in source.recent_oom_victims() {
            if !self.attributed.insert((victim.pid, victim.time_boot_ns)) {
                continue;
            }
            let Some(cgroup) = self.cgroup_of(victim.pid) else {
                continue;
            };
            let comm_len = victim
                .comm
                .iter()
                .position(|&b| b == 0)
                .unwrap_or(victim.comm.len());
            found.push((
                cgroup.to_owned(),
                TargetOomVictim {
                    pid: victim.pid,
                    comm: String::from_utf8_lossy(&victim.comm[..comm_len]).into_owned(),
                    time_boot_ns: victim.time_boot_ns,
                    anon_rss_kib: victim.anon_rss_bytes / 1024,
                },
            ));
        }
        // Bounded: the source keeps its most recent victims only.
        if self.attributed.len() > 4096 {
            self.attributed.clear();
            for victim in source.recent_oom_victims() {
                self.attributed.insert((victim.pid, victim.time_boot_ns));
            }
        }
        found
    }
}

/// The kernel events of the cgroups that dropped out of the measured set while the walk still
/// finds them (beyond `max_targets`, or empty and not selected), counted on from each pass's
/// increase: a cgroup measured again goes on from its totals, not from zero. One that the walk
/// no longer finds under the same directory id (removed, or made again) is forgotten.
#[derive(Debug, Default)]
pub(super) struct Parked {
    cgroups: FastMap<Arc<str>, (u64, TargetKernelEvents)>,
}

impl Parked {
    /// Adds this pass's increase (`deltas`, per scan index) to each parked cgroup; `find` gives
    /// a path's scan index and directory id in this walk.
    pub(super) fn count_on(
        &mut self,
        find: impl Fn(&str) -> Option<(usize, u64)>,
        deltas: &[TargetKernelEvents],
    ) {
        self.cgroups.retain(|path, (id, totals)| match find(path) {
            Some((index, walked)) if walked == *id => {
                accumulate(totals, &deltas[index]);
                true
            }
            _ => false,
        });
    }

    /// Keeps `totals` (this pass's increase included) of the cgroup at `path`, directory `id`.
    pub(super) fn park(&mut self, path: Arc<str>, id: u64, totals: TargetKernelEvents) {
        self.cgroups.insert(path, (id, totals));
    }

    /// The totals of the cgroup at `path` if it was parked under directory `id`.
    pub(super) fn take(&mut self, path: &str, id: u64) -> Option<TargetKernelEvents> {
        match self.cgroups.remove(path) {
            Some((parked, totals)) if parked == id => Some(totals),
            _ => None,
        }
    }

    pub(super) fn clear(&mut self) {
        self.cgroups.clear();
    }
}

fn add(delta: &mut TargetKernelEvents, now: &Seen, before: Option<&Seen>) {
    // The programs keep a process's entry after it exits (a reused pid counts on), so counters
    // go down only when the entry was evicted and made again: then all of it is new. One
    // verdict for every counter, so that the histogram's buckets add up to its count.
    let before = before.filter(|before| !restarted(now, before));
    let diff = |now: u64, before: Option<u64>| now - before.unwrap_or(0);
    delta.run_queue_count += diff(now.runq_count, before.map(|b| b.runq_count));
    delta.run_queue_total_ns += diff(now.runq_total_ns, before.map(|b| b.runq_total_ns));
    for (bucket, (n, b)) in delta
        .run_queue_histogram
        .iter_mut()
        .enumerate()
        .map(|(i, d)| (d, (now.runq_hist[i], before.map(|b| b.runq_hist[i]))))
    {
        *bucket += diff(n, b);
    }
    delta.preemptions += diff(now.preemptions, before.map(|b| b.preemptions));
    delta.reclaim_stalls += diff(now.reclaim_count, before.map(|b| b.reclaim_count));
    delta.reclaim_stall_ns += diff(now.reclaim_ns, before.map(|b| b.reclaim_ns));
    delta.processes_created += diff(now.created, before.map(|b| b.created));
}

/// Whether any of a process's counters is below its value at the previous snapshot.
fn restarted(now: &Seen, before: &Seen) -> bool {
    now.runq_count < before.runq_count
        || now.runq_total_ns < before.runq_total_ns
        || now
            .runq_hist
            .iter()
            .zip(&before.runq_hist)
            .any(|(n, b)| n < b)
        || now.preemptions < before.preemptions
        || now.reclaim_count < before.reclaim_count
        || now.reclaim_ns < before.reclaim_ns
        || now.created < before.created
}

/// Adds an increase (a cgroup's own, or a child's subtree) to running totals; victims are
/// not counters and are left out.
pub(super) fn accumulate(totals: &mut TargetKernelEvents, delta: &TargetKernelEvents) {
    if totals.run_queue_histogram.len() != RUNQ_HIST_BUCKETS {
        totals.run_queue_histogram = vec![0; RUNQ_HIST_BUCKETS];
    }
    totals.run_queue_count += delta.run_queue_count;
    totals.run_queue_total_ns += delta.run_queue_total_ns;
    for (total, add) in totals
        .run_queue_histogram
        .iter_mut()
        .zip(&delta.run_queue_histogram)
    {
        *total += add;
    }
    totals.preemptions += delta.preemptions;
    totals.reclaim_stalls += delta.reclaim_stalls;
    totals.reclaim_stall_ns += delta.reclaim_stall_ns;
    totals.processes_created += delta.processes_created;
    totals.processes_exited += delta.processes_exited;
}

/// Keeps the newest [`MAX_VICTIMS`] victims.
pub(super) fn push_victim(totals: &mut TargetKernelEvents, victim: TargetOomVictim) {
    if totals.oom_victims.len() == MAX_VICTIMS {
        totals.oom_victims.remove(0);
    }
    totals.oom_victims.push(victim);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(runq_count: u64, runq_hist: [u64; 2], preemptions: u64) -> Seen {
        let mut hist = [0; RUNQ_HIST_BUCKETS];
        hist[..2].copy_from_slice(&runq_hist);
        Seen {
            runq_count,
            runq_total_ns: runq_count * 1000,
            runq_hist: hist,
            preemptions,
            reclaim_count: 0,
            reclaim_ns: 0,
            created: 0,
            cgroup: Arc::from("/a"),
            walk: 1,
        }
    }

    fn delta_of(now: &Seen, before: Option<&Seen>) -> TargetKernelEvents {
        let mut delta = TargetKernelEvents {
            run_queue_histogram: vec![0; RUNQ_HIST_BUCKETS],
            ..TargetKernelEvents::default()
        };
        add(&mut delta, now, before);
        delta
    }

    #[test]
    fn a_restarted_entry_counts_whole_in_every_counter_so_buckets_add_up_to_the_count() {
        // Evicted and made again: the count (5) is above the old one (3) but a bucket is below.
        let delta = delta_of(&seen(5, [1, 4], 2), Some(&seen(3, [2, 1], 7)));
        assert_eq!(delta.run_queue_count, 5);
        assert_eq!(delta.run_queue_total_ns, 5000);
        assert_eq!(delta.run_queue_histogram[..2], [1, 4]);
        assert_eq!(delta.preemptions, 2);
        let buckets: u64 = delta.run_queue_histogram.iter().sum();
        assert_eq!(buckets, delta.run_queue_count);
    }

    #[test]
    fn a_parked_cgroup_counts_on_until_it_is_measured_again_or_gone() {
        let delta = |preemptions| TargetKernelEvents {
            preemptions,
            run_queue_histogram: vec![0; RUNQ_HIST_BUCKETS],
            ..TargetKernelEvents::default()
        };
        let mut parked = Parked::default();
        parked.park(Arc::from("/a"), 7, delta(10));
        parked.park(Arc::from("/b"), 8, delta(1));
        parked.park(Arc::from("/c"), 9, delta(1));
        // /a still walked under its id, /b made again (another id), /c gone.
        let find = |path: &str| match path {
            "/a" => Some((0, 7)),
            "/b" => Some((1, 80)),
            _ => None,
        };
        parked.count_on(find, &[delta(5), delta(3)]);
        assert_eq!(parked.take("/b", 80), None);
        assert_eq!(parked.take("/c", 9), None);
        // /a counted on (10 + 5), and is handed over once.
        assert_eq!(parked.take("/a", 7).map(|t| t.preemptions), Some(15));
        assert_eq!(parked.take("/a", 7), None);
        // Measured again under another directory at the same path: not its totals.
        parked.park(Arc::from("/a"), 7, delta(15));
        assert_eq!(parked.take("/a", 70), None);
    }

    #[test]
    fn a_process_that_counted_on_adds_its_increase() {
        let delta = delta_of(&seen(5, [2, 3], 9), Some(&seen(3, [2, 1], 7)));
        assert_eq!(delta.run_queue_count, 2);
        assert_eq!(delta.run_queue_histogram[..2], [0, 2]);
        assert_eq!(delta.preemptions, 2);
        assert_eq!(delta_of(&seen(5, [2, 3], 9), None).run_queue_count, 5);
    }
}
