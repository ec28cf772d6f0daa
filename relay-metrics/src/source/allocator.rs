//! The C allocator's free memory, given back to the kernel.
//!
//! glibc's malloc returns freed memory to the kernel only from the top of a heap. A flood of
//! connections (a task each, hyper's read and write buffers, response bodies) leaves tens of MB
//! of free chunks spread through the heap, below allocations that outlive the flood, and all of
//! it stays resident: the agent went 28 → 76 MB over four floods of 2,000 idle connections, 200
//! slowloris and 1,000 scrapes, and stayed there. `malloc_trim(0)` releases the free pages
//! anywhere in every arena (30 MB again after it). Other C libraries: nothing to do here.

/// Bytes the allocator holds free (every arena's free chunks and top), when it can say.
pub(crate) fn free_bytes() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallinfo2` takes no arguments and returns a plain struct by value; it only
        // reads the allocator's statistics under its own locks.
        let info = unsafe { libc::mallinfo2() };
        u64::try_from(info.fordblks).ok()
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        None
    }
}

/// Gives the allocator's free pages back to the kernel; true when some were.
pub(crate) fn give_back() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `malloc_trim` takes a size and touches only the allocator's own state, under
        // its locks; any thread may call it at any time.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// One arena for every thread allocating after this call, unless `MALLOC_ARENA_MAX` says
/// otherwise; true when the allocator took the setting. glibc gives threads arenas of their
/// own, and the agent's threads free each other's blocks (a snapshot and its text are made on
/// one thread and dropped on another), which each arena then holds apart: with one arena the
/// agent's resident memory at 500 cgroups is about a third lower, at no measured CPU cost
/// (docs/PERFORMANCE.md).
pub(crate) fn one_arena() -> bool {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return false;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` sets one of the allocator's parameters under its own lock; it has no
        // preconditions.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Set in the process [`freed_memory_is_counted_free_and_given_back`] starts for itself.
    const ALONE: &str = "RELAY_METRICS_ALLOCATOR_TEST_ALONE";

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn freed_memory_is_counted_free_and_given_back() {
        // The counts are the whole process's: in the test binary's process, the tests running
        // beside this one take freed chunks back between the two counts (CI saw 18.4 MB of the
        // 20.5 MB freed). So it measures in a process of its own, running this test alone.
        if std::env::var_os(ALONE).is_none() {
            let name = "source::allocator::tests::freed_memory_is_counted_free_and_given_back";
            let output = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", name, "--test-threads=1"])
                .env(ALONE, "1")
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "{output:?}");
            assert!(stdout.contains("test result: ok. 1 passed"), "{stdout}");
            return;
        }
        // Many small blocks (below the mmap threshold, so in a heap), every other one kept:
        // the freed half cannot go back from the heap's top.
        let mut blocks: Vec<Vec<u8>> = (0..20_000).map(|_| vec![1_u8; 2048]).collect();
        let before = free_bytes().unwrap();
        let kept: Vec<Vec<u8>> = blocks
            .drain(..)
            .enumerate()
            .filter_map(|(i, block)| (i % 2 == 0).then_some(block))
            .collect();
        let after = free_bytes().unwrap();
        assert!(after >= before + 10_000 * 2048, "{before} -> {after}");
        assert!(give_back());
        drop(kept);
    }

    /// glibc takes the one-arena setting; a setting from the environment is left alone.
    #[test]
    fn one_arena_is_set_unless_the_environment_sets_it() {
        let expected = std::env::var_os("MALLOC_ARENA_MAX").is_none()
            && cfg!(all(target_os = "linux", target_env = "gnu"));
        assert_eq!(one_arena(), expected);
    }
}
