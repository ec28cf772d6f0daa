//! The counts behind Relay's lifetime fields (`process.lifetime_creation_count`,
//! `memory.out_of_memory_event_count`, the `terminated` limit event): only counts over the whole
//! life of the scope fill them (see [`LifetimeCounts`]).

use std::time::{Duration, Instant};

use crate::model::LifetimeCounts;
use crate::snapshot::KernelEvents;
use crate::source::system::OomKillReader;
use crate::source::Roots;

use super::reasons::Reasons;
use super::Target;

/// How stale the machine's OOM-kill count may get while the eBPF programs see no kill: the
/// tracepoint fires just before the kernel counts the kill in `/proc/vmstat`, so a read that
/// falls between the two is corrected by the next periodic one.
const OOM_KILL_REFRESH: Duration = Duration::from_secs(1);

/// `/proc/vmstat` `oom_kill`: the exact count of OOM kills since boot (global `terminated`).
/// The file is ~4 KiB of per-CPU sums; while the eBPF programs count kills, it is re-read only
/// when they saw one, or after [`OOM_KILL_REFRESH`].
pub(super) struct OomKillCount {
    file: OomKillReader,
    value: Option<u64>,
    /// Why `value` is `None`, repeated while it is.
    error: Option<String>,
    /// The eBPF machine-wide kill count at the last read, and when that was.
    read_at: Option<(Option<u64>, Instant)>,
}

impl OomKillCount {
    pub(super) fn new(roots: &Roots) -> Self {
        Self {
            file: OomKillReader::new(roots),
            value: None,
            error: None,
            read_at: None,
        }
    }

    /// The count since boot; `ebpf_kills` is the programs' machine-wide count, when active.
    fn read(&mut self, ebpf_kills: Option<u64>, reasons: &mut Reasons) -> Option<u64> {
        let due = match (self.read_at, ebpf_kills) {
            (Some((Some(seen), at)), Some(now)) => seen != now || at.elapsed() >= OOM_KILL_REFRESH,
            _ => true,
        };
        if due {
            self.read_at = Some((ebpf_kills, Instant::now()));
            (self.value, self.error) = match self.file.read() {
                Ok(counter) => match counter {
                    Some(value) => (Some(value), None),
                    None => (
                        None,
                        Some(format!(
                            "{}: no oom_kill counter",
                            self.file.path().display()
                        )),
                    ),
                },
                Err(error) => (None, Some(error.to_string())),
            };
        }
        if let Some(error) = &self.error {
            reasons.add("memory.limit_events", format_args!("{error}"));
        }
        self.value
    }
}

/// The lifetime counts of this pass. `tree_from_start`: the kernel has tracked the tree since
/// before its root could create anything (see `Collector::count_from_root_start`), so its counts
/// since the collector's start are its lifetime counts.
pub(super) fn lifetime_counts(
    target: &Target,
    memory: bool,
    events: &KernelEvents,
    tree_from_start: bool,
    oom_kills: &mut OomKillCount,
    reasons: &mut Reasons,
) -> LifetimeCounts {
    match target {
        // No since-boot count of OOM episodes exists machine-wide, and `/proc/stat` `processes`
        // counts every clone, threads included: only the kills have a lifetime source.
        Target::Global => LifetimeCounts {
            processes_created: None,
            oom_kills: memory
                .then(|| {
                    let ebpf = events.active.then_some(events.oom_kills).flatten();
                    oom_kills.read(ebpf, reasons)
                })
                .flatten(),
            oom_events: None,
        },
        Target::Process { tree: true, .. } if tree_from_start && events.reason.is_none() => {
            LifetimeCounts {
                processes_created: events.processes_created,
                oom_kills: events.oom_kills,
                // Without the cgroup's counters, each kill in the tree stands for its episode.
                oom_events: events.oom_kills,
            }
        }
        _ => LifetimeCounts::default(),
    }
}
