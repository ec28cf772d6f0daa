//! Cgroup values the kernel keeps exactly in memory, for every cgroup of one hierarchy, from one
//! BPF cgroup-iterator read (issue 31, item 2). [`pass`] serves the measured cgroups with it.
//!
//! The program (`relay-metrics-ebpf/iter/cgroup_iter.bpf.c`, C with CO-RE, built by clang into
//! the committed [`OBJECT`]) is attached with the hierarchy root's cgroup fd and walks its
//! descendants in pre-order. For each cgroup it writes one fixed-size record ([`CgroupRecord`])
//! into an mmap-able array map: its kernfs id (the inode number of its directory), and the
//! memory page counters (usage, watermark, limit, failcnt; memsw likewise), the OOM-kill count,
//! pids current and limit, and the CFS bandwidth counters, quota and period. The iterator's own output is only the
//! record count: a cgroup walk cannot continue in a second `read()` (the kernel ends it with
//! `EOPNOTSUPP` once it dropped `cgroup_mutex`), and one read holds at most ~32 KiB.
//!
//! Each value is used only where [`exact::check_kinds`] found it equal to its file (bracketed by a
//! file read before and after); [`exact::Verdict`] says per kind where it comes from and why.
//! Not here: v2 `usage_usec` needs the rstat flush kfunc (`css_rstat_flush` on 6.16+,
//! `cgroup_rstat_flush` before), and aya 0.14 cannot link a program that calls a kfunc (aya-obj
//! 0.3.0 has no `.ksyms` extern support); without the flush the per-CPU deltas are pending, so
//! that kind stays on its file.
//!
//! Loading needs root (or CAP_BPF + CAP_PERFMON), kernel BTF, iter/cgroup (Linux 6.1+) and a
//! kernel not locked down for confidentiality.

#[cfg(test)]
mod bench;
pub(crate) mod exact;
pub(crate) mod pass;
mod paths;
mod sys;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::source::held::Published;

/// The cgroup-iterator object, committed so that a plain `cargo build` needs no clang.
static OBJECT: &[u8] = aya::include_bytes_aligned!("cgroup_iter.bpf.o");

/// The program's and the record map's names in [`OBJECT`].
const PROGRAM: &str = "cgroup_values";
const RECORD_MAP: &str = "records";

/// `MAX_CGROUPS` in the program: the record map's length.
pub(crate) const MAX_CGROUPS: usize = 16384;

/// Fields of one record (`struct cgroup_record`), each a native-endian 64-bit value.
const RECORD_FIELDS: usize = 19;
/// Size of one record.
const RECORD_BYTES: usize = RECORD_FIELDS * 8;

/// `cgroup_record.valid` bits.
const VALID_MEMORY: u64 = 1;
const VALID_PIDS: u64 = 2;
const VALID_CFS_BANDWIDTH: u64 = 8;
const VALID_ROOT: u64 = 16;
/// The count's bit for a walk that met more than [`MAX_CGROUPS`] cgroups.
const COUNT_TRUNCATED: u64 = 1 << 63;

/// Memory page counters (`struct page_counter`), pages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PageCounter {
    pub usage: u64,
    pub watermark: u64,
    pub max: u64,
    pub failcnt: u64,
}

/// One cgroup as the iterator saw it: raw kernel values. A controller's values are `None`
/// where that controller is not on the hierarchy (or, on v2, not enabled for the cgroup).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CgroupRecord {
    /// kernfs id: the inode number of the cgroup's directory.
    pub id: u64,
    /// Depth below the hierarchy's root (0: the root).
    pub level: u64,
    /// `memcg->memory`.
    pub memory: Option<PageCounter>,
    /// `memcg->memsw` (v1; on v2 the same union member is the swap counter).
    pub memsw: Option<PageCounter>,
    /// `memcg->memory_events[MEMCG_OOM_KILL]`.
    pub oom_kill: Option<u64>,
    /// `pids->counter` and `pids->limit`.
    pub pids: Option<(u64, u64)>,
    /// `tg->cfs_bandwidth`: periods, throttled periods, throttled time (ns).
    pub cfs: Option<(u64, u64, u64)>,
    /// `tg->cfs_bandwidth`: quota (ns; `u64::MAX`, the kernel's `RUNTIME_INF`: none) and
    /// period (ns).
    pub cfs_bandwidth: Option<(u64, u64)>,
}

impl CgroupRecord {
    /// Parses one record; `None` unless `bytes` is exactly [`RECORD_BYTES`] long.
    pub(crate) fn parse(bytes: &[u8]) -> Option<Self> {
        if bytes.len() != RECORD_BYTES {
            return None;
        }
        let mut f = [0u64; RECORD_FIELDS];
        for (field, chunk) in f.iter_mut().zip(bytes.chunks_exact(8)) {
            *field = u64::from_ne_bytes(chunk.try_into().ok()?);
        }
        let valid = f[1];
        let has = |bit: u64| valid & bit != 0;
        let counter = |at: usize| PageCounter {
            usage: f[at],
            watermark: f[at + 1],
            max: f[at + 2],
            failcnt: f[at + 3],
        };
        Some(Self {
            id: f[0],
            level: f[2],
            memory: has(VALID_MEMORY).then(|| counter(3)),
            memsw: has(VALID_MEMORY).then(|| counter(7)),
            oom_kill: has(VALID_MEMORY).then_some(f[11]),
            pids: has(VALID_PIDS).then_some((f[12], f[13])),
            cfs: has(VALID_CFS_BANDWIDTH).then_some((f[14], f[15], f[16])),
            cfs_bandwidth: has(VALID_CFS_BANDWIDTH).then_some((f[17], f[18])),
        })
        .filter(|record| (valid & VALID_ROOT != 0) == (record.level == 0))
    }
}

/// Why the iterator cannot serve: the files serve instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cgroup iterator unavailable: {0}")]
pub(crate) struct Unavailable(pub String);

/// A loaded cgroup iterator attached to one hierarchy: each [`CgroupIter::read`] walks it once.
#[derive(Debug)]
pub(crate) struct CgroupIter {
    /// The hierarchy's mount point (the root cgroup's directory).
    root: PathBuf,
    /// The iterator link; it holds the program and, through it, the record map.
    link: OwnedFd,
    /// The link in the process-wide count the collector's own descriptor count leaves out
    /// (see `source::held`).
    _descriptors: Published,
    /// The record map, mapped read-only.
    records: sys::Mapping,
    /// kernfs id → path below [`Self::root`], refreshed when a read meets an unknown id.
    paths: HashMap<u64, PathBuf>,
    buf: Vec<u8>,
}

impl CgroupIter {
    /// Loads the program and attaches it to the hierarchy mounted at `root` (pre-order walk of
    /// all its cgroups).
    pub(crate) fn load(root: &Path) -> Result<Self, Unavailable> {
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(Unavailable(
                "the kernel has no BTF (/sys/kernel/btf/vmlinux is missing)".to_owned(),
            ));
        }
        let dir = std::fs::File::open(root)
            .map_err(|error| Unavailable(format!("opening {}: {error}", root.display())))?;
        let (link, map) = load_and_attach(dir.as_fd())?;
        let records = sys::Mapping::new(map.as_fd(), MAX_CGROUPS * RECORD_BYTES)
            .map_err(|error| Unavailable(format!("mapping the record map: {error}")))?;
        // Only the link is kept: the map's descriptor closes here, the mapping and the link
        // hold the map.
        Ok(Self {
            root: root.to_owned(),
            link,
            _descriptors: Published::holding(1),
            records,
            paths: HashMap::new(),
            buf: Vec::with_capacity(64),
        })
    }

    /// The hierarchy's mount point.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Runs one walk, replacing `out` with one record per cgroup in pre-order (the root first).
    /// True when the hierarchy holds more than [`MAX_CGROUPS`] cgroups: `out` then holds the
    /// first [`MAX_CGROUPS`] of the walk only.
    pub(crate) fn read(&mut self, out: &mut Vec<CgroupRecord>) -> io::Result<bool> {
        out.clear();
        let iter = sys::iter_create(self.link.as_fd())?;
        self.buf.clear();
        // The count comes at the end of the walk; read until end of file all the same.
        loop {
            if self.buf.capacity() - self.buf.len() < 16 {
                self.buf.reserve(64);
            }
            match rustix::io::read(&iter, rustix::buffer::spare_capacity(&mut self.buf)) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
        let count = <[u8; 8]>::try_from(self.buf.as_slice())
            .map(u64::from_ne_bytes)
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "cgroup iterator output of {} bytes, not one count",
                        self.buf.len()
                    ),
                )
            })?;
        let truncated = count & COUNT_TRUNCATED != 0;
        let count = usize::try_from(count & !COUNT_TRUNCATED).map_err(io::Error::other)?;
        let bytes = self.records.bytes();
        let records = bytes.get(..count * RECORD_BYTES).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "count beyond the record map")
        })?;
        out.extend(
            records
                .chunks_exact(RECORD_BYTES)
                .filter_map(CgroupRecord::parse),
        );
        Ok(truncated)
    }

    /// The path of the cgroup with kernfs id `id`, relative to the hierarchy's root (`""` for
    /// the root); looks the hierarchy up again for an id not seen before.
    pub(crate) fn path_of(&mut self, id: u64) -> Option<&Path> {
        if !self.paths.contains_key(&id) {
            self.paths = paths::by_inode(&self.root);
        }
        self.paths.get(&id).map(PathBuf::as_path)
    }
}

/// Loads the object with aya (which relocates its CO-RE reads against the kernel's BTF) and
/// attaches it with the hierarchy's cgroup fd. Gives the link and the record map.
fn load_and_attach(cgroup: std::os::fd::BorrowedFd<'_>) -> Result<(OwnedFd, OwnedFd), Unavailable> {
    let fail = |what: &str, error: &dyn std::error::Error| {
        Unavailable(format!(
            "{what}: {}",
            crate::source::task_iter::describe(error)
        ))
    };
    let btf = aya::Btf::from_sys_fs().map_err(|error| fail("kernel BTF", &error))?;
    let mut ebpf = aya::EbpfLoader::new()
        .btf(Some(&btf))
        .load(OBJECT)
        .map_err(|error| fail("loading the cgroup iterator object", &error))?;
    let map = match ebpf.map(RECORD_MAP) {
        Some(aya::maps::Map::Array(data)) => data
            .fd()
            .as_fd()
            .try_clone_to_owned()
            .map_err(|error| fail("the record map", &error))?,
        _ => return Err(Unavailable(format!("the object has no array {RECORD_MAP}"))),
    };
    let program: &mut aya::programs::Iter = ebpf
        .program_mut(PROGRAM)
        .ok_or_else(|| Unavailable(format!("the object has no program {PROGRAM}")))?
        .try_into()
        .map_err(|error| fail(PROGRAM, &error))?;
    program
        .load("cgroup", &btf)
        .map_err(|error| fail("loading the cgroup iterator", &error))?;
    let fd = program.fd().map_err(|error| fail(PROGRAM, &error))?;
    let link = sys::link_create(fd.as_fd(), cgroup)
        .map_err(|error| Unavailable(format!("attaching the cgroup iterator: {error}")))?;
    Ok((link, map))
}
