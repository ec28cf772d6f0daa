//! Where the cgroup hierarchies are mounted (`/proc/self/mountinfo`) and which cgroups a process
//! belongs to (`/proc/<pid>/cgroup`). Both are read once per collector, so their lines are split
//! by `procfs-core` (it allocates per line, which does not matter here); the per-collect parsers
//! stay allocation-free (`docs/PERFORMANCE.md`, "Parsing").

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use procfs_core::process::MountInfo;
use procfs_core::{FromBufRead, ProcessCGroups};

use super::CgroupError;
use crate::source::file::read_once;
use crate::source::Roots;

/// One mounted cgroup hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The cgroup path shown at the mount point: `/` normally, a subtree for bind mounts and for
    /// mounts seen from another cgroup namespace.
    pub root: String,
    /// The mount point, already mapped through [`Roots::map`].
    pub mount_point: PathBuf,
}

impl Mount {
    /// The directory of `cgroup_path` in this hierarchy, or `None` when the path does not lie
    /// under the mount's root (the hierarchy cannot see it). The directory may not exist.
    pub fn dir_of(&self, cgroup_path: &str) -> Option<PathBuf> {
        let relative = relative_to_root(&self.root, cgroup_path)?;
        Some(if relative.is_empty() {
            self.mount_point.clone()
        } else {
            self.mount_point.join(relative)
        })
    }
}

/// The part of `path` below `root` (without a leading `/`), if `path` is `root` or below it.
fn relative_to_root<'p>(root: &str, path: &'p str) -> Option<&'p str> {
    let root = root.trim_end_matches('/');
    let rest = path.strip_prefix(root)?;
    if rest.is_empty() {
        return Some("");
    }
    // `/a/bc` is not below `/a/b`.
    let rest = rest.strip_prefix('/')?;
    // Every leading slash goes: `Path::join` replaces the base with an absolute path, so `//etc`
    // would leave the mount.
    let rest = rest.trim_matches('/');
    // A cgroup namespace shows the cgroups outside its root as `/..` paths: `<mount>/..` is a
    // directory, but not that cgroup (nor any cgroup).
    (!rest.split('/').any(|part| part == ".." || part == ".")).then_some(rest)
}

/// A cgroup v1 hierarchy: one mount carrying a set of controllers (or only a name, like
/// `name=systemd`, which has none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Hierarchy {
    /// Where it is mounted.
    pub mount: Mount,
    /// Controllers bound to it (`cpu`, `cpuacct`, …), in mount-option order.
    pub controllers: Vec<String>,
    /// The `name=` option, for named hierarchies.
    pub name: Option<String>,
}

impl V1Hierarchy {
    /// True when `controller` is bound to this hierarchy.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// True when this hierarchy is the one a `/proc/<pid>/cgroup` line's controller field names
    /// (`cpu,cpuacct`, `name=systemd`, …, split at the commas): same set of controllers and same
    /// name.
    pub fn matches_proc_field(&self, field: &[String]) -> bool {
        let mut name = None;
        let mut count = 0;
        for item in field.iter().filter(|item| !item.is_empty()) {
            if let Some(value) = item.strip_prefix("name=") {
                name = Some(value);
            } else if self.has(item) {
                count += 1;
            } else {
                return false;
            }
        }
        count == self.controllers.len() && name == self.name.as_deref()
    }
}

/// The cgroup hierarchies visible to this process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The unified (v2) hierarchy: the first `cgroup2` mount, as Relay does.
    pub v2: Option<Mount>,
    /// v1 hierarchies, one per distinct controller set (the first mount of each).
    pub v1: Vec<V1Hierarchy>,
}

impl CgroupLayout {
    /// Reads `<proc>/self/mountinfo` under `roots`.
    pub fn discover(roots: &Roots) -> Result<Self, CgroupError> {
        discover(roots)
    }

    /// Builds the layout from mountinfo content, mapping mount points through `roots`.
    /// Malformed lines (and lines that are not UTF-8, which `procfs-core` cannot take) are
    /// skipped.
    pub fn from_mountinfo(content: &[u8], roots: &Roots) -> Self {
        let mut layout = Self::default();
        for line in content.split(|&b| b == b'\n') {
            let Some(entry) = std::str::from_utf8(line)
                .ok()
                .and_then(|line| MountInfo::from_line(line).ok())
            else {
                continue;
            };
            if entry.fs_type != "cgroup2" && entry.fs_type != "cgroup" {
                continue;
            }
            // procfs-core leaves mountinfo's octal escapes in both paths.
            let mount = Mount {
                root: String::from_utf8_lossy(&unescape(entry.root.as_bytes())).into_owned(),
                mount_point: roots.map(Path::new(&OsString::from_vec(unescape(
                    entry.mount_point.as_os_str().as_bytes(),
                )))),
            };
            if entry.fs_type == "cgroup2" {
                if layout.v2.is_none() {
                    layout.v2 = Some(mount);
                }
                continue;
            }
            let (controllers, name) = v1_controllers(&entry);
            let seen = layout
                .v1
                .iter()
                .any(|h| h.controllers == controllers && h.name == name);
            if !seen {
                layout.v1.push(V1Hierarchy {
                    mount,
                    controllers,
                    name,
                });
            }
        }
        layout
    }

    /// The v1 hierarchy carrying `controller`, if that controller is bound to v1.
    pub fn v1_hierarchy(&self, controller: &str) -> Option<&V1Hierarchy> {
        self.v1.iter().find(|h| h.has(controller))
    }

    /// True when `controller` is bound to a v1 hierarchy (so v2 cannot have it).
    pub fn is_v1_bound(&self, controller: &str) -> bool {
        self.v1_hierarchy(controller).is_some()
    }
}

/// Reads `<proc>/self/mountinfo` under `roots` and returns the cgroup layout.
pub(crate) fn discover(roots: &Roots) -> Result<CgroupLayout, CgroupError> {
    let path = roots.proc.join("self/mountinfo");
    let mut buf = Vec::new();
    let content = read_once(&path, &mut buf)?;
    Ok(CgroupLayout::from_mountinfo(content, roots))
}

/// Undoes mountinfo's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` backslash).
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\' {
            if let Some(value) = field.get(i + 1..i + 4).and_then(octal_byte) {
                out.push(value);
                i += 4;
                continue;
            }
        }
        out.push(field[i]);
        i += 1;
    }
    out
}

fn octal_byte(digits: &[u8]) -> Option<u8> {
    let mut value: u32 = 0;
    for &digit in digits {
        if !(b'0'..=b'7').contains(&digit) {
            return None;
        }
        value = value * 8 + u32::from(digit - b'0');
    }
    u8::try_from(value).ok()
}

/// Splits v1 super options into controllers and a hierarchy name. Everything that is not a known
/// cgroup mount option is a controller, so controllers added by newer kernels are kept. They come
/// sorted: procfs-core keeps the options in a map, so the kernel's order is lost.
fn v1_controllers(entry: &MountInfo) -> (Vec<String>, Option<String>) {
    const OPTIONS: [&str; 9] = [
        "rw",
        "ro",
        "none",
        "all",
        "noprefix",
        "clone_children",
        "xattr",
        "cpuset_v2_mode",
        "favordynmods",
    ];
    let mut controllers = Vec::new();
    let mut name = None;
    for (option, value) in &entry.super_options {
        match (option.as_str(), value) {
            ("name", Some(value)) => name = Some(value.clone()),
            ("release_agent", Some(_)) => {}
            (option, None) if OPTIONS.contains(&option) || option.is_empty() => {}
            (option, None) => controllers.push(option.to_owned()),
            // Another `key=value` option is not a controller.
            (_, Some(_)) => {}
        }
    }
    controllers.sort_unstable();
    (controllers, name)
}

/// One line of `/proc/<pid>/cgroup`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCgroupEntry {
    /// Hierarchy id (0 for the unified hierarchy).
    pub hierarchy_id: u32,
    /// Controller list (`cpu`, `cpuacct`; `name=systemd`; empty for v2).
    pub controllers: Vec<String>,
    /// The cgroup path within that hierarchy.
    pub path: String,
}

impl ProcCgroupEntry {
    /// True for the unified hierarchy's line (`0::/path`).
    pub fn is_v2(&self) -> bool {
        self.hierarchy_id == 0 && self.controllers.is_empty()
    }
}

/// The well-formed lines of `/proc/<pid>/cgroup` content (`id:controllers:path`), split by
/// procfs-core one line at a time so one bad line costs only itself. The path is everything after
/// the second colon, since paths may contain colons; a path that is not absolute is refused.
pub fn parse_proc_cgroup(content: &[u8]) -> impl Iterator<Item = ProcCgroupEntry> + '_ {
    content
        .split(|&b| b == b'\n')
        .filter(|line| !line.is_empty())
        .filter_map(|line| ProcessCGroups::from_buf_read(line).ok())
        .flat_map(|groups| groups.0)
        .filter(|group| group.pathname.starts_with('/'))
        .map(|group| ProcCgroupEntry {
            hierarchy_id: group.hierarchy,
            controllers: group.controllers,
            path: group.pathname,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from this (hybrid) machine, plus a non-cgroup line and an escaped mount point.
    const HYBRID: &[u8] = b"\
24 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:32 /sub /mnt/mem\\040copy rw,relatime - cgroup cgroup rw,memory
";

    #[test]
    fn hybrid_mountinfo() {
        let roots = Roots::fixture("/fx");
        let layout = CgroupLayout::from_mountinfo(HYBRID, &roots);
        let v2 = layout.v2.as_ref().unwrap();
        assert_eq!(v2.mount_point, PathBuf::from("/fx/sys/fs/cgroup/unified"));
        assert_eq!(v2.root, "/");
        let names: Vec<_> = layout
            .v1
            .iter()
            .map(|h| (h.controllers.join(","), h.name.clone()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("cpu".into(), None),
                ("cpuacct".into(), None),
                ("cpuset".into(), None),
                ("memory".into(), None),
                ("pids".into(), None),
                ("".into(), Some("systemd".into())),
            ]
        );
        // The second memory mount is a duplicate of the first hierarchy.
        assert_eq!(
            layout.v1_hierarchy("memory").unwrap().mount.mount_point,
            PathBuf::from("/fx/sys/fs/cgroup/memory")
        );
        assert!(layout.is_v1_bound("cpu"));
        assert!(!layout.is_v1_bound("io"));
    }

    #[test]
    fn combined_controllers_and_options() {
        let line = b"30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:10 master:2 - cgroup cgroup rw,xattr,cpu,cpuacct,release_agent=/x\n";
        let layout = CgroupLayout::from_mountinfo(line, &Roots::host());
        assert_eq!(layout.v1[0].controllers, vec!["cpu", "cpuacct"]);
        assert_eq!(
            layout.v1[0].mount.mount_point,
            PathBuf::from("/sys/fs/cgroup/cpu,cpuacct")
        );
        let field = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(layout.v1[0].matches_proc_field(&field(&["cpu", "cpuacct"])));
        assert!(layout.v1[0].matches_proc_field(&field(&["cpuacct", "cpu"])));
        assert!(!layout.v1[0].matches_proc_field(&field(&["cpu"])));
        assert!(!layout.v1[0].matches_proc_field(&field(&["cpu", "cpuacct", "name=x"])));
    }

    #[test]
    fn unescapes_mount_points_and_roots() {
        let line =
            b"41 31 0:38 /a\\040b /sys/fs/cgroup/my\\040cgroup\\011x rw - cgroup2 cgroup2 rw\n";
        let layout = CgroupLayout::from_mountinfo(line, &Roots::host());
        let v2 = layout.v2.unwrap();
        assert_eq!(v2.root, "/a b");
        assert_eq!(v2.mount_point, PathBuf::from("/sys/fs/cgroup/my cgroup\tx"));
        assert_eq!(unescape(b"a\\134b\\"), b"a\\b\\".to_vec());
        assert_eq!(unescape(b"\\04"), b"\\04".to_vec());
    }

    #[test]
    fn first_cgroup2_wins_and_garbage_is_skipped() {
        let content = b"garbage\n1 2 3\n41 31 0:38 / /first rw - cgroup2 cgroup2 rw\n42 31 0:38 / /second rw - cgroup2 cgroup2 rw\n";
        let layout = CgroupLayout::from_mountinfo(content, &Roots::host());
        assert_eq!(layout.v2.unwrap().mount_point, PathBuf::from("/first"));
        assert!(layout.v1.is_empty());
    }

    #[test]
    fn a_line_procfs_core_cannot_take_costs_only_itself() {
        let content = b"40 31 0:37 / /sys/fs/cgroup/\xff rw - cgroup cgroup rw,pids\n\
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
42 31 0:39 / /sys/fs/cgroup/memory rw shared:x - cgroup cgroup rw,memory\n\
43 31 0:40 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpuacct,cpu,foo=bar\n";
        let layout = CgroupLayout::from_mountinfo(content, &Roots::host());
        assert_eq!(
            layout.v2.unwrap().mount_point,
            PathBuf::from("/sys/fs/cgroup/unified")
        );
        assert_eq!(layout.v1.len(), 1);
        // Sorted, and a `key=value` option is not a controller.
        assert_eq!(layout.v1[0].controllers, vec!["cpu", "cpuacct"]);
    }

    #[test]
    fn mount_root_must_contain_the_path() {
        let mount = Mount {
            root: "/docker/abc".into(),
            mount_point: PathBuf::from("/sys/fs/cgroup"),
        };
        assert_eq!(
            mount.dir_of("/docker/abc/x"),
            Some(PathBuf::from("/sys/fs/cgroup/x"))
        );
        assert_eq!(
            mount.dir_of("/docker/abc"),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
        assert_eq!(mount.dir_of("/docker/abcd"), None);
        assert_eq!(mount.dir_of("/other"), None);
        let root = Mount {
            root: "/".into(),
            mount_point: PathBuf::from("/m"),
        };
        assert_eq!(root.dir_of("/"), Some(PathBuf::from("/m")));
        assert_eq!(root.dir_of("/a/b/"), Some(PathBuf::from("/m/a/b")));
        // A cgroup outside the reader's cgroup namespace (`/proc/<pid>/cgroup` shows `/..`).
        assert_eq!(root.dir_of("/.."), None);
        assert_eq!(root.dir_of("/../../user.slice/x"), None);
        assert_eq!(root.dir_of("/a/./b"), None);
        assert_eq!(mount.dir_of("/docker/abc/../def"), None);
        assert_eq!(root.dir_of("/a..b/c"), Some(PathBuf::from("/m/a..b/c")));
    }

    /// Found by the `mountinfo` fuzz target: `//etc` was joined as the absolute path `/etc`, so
    /// a cgroup path (from `--cgroup` or a config) could point the reader outside the mount.
    #[test]
    fn doubled_slashes_cannot_leave_the_mount() {
        let root = Mount {
            root: "/".into(),
            mount_point: PathBuf::from("/sys/fs/cgroup"),
        };
        assert_eq!(
            root.dir_of("//etc"),
            Some(PathBuf::from("/sys/fs/cgroup/etc"))
        );
        assert_eq!(root.dir_of("///"), Some(PathBuf::from("/sys/fs/cgroup")));
        assert_eq!(
            root.dir_of("/a//b"),
            Some(PathBuf::from("/sys/fs/cgroup/a/b"))
        );
        let nested = Mount {
            root: "/docker/abc".into(),
            mount_point: PathBuf::from("/sys/fs/cgroup"),
        };
        assert_eq!(
            nested.dir_of("/docker/abc//etc"),
            Some(PathBuf::from("/sys/fs/cgroup/etc"))
        );
        for path in ["//etc", "///", "/a//b", "/docker/abc//etc", "/x/"] {
            if let Some(dir) = nested.dir_of(path).or(root.dir_of(path)) {
                assert!(
                    dir.starts_with("/sys/fs/cgroup"),
                    "{path}: {}",
                    dir.display()
                );
            }
        }
    }

    #[test]
    fn proc_cgroup_lines() {
        // Captured from /proc/self/cgroup on this machine (plus a path with a colon).
        let content =
            b"9:name=systemd:/\n4:memory:/process_api/068ab\n1:cpu:/\n0::/a:b\nbad line\n";
        let entries: Vec<_> = parse_proc_cgroup(content).collect();
        assert_eq!(entries.len(), 4);
        assert_eq!(entries[0].controllers, vec!["name=systemd"]);
        assert_eq!(entries[1].hierarchy_id, 4);
        assert_eq!(entries[1].path, "/process_api/068ab");
        assert!(entries[3].is_v2());
        assert_eq!(entries[3].path, "/a:b");
        assert!(!entries[2].is_v2());
    }
}
