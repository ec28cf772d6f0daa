//! `/proc/stat`: CPU time per logical CPU (in `USER_HZ` ticks) and the process counters, plus
//! Relay's global CPU rate computed from two such readings.

use super::parse::{fields, lines, parse_u64};

/// The CPU time columns of one `cpu` line of `/proc/stat`, in `USER_HZ` ticks (10 ms here).
/// `guest` and `guest_nice` are left out: the kernel already counts them in `user` and `nice`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// The CPU's number (`cpu3` → 3; 0 for the aggregate line).
    pub cpu: u32,
    /// Normal processes in user mode.
    pub user: u64,
    /// Niced processes in user mode.
    pub nice: u64,
    /// Kernel mode.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Idle while I/O was outstanding.
    pub iowait: u64,
    /// Hard interrupts.
    pub irq: u64,
    /// Soft interrupts.
    pub softirq: u64,
    /// Time stolen by the hypervisor.
    pub steal: u64,
}

impl CpuTimes {
    /// Relay's busy time: user + nice + system + irq + softirq + steal (`None` on overflow).
    pub fn busy_ticks(&self) -> Option<u64> {
        self.user
            .checked_add(self.nice)?
            .checked_add(self.system)?
            .checked_add(self.irq)?
            .checked_add(self.softirq)?
            .checked_add(self.steal)
    }

    /// idle + iowait (`None` on overflow).
    pub fn idle_ticks(&self) -> Option<u64> {
        self.idle.checked_add(self.iowait)
    }

    /// Relay's total: busy + idle + iowait (`None` on overflow).
    pub fn total_ticks(&self) -> Option<u64> {
        self.busy_ticks()?.checked_add(self.idle_ticks()?)
    }
}

/// The rest of `/proc/stat` that we use. Each value is `None` when its line is absent or malformed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatCounters {
    /// The aggregate `cpu` line (sum over all CPUs).
    pub aggregate: Option<CpuTimes>,
    /// `ctxt`: context switches since boot.
    pub ctxt: Option<u64>,
    /// `procs_running`: runnable tasks right now.
    pub procs_running: Option<u64>,
    /// `procs_blocked`: tasks blocked on I/O right now.
    pub procs_blocked: Option<u64>,
}

/// Parses `/proc/stat`: the per-CPU lines (`cpu0`, `cpu1`, …, in file order, which is ascending CPU
/// number; offline CPUs have no line) go into `per_cpu` (cleared first, capacity kept), everything
/// else into the returned counters.
///
/// If any per-CPU line is malformed, `per_cpu` is left empty: a partial CPU list would silently
/// pair the wrong CPUs in a rate, whereas an empty one makes the rate `None`. Returns `None` when
/// the content has no recognisable line at all.
pub fn parse_stat(content: &[u8], per_cpu: &mut Vec<CpuTimes>) -> Option<StatCounters> {
    per_cpu.clear();
    let mut counters = StatCounters::default();
    let mut per_cpu_valid = true;
    let mut recognised = false;
    for line in lines(content) {
        let mut parts = fields(line);
        let Some(key) = parts.next() else { continue };
        if let Some(suffix) = key.strip_prefix(b"cpu") {
            recognised = true;
            let times = parse_cpu_times(parts);
            if suffix.is_empty() {
                counters.aggregate = times;
            } else if let Some(cpu) = parse_u64(suffix).and_then(|n| u32::try_from(n).ok()) {
                match times {
                    Some(times) if per_cpu_valid => per_cpu.push(CpuTimes { cpu, ..times }),
                    _ => per_cpu_valid = false,
                }
            }
            continue;
        }
        let slot = match key {
            b"ctxt" => &mut counters.ctxt,
            b"procs_running" => &mut counters.procs_running,
            b"procs_blocked" => &mut counters.procs_blocked,
            _ => continue,
        };
        recognised = true;
        *slot = match (parts.next(), parts.next()) {
            (Some(value), None) => parse_u64(value),
            _ => None,
        };
    }
    if !per_cpu_valid {
        per_cpu.clear();
    }
    recognised.then_some(counters)
}

/// The first eight columns (user … steal); kernels since 2.6.24 print ten, older ones fewer,
/// which we refuse rather than guess.
fn parse_cpu_times<'a>(mut parts: impl Iterator<Item = &'a [u8]>) -> Option<CpuTimes> {
    let mut next = || parts.next().and_then(parse_u64);
    Some(CpuTimes {
        cpu: 0,
        user: next()?,
        nice: next()?,
        system: next()?,
        idle: next()?,
        iowait: next()?,
        irq: next()?,
        softirq: next()?,
        steal: next()?,
    })
}

/// Relay's global CPU rate, in logical processors: Σ over CPUs of Δbusy ÷ Δtotal between two
/// per-CPU readings (so 1.0 means one CPU fully busy, whatever the interval).
///
/// `None` when the CPU count changed (hotplug), either reading is empty, a CPU's busy or idle
/// time went backwards, a sum overflows, or a CPU saw no elapsed ticks (readings too close).
///
/// Busy and idle (idle + iowait) are checked rather than each column: with NO_HZ the kernel
/// computes the idle/iowait split on the fly and time can move from iowait back to idle, so
/// `iowait` alone may decrease between readings although neither sum does.
pub fn cpu_rate_logical_processors(prev: &[CpuTimes], cur: &[CpuTimes]) -> Option<f64> {
    // Paired by CPU number: one CPU gone offline and another online keep the count.
    if prev.is_empty() || !prev.iter().map(|c| c.cpu).eq(cur.iter().map(|c| c.cpu)) {
        return None;
    }
    let mut rate = 0.0;
    for (before, after) in prev.iter().zip(cur) {
        let busy = after.busy_ticks()?.checked_sub(before.busy_ticks()?)?;
        let idle = after.idle_ticks()?.checked_sub(before.idle_ticks()?)?;
        let total = busy.checked_add(idle)?;
        if total == 0 {
            return None;
        }
        rate += busy as f64 / total as f64;
    }
    Some(rate)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPTURED: &[u8] = include_bytes!("testdata/stat");

    fn times(busy_user: u64, idle: u64) -> CpuTimes {
        CpuTimes {
            cpu: 0,
            user: busy_user,
            idle,
            ..CpuTimes::default()
        }
    }

    #[test]
    fn parses_captured_stat() {
        let mut cpus = Vec::new();
        let counters = parse_stat(CAPTURED, &mut cpus).unwrap();
        assert_eq!(
            counters.aggregate,
            Some(CpuTimes {
                cpu: 0,
                user: 26233,
                nice: 0,
                system: 6247,
                idle: 49951,
                iowait: 250,
                irq: 0,
                softirq: 113,
                steal: 212,
            })
        );
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[0].user, 13075);
        assert_eq!(cpus[1].iowait, 205);
        assert_eq!(cpus[1].steal, 130);
        assert_eq!(counters.ctxt, Some(444_372));
        assert_eq!(counters.procs_running, Some(3));
        assert_eq!(counters.procs_blocked, Some(0));
    }

    #[test]
    fn reuses_the_callers_vector() {
        let mut cpus = Vec::with_capacity(8);
        cpus.push(CpuTimes::default());
        let pointer = cpus.as_ptr();
        parse_stat(CAPTURED, &mut cpus).unwrap();
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus.as_ptr(), pointer);
    }

    #[test]
    fn a_malformed_cpu_line_empties_the_per_cpu_list() {
        let mut cpus = Vec::new();
        let counters = parse_stat(
            b"cpu 1 2 3 4 5 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8\ncpu1 1 2 x 4 5 6 7 8\nctxt 9\n",
            &mut cpus,
        )
        .unwrap();
        assert!(cpus.is_empty());
        assert_eq!(counters.aggregate.map(|t| t.steal), Some(8));
        assert_eq!(counters.ctxt, Some(9));
    }

    #[test]
    fn short_and_non_numeric_lines_are_none() {
        let mut cpus = Vec::new();
        let counters = parse_stat(
            b"cpu 1 2 3 4 5 6 7\nctxt\nprocesses abc\nprocs_running 1 2\nprocs_blocked 4\n",
            &mut cpus,
        )
        .unwrap();
        assert_eq!(counters.aggregate, None);
        assert_eq!(counters.ctxt, None);
        assert_eq!(counters.procs_running, None);
        assert_eq!(counters.procs_blocked, Some(4));
        assert_eq!(parse_stat(b"", &mut cpus), None);
        assert_eq!(parse_stat(b"hello world\n", &mut cpus), None);
    }

    #[test]
    fn truncation_never_panics_and_never_invents_cpus() {
        let mut cpus = Vec::new();
        for end in 0..CAPTURED.len() {
            let _ = parse_stat(&CAPTURED[..end], &mut cpus);
            assert!(cpus.len() <= 2);
        }
    }

    #[test]
    fn rate_sums_busy_fractions_over_cpus() {
        let prev = [times(100, 100), times(0, 0)];
        let cur = [times(150, 150), times(100, 0)];
        // CPU0: 50/100, CPU1: 100/100.
        let rate = cpu_rate_logical_processors(&prev, &cur).unwrap();
        assert!((rate - 1.5).abs() < 1e-12, "{rate}");
    }

    #[test]
    fn rate_counts_every_busy_column_and_idle_iowait_as_idle() {
        let prev = [CpuTimes::default()];
        let cur = [CpuTimes {
            cpu: 0,
            user: 1,
            nice: 1,
            system: 1,
            idle: 2,
            iowait: 2,
            irq: 1,
            softirq: 1,
            steal: 1,
        }];
        let rate = cpu_rate_logical_processors(&prev, &cur).unwrap();
        assert!((rate - 0.6).abs() < 1e-12, "{rate}");
    }

    #[test]
    fn rate_is_none_when_it_cannot_be_trusted() {
        let base = [times(10, 10)];
        // Busy went backwards.
        assert_eq!(cpu_rate_logical_processors(&base, &[times(9, 20)]), None);
        // Idle went backwards.
        assert_eq!(cpu_rate_logical_processors(&base, &[times(20, 9)]), None);
        // No elapsed ticks.
        assert_eq!(cpu_rate_logical_processors(&base, &base), None);
        // CPU count changed.
        assert_eq!(
            cpu_rate_logical_processors(&base, &[times(20, 20), times(1, 1)]),
            None
        );
        assert_eq!(cpu_rate_logical_processors(&[], &[]), None);
        // Overflowing sums.
        let huge = [CpuTimes {
            cpu: 0,
            user: u64::MAX,
            nice: 1,
            ..CpuTimes::default()
        }];
        assert_eq!(cpu_rate_logical_processors(&base, &huge), None);
    }

    #[test]
    fn rate_tolerates_idle_time_moving_between_idle_and_iowait() {
        let prev = [CpuTimes {
            cpu: 0,
            user: 10,
            idle: 10,
            iowait: 5,
            ..CpuTimes::default()
        }];
        let cur = [CpuTimes {
            cpu: 0,
            user: 20,
            idle: 20,
            iowait: 4,
            ..CpuTimes::default()
        }];
        let rate = cpu_rate_logical_processors(&prev, &cur).unwrap();
        assert!((rate - 10.0 / 19.0).abs() < 1e-12, "{rate}");
    }

    /// A 128-CPU machine's `/proc/stat` (generated here in the kernel's format: no such host is
    /// reachable): 6.5 KB, the counters after the CPU lines past the first page (a real one is
    /// longer still: its `intr` line lists every interrupt).
    #[test]
    fn a_128_cpu_stat_gives_every_cpu_and_the_counters_after_them() {
        let mut text = String::from("cpu  0 0 0 0 0 0 0 0 0 0\n");
        for cpu in 0..128u64 {
            text.push_str(&format!(
                "cpu{cpu} {} {} {} {} {} {} {} 0 0 0\n",
                1_000_000 + cpu,
                cpu,
                2_000_000 + cpu,
                90_000_000 + cpu,
                7 * cpu,
                3,
                5 * cpu
            ));
        }
        text.push_str("intr 1 2 3\nctxt 987654321\nbtime 1764900000\nprocesses 4242424\nprocs_running 97\nprocs_blocked 3\n");
        assert!(text.len() > 4096, "{}", text.len());
        let mut per_cpu = Vec::new();
        let counters = parse_stat(text.as_bytes(), &mut per_cpu).unwrap();
        assert_eq!(per_cpu.len(), 128);
        for (cpu, times) in (0u64..).zip(&per_cpu) {
            assert_eq!(
                (
                    times.user,
                    times.nice,
                    times.system,
                    times.idle,
                    times.iowait,
                    times.softirq
                ),
                (
                    1_000_000 + cpu,
                    cpu,
                    2_000_000 + cpu,
                    90_000_000 + cpu,
                    7 * cpu,
                    5 * cpu
                )
            );
        }
        assert_eq!(counters.ctxt, Some(987_654_321));
        assert_eq!(counters.procs_running, Some(97));
        assert_eq!(counters.procs_blocked, Some(3));
    }
}
