//! System-wide sources: `/proc/meminfo`, `/proc/stat`, `/proc/pressure/{cpu,memory,io}`, the
//! parser of `/proc/vmstat`'s OOM-kill count, `/proc/loadavg`'s task count ([`LoadavgReader`])
//! and the physical disks' bytes of `/proc/diskstats` ([`DiskstatsReader`]).
//!
//! [`SystemReader`] holds each file open and re-reads it with `pread` into one reused buffer, so a
//! steady-state read allocates nothing (use [`SystemReader::read_into`] with a reused
//! [`SystemSample`]). The parsers are public and take bytes, so they also serve fixture tests and
//! the cgroup module (which reuses [`parse_pressure`] for `*.pressure` files).

mod diskstats;
mod identity;
mod loadavg;
mod meminfo;
pub(crate) mod parse;
mod pressure;
mod stat;
mod vmstat;

#[cfg(test)]
mod tests;

pub(crate) use diskstats::{disks_with_io, is_physical_disk, DiskstatsReader};
pub(crate) use identity::{boot_time_seconds, hostname, online_cpus, random_uuid};
pub(crate) use loadavg::LoadavgReader;
pub use meminfo::parse_meminfo;
pub(crate) use meminfo::MemInfo;
pub use pressure::parse_pressure;
pub(crate) use pressure::Pressure;
pub use stat::{cpu_rate_logical_processors, parse_stat};
pub(crate) use stat::{CpuTimes, StatCounters};
pub(crate) use vmstat::OomKillReader;

use super::file::{FileKind, HeldFile, SourceError};
use super::roots::Roots;

/// Which system files one [`SystemReader::read`] reads; the others are skipped entirely.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemFields {
    /// `/proc/meminfo`.
    pub meminfo: bool,
    /// `/proc/stat` (CPU times and process counters).
    pub stat: bool,
    /// `/proc/pressure/{cpu,memory,io}`.
    pub psi: bool,
}

impl SystemFields {
    /// Every file.
    pub const ALL: Self = Self {
        meminfo: true,
        stat: true,
        psi: true,
    };
    /// No file.
    pub const NONE: Self = Self {
        meminfo: false,
        stat: false,
        psi: false,
    };
}

/// Raw system counters from one read. A value is `None` when it was not requested, its file is
/// missing (PSI disabled or not built in: not an error), or its file failed (see `errors`).
#[derive(Debug, Default)]
pub struct SystemSample {
    /// `/proc/meminfo`.
    pub memory: Option<MemInfo>,
    /// `/proc/stat` except the per-CPU lines.
    pub stat: Option<StatCounters>,
    /// The per-CPU lines of `/proc/stat` in CPU order; empty when unavailable.
    pub per_cpu: Vec<CpuTimes>,
    /// `/proc/pressure/cpu`.
    pub cpu_pressure: Option<Pressure>,
    /// `/proc/pressure/memory`.
    pub memory_pressure: Option<Pressure>,
    /// `/proc/pressure/io`.
    pub io_pressure: Option<Pressure>,
    /// Why requested values are `None`: failed reads and unparsable files, with their paths.
    pub errors: Vec<SourceError>,
}

impl SystemSample {
    /// Resets every value, keeping the allocated capacity of `per_cpu` and `errors`.
    pub fn clear(&mut self) {
        self.memory = None;
        self.stat = None;
        self.per_cpu.clear();
        self.cpu_pressure = None;
        self.memory_pressure = None;
        self.io_pressure = None;
        self.errors.clear();
    }
}

/// A PSI file, remembered as unsupported once the kernel said so: PSI cannot be switched on at
/// run time (`psi=` is a boot parameter), so retrying would only cost a failed open every tick.
#[derive(Debug)]
struct PsiFile {
    file: HeldFile,
    unsupported: bool,
}

impl PsiFile {
    fn new(roots: &Roots, name: &str) -> Self {
        Self {
            file: HeldFile::new(roots.proc.join("pressure").join(name), FileKind::Whole),
            unsupported: false,
        }
    }

    fn read(&mut self, buf: &mut Vec<u8>, errors: &mut Vec<SourceError>) -> Option<Pressure> {
        if self.unsupported {
            return None;
        }
        match self.file.read(buf) {
            Ok(content) => parse_or_record(content, self.file.path(), errors, parse_pressure),
            Err(error) if psi_unsupported(&error) => {
                self.unsupported = true;
                None
            }
            Err(error) => {
                errors.push(error);
                None
            }
        }
    }
}

/// ENOENT: kernel without `CONFIG_PSI`; EOPNOTSUPP: booted with `psi=0`.
fn psi_unsupported(error: &SourceError) -> bool {
    match error {
        SourceError::Io { source, .. } => {
            error.is_gone() || source.raw_os_error() == Some(libc::EOPNOTSUPP)
        }
        SourceError::Malformed { .. } => false,
    }
}

fn parse_or_record<T>(
    content: &[u8],
    path: &std::path::Path,
    errors: &mut Vec<SourceError>,
    parse: impl FnOnce(&[u8]) -> Option<T>,
) -> Option<T> {
    let parsed = parse(content);
    if parsed.is_none() {
        errors.push(SourceError::malformed(path, "no recognisable line"));
    }
    parsed
}

/// Reads the system-wide files through descriptors held open between reads.
#[derive(Debug)]
pub struct SystemReader {
    meminfo: HeldFile,
    stat: HeldFile,
    cpu_pressure: PsiFile,
    memory_pressure: PsiFile,
    io_pressure: PsiFile,
    buf: Vec<u8>,
}

impl SystemReader {
    /// Prepares the readers for `roots`; files are opened on first use.
    pub fn new(roots: &Roots) -> Self {
        Self {
            meminfo: HeldFile::new(roots.proc.join("meminfo"), FileKind::Whole),
            stat: HeldFile::new(roots.proc.join("stat"), FileKind::Whole),
            cpu_pressure: PsiFile::new(roots, "cpu"),
            memory_pressure: PsiFile::new(roots, "memory"),
            io_pressure: PsiFile::new(roots, "io"),
            // /proc/stat is ~1 KiB per 2 CPUs plus the interrupt line; 16 KiB avoids regrowth on
            // most machines, and the buffer keeps whatever it grew to.
            buf: Vec::with_capacity(16 * 1024),
        }
    }

    /// Reads what `what` asks for into a new sample. Allocates the per-CPU vector: on a hot path
    /// use [`read_into`](Self::read_into) with a reused sample instead.
    pub fn read(&mut self, what: SystemFields) -> SystemSample {
        let mut sample = SystemSample::default();
        self.read_into(what, &mut sample);
        sample
    }

    /// Reads what `what` asks for into `sample` (cleared first). Allocates nothing once the
    /// buffers have grown to fit, unless a read fails (the error records its path).
    pub fn read_into(&mut self, what: SystemFields, sample: &mut SystemSample) {
        sample.clear();
        let buf = &mut self.buf;
        let errors = &mut sample.errors;
        if what.meminfo {
            sample.memory = match self.meminfo.read(buf) {
                Ok(content) => parse_or_record(content, self.meminfo.path(), errors, parse_meminfo),
                Err(error) => {
                    errors.push(error);
                    None
                }
            };
        }
        if what.stat {
            let per_cpu = &mut sample.per_cpu;
            sample.stat = match self.stat.read(buf) {
                Ok(content) => parse_or_record(content, self.stat.path(), errors, |bytes| {
                    parse_stat(bytes, per_cpu)
                }),
                Err(error) => {
                    errors.push(error);
                    None
                }
            };
        }
        if what.psi {
            sample.cpu_pressure = self.cpu_pressure.read(buf, errors);
            sample.memory_pressure = self.memory_pressure.read(buf, errors);
            sample.io_pressure = self.io_pressure.read(buf, errors);
        }
    }
}
