//! When the hierarchy's walk can be skipped: its result (the cgroup directories, their paths and
//! ids) changes only when a cgroup directory is made, removed or renamed, and the eBPF programs
//! count those (`GlobalStats::cgroup_dir_changes`, read before the walk). Membership is not part
//! of it: it comes from the task iterator's records, grouped after the walk.
//!
//! `cgroup:cgroup_mkdir` fires just before the new directory shows (`kernfs_activate` comes
//! after the tracepoint, under the same lock), so a walk that began after the count moved may
//! still have missed the directory. A walk is therefore trusted only once the next walk read the
//! same count: after any change the hierarchy is walked twice, then reused while the count
//! stands still, and at least every [`WALK_MAX_AGE`] whatever it says.

use std::time::{Duration, Instant};

/// The oldest a reused walk may be, as the unchanged-cgroup rule's backstop.
pub(super) const WALK_MAX_AGE: Duration = super::unchanged::BACKSTOP;

/// The last walk: the count of directory changes read before it, whether the walk before it
/// read the same count, and when it was.
#[derive(Debug, Clone, Copy)]
struct LastWalk {
    changes: u64,
    confirmed: bool,
    at: Instant,
}

/// Whether the last walk still holds.
#[derive(Debug, Default)]
pub(super) struct WalkReuse {
    last: Option<LastWalk>,
    reused: u64,
}

impl WalkReuse {
    /// Whether a walk at `now` would find what the last one found, given the count of directory
    /// changes read before it (`None`: not counted). Counts the reuse when it would.
    pub(super) fn reuse(&mut self, changes: Option<u64>, now: Instant) -> bool {
        let reusable = match (self.last, changes) {
            (Some(last), Some(changes)) => {
                last.confirmed
                    && last.changes == changes
                    && now.saturating_duration_since(last.at) < WALK_MAX_AGE
            }
            _ => false,
        };
        self.reused += u64::from(reusable);
        reusable
    }

    /// Records a walk at `now` made after reading `changes`; `None` where its result cannot be
    /// reused (not counted, processes listed by the walk, or errors in it).
    pub(super) fn walked(&mut self, changes: Option<u64>, now: Instant) {
        self.last = changes.map(|changes| LastWalk {
            changes,
            confirmed: self.last.is_some_and(|last| last.changes == changes),
            at: now,
        });
    }

    /// Walks skipped so far.
    #[cfg(test)]
    pub(super) fn reused(&self) -> u64 {
        self.reused
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_walk_is_reused_only_after_two_walks_read_the_same_count_and_while_it_stands_still() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut reuse = WalkReuse::default();
        assert!(!reuse.reuse(Some(5), at(0)), "no walk yet");
        reuse.walked(Some(5), at(0));
        // The first walk after a change may have missed a directory about to show.
        assert!(!reuse.reuse(Some(5), at(1000)));
        reuse.walked(Some(5), at(1000));
        assert!(reuse.reuse(Some(5), at(2000)));
        assert!(reuse.reuse(Some(5), at(10_999)));
        // Too old: walked again, and that walk confirms the count at once.
        assert!(!reuse.reuse(Some(5), at(11_000)));
        reuse.walked(Some(5), at(11_000));
        assert!(reuse.reuse(Some(5), at(12_000)));
        // A change: two walks again.
        assert!(!reuse.reuse(Some(6), at(13_000)));
        reuse.walked(Some(6), at(13_000));
        assert!(!reuse.reuse(Some(6), at(14_000)));
        reuse.walked(Some(6), at(14_000));
        assert!(reuse.reuse(Some(6), at(15_000)));
        // Not counted, or a walk whose result cannot be reused: never reused.
        assert!(!reuse.reuse(None, at(16_000)));
        reuse.walked(None, at(16_000));
        assert!(!reuse.reuse(Some(6), at(17_000)));
        reuse.walked(Some(6), at(17_000));
        assert!(
            !reuse.reuse(Some(6), at(18_000)),
            "unconfirmed after a None"
        );
        assert_eq!(reuse.reused(), 4);
    }
}
