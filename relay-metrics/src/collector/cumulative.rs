//! `extensions.cumulative`: what a scope consumed since counting began, including the processes
//! that exited, from the kernel's own accounting for each scope:
//! - global: `/proc/stat` (CPU; read by the system reader anyway), `/proc/diskstats`
//!   (storage of the physical disks);
//! - cgroup: the cgroup's own counters (`cpu.stat` / `cpuacct`, `io.stat` / `blkio`,
//!   `memory.peak` / `max_usage_in_bytes`), which include exited tasks;
//! - process tree: the live processes' own times plus their `cutime`/`cstime` (the reaped
//!   descendants), and what the collector's owner reaped itself ([`Accounting::add_reaped`]).
//!
//! Process creations and exits come from the eBPF event counters in every scope (`/proc/stat`'s
//! `processes` counts threads too).

use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::model::{ProcessPass, Sample};
use crate::snapshot::{Cumulative, CumulativeMethod, DeviceIo, TargetDeviceIo};
use crate::source::cgroup::{CgroupVersion, ScopeTotals};
use crate::source::procfs::io_of_same_process;
use crate::source::system::{is_physical_disk, DiskstatsReader, StatCounters};
use crate::source::Roots;

use super::Target;

/// One reading of every total, before the baseline is taken off.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Totals {
    cpu_user_ns: Option<u64>,
    cpu_system_ns: Option<u64>,
    storage_read_bytes: Option<u64>,
    storage_write_bytes: Option<u64>,
    processes_created: Option<u64>,
    processes_exited: Option<u64>,
}

/// Why a share is missing; a bit each, so the reason string is rebuilt only when they change.
mod cause {
    pub(super) const NO_CHILD_TIMES: u32 = 1;
    pub(super) const ORPHANS: u32 = 1 << 1;
    pub(super) const NO_SYSCALL_BYTES: u32 = 1 << 2;
    pub(super) const NO_EVENTS: u32 = 1 << 3;
    pub(super) const NO_IO: u32 = 1 << 4;
    pub(super) const NO_CPU: u32 = 1 << 5;
    pub(super) const NO_PASS: u32 = 1 << 6;
    pub(super) const CGROUP_UNREADABLE: u32 = 1 << 7;
    /// Storage bytes come from the processes' `/proc/<pid>/io`, not from the cgroup.
    pub(super) const IO_FROM_PROCESSES: u32 = 1 << 8;
    /// Storage bytes come from v1 `blkio`, which misses buffered writes.
    pub(super) const BLKIO_V1: u32 = 1 << 9;
    /// The cgroup has no memory high-water mark (a v2 cgroup without the memory controller).
    pub(super) const NO_MEMORY_PEAK: u32 = 1 << 10;
    /// The cgroup has the memory controller but its high-water mark could not be read (a v2
    /// kernel before 5.19 has no `memory.peak`).
    pub(super) const MEMORY_PEAK_UNREADABLE: u32 = 1 << 12;
    /// The cgroup's v1 `blkio` counts nothing on this kernel.
    pub(super) const BLKIO_UNCOUNTED: u32 = 1 << 11;
}

/// The cumulative accounting of one collector.
pub(super) struct Accounting {
    method: CumulativeMethod,
    /// Counting covers the target's whole life (`run`): no baseline is taken off.
    from_start: bool,
    since: Option<DateTime<Utc>>,
    baseline: Option<Totals>,
    /// The last totals given out: a new reading never goes below them (see [`Self::clamp`]).
    last: Totals,
    /// CPU and storage of processes the collector's owner reaped out of the tree (orphans it
    /// adopted as a subreaper), ns and bytes.
    reaped_user_ns: u64,
    reaped_system_ns: u64,
    reaped_read_bytes: u64,
    reaped_write_bytes: u64,
    /// The owner reaps the tree's orphans (`run` as a child subreaper): none is lost.
    reaps_orphans: bool,
    /// The physical disks' bytes (global scope only).
    diskstats: Option<DiskstatsReader>,
    /// The high-water mark read in this pass.
    memory_peak: Option<u64>,
    /// The cgroup's bytes per device, from the same read of `io` as the totals.
    devices: Vec<DeviceIo>,
    /// Whether each device seen in the cgroup's io file is a physical disk (looked up once):
    /// only those are summed, as a stacked device's bytes are charged again below it.
    physical: Vec<(Arc<str>, bool)>,
    /// The processes in a cgroup counted from its start (`run`'s command, stopped there), by
    /// pid and start time: once one exits, it leaves the cgroup's listing while still a zombie
    /// whose `/proc/<pid>/io` holds what it and its reaped descendants wrote, so it is read
    /// there until it is reaped.
    roots: Option<Vec<(u32, u64)>>,
    /// Where the zombie roots' `/proc/<pid>/io` is read.
    proc_roots: Roots,
    buf: Vec<u8>,
    causes: u32,
    reason: Option<Arc<str>>,
    events_reason: Option<Arc<str>>,
    note: Option<String>,
}

impl Accounting {
    pub(super) fn new(roots: &Roots, target: &Target) -> Self {
        let method = match target {
            Target::Global => CumulativeMethod::ProcStat,
            Target::Process { tree: true, .. } => CumulativeMethod::ProcessTree,
            Target::Process { tree: false, .. } => CumulativeMethod::Process,
            Target::Cgroup { resolved, .. } => match resolved.controller_dir("cpuacct") {
                Some((CgroupVersion::V1, _)) => CumulativeMethod::CgroupV1,
                _ => match resolved.controller_dir("cpu") {
                    Some((CgroupVersion::V1, _)) => CumulativeMethod::CgroupV1,
                    _ => CumulativeMethod::CgroupV2,
                },
            },
        };
        let global = matches!(target, Target::Global);
        Self {
            method,
            from_start: false,
            since: None,
            baseline: None,
            last: Totals::default(),
            reaped_user_ns: 0,
            reaped_system_ns: 0,
            reaped_read_bytes: 0,
            reaped_write_bytes: 0,
            reaps_orphans: false,
            diskstats: global.then(|| DiskstatsReader::new(roots)),
            memory_peak: None,
            devices: Vec::new(),
            physical: Vec::new(),
            roots: None,
            proc_roots: roots.clone(),
            buf: Vec::with_capacity(4096),
            causes: u32::MAX,
            reason: None,
            events_reason: None,
            note: None,
        }
    }

    /// Puts `note` first in the reason.
    pub(super) fn note(&mut self, note: &str) {
        self.note = Some(note.to_string());
        self.causes = u32::MAX;
    }

    /// The target was created after counting was attached (`run`'s command starts stopped, its
    /// cgroup is new): the totals count from zero, since `since`.
    pub(super) fn count_from_start(&mut self, since: DateTime<Utc>) {
        self.from_start = true;
        self.since = Some(since);
        self.baseline = Some(Totals::default());
    }

    /// The collector's owner reaps the orphans of the tree and reports them through
    /// [`Self::add_reaped`].
    pub(super) fn reaps_orphans(&mut self) {
        self.reaps_orphans = true;
    }

    /// Adds a process the owner reaped out of the tree (its `wait4` rusage, which includes its
    /// own reaped descendants).
    pub(super) fn add_reaped(&mut self, usage: &ReapedProcess) {
        self.reaped_user_ns = self.reaped_user_ns.saturating_add(usage.user_ns);
        self.reaped_system_ns = self.reaped_system_ns.saturating_add(usage.system_ns);
        self.reaped_read_bytes = self.reaped_read_bytes.saturating_add(usage.read_bytes);
        self.reaped_write_bytes = self.reaped_write_bytes.saturating_add(usage.write_bytes);
    }

    /// Fills `out` from this pass's sample (and, for a cgroup scope, `totals`: what this pass's
    /// read of its cgroup gave).
    pub(super) fn fill(
        &mut self,
        sample: &Sample,
        stat: Option<&StatCounters>,
        cgroup_cpu: Option<CgroupCpu>,
        totals: Option<ScopeTotals<'_>>,
        out: &mut Option<Cumulative>,
    ) {
        let mut causes = 0;
        let ticks = sample.clock_ticks_per_second;
        let raw = match self.method {
            CumulativeMethod::ProcStat => self.global(sample, stat, ticks, &mut causes),
            CumulativeMethod::CgroupV1 | CumulativeMethod::CgroupV2 => {
                self.cgroup(sample, cgroup_cpu, totals, &mut causes)
            }
            CumulativeMethod::ProcessTree | CumulativeMethod::Process => {
                self.processes(sample, ticks, &mut causes)
            }
        };
        if self.baseline.is_none() {
            self.baseline = Some(raw);
            self.since = Some(Utc::now());
        }
        let baseline = self.baseline.unwrap_or_default();
        let totals = self.clamp(raw, baseline);
        if causes != self.causes {
            self.causes = causes;
            self.reason = self.describe(causes, sample);
        }
        let cumulative = out.get_or_insert_with(Cumulative::default);
        cumulative.since = self.since;
        cumulative.method = self.method;
        cumulative.reason.clone_from(&self.reason);
        cumulative.cpu_user_ns = totals.cpu_user_ns;
        cumulative.cpu_system_ns = totals.cpu_system_ns;
        cumulative.storage_read_bytes = totals.storage_read_bytes;
        cumulative.storage_write_bytes = totals.storage_write_bytes;
        cumulative.syscall_read_bytes = None;
        cumulative.syscall_write_bytes = None;
        cumulative.processes_created = totals.processes_created;
        cumulative.processes_exited = totals.processes_exited;
        cumulative.memory_peak_bytes = None;
        cumulative.devices.clear();
        if matches!(
            self.method,
            CumulativeMethod::CgroupV1 | CumulativeMethod::CgroupV2
        ) {
            cumulative.memory_peak_bytes = self.memory_peak;
            cumulative.devices.clone_from(&self.devices);
        }
    }

    /// Takes the baseline off and never gives out less than last time. The kernel's sources
    /// can step back although what they count cannot: `/proc/stat` sums per-CPU tick counters
    /// read without a lock (one CPU's ticks may be read before and another's after an update),
    /// a process that leaves a tree (reparented to a reaper outside it) takes its own and its
    /// reaped children's times with it, and a cgroup's v1 user/system split is rescaled from
    /// ticks. A total that went down stays at its previous value (the reason says which share
    /// a process tree cannot see); it resumes once the source passes it again.
    fn clamp(&mut self, raw: Totals, baseline: Totals) -> Totals {
        // A source unavailable for a pass (the root process is gone, a file failed) keeps the
        // last total: a total that turned null would read as lost to whoever takes the last line.
        let one = |now: Option<u64>, base: Option<u64>, last: Option<u64>| match now {
            Some(now) => {
                let value = now.saturating_sub(base.unwrap_or(0));
                Some(last.map_or(value, |last| value.max(last)))
            }
            None => last,
        };
        let cpu = match (raw.cpu_user_ns, raw.cpu_system_ns) {
            (Some(user), Some(system)) => {
                let since = |now: u64, base: Option<u64>| now.saturating_sub(base.unwrap_or(0));
                let now = (
                    since(user, baseline.cpu_user_ns),
                    since(system, baseline.cpu_system_ns),
                );
                let (user, system) = clamp_cpu(now, self.last.cpu_user_ns, self.last.cpu_system_ns);
                (Some(user), Some(system))
            }
            (user, system) => (
                one(user, baseline.cpu_user_ns, self.last.cpu_user_ns),
                one(system, baseline.cpu_system_ns, self.last.cpu_system_ns),
            ),
        };
        let totals = Totals {
            cpu_user_ns: cpu.0,
            cpu_system_ns: cpu.1,
            storage_read_bytes: one(
                raw.storage_read_bytes,
                baseline.storage_read_bytes,
                self.last.storage_read_bytes,
            ),
            storage_write_bytes: one(
                raw.storage_write_bytes,
                baseline.storage_write_bytes,
                self.last.storage_write_bytes,
            ),
            processes_created: one(
                raw.processes_created,
                baseline.processes_created,
                self.last.processes_created,
            ),
            processes_exited: one(
                raw.processes_exited,
                baseline.processes_exited,
                self.last.processes_exited,
            ),
        };
        self.last = totals;
        totals
    }

    fn global(
        &mut self,
        sample: &Sample,
        stat: Option<&StatCounters>,
        ticks: u64,
        causes: &mut u32,
    ) -> Totals {
        *causes |= cause::NO_SYSCALL_BYTES;
        let mut totals = Totals::default();
        match stat.and_then(|s| s.aggregate) {
            Some(cpu) if ticks > 0 => {
                // Guest time is already in user and nice; steal is not this machine's work.
                totals.cpu_user_ns = ticks_ns(cpu.user.saturating_add(cpu.nice), ticks);
                totals.cpu_system_ns = ticks_ns(
                    cpu.system
                        .saturating_add(cpu.irq)
                        .saturating_add(cpu.softirq),
                    ticks,
                );
            }
            _ => *causes |= cause::NO_CPU,
        }
        if let Some(diskstats) = &mut self.diskstats {
            if let Ok((read, write)) = diskstats.physical_disk_bytes() {
                totals.storage_read_bytes = Some(read);
                totals.storage_write_bytes = Some(write);
            } else {
                *causes |= cause::NO_IO;
            }
        }
        self.events(sample, &mut totals, causes);
        totals
    }

    fn cgroup(
        &mut self,
        sample: &Sample,
        cpu: Option<CgroupCpu>,
        files: Option<ScopeTotals<'_>>,
        causes: &mut u32,
    ) -> Totals {
        *causes |= cause::NO_SYSCALL_BYTES;
        let mut totals = Totals::default();
        split_cgroup_cpu(cpu, &mut totals, causes);
        let mut exact = false;
        self.devices.clear();
        if let Some((Some(version), files)) = files.map(|files| (files.io_version, files)) {
            devices_from(files.devices, &mut self.devices);
            let (mut read_bytes, mut write_bytes) = (0u64, 0u64);
            for device in &self.devices {
                if physical(&mut self.physical, &self.proc_roots, &device.device) {
                    read_bytes = read_bytes.saturating_add(device.read_bytes);
                    write_bytes = write_bytes.saturating_add(device.write_bytes);
                }
            }
            totals.storage_read_bytes = Some(read_bytes);
            totals.storage_write_bytes = Some(write_bytes);
            // v2 charges writeback to the cgroup that dirtied the pages; v1 `blkio` sees only
            // the I/O its tasks submit themselves, and buffered writes are written back later
            // by the kernel's flusher threads (a `dd ... conv=fsync` of 100 MiB read 0 B there).
            exact = version == CgroupVersion::V2;
        }
        if !exact {
            // The processes' own counters count each byte when it is dirtied (buffered) or
            // submitted (direct), and a reaped process's counters are added to its reaper's.
            match self.process_io(sample) {
                Some((read, write)) => {
                    totals.storage_read_bytes = Some(read);
                    totals.storage_write_bytes = Some(write);
                    *causes |= cause::IO_FROM_PROCESSES;
                }
                // v1's counts stand, with what they miss said.
                None if totals.storage_write_bytes.is_some() => *causes |= cause::BLKIO_V1,
                None if files.is_some_and(|files| !files.counts_every_disk) => {
                    *causes |= cause::BLKIO_UNCOUNTED;
                }
                None => *causes |= cause::NO_IO,
            }
        }
        // A v2 cgroup without the memory controller (nested below an occupied cgroup) has no
        // `memory.peak`: the processes' resident memory is what the samples have.
        self.memory_peak = files.and_then(|files| files.memory_peak_bytes);
        if self.memory_peak.is_none() {
            let memory_controller = files.is_some_and(|files| files.memory_controller);
            *causes |= if memory_controller {
                cause::MEMORY_PEAK_UNREADABLE
            } else {
                cause::NO_MEMORY_PEAK
            };
        }
        self.events(sample, &mut totals, causes);
        totals
    }

    /// Storage bytes of a cgroup counted from its start, from `/proc/<pid>/io`: the listed
    /// processes, the roots that left the listing as zombies, and what the owner reaped
    /// ([`Self::add_reaped`]). `None` without the counters of every process, or when the
    /// cgroup was not counted from its start (the exited processes' bytes are then unknown).
    fn process_io(&mut self, sample: &Sample) -> Option<(u64, u64)> {
        let ProcessPass::Sampled(set) = &sample.processes else {
            return None;
        };
        if !self.from_start || set.incomplete.is_some() {
            return None;
        }
        let roots = self.roots.get_or_insert_with(|| {
            set.processes
                .iter()
                .map(|p| (p.pid, p.start_time_ticks))
                .collect()
        });
        let (mut read, mut write) = (self.reaped_read_bytes, self.reaped_write_bytes);
        for process in &set.processes {
            let io = process.io?;
            read = read.saturating_add(io.read_bytes);
            write = write.saturating_add(io.write_bytes);
        }
        for &(pid, start) in roots.iter() {
            let listed = set
                .processes
                .iter()
                .any(|p| p.pid == pid && p.start_time_ticks == start);
            if listed {
                continue;
            }
            // Reaped (gone): its bytes went to its reaper (the owner, through add_reaped).
            if let Some(io) = io_of_same_process(&self.proc_roots, pid, start, &mut self.buf) {
                read = read.saturating_add(io.read_bytes);
                write = write.saturating_add(io.write_bytes);
            }
        }
        Some((read, write))
    }

    fn processes(&mut self, sample: &Sample, ticks: u64, causes: &mut u32) -> Totals {
        *causes |= cause::NO_SYSCALL_BYTES;
        let mut totals = Totals::default();
        let ProcessPass::Sampled(set) = &sample.processes else {
            *causes |= cause::NO_PASS;
            return totals;
        };
        if set.incomplete.is_some() || ticks == 0 {
            *causes |= cause::NO_PASS;
            return totals;
        }
        let tree = self.method == CumulativeMethod::ProcessTree;
        let (mut user, mut system) = (0u64, 0u64);
        let (mut read, mut write) = (0u64, 0u64);
        let mut children_known = true;
        let mut io_known = true;
        for process in &set.processes {
            user = user.saturating_add(process.utime_ticks);
            system = system.saturating_add(process.stime_ticks);
            if tree {
                match (process.cutime_ticks, process.cstime_ticks) {
                    (Some(cutime), Some(cstime)) => {
                        user = user.saturating_add(cutime);
                        system = system.saturating_add(cstime);
                    }
                    _ => children_known = false,
                }
            }
            // /proc/<pid>/io includes the children the process reaped (the kernel adds them on
            // wait), so the sum over the live tree covers the reaped ones too.
            match &process.io {
                Some(io) => {
                    read = read.saturating_add(io.read_bytes);
                    write = write.saturating_add(io.write_bytes);
                }
                None => io_known = false,
            }
        }
        if children_known {
            totals.cpu_user_ns =
                ticks_ns(user, ticks).map(|ns| ns.saturating_add(self.reaped_user_ns));
            totals.cpu_system_ns =
                ticks_ns(system, ticks).map(|ns| ns.saturating_add(self.reaped_system_ns));
        } else {
            *causes |= cause::NO_CHILD_TIMES;
        }
        if io_known && (!tree || children_known) {
            totals.storage_read_bytes = Some(read.saturating_add(self.reaped_read_bytes));
            totals.storage_write_bytes = Some(write.saturating_add(self.reaped_write_bytes));
        } else {
            *causes |= cause::NO_IO;
        }
        if tree && !self.reaps_orphans {
            *causes |= cause::ORPHANS;
        }
        self.events(sample, &mut totals, causes);
        totals
    }

    fn events(&mut self, sample: &Sample, totals: &mut Totals, causes: &mut u32) {
        let events = &sample.kernel_events;
        if events.active {
            totals.processes_created = events.processes_created;
            totals.processes_exited = events.processes_exited;
        } else {
            *causes |= cause::NO_EVENTS;
            if self.events_reason.as_deref() != events.reason.as_deref() {
                self.events_reason.clone_from(&events.reason);
                // Forces the reason to be rebuilt with the new text.
                self.causes = u32::MAX;
            }
        }
    }

    fn describe(&self, causes: u32, sample: &Sample) -> Option<Arc<str>> {
        if causes == 0 && self.note.is_none() {
            return None;
        }
        let mut text = self.note.clone().unwrap_or_default();
        let mut add = |part: &str| {
            if !text.is_empty() {
                text.push_str("; ");
            }
            text.push_str(part);
        };
        if causes & cause::NO_PASS != 0 {
            add("the processes could not be read (the root process is gone, or the listing is incomplete): the totals are those of the last complete pass");
        }
        if causes & cause::NO_CPU != 0 {
            add("CPU totals need the cpu category (its source was not read)");
        }
        if causes & cause::CGROUP_UNREADABLE != 0 {
            add("the cgroup's user/system CPU counters could not be read");
        }
        if causes & cause::NO_CHILD_TIMES != 0 {
            add("the per-process record has no cutime/cstime on this path (task iterator): the CPU of reaped descendants cannot be seen");
        }
        if causes & cause::ORPHANS != 0 {
            add("descendants orphaned out of the tree are adopted by a reaper outside it: their CPU and I/O after that are not counted (relay-metrics run adopts and reaps them)");
        }
        if causes & cause::NO_IO != 0 {
            let what = match sample.scope {
                crate::snapshot::MeasurementScope::Cgroup => {
                    "storage bytes: the cgroup has no readable io.stat / blkio counters"
                }
                crate::snapshot::MeasurementScope::Global => {
                    "storage bytes: /proc/diskstats could not be read"
                }
                _ => "storage bytes: /proc/<pid>/io was not read for every process (the disk category is off, or other users' processes need root)",
            };
            add(what);
        }
        if causes & cause::IO_FROM_PROCESSES != 0 {
            add(if self.method == CumulativeMethod::CgroupV2 {
                "storage bytes: from the processes' /proc/<pid>/io, their reaped descendants included (the cgroup has no io controller: no io.stat)"
            } else {
                "storage bytes: from the processes' /proc/<pid>/io, their reaped descendants included (cgroup v1 blkio does not see buffered writes, which the kernel's flusher threads write back)"
            });
        }
        if causes & cause::NO_MEMORY_PEAK != 0 {
            add("memory peak: the cgroup has no memory controller (no memory.peak, no memory.events): resident memory comes from its processes (the highest sampled sum), OOM kills from the kernel events");
        }
        if causes & cause::MEMORY_PEAK_UNREADABLE != 0 {
            add("memory peak: the cgroup's high-water mark (memory.peak, which cgroup v2 has since Linux 5.19, or v1 memory.max_usage_in_bytes) could not be read: resident memory comes from its processes (the highest sampled sum)");
        }
        if causes & cause::BLKIO_UNCOUNTED != 0 {
            add(crate::source::cgroup::BLKIO_UNCOUNTED);
        }
        if causes & cause::BLKIO_V1 != 0 {
            add("storage bytes: cgroup v1 blkio counts only the I/O the cgroup's tasks submit themselves, not buffered writes, which the kernel's flusher threads write back");
        }
        if causes & cause::NO_SYSCALL_BYTES != 0 {
            let what = match sample.scope {
                crate::snapshot::MeasurementScope::Global => {
                    "syscall bytes: the kernel keeps no machine-wide rchar/wchar"
                }
                crate::snapshot::MeasurementScope::Cgroup => {
                    "syscall bytes: cgroups keep no rchar/wchar"
                }
                _ => "syscall bytes: the per-process record does not carry rchar/wchar",
            };
            add(what);
        }
        if causes & cause::NO_EVENTS != 0 {
            let mut part = String::from("process creations and exits need the eBPF event counters");
            if let Some(reason) = &self.events_reason {
                let _ = write!(part, " ({reason})");
            }
            add(&part);
        }
        Some(Arc::from(text))
    }
}

/// A cgroup's CPU counters: total run time (ns), user and system (µs).
pub(super) type CgroupCpu = (Option<u64>, Option<u64>, Option<u64>);

/// What `wait4` gave for one process reaped by the collector's owner.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReapedProcess {
    /// User CPU (ns), its reaped descendants included.
    pub user_ns: u64,
    /// System CPU (ns).
    pub system_ns: u64,
    /// Storage bytes read (`ru_inblock` × 512).
    pub read_bytes: u64,
    /// Storage bytes written (`ru_oublock` × 512).
    pub write_bytes: u64,
}

fn ticks_ns(ticks: u64, per_second: u64) -> Option<u64> {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(per_second.max(1));
    u64::try_from(ns).ok()
}

/// The user and system time `now` (after the baseline), kept from going below the last ones
/// given out (`last_user`, `last_system`) and adding up to the total now, or to the last total
/// where that was more. Clamping each part on its own adds up to more than was used whenever
/// the split moves: a cgroup's v1 user/system ticks rescaled to its exact total gave 0.400 s of
/// user at one sample and 0.369 s at the next, whose total was 0.600 s, and the parts clamped one
/// by one read 0.631 s.
fn clamp_cpu(now: (u64, u64), last_user: Option<u64>, last_system: Option<u64>) -> (u64, u64) {
    let (last_user, last_system) = (last_user.unwrap_or(0), last_system.unwrap_or(0));
    let total = now
        .0
        .saturating_add(now.1)
        .max(last_user.saturating_add(last_system));
    let user = now.0.min(total.saturating_sub(last_system)).max(last_user);
    (user, total.saturating_sub(user))
}

/// Whether `device` (`major:minor`) is a physical disk, looked up in sysfs once and kept in
/// `cache`.
fn physical(cache: &mut Vec<(Arc<str>, bool)>, roots: &Roots, device: &Arc<str>) -> bool {
    if let Some((_, physical)) = cache.iter().find(|(known, _)| known == device) {
        return *physical;
    }
    let physical = is_physical_disk(roots, device);
    cache.push((Arc::clone(device), physical));
    physical
}

/// The bytes per device of a read of the cgroup's io file into `devices`, in the file's order
/// (entries of devices already listed are reused, with their names: no allocation while the
/// devices stay the same).
fn devices_from(read: &[TargetDeviceIo], devices: &mut Vec<DeviceIo>) {
    for (used, device) in read.iter().enumerate() {
        match devices[used..]
            .iter()
            .position(|d| *d.device == *device.device)
        {
            Some(at) => devices.swap(used, used + at),
            None => devices.insert(
                used,
                DeviceIo {
                    device: Arc::from(device.device.as_str()),
                    read_bytes: 0,
                    write_bytes: 0,
                },
            ),
        }
        let entry = &mut devices[used];
        entry.read_bytes = device.read_bytes;
        entry.write_bytes = device.write_bytes;
    }
    devices.truncate(read.len());
}

/// A cgroup's user and system CPU time from its exact total and its split.
fn split_cgroup_cpu(cpu: Option<CgroupCpu>, totals: &mut Totals, causes: &mut u32) {
    match cpu {
        // The total is exact (v1 `cpuacct.usage`, v2 `usage_usec`: the scheduler's run
        // time), but v1's user/system split is sampled at ticks and misses most of a short
        // process: the total is split in the ratio of the two, as the kernel does for a
        // process's utime/stime (`cputime_adjust`).
        Some((Some(total), Some(user), Some(system))) => {
            let (user, system) = (u128::from(user), u128::from(system));
            let user_ns = match user + system {
                0 => 0,
                sum => u64::try_from(u128::from(total) * user / sum).unwrap_or(total),
            };
            totals.cpu_user_ns = Some(user_ns.min(total));
            totals.cpu_system_ns = Some(total - user_ns.min(total));
        }
        Some(_) => *causes |= cause::CGROUP_UNREADABLE,
        None => *causes |= cause::NO_CPU,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_never_decrease_and_count_from_the_baseline() {
        let roots = Roots::host();
        let mut accounting = Accounting::new(&roots, &Target::Global);
        let reading = |user: u64| Totals {
            cpu_user_ns: Some(user),
            processes_created: Some(user / 10),
            ..Totals::default()
        };
        let base = reading(1000);
        assert_eq!(accounting.clamp(reading(1500), base).cpu_user_ns, Some(500));
        // A source that stepped back (a process left the tree) keeps the last total.
        assert_eq!(accounting.clamp(reading(1200), base).cpu_user_ns, Some(500));
        assert_eq!(accounting.clamp(reading(900), base).cpu_user_ns, Some(500));
        assert_eq!(accounting.clamp(reading(1600), base).cpu_user_ns, Some(600));
        // A value missing for one pass keeps the last total, and never goes below it after.
        let missing = Totals::default();
        assert_eq!(accounting.clamp(missing, base).cpu_user_ns, Some(600));
        assert_eq!(accounting.clamp(reading(1100), base).cpu_user_ns, Some(600));
        // Never known: stays null.
        assert_eq!(accounting.clamp(missing, base).storage_read_bytes, None);
    }

    #[test]
    fn devices_are_listed_in_file_order_and_their_entries_reused() {
        let read = |listed: &[(&str, u64, u64)]| -> Vec<TargetDeviceIo> {
            listed
                .iter()
                .map(|&(device, read_bytes, write_bytes)| TargetDeviceIo {
                    device: device.to_string(),
                    read_bytes,
                    write_bytes,
                    ..TargetDeviceIo::default()
                })
                .collect()
        };
        let listed = |devices: &[DeviceIo]| -> Vec<(String, u64, u64)> {
            devices
                .iter()
                .map(|d| (d.device.to_string(), d.read_bytes, d.write_bytes))
                .collect()
        };
        let mut devices = Vec::new();
        devices_from(&read(&[("8:0", 4096, 512), ("8:16", 1, 2)]), &mut devices);
        assert_eq!(
            listed(&devices),
            [("8:0".into(), 4096, 512), ("8:16".into(), 1, 2)]
        );
        let first = Arc::clone(&devices[1].device);
        // Values replaced, not added; a device gone from the file is gone from the list; the
        // entry of a device listed before is the same allocation.
        devices_from(&read(&[("8:16", 10, 20)]), &mut devices);
        assert_eq!(listed(&devices), [("8:16".into(), 10, 20)]);
        assert!(Arc::ptr_eq(&first, &devices[0].device));
        devices_from(&[], &mut devices);
        assert!(devices.is_empty());
    }

    /// A cgroup's storage bytes are its physical disks' (those with a `device` link in sysfs):
    /// its I/O to a device-mapper device is charged again on the disk below it, and a sum of
    /// every line of `io.stat` would count it twice. The per-device list keeps every line.
    #[test]
    fn cgroup_storage_sums_the_physical_disks_only() {
        use crate::source::cgroup::{resolve, CgroupFields, CgroupLayout, CgroupReader};
        let base = tempfile::tempdir().unwrap();
        let roots = Roots::fixture(base.path());
        let dir = base.path().join("sys/fs/cgroup/job");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(base.path().join("sys/dev/block/8:0/device")).unwrap();
        std::fs::create_dir_all(base.path().join("sys/dev/block/253:0")).unwrap();
        std::fs::write(
            dir.join("io.stat"),
            "253:0 rbytes=4096 wbytes=1048576 rios=1 wios=256\n\
             8:0 rbytes=4096 wbytes=1048576 rios=1 wios=8\n",
        )
        .unwrap();
        let layout = CgroupLayout::from_mountinfo(
            b"25 24 0:23 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
            &roots,
        );
        let target = Target::Cgroup {
            path: "/job".into(),
            resolved: Box::new(resolve(&layout, "/job").unwrap()),
        };
        let mut accounting = Accounting::new(&roots, &target);
        let sample = Sample::empty(crate::snapshot::MeasurementScope::Cgroup);
        let mut reader = CgroupReader::with_totals(&roots);
        let Target::Cgroup { resolved, .. } = &target else {
            unreachable!()
        };
        reader.read(resolved, CgroupFields::NONE).unwrap();
        let totals = accounting.cgroup(&sample, None, reader.totals(), &mut 0);
        assert_eq!(
            (totals.storage_read_bytes, totals.storage_write_bytes),
            (Some(4096), Some(1048576))
        );
        let listed: Vec<&str> = accounting.devices.iter().map(|d| &*d.device).collect();
        assert_eq!(listed, ["253:0", "8:0"]);
    }

    /// The split moves while the total grows (a v1 cgroup's user/system ticks rescaled to its
    /// exact total): the parts never go down, and add up to the total, not more.
    #[test]
    fn cpu_parts_never_decrease_and_add_up_to_the_total() {
        let mut accounting = Accounting::new(&Roots::host(), &Target::Global);
        let reading = |user: u64, system: u64| Totals {
            cpu_user_ns: Some(user),
            cpu_system_ns: Some(system),
            ..Totals::default()
        };
        let base = reading(0, 0);
        let parts = |t: Totals| (t.cpu_user_ns.unwrap(), t.cpu_system_ns.unwrap());
        assert_eq!(parts(accounting.clamp(reading(400, 0), base)), (400, 0));
        // 0.600 s in all, split 369/231 now: user stays at 400, system takes the rest.
        assert_eq!(parts(accounting.clamp(reading(369, 231), base)), (400, 200));
        // The split moving back gives each part its share again, never below the last.
        assert_eq!(parts(accounting.clamp(reading(450, 250), base)), (450, 250));
        assert_eq!(parts(accounting.clamp(reading(300, 420), base)), (450, 270));
        // A total that went down (a process left the tree) keeps the last parts.
        assert_eq!(parts(accounting.clamp(reading(100, 100), base)), (450, 270));
        // Sources whose parts only grow are passed through.
        assert_eq!(parts(accounting.clamp(reading(460, 300), base)), (460, 300));
    }
}
