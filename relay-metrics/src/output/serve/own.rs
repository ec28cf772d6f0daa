//! The exporter conventions of node_exporter and the Prometheus client libraries, appended to
//! each publication's Prometheus text when it is written (on the first request for it):
//! `relay_metrics_build_info` and the agent's own `process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_open_fds`, `process_max_fds` and
//! `process_start_time_seconds` (as of that request, as the client libraries give them at a
//! scrape; read by [`crate::source::procfs::OwnProcess`]). A value that cannot be read is left out, not
//! guessed.

use std::fmt::Write as _;

use crate::source::procfs::OwnProcess;

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
    let own = OwnProcess::read();
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
    if let Some(count) = own.max_fds {
        out.push_str(
            "# HELP process_max_fds Maximum number of open file descriptors of the agent itself (the soft limit).\n\
             # TYPE process_max_fds gauge\n",
        );
        let _ = writeln!(out, "process_max_fds {count}");
    }
    if let Some(seconds) = own.start_time_seconds {
        out.push_str(
            "# HELP process_start_time_seconds Start time of the agent since unix epoch in seconds.\n\
             # TYPE process_start_time_seconds gauge\n\
             # UNIT process_start_time_seconds seconds\n",
        );
        let _ = writeln!(out, "process_start_time_seconds {seconds}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every figure appended, each the value a witness of its own gives: `getrlimit(2)` for the
    /// descriptor limit, the stat files read here for the rest.
    #[test]
    fn the_agents_own_series_are_appended() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < std::time::Duration::from_millis(50) {
            std::hint::black_box(spin.elapsed());
        }
        let mut out = String::new();
        append(&mut out);
        assert!(out.contains(&format!(
            "relay_metrics_build_info{{version=\"{}\",revision=\"{REVISION}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )));
        let value = |name: &str| -> f64 {
            let line = out
                .lines()
                .find(|line| line.starts_with(&format!("{name} ")))
                .unwrap_or_else(|| panic!("{name}: {out}"));
            line[name.len() + 1..].parse().unwrap()
        };
        assert!(value("process_cpu_seconds_total") > 0.0);
        assert!(value("process_resident_memory_bytes") > f64::from(1 << 20));
        assert!(value("process_open_fds") >= 3.0);
        let (soft, _) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(value("process_max_fds"), soft as f64);
        // Started before now, after boot.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            start <= now && start >= now - uptime - 1.0,
            "{start} {now} {uptime}"
        );
    }
}
