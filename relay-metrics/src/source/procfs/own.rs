//! The agent's own process figures, as the Prometheus client libraries export them
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`), from `/proc/self`. A figure that cannot be
//! read is `None`, never guessed.

use std::path::Path;

use super::parse::{parse_stat, parse_statm_resident_pages};
use crate::source::file::read_once;

/// The agent's own figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(crate) struct OwnProcess {
    /// User and system CPU time, seconds (`/proc/self/stat` `utime + stime`).
    pub cpu_seconds: Option<f64>,
    /// Resident memory, bytes (`/proc/self/statm`, resident pages × page size).
    pub resident_bytes: Option<u64>,
    /// Open file descriptors ([`open_fd_count`]).
    pub open_fds: Option<u64>,
    /// The soft open-file limit (`getrlimit(RLIMIT_NOFILE)`, what `Max open files` of
    /// `/proc/self/limits` shows; `None` when unlimited).
    pub max_fds: Option<u64>,
    /// When the agent started, seconds since the epoch: `/proc/stat` `btime` plus
    /// `/proc/self/stat` `starttime` (clock ticks after boot), as the Prometheus Go client
    /// computes it. Found at the first read that has both, then kept: it cannot change, and
    /// `/proc/stat` (every CPU's and interrupt's counters) is not read again for it at each
    /// scrape.
    pub start_time_seconds: Option<f64>,
}

impl OwnProcess {
    /// Reads the figures now.
    pub(crate) fn read() -> Self {
        static START_TIME_SECONDS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
        let ticks = super::clock_ticks_per_second();
        let page = super::page_size_bytes();
        let mut buf = Vec::new();
        let stat = read_once(Path::new("/proc/self/stat"), &mut buf)
            .ok()
            .and_then(parse_stat);
        let resident_pages = read_once(Path::new("/proc/self/statm"), &mut buf)
            .ok()
            .and_then(parse_statm_resident_pages);
        let start_time_seconds = START_TIME_SECONDS.get().copied().or_else(|| {
            let btime = crate::source::system::boot_time_seconds()?;
            let (stat, hz) = stat.zip(ticks)?;
            let start = btime as f64 + stat.start_time_ticks as f64 / hz as f64;
            Some(*START_TIME_SECONDS.get_or_init(|| start))
        });
        Self {
            cpu_seconds: stat
                .zip(ticks)
                .map(|(s, hz)| (s.utime_ticks + s.stime_ticks) as f64 / hz as f64),
            resident_bytes: resident_pages.zip(page).map(|(pages, size)| pages * size),
            open_fds: open_fd_count(),
            max_fds: soft_open_file_limit(),
            start_time_seconds,
        }
    }
}

/// The agent's open file descriptors. Linux 6.2 and later give the count as the size of
/// `/proc/self/fd` (one `stat`, however many descriptors the agent holds); earlier kernels say 0:
/// list it, less the descriptor the listing itself holds.
pub(crate) fn open_fd_count() -> Option<u64> {
    std::fs::metadata("/proc/self/fd")
        .ok()
        .map(|meta| meta.len())
        .filter(|count| *count > 0)
        .or_else(|| {
            std::fs::read_dir("/proc/self/fd")
                .ok()
                .map(|dir| (dir.count() as u64).saturating_sub(1))
        })
}

/// The soft open-file limit, `None` when unlimited (or, never seen, when the call fails).
fn soft_open_file_limit() -> Option<u64> {
    use nix::sys::resource::{getrlimit, Resource, RLIM_INFINITY};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    (soft != RLIM_INFINITY).then_some(soft)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The soft limit of the `Max open files` line of `/proc/<pid>/limits` (`None`: unlimited or
    /// missing): the witness of [`soft_open_file_limit`].
    fn soft_open_files(limits: &str) -> Option<u64> {
        limits
            .lines()
            .find_map(|line| line.strip_prefix("Max open files"))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
    }

    #[test]
    fn parses_the_soft_open_file_limit() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             63471                63471                processes \n\
                      Max open files            20000                524288               files     \n";
        assert_eq!(soft_open_files(limits), Some(20_000));
        let unlimited =
            "Max open files            unlimited            unlimited            files     \n";
        assert_eq!(soft_open_files(unlimited), None);
    }

    /// Against witnesses that read nothing of ours: `/proc/self/limits` for the limit and `ps`'s
    /// elapsed time for the start, which a second read keeps.
    #[test]
    fn the_agent_reads_its_own_figures_against_witnesses() {
        let own = OwnProcess::read();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        assert_eq!(own.max_fds, soft_open_files(&limits));
        assert!(own.max_fds.is_some(), "{limits}");
        // `now`, `ps`'s elapsed seconds for this process and how long `ps` took.
        let witness = || {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64();
            let pid = std::process::id().to_string();
            let asked = std::time::Instant::now();
            let ps = std::process::Command::new("ps")
                .args(["-o", "etimes=", "-p", &pid])
                .output()
                .unwrap();
            let ps_took = asked.elapsed().as_secs_f64();
            let elapsed: f64 = String::from_utf8(ps.stdout)
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            (now, elapsed, ps_took)
        };
        // A process a few milliseconds old (this test run alone) can have a negative age by
        // `ps`'s clocks, which it prints wrapped (4123168608 seen): asked again a second later.
        let mut asked = witness();
        for _ in 0..3 {
            if asked.1 < asked.0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
            asked = witness();
        }
        let (now, elapsed, ps_took) = asked;
        let start = own.start_time_seconds.unwrap();
        // `btime` is whole seconds (the start up to 1 s early) and `ps` floors the elapsed
        // time it takes up to `ps_took` after `now` (up to 1 s short): the difference lies in
        // [-ps_took, 2), widened by the clocks' ticks (1/100 s).
        let difference = now - elapsed - start;
        // With the boot time and uptime as they are now, for a failure's diagnosis (a fresh-clone
        // CI run once saw a difference of 19.5 s, unexplained).
        assert!(
            -(ps_took + 0.05) <= difference && difference < 2.05,
            "start {start}, now {now}, ps elapsed {elapsed} (took {ps_took} s), btime now {:?}, \
             uptime now {:?}",
            crate::source::system::boot_time_seconds(),
            std::fs::read_to_string("/proc/uptime")
        );
        assert_eq!(OwnProcess::read().start_time_seconds, Some(start));
        assert!(own.cpu_seconds.unwrap() >= 0.0);
        assert!(own.resident_bytes.unwrap() > 1 << 20, "{own:?}");
        assert!(own.open_fds.unwrap() >= 3, "{own:?}");
    }

    #[test]
    fn the_open_descriptors_are_those_a_listing_shows() {
        // The same count as a listing (less the listing's own descriptor), when no other test
        // thread opens or closes one in between.
        let listed = || std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
        let agree = (0..20).any(|_| {
            let before = listed();
            let own = open_fd_count().unwrap();
            own == before && listed() == before
        });
        assert!(agree, "{:?} against {}", open_fd_count(), listed());
    }
}
