//! The rule that lets a measured cgroup's CPU time and pressure files go unread: **a cgroup none
//! of whose processes (itself and its descendants) ran, woke, stalled, started, exited or moved
//! between two snapshots, and none of whose threads was on a CPU, on a run queue, in iowait or
//! in a memstall at either snapshot, has the same CPU usage (`cpuacct.usage`, `cpuacct.stat`'s
//! user and system, v2 `cpu.stat`'s usage, user and system) and the same pressure totals
//! (`cpu`/`memory`/`io.pressure`) at the second as at the first**, so the values read at the
//! first are reused.
//!
//! The kernel facts it rests on (kernel/sched, kernel/cgroup, Linux 6.1 to 6.18):
//! - CPU time is charged only to the task on a CPU: `update_curr` (`cpuacct_charge`, v2
//!   `cgroup_account_cputime`) and the tick and vtime paths (`account_user_time`,
//!   `account_system_time`, the IRQ time of `current`) charge the running task's cgroup and its
//!   ancestors. The last charge of a run happens before `finish_task` clears `on_cpu`. v2 rstat
//!   deltas and the `cputime_adjust` split are settled at each read, and a read with unchanged
//!   inputs prints the same numbers.
//! - Pressure time accrues only while a task of the cgroup's subtree is runnable and waiting,
//!   on a CPU (the `full` and irq states), in iowait (`in_iowait`) or in a memstall
//!   (`in_memstall`): a task off every CPU and run queue with neither flag adds to no state, and
//!   a `.pressure` read adds only the time of states that are active (`get_recent_times`).
//! - Every switch-out of a live thread increments its `nvcsw` or `nivcsw`, and an exiting thread
//!   adds both to its `signal_struct`: the per-process sum the task iterator reports
//!   ([`TaskRecord::switches`]) only grows, and a thread that woke and ran either switched out
//!   (the sum moved), is still busy, or died (the thread count moved; a new thread that is
//!   alive and quiet switched out at least once). The program reads each thread's state before
//!   its switch counts: a thread found quiet that ran since the last pass switched out before
//!   its state was read, so its count had moved by the time the count was read.
//! - A thread's exit adds its counters to the `signal_struct` totals and takes it off the thread
//!   list in one step; a record read across an exit ([`TaskRecord::is_torn`]) may hold the
//!   thread in neither sum, so its process counts as active.
//!
//! - A task enters a cgroup by inheriting its parent's at fork (the parent ran, so its own
//!   cgroup is read), by a move (`cgroup_attach_task`) or by clone3's `CLONE_INTO_CGROUP`. A
//!   task that entered a cgroup by the last two ways, ran there and exited between two passes is
//!   seen by neither, so any such entry on the machine since the last pass (`entries`,
//!   counted by the eBPF programs) makes every cgroup read. The one gap left: a child forked
//!   during the last pass's walk with a pid below the walk's position (pid wrap-around), which
//!   exited unseen; the backstop would count it.
//!
//! So a process is *unchanged* between two task-iterator passes when its start time, thread
//! count, switch sum, run time and cgroups are the same and it had no busy thread at either
//! pass ([`TaskRecord::busy_threads`]); a cgroup is unchanged when every process whose cgroup,
//! in a hierarchy whose files are skipped, is the cgroup or below it, is, and none came or
//! went. A process the walk lists without a record makes its own cgroup read on a pure v2 host
//! and every cgroup elsewhere; one whose threads sit in other cgroups than its leader, one with
//! more threads than the iterator walks, or one that cannot be placed makes every cgroup read,
//! and so does an agent outside the initial PID namespace (kthreadd not in the records: the
//! iterator would not show every task) or on a kernel whose verifier refused the rule's fields
//! (`task_iter::tries_activity_fields`: before 6.6, the iterator loads without them). The root
//! cgroup (kernel threads, interrupts) is always read.
//!
//! The values a reuse gives are exact for the instant of the second pass (which precedes the
//! reads). A backstop reads every cgroup in full at least every [`BACKSTOP`]; a full read that
//! differs from the value a reuse would have given, confirmed by the rule holding again at the
//! next pass (so no activity after the pass explains it), is counted as a miss: a bug in this
//! rule, reported in `extensions.collector.unchanged_rule_misses`.
//!
//! On a hybrid host the walk lists the cgroups of one v1 hierarchy: a process's place in the
//! cpuacct and unified hierarchies comes from its own ids there, turned into paths by the
//! inode numbers of the scanned paths' directories in those hierarchies (or its
//! `/proc/<pid>/cgroup`, checked against the inode), and counts for the nearest scanned cgroup
//! at or above that path.
//!
//! v2 `cpu.stat` is read every time: it also carries the CFS bandwidth counters, whose period
//! timer runs without any task running (for a period or two after the last run, after a quota
//! is written), and which appear when the `cpu` controller is enabled, also with no task
//! moving. On v2 only the pressure files are reused; on v1 `cpuacct.usage` and `cpuacct.stat`
//! too (v1 `cpu.stat` is the cpu hierarchy's, read every time).
//!
//! Not covered (the backstop would count each): an exiting thread's last instants (after the
//! kernel took it off the thread list, so the pass that sees it gone reads its cgroup, it may
//! still wait on a run queue or run for microseconds before its final switch; if that lasts past
//! the cgroup's read in that pass and nothing else happens there by the next pass, that pass
//! reuses a value without them: on kernels before 6.18 a throttled cgroup can hold an exiting
//! thread for up to its CFS period), a v1 `cpuacct.usage` reset by a write of 0,
//! on a hybrid host a cpuacct or unified directory removed and made again at the same path
//! while the walked hierarchy's stays, and a v1 cgroup renamed (`rename(2)`, which v1 allows
//! within its parent): the id of a hierarchy that is not walked keeps its old path here, so its
//! processes' activity marks the parent instead.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::source::cgroup::{self, CgroupLayout, MembershipId, Scan};
use crate::source::task_iter::{TaskRecord, V1_CONTROLLERS};
use crate::source::Roots;
use crate::FastMap;

/// A cgroup is read in full at least this often, whatever the rule says.
pub(super) const BACKSTOP: Duration = Duration::from_secs(10);

/// kthreadd's pid in the initial PID namespace (the kernel keeps it in every root cgroup).
const KTHREADD: u32 = 2;

/// A hierarchy whose files the rule lets go unread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hierarchy {
    /// The unified hierarchy (pressure files; v2 `cpu.stat`).
    Unified,
    /// The v1 `cpuacct` hierarchy (`cpuacct.usage`, `cpuacct.stat`).
    Cpuacct,
}

impl Hierarchy {
    fn id(self, record: &TaskRecord) -> u64 {
        match self {
            Self::Unified => record.cgroup_id,
            Self::Cpuacct => record.cpuacct_cgroup_id,
        }
    }
}

/// What one pass knew of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    start_boottime_ns: u64,
    threads: u64,
    switches: u64,
    /// Scheduler run time of the dead and live threads: catches any CPU charged even where a
    /// thread's exit races the switch counts' read.
    runtime_ns: u64,
    /// Its cgroup id in each of [`UnchangedRule::hierarchies`] (0 past their count).
    ids: [u64; 2],
    /// No busy thread, every thread walked, all in the leader's cgroups.
    quiet: bool,
}

/// The rule's state between passes.
#[derive(Debug)]
pub(super) struct UnchangedRule {
    layout: CgroupLayout,
    roots: Roots,
    walked: Option<MembershipId>,
    /// The hierarchies whose files are skipped (one or two).
    hierarchies: Vec<Hierarchy>,
    /// The processes of the last pass, by pid.
    previous: FastMap<u32, Seen>,
    current: FastMap<u32, Seen>,
    /// The walked cgroup ids of the last pass.
    previous_ids: HashSet<u64>,
    /// Cgroup paths by id (per hierarchy), for ids outside the walked hierarchy's scan.
    paths: [HashMap<u64, String>; 2],
    /// The root cgroup's id in each of [`Self::hierarchies`] (kthreadd's; 0 while unknown).
    root_ids: [u64; 2],
    /// Per scan index of the last update: unchanged since the pass before.
    unchanged: Vec<bool>,
    /// The machine's count of tasks that entered a cgroup other than by inheriting their
    /// parent's, at the last update (see [`Self::update`]).
    moves: Option<u64>,
    /// Test hook: this cgroup path counts as unchanged whatever happened (a broken rule).
    #[cfg(test)]
    pub(super) forced: Option<String>,
    /// Test hook: the machine's cgroup moves, in place of the eBPF programs' count.
    #[cfg(test)]
    pub(super) fixture_moves: Option<u64>,
}

impl UnchangedRule {
    /// The rule for the hierarchies of `layout`, whose walk places processes by `walked`.
    pub(super) fn new(layout: &CgroupLayout, roots: &Roots, walked: Option<MembershipId>) -> Self {
        let mut hierarchies = Vec::with_capacity(2);
        if layout.v2.is_some() {
            hierarchies.push(Hierarchy::Unified);
        }
        if layout.v1.iter().any(|h| h.has("cpuacct")) {
            hierarchies.push(Hierarchy::Cpuacct);
        }
        Self {
            layout: layout.clone(),
            roots: roots.clone(),
            walked,
            hierarchies,
            previous: FastMap::default(),
            current: FastMap::default(),
            previous_ids: HashSet::new(),
            paths: [HashMap::new(), HashMap::new()],
            root_ids: [0; 2],
            unchanged: Vec::new(),
            moves: None,
            #[cfg(test)]
            forced: None,
            #[cfg(test)]
            fixture_moves: None,
        }
    }

    /// Whether the cgroup at scan index `index` is unchanged since the last update.
    pub(super) fn unchanged(&self, index: usize) -> bool {
        self.unchanged.get(index).copied().unwrap_or(false)
    }

    /// Decides, for every cgroup of `scan`, whether it is unchanged since the last update, from
    /// the task iterator's `records` of this pass and `entries`, the machine's count of tasks
    /// that entered a cgroup other than by inheriting their parent's (moved, or created into
    /// one by clone3's `CLONE_INTO_CGROUP`), read just before this pass (`None` for either: no
    /// evidence, every cgroup is read).
    pub(super) fn update(
        &mut self,
        scan: &Scan,
        records: Option<&[TaskRecord]>,
        entries: Option<u64>,
    ) {
        self.unchanged.clear();
        self.unchanged.resize(scan.cgroups.len(), false);
        #[cfg(test)]
        let entries = self.fixture_moves.or(entries);
        // A task moved into a cgroup (or created straight into one) may have run there and
        // exited between the passes without either pass seeing it.
        let moved = entries.is_none() || entries != self.moves;
        self.moves = entries;
        // kthreadd is visible only from the initial PID namespace: elsewhere the iterator
        // would not show every task, and no evidence is complete.
        // Without the rule's fields (a kernel whose verifier refused them) there is no evidence
        // either; every record of a pass carries them or none does.
        let kthreadd = records.and_then(|records| {
            records
                .iter()
                .find(|r| r.tgid == KTHREADD && r.is_kernel_thread() && r.has_activity_fields())
        });
        let (Some(records), Some(kthreadd)) = (records, kthreadd) else {
            self.previous.clear();
            self.previous_ids.clear();
            return;
        };
        self.root_ids = self.seen(kthreadd).ids;
        let mut changed = vec![false; scan.cgroups.len()];
        let placed = self.mark_changed(scan, records, &mut changed);
        if placed && self.every_member_has_a_record(scan, records, &mut changed) {
            // Children come after their parents: one backward pass carries changes up.
            for index in (1..scan.cgroups.len()).rev() {
                if let (true, Some(parent)) = (changed[index], scan.cgroups[index].parent) {
                    changed[parent] = true;
                }
            }
            for (index, cgroup) in scan.cgroups.iter().enumerate() {
                self.unchanged[index] = !moved
                    && !changed[index]
                    && cgroup.parent.is_some()
                    && cgroup.id != 0
                    && self.previous_ids.contains(&cgroup.id);
            }
        }
        #[cfg(test)]
        if let Some(forced) = &self.forced {
            for (index, cgroup) in scan.cgroups.iter().enumerate() {
                if scan.path(cgroup) == forced {
                    self.unchanged[index] = true;
                }
            }
        }
        std::mem::swap(&mut self.previous, &mut self.current);
        self.previous_ids.clear();
        self.previous_ids
            .extend(scan.cgroups.iter().map(|c| c.id).filter(|&id| id != 0));
    }

    /// Records this pass's processes and marks the cgroups of every changed one (where it is
    /// now and where it was); false when one cannot be placed (every cgroup is then read).
    fn mark_changed(&mut self, scan: &Scan, records: &[TaskRecord], changed: &mut [bool]) -> bool {
        let mut places = Places {
            rule: self,
            scan,
            refreshed: [false; 2],
        };
        let mut current = std::mem::take(&mut places.rule.current);
        current.clear();
        let mut placed = true;
        for record in records {
            if record.has_split_cgroups() || !record.walked_every_thread() {
                placed = false;
            }
            let seen = places.rule.seen(record);
            let before = places.rule.previous.get(&record.tgid).copied();
            let active = !before.is_some_and(|b| b == seen && b.quiet && seen.quiet);
            if active {
                placed &= places.mark(&seen.ids, Some(record.tgid), changed);
                if let Some(before) = before.filter(|b| b.ids != seen.ids) {
                    placed &= places.mark(&before.ids, None, changed);
                }
            }
            current.insert(record.tgid, seen);
        }
        let gone: Vec<[u64; 2]> = places
            .rule
            .previous
            .iter()
            .filter(|(pid, _)| !current.contains_key(pid))
            .map(|(_, seen)| seen.ids)
            .collect();
        for ids in &gone {
            placed &= places.mark(ids, None, changed);
        }
        self.current = current;
        // A cgroup's id is never reused: the paths of removed cgroups are merely dropped now
        // and then.
        for paths in &mut self.paths {
            if paths.len() > 4 * scan.cgroups.len() + 64 {
                paths.clear();
            }
        }
        placed
    }

    fn seen(&self, record: &TaskRecord) -> Seen {
        let mut ids = [0; 2];
        for (at, hierarchy) in self.hierarchies.iter().enumerate() {
            ids[at] = hierarchy.id(record);
        }
        Seen {
            start_boottime_ns: record.start_boottime_ns,
            threads: record.nr_threads,
            switches: record.switches,
            runtime_ns: record.runtime_ns,
            ids,
            quiet: record.busy_threads == 0
                && !record.has_split_cgroups()
                && record.walked_every_thread()
                && !record.is_torn(),
        }
    }

    /// Marks the cgroups of the processes the walk lists without a task-iterator record
    /// (started after the iterator passed): false where a skipped hierarchy is not the walked
    /// one (where they sit there is not known).
    fn every_member_has_a_record(
        &self,
        scan: &Scan,
        records: &[TaskRecord],
        changed: &mut [bool],
    ) -> bool {
        let all_walked = self.hierarchies.iter().all(|&h| self.is_walked(h));
        for (index, cgroup) in scan.cgroups.iter().enumerate() {
            for pid in &scan.pids[cgroup.pids.clone()] {
                if records.binary_search_by_key(pid, |r| r.tgid).is_err() {
                    if !all_walked {
                        return false;
                    }
                    changed[index] = true;
                }
            }
        }
        true
    }

    fn is_walked(&self, hierarchy: Hierarchy) -> bool {
        match (hierarchy, self.walked) {
            (Hierarchy::Unified, Some(MembershipId::Unified)) => true,
            (Hierarchy::Cpuacct, Some(MembershipId::V1(at))) => {
                V1_CONTROLLERS.get(at) == Some(&"cpuacct")
            }
            _ => false,
        }
    }
}

/// Where processes sit, for one update.
struct Places<'p> {
    rule: &'p mut UnchangedRule,
    scan: &'p Scan,
    /// Per hierarchy: its directories of the scanned paths were looked up this update.
    refreshed: [bool; 2],
}

impl Places<'_> {
    /// Marks the cgroup of each id of `ids` (one per skipped hierarchy) as changed; `pid`: the
    /// live process with those ids, to look a path up through procfs. False when one cannot be
    /// placed.
    fn mark(&mut self, ids: &[u64; 2], pid: Option<u32>, changed: &mut [bool]) -> bool {
        let count = self.rule.hierarchies.len();
        for (at, &id) in ids.iter().enumerate().take(count) {
            match self.index(at, id, pid) {
                Some(index) => changed[index] = true,
                None => return false,
            }
        }
        true
    }

    /// The scan index of the nearest visited cgroup at or above cgroup `id` of hierarchy `at`.
    fn index(&mut self, at: usize, id: u64, pid: Option<u32>) -> Option<usize> {
        if id == 0 {
            return None;
        }
        let hierarchy = self.rule.hierarchies[at];
        if self.rule.is_walked(hierarchy) {
            if let Some(index) = self.scan.index_of_id(id) {
                return Some(index);
            }
        }
        if !self.rule.paths[at].contains_key(&id) && !self.refreshed[at] {
            self.refresh(at);
        }
        if !self.rule.paths[at].contains_key(&id) {
            let path = self.path_from_procfs(hierarchy, id, pid?)?;
            self.rule.paths[at].insert(id, path);
        }
        let mut path = self.rule.paths[at].get(&id)?.as_str();
        loop {
            if let Some(index) = self.scan.index_of_path(path) {
                return Some(index);
            }
            path = match path.rfind('/') {
                Some(0) if path.len() > 1 => "/",
                Some(end) if end > 0 => &path[..end],
                _ => return None,
            };
        }
    }

    /// Learns the ids of the scanned paths' directories in hierarchy `at` (once per update,
    /// when an id is not known: a cgroup was made).
    fn refresh(&mut self, at: usize) {
        self.refreshed[at] = true;
        let layout = &self.rule.layout;
        let mount = match self.rule.hierarchies[at] {
            Hierarchy::Unified => layout.v2.as_ref(),
            Hierarchy::Cpuacct => layout.v1_hierarchy("cpuacct").map(|h| &h.mount),
        };
        let Some(mount) = mount else {
            return;
        };
        for cgroup in &self.scan.cgroups {
            let path = self.scan.path(cgroup);
            let id = if path == "/" {
                self.rule.root_ids[at]
            } else {
                mount
                    .dir_of(path)
                    .and_then(|dir| cgroup::cgroup_id(&dir).ok().flatten())
                    .unwrap_or(0)
            };
            if id != 0 {
                self.rule.paths[at].insert(id, path.to_owned());
            }
        }
    }

    /// The path of cgroup `id` of `hierarchy`, from `/proc/<pid>/cgroup`, checked against the
    /// directory's inode number (the process may have moved since the iterator saw it).
    fn path_from_procfs(&self, hierarchy: Hierarchy, id: u64, pid: u32) -> Option<String> {
        let rule = &self.rule;
        let target = cgroup::resolve_for_pid(&rule.layout, &rule.roots, pid).ok()?;
        let dir = match hierarchy {
            Hierarchy::Unified => target.v2.as_ref(),
            Hierarchy::Cpuacct => target.v1_dir("cpuacct"),
        }?;
        // A hierarchy's root directory shows inode 1, not its kernfs id: the root is known by
        // kthreadd's id instead (the kernel keeps kthreadd in every root).
        let id_of_dir = if dir.path == "/" {
            self.rule.root_ids[self.rule.hierarchies.iter().position(|&h| h == hierarchy)?]
        } else {
            cgroup::cgroup_id(&dir.dir).ok()??
        };
        (id_of_dir == id && id != 0).then(|| dir.path.clone())
    }
}

/// When one cgroup's CPU and pressure files are read, and the misses the full reads find.
#[derive(Debug)]
pub(super) struct Backstop {
    last_full: Instant,
    /// The last full read differed from the reused values: a miss if the rule holds again.
    suspect: bool,
}

/// How one cgroup is read this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// Every file.
    Read,
    /// The CPU and pressure values of the last read are reused.
    Reuse,
    /// Every file, though the rule says unchanged: compare with the values a reuse gives.
    Check,
}

impl Backstop {
    pub(super) fn new() -> Self {
        Self {
            last_full: Instant::now(),
            suspect: false,
        }
    }

    /// The plan for this read, given the rule's verdict; counts a confirmed miss in `misses`.
    pub(super) fn plan(&mut self, unchanged: bool, every: Duration, misses: &mut u64) -> Plan {
        if std::mem::take(&mut self.suspect) && unchanged {
            *misses += 1;
        }
        if !unchanged {
            self.last_full = Instant::now();
            Plan::Read
        } else if self.last_full.elapsed() >= every {
            self.last_full = Instant::now();
            Plan::Check
        } else {
            Plan::Reuse
        }
    }

    /// The result of a [`Plan::Check`]: whether the full read differed from the reused values.
    pub(super) fn checked(&mut self, differed: bool) {
        self.suspect = differed;
    }
}
