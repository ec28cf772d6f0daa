//! Kernel-event counters from eBPF programs on scheduler, OOM and memory-reclaim tracepoints.
//!
//! [`EbpfSource::load`] loads the committed object (built by `cargo xtask build-ebpf` from
//! `relay-metrics-ebpf/`) once, with the tracepoint field offsets of the running kernel, and
//! attaches each program on its own: a program that fails disables only its counters and is named
//! in [`EbpfSource::status`]. Each tick then reads the scope and machine-wide counters from
//! memory-mapped arrays (per-process counters with per-key lookups) into caller-provided structs,
//! and drains OOM victims from the ring buffer into a bounded list.
//! Dropping the source detaches every program, without waiting for the kernel: in a detaching
//! child process (programs loaded by a child) or on a thread of its own (loaded here).
//!
//! Where: in this process by default; in a short-lived child process once the program called
//! [`init_child_loader`] (the `relay-metrics` binary does), which keeps aya's parse of the kernel
//! BTF out of this process's memory (see the `loader` module).
//!
//! cgroup attribution: the kernel side keys by `bpf_get_current_cgroup_id`, the cgroup v2 id. On
//! hybrid hosts every process sits in the v2 root there, so callers attribute v1 cgroups by pid:
//! they track the cgroup's processes as a scope (see [`EbpfSource::track_tree`]).

mod dispatch;
pub(crate) mod fds;
mod format;
pub(crate) mod loader;
mod lockdown;
mod mapped;
mod setup;
#[cfg(test)]
pub(crate) use setup::read_formats;
pub(crate) mod spawn;
#[cfg(test)]
pub(crate) mod tests;
mod types;

use std::collections::VecDeque;
use std::os::fd::{AsRawFd as _, OwnedFd};

use aya::maps::{Array, HashMap, IterableMap as _, Map, MapData, MapError, RingBuf};
use aya::{Ebpf, EbpfLoader};
pub(crate) use relay_metrics_common::{
    CgroupStats, GlobalStats, ScopeStats, TgidStats, MAX_SCOPES,
};
use relay_metrics_common::{Config, OomVictimRecord, COMM_LEN};

use crate::source::file::read_once;
use crate::source::held::Published;
use crate::source::Roots;

/// The tracefs-format and BPF-fdinfo parsers, for [`crate::internals`] (the fuzz targets).
pub(crate) mod fuzzing {
    pub use super::fds::{link_program_id, program_stats};
    pub use super::format::{config as tracepoint_config, sleep_state_mask, Formats};
}
pub use dispatch::{init_child_loader, IN_PROCESS_ENV};
use loader::ChildOutcome;
pub(crate) use loader::LoadedBy;
use mapped::MappedArray;
use spawn::LoaderCommand;
use types::map_error;
pub use types::EbpfOptions;
pub(crate) use types::{
    EbpfCounters, EbpfReadError, EbpfUnavailable, OomVictim, ProgramRunStats, ProgramSpec,
    ProgramState, ProgramStatus, ScopeId, PROGRAMS,
};

/// The eBPF object, committed so that a plain `cargo build` needs no eBPF toolchain.
static OBJECT: &[u8] = aya::include_bytes_aligned!("relay-metrics.bpf.o");

/// The maps the source reads, by their names in the object.
const MAP_NAMES: [&str; 8] = [
    "TGIDS",
    "CGROUPS",
    "CREATED_BY",
    "TRACKED",
    "TRACKING_GENERATION",
    "SCOPES",
    "GLOBAL",
    "OOM_EVENTS",
];

/// What keeps the programs loaded and attached.
enum Attachment {
    /// aya's object in this process: dropping it detaches and unloads, on a thread of its own
    /// (`None` once handed to that thread).
    Object(Option<Ebpf>),
    /// Descriptors handed over by a loader child: closing a link detaches its program, closing
    /// the program's descriptor then unloads it.
    Handed {
        /// Held only to keep the programs attached until dropped.
        links: Vec<OwnedFd>,
        programs: Vec<(ProgramSpec, OwnedFd)>,
        /// Starts the process that detaches the links when this is dropped.
        loader: LoaderCommand,
    },
}

impl Attachment {
    /// Lets go of the links: handed to a detaching child (`loader::detach`), so that this
    /// process need not wait for the kernel's detach, or closed here when that fails. Returns
    /// the child's pid, or why the links were closed here.
    fn detach(&mut self) -> Result<u32, String> {
        let Self::Handed { links, loader, .. } = self else {
            return Err("loaded in this process: aya detaches on drop".into());
        };
        if links.is_empty() {
            return Err("no link left to detach".into());
        }
        match loader::hand_over(loader, std::mem::take(links)) {
            Ok(pid) => Ok(pid),
            Err((links, why)) => {
                loader::close_concurrently(links);
                Err(why)
            }
        }
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        if let Self::Object(ebpf) = self {
            if let Some(ebpf) = ebpf.take() {
                detach_in_background(ebpf);
            }
            return;
        }
        if let Err(why) = self.detach() {
            tracing::debug!("eBPF links closed in this process: {why}");
        }
    }
}

/// Drops aya's object on a thread of its own. Each link's close waits for RCU grace periods
/// (0.4–0.9 s for our programs here, one after another), which the thread that dropped the
/// source (a Python `record()` block's end, a deactivation) need not wait for; the programs
/// count into maps nobody reads meanwhile. A process that exits first has the kernel close them.
fn detach_in_background(ebpf: Ebpf) {
    // A thread that cannot start drops the object (and detaches) right here instead.
    let _ = std::thread::Builder::new()
        .name("relay-metrics-ebpf-detach".into())
        .spawn(move || drop(ebpf));
}

/// The descriptors aya's object holds: one per map left in it, per loaded program and per
/// attached program's link (the maps taken out of it are counted where they are kept).
fn descriptors_of(ebpf: &Ebpf, status: &[ProgramStatus]) -> usize {
    let maps = ebpf.maps().count();
    let programs = ebpf
        .programs()
        .filter(|(_, program)| program.fd().is_ok())
        .count();
    let links = status
        .iter()
        .filter(|s| s.state == ProgramState::Attached)
        .count();
    maps + programs + links
}

/// The programs as loaded by [`load_programs`] (in this process or in the loader child).
struct Loaded {
    ebpf: Ebpf,
    status: Vec<ProgramStatus>,
    config: Config,
}

/// The load steps shared by both places: privilege, tracefs, this kernel's record layouts, the
/// object, then each program attached on its own.
fn load_programs(roots: &Roots, tracked_only: bool) -> Result<Loaded, EbpfUnavailable> {
    setup::check_privilege(roots)?;
    if lockdown::is_confidentiality(roots) {
        return Err(EbpfUnavailable::TracingDisabled {
            why: "kernel lockdown is 'confidentiality'".to_owned(),
        });
    }
    let events = setup::tracefs_events(roots).map_err(lockdown::explain_busy_tracefs)?;
    let mut config = format::config(&setup::read_formats(&events));
    config.sched_tracked_only = u16::from(tracked_only);
    let mut ebpf = EbpfLoader::new()
        .override_global("CONFIG", &config, true)
        .load(OBJECT)
        .map_err(|error| EbpfUnavailable::Load(Box::new(error)))?;
    let mut status = Vec::with_capacity(PROGRAMS.len());
    for spec in PROGRAMS {
        let state = match setup::attach(&mut ebpf, spec, &config, &events) {
            Ok(()) => ProgramState::Attached,
            Err(reason) => ProgramState::Failed(reason),
        };
        status.push(ProgramStatus { spec, state });
    }
    if !status.iter().any(|s| s.state == ProgramState::Attached) {
        let failures: Vec<String> = status
            .iter()
            .map(|s| format!("{}: {:?}", s.spec.program, s.state))
            .collect();
        return Err(EbpfUnavailable::NothingAttached(failures.join("; ")));
    }
    Ok(Loaded {
        ebpf,
        status,
        config,
    })
}

/// The loaded programs and their maps.
pub struct EbpfSource {
    // Fields drop in order: the maps close before the programs are detached and unloaded.
    tgids: Option<HashMap<MapData, u32, TgidStats>>,
    cgroups: Option<HashMap<MapData, u64, CgroupStats>>,
    created_by: Option<HashMap<MapData, u32, u32>>,
    tracked: Option<HashMap<MapData, u32, u32>>,
    /// Bumped after every change to `tracked`, so that the programs look scopes up again.
    tracking_generation: Option<Array<MapData, u32>>,
    /// The last generation written.
    generation: u32,
    scopes: Option<Array<MapData, ScopeStats>>,
    global: Option<Array<MapData, GlobalStats>>,
    /// `SCOPES` and `GLOBAL` mapped into memory, read on every tick without a syscall; `None`
    /// (falling back to lookups) when the kernel refused the mapping.
    scopes_view: Option<MappedArray<ScopeStats>>,
    global_view: Option<MappedArray<GlobalStats>>,
    oom_events: Option<RingBuf<MapData>>,
    attachment: Attachment,
    loaded_by: LoadedBy,
    status: Vec<ProgramStatus>,
    config: Config,
    free_scopes: u64,
    recent_oom: VecDeque<OomVictim>,
    max_recent_oom: usize,
    oom_victims_drained: u64,
    boot_to_unix_ns: i128,
    roots: Roots,
    comm_buf: Vec<u8>,
    /// The descriptors of the kept maps and of the attachment, in the process-wide count the
    /// collector's own descriptor count leaves out (see `source::held`).
    descriptors: Published,
}

impl std::fmt::Debug for EbpfSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EbpfSource")
            .field("status", &self.status)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl EbpfSource {
    /// Loads the programs with this kernel's tracepoint layouts and attaches each one it can:
    /// in a loader child process when this program called [`init_child_loader`], else (or
    /// when the child cannot hand them over) in this process.
    pub fn load(options: &EbpfOptions) -> Result<Self, EbpfUnavailable> {
        Self::load_via(options, spawn::command())
    }

    fn load_via(
        options: &EbpfOptions,
        loader: Option<&LoaderCommand>,
    ) -> Result<Self, EbpfUnavailable> {
        let mut loaded_by = LoadedBy::ThisProcess;
        if let Some(loader) = loader {
            // Cheap, and it spares an unprivileged process the child.
            setup::check_privilege(&options.roots)?;
            match loader::load_in_child(&options.roots, options.tracked_only, loader) {
                ChildOutcome::Handed(handover) => {
                    let attached = handover.links.len() + handover.programs.len();
                    let attachment = Attachment::Handed {
                        links: handover.links,
                        programs: handover.programs,
                        loader: loader.clone(),
                    };
                    return Ok(Self::assemble(
                        handover.maps,
                        (attachment, attached),
                        LoadedBy::ChildProcess { pid: handover.pid },
                        handover.status,
                        handover.config,
                        options,
                    ));
                }
                ChildOutcome::Failed(error) => return Err(error),
                ChildOutcome::InProcess(why) => loaded_by = LoadedBy::ThisProcessInstead(why),
            }
        }
        let Loaded {
            mut ebpf,
            status,
            config,
        } = load_programs(&options.roots, options.tracked_only)?;
        let maps = MAP_NAMES
            .iter()
            .filter_map(|&name| Some((name, ebpf.take_map(name)?)))
            .collect();
        let attached = descriptors_of(&ebpf, &status);
        Ok(Self::assemble(
            maps,
            (Attachment::Object(Some(ebpf)), attached),
            loaded_by,
            status,
            config,
            options,
        ))
    }

    fn assemble(
        mut maps: Vec<(&'static str, Map)>,
        (attachment, attached): (Attachment, usize),
        loaded_by: LoadedBy,
        status: Vec<ProgramStatus>,
        config: Config,
        options: &EbpfOptions,
    ) -> Self {
        let boot_to_unix_ns = setup::clock_ns(nix::time::ClockId::CLOCK_REALTIME)
            - setup::clock_ns(nix::time::ClockId::CLOCK_BOOTTIME);
        let max_recent_oom = options.max_recent_oom_victims;
        let mut take_map = |name: &str| {
            let index = maps.iter().position(|(map, _)| *map == name)?;
            Some(maps.swap_remove(index).1)
        };
        let scopes: Option<Array<MapData, ScopeStats>> =
            take_map("SCOPES").and_then(|m| Array::try_from(m).ok());
        let global: Option<Array<MapData, GlobalStats>> =
            take_map("GLOBAL").and_then(|m| Array::try_from(m).ok());
        let mut source = Self {
            tgids: take_map("TGIDS").and_then(|m| HashMap::try_from(m).ok()),
            cgroups: take_map("CGROUPS").and_then(|m| HashMap::try_from(m).ok()),
            created_by: take_map("CREATED_BY").and_then(|m| HashMap::try_from(m).ok()),
            tracked: take_map("TRACKED").and_then(|m| HashMap::try_from(m).ok()),
            tracking_generation: take_map("TRACKING_GENERATION")
                .and_then(|m| Array::try_from(m).ok()),
            generation: 0,
            scopes_view: scopes.as_ref().and_then(|a| MappedArray::new(a.map()).ok()),
            global_view: global.as_ref().and_then(|a| MappedArray::new(a.map()).ok()),
            scopes,
            global,
            oom_events: take_map("OOM_EVENTS").and_then(|m| RingBuf::try_from(m).ok()),
            attachment,
            loaded_by,
            status,
            config,
            free_scopes: u64::MAX >> (64 - MAX_SCOPES),
            recent_oom: VecDeque::with_capacity(max_recent_oom),
            max_recent_oom,
            oom_victims_drained: 0,
            boot_to_unix_ns,
            roots: options.roots.clone(),
            comm_buf: Vec::with_capacity(64),
            descriptors: Published::default(),
        };
        // The maps not kept closed with `maps`. The attachment's share is withdrawn when it is
        // dropped: aya's object then closes its descriptors on a thread of its own, for up to a
        // few seconds, in which they count as the process's.
        let kept = [
            source.tgids.is_some(),
            source.cgroups.is_some(),
            source.created_by.is_some(),
            source.tracked.is_some(),
            source.tracking_generation.is_some(),
            source.scopes.is_some(),
            source.global.is_some(),
            source.oom_events.is_some(),
        ];
        let kept = kept.iter().filter(|&&kept| kept).count();
        source.descriptors.set(kept + attached);
        source
    }

    /// Where the programs were loaded (in a child process, or in this one and why).
    pub fn loaded_by(&self) -> &LoadedBy {
        &self.loaded_by
    }

    /// Each program's state after loading.
    pub fn status(&self) -> &[ProgramStatus] {
        &self.status
    }

    /// True when `program` (a [`ProgramSpec::program`] name) is attached.
    pub fn is_attached(&self, program: &str) -> bool {
        self.status
            .iter()
            .any(|s| s.spec.program == program && s.state == ProgramState::Attached)
    }

    /// The field offsets given to the programs.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// True when the scheduler programs count only the threads of tracked processes (loaded
    /// with [`EbpfOptions::tracked_only`]).
    pub fn tracks_only_scopes(&self) -> bool {
        self.config.sched_tracked_only != 0
    }

    /// The counters of one tgid, `None` when it has none (nothing counted, or evicted).
    pub fn tgid(&self, tgid: u32) -> Result<Option<TgidStats>, EbpfReadError> {
        let map = self
            .tgids
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("TGIDS"))?;
        lookup(map.get(&tgid, 0), "TGIDS")
    }

    /// The counters of one cgroup v2 id.
    pub fn cgroup(&self, cgroup_id: u64) -> Result<Option<CgroupStats>, EbpfReadError> {
        let map = self
            .cgroups
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("CGROUPS"))?;
        lookup(map.get(&cgroup_id, 0), "CGROUPS")
    }

    /// The tgid that created process `tgid`, when it was created after loading.
    pub fn created_by(&self, tgid: u32) -> Result<Option<u32>, EbpfReadError> {
        let map = self
            .created_by
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("CREATED_BY"))?;
        lookup(map.get(&tgid, 0), "CREATED_BY")
    }

    /// True when the scope and machine-wide counters are read from memory-mapped maps (no
    /// syscall per read).
    pub fn counters_mapped(&self) -> bool {
        self.scopes_view.is_some() && self.global_view.is_some()
    }

    /// Machine-wide counters.
    pub fn global(&self) -> Result<GlobalStats, EbpfReadError> {
        if let Some(view) = &self.global_view {
            return view.get(0).map_err(map_error("GLOBAL"));
        }
        let map = self
            .global
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("GLOBAL"))?;
        map.get(&0, 0).map_err(map_error("GLOBAL"))
    }

    /// Starts counting a process tree in the kernel: `members` (the tree's current tgids) and
    /// every process they or their descendants create from now on. Returns the scope to read.
    pub fn track_tree(&mut self, members: &[u32]) -> Result<ScopeId, EbpfReadError> {
        if self.free_scopes == 0 {
            return Err(EbpfReadError::ScopesFull);
        }
        let slot = self.free_scopes.trailing_zeros();
        let scopes = self
            .scopes
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("SCOPES"))?;
        scopes
            .set(slot, ScopeStats::default(), 0)
            .map_err(map_error("SCOPES"))?;
        let tracked = self
            .tracked
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKED"))?;
        for &tgid in members {
            tracked
                .insert(tgid, slot, 0)
                .map_err(map_error("TRACKED"))?;
        }
        self.free_scopes &= !(1u64 << slot);
        self.tracking_changed()?;
        Ok(ScopeId(slot))
    }

    /// Tells the programs that `TRACKED` changed: each process looks its scope up again at its
    /// next event (they cache it in their `TGIDS` entry).
    fn tracking_changed(&mut self) -> Result<(), EbpfReadError> {
        let map = self
            .tracking_generation
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKING_GENERATION"))?;
        // New TGIDS entries carry generation 0, so 0 is skipped: it would match them all.
        let next = self.generation.wrapping_add(1).max(1);
        map.set(0, next, 0)
            .map_err(map_error("TRACKING_GENERATION"))?;
        self.generation = next;
        Ok(())
    }

    /// Adds processes to a tracked scope (e.g. processes that moved into a measured cgroup);
    /// what they create from now on is counted in the scope too.
    pub fn add_to_scope(&mut self, scope: ScopeId, tgids: &[u32]) -> Result<(), EbpfReadError> {
        let tracked = self
            .tracked
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKED"))?;
        for &tgid in tgids {
            tracked
                .insert(tgid, scope.0, 0)
                .map_err(map_error("TRACKED"))?;
        }
        self.tracking_changed()
    }

    /// Removes processes from a tracked scope (processes that left a measured cgroup, or a tree
    /// by being re-parented): their events and creations no longer count in it.
    pub fn remove_from_scope(&mut self, tgids: &[u32]) -> Result<(), EbpfReadError> {
        let tracked = self
            .tracked
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKED"))?;
        for tgid in tgids {
            match tracked.remove(tgid) {
                Ok(()) => {}
                // An exited process was removed by the kernel already.
                Err(error) if is_key_not_found(&error) => {}
                Err(source) => return Err(map_error("TRACKED")(source)),
            }
        }
        self.tracking_changed()
    }

    /// Stops counting a scope and forgets its members.
    pub fn untrack(&mut self, scope: ScopeId) -> Result<(), EbpfReadError> {
        let tracked = self
            .tracked
            .as_mut()
            .ok_or(EbpfReadError::MissingMap("TRACKED"))?;
        let members: Vec<u32> = tracked
            .iter()
            .filter_map(Result::ok)
            .filter(|&(_, slot)| slot == scope.0)
            .map(|(tgid, _)| tgid)
            .collect();
        self.remove_from_scope(&members)?;
        self.free_scopes |= 1u64 << scope.0;
        Ok(())
    }

    /// The kernel's counters of a scope.
    pub fn scope(&self, scope: ScopeId) -> Result<ScopeStats, EbpfReadError> {
        match &self.scopes_view {
            Some(view) => view.get(scope.0).map_err(map_error("SCOPES")),
            None => self.scope_by_lookup(scope),
        }
    }

    /// [`EbpfSource::scope`] through a `bpf()` lookup (the fallback when the map is not mapped).
    fn scope_by_lookup(&self, scope: ScopeId) -> Result<ScopeStats, EbpfReadError> {
        let map = self
            .scopes
            .as_ref()
            .ok_or(EbpfReadError::MissingMap("SCOPES"))?;
        map.get(&scope.0, 0).map_err(map_error("SCOPES"))
    }

    /// The counters of a tracked scope into `out`: read from the mapped `SCOPES` array, no
    /// syscall however many processes the scope has.
    pub fn scope_counters(
        &self,
        scope: ScopeId,
        out: &mut EbpfCounters,
    ) -> Result<(), EbpfReadError> {
        *out = EbpfCounters::of_scope(&self.scope(scope)?);
        Ok(())
    }

    /// Sums the counters of `tgids` (one lookup each) into `out`, which is reset first.
    /// Allocation-free: reuse `out` between ticks.
    pub fn tgid_counters(
        &self,
        tgids: &[u32],
        out: &mut EbpfCounters,
    ) -> Result<(), EbpfReadError> {
        *out = EbpfCounters::default();
        for &tgid in tgids {
            if let Some(stats) = self.tgid(tgid)? {
                out.add_tgid(&stats);
            }
        }
        Ok(())
    }

    /// Moves OOM victims from the ring buffer to the recent list (bounded: the oldest go first)
    /// and returns how many arrived.
    pub fn drain_oom_victims(&mut self) -> usize {
        let Some(ring) = self.oom_events.as_mut() else {
            return 0;
        };
        let mut drained = 0;
        while let Some(item) = ring.next() {
            let Ok((record, _)) = <OomVictimRecord as zerocopy::FromBytes>::read_from_prefix(&item)
            else {
                continue;
            };
            drained += 1;
            if self.max_recent_oom == 0 {
                continue;
            }
            if self.recent_oom.len() == self.max_recent_oom {
                self.recent_oom.pop_front();
            }
            let mut victim = OomVictim::from_record(&record, self.boot_to_unix_ns);
            if victim.comm[0] == 0 {
                // Rare (an OOM kill), so the path allocation does not matter.
                let path = self.roots.proc.join(victim.pid.to_string()).join("comm");
                if let Ok(comm) = read_once(&path, &mut self.comm_buf) {
                    let comm = comm.strip_suffix(b"\n").unwrap_or(comm);
                    let len = comm.len().min(COMM_LEN);
                    victim.comm[..len].copy_from_slice(&comm[..len]);
                }
            }
            self.recent_oom.push_back(victim);
        }
        self.oom_victims_drained += drained as u64;
        drained
    }

    /// The most recent OOM victims drained, oldest first.
    pub fn recent_oom_victims(&self) -> impl ExactSizeIterator<Item = &OomVictim> {
        self.recent_oom.iter()
    }

    /// OOM victims drained since loading (the kernel-side count is [`GlobalStats::oom_kills`];
    /// ring-buffer overflows are [`GlobalStats::oom_ringbuf_drops`]).
    pub fn oom_victims_drained(&self) -> u64 {
        self.oom_victims_drained
    }

    /// Turns on the kernel's run-time statistics of every BPF program (as
    /// `sysctl kernel.bpf_stats_enabled=1` does) for as long as the returned descriptor lives.
    pub fn enable_run_time_stats() -> Result<std::os::fd::OwnedFd, EbpfReadError> {
        aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(EbpfReadError::Stats)
    }

    /// Run time and count of each attached program (meaningful while BPF stats are enabled).
    pub fn program_run_stats(&self) -> Vec<ProgramRunStats> {
        match &self.attachment {
            Attachment::Object(None) => Vec::new(),
            Attachment::Object(Some(ebpf)) => PROGRAMS
                .iter()
                .filter(|spec| self.is_attached(spec.program))
                .filter_map(|&spec| {
                    let info = ebpf.program(spec.program)?.info().ok()?;
                    Some(ProgramRunStats {
                        spec,
                        id: info.id(),
                        run_time_ns: u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                        run_count: info.run_count(),
                    })
                })
                .collect(),
            // aya cannot describe a program it did not load: its fdinfo has the same figures.
            Attachment::Handed { programs, .. } => {
                let mut buf = Vec::with_capacity(512);
                programs
                    .iter()
                    .filter_map(|(spec, fd)| {
                        let path = self
                            .roots
                            .proc
                            .join("self/fdinfo")
                            .join(fd.as_raw_fd().to_string());
                        fds::read_small(&path, &mut buf).ok()?;
                        let (id, run_time_ns, run_count) = fds::program_stats(&buf)?;
                        Some(ProgramRunStats {
                            spec: *spec,
                            id,
                            run_time_ns,
                            run_count,
                        })
                    })
                    .collect()
            }
        }
    }
}

/// A missing key. aya reports it as `KeyNotFound` from lookups, but a delete passes the
/// syscall's ENOENT through as a `SyscallError`.
fn is_key_not_found(error: &MapError) -> bool {
    match error {
        MapError::KeyNotFound => true,
        MapError::SyscallError(error) => error.io_error.raw_os_error() == Some(libc::ENOENT),
        _ => false,
    }
}

fn lookup<V>(result: Result<V, MapError>, map: &'static str) -> Result<Option<V>, EbpfReadError> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(MapError::KeyNotFound) => Ok(None),
        Err(source) => Err(EbpfReadError::Map { map, source }),
    }
}
