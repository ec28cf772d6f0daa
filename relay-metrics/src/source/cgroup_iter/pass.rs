//! The measured cgroups' (`extensions.cgroups`) values that the kernel keeps exactly in memory,
//! from one cgroup-iterator read per hierarchy and snapshot instead of a file per cgroup and
//! value. Each measured cgroup is joined to its record by the inode number of its directory in
//! each hierarchy (the record's kernfs id), found once when the cgroup is first measured.
//!
//! A v1 host has one hierarchy per controller (`memory`, `pids`, `cpu`), a v2 host the unified
//! one. Only kinds that [`exact::check_kinds`] found equal to their files (once, at load: a kernel's
//! layout of these counters does not change while it runs) are served; the others, the cgroups
//! past [`MAX_CGROUPS`] of a walk, and every cgroup of a walk that failed read their files, and
//! [`CgroupIterPass::describe`] says so.

use std::path::PathBuf;
use std::sync::Arc;

use super::exact::{self, Kind, Source, Verdict};
use super::{CgroupIter, CgroupRecord, MAX_CGROUPS};
use crate::config::CgroupSource;
use crate::source::cgroup::{cgroup_id, CgroupLayout, CgroupTarget};
use crate::FastMap;

/// The `extensions.collector.cgroup_source` values.
pub(crate) const BPF_ITER: &str = "bpf_iter";
/// See [`BPF_ITER`].
pub(crate) const FILES: &str = "files";

/// Measured cgroups from which on `auto` loads and reads the iterator: a floor, so that a few
/// cgroups never pay for the load (nor aya's parse of the kernel BTF) whatever the hierarchies'
/// size; above it [`RECORDS_PER_MEASURED`] decides (docs/PERFORMANCE.md, "Measured cgroups:
/// files against the cgroup iterator").
pub(crate) const BREAK_EVEN: usize = 8;

/// `auto` reads the iterator while each measured cgroup stands for at most this many cgroups of
/// the walks: a measured v1 cgroup spares ~2.3 µs of file reads, and each cgroup of a hierarchy
/// costs its walk ~0.44 µs, whether measured or not (docs/PERFORMANCE.md).
const RECORDS_PER_MEASURED: usize = 5;

/// Under `auto`, while the files serve because the hierarchies are large, the walks are made
/// again after this many snapshots, to learn their size anew.
const RECOUNT_EVERY: u64 = 64;

/// A controller whose values the iterator serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Controller {
    Memory,
    Pids,
    Cpu,
}

impl Controller {
    const ALL: [Controller; 3] = [Controller::Memory, Controller::Pids, Controller::Cpu];

    fn name(self) -> &'static str {
        match self {
            Controller::Memory => "memory",
            Controller::Pids => "pids",
            Controller::Cpu => "cpu",
        }
    }

    /// The kinds whose every file the values reader can leave unread when they are served
    /// (v2 `memory.events` and `cpu.stat` hold other values too, so their kinds are not here).
    /// The limits are settings: served, their files are not opened at the settings' reads.
    fn kinds(self, v2: bool) -> &'static [Kind] {
        match (self, v2) {
            (Controller::Memory, false) => &[
                Kind::MemoryUsage,
                Kind::MemoryPeak,
                Kind::MemoryLimit,
                Kind::MemoryFailcnt,
                Kind::OomKill,
            ],
            (Controller::Memory, true) => &[Kind::MemoryUsage, Kind::MemoryPeak, Kind::MemoryLimit],
            (Controller::Pids, _) => &[Kind::PidsCurrent, Kind::PidsLimit],
            (Controller::Cpu, false) => &[
                Kind::CfsPeriods,
                Kind::CfsThrottledPeriods,
                Kind::CfsThrottledTime,
                Kind::CfsQuota,
                Kind::CfsPeriod,
            ],
            (Controller::Cpu, true) => &[Kind::CfsQuota, Kind::CfsPeriod],
        }
    }
}

/// One measured cgroup's values from the iterator, in its files' units (bytes, ns; µs for the
/// CFS quota and period), each only where its kind passed the check and the record has it.
/// A limit the file prints as `max` (v1's CFS quota: `-1`) is `u64::MAX`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct KernelValues {
    pub memory_usage_bytes: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    pub memory_failcnt: Option<u64>,
    pub oom_kill: Option<u64>,
    pub memory_limit_bytes: Option<u64>,
    pub pids_current: Option<u64>,
    pub pids_limit: Option<u64>,
    /// CFS periods, throttled periods and throttled time (ns): all three, or none.
    pub cfs: Option<(u64, u64, u64)>,
    /// CFS quota and period (µs): both, or none.
    pub cfs_limit: Option<(u64, u64)>,
}

/// A measured cgroup's directory inode in each controller's hierarchy ([`Controller::ALL`]
/// order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CgroupIds([Option<u64>; 3]);

impl CgroupIds {
    /// The ids of `target`'s directories (`None` where it has none, or it is gone).
    pub(crate) fn of(target: &CgroupTarget) -> Self {
        Self(Controller::ALL.map(|controller| {
            let (_, dir) = target.controller_dir(controller.name())?;
            cgroup_id(&dir.dir).ok().flatten()
        }))
    }
}

/// One hierarchy read by the iterator.
#[derive(Debug)]
struct Hierarchy {
    iter: CgroupIter,
    v2: bool,
    controllers: Vec<Controller>,
    verdicts: Vec<Verdict>,
    records: Vec<CgroupRecord>,
    /// kernfs id → index in [`Self::records`] (the root left out: its files are computed from
    /// global counters, or absent).
    index: FastMap<u64, usize>,
    /// Why the last read left some or all of its cgroups to their files.
    note: Option<String>,
}

impl Hierarchy {
    fn serves(&self, kind: Kind) -> bool {
        self.verdicts
            .iter()
            .any(|verdict| verdict.kind == kind && verdict.source == Source::Iterator)
    }

    fn serves_any(&self) -> bool {
        self.verdicts
            .iter()
            .any(|verdict| verdict.source == Source::Iterator)
    }

    /// One walk into [`Self::records`] and [`Self::index`].
    fn read(&mut self) {
        self.index.clear();
        self.note = match self.iter.read(&mut self.records) {
            Ok(truncated) => truncated.then(|| {
                format!(
                    "more than {MAX_CGROUPS} cgroups in {}: those past the first {MAX_CGROUPS} of \
                     its walk read their files",
                    self.iter.root().display()
                )
            }),
            Err(error) => {
                self.records.clear();
                Some(format!(
                    "reading the cgroup iterator of {}: {error}; its cgroups read their files",
                    self.iter.root().display()
                ))
            }
        };
        self.index.extend(
            self.records
                .iter()
                .enumerate()
                .filter(|(_, record)| record.level > 0)
                .map(|(at, record)| (record.id, at)),
        );
    }

    /// The served values of the cgroup with `ids` into `out`; false when no record has it.
    fn values(&self, ids: &CgroupIds, page_bytes: u64, out: &mut KernelValues) -> bool {
        let mut found = false;
        for &controller in &self.controllers {
            let Some(id) = ids.0[controller as usize] else {
                continue;
            };
            let Some(record) = self.index.get(&id).map(|&at| &self.records[at]) else {
                continue;
            };
            found = true;
            let value = |kind: Kind| {
                self.serves(kind)
                    .then(|| kind.value(record, page_bytes, self.v2))
                    .flatten()
            };
            match controller {
                Controller::Memory => {
                    out.memory_usage_bytes = value(Kind::MemoryUsage);
                    out.memory_peak_bytes = value(Kind::MemoryPeak);
                    out.memory_failcnt = value(Kind::MemoryFailcnt);
                    out.oom_kill = value(Kind::OomKill);
                    out.memory_limit_bytes = value(Kind::MemoryLimit);
                }
                Controller::Pids => {
                    out.pids_current = value(Kind::PidsCurrent);
                    out.pids_limit = value(Kind::PidsLimit);
                }
                Controller::Cpu => {
                    out.cfs = value(Kind::CfsPeriods)
                        .zip(value(Kind::CfsThrottledPeriods))
                        .zip(value(Kind::CfsThrottledTime))
                        .map(|((periods, throttled), ns)| (periods, throttled, ns));
                    out.cfs_limit = value(Kind::CfsQuota).zip(value(Kind::CfsPeriod));
                }
            }
        }
        found
    }
}

/// Whether the iterator is loaded.
#[derive(Debug)]
enum State {
    /// `files`, or a load that failed: the reason is [`CgroupIterPass::reason`].
    Files,
    /// `auto` while fewer than [`BREAK_EVEN`] cgroups were measured: not loaded yet, so a few
    /// cgroups never pay for it (nor for aya's parse of the kernel BTF).
    Deferred(CgroupLayout),
    Loaded(Vec<Hierarchy>),
}

/// The iterator's side of the measured cgroups' pass: [`Self::read`] once per snapshot, then
/// [`Self::values`] per cgroup.
#[derive(Debug)]
pub(crate) struct CgroupIterPass {
    mode: CgroupSource,
    state: State,
    page_bytes: u64,
    /// Whether the last snapshot read the iterator.
    active: bool,
    /// The cgroups the last walks met, all hierarchies together.
    walked: usize,
    /// Snapshots since the last walks.
    since_walk: u64,
    /// Why the last snapshot's values came from the files, wholly or in part.
    reason: Option<Arc<str>>,
}

impl CgroupIterPass {
    /// The pass `mode` asks for on `layout`; `bpf_iter` loads the iterator at once and fails,
    /// with the reason, where it cannot load.
    pub(crate) fn new(mode: CgroupSource, layout: Option<&CgroupLayout>) -> Result<Self, String> {
        let mut pass = Self {
            mode,
            state: State::Files,
            page_bytes: crate::source::procfs::page_size_bytes().unwrap_or(4096),
            active: false,
            walked: 0,
            since_walk: 0,
            reason: None,
        };
        let Some(layout) = layout else {
            pass.reason = Some(Arc::from("no cgroup file system is mounted"));
            return Ok(pass);
        };
        match mode {
            CgroupSource::Files => {
                pass.reason = Some(Arc::from("extensions.cgroup_source is \"files\""));
            }
            CgroupSource::Auto => pass.state = State::Deferred(layout.clone()),
            CgroupSource::BpfIter => match load(layout) {
                Ok(hierarchies) => pass.state = State::Loaded(hierarchies),
                Err(error) => {
                    return Err(format!(
                        "extensions.cgroup_source is \"bpf_iter\", but the cgroup iterator \
                         cannot serve: {error}"
                    ))
                }
            },
        }
        Ok(pass)
    }

    /// Reads each hierarchy once for a snapshot measuring `measured` cgroups (none: nothing is
    /// read). `auto` loads the iterator the first time `measured` reaches [`BREAK_EVEN`], and
    /// reads it only while it is the cheaper path ([`RECORDS_PER_MEASURED`]).
    pub(crate) fn read(&mut self, measured: usize) {
        self.active = false;
        if measured == 0 {
            return;
        }
        let forced = self.mode == CgroupSource::BpfIter;
        if !forced && measured < BREAK_EVEN {
            if !matches!(self.state, State::Files) {
                self.set_reason(format!(
                    "{measured} measured cgroups: their files cost less than the cgroup \
                     iterator below {BREAK_EVEN}"
                ));
            }
            return;
        }
        if let State::Deferred(layout) = &self.state {
            self.state = match load(layout) {
                Ok(hierarchies) => State::Loaded(hierarchies),
                Err(error) => {
                    self.reason = Some(Arc::from(format!(
                        "the cgroup iterator cannot serve: {error}"
                    )));
                    State::Files
                }
            };
        }
        let State::Loaded(hierarchies) = &mut self.state else {
            return;
        };
        // `auto` against the cgroups the last walks met: the walks cost per cgroup of the
        // hierarchies, the files per measured cgroup. Counted again every RECOUNT_EVERY.
        let walked = self.walked;
        if !forced && measured * RECORDS_PER_MEASURED < walked && self.since_walk < RECOUNT_EVERY {
            self.since_walk += 1;
            self.set_reason(format!(
                "{measured} measured cgroups against {walked} cgroups the cgroup iterator \
                 walks: their files cost less (the iterator from one measured per \
                 {RECORDS_PER_MEASURED} walked)"
            ));
            return;
        }
        // A hierarchy whose every kind failed the check is not walked.
        for hierarchy in hierarchies.iter_mut().filter(|h| h.serves_any()) {
            hierarchy.read();
        }
        self.walked = hierarchies.iter().map(|h| h.records.len()).sum();
        self.since_walk = 0;
        self.active = true;
        let reason = fallbacks(hierarchies);
        self.set_reason(reason);
    }

    /// The cgroups the last walks met, all hierarchies together.
    #[cfg(test)]
    pub(crate) fn walked(&self) -> usize {
        self.walked
    }

    fn set_reason(&mut self, reason: String) {
        if reason.is_empty() {
            self.reason = None;
        } else if self.reason.as_deref() != Some(reason.as_str()) {
            self.reason = Some(Arc::from(reason));
        }
    }

    /// The iterator's values of the cgroup with `ids` in the last read, `None` where it did not
    /// serve (then every file is read).
    pub(crate) fn values(&self, ids: &CgroupIds) -> Option<KernelValues> {
        let State::Loaded(hierarchies) = &self.state else {
            return None;
        };
        if !self.active {
            return None;
        }
        let mut out = KernelValues::default();
        let mut found = false;
        for hierarchy in hierarchies {
            found |= hierarchy.values(ids, self.page_bytes, &mut out);
        }
        found.then_some(out)
    }

    /// `extensions.collector.cgroup_source` and `cgroup_source_reason` of the last snapshot:
    /// [`BPF_ITER`] when the iterator served some kind, with the kinds and cgroups it did not
    /// serve and why; else [`FILES`], with why.
    pub(crate) fn describe(&self) -> (&'static str, Option<&Arc<str>>) {
        let served = match &self.state {
            State::Loaded(hierarchies) => {
                self.active && hierarchies.iter().any(Hierarchy::serves_any)
            }
            _ => false,
        };
        (if served { BPF_ITER } else { FILES }, self.reason.as_ref())
    }

    /// Checks the kinds again, with `skew` added to the iterator's values of one kind (the
    /// test hook of `exact::check_skewed`).
    #[cfg(test)]
    pub(crate) fn recheck_skewed(&mut self, skew: Option<(Kind, u64)>) {
        if let State::Loaded(hierarchies) = &mut self.state {
            for hierarchy in hierarchies {
                let kinds = kinds_of(&hierarchy.controllers, hierarchy.v2);
                hierarchy.verdicts = exact::check_kinds(&mut hierarchy.iter, &kinds, skew);
            }
        }
    }
}

/// The kinds of `controllers` the reader can take from the iterator.
fn kinds_of(controllers: &[Controller], v2: bool) -> Vec<Kind> {
    controllers
        .iter()
        .flat_map(|controller| controller.kinds(v2).iter().copied())
        .collect()
}

/// Loads an iterator on each hierarchy carrying a controller with kinds to serve, and checks
/// those kinds against their files.
fn load(layout: &CgroupLayout) -> Result<Vec<Hierarchy>, String> {
    let mut by_mount: Vec<(PathBuf, bool, Vec<Controller>)> = Vec::new();
    for controller in Controller::ALL {
        let (mount, v2) = match layout.v1_hierarchy(controller.name()) {
            Some(hierarchy) => (&hierarchy.mount.mount_point, false),
            None => match &layout.v2 {
                Some(mount) => (&mount.mount_point, true),
                None => continue,
            },
        };
        if controller.kinds(v2).is_empty() {
            continue;
        }
        match by_mount.iter_mut().find(|(at, _, _)| at == mount) {
            Some((_, _, controllers)) => controllers.push(controller),
            None => by_mount.push((mount.clone(), v2, vec![controller])),
        }
    }
    let mut hierarchies = Vec::with_capacity(by_mount.len());
    for (mount, v2, controllers) in by_mount {
        let mut iter = CgroupIter::load(&mount).map_err(|error| error.0)?;
        let verdicts = exact::check_kinds(&mut iter, &kinds_of(&controllers, v2), None);
        hierarchies.push(Hierarchy {
            iter,
            v2,
            controllers,
            verdicts,
            records: Vec::new(),
            index: FastMap::default(),
            note: None,
        });
    }
    if hierarchies.is_empty() {
        return Err("no memory, pids or cpu hierarchy is mounted".to_owned());
    }
    Ok(hierarchies)
}

/// What the iterator did not serve in the last read, and why: the kinds that failed the check
/// (named as in [`Kind::name`]) and the walks' notes; empty when it served everything.
fn fallbacks(hierarchies: &[Hierarchy]) -> String {
    let mut parts = Vec::new();
    for hierarchy in hierarchies {
        for verdict in &hierarchy.verdicts {
            if verdict.source == Source::File {
                parts.push(format!(
                    "{} from files: {}",
                    verdict.kind.name(),
                    verdict.reason
                ));
            }
        }
        parts.extend(hierarchy.note.clone());
    }
    parts.join("; ")
}
