//! The cgroups measured one by one besides the scope (`serve --cgroups`, the config's
//! `extensions.cgroups`): discovered by a walk of one hierarchy per snapshot (the last one reused
//! while no cgroup directory changed, [`walk_reuse`]), each read through its own held
//! files, with per-process sums grouped by cgroup from the collector's one pass over all
//! processes, and the GPU thread's per-process records joined with that grouping, into
//! `extensions.targets`.
//!
//! Membership comes from the pass itself where the task iterator served it: each record names
//! the process's cgroup in the walked hierarchy by id, so the walk reads no `cgroup.procs`
//! (one open, read and close per cgroup and snapshot). A v1 process whose threads sit in
//! different cgroups is counted in its leader's. The few processes of the pass the iterator did
//! not show (pid 1 in some containers, one started after the iterator passed its pid) are
//! placed through their `/proc/<pid>/cgroup`; where procfs served the pass, or more than
//! [`MAX_PLACED_BY_PROCFS`] processes lack a record, the walk lists every `cgroup.procs`
//! instead.
//!
//! The values the kernel keeps exactly in memory come from one cgroup-iterator read per
//! hierarchy and snapshot where `extensions.cgroup_source` allows it
//! (`source::cgroup_iter::pass`); each cgroup's reader then leaves their files unread.

mod events;
mod gpu;
mod labels;
mod names;
mod network;
mod unchanged;
mod walk_reuse;

use std::sync::Arc;

use crate::config::ResourceMetricsConfig;
use crate::model::{GpuProcessValues, ProcessPass, ProcessSet};
use crate::snapshot::{CgroupTargetReport, ProcessSums, TargetLabels, Targets};
use crate::source::cgroup::{
    self, CgroupLayout, CgroupPattern, CgroupValuesReader, CgroupVersion, MeasuredFiles,
    MembershipId, Scan, Scanner, Selection,
};
use crate::source::cgroup_iter::pass::{CgroupIds, CgroupIterPass, KernelValues};
use crate::source::task_iter::{TaskRecord, V1_CONTROLLERS};
use crate::source::Roots;
use crate::FastMap;

use labels::path_labels;
use names::Names;
use unchanged::{Backstop, Plan, UnchangedRule};
use walk_reuse::WalkReuse;

/// Files a measured cgroup holds open at most, its settings aside (v1: cpuacct 2, cpu 1,
/// memory 4, pids 1, blkio 2; v2 PSI 3).
const FILES_PER_TARGET: usize = 13;

/// Settings a measured cgroup holds open at most besides (v1: the CFS quota and period, the
/// memory and pids limits, `cpu.shares` for the cAdvisor naming). They are held only when every
/// measured cgroup's files and settings fit the budget: the budget goes to the files read at
/// every snapshot first.
const SETTINGS_PER_TARGET: usize = 5;

/// The walk keeps at most this share of the open-file limit of cgroup directories open (a
/// twelfth: 1,666 at a limit of 20,000).
const HELD_DIRS_SHARE: usize = 12;

/// One measured cgroup's state.
#[derive(Debug)]
struct Entry {
    /// The walked directory's id (inode number) when the entry was made: a cgroup removed and
    /// made again at the same path (a service restarted) has another, and a new entry.
    walked_id: u64,
    /// Made while some hierarchy of the layout had no directory for it (a runtime makes them one
    /// after another): the number it had then, and it is resolved again once, at the next walk.
    missing_hierarchies: Option<usize>,
    reader: CgroupValuesReader,
    /// Its directories' ids, which join it to the cgroup iterator's records.
    ids: CgroupIds,
    labels: TargetLabels,
    /// Its kernel events since it was first measured.
    kernel: crate::snapshot::TargetKernelEvents,
    /// The walk that last selected it.
    seen: u64,
    /// When the cgroup was made (seconds since the epoch), read once when first selected.
    created_seconds: Option<f64>,
    /// When it was first selected: it is held out of the snapshots while a runtime API should
    /// name it and has not, for at most [`NAME_WAIT`].
    born: std::time::Instant,
    /// When its CPU and pressure files are read in full though the rule says unchanged.
    backstop: Backstop,
    /// How the last read went ([`Plan::Reuse`] only where values were reused).
    last_plan: Plan,
}

/// What the unchanged-cgroup rule ([`unchanged`]) did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RuleCounts {
    /// Backstop reads that found values the rule had said could not change.
    pub misses: u64,
    /// Cgroup reads whose CPU usage and pressure files were not read.
    pub reused_reads: u64,
}

/// How long a new container's cgroup is held out of the snapshots while the runtime's API has
/// not named it yet (the API is asked at once; an answer takes milliseconds).
const NAME_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Processes without a task-iterator record placed one by one through `/proc/<pid>/cgroup` at
/// most; beyond, listing every `cgroup.procs` is the cheaper path.
const MAX_PLACED_BY_PROCFS: usize = 16;

/// Discovers and reads the measured cgroups.
#[derive(Debug)]
pub(crate) struct TargetSet {
    roots: Roots,
    selection: Selection,
    max_targets: usize,
    layout: Option<CgroupLayout>,
    scanner: Option<Scanner>,
    scan: Scan,
    entries: FastMap<Arc<str>, Entry>,
    walks: u64,
    buf: Vec<u8>,
    /// The open-file limit, as raised at the start: the entries may hold a third of it open.
    open_file_limit: usize,
    /// The cAdvisor naming is asked for: read the files only it needs (`memory.stat`, …).
    cadvisor: bool,
    /// The number dropped that was last warned about.
    warned_dropped: u64,
    /// Scratch: the selected cgroups' scan indexes, in path order.
    selected: Vec<usize>,
    /// Scratch: per scanned cgroup, its subtree's process sums.
    sums: Vec<Sums>,
    /// Scratch: pid → index in the process pass.
    by_pid: FastMap<u32, usize>,
    /// Scratch: per process of the pass, the scan index of the cgroup listing it (`usize::MAX`:
    /// none).
    cgroup_of: Vec<usize>,
    /// Scratch: per process of the pass, its cgroup id in the walked hierarchy.
    member_ids: Vec<u64>,
    /// Scratch: (scan index, pid) of every process in a scanned cgroup.
    members: Vec<(usize, u32)>,
    /// Container and pod names from the runtimes' APIs, when their sockets are given.
    names: Names,
    /// Per-process kernel event counters between snapshots.
    events: events::EventTracker,
    /// The kernel events of the cgroups measured before and not now.
    parked: events::Parked,
    /// When the machine booted (seconds since the epoch).
    boot_seconds: Option<u64>,
    /// The measured cgroups' network namespaces (`None`: the network category is off).
    network: Option<network::NetworkReader>,
    /// Which cgroups are unchanged since the last snapshot (`None` without a cgroup file
    /// system).
    rule: Option<UnchangedRule>,
    rule_counts: RuleCounts,
    /// The machine's count of cgroup entries read just before this snapshot's task-iterator
    /// pass ([`Self::entries_before_pass`]).
    entries_before_pass: Option<u64>,
    /// The machine's count of cgroup directory changes read before this snapshot's walk
    /// ([`Self::dir_changes_before_walk`]), and whether the last walk still holds.
    dir_changes: Option<u64>,
    walk_reuse: WalkReuse,
    /// How often a cgroup is read in full whatever the rule says ([`unchanged::BACKSTOP`];
    /// tests shorten it).
    backstop_every: std::time::Duration,
    /// The values read for all measured cgroups at once (`extensions.cgroup_source`).
    kernel_values: CgroupIterPass,
}

#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    count: u64,
    threads: u64,
    resident_bytes: u64,
    fds: u64,
    fds_complete: bool,
}

impl TargetSet {
    /// The measured cgroups the config asks for, if any; an error where
    /// `extensions.cgroup_source` forces the cgroup iterator and it cannot load.
    pub(crate) fn new(
        config: &ResourceMetricsConfig,
        roots: &Roots,
        layout: Option<&CgroupLayout>,
    ) -> Result<Option<Self>, String> {
        let extensions = &config.extensions;
        if extensions.cgroups.is_empty() && extensions.cgroup_depth.is_none() {
            return Ok(None);
        }
        let kernel_values = CgroupIterPass::new(extensions.cgroup_source, layout)?;
        // Validated with the config: an invalid pattern never gets here.
        let patterns = CgroupPattern::parse_all(&extensions.cgroups).unwrap_or_default();
        let limit =
            usize::try_from(crate::source::held::raise_open_file_limit()).unwrap_or(usize::MAX);
        let scanner = layout.and_then(|layout| Scanner::new(layout, limit / HELD_DIRS_SHARE));
        Ok(Some(Self {
            roots: roots.clone(),
            selection: Selection {
                patterns,
                depth: extensions.cgroup_depth,
            },
            max_targets: extensions.max_targets,
            rule: layout.map(|layout| {
                UnchangedRule::new(
                    layout,
                    roots,
                    scanner.as_ref().and_then(Scanner::membership_id),
                )
            }),
            scanner,
            rule_counts: RuleCounts::default(),
            entries_before_pass: None,
            dir_changes: None,
            walk_reuse: WalkReuse::default(),
            backstop_every: unchanged::BACKSTOP,
            layout: layout.cloned(),
            scan: Scan::default(),
            entries: FastMap::default(),
            walks: 0,
            buf: Vec::with_capacity(4096),
            open_file_limit: limit,
            cadvisor: extensions.metric_names == crate::config::MetricNames::Cadvisor,
            warned_dropped: 0,
            selected: Vec::new(),
            sums: Vec::new(),
            by_pid: FastMap::default(),
            cgroup_of: Vec::new(),
            member_ids: Vec::new(),
            members: Vec::new(),
            names: Names::start(extensions),
            events: events::EventTracker::default(),
            parked: events::Parked::default(),
            boot_seconds: crate::source::system::boot_time_seconds(),
            network: config
                .network
                .enabled
                .then(|| network::NetworkReader::new(roots)),
            kernel_values,
        }))
    }

    /// `extensions.collector.cgroup_source` and its reason for the last snapshot.
    pub(crate) fn cgroup_source(&self) -> (&'static str, Option<&Arc<str>>) {
        self.kernel_values.describe()
    }
    /// The machine's count of tasks that entered a cgroup other than by inheriting their
    /// parent's (eBPF; `None` where its programs do not all run), read just before this
    /// snapshot's task-iterator pass. Read after the pass instead, an entry between the two
    /// would move the count this snapshot (when the pass could not see it yet) and not the next
    /// one (when it matters), and its cgroup would be reused away.
    pub(crate) fn entries_before_pass(&mut self, entries: Option<u64>) {
        self.entries_before_pass = entries;
    }

    /// The machine's count of cgroup directories made, removed or renamed, read before this
    /// snapshot's walk (`None` where it is not counted): while it stands still, the walk is
    /// reused ([`walk_reuse`]).
    pub(crate) fn dir_changes_before_walk(&mut self, changes: Option<u64>) {
        self.dir_changes = changes;
    }

    /// Walks, reads every selected cgroup and fills `out`. `records`: the task iterator's
    /// records of the pass `processes` (`None` where procfs served it). `gpu`: the GPU thread's
    /// per-process records for the processes of `processes` (`None` when there are none to
    /// join).
    pub(crate) fn fill(
        &mut self,
        processes: Option<&ProcessPass>,
        records: Option<&[TaskRecord]>,
        gpu: Option<&[GpuProcessValues]>,
        ticks_per_second: u64,
        kernel: Option<&crate::source::ebpf::EbpfSource>,
        out: &mut Targets,
    ) {
        self.walks += 1;
        if !self.describe(out) {
            return;
        }
        let process_set = match processes {
            Some(ProcessPass::Sampled(set)) => Some(set),
            _ => None,
        };
        self.walk(process_set, records);
        if let Some(rule) = &mut self.rule {
            let records = records.filter(|_| process_set.is_some());
            rule.update(&self.scan, records, self.entries_before_pass);
        }
        out.reasons.extend(self.scan.errors.iter().cloned());
        self.names.refresh(&mut out.reasons);
        let victims = match kernel {
            Some(source) => {
                // Before the update, which forgets the processes that are gone (the victims).
                let victims = self.events.new_victims(source);
                let rule = self.rule.as_ref();
                self.events.update(source, &self.scan, |index| {
                    rule.is_some_and(|rule| rule.unchanged(index))
                });
                victims
            }
            None => {
                out.reasons.push(
                    "no kernel events per cgroup: the eBPF programs are not loaded (see extensions.kernel_events)"
                        .into(),
                );
                Vec::new()
            }
        };
        self.sum_processes(process_set);
        self.select(out);
        self.place_networks(records.unwrap_or_default(), &mut out.reasons);
        self.kernel_values.read(self.selected.len());
        let reading = Reading {
            process_set,
            kernel: kernel.is_some(),
            victims: &victims,
            ticks_per_second,
        };
        let mut filled = 0;
        for at in 0..self.selected.len() {
            filled += usize::from(self.report(self.selected[at], &reading, filled, out));
        }
        out.cgroups.truncate(filled);
        self.tell_unheld(&mut out.reasons);
        let scan = &self.scan;
        gpu::attribute(
            gpu.filter(|_| process_set.is_some()),
            |pid| {
                let at = *self.by_pid.get(&pid)?;
                Some(self.cgroup_of[at]).filter(|&index| index != usize::MAX)
            },
            |index| scan.cgroups[index].parent,
            |index| scan.path(&scan.cgroups[index]),
            &mut out.cgroups,
        );
        self.drop_unselected(kernel.is_some());
    }

    /// Closes the files of the cgroups this walk did not select (removed, beyond `max_targets`,
    /// or empty); with kernel events, those the walk still finds keep their totals counting on
    /// ([`events::Parked`]).
    fn drop_unselected(&mut self, kernel: bool) {
        let scan = &self.scan;
        let find = |path: &str| {
            let index = scan.index_of_path(path)?;
            Some((index, scan.cgroups[index].id))
        };
        let deltas = &self.events.deltas;
        let parked = &mut self.parked;
        if !kernel {
            parked.clear();
        }
        parked.count_on(find, deltas);
        let walks = self.walks;
        self.entries.retain(|path, entry| {
            if entry.seen == walks {
                return true;
            }
            let found = find(path).filter(|&(_, id)| kernel && id == entry.walked_id);
            if let Some((index, id)) = found {
                let mut totals = std::mem::take(&mut entry.kernel);
                events::accumulate(&mut totals, &deltas[index]);
                parked.park(Arc::clone(path), id, totals);
            }
            false
        });
    }

    /// Says how many of the cgroups measured this time open their files at every read because
    /// the open-file limit is too low to hold them: a cost the operator can remove.
    fn tell_unheld(&self, reasons: &mut Vec<String>) {
        let measured = self.entries.values().filter(|e| e.seen == self.walks);
        let (count, unheld) = measured.fold((0, 0), |(count, unheld), entry| {
            (count + 1, unheld + usize::from(!entry.reader.holds_files()))
        });
        if unheld > 0 {
            reasons.push(format!(
                "{unheld} of {count} measured cgroups open their files at every read: a third of \
                 the open-file limit ({}) is held for them, {FILES_PER_TARGET} files each; a \
                 higher limit (LimitNOFILE, ulimit -n) holds them all",
                self.open_file_limit
            ));
        }
    }

    /// What the unchanged-cgroup rule did so far.
    pub(crate) fn rule_counts(&self) -> RuleCounts {
        self.rule_counts
    }

    /// Fills what `out` says of the walk itself (patterns, depth, hierarchy); false, with
    /// `out` emptied and the reason given, when no cgroup file system is mounted.
    fn describe(&self, out: &mut Targets) -> bool {
        if out.patterns.len() != self.selection.patterns.len() {
            out.patterns = self.selection.patterns_text();
        }
        out.depth = self.selection.depth;
        out.reasons.clear();
        let (Some(scanner), Some(_)) = (self.scanner.as_ref(), self.layout.as_ref()) else {
            out.hierarchy.clear();
            out.matched = 0;
            out.dropped = 0;
            out.cgroups.clear();
            out.reasons
                .push("no cgroup file system is mounted: no cgroup can be measured".into());
            return false;
        };
        if out.hierarchy.is_empty() {
            out.hierarchy = format!(
                "{} {}",
                match scanner.version() {
                    CgroupVersion::V1 => "v1",
                    CgroupVersion::V2 => "v2",
                },
                scanner.mount_point().display()
            );
        }
        true
    }

    /// Walks the hierarchy into [`Self::scan`], with each cgroup's processes: from the task
    /// iterator's records where they name every process's cgroup, else from `cgroup.procs`.
    fn walk(&mut self, process_set: Option<&ProcessSet>, records: Option<&[TaskRecord]>) {
        let (Some(scanner), Some(layout)) = (self.scanner.as_mut(), self.layout.as_ref()) else {
            return;
        };
        let by_id = match (process_set, records, scanner.membership_id()) {
            (Some(set), Some(records), Some(key)) => member_ids(
                &set.processes,
                records,
                key,
                |pid| id_from_procfs(&self.roots, layout, key, pid),
                &mut self.member_ids,
            ),
            _ => false,
        };
        let now = std::time::Instant::now();
        if !by_id || !self.walk_reuse.reuse(self.dir_changes, now) {
            scanner.scan(&self.selection, &mut self.scan, !by_id);
            let reusable = by_id && self.scan.errors.is_empty();
            self.walk_reuse
                .walked(self.dir_changes.filter(|_| reusable), now);
        }
        let (true, Some(set)) = (by_id, process_set) else {
            return;
        };
        self.members.clear();
        for (process, id) in set.processes.iter().zip(&self.member_ids) {
            if let Some(index) = self.scan.index_of_id(*id) {
                self.members.push((index, process.pid));
            }
        }
        self.scan.set_members(&mut self.members);
    }

    /// Sums the pass's per-process values over each scanned cgroup's subtree into
    /// [`Self::sums`], and records which cgroup lists each process ([`Self::cgroup_of`]).
    fn sum_processes(&mut self, process_set: Option<&ProcessSet>) {
        let scan = &self.scan;
        self.sums.clear();
        self.sums.resize(scan.cgroups.len(), Sums::default());
        let Some(set) = process_set else {
            return;
        };
        self.by_pid.clear();
        self.by_pid.extend(
            set.processes
                .iter()
                .enumerate()
                .map(|(index, p)| (p.pid, index)),
        );
        self.cgroup_of.clear();
        self.cgroup_of.resize(set.processes.len(), usize::MAX);
        for (index, cgroup) in scan.cgroups.iter().enumerate() {
            let sums = &mut self.sums[index];
            sums.fds_complete = true;
            for pid in &scan.pids[cgroup.pids.clone()] {
                // A process listed in the cgroup but started after the pass is left out
                // until the next snapshot.
                let Some(&at) = self.by_pid.get(pid) else {
                    continue;
                };
                self.cgroup_of[at] = index;
                let process = &set.processes[at];
                sums.count += 1;
                sums.threads += process.threads;
                sums.resident_bytes += process.rss_bytes;
                match process.open_fds {
                    Some(fds) => sums.fds += fds,
                    None => sums.fds_complete = false,
                }
            }
        }
        // Children come after their parents: one backward pass sums every subtree.
        for index in (1..scan.cgroups.len()).rev() {
            if let Some(parent) = scan.cgroups[index].parent {
                let child = self.sums[index];
                let sums = &mut self.sums[parent];
                sums.count += child.count;
                sums.threads += child.threads;
                sums.resident_bytes += child.resident_bytes;
                sums.fds += child.fds;
                sums.fds_complete &= child.fds_complete;
            }
        }
    }

    /// Picks the cgroups measured this time into [`Self::selected`] (path order, at most
    /// `max_targets`), says how many matched and were dropped, and why patterns match nothing.
    fn select(&mut self, out: &mut Targets) {
        let scan = &self.scan;
        self.selected.clear();
        // In path order, as the walk sorted them once (a walk is reused for many passes).
        let in_order = scan.in_path_order().iter().copied();
        self.selected
            .extend(in_order.filter(|&index| scan.cgroups[index].selected));
        // Without patterns, only cgroups holding a process (themselves or below) count.
        if self.selection.patterns.is_empty() {
            let populated = populated(scan);
            self.selected.retain(|&index| populated[index]);
        }
        out.matched = self.selected.len() as u64;
        let dropped = self.selected.len().saturating_sub(self.max_targets);
        self.selected.truncate(self.max_targets);
        out.dropped = dropped as u64;
        if dropped as u64 != self.warned_dropped {
            if dropped > 0 {
                tracing::warn!(
                    matched = out.matched,
                    max_targets = self.max_targets,
                    dropped,
                    "more cgroups match than --max-targets: the last in path order are not measured"
                );
            }
            self.warned_dropped = dropped as u64;
        }
        if dropped > 0 {
            out.reasons.push(format!(
                "{dropped} of {} selected cgroups are not measured: max_targets is {}",
                out.matched, self.max_targets
            ));
            return;
        }
        for pattern in &self.selection.patterns {
            if !self
                .selected
                .iter()
                .any(|&index| pattern.matches(scan.path(&scan.cgroups[index])))
            {
                out.reasons.push(format!(
                    "pattern {:?} matches no cgroup of {}",
                    pattern.as_str(),
                    out.hierarchy
                ));
            }
        }
    }

    /// Places the processes of the selected cgroups' subtrees in their network namespaces
    /// (nothing with the network category off), from the pass's task-iterator `records` where
    /// they carry them.
    fn place_networks(&mut self, records: &[TaskRecord], reasons: &mut Vec<String>) {
        let Some(network) = self.network.as_mut() else {
            return;
        };
        let scan = &self.scan;
        network.needed.clear();
        network.needed.resize(scan.cgroups.len(), false);
        for &index in &self.selected {
            // The root's network is the host's, read without placing every process.
            network.needed[index] = scan.cgroups[index].parent.is_some();
        }
        network.place(
            scan.cgroups.len(),
            |index| scan.cgroups[index].parent,
            |index| &scan.pids[scan.cgroups[index].pids.clone()],
            records,
        );
        reasons.extend(network.root_reason().map(str::to_owned));
        if let Some(error) = &network.error {
            reasons.push(format!(
                "network per cgroup: the network namespace of some processes cannot be told, their cgroups report none ({error})"
            ));
        }
    }

    /// Reads the selected cgroup at scan index `index` into `out.cgroups[filled]` (added if
    /// needed); false when it is not reported this time (removed since the walk, or held out
    /// while its name is awaited).
    fn report(
        &mut self,
        index: usize,
        reading: &Reading<'_>,
        filled: usize,
        out: &mut Targets,
    ) -> bool {
        let scanned = &self.scan.cgroups[index];
        let (path, walked_id) = (self.scan.path(scanned), scanned.id);
        let made = Made {
            walk: self.walks,
            roots: &self.roots,
            layout: self.layout.as_ref(),
            held_budget: self.open_file_limit / 3,
            ticks_per_second: reading.ticks_per_second,
            cadvisor: self.cadvisor,
            boot_seconds: self.boot_seconds,
        };
        let Some(entry) = entry(&mut self.entries, path, walked_id, &made) else {
            return false;
        };
        if let Some(totals) = self.parked.take(path, walked_id) {
            entry.kernel = totals;
        }
        entry.seen = self.walks;
        let settings_fit =
            self.selected.len() * (FILES_PER_TARGET + SETTINGS_PER_TARGET) <= made.held_budget;
        entry.reader.hold_settings(settings_fit);
        self.names.label(&mut entry.labels);
        // Read and accumulated as usual (no counter is lost), but not reported until named.
        let held = entry.born.elapsed() < NAME_WAIT && self.names.awaited(&entry.labels);
        if filled == out.cgroups.len() {
            out.cgroups.push(CgroupTargetReport::default());
        }
        let report = &mut out.cgroups[filled];
        if &*report.cgroup != path {
            report.cgroup = Arc::from(path);
        }
        let unchanged = self.rule.as_ref().is_some_and(|rule| rule.unchanged(index));
        let kernel = self.kernel_values.values(&entry.ids);
        entry.read(
            unchanged,
            kernel.as_ref(),
            self.backstop_every,
            &mut self.buf,
            report,
            &mut self.rule_counts,
        );
        report.labels.clone_from(&entry.labels);
        report.created_seconds = entry.created_seconds;
        report.processes = reading.process_set.map(|_| {
            let sums = self.sums[index];
            ProcessSums {
                count: sums.count,
                threads: sums.threads,
                resident_bytes: sums.resident_bytes,
                open_file_descriptors: sums.fds_complete.then_some(sums.fds),
            }
        });
        if reading.kernel {
            events::accumulate(&mut entry.kernel, &self.events.deltas[index]);
            for (cgroup, victim) in reading.victims {
                if is_below(cgroup, path) {
                    events::push_victim(&mut entry.kernel, victim.clone());
                }
            }
            match &mut report.kernel_events {
                Some(events) => events.clone_from(&entry.kernel),
                None => report.kernel_events = Some(entry.kernel.clone()),
            }
        } else {
            report.kernel_events = None;
        }
        report.network = self
            .network
            .as_mut()
            .and_then(|network| network.network(index, path));
        !held
    }
}

/// What a new entry is made with.
struct Made<'l> {
    /// The walk under way.
    walk: u64,
    roots: &'l Roots,
    layout: Option<&'l CgroupLayout>,
    held_budget: usize,
    ticks_per_second: u64,
    cadvisor: bool,
    /// When the machine booted (seconds since the epoch): no cgroup is older.
    boot_seconds: Option<u64>,
}

/// The state of the cgroup at `path` whose walked directory has the id `walked_id` (0:
/// unknown), made (its files resolved) on first selection and made again when the cgroup was
/// re-created under the same path (its counters, limits and creation time are the new one's)
/// or found in more hierarchies at the next walk ([`Entry::remake`]); `None` when it was
/// removed since the walk.
fn entry<'e>(
    entries: &'e mut FastMap<Arc<str>, Entry>,
    path: &str,
    walked_id: u64,
    made: &Made<'_>,
) -> Option<&'e mut Entry> {
    if entries
        .get_mut(path)
        .is_some_and(|entry| entry.remake(path, walked_id, made))
    {
        entries.remove(path);
    }
    if !entries.contains_key(path) {
        let layout = made.layout?;
        let target = cgroup::resolve(layout, path).ok()?;
        let held: usize = entries.values().map(|e| e.reader.held()).sum();
        let hold = held + FILES_PER_TARGET <= made.held_budget;
        let labels = path_labels(path);
        let entry = Entry {
            walked_id,
            missing_hierarchies: (target.v1.len() < layout.v1.len()).then_some(target.v1.len()),
            reader: CgroupValuesReader::measured(
                &target,
                hold,
                MeasuredFiles {
                    ticks_per_second: made.ticks_per_second,
                    cadvisor: made.cadvisor,
                },
                made.roots,
            ),
            ids: CgroupIds::of(&target),
            kernel: crate::snapshot::TargetKernelEvents::default(),
            labels: TargetLabels {
                unit: labels.unit,
                container_id: labels.container_id,
                container_runtime: labels.container_runtime.map(str::to_owned),
                container_name: None,
                container_image: None,
                pod_uid: labels.pod_uid,
                pod_name: None,
                pod_namespace: None,
                qos_class: labels.qos_class.map(str::to_owned),
                kubernetes_container: None,
            },
            seen: 0,
            created_seconds: target.creation_time(made.boot_seconds),
            born: std::time::Instant::now(),
            backstop: Backstop::new(),
            last_plan: Plan::Read,
        };
        entries.insert(Arc::from(path), entry);
    }
    entries.get_mut(path)
}

impl Entry {
    /// Whether the entry of the cgroup at `path` is to be made again: the cgroup was re-created
    /// under its path (its walked directory's id changed), or the entry was made while a
    /// hierarchy had no directory for it and this later walk finds more.
    fn remake(&mut self, path: &str, walked_id: u64, made: &Made<'_>) -> bool {
        if walked_id != 0 && self.walked_id != walked_id {
            return true;
        }
        let Some(found) = self.missing_hierarchies.filter(|_| self.seen < made.walk) else {
            return false;
        };
        self.missing_hierarchies = None;
        made.layout
            .and_then(|layout| cgroup::resolve(layout, path).ok())
            .is_some_and(|target| target.v1.len() > found)
    }

    /// Reads the cgroup's files into `report`, reusing its CPU usage and pressure values where
    /// the rule says it is `unchanged` (and the backstop does not ask for a full read).
    fn read(
        &mut self,
        unchanged: bool,
        kernel: Option<&KernelValues>,
        backstop_every: std::time::Duration,
        buf: &mut Vec<u8>,
        report: &mut CgroupTargetReport,
        counts: &mut RuleCounts,
    ) {
        let mut plan = self
            .backstop
            .plan(unchanged, backstop_every, &mut counts.misses);
        if plan == Plan::Reuse && self.reader.reusable().is_none() {
            plan = Plan::Read;
        }
        self.last_plan = plan;
        match plan {
            Plan::Read => self.reader.read(buf, report, false, kernel),
            Plan::Reuse => {
                counts.reused_reads += 1;
                self.reader.read(buf, report, true, kernel);
            }
            Plan::Check => {
                let reused = self.reader.reusable();
                self.reader.read(buf, report, false, kernel);
                let read = self.reader.last_read();
                self.backstop
                    .checked(matches!((reused, read), (Some(a), Some(b)) if a != b));
            }
        }
    }
}

/// What every selected cgroup's report is made with.
struct Reading<'r> {
    process_set: Option<&'r ProcessSet>,
    kernel: bool,
    victims: &'r [(String, crate::snapshot::TargetOomVictim)],
    ticks_per_second: u64,
}

/// Whether cgroup `cgroup` is `path` or below it.
fn is_below(cgroup: &str, path: &str) -> bool {
    path == "/"
        || cgroup == path
        || cgroup
            .strip_prefix(path)
            .is_some_and(|rest| rest.starts_with('/'))
}

impl Selection {
    fn patterns_text(&self) -> Vec<String> {
        self.patterns
            .iter()
            .map(|p| p.as_str().to_owned())
            .collect()
    }
}

/// Fills `ids` with the cgroup id (`key` of its record) of each of `processes` (sorted by pid,
/// as `records` are by tgid); one without a record (or without that id in it) through
/// `from_procfs` (`Ok(None)`: the process is gone, id 0, in no cgroup), at most
/// [`MAX_PLACED_BY_PROCFS`] of them. False, leaving `ids` unusable, when more lack a record or
/// `from_procfs` fails.
fn member_ids(
    processes: &[crate::model::ProcessCounters],
    records: &[TaskRecord],
    key: MembershipId,
    mut from_procfs: impl FnMut(u32) -> Result<Option<u64>, ()>,
    ids: &mut Vec<u64>,
) -> bool {
    ids.clear();
    let mut next = 0;
    let mut placed_by_procfs = 0;
    for process in processes {
        while records
            .get(next)
            .is_some_and(|record| record.tgid < process.pid)
        {
            next += 1;
        }
        match records
            .get(next)
            .filter(|record| record.tgid == process.pid)
        {
            Some(record) if key.of(record) != 0 => ids.push(key.of(record)),
            _ => {
                placed_by_procfs += 1;
                if placed_by_procfs > MAX_PLACED_BY_PROCFS {
                    return false;
                }
                match from_procfs(process.pid) {
                    Ok(id) => ids.push(id.unwrap_or(0)),
                    Err(()) => return false,
                }
            }
        }
    }
    true
}

/// The id of the cgroup holding `pid` in the hierarchy `key` names, from `/proc/<pid>/cgroup`
/// and its directory's inode number; `Ok(None)` when the process or its cgroup is gone.
fn id_from_procfs(
    roots: &Roots,
    layout: &CgroupLayout,
    key: MembershipId,
    pid: u32,
) -> Result<Option<u64>, ()> {
    let target = match cgroup::resolve_for_pid(layout, roots, pid) {
        Ok(target) => target,
        Err(error) if error.is_gone() => return Ok(None),
        Err(_) => return Err(()),
    };
    let dir = match key {
        MembershipId::Unified => target.v2.as_ref(),
        MembershipId::V1(at) => V1_CONTROLLERS
            .get(at)
            .and_then(|controller| target.v1_dir(controller)),
    }
    .ok_or(())?;
    cgroup::cgroup_id(&dir.dir).map_err(|_| ())
}

/// Per scanned cgroup: whether it or a descendant lists a process.
fn populated(scan: &Scan) -> Vec<bool> {
    let mut populated: Vec<bool> = scan.cgroups.iter().map(|c| !c.pids.is_empty()).collect();
    for index in (1..scan.cgroups.len()).rev() {
        if let (true, Some(parent)) = (populated[index], scan.cgroups[index].parent) {
            populated[parent] = true;
        }
    }
    populated
}

#[cfg(test)]
mod iter_bench;
#[cfg(test)]
pub(crate) mod iter_tests;
#[cfg(test)]
mod rule_tests;
#[cfg(test)]
mod tests;
