//! Parsing `strace -f -qq -y -s 0` output into the syscalls of one collect.

use std::collections::HashMap;

use anyhow::{bail, Context, Result};

/// A file argument: the tracee's descriptor number and the path strace resolved it to (`-y`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FdRef {
    /// The descriptor number in the traced process.
    pub fd: i32,
    /// What it pointed to.
    pub path: String,
}

/// A directory argument of the `*at` calls.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DirRef {
    /// `AT_FDCWD`.
    Cwd,
    /// A descriptor.
    Fd(FdRef),
}

/// One traced syscall that the floor replays or counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Call {
    /// `pread64(fd, buf, count, offset)`.
    Pread {
        /// The file.
        file: FdRef,
        /// Buffer size asked for.
        count: usize,
        /// File offset.
        offset: i64,
    },
    /// `read(fd, buf, count)`.
    Read {
        /// The file.
        file: FdRef,
        /// Buffer size asked for.
        count: usize,
    },
    /// `lseek(fd, offset, whence)`.
    Lseek {
        /// The file.
        file: FdRef,
        /// The offset.
        offset: i64,
        /// `SEEK_*`.
        whence: i32,
    },
    /// `getdents64(fd, buf, count)`.
    Getdents {
        /// The directory.
        file: FdRef,
        /// Buffer size.
        count: usize,
    },
    /// `statfs(path, buf)`.
    Statfs {
        /// The path.
        path: String,
    },
    /// `fstatfs(fd, buf)`.
    Fstatfs {
        /// The file.
        file: FdRef,
    },
    /// `newfstatat(dir, path, buf, flags)`.
    Fstatat {
        /// Directory the path is relative to.
        dir: DirRef,
        /// The path.
        path: String,
        /// `AT_*` flags.
        flags: i32,
    },
    /// `statx(dir, path, flags, mask, buf)`.
    Statx {
        /// Directory the path is relative to.
        dir: DirRef,
        /// The path.
        path: String,
        /// `AT_*` flags.
        flags: i32,
        /// `STATX_*` mask.
        mask: u32,
    },
    /// `openat(dir, path, flags)` returning `opened` (counted, not replayed).
    Openat {
        /// The path.
        path: String,
        /// The descriptor it returned, if it succeeded.
        opened: Option<FdRef>,
    },
    /// `close(fd)` (counted, not replayed).
    Close {
        /// The file.
        file: FdRef,
    },
    /// `bpf(BPF_MAP_LOOKUP_ELEM, {map_fd=...})`.
    BpfLookup {
        /// The map's descriptor in the tracee.
        map_fd: i32,
        /// Whether the key was present (the call returned 0).
        hit: bool,
    },
}

/// A `BPF_MAP_CREATE` seen anywhere in the trace.
#[derive(Debug, Clone, Copy)]
pub struct MapSpec {
    /// `BPF_MAP_TYPE_*` number.
    pub map_type: u32,
    /// Key size, bytes.
    pub key_size: u32,
    /// Value size, bytes.
    pub value_size: u32,
    /// Capacity.
    pub max_entries: u32,
}

/// What the trace holds.
pub struct Trace {
    /// The syscalls of the last collect.
    pub collect: Vec<Call>,
    /// Collects found between the two `getrusage` calls of `bench`.
    pub collects_seen: usize,
    /// Whether those collects made the same syscalls on the same files.
    pub periodic: bool,
    /// Maps created by the tracee, by the descriptor they were created as.
    pub maps: HashMap<i32, MapSpec>,
    /// Trace lines of other threads inside the window (not replayed).
    pub other_threads: usize,
    /// Lines inside the window that were not understood (they are listed, never silently lost).
    pub unknown: Vec<String>,
}

/// Parses a whole trace of `relay-metrics bench --iterations collects`.
pub fn parse(text: &str, collects: usize) -> Result<Trace> {
    let mut maps = HashMap::new();
    let mut rusage_lines = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (index, line) in lines.iter().enumerate() {
        let (name, args, ret) = match split_line(line) {
            Some(parts) => parts,
            None => continue,
        };
        match name {
            "getrusage" => rusage_lines.push(index),
            "bpf" if args.starts_with("BPF_MAP_CREATE") => {
                if let (Some(fd), Some(spec)) = (leading_int(ret), map_spec(args)) {
                    maps.insert(fd as i32, spec);
                }
            }
            _ => {}
        }
    }
    let [.., before, after] = rusage_lines[..] else {
        bail!("the trace has fewer than two getrusage calls: not a `relay-metrics bench` trace");
    };
    // Only the collecting thread: the GPU sampler thread runs on its own schedule.
    let main_pid = lines[before].split_whitespace().next().unwrap_or("");
    let own_proc = format!("/proc/{main_pid}/");
    let mut calls = Vec::new();
    let mut unknown = Vec::new();
    let mut other_threads = 0;
    for line in &lines[before + 1..after] {
        if line.split_whitespace().next() != Some(main_pid) {
            other_threads += 1;
            continue;
        }
        let Some((name, args, ret)) = split_line(line) else {
            unknown.push((*line).to_owned());
            continue;
        };
        match parse_call(name, args, ret) {
            Ok(Some(call)) => calls.push(self_relative(call, &own_proc)),
            Ok(None) => {}
            Err(_) => unknown.push((*line).to_owned()),
        }
    }
    if calls.is_empty() {
        bail!("no syscalls between the bench's getrusage calls");
    }
    let signature: Vec<String> = calls.iter().map(signature).collect();
    let periodic = collects > 0
        && calls.len() % collects == 0
        && signature
            .chunks(calls.len() / collects)
            .all(|chunk| chunk == &signature[..calls.len() / collects]);
    let collect = if periodic {
        calls[calls.len() - calls.len() / collects..].to_vec()
    } else {
        // Fall back to the calls from the last occurrence of the collect's first call.
        let first = &signature[0];
        let start = signature.iter().rposition(|s| s == first).unwrap_or(0);
        calls[start..].to_vec()
    };
    Ok(Trace {
        collect,
        collects_seen: collects,
        periodic,
        maps,
        unknown,
        other_threads,
    })
}

/// `/proc/<collector pid>/...` (the collector's `/proc/self`, e.g. `/proc/self/net/dev`) becomes
/// `/proc/self/...` so that the replay reads its own.
fn self_relative(mut call: Call, own_proc: &str) -> Call {
    let fix = |path: &mut String| {
        if let Some(rest) = path.strip_prefix(own_proc) {
            *path = format!("/proc/self/{rest}");
        }
    };
    match &mut call {
        Call::Pread { file, .. }
        | Call::Read { file, .. }
        | Call::Lseek { file, .. }
        | Call::Getdents { file, .. }
        | Call::Fstatfs { file }
        | Call::Close { file } => fix(&mut file.path),
        Call::Statfs { path } => fix(path),
        Call::Openat { path, opened } => {
            fix(path);
            if let Some(file) = opened {
                fix(&mut file.path);
            }
        }
        Call::Fstatat { dir, path, .. } | Call::Statx { dir, path, .. } => {
            fix(path);
            if let DirRef::Fd(file) = dir {
                fix(&mut file.path);
            }
        }
        Call::BpfLookup { .. } => {}
    }
    call
}

/// The identity of a call for the periodicity check: kind and normalised file.
fn signature(call: &Call) -> String {
    format!("{} {}", kind(call), call_path(call).unwrap_or_default())
}

/// The syscall's name as reported.
pub fn kind(call: &Call) -> &'static str {
    match call {
        Call::Pread { .. } => "pread64",
        Call::Read { .. } => "read",
        Call::Lseek { .. } => "lseek",
        Call::Getdents { .. } => "getdents64",
        Call::Statfs { .. } => "statfs",
        Call::Fstatfs { .. } => "fstatfs",
        Call::Fstatat { .. } => "newfstatat",
        Call::Statx { .. } => "statx",
        Call::Openat { .. } => "openat",
        Call::Close { .. } => "close",
        Call::BpfLookup { .. } => "bpf(MAP_LOOKUP_ELEM)",
    }
}

/// The file a call is about, if any.
pub fn call_path(call: &Call) -> Option<String> {
    match call {
        Call::Pread { file, .. }
        | Call::Read { file, .. }
        | Call::Lseek { file, .. }
        | Call::Getdents { file, .. }
        | Call::Fstatfs { file }
        | Call::Close { file } => Some(file.path.clone()),
        Call::Statfs { path } | Call::Openat { path, .. } => Some(path.clone()),
        Call::Fstatat { dir, path, .. } | Call::Statx { dir, path, .. } => Some(match dir {
            DirRef::Cwd => path.clone(),
            DirRef::Fd(f) if path.is_empty() => f.path.clone(),
            DirRef::Fd(f) => format!("{}/{}", f.path, path),
        }),
        Call::BpfLookup { map_fd, .. } => Some(format!("bpf-map fd {map_fd}")),
    }
}

/// A path with pids, tids, interface and cgroup names replaced, to count per file type.
pub fn file_type(path: &str) -> String {
    let mut out = Vec::new();
    let parts: Vec<&str> = path.split('/').collect();
    for (i, part) in parts.iter().enumerate() {
        let prev = if i > 0 { parts[i - 1] } else { "" };
        let numeric = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let replaced = if prev == "proc" && (numeric || *part == "self") {
            "<pid>"
        } else if prev == "task" && numeric {
            "<tid>"
        } else if prev == "net" && parts.get(i + 1) == Some(&"statistics") {
            "<if>"
        } else if prev == "cgroup" && i + 2 < parts.len() {
            // /sys/fs/cgroup/<controller>/<group...>/<file>: keep the controller and file.
            out.push(*part);
            out.push("<group>");
            out.push(parts[parts.len() - 1]);
            break;
        } else {
            part
        };
        out.push(replaced);
    }
    out.join("/")
}

fn split_line(line: &str) -> Option<(&str, &str, &str)> {
    // "PID name(args) = ret"
    let rest = line.trim_start();
    let rest = rest
        .split_once(' ')
        .filter(|(pid, _)| pid.bytes().all(|b| b.is_ascii_digit()))
        .map_or(rest, |(_, r)| r)
        .trim_start();
    let open = rest.find('(')?;
    let name = &rest[..open];
    // strace pads the result column: `lseek(4</proc>, 0, SEEK_SET)      = 0`.
    let equals = rest.rfind(" = ")?;
    let close = rest[..equals].trim_end().strip_suffix(')')?.len();
    if close <= open {
        return None;
    }
    Some((name, &rest[open + 1..close], &rest[equals + 3..]))
}

fn leading_int(text: &str) -> Option<i64> {
    let text = text.trim();
    let end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(text.len(), |(i, _)| i);
    text[..end].parse().ok()
}

/// Splits the argument list at top-level commas (quotes, braces and `<path>` annotations nest).
fn split_args(args: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quoted, mut escaped, mut start) = (0i32, false, false, 0);
    let bytes = args.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        if quoted {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => quoted = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => quoted = true,
            b'{' | b'[' => depth += 1,
            b'<' if i > 0 && bytes[i - 1].is_ascii_digit() => depth += 1,
            b'}' | b']' | b'>' if depth > 0 => depth -= 1,
            b',' if depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(args[start..].trim());
    out
}

fn fd_ref(arg: &str) -> Result<FdRef> {
    let (fd, rest) = arg
        .split_once('<')
        .context("no <path> after the fd (strace -y?)")?;
    let path = rest.strip_suffix('>').context("unterminated <path>")?;
    Ok(FdRef {
        fd: fd.parse().context("fd")?,
        path: path.to_owned(),
    })
}

fn dir_ref(arg: &str) -> Result<DirRef> {
    if arg == "AT_FDCWD" {
        Ok(DirRef::Cwd)
    } else {
        Ok(DirRef::Fd(fd_ref(arg)?))
    }
}

fn string_arg(arg: &str) -> Result<String> {
    let inner = arg
        .strip_prefix('"')
        .and_then(|a| a.strip_suffix('"'))
        .context("not a string argument")?;
    let mut out = Vec::new();
    let mut bytes = inner.bytes();
    while let Some(b) = bytes.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match bytes.next() {
            Some(b'x') => {
                let hex: Vec<u8> = bytes.by_ref().take(2).collect();
                let hex = std::str::from_utf8(&hex).context("escape")?;
                out.push(u8::from_str_radix(hex, 16).context("escape")?);
            }
            Some(b'n') => out.push(b'\n'),
            Some(b't') => out.push(b'\t'),
            Some(other) => out.push(other),
            None => bail!("dangling escape"),
        }
    }
    Ok(String::from_utf8(out)?)
}

fn flags(arg: &str) -> i32 {
    arg.split('|')
        .map(|flag| match flag.trim() {
            "AT_SYMLINK_NOFOLLOW" => libc::AT_SYMLINK_NOFOLLOW,
            "AT_EMPTY_PATH" => libc::AT_EMPTY_PATH,
            "AT_NO_AUTOMOUNT" => libc::AT_NO_AUTOMOUNT,
            "AT_STATX_SYNC_AS_STAT" => libc::AT_STATX_SYNC_AS_STAT,
            "AT_STATX_DONT_SYNC" => libc::AT_STATX_DONT_SYNC,
            other => other.parse().unwrap_or(0),
        })
        .fold(0, |a, b| a | b)
}

fn statx_mask(arg: &str) -> u32 {
    arg.split('|')
        .map(|flag| match flag.trim() {
            "STATX_ALL" => libc::STATX_ALL,
            "STATX_BASIC_STATS" => libc::STATX_BASIC_STATS,
            "STATX_TYPE" => libc::STATX_TYPE,
            "STATX_MODE" => libc::STATX_MODE,
            "STATX_INO" => libc::STATX_INO,
            "STATX_SIZE" => libc::STATX_SIZE,
            other => other
                .strip_prefix("0x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .unwrap_or(libc::STATX_BASIC_STATS),
        })
        .fold(0, |a, b| a | b)
}

fn parse_call(name: &str, args: &str, ret: &str) -> Result<Option<Call>> {
    let a = split_args(args);
    let arg = |i: usize| a.get(i).copied().context("missing argument");
    let int = |i: usize| -> Result<i64> { Ok(arg(i)?.parse()?) };
    Ok(Some(match name {
        "pread64" => Call::Pread {
            file: fd_ref(arg(0)?)?,
            count: usize::try_from(int(2)?)?,
            offset: int(3)?,
        },
        "read" => Call::Read {
            file: fd_ref(arg(0)?)?,
            count: usize::try_from(int(2)?)?,
        },
        "lseek" => Call::Lseek {
            file: fd_ref(arg(0)?)?,
            offset: int(1)?,
            whence: match arg(2)? {
                "SEEK_SET" => libc::SEEK_SET,
                "SEEK_CUR" => libc::SEEK_CUR,
                "SEEK_END" => libc::SEEK_END,
                other => bail!("whence {other}"),
            },
        },
        "getdents64" => Call::Getdents {
            file: fd_ref(arg(0)?)?,
            count: usize::try_from(int(2)?)?,
        },
        "statfs" => Call::Statfs {
            path: string_arg(arg(0)?)?,
        },
        "fstatfs" => Call::Fstatfs {
            file: fd_ref(arg(0)?)?,
        },
        "newfstatat" => Call::Fstatat {
            dir: dir_ref(arg(0)?)?,
            path: string_arg(arg(1)?)?,
            flags: flags(arg(3)?),
        },
        "statx" => Call::Statx {
            dir: dir_ref(arg(0)?)?,
            path: string_arg(arg(1)?)?,
            flags: flags(arg(2)?),
            mask: statx_mask(arg(3)?),
        },
        "openat" => Call::Openat {
            path: string_arg(arg(1)?)?,
            opened: fd_ref(ret.split_whitespace().next().unwrap_or("")).ok(),
        },
        "close" => Call::Close {
            file: fd_ref(arg(0)?)?,
        },
        "bpf" if args.starts_with("BPF_MAP_LOOKUP_ELEM") => {
            let fd = args
                .split_once("map_fd=")
                .and_then(|(_, rest)| leading_int(rest))
                .context("map_fd")?;
            Call::BpfLookup {
                map_fd: i32::try_from(fd)?,
                hit: ret.trim().starts_with('0'),
            }
        }
        "bpf" => bail!("unexpected bpf command"),
        // Syscalls traced only to delimit the window.
        "getrusage" => return Ok(None),
        other => bail!("untraced syscall {other}"),
    }))
}

fn map_spec(args: &str) -> Option<MapSpec> {
    let field = |name: &str| -> Option<&str> {
        let (_, rest) = args.split_once(&format!("{name}="))?;
        Some(rest.split([',', '}']).next()?.trim())
    };
    let map_type = match field("map_type")? {
        "BPF_MAP_TYPE_HASH" => 1,
        "BPF_MAP_TYPE_ARRAY" => 2,
        "BPF_MAP_TYPE_PERCPU_HASH" => 5,
        "BPF_MAP_TYPE_PERCPU_ARRAY" => 6,
        "BPF_MAP_TYPE_LRU_HASH" => 9,
        "BPF_MAP_TYPE_LRU_PERCPU_HASH" => 10,
        _ => return None,
    };
    Some(MapSpec {
        map_type,
        key_size: field("key_size")?.parse().ok()?,
        value_size: field("value_size")?.parse().ok()?,
        max_entries: field("max_entries")?.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_calls_strace_prints() {
        let (n, a, r) =
            split_line("123 pread64(3</proc/77/stat>, \"\"..., 4096, 0) = 310").expect("line");
        assert_eq!((n, r), ("pread64", "310"));
        // strace pads short pids.
        assert_eq!(
            split_line("5308  getrusage(RUSAGE_SELF, {}) = 0").map(|l| l.0),
            Some("getrusage")
        );
        assert_eq!(
            split_line("5753  lseek(4</proc>, 0, SEEK_SET)      = 0"),
            Some(("lseek", "4</proc>, 0, SEEK_SET", "0"))
        );
        assert_eq!(
            parse_call(n, a, r).expect("call"),
            Some(Call::Pread {
                file: FdRef {
                    fd: 3,
                    path: "/proc/77/stat".into()
                },
                count: 4096,
                offset: 0
            })
        );
        let (n, a, r) = split_line(
            "9 bpf(BPF_MAP_LOOKUP_ELEM, {map_fd=12<anon_inode:bpf-map>, key=0x7ffd, value=0x7ffe, flags=BPF_ANY}, 32) = -1 ENOENT (No such file or directory)",
        )
        .expect("line");
        assert_eq!(
            parse_call(n, a, r).expect("call"),
            Some(Call::BpfLookup {
                map_fd: 12,
                hit: false
            })
        );
    }

    #[test]
    fn file_types_hide_pids_and_groups() {
        assert_eq!(
            file_type("/proc/123/task/124/children"),
            "/proc/<pid>/task/<tid>/children"
        );
        assert_eq!(
            file_type("/sys/fs/cgroup/memory/a/b/memory.stat"),
            "/sys/fs/cgroup/memory/<group>/memory.stat"
        );
        assert_eq!(
            file_type("/sys/devices/virtual/net/lo/statistics/rx_bytes"),
            "/sys/devices/virtual/net/<if>/statistics/rx_bytes"
        );
    }
}
