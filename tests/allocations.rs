//! Steady-state `collect()` must not touch the heap: every buffer, file descriptor and the
//! snapshot itself are reused. A counting global allocator proves it (allocations made by the
//! current thread only, so the test harness and the NVML thread do not interfere).

#![expect(
    clippy::unwrap_used,
    reason = "a test fails loudly when its setup breaks"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use relay_metrics::config::{ResourceMetricsConfig, ScopeSetting};
use relay_metrics::Collector;

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static TRACE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

// SAFETY: forwards every call to the system allocator unchanged; counting touches no memory
// that the allocator manages.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            if TRACE.load(Ordering::Relaxed) {
                COUNTING.with(|c| c.set(false));
                eprintln!(
                    "ALLOC {}\n{}",
                    layout.size(),
                    std::backtrace::Backtrace::force_capture()
                );
                COUNTING.with(|c| c.set(true));
            }
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Allocations made by `collect()` calls 11..=60 (the first ten warm every buffer up).
fn steady_state_allocations(config: ResourceMetricsConfig) -> u64 {
    let mut collector = Collector::new(config).unwrap();
    for _ in 0..10 {
        drop(collector.collect());
    }
    TRACE.store(std::env::var_os("ALLOC_TRACE").is_some(), Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..50 {
        let snapshot = collector.collect();
        assert!(snapshot.extensions.collector.sequence > 10);
        drop(snapshot);
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    COUNTING.with(|c| c.set(false));
    after - before
}

fn with_filesystems(mut config: ResourceMetricsConfig) -> ResourceMetricsConfig {
    config.disk.filesystem_paths = vec!["/".into(), "/tmp".into()];
    config
}

#[test]
fn a_fixed_process_tree_collects_without_allocating() {
    let tree = Reaped(
        Command::new("sh")
            .args(["-c", "sleep 60 & sleep 60 & wait"])
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(Duration::from_millis(200));
    let config = with_filesystems(ResourceMetricsConfig {
        measurement_scope: ScopeSetting::ProcessTree,
        root_pid: Some(tree.0.id()),
        ..Default::default()
    });
    assert_eq!(steady_state_allocations(config), 0);
}

#[test]
fn global_scope_collects_without_allocating() {
    let config = with_filesystems(ResourceMetricsConfig {
        measurement_scope: ScopeSetting::Global,
        ..Default::default()
    });
    let allocations = steady_state_allocations(config);
    // Processes come and go on a live machine; only a new pid may need a new entry.
    assert!(
        allocations <= 50,
        "{allocations} allocations in 50 global collects"
    );
}
