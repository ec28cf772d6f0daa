//! `extensions.cumulative`: what a scope consumed since counting began, including the processes
//! that exited, from the kernel's own accounting for each scope:
//! - global: `/proc/stat` (CPU, forks; read by the system reader anyway), `/proc/diskstats`
//!   (storage of the physical disks), `/proc/loadavg` (live tasks, for the exits);
//! - cgroup: the cgroup's own counters (`cpu.stat` / `cpuacct`, `io.stat` / `blkio`,
//!   `memory.peak` / `max_usage_in_bytes`), which include exited tasks;
//! - process tree: the live processes' own times plus their `cutime`/`cstime` (the reaped
//!   descendants), and what the collector's owner reaped itself ([`Accounting::add_reaped`]).
//!
//! Creations and exits outside global come from the eBPF event counters.

use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::model::{ProcessPass, Sample};
use crate::snapshot::{Cumulative, CumulativeMethod, DeviceIo};
use crate::source::cgroup::{CgroupTarget, CgroupVersion};
use crate::source::file::FileKind;
use crate::source::system::StatCounters;
use crate::source::{HeldFile, Roots};

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
    diskstats: Option<HeldFile>,
    loadavg: Option<HeldFile>,
    /// Per `/proc/diskstats` line: the device name and whether it is a physical disk (has a
    /// `device` link in sysfs; partitions, loop, zram and device-mapper devices do not, and
    /// counting them would count the same bytes twice).
    disks: Vec<(Box<[u8]>, bool)>,
    sys_class_block: std::path::PathBuf,
    peak: Option<HeldFile>,
    /// The high-water mark read in this pass.
    memory_peak: Option<u64>,
    io: Option<(CgroupVersion, HeldFile)>,
    /// The cgroup's bytes per device, from the same read of `io` as the totals.
    devices: Vec<DeviceIo>,
    /// The processes in a cgroup counted from its start (`run`'s command, stopped there), by
    /// pid and start time: once one exits, it leaves the cgroup's listing while still a zombie
    /// whose `/proc/<pid>/io` holds what it and its reaped descendants wrote, so it is read
    /// there until it is reaped.
    roots: Option<Vec<(u32, u64)>>,
    proc_dir: std::path::PathBuf,
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
        let (peak, io) = match target {
            Target::Cgroup { resolved, .. } => cgroup_files(resolved),
            _ => (None, None),
        };
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
            diskstats: global
                .then(|| HeldFile::new(roots.map("/proc/diskstats".as_ref()), FileKind::Records)),
            loadavg: global
                .then(|| HeldFile::new(roots.map("/proc/loadavg".as_ref()), FileKind::Whole)),
            disks: Vec::new(),
            sys_class_block: roots.map("/sys/class/block".as_ref()),
            peak,
            memory_peak: None,
            io,
            devices: Vec::new(),
            roots: None,
            proc_dir: roots.map("/proc".as_ref()),
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

    /// Fills `out` from this pass's sample (and the scope's own files).
    pub(super) fn fill(
        &mut self,
        sample: &Sample,
        stat: Option<&StatCounters>,
        cgroup_cpu: Option<CgroupCpu>,
        out: &mut Option<Cumulative>,
    ) {
        let mut causes = 0;
        let ticks = sample.clock_ticks_per_second;
        let raw = match self.method {
            CumulativeMethod::ProcStat => self.global(stat, ticks, &mut causes),
            CumulativeMethod::CgroupV1 | CumulativeMethod::CgroupV2 => {
                self.cgroup(sample, cgroup_cpu, &mut causes)
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
        let totals = Totals {
            cpu_user_ns: one(raw.cpu_user_ns, baseline.cpu_user_ns, self.last.cpu_user_ns),
            cpu_system_ns: one(
                raw.cpu_system_ns,
                baseline.cpu_system_ns,
                self.last.cpu_system_ns,
            ),
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

    fn global(&mut self, stat: Option<&StatCounters>, ticks: u64, causes: &mut u32) -> Totals {
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
        if let Some(file) = &mut self.diskstats {
            if let Ok(bytes) = file.read(&mut self.buf) {
                let (read, write) =
                    physical_disk_bytes(bytes, &mut self.disks, &self.sys_class_block);
                totals.storage_read_bytes = Some(read);
                totals.storage_write_bytes = Some(write);
            } else {
                *causes |= cause::NO_IO;
            }
        }
        // `processes` counts every task created (threads too); `/proc/loadavg` gives the tasks
        // alive now, so created − alive-growth is the number that exited.
        let created = stat.and_then(|s| s.processes);
        let alive = self
            .loadavg
            .as_mut()
            .and_then(|file| file.read(&mut self.buf).ok())
            .and_then(loadavg_tasks);
        totals.processes_created = created;
        totals.processes_exited = match (created, alive) {
            (Some(created), Some(alive)) => Some(created.saturating_sub(alive)),
            _ => None,
        };
        totals
    }

    fn cgroup(&mut self, sample: &Sample, cpu: Option<CgroupCpu>, causes: &mut u32) -> Totals {
        *causes |= cause::NO_SYSCALL_BYTES;
        let mut totals = Totals::default();
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
        let mut exact = false;
        if let Some((version, file)) = &mut self.io {
            match file.read(&mut self.buf) {
                Ok(bytes) => {
                    let (read, write) = cgroup_io_totals(*version, bytes);
                    totals.storage_read_bytes = Some(read);
                    totals.storage_write_bytes = Some(write);
                    devices_from(*version, bytes, &mut self.devices);
                    // v2 charges writeback to the cgroup that dirtied the pages; v1 `blkio`
                    // sees only the I/O its tasks submit themselves, and buffered writes are
                    // written back later by the kernel's flusher threads (a `dd ... conv=fsync`
                    // of 100 MiB read 0 B there).
                    exact = *version == CgroupVersion::V2;
                }
                Err(_) => self.devices.clear(),
            }
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
                None => *causes |= cause::NO_IO,
            }
        }
        // A v2 cgroup without the memory controller (nested below an occupied cgroup) has no
        // `memory.peak`: the processes' resident memory is what the samples have.
        self.memory_peak = self.read_peak();
        if self.memory_peak.is_none() {
            *causes |= cause::NO_MEMORY_PEAK;
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
            if let Some((r, w)) = zombie_io(&self.proc_dir, pid, start) {
                read = read.saturating_add(r);
                write = write.saturating_add(w);
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

    fn read_peak(&mut self) -> Option<u64> {
        let file = self.peak.as_mut()?;
        let bytes = file.read(&mut self.buf).ok()?;
        std::str::from_utf8(bytes).ok()?.trim().parse().ok()
    }
}

/// `read_bytes` and `write_bytes` of `/proc/<pid>/io`, if `pid` is still the process that
/// started at `start` (clock ticks since boot; a zombie's files stay readable until it is
/// reaped).
fn zombie_io(proc_dir: &std::path::Path, pid: u32, start: u64) -> Option<(u64, u64)> {
    let dir = proc_dir.join(pid.to_string());
    let stat = std::fs::read(dir.join("stat")).ok()?;
    let close = stat.iter().rposition(|b| *b == b')')?;
    // After the command's closing parenthesis: state (field 3) … starttime (field 22).
    let started = stat[close + 1..]
        .split(|b| *b == b' ')
        .filter(|f| !f.is_empty())
        .nth(19)
        .and_then(parse_u64)?;
    if started != start {
        return None;
    }
    let io = std::fs::read(dir.join("io")).ok()?;
    let field = |name: &[u8]| {
        io.split(|b| *b == b'\n')
            .find_map(|line| line.strip_prefix(name))
            .and_then(parse_u64)
    };
    Some((field(b"read_bytes:")?, field(b"write_bytes:")?))
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

/// The cgroup's high-water mark and storage files.
fn cgroup_files(target: &CgroupTarget) -> (Option<HeldFile>, Option<(CgroupVersion, HeldFile)>) {
    let peak = match target.controller_dir("memory") {
        Some((CgroupVersion::V1, dir)) => Some(HeldFile::new(
            dir.dir.join("memory.max_usage_in_bytes"),
            FileKind::Whole,
        )),
        Some((CgroupVersion::V2, dir)) => {
            Some(HeldFile::new(dir.dir.join("memory.peak"), FileKind::Whole))
        }
        None => None,
    };
    let io = match target.controller_dir("blkio") {
        Some((CgroupVersion::V1, dir)) => {
            let recursive = dir.dir.join("blkio.throttle.io_service_bytes_recursive");
            let path = if recursive.exists() {
                recursive
            } else {
                dir.dir.join("blkio.throttle.io_service_bytes")
            };
            Some((CgroupVersion::V1, HeldFile::new(path, FileKind::Whole)))
        }
        _ => match target.controller_dir("io") {
            Some((CgroupVersion::V2, dir)) => Some((
                CgroupVersion::V2,
                HeldFile::new(dir.dir.join("io.stat"), FileKind::Whole),
            )),
            _ => None,
        },
    };
    (peak, io)
}

/// Calls `each(device, read_bytes, write_bytes)` for every line of v2 `io.stat`
/// (`8:0 rbytes=… wbytes=… …`) or v1 `blkio.throttle.io_service_bytes` (`8:0 Read N`,
/// `8:0 Write N`, …, `Total N`).
fn for_each_device(version: CgroupVersion, bytes: &[u8], mut each: impl FnMut(&[u8], u64, u64)) {
    for line in bytes.split(|b| *b == b'\n') {
        let mut fields = line.split(|b| *b == b' ').filter(|f| !f.is_empty());
        let Some(device) = fields.next() else {
            continue;
        };
        if !device.contains(&b':') {
            continue;
        }
        match version {
            CgroupVersion::V2 => {
                let (mut read, mut write) = (0, 0);
                for field in fields {
                    if let Some(value) = field.strip_prefix(b"rbytes=") {
                        read = parse_u64(value).unwrap_or(0);
                    } else if let Some(value) = field.strip_prefix(b"wbytes=") {
                        write = parse_u64(value).unwrap_or(0);
                    }
                }
                each(device, read, write);
            }
            CgroupVersion::V1 => {
                let (Some(kind), Some(value)) = (fields.next(), fields.next().and_then(parse_u64))
                else {
                    continue;
                };
                match kind {
                    b"Read" => each(device, value, 0),
                    b"Write" => each(device, 0, value),
                    _ => {}
                }
            }
        }
    }
}

/// The bytes per device of a cgroup's io file, into `devices` in the file's order (entries of
/// devices already listed are reused: no allocation while the devices stay the same).
fn devices_from(version: CgroupVersion, bytes: &[u8], devices: &mut Vec<DeviceIo>) {
    let mut used = 0;
    for_each_device(version, bytes, |device, read, write| {
        if let Some(entry) = devices[..used]
            .iter_mut()
            .find(|d| d.device.as_bytes() == device)
        {
            entry.read_bytes = entry.read_bytes.saturating_add(read);
            entry.write_bytes = entry.write_bytes.saturating_add(write);
            return;
        }
        match devices[used..]
            .iter()
            .position(|d| d.device.as_bytes() == device)
        {
            Some(at) => devices.swap(used, used + at),
            None => devices.insert(
                used,
                DeviceIo {
                    device: Arc::from(String::from_utf8_lossy(device).as_ref()),
                    read_bytes: 0,
                    write_bytes: 0,
                },
            ),
        }
        let entry = &mut devices[used];
        entry.read_bytes = read;
        entry.write_bytes = write;
        used += 1;
    });
    devices.truncate(used);
}

fn cgroup_io_totals(version: CgroupVersion, bytes: &[u8]) -> (u64, u64) {
    let (mut read, mut write) = (0u64, 0u64);
    for_each_device(version, bytes, |_, r, w| {
        read = read.saturating_add(r);
        write = write.saturating_add(w);
    });
    (read, write)
}

fn parse_u64(bytes: &[u8]) -> Option<u64> {
    std::str::from_utf8(bytes).ok()?.trim().parse().ok()
}

/// The 4th field of `/proc/loadavg`, `running/total`: the tasks alive now.
fn loadavg_tasks(bytes: &[u8]) -> Option<u64> {
    let field = bytes.split(|b| *b == b' ').nth(3)?;
    let slash = field.iter().position(|b| *b == b'/')?;
    parse_u64(&field[slash + 1..])
}

/// Bytes read and written on the physical disks of `/proc/diskstats` (sectors are 512 bytes
/// there whatever the device's sector size). `disks` caches, per line, whether the device is
/// one (looked up in sysfs only when a line's name changes).
fn physical_disk_bytes(
    bytes: &[u8],
    disks: &mut Vec<(Box<[u8]>, bool)>,
    sys_class_block: &std::path::Path,
) -> (u64, u64) {
    let (mut read, mut write) = (0u64, 0u64);
    for (index, line) in bytes
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let mut fields = line.split(|b| *b == b' ').filter(|f| !f.is_empty());
        let Some(name) = fields.nth(2) else { continue };
        if disks.get(index).is_none_or(|(known, _)| **known != *name) {
            let physical = std::str::from_utf8(name)
                .is_ok_and(|name| sys_class_block.join(name).join("device").exists());
            let entry = (Box::from(name), physical);
            if index < disks.len() {
                disks[index] = entry;
            } else {
                disks.push(entry);
            }
        }
        if !disks[index].1 {
            continue;
        }
        // After the name: reads, merged, sectors read, ms, writes, merged, sectors written.
        let mut numbers = fields.map(parse_u64);
        let sectors_read = numbers.nth(2).flatten().unwrap_or(0);
        let sectors_written = numbers.nth(3).flatten().unwrap_or(0);
        read = read.saturating_add(sectors_read.saturating_mul(512));
        write = write.saturating_add(sectors_written.saturating_mul(512));
    }
    (read, write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_and_v1_io_lines_sum_per_device_and_in_total() {
        let v2 = b"8:0 rbytes=4096 wbytes=512 rios=1 wios=1 dbytes=0 dios=0\n253:1 rbytes=10 wbytes=20\n";
        assert_eq!(cgroup_io_totals(CgroupVersion::V2, v2), (4106, 532));
        let v1 = b"8:0 Read 4096\n8:0 Write 512\n8:0 Sync 0\n8:0 Total 4608\nTotal 4608\n";
        assert_eq!(cgroup_io_totals(CgroupVersion::V1, v1), (4096, 512));
        let mut devices = Vec::new();
        for_each_device(CgroupVersion::V1, v1, |d, r, w| {
            devices.push((d.to_vec(), r, w))
        });
        assert_eq!(devices.len(), 2);
        assert!(devices.iter().all(|(d, _, _)| d == b"8:0"));
    }

    #[test]
    fn devices_are_listed_in_file_order_and_their_entries_reused() {
        let v1 = b"8:0 Read 4096\n8:0 Write 512\n8:16 Read 1\n8:16 Write 2\nTotal 4611\n";
        let mut devices = Vec::new();
        devices_from(CgroupVersion::V1, v1, &mut devices);
        let listed = |devices: &[DeviceIo]| -> Vec<(String, u64, u64)> {
            devices
                .iter()
                .map(|d| (d.device.to_string(), d.read_bytes, d.write_bytes))
                .collect()
        };
        assert_eq!(
            listed(&devices),
            [("8:0".into(), 4096, 512), ("8:16".into(), 1, 2)]
        );
        let first = Arc::clone(&devices[1].device);
        // Values replaced, not added; a device gone from the file is gone from the list; the
        // entry of a device listed before is the same allocation.
        let v2 = b"8:16 rbytes=10 wbytes=20\n";
        devices_from(CgroupVersion::V2, v2, &mut devices);
        assert_eq!(listed(&devices), [("8:16".into(), 10, 20)]);
        assert!(Arc::ptr_eq(&first, &devices[0].device));
        devices_from(CgroupVersion::V2, b"", &mut devices);
        assert!(devices.is_empty());
    }

    #[test]
    fn a_zombie_root_is_read_by_pid_and_start_time() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("42")).unwrap();
        // comm with a space and a parenthesis; starttime (field 22) is 777.
        let stat = "42 (a) b) Z 1 42 42 0 -1 4194564 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n";
        std::fs::write(dir.path().join("42/stat"), stat).unwrap();
        let io = "rchar: 1\nwchar: 2\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 67108864\ncancelled_write_bytes: 0\n";
        std::fs::write(dir.path().join("42/io"), io).unwrap();
        assert_eq!(zombie_io(dir.path(), 42, 777), Some((4096, 67108864)));
        // Another process with the same pid, or none.
        assert_eq!(zombie_io(dir.path(), 42, 778), None);
        assert_eq!(zombie_io(dir.path(), 43, 777), None);
    }

    #[test]
    fn loadavg_gives_the_live_task_count() {
        assert_eq!(
            loadavg_tasks(b"16.45 14.16 10.05 17/237 21993\n"),
            Some(237)
        );
        assert_eq!(loadavg_tasks(b"garbage"), None);
    }

    #[test]
    fn diskstats_counts_physical_disks_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("vda/device")).unwrap();
        std::fs::create_dir_all(dir.path().join("vda1")).unwrap();
        let stats = b" 254 0 vda 10 0 8 5 20 0 16 9 0 0 0\n 254 1 vda1 10 0 8 5 20 0 16 9 0 0 0\n   7 0 loop0 1 0 2 0 1 0 2 0 0 0 0\n";
        let mut disks = Vec::new();
        assert_eq!(
            physical_disk_bytes(stats, &mut disks, dir.path()),
            (8 * 512, 16 * 512)
        );
        assert_eq!(disks.len(), 3);
        assert!(disks[0].1 && !disks[1].1 && !disks[2].1);
    }

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

    /// `/proc/diskstats` is a record-by-record seq_file: with 80 more loop devices it runs past
    /// a page, and the bytes of a disk listed after the first page are counted.
    #[test]
    #[ignore = "root: attaches 80 loop devices"]
    fn a_disk_past_the_first_page_of_diskstats_is_counted() {
        let loops = crate::long_files::LoopDevices::new(80);
        let last = loops.devices.last().unwrap();
        let status = std::process::Command::new("dd")
            .args([
                &format!("if={last}"),
                "of=/dev/null",
                "bs=4k",
                "count=16",
                "iflag=direct",
            ])
            .status()
            .unwrap();
        assert!(status.success());
        let name = last.trim_start_matches("/dev/");
        // Only the last loop device counts as a physical disk in this fixture's sysfs.
        let sys_class_block = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(sys_class_block.path().join(name).join("device")).unwrap();
        let oracle = std::fs::read_to_string("/proc/diskstats").unwrap();
        let line_at = oracle.find(&format!(" {name} ")).unwrap();
        assert!(
            line_at > crate::long_files::PAGE,
            "{name} at byte {line_at}"
        );
        let fields: Vec<u64> = oracle[line_at..]
            .lines()
            .next()
            .unwrap()
            .split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap())
            .collect();
        let expected = (fields[2] * 512, fields[6] * 512);
        assert!(expected.0 >= 64 * 1024, "{expected:?}");
        let mut file = HeldFile::new("/proc/diskstats", FileKind::Records);
        let mut buf = Vec::new();
        let mut disks = Vec::new();
        let bytes = file.read(&mut buf).unwrap();
        assert_eq!(
            physical_disk_bytes(bytes, &mut disks, sys_class_block.path()),
            expected
        );
    }
}
