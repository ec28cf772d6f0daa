//! Discovery of the cgroups measured one by one: one walk of one hierarchy per snapshot, which
//! also lists the processes of every cgroup it visits inside a selected subtree (so a target's
//! per-process sums cover its whole subtree, from one `cgroup.procs` read per directory).
//!
//! The walk descends only where a pattern can still match or inside a selected cgroup, skips
//! listing leaf directories (link count 2), keeps the directory of every cgroup whose processes
//! it lists open from walk to walk (up to a budget of descriptors; beyond it, directories are
//! opened relative to the mount's held descriptor on each walk) and reuses its buffers: its cost
//! is a `fstat` and the `cgroup.procs` open, read and close per listed cgroup.
//!
//! Where the caller knows every process's cgroup in the walked hierarchy by its id (the task
//! iterator's record of each process gives it), the walk lists no `cgroup.procs` at all: it
//! records each visited cgroup's id (the inode number of its directory, from the parent's
//! listing) and the caller groups the processes by it ([`Scan::set_members`]).
//!
//! Otherwise `cgroup.procs` is opened on every walk: a v1 `cgroup.procs` read again through the
//! same descriptor may serve the process list the kernel cached at an earlier read (it keeps
//! it for a second after the last reader), so only a fresh open lists the processes of now.
//! A held directory whose cgroup was removed (and perhaps made again under the same name)
//! answers that open with `ENOENT`, or, when `cgroup.procs` is not opened, has another inode
//! number than the name has in its parent's listing: it is then dropped and the path opened
//! afresh.

use std::collections::HashMap;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::layout::{CgroupLayout, Mount};
use super::membership::read_procs;
use super::pattern::CgroupPattern;
use super::CgroupVersion;
use crate::source::file::is_gone;
use crate::source::procfs::sys::{is_dot, open_dir_at, open_file_at, DirentBuffer};
use crate::source::task_iter::{membership_controller, TaskRecord, V1_CONTROLLERS};

/// Which cgroups are selected.
#[derive(Debug, Clone)]
pub(crate) struct Selection {
    /// Glob patterns; empty: every cgroup down to `depth` that holds a process.
    pub patterns: Vec<CgroupPattern>,
    /// The deepest selected level (`/a` is 1); `None`: unbounded (patterns only).
    pub depth: Option<u32>,
}

impl Selection {
    fn selects(&self, path: &str, depth: u32) -> bool {
        if self.depth.is_some_and(|max| depth > max) {
            return false;
        }
        if self.patterns.is_empty() {
            return depth >= 1;
        }
        self.patterns.iter().any(|pattern| pattern.matches(path))
    }

    fn may_select_below(&self, path: &str, depth: u32) -> bool {
        if self.depth.is_some_and(|max| depth >= max) {
            return false;
        }
        self.patterns.is_empty()
            || self
                .patterns
                .iter()
                .any(|pattern| pattern.may_match_below(path))
    }
}

/// Which id of a task-iterator record ([`TaskRecord`]) names a process's cgroup in the walked
/// hierarchy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MembershipId {
    /// The unified hierarchy's ([`TaskRecord::cgroup_id`]).
    Unified,
    /// The v1 hierarchy of [`V1_CONTROLLERS`]`[n]` ([`TaskRecord::v1_cgroup_id`] where the
    /// record's controller is that one).
    V1(usize),
}

impl MembershipId {
    /// The id in `record`, 0 where it has none.
    pub(crate) fn of(self, record: &TaskRecord) -> u64 {
        match self {
            Self::Unified => record.cgroup_id,
            Self::V1(at) if record.v1_controller == Some(at) => record.v1_cgroup_id,
            Self::V1(_) => 0,
        }
    }
}

/// One cgroup the walk visited.
#[derive(Debug, Clone)]
pub(crate) struct ScannedCgroup {
    /// Its path in [`Scan::text`].
    path: Range<usize>,
    /// `/a` is 1.
    pub depth: u32,
    /// Its nearest visited ancestor, by index.
    pub parent: Option<usize>,
    /// Selected by the patterns (or, without patterns, within the depth).
    pub selected: bool,
    /// Its own processes in [`Scan::pids`] (empty unless inside a selected subtree).
    pub pids: Range<usize>,
    /// Its cgroup id (its directory's inode number): known for the cgroups inside a selected
    /// subtree, 0 for the others.
    pub id: u64,
}

/// The result of one walk, reused from walk to walk.
#[derive(Debug, Default)]
pub(crate) struct Scan {
    /// The visited cgroups, parents before children.
    pub cgroups: Vec<ScannedCgroup>,
    /// The processes of the visited cgroups.
    pub pids: Vec<u32>,
    text: String,
    /// Why part of the tree could not be walked (a directory or `cgroup.procs` that cannot be
    /// read), one line per cause; the walk goes on without it.
    pub errors: Vec<String>,
    /// Each visited cgroup's index by its id (those with one), made once per walk: a walk is
    /// reused for many passes, and each pass looks every process's cgroup up.
    by_id: crate::FastMap<u64, usize>,
    /// The indexes of the visited cgroups in the order of their paths, made once per walk.
    by_path: Vec<usize>,
}

impl Scan {
    /// The index of the visited cgroup with id `id` (not 0).
    pub(crate) fn index_of_id(&self, id: u64) -> Option<usize> {
        self.by_id.get(&id).copied()
    }

    /// The index of the visited cgroup at `path`.
    pub(crate) fn index_of_path(&self, path: &str) -> Option<usize> {
        let at = self
            .by_path
            .binary_search_by(|&index| self.path(&self.cgroups[index]).cmp(path))
            .ok()?;
        Some(self.by_path[at])
    }

    /// The indexes of the visited cgroups, in the order of their paths.
    pub(crate) fn in_path_order(&self) -> &[usize] {
        &self.by_path
    }

    /// Makes the indexes of the cgroups as walked.
    fn index(&mut self) {
        self.by_id.clear();
        self.by_id.extend(
            self.cgroups
                .iter()
                .enumerate()
                .filter(|(_, cgroup)| cgroup.id != 0)
                .map(|(index, cgroup)| (cgroup.id, index)),
        );
        self.by_path.clear();
        self.by_path.extend(0..self.cgroups.len());
        let (cgroups, text) = (&self.cgroups, &self.text);
        self.by_path.sort_unstable_by(|&a, &b| {
            text[cgroups[a].path.clone()].cmp(&text[cgroups[b].path.clone()])
        });
    }

    /// The path of `cgroup`.
    pub(crate) fn path(&self, cgroup: &ScannedCgroup) -> &str {
        &self.text[cgroup.path.clone()]
    }

    /// Sets the processes of the visited cgroups from `members` (scan index, pid), for a walk
    /// that did not list them: the pairs are sorted by index (then pid) in place.
    pub(crate) fn set_members(&mut self, members: &mut [(usize, u32)]) {
        members.sort_unstable();
        self.pids.clear();
        for cgroup in &mut self.cgroups {
            cgroup.pids = 0..0;
        }
        let mut at = 0;
        while at < members.len() {
            let index = members[at].0;
            let start = self.pids.len();
            while at < members.len() && members[at].0 == index {
                self.pids.push(members[at].1);
                at += 1;
            }
            if let Some(cgroup) = self.cgroups.get_mut(index) {
                cgroup.pids = start..self.pids.len();
            }
        }
    }
}

/// Walks one hierarchy each time it is asked.
#[derive(Debug)]
pub(crate) struct Scanner {
    mount: Mount,
    version: CgroupVersion,
    membership_id: Option<MembershipId>,
    root: Option<OwnedFd>,
    /// Directories of listed cgroups kept open between walks, by path.
    dirs: HashMap<Box<str>, HeldDir>,
    /// How many directories may be kept open.
    max_held_dirs: usize,
    walks: u64,
    dirents: DirentBuffer,
    names: Vec<u8>,
    /// The inode numbers of `names`, in order.
    ids: Vec<u64>,
    buf: Vec<u8>,
    relative: Vec<u8>,
    stack: Vec<usize>,
}

/// A cgroup directory kept open, with the walk that last visited it.
#[derive(Debug)]
struct HeldDir {
    fd: OwnedFd,
    walk: u64,
}

impl Scanner {
    /// A scanner of the hierarchy that defines membership: on v1 and hybrid hosts the v1
    /// `memory` hierarchy (else `cpu`, `pids`, any), the unified one on pure v2 hosts. `None`
    /// without any cgroup mount. It keeps at most `max_held_dirs` directories open.
    pub(crate) fn new(layout: &CgroupLayout, max_held_dirs: usize) -> Option<Self> {
        let v1 = membership_controller(layout)
            .and_then(|at| Some((at, layout.v1_hierarchy(V1_CONTROLLERS.get(at)?)?)))
            .map(|(at, h)| {
                (
                    CgroupVersion::V1,
                    h.mount.clone(),
                    Some(MembershipId::V1(at)),
                )
            });
        let (version, mount, membership_id) = v1
            .or_else(|| {
                layout
                    .v2
                    .clone()
                    .map(|m| (CgroupVersion::V2, m, Some(MembershipId::Unified)))
            })
            .or_else(|| {
                layout
                    .v1
                    .first()
                    .map(|h| (CgroupVersion::V1, h.mount.clone(), None))
            })?;
        Some(Self {
            mount,
            version,
            membership_id,
            root: None,
            dirs: HashMap::new(),
            max_held_dirs,
            walks: 0,
            dirents: DirentBuffer::default(),
            names: Vec::new(),
            ids: Vec::new(),
            buf: Vec::new(),
            relative: Vec::new(),
            stack: Vec::new(),
        })
    }

    /// Which id of a task-iterator record is the process's cgroup in the hierarchy walked
    /// (`None`: none is; the walk must list `cgroup.procs`).
    pub(crate) fn membership_id(&self) -> Option<MembershipId> {
        self.membership_id
    }

    /// The hierarchy walked.
    pub(crate) fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Its mount point.
    pub(crate) fn mount_point(&self) -> &std::path::Path {
        &self.mount.mount_point
    }

    /// Walks the hierarchy into `scan` (cleared first). With `list_members`, the processes of
    /// every cgroup inside a selected subtree are read from its `cgroup.procs`; without, the
    /// caller sets them from the cgroup ids ([`Scan::set_members`]).
    pub(crate) fn scan(&mut self, selection: &Selection, scan: &mut Scan, list_members: bool) {
        self.walk(selection, scan, list_members);
        scan.index();
    }

    fn walk(&mut self, selection: &Selection, scan: &mut Scan, list_members: bool) {
        scan.cgroups.clear();
        scan.pids.clear();
        scan.text.clear();
        scan.errors.clear();
        let Some(root) = self.take_root(&mut scan.errors) else {
            return;
        };
        let base = self.mount.root.trim_end_matches('/').to_owned();
        scan.text
            .push_str(if base.is_empty() { "/" } else { &base });
        let root_selected = selection.selects(&scan.text, 0);
        scan.cgroups.push(ScannedCgroup {
            path: 0..scan.text.len(),
            depth: 0,
            parent: None,
            selected: root_selected,
            pids: 0..0,
            id: 0,
        });
        self.walks += 1;
        let Self {
            dirs,
            max_held_dirs,
            walks,
            dirents,
            names,
            ids,
            buf,
            relative,
            stack,
            ..
        } = self;
        let mut walk = Walk {
            root: &root,
            base: &base,
            number: *walks,
            selection,
            list_members,
            dirs,
            max_held_dirs: *max_held_dirs,
            dirents,
            names,
            ids,
            buf,
            relative,
            scan,
            inside: vec![root_selected],
        };
        stack.clear();
        stack.push(0);
        while let Some(index) = stack.pop() {
            if let Some(children) = walk.visit(index) {
                // Reversed: the stack pops them in listing order.
                stack.extend(children.rev());
            }
        }
        // Directories this walk did not list the processes of (removed, or no longer
        // selected) are closed.
        let walk = walk.number;
        self.dirs.retain(|_, dir| dir.walk == walk);
        self.root = Some(root);
    }

    /// The mount's descriptor: kept from the last walk, else opened (`None`, said in `errors`,
    /// when it cannot be).
    fn take_root(&mut self, errors: &mut Vec<String>) -> Option<OwnedFd> {
        if let Some(root) = self.root.take() {
            return Some(root);
        }
        match std::fs::File::open(&self.mount.mount_point) {
            Ok(file) => Some(OwnedFd::from(file)),
            Err(error) => {
                errors.push(format!(
                    "cannot open the cgroup mount {}: {error}",
                    self.mount.mount_point.display()
                ));
                None
            }
        }
    }
}

/// One walk of the hierarchy: what it reads with, and where it writes.
struct Walk<'w> {
    root: &'w OwnedFd,
    /// The mount's root in the hierarchy, without a trailing `/`.
    base: &'w str,
    /// This walk's number: the held directories it visits are marked with it.
    number: u64,
    selection: &'w Selection,
    list_members: bool,
    dirs: &'w mut HashMap<Box<str>, HeldDir>,
    max_held_dirs: usize,
    dirents: &'w mut DirentBuffer,
    names: &'w mut Vec<u8>,
    ids: &'w mut Vec<u64>,
    buf: &'w mut Vec<u8>,
    /// The visited cgroup's path relative to the mount.
    relative: &'w mut Vec<u8>,
    scan: &'w mut Scan,
    /// Per visited cgroup: inside a selected subtree (itself selected, or below one).
    inside: Vec<bool>,
}

/// The directory of the cgroup a walk visits.
struct VisitedDir {
    /// This walk's own descriptor when the directory is not (or no longer) held.
    opened: Option<OwnedFd>,
    /// Held from an earlier walk.
    held: bool,
}

impl Walk<'_> {
    /// Visits scanned cgroup `index`: its id or its processes when inside a selected subtree,
    /// then its subdirectories where a pattern can still match. Returns the children it added.
    fn visit(&mut self, index: usize) -> Option<Range<usize>> {
        let cgroup = self.scan.cgroups[index].clone();
        let path = self.scan.text[cgroup.path.clone()].to_owned();
        let is_inside = self.inside[index];
        self.relative.clear();
        self.relative
            .extend_from_slice(relative_part(&path, self.base).as_bytes());
        // Only directories whose processes are listed are held: that listing is what
        // tells a held directory of a removed cgroup.
        let mut dir = VisitedDir {
            opened: None,
            held: is_inside && index != 0 && self.dirs.contains_key(path.as_str()),
        };
        if !dir.held {
            dir.opened = Some(self.open(index, &path)?);
        }
        // The directory's status, when taken: its inode number is the cgroup id, its link
        // count tells a leaf.
        let mut stat = None;
        if is_inside && !self.list_members {
            stat = Some(self.identify(index, cgroup.id, &path, &mut dir)?);
        } else if is_inside {
            self.list_processes(index, &path, &mut dir)?;
        }
        if !is_inside && !self.selection.may_select_below(&path, cgroup.depth) {
            return None;
        }
        self.list_children(index, &cgroup, &path, &dir, stat)
    }

    /// Opens the directory of a listed cgroup for this walk (see [`open_listed`]).
    fn open(&mut self, index: usize, path: &str) -> Option<OwnedFd> {
        open_listed(self.root, index, self.relative, path, &mut self.scan.errors)
    }

    /// Takes the status of the cgroup's directory and records its inode number as the
    /// cgroup's id; `None` when the cgroup is gone or cannot be read (said in the errors).
    fn identify(
        &mut self,
        index: usize,
        listed_id: u64,
        path: &str,
        dir: &mut VisitedDir,
    ) -> Option<nix::sys::stat::FileStat> {
        let fd = dir_fd(self.dirs, path, dir.opened.as_ref())?;
        let mut status = nix::sys::stat::fstat(fd);
        // A held directory with another inode than its name has in the parent's listing is a
        // removed cgroup's, the name made again since: open the path afresh.
        let stale = index != 0 && status.as_ref().map_or(true, |st| st.st_ino != listed_id);
        if dir.held && stale {
            self.dirs.remove(path);
            dir.held = false;
            let fd = self.open(index, path)?;
            status = nix::sys::stat::fstat(fd.as_fd());
            dir.opened = Some(fd);
        }
        match status {
            Ok(status) => {
                self.scan.cgroups[index].id = status.st_ino;
                self.keep(index, path, dir);
                Some(status)
            }
            Err(error) => {
                let error = std::io::Error::from(error);
                if !gone(&error) {
                    self.scan
                        .errors
                        .push(format!("cannot read cgroup {path}: {error}"));
                }
                None
            }
        }
    }

    /// Lists the cgroup's processes from its `cgroup.procs`; `None` when its directory is
    /// gone.
    fn list_processes(&mut self, index: usize, path: &str, dir: &mut VisitedDir) -> Option<()> {
        let start = self.scan.pids.len();
        let fd = dir_fd(self.dirs, path, dir.opened.as_ref())?;
        let mut read = list_procs(fd, self.buf, &mut self.scan.pids);
        if dir.held && read.as_ref().is_err_and(gone) {
            // The held directory may be a removed cgroup's: open the path afresh.
            self.dirs.remove(path);
            dir.held = false;
            self.scan.pids.truncate(start);
            let fd = self.open(index, path)?;
            read = list_procs(fd.as_fd(), self.buf, &mut self.scan.pids);
            dir.opened = Some(fd);
        }
        match read {
            Ok(()) => {}
            Err(error) if gone(&error) => self.scan.pids.truncate(start),
            Err(error) => {
                self.scan.pids.truncate(start);
                self.scan.errors.push(format!(
                    "cannot list the processes of cgroup {path}: {error}"
                ));
            }
        }
        self.scan.cgroups[index].pids = start..self.scan.pids.len();
        self.keep(index, path, dir);
        Some(())
    }

    /// See [`keep_for_next_walks`].
    fn keep(&mut self, index: usize, path: &str, dir: &mut VisitedDir) {
        let (held, max, walk) = (dir.held, self.max_held_dirs, self.number);
        keep_for_next_walks(self.dirs, path, index, held, &mut dir.opened, max, walk);
    }

    /// Adds the subdirectories of cgroup `index` to the scan, in listing order; `None` for a
    /// leaf or a directory that cannot be listed.
    fn list_children(
        &mut self,
        index: usize,
        cgroup: &ScannedCgroup,
        path: &str,
        dir: &VisitedDir,
        stat: Option<nix::sys::stat::FileStat>,
    ) -> Option<Range<usize>> {
        let fd = dir_fd(self.dirs, path, dir.opened.as_ref())?;
        // A leaf cgroup (link count 2) has no subdirectory: its listing is skipped.
        let nlink = match stat {
            Some(stat) => Ok(stat.st_nlink),
            None => nix::sys::stat::fstat(fd).map(|stat| stat.st_nlink),
        };
        if nlink.is_ok_and(|nlink| nlink == 2) {
            return None;
        }
        self.names.clear();
        self.ids.clear();
        let (names, ids) = (&mut *self.names, &mut *self.ids);
        let listed = self.dirents.for_each_with_inode(fd, |name, is_dir, ino| {
            if is_dir && !is_dot(name) {
                names.extend_from_slice(name);
                names.push(0);
                ids.push(ino);
            }
        });
        match listed {
            Ok(()) => {}
            Err(error) if gone(&error) => return None,
            Err(error) => {
                self.scan
                    .errors
                    .push(format!("cannot list cgroup {path}: {error}"));
                return None;
            }
        }
        let first_child = self.scan.cgroups.len();
        self.add_children(index, cgroup.depth + 1, path);
        Some(first_child..self.scan.cgroups.len())
    }

    /// Adds the listed subdirectories (`names`, `ids`) of cgroup `parent` at `path`.
    fn add_children(&mut self, parent: usize, depth: u32, path: &str) {
        let is_inside = self.inside[parent];
        let named = self.names.split(|&b| b == 0).filter(|n| !n.is_empty());
        for (name, &id) in named.zip(self.ids.iter()) {
            let scan = &mut *self.scan;
            let Ok(name) = std::str::from_utf8(name) else {
                scan.errors.push(format!(
                    "a cgroup below {path} has a name that is not UTF-8: skipped"
                ));
                continue;
            };
            let start = scan.text.len();
            scan.text.push_str(path);
            if !path.ends_with('/') {
                scan.text.push('/');
            }
            scan.text.push_str(name);
            let selected = self.selection.selects(&scan.text[start..], depth);
            scan.cgroups.push(ScannedCgroup {
                path: start..scan.text.len(),
                depth,
                parent: Some(parent),
                selected,
                pids: 0..0,
                id: if is_inside || selected { id } else { 0 },
            });
            self.inside.push(is_inside || selected);
        }
    }
}

/// Opens the directory of scanned cgroup `index`: the mount's own descriptor for the root,
/// else `relative` below it.
fn open_cgroup_dir(root: &OwnedFd, index: usize, relative: &[u8]) -> std::io::Result<OwnedFd> {
    if index == 0 {
        root.try_clone()
    } else {
        open_dir_at(root.as_fd(), relative)
    }
}

/// The descriptor of `path`'s directory: this walk's own, else the held one (`None` when there
/// is neither, which the walk never asks for).
fn dir_fd<'d>(
    dirs: &'d HashMap<Box<str>, HeldDir>,
    path: &str,
    opened: Option<&'d OwnedFd>,
) -> Option<BorrowedFd<'d>> {
    match opened {
        Some(fd) => Some(fd.as_fd()),
        None => dirs.get(path).map(|dir| dir.fd.as_fd()),
    }
}

/// The processes listed in `cgroup.procs` of `dir`, opened now (see the module's doc).
fn list_procs(dir: BorrowedFd<'_>, buf: &mut Vec<u8>, pids: &mut Vec<u32>) -> std::io::Result<()> {
    open_file_at(dir, b"cgroup.procs").and_then(|procs| read_procs(&procs, buf, pids))
}

/// Marks a held directory as seen by this `walk`, or holds this walk's own descriptor of it
/// (`opened`) for the next walks while there is room. The root (`index` 0) is never held.
fn keep_for_next_walks(
    dirs: &mut HashMap<Box<str>, HeldDir>,
    path: &str,
    index: usize,
    held: bool,
    opened: &mut Option<OwnedFd>,
    max_held_dirs: usize,
    walk: u64,
) {
    if held {
        if let Some(dir) = dirs.get_mut(path) {
            dir.walk = walk;
        }
    } else if index != 0 && dirs.len() < max_held_dirs {
        if let Some(fd) = opened.take() {
            dirs.insert(Box::from(path), HeldDir { fd, walk });
        }
    }
}

/// Opens the directory of a listed cgroup for this walk: `None` when it was removed since it was
/// listed (nothing to say) or cannot be opened (said in `errors`).
fn open_listed(
    root: &OwnedFd,
    index: usize,
    relative: &[u8],
    path: &str,
    errors: &mut Vec<String>,
) -> Option<OwnedFd> {
    match open_cgroup_dir(root, index, relative) {
        Ok(fd) => Some(fd),
        Err(error) if gone(&error) => None,
        Err(error) => {
            errors.push(format!("cannot open cgroup {path}: {error}"));
            None
        }
    }
}

/// `path` relative to the mount's root `base` (without a leading `/`).
fn relative_part<'p>(path: &'p str, base: &str) -> &'p str {
    path.strip_prefix(base)
        .unwrap_or(path)
        .trim_start_matches('/')
}

fn gone(error: &std::io::Error) -> bool {
    is_gone(error) || error.raw_os_error() == Some(libc::ENODEV)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup(root: &std::path::Path, path: &str, pids: &[u32]) {
        let dir = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        let procs: String = pids.iter().map(|pid| format!("{pid}\n")).collect();
        std::fs::write(dir.join("cgroup.procs"), procs).unwrap();
    }

    fn pids_of<'s>(scan: &'s Scan, path: &str) -> Option<&'s [u32]> {
        scan.cgroups
            .iter()
            .find(|c| scan.path(c) == path)
            .map(|c| &scan.pids[c.pids.clone()])
    }

    #[test]
    fn held_directories_follow_removal_and_a_cgroup_made_again_under_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        cgroup(root, "/", &[1]);
        cgroup(root, "/s", &[]);
        cgroup(root, "/s/a", &[10]);
        cgroup(root, "/s/b", &[11]);
        let layout = CgroupLayout {
            v2: Some(Mount {
                root: "/".into(),
                mount_point: root.to_path_buf(),
            }),
            v1: Vec::new(),
        };
        let selection = Selection {
            patterns: CgroupPattern::parse_all(&["/s/*".to_owned()]).unwrap(),
            depth: None,
        };
        // Room for one held directory: the other is opened on each walk.
        let mut scanner = Scanner::new(&layout, 1).unwrap();
        let mut scan = Scan::default();
        scanner.scan(&selection, &mut scan, true);
        assert_eq!(pids_of(&scan, "/s/a"), Some(&[10][..]));
        assert_eq!(pids_of(&scan, "/s/b"), Some(&[11][..]));
        assert_eq!(scanner.dirs.len(), 1);
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);

        // Both removed and made again with other processes: the held directory is the
        // removed one's, yet the walk lists the new processes.
        for (path, pid) in [("s/a", 20), ("s/b", 21)] {
            std::fs::remove_dir_all(root.join(path)).unwrap();
            cgroup(root, &format!("/{path}"), &[pid]);
        }
        scanner.scan(&selection, &mut scan, true);
        assert_eq!(pids_of(&scan, "/s/a"), Some(&[20][..]));
        assert_eq!(pids_of(&scan, "/s/b"), Some(&[21][..]));
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);

        // Removed for good: not listed, and its directory is closed.
        std::fs::remove_dir_all(root.join("s/a")).unwrap();
        std::fs::remove_dir_all(root.join("s/b")).unwrap();
        scanner.scan(&selection, &mut scan, true);
        assert_eq!(pids_of(&scan, "/s/a"), None);
        assert!(scanner.dirs.is_empty());
        assert!(scan.errors.is_empty(), "{:?}", scan.errors);
    }
}
