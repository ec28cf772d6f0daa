use std::fs;
use std::path::PathBuf;

use super::files::limit_levels;
use super::*;
use crate::source::cgroup::target::{CgroupDir, V1Dir};

#[test]
fn measured_settings_are_due_every_tenth_read_or_once_ten_seconds_old() {
    let cadence = MEASURED_SETTINGS;
    let start = Instant::now();
    assert!(cadence.due(None, start), "the first read");
    let young = start + cadence.max_age - Duration::from_nanos(1);
    assert!(!cadence.due(Some((1, start)), young));
    assert!(!cadence.due(Some((9, start)), young));
    assert!(cadence.due(Some((10, start)), young));
    assert!(cadence.due(Some((1, start)), start + Duration::from_secs(10)));
}

#[test]
fn the_scopes_limits_are_due_once_limits_max_age_old_however_many_reads() {
    let cadence = SCOPE_SETTINGS;
    let start = Instant::now();
    assert!(cadence.due(None, start));
    let young = start + LIMITS_MAX_AGE - Duration::from_nanos(1);
    assert!(!cadence.due(Some((1, start)), young));
    assert!(!cadence.due(Some((1_000_000, start)), young));
    assert!(cadence.due(Some((1, start)), start + LIMITS_MAX_AGE));
}

#[test]
fn a_fold_is_the_minimum_unless_a_level_was_unknown() {
    let mut fold = store::Fold::default();
    assert_eq!(fold.get(), None::<u64>);
    for value in [8, 4, 16] {
        fold.add(value);
    }
    assert_eq!(fold.get(), Some(4));
    fold.poison();
    assert_eq!(fold.get(), None, "a partial minimum could be wrong");
}

/// The effective v1 memory limit of `dir` as the scope reads it.
fn min_of(leaf: &std::path::Path, root: &std::path::Path, path: &str) -> Option<u64> {
    let dir = CgroupDir {
        path: path.into(),
        dir: leaf.to_path_buf(),
        mount_point: root.to_path_buf(),
    };
    let target = CgroupTarget {
        requested: Some(path.into()),
        v2: None,
        v1: vec![V1Dir {
            controllers: vec!["memory".into()],
            name: None,
            dir,
        }],
        v1_bound: vec!["memory".into()],
    };
    let want = CgroupFields {
        memory: true,
        ..CgroupFields::NONE
    };
    let mut reader = CgroupValuesReader::scope(&target, want, None);
    let mut out = CgroupTargetReport::default();
    reader.read_scope(&mut Vec::new(), &mut out).unwrap();
    out.memory_limit_bytes
}

#[test]
fn a_v1_hierarchy_root_is_no_limit_level() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path();
    let parent = root.join("a");
    let leaf = parent.join("b");
    fs::create_dir_all(&leaf).unwrap();
    // A limit no kernel shows at a root: while the root is a level, its 4096 is the minimum.
    for (dir, limit) in [(root, "4096\n"), (&parent, "16384\n"), (&leaf, "8192\n")] {
        fs::write(dir.join("memory.limit_in_bytes"), limit).unwrap();
    }
    let dir = CgroupDir {
        path: "/a/b".into(),
        dir: leaf.clone(),
        mount_point: root.to_path_buf(),
    };
    assert_eq!(limit_levels(&dir).count(), 3);
    assert_eq!(
        min_of(&leaf, root, "/a/b"),
        Some(4096),
        "no release_agent: every level"
    );

    fs::write(root.join("release_agent"), "\n").unwrap();
    let levels: Vec<PathBuf> = limit_levels(&dir).map(PathBuf::from).collect();
    assert_eq!(levels, vec![leaf.clone(), parent.clone()]);
    assert_eq!(min_of(&leaf, root, "/a/b"), Some(8192));
    // The root as the target itself: no level can hold a limit.
    let top = CgroupDir {
        path: "/".into(),
        dir: root.to_path_buf(),
        mount_point: root.to_path_buf(),
    };
    assert_eq!(limit_levels(&top).count(), 0);
    assert_eq!(min_of(root, root, "/"), None);
}
