//! relay-metrics kernel-event programs: process creations/exits, run-queue delay and involuntary
//! switches, memory-reclaim stalls and throttling, OOM kills.
//!
//! Everything is read from classic tracepoint records (or from `bpf_get_current_*` helpers): no
//! kernel-memory reads. (Under lockdown=confidentiality they would pass the verifier, but the
//! kernel creates no tracefs files there, so they cannot be attached: see the loader's
//! `lockdown` module.) Field offsets are
//! not compiled in: userspace parses them from tracefs `format` files and writes them into the
//! `.rodata` global [`CONFIG`]; the verifier treats those values as constants, so each field
//! access below resolves to a single load at a constant offset (the other branches are dead code
//! the verifier removes).
#![no_std]
#![no_main]
#![feature(asm_experimental_arch)]

mod ctx;

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::map,
    maps::{Array, HashMap, LruHashMap, RingBuf},
};
use relay_metrics_common::{
    CgroupStats, Config, EventCounters, GlobalStats, ScopeStats, TgidStats, TidState, MAX_SCOPES,
};

/// Field offsets, written by the loader before the programs are verified.
#[no_mangle]
static CONFIG: Config = Config::unavailable();

/// Initial value of a new [`TGIDS`] entry; a static so the 336 bytes live in `.rodata`, not on
/// the 512-byte BPF stack.
#[no_mangle]
static ZERO_TGID_STATS: TgidStats = TgidStats::ZERO;

const CLONE_THREAD: u64 = 0x0001_0000;
/// clone3's `CLONE_INTO_CGROUP`: the child starts in a cgroup other than its parent's.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;
/// Thread ids with a slot in [`TID_SLOTS`]: twice the kernel's default `pid_max` (32768 below 32
/// CPUs); hosts where systemd raised `pid_max` to 4194304 use [`TIDS`] for the ids above.
const TID_SLOT_COUNT: u32 = 65536;
const BPF_NOEXIST: u64 = 1;
/// `BPF_F_MMAPABLE`: userspace maps the array and reads its counters with plain loads, where a
/// lookup costs a `bpf()` syscall (~1 µs here) per read.
const BPF_F_MMAPABLE: u32 = 1 << 10;

#[map]
static TGIDS: LruHashMap<u32, TgidStats> = LruHashMap::with_max_entries(16384, 0);
#[map]
static CGROUPS: LruHashMap<u64, CgroupStats> = LruHashMap::with_max_entries(4096, 0);
/// child tgid -> parent tgid, for every process created since load.
#[map]
static CREATED_BY: LruHashMap<u32, u32> = LruHashMap::with_max_entries(65536, 0);
/// tgid -> scope index; userspace inserts scope roots, the fork program adds their descendants.
/// Not LRU: evicting a member would silently lose its subtree.
#[map]
static TRACKED: HashMap<u32, u32> = HashMap::with_max_entries(65536, 0);
#[map]
static SCOPES: Array<ScopeStats> = Array::with_max_entries(MAX_SCOPES, BPF_F_MMAPABLE);
/// Bumped by userspace after each change it makes to [`TRACKED`]; see
/// `TgidStats::scope_generation`. Written by userspace only.
#[map]
static TRACKING_GENERATION: Array<u32> = Array::with_max_entries(1, 0);
/// Per-thread scheduler state of threads whose id is below [`TID_SLOT_COUNT`], indexed by thread
/// id: the verifier inlines an array lookup to a bounds check and an add, where a hash lookup
/// costs ~50 ns here (see the README's overhead table). 24 bytes a slot, 1.5 MiB in all; a slot is
/// reset by `task_newtask` when its id is given to a new thread and zeroed when that thread exits.
#[map]
static TID_SLOTS: Array<TidState> = Array::with_max_entries(TID_SLOT_COUNT, 0);
/// The same state for thread ids from [`TID_SLOT_COUNT`] up (kernels with a larger `pid_max`).
#[map]
static TIDS: LruHashMap<u32, TidState> = LruHashMap::with_max_entries(65536, 0);
#[map]
static RECLAIM_TS: LruHashMap<u32, u64> = LruHashMap::with_max_entries(16384, 0);
#[map]
static GLOBAL: Array<GlobalStats> = Array::with_max_entries(1, BPF_F_MMAPABLE);
#[map]
static OOM_EVENTS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// Reads one `u16` of [`CONFIG`] so that the compiler cannot fold it to the compile-time default.
macro_rules! cfg {
    ($field:ident) => {
        // SAFETY: CONFIG is a valid static; volatile keeps the load from `.rodata` in the program.
        unsafe { core::ptr::read_volatile(&$crate::CONFIG.$field) }
    };
}

// After `cfg!`: macro_rules are visible only in modules declared below them.
mod memory;
mod process;
mod sched;

#[inline(always)]
fn add(counter: *mut u64, value: u64) {
    // SAFETY: `counter` points into a map value returned by the kernel, valid and 8-byte aligned
    // for the program's run; other CPUs update it concurrently, hence the atomic add (BPF_XADD;
    // core's atomics lack read-modify-write operations on this target).
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) counter,
            v = in(reg) value,
            options(nostack, preserves_flags),
        );
    }
}

#[inline(always)]
fn global() -> Option<*mut GlobalStats> {
    GLOBAL.get_ptr_mut(0)
}

#[inline(always)]
fn insert_failed() {
    if let Some(g) = global() {
        // SAFETY: map value pointer from the kernel.
        add(unsafe { &raw mut (*g).map_insert_failures }, 1);
    }
}

#[inline(always)]
fn tgid_stats(tgid: u32) -> Option<*mut TgidStats> {
    if let Some(stats) = TGIDS.get_ptr_mut(&tgid) {
        return Some(stats);
    }
    // NOEXIST: another CPU may have inserted it meanwhile; its counts must not be reset.
    let _ = TGIDS.insert(&tgid, &ZERO_TGID_STATS, BPF_NOEXIST);
    let stats = TGIDS.get_ptr_mut(&tgid);
    if stats.is_none() {
        insert_failed();
    }
    stats
}

/// The current [`TRACKING_GENERATION`]: an array lookup the verifier inlines (no helper call).
#[inline(always)]
fn tracking_generation() -> u32 {
    TRACKING_GENERATION.get(0).copied().unwrap_or(0)
}

/// The counters of the tracked scope `tgid` belongs to, if any. `stats` is its [`TGIDS`] entry,
/// which caches the scope: it is looked up in [`TRACKED`] again only after userspace changed
/// that map (a new generation) or when the entry is new. The processes the kernel itself adds to
/// or removes from `TRACKED` have a new entry (created after the fork) or none (deleted at exit).
#[inline(always)]
fn scope_of(tgid: u32, stats: *mut TgidStats) -> Option<*mut ScopeStats> {
    let generation = tracking_generation();
    // SAFETY: map value pointer from the kernel; concurrent refreshes write the same values.
    let scope_plus_one = unsafe {
        if (*stats).scope_generation != generation {
            (*stats).scope_plus_one = TRACKED.get(&tgid).map_or(0, |scope| scope + 1);
            (*stats).scope_generation = generation;
        }
        (*stats).scope_plus_one
    };
    if scope_plus_one == 0 {
        return None;
    }
    SCOPES.get_ptr_mut(scope_plus_one - 1)
}

/// Applies `count` to the event counters of `tgid`, and to those of its tracked scope if it is
/// in one.
#[inline(always)]
fn count_events(tgid: u32, count: impl Fn(*mut EventCounters)) {
    let Some(stats) = tgid_stats(tgid) else {
        return;
    };
    // SAFETY: map value pointer from the kernel.
    count(unsafe { &raw mut (*stats).events });
    if let Some(scope) = scope_of(tgid, stats) {
        // SAFETY: map value pointer from the kernel.
        count(unsafe { &raw mut (*scope).events });
    }
}

#[inline(always)]
fn cgroup_stats() -> Option<*mut CgroupStats> {
    // SAFETY: helper without arguments.
    let id = unsafe { bpf_get_current_cgroup_id() };
    if let Some(stats) = CGROUPS.get_ptr_mut(&id) {
        return Some(stats);
    }
    let _ = CGROUPS.insert(&id, &CgroupStats::default(), BPF_NOEXIST);
    let stats = CGROUPS.get_ptr_mut(&id);
    if stats.is_none() {
        insert_failed();
    }
    stats
}

#[inline(always)]
fn current_tgid() -> u32 {
    (bpf_get_current_pid_tgid() >> 32) as u32
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
