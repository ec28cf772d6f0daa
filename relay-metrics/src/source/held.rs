//! The observer-effect rule: descriptors the collector keeps open to read kernel files are not
//! counted in its own process's `open_file_descriptor_count`.
//!
//! Holding `/proc/<pid>` files open between snapshots is what makes a collect cheap, but it
//! inflates the collector's own descriptor count by several per measured process (~300 in
//! global scope on a small machine), which a collector that reopens its files (Relay) does not
//! show. Every reader that holds descriptors between reads publishes how many it holds into one
//! process-wide count (all collectors of the process together); the own process's count is
//! reduced by it. The eBPF programs' descriptors (maps, programs, links: 38 to 42 for the
//! kernel-event programs, one link per iterator) are the collector's too, and are published the
//! same way by what holds them. Descriptors it holds for other purposes (the GPU library's,
//! sockets, its output) stay counted.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The open-file limit after raising the soft limit to the hard one (which needs no privilege;
/// Go's runtime and many daemons do the same at start): the limit held descriptors are budgeted
/// against. 1024 when it cannot be read.
pub(crate) fn raise_open_file_limit() -> u64 {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    match getrlimit(Resource::RLIMIT_NOFILE) {
        Ok((soft, hard)) if soft < hard => match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
            Ok(()) => hard,
            Err(_) => soft,
        },
        Ok((soft, _)) => soft,
        Err(_) => 1024,
    }
}

/// Descriptors held by every reader of this process, as last published.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// How many descriptors all readers of this process hold between reads.
pub(crate) fn held_descriptors() -> usize {
    HELD.load(Ordering::Relaxed)
}

/// The descriptor count to report for the collector's own process, given `counted` (what the
/// kernel reports: `/proc/self/fd`, or a count from a BPF iterator) and the descriptors a
/// reader opened since it last published (`in_flight`, 0 when none). Call it for the
/// collector's own process only: every other process's count is reported as counted.
pub(crate) fn own_fd_count(counted: u64, in_flight: usize) -> u64 {
    own_fd_count_held(counted, held_descriptors(), in_flight)
}

/// [`own_fd_count`] for a count taken when the readers held `held` descriptors (a BPF
/// iterator's records are taken once per pass, before the pass opens anything).
pub(crate) fn own_fd_count_held(counted: u64, held: usize, in_flight: usize) -> u64 {
    let held = held.saturating_add(in_flight);
    counted.saturating_sub(u64::try_from(held).unwrap_or(u64::MAX))
}

/// One reader's share of the process-wide count; withdrawn when dropped.
#[derive(Debug, Default)]
pub(crate) struct Published(usize);

impl Published {
    /// A share of `count` descriptors, published at once.
    pub(crate) fn holding(count: usize) -> Self {
        let mut share = Self::default();
        share.set(count);
        share
    }

    /// Publishes that the reader now holds `count` descriptors.
    pub(crate) fn set(&mut self, count: usize) {
        if count > self.0 {
            HELD.fetch_add(count - self.0, Ordering::Relaxed);
        } else if count < self.0 {
            HELD.fetch_sub(self.0 - count, Ordering::Relaxed);
        }
        self.0 = count;
    }
}

impl Drop for Published {
    fn drop(&mut self) {
        self.set(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The count is process-wide and other tests' readers change it concurrently, but only by
    // their own non-negative shares: while a share is published, the total is at least it.
    #[test]
    fn a_published_share_is_left_out_of_the_own_count_until_withdrawn() {
        let mut share = Published::default();
        share.set(1_000_000);
        assert!(held_descriptors() >= 1_000_000);
        assert!(own_fd_count(5_000_000, 0) <= 4_000_000);
        assert!(own_fd_count(5_000_000, 500_000) <= 3_500_000);
        share.set(2_000_000);
        assert!(held_descriptors() >= 2_000_000);
        drop(share);
        // Other readers hold far fewer than a million descriptors.
        assert!(held_descriptors() < 1_000_000);
    }

    #[test]
    fn the_own_count_never_goes_below_zero() {
        assert_eq!(own_fd_count(3, usize::MAX), 0);
        assert_eq!(own_fd_count(0, 0), 0);
    }
}
