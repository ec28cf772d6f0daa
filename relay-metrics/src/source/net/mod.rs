//! Per-interface network counters from `/proc/net/dev`.
//!
//! Relay lists `/sys/class/net/` and reads six `statistics/*` files per interface. `/proc/net/dev`
//! prints the same six counters (both come from `dev_get_stats()`; the live test
//! `live_proc_net_dev_agrees_with_sysfs_statistics` checks it) for every interface in one read.
//! One read costs about what one interface's six sysfs files cost (bench `readers/net`, figures
//! in docs/PERFORMANCE.md), so from two interfaces on `/proc/net/dev` is cheaper, and it notices
//! interfaces coming and going with no directory listing. Relay's default selects every
//! interface, so `/proc/net/dev` is the only source used.
//!
//! Namespaces: `/proc/net` is a link to `/proc/self/net`, i.e. the reader's network namespace,
//! whereas `/sys/class/net` shows the namespace of whoever mounted sysfs. They agree whenever the
//! agent shares the host's network namespace (`hostNetwork`), the setup a node agent needs anyway.

use super::file::{FileKind, HeldFile, SourceError};
use super::roots::Roots;
use super::system::parse::{fields, lines, parse_u64};
use crate::model::InterfaceCounts;

/// The counters of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InterfaceCounters {
    /// Kernel interface name (`lo`, `eth0`); rewritten in place across reads, so a stable set of
    /// interfaces allocates no new names.
    pub name: String,
    /// Its counters.
    pub counts: InterfaceCounts,
}

/// The names of the six counters as files in `/sys/class/net/<interface>/statistics/` (what
/// Relay reads), in the order of [`InterfaceCounts::to_array`].
pub const SYSFS_COUNTERS: [&str; 6] = [
    "rx_bytes",
    "tx_bytes",
    "rx_packets",
    "tx_packets",
    "rx_errors",
    "tx_errors",
];

/// `IFNAMSIZ` (including the NUL): every kernel name fits, so reserving it once per slot means
/// renaming a slot never allocates.
const IFNAMSIZ: usize = 16;

/// The file's first header line; its absence means the content is not `/proc/net/dev`.
const HEADER: &[u8] = b"Inter-|";

/// Parses `/proc/net/dev` into `out`, sorted by name. Slots already in `out` are reused (names are
/// overwritten in place), extra ones are dropped. Returns `None`, with `out` empty, when the
/// content does not start with the `/proc/net/dev` header. Lines without a `name:` are skipped.
pub fn parse_net_dev(content: &[u8], out: &mut Vec<InterfaceCounters>) -> Option<()> {
    if !content.starts_with(HEADER) {
        out.clear();
        return None;
    }
    let mut count = 0;
    for line in lines(content) {
        // Names cannot contain ':' (dev_valid_name), so the first one ends the name. Long counters
        // can follow it without a space (`eth0:123456789012 …`).
        let Some(colon) = line.iter().position(|&byte| byte == b':') else {
            continue;
        };
        let name = trim_spaces(&line[..colon]);
        if name.is_empty() {
            continue;
        }
        if count == out.len() {
            out.push(InterfaceCounters {
                name: String::with_capacity(IFNAMSIZ),
                ..InterfaceCounters::default()
            });
        }
        let Some(slot) = out.get_mut(count) else {
            continue;
        };
        count += 1;
        // Compared as bytes first: the lossy conversion is only needed for a changed name.
        if slot.name.as_bytes() != name {
            slot.name.clear();
            slot.name.push_str(&String::from_utf8_lossy(name));
        }
        // Receive: bytes packets errs drop fifo frame compressed multicast;
        // transmit: bytes packets errs drop fifo colls carrier compressed.
        // Columns after transmit drops (11) are not used, so they are not even scanned.
        let mut columns = [None; 12];
        for (column, field) in columns.iter_mut().zip(fields(&line[colon + 1..])) {
            *column = parse_u64(field);
        }
        slot.counts = InterfaceCounts {
            rx_bytes: columns[0],
            rx_packets: columns[1],
            rx_errors: columns[2],
            tx_bytes: columns[8],
            tx_packets: columns[9],
            tx_errors: columns[10],
            rx_dropped: columns[3],
            tx_dropped: columns[11],
        };
    }
    out.truncate(count);
    // Unstable sort does not allocate; names are unique, so stability does not matter.
    out.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    Some(())
}

fn trim_spaces(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| b != b' ').unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Relay's interface selection: an empty list selects every interface, otherwise exact names.
pub(crate) fn select(interfaces: &[String], name: &str) -> bool {
    interfaces.is_empty() || interfaces.iter().any(|wanted| wanted == name)
}

/// Reads `/proc/net/dev` through a descriptor held open between reads.
#[derive(Debug)]
pub struct NetReader {
    file: HeldFile,
    buf: Vec<u8>,
}

impl NetReader {
    /// Prepares the reader for `roots`; the file is opened on first use.
    pub fn new(roots: &Roots) -> Self {
        Self {
            file: HeldFile::new(roots.proc.join("net/dev"), FileKind::Records),
            buf: Vec::with_capacity(4096),
        }
    }

    /// Reads every interface's counters into `out`, sorted by name (see [`parse_net_dev`]). On
    /// error `out` is left empty, never stale. Allocates nothing while the interface set is stable.
    pub fn read(&mut self, out: &mut Vec<InterfaceCounters>) -> Result<(), SourceError> {
        let content = match self.file.read(&mut self.buf) {
            Ok(content) => content,
            Err(error) => {
                out.clear();
                return Err(error);
            }
        };
        parse_net_dev(content, out).ok_or_else(|| {
            SourceError::malformed(self.file.path(), "missing the /proc/net/dev header")
        })
    }
}

/// The network namespace of `process` (a pid, or `self`: the agent): the inode number of
/// `/proc/<process>/ns/net` (one `stat`; two processes share a namespace exactly when the
/// numbers are equal). `Ok(None)` when the process is gone; an error when it cannot be told
/// (another user's process without `CAP_SYS_PTRACE`).
pub(crate) fn namespace_of(
    roots: &Roots,
    process: impl std::fmt::Display,
) -> Result<Option<u64>, SourceError> {
    use std::os::unix::fs::MetadataExt as _;
    let path = roots.proc.join(format!("{process}/ns/net"));
    match std::fs::metadata(&path) {
        Ok(metadata) => Ok(Some(metadata.ino())),
        Err(error) if super::file::is_gone(&error) => Ok(None),
        Err(error) => Err(SourceError::io(path, error)),
    }
}

/// Reads the counters of the network namespace of `process` (a pid, or `self`) from its
/// `/proc/<process>/net/dev` into `out`, sorted by name (see [`parse_net_dev`]); `out` is left
/// empty on error.
///
/// The file is opened, read whole (a record-by-record seq_file: read until a read of 0) and
/// closed each time: a descriptor held open would keep the namespace alive after its last
/// process exits (the seq_file holds a reference to it), and its interfaces with it.
pub(crate) fn read_namespace(
    roots: &Roots,
    process: impl std::fmt::Display,
    buf: &mut Vec<u8>,
    out: &mut Vec<InterfaceCounters>,
) -> Result<(), SourceError> {
    let mut file = HeldFile::new(
        roots.proc.join(format!("{process}/net/dev")),
        FileKind::Records,
    );
    let content = match file.read(buf) {
        Ok(content) => content,
        Err(error) => {
            out.clear();
            return Err(error);
        }
    };
    parse_net_dev(content, out)
        .ok_or_else(|| SourceError::malformed(file.path(), "missing the /proc/net/dev header"))
}

#[cfg(test)]
mod tests;
