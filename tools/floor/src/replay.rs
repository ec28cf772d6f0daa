//! Replaying one collect's read-type syscalls on descriptors opened once.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use relay_metrics::sampler::FixedRate;

use crate::trace::{self, Call, DirRef, FdRef, MapSpec, Trace};

enum Op {
    Pread {
        fd: i32,
        count: usize,
        offset: i64,
    },
    Read {
        fd: i32,
        count: usize,
    },
    Lseek {
        fd: i32,
        offset: i64,
        whence: i32,
    },
    Getdents {
        fd: i32,
        count: usize,
    },
    Statfs {
        path: CString,
    },
    Fstatfs {
        fd: i32,
    },
    Fstatat {
        dir: i32,
        path: CString,
        flags: i32,
    },
    Statx {
        dir: i32,
        path: CString,
        flags: i32,
        mask: u32,
    },
    BpfLookup {
        map: i32,
        key: Vec<u8>,
    },
}

/// The replay: ops with their own descriptors, and a label per op for the breakdown.
pub struct Plan {
    ops: Vec<(Op, String)>,
    buf: Vec<u8>,
    value: Vec<u8>,
    rewinds: usize,
    skipped: usize,
}

/// Per-iteration statistics.
pub struct Timings {
    pub median_us: f64,
    pub p99_us: f64,
    pub min_us: f64,
    pub max_us: f64,
}

impl Timings {
    /// Quantiles of durations in ns (at least one).
    fn of(mut ns: Vec<f64>) -> Self {
        ns.sort_by(f64::total_cmp);
        let at = |q: f64| ns[((ns.len() - 1) as f64 * q).round() as usize] / 1e3;
        Self {
            median_us: at(0.5),
            p99_us: at(0.99),
            min_us: at(0.0),
            max_us: at(1.0),
        }
    }
}

/// What [`Plan::run_paced`] measured.
pub struct Paced {
    /// Time of each replay.
    pub replay: Timings,
    /// How late each wake-up was relative to its deadline.
    pub lateness: Timings,
    /// Deadlines skipped because a later one had passed too.
    pub missed_ticks: u64,
    /// CPU time over wall time, % of one core.
    pub cpu_percent: f64,
}

fn open(path: &str, flags: i32) -> Result<i32> {
    let c = CString::new(path)?;
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        bail!("open {path}: {}", std::io::Error::last_os_error());
    }
    Ok(fd)
}

fn bpf(cmd: i32, attr: &mut [u64; 16]) -> i64 {
    // SAFETY: `attr` is a zeroed 128-byte bpf_attr union owned by the caller; pointers in it
    // point to live buffers of the sizes the map was created with.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), 128usize) }
}

fn create_map(spec: &MapSpec) -> Result<i32> {
    let mut attr = [0u64; 16];
    attr[0] = u64::from(spec.map_type) | (u64::from(spec.key_size) << 32);
    attr[1] = u64::from(spec.value_size) | (u64::from(spec.max_entries) << 32);
    let fd = bpf(0, &mut attr);
    if fd < 0 {
        bail!("BPF_MAP_CREATE: {}", std::io::Error::last_os_error());
    }
    Ok(i32::try_from(fd)?)
}

fn key_bytes(spec: &MapSpec, key: u64) -> Vec<u8> {
    let mut bytes = key.to_le_bytes().to_vec();
    bytes.resize(spec.key_size as usize, 0);
    bytes
}

impl Plan {
    /// Opens every file the collect touched and creates look-alike maps.
    pub fn new(trace: &Trace) -> Result<Self> {
        let mut builder = Builder {
            trace,
            fds: HashMap::new(),
            fresh: Vec::new(),
            maps: HashMap::new(),
            ops: Vec::new(),
            rewinds: 0,
            max_count: 4096,
            max_value: 8,
        };
        let mut skipped = 0;
        for call in &trace.collect {
            // A process that exited since the trace (strace itself, in global scope) has no
            // files left to replay: skip its calls and say how many.
            if of_exited_process(call) {
                skipped += 1;
                continue;
            }
            let label = format!(
                "{} {}",
                trace::kind(call),
                trace::call_path(call).map_or_else(String::new, |p| trace::file_type(&p))
            );
            if let Some(op) = builder.op(call)? {
                builder.ops.push((op, label));
            }
        }
        Ok(Self {
            ops: builder.ops,
            buf: vec![0; builder.max_count],
            value: vec![0; builder.max_value],
            rewinds: builder.rewinds,
            skipped,
        })
    }

    /// Calls on processes that exited since the trace, not replayed.
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// Replayed calls per iteration.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Rewinds added for descriptors the collector opened per collect.
    pub fn rewinds(&self) -> usize {
        self.rewinds
    }

    fn exec(&mut self, index: usize) {
        let buf = self.buf.as_mut_ptr().cast::<libc::c_void>();
        // SAFETY: every pointer passed below points into buffers owned by `self` that are at
        // least as large as the count given (sized in `new`), or to valid C strings; the
        // results are ignored on purpose: the cost, not the data, is measured.
        unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            let mut sfs: libc::statfs = std::mem::zeroed();
            let mut stx: libc::statx = std::mem::zeroed();
            match &self.ops[index].0 {
                Op::Pread { fd, count, offset } => {
                    libc::pread(*fd, buf, *count, *offset);
                }
                Op::Read { fd, count } => {
                    libc::read(*fd, buf, *count);
                }
                Op::Lseek { fd, offset, whence } => {
                    libc::lseek(*fd, *offset, *whence);
                }
                Op::Getdents { fd, count } => {
                    libc::syscall(libc::SYS_getdents64, *fd, buf, *count);
                }
                Op::Statfs { path } => {
                    libc::statfs(path.as_ptr(), &mut sfs);
                }
                Op::Fstatfs { fd } => {
                    libc::fstatfs(*fd, &mut sfs);
                }
                Op::Fstatat { dir, path, flags } => {
                    libc::fstatat(*dir, path.as_ptr(), &mut st, *flags);
                }
                Op::Statx {
                    dir,
                    path,
                    flags,
                    mask,
                } => {
                    libc::statx(*dir, path.as_ptr(), *flags, *mask, &mut stx);
                }
                Op::BpfLookup { map, key } => {
                    let mut attr = [0u64; 16];
                    attr[0] = *map as u64;
                    attr[1] = key.as_ptr() as u64;
                    attr[2] = self.value.as_mut_ptr() as u64;
                    bpf(1, &mut attr);
                }
            }
        }
    }

    /// Runs the whole replay `iterations` times (after a warm-up) and times each iteration.
    pub fn run(&mut self, iterations: usize) -> Timings {
        for _ in 0..iterations.min(200) {
            for i in 0..self.ops.len() {
                self.exec(i);
            }
        }
        let mut ns = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let started = Instant::now();
            for i in 0..self.ops.len() {
                self.exec(i);
            }
            ns.push(started.elapsed().as_nanos() as f64);
        }
        Timings::of(ns)
    }

    /// One replay every `period_us`, woken by the sampler `watch` uses (absolute deadlines,
    /// timer slack 1 % of the period, overdue ticks skipped and counted): per-replay timings,
    /// the wake-ups' lateness and the process's CPU share. The lateness and missed ticks of
    /// this loop, which does nothing but the reads, show what the machine itself imposes.
    /// Without `reads`, the loop only wakes up: the sampler's own cost on this machine.
    pub fn run_paced(&mut self, iterations: usize, period_us: u64, reads: bool) -> Paced {
        let cpu = || {
            // SAFETY: getrusage writes into the zeroed struct it is given.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
            let us = |t: libc::timeval| t.tv_sec as f64 * 1e6 + t.tv_usec as f64;
            us(usage.ru_utime) + us(usage.ru_stime)
        };
        let (cpu0, start) = (cpu(), Instant::now());
        let mut ticker = FixedRate::new(start, std::time::Duration::from_micros(period_us));
        let mut ns = Vec::with_capacity(iterations);
        let mut lateness_ns = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let tick = ticker.wait();
            lateness_ns.push(tick.lateness.as_nanos() as f64);
            let started = Instant::now();
            if reads {
                for op in 0..self.ops.len() {
                    self.exec(op);
                }
            }
            ns.push(started.elapsed().as_nanos() as f64);
        }
        let cpu_percent = 100.0 * (cpu() - cpu0) / (start.elapsed().as_secs_f64() * 1e6);
        Paced {
            replay: Timings::of(ns),
            lateness: Timings::of(lateness_ns),
            missed_ticks: ticker.missed_total(),
            cpu_percent,
        }
    }

    /// Mean time per collect of each (kind, file type), timing every call.
    pub fn breakdown(&mut self, iterations: usize) -> BTreeMap<String, (usize, u128)> {
        let mut out: BTreeMap<String, (usize, u128)> = BTreeMap::new();
        for (_, label) in &self.ops {
            out.entry(label.clone()).or_default().0 += 1;
        }
        let iterations = iterations.max(1);
        for _ in 0..iterations {
            for i in 0..self.ops.len() {
                let started = Instant::now();
                self.exec(i);
                let ns = started.elapsed().as_nanos();
                if let Some(entry) = out.get_mut(&self.ops[i].1) {
                    entry.1 += ns;
                }
            }
        }
        for entry in out.values_mut() {
            entry.1 /= iterations as u128;
        }
        out
    }
}

/// Whether `call` is on a file of a process (`/proc/<pid>/…`) that has exited since the trace.
fn of_exited_process(call: &Call) -> bool {
    let Some(path) = trace::call_path(call) else {
        return false;
    };
    let pid_dir: String = path.split('/').take(3).collect::<Vec<_>>().join("/");
    path.starts_with("/proc/")
        && pid_dir.len() > 6
        && pid_dir[6..].bytes().all(|b| b.is_ascii_digit())
        && !std::path::Path::new(&pid_dir).exists()
}

/// What [`Plan::new`] gathers while it turns a trace's calls into operations.
struct Builder<'a> {
    trace: &'a Trace,
    /// Our descriptor for each file of the trace.
    fds: HashMap<FdRef, i32>,
    /// Files the collector opened during the collect that no call has positioned yet.
    fresh: Vec<FdRef>,
    /// Our look-alike map for each map of the trace: descriptor, spec, entries used.
    maps: HashMap<i32, (i32, MapSpec, u64)>,
    ops: Vec<(Op, String)>,
    rewinds: usize,
    max_count: usize,
    max_value: usize,
}

impl Builder<'_> {
    /// The operation that replays `call` (`None` for a call that only changes what is open).
    fn op(&mut self, call: &Call) -> Result<Option<Op>> {
        Ok(Some(match call {
            Call::Pread {
                file,
                count,
                offset,
            } => {
                self.max_count = self.max_count.max(*count);
                Op::Pread {
                    fd: self.own(file)?,
                    count: *count,
                    offset: *offset,
                }
            }
            Call::Read { file, count } => {
                self.max_count = self.max_count.max(*count);
                let fd = self.own(file)?;
                self.rewind_if_fresh(file, fd);
                Op::Read { fd, count: *count }
            }
            Call::Getdents { file, count } => {
                self.max_count = self.max_count.max(*count);
                let fd = self.own(file)?;
                self.rewind_if_fresh(file, fd);
                Op::Getdents { fd, count: *count }
            }
            Call::Lseek {
                file,
                offset,
                whence,
            } => {
                self.fresh.retain(|f| f != file);
                Op::Lseek {
                    fd: self.own(file)?,
                    offset: *offset,
                    whence: *whence,
                }
            }
            Call::Statfs { path } => Op::Statfs {
                path: CString::new(path.as_str())?,
            },
            Call::Fstatfs { file } => Op::Fstatfs {
                fd: self.own(file)?,
            },
            Call::Fstatat { dir, path, flags } => Op::Fstatat {
                dir: self.dir_fd(dir)?,
                path: CString::new(path.as_str())?,
                flags: *flags,
            },
            Call::Statx {
                dir,
                path,
                flags,
                mask,
            } => Op::Statx {
                dir: self.dir_fd(dir)?,
                path: CString::new(path.as_str())?,
                flags: *flags,
                mask: *mask,
            },
            Call::Openat { opened, .. } => {
                if let Some(file) = opened {
                    self.fresh.push(file.clone());
                }
                return Ok(None);
            }
            Call::Close { .. } => return Ok(None),
            Call::BpfLookup { map_fd, hit } => self.bpf_lookup(*map_fd, *hit)?,
        }))
    }

    /// Our descriptor for `file`, opened on first use.
    fn own(&mut self, file: &FdRef) -> Result<i32> {
        if let Some(&fd) = self.fds.get(file) {
            return Ok(fd);
        }
        let fd = open(&file.path, libc::O_RDONLY)?;
        self.fds.insert(file.clone(), fd);
        Ok(fd)
    }

    fn dir_fd(&mut self, dir: &DirRef) -> Result<i32> {
        match dir {
            DirRef::Cwd => Ok(libc::AT_FDCWD),
            DirRef::Fd(file) => self.own(file),
        }
    }

    /// A descriptor the collector opened during the collect starts at offset 0; ours is
    /// reused across iterations, so rewind it before a position-dependent call.
    fn rewind_if_fresh(&mut self, file: &FdRef, fd: i32) {
        if let Some(i) = self.fresh.iter().position(|f| f == file) {
            self.fresh.swap_remove(i);
            self.ops.push((
                Op::Lseek {
                    fd,
                    offset: 0,
                    whence: libc::SEEK_SET,
                },
                "lseek (rewind for a per-collect open)".to_owned(),
            ));
            self.rewinds += 1;
        }
    }

    /// A lookup in our look-alike of the trace's map `map_fd` (created on first use): of a key
    /// we inserted for a hit (and always in an array map), of a key never inserted for a miss.
    fn bpf_lookup(&mut self, map_fd: i32, hit: bool) -> Result<Op> {
        let spec = *self
            .trace
            .maps
            .get(&map_fd)
            .with_context(|| format!("bpf map fd {map_fd} was not created in the trace"))?;
        let entry = match self.maps.get_mut(&map_fd) {
            Some(entry) => entry,
            None => {
                let fd = create_map(&spec)?;
                self.maps.entry(map_fd).or_insert((fd, spec, 0))
            }
        };
        let (fd, spec, used) = (entry.0, entry.1, entry.2);
        // Per-CPU maps copy one 8-byte-aligned value per possible CPU.
        self.max_value = self
            .max_value
            .max((spec.value_size as usize).div_ceil(8) * 8 * 256);
        let key = if hit || matches!(spec.map_type, 2 | 6) {
            entry.2 += 1;
            let key = key_bytes(&spec, used % u64::from(spec.max_entries.max(1)));
            insert(fd, &key, spec.value_size as usize)?;
            key
        } else {
            key_bytes(&spec, u64::from(u32::MAX - 1))
        };
        Ok(Op::BpfLookup { map: fd, key })
    }
}

fn insert(map: i32, key: &[u8], value_size: usize) -> Result<()> {
    let value = vec![0u8; value_size.div_ceil(8) * 8 * 256];
    let mut attr = [0u64; 16];
    attr[0] = map as u64;
    attr[1] = key.as_ptr() as u64;
    attr[2] = value.as_ptr() as u64;
    if bpf(2, &mut attr) < 0 {
        bail!("BPF_MAP_UPDATE_ELEM: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// Median cost of a bare syscall (getppid), ns.
pub fn bare_syscall_ns() -> u128 {
    let mut batches: Vec<u128> = (0..50)
        .map(|_| {
            let started = Instant::now();
            for _ in 0..1000 {
                // SAFETY: getppid takes no arguments and cannot fail.
                unsafe { libc::syscall(libc::SYS_getppid) };
            }
            started.elapsed().as_nanos() / 1000
        })
        .collect();
    batches.sort_unstable();
    batches[batches.len() / 2]
}
