//! The exporter conventions of node_exporter and the Prometheus client libraries, appended to
//! each publication's Prometheus text by the sampling thread: `relay_metrics_build_info` and the
//! agent's own `process_cpu_seconds_total`, `process_resident_memory_bytes` and
//! `process_open_fds` (as of the snapshot, from `/proc/self`). A value that cannot be read is
//! left out, not guessed.

use std::fmt::Write as _;

/// The commit the binary was built from (`build.rs`: `git rev-parse --short HEAD`, or
/// `unknown`).
const REVISION: &str = env!("RELAY_METRICS_COMMIT");

/// Appends the build info and the agent's own process series to `out`.
pub(super) fn append(out: &mut String) {
    out.push_str(
        "# HELP relay_metrics_build_info The agent's version and the commit it was built from (always 1).\n\
         # TYPE relay_metrics_build_info gauge\n",
    );
    let _ = writeln!(
        out,
        "relay_metrics_build_info{{version=\"{}\",revision=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        REVISION
    );
    let own = Own::read();
    if let Some(seconds) = own.cpu_seconds {
        out.push_str(
            "# HELP process_cpu_seconds_total User and system CPU time of the agent itself.\n\
             # TYPE process_cpu_seconds_total counter\n\
             # UNIT process_cpu_seconds_total seconds\n",
        );
        let _ = writeln!(out, "process_cpu_seconds_total {seconds}");
    }
    if let Some(bytes) = own.resident_bytes {
        out.push_str(
            "# HELP process_resident_memory_bytes Resident memory of the agent itself.\n\
             # TYPE process_resident_memory_bytes gauge\n\
             # UNIT process_resident_memory_bytes bytes\n",
        );
        let _ = writeln!(out, "process_resident_memory_bytes {bytes}");
    }
    if let Some(count) = own.open_fds {
        out.push_str(
            "# HELP process_open_fds Open file descriptors of the agent itself.\n\
             # TYPE process_open_fds gauge\n",
        );
        let _ = writeln!(out, "process_open_fds {count}");
    }
}

/// The agent's own figures.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub(super) struct Own {
    pub cpu_seconds: Option<f64>,
    pub resident_bytes: Option<u64>,
    pub open_fds: Option<u64>,
}

impl Own {
    pub(super) fn read() -> Self {
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .filter(|t| *t > 0);
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .filter(|p| *p > 0);
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        let statm = std::fs::read_to_string("/proc/self/statm").ok();
        // Linux 6.2 and later give the count as the directory's size (one stat, however many
        // descriptors the agent holds); earlier kernels say 0: list it, less the descriptor the
        // listing itself holds.
        let open_fds = std::fs::metadata("/proc/self/fd")
            .ok()
            .map(|meta| meta.len())
            .filter(|count| *count > 0)
            .or_else(|| {
                std::fs::read_dir("/proc/self/fd")
                    .ok()
                    .map(|dir| (dir.count() as u64).saturating_sub(1))
            });
        Self {
            cpu_seconds: stat
                .as_deref()
                .and_then(cpu_ticks)
                .zip(ticks)
                .map(|(t, hz)| t as f64 / hz as f64),
            resident_bytes: statm
                .as_deref()
                .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
                .zip(page)
                .map(|(pages, size)| pages * size as u64),
            open_fds,
        }
    }
}

/// `utime + stime` (clock ticks) of a `/proc/<pid>/stat` line: fields 14 and 15, counted after
/// the command name's closing parenthesis (the name may hold spaces and parentheses).
fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_fields_14_and_15_after_the_name() {
        let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 7 5 0 0 20 0 1 0 100 0 0";
        assert_eq!(cpu_ticks(line), Some(12));
        assert_eq!(cpu_ticks("42 (a) S 1"), None);
        assert_eq!(cpu_ticks("no parenthesis"), None);
    }

    #[test]
    fn the_agent_reads_its_own_figures() {
        let before = Own::read();
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(spin.elapsed());
        }
        let after = Own::read();
        drop(file);
        assert!(after.cpu_seconds.unwrap() >= before.cpu_seconds.unwrap());
        assert!(after.resident_bytes.unwrap() > 1 << 20, "{after:?}");
        // The open file is one more descriptor (other test threads may open theirs too).
        assert!(after.open_fds.unwrap() >= 3, "{after:?}");
        // The same count as a listing (less the listing's own descriptor), when no other test
        // thread opens or closes one in between.
        let listed = || std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1;
        let agree = (0..20).any(|_| {
            let before = listed();
            let own = Own::read().open_fds.unwrap();
            own == before && listed() == before
        });
        assert!(agree, "{:?} against {}", Own::read(), listed());
        let mut out = String::new();
        append(&mut out);
        assert!(out.contains(&format!(
            "relay_metrics_build_info{{version=\"{}\",revision=\"{REVISION}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
        ] {
            assert!(out.contains(&format!("\n{name} ")), "{name}: {out}");
        }
    }
}
