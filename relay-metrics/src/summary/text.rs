//! The summary as an aligned text table, in the manner of `perf stat` and GNU `time -v`:
//! rounded figures with their units, `n/a` with a numbered note where a value is unknown.

use std::fmt::Write as _;

use super::{PeakSource, RunSummary};

/// `1234567` → `1.18 MiB`.
pub(crate) fn format_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes;
    let mut unit = 0;
    // On what the value rounds to: 1,048,575 B is 1.00 MiB, not 1024.00 KiB.
    while value >= 1023.995 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
}

/// Seconds with three significant decimals below a minute, else `1m 02.5s`.
pub(crate) fn format_seconds(seconds: f64) -> String {
    // On what the value rounds to: 119.97 s is 2 min 0.0 s, not 1 min 60.0 s.
    if seconds < 59.9995 {
        format!("{seconds:.3} s")
    } else {
        let tenths = (seconds * 10.0).round();
        let minutes = (tenths / 600.0).floor();
        format!(
            "{minutes:.0} min {:.1} s",
            (tenths - minutes * 600.0) / 10.0
        )
    }
}

/// One table row: a label, a value (or `n/a`), and a comment.
struct Row {
    label: &'static str,
    value: Option<String>,
    comment: String,
}

impl RunSummary {
    /// The rows of the table, in order (shared by the text and the HTML rendering).
    pub fn rows(&self) -> Vec<(&'static str, Option<String>, String)> {
        self.table()
            .into_iter()
            .map(|row| (row.label, row.value, row.comment))
            .collect()
    }

    fn table(&self) -> Vec<Row> {
        let mut rows = Vec::new();
        self.cpu_rows(&mut rows);
        self.memory_rows(&mut rows);
        self.io_and_limit_rows(&mut rows);
        self.gpu_rows(&mut rows);
        self.sampling_rows(&mut rows);
        rows
    }

    /// Wall time and CPU.
    fn cpu_rows(&self, rows: &mut Vec<Row>) {
        let mut row = |label, value: Option<String>, comment: String| {
            rows.push(Row {
                label,
                value,
                comment,
            });
        };
        row(
            "wall time",
            self.wall_time_s.map(format_seconds),
            String::new(),
        );
        let source = self
            .cpu
            .source
            .as_deref()
            .map(|s| format!("source: {s}"))
            .unwrap_or_default();
        row(
            "user CPU",
            self.cpu.user_s.map(format_seconds),
            source.clone(),
        );
        row(
            "system CPU",
            self.cpu.system_s.map(format_seconds),
            String::new(),
        );
        row(
            "total CPU",
            self.cpu.total_s.map(format_seconds),
            String::new(),
        );
        row(
            "average cores",
            self.cpu.average_cores.map(|c| format!("{c:.2}")),
            "CPU time / wall time".into(),
        );
        row(
            "peak cores",
            self.cpu.peak_cores.map(|c| format!("{c:.2}")),
            "highest rate over a sampling period or more".into(),
        );
    }

    /// Memory: charged, resident, one process.
    fn memory_rows(&self, rows: &mut Vec<Row>) {
        let mut row = |label, value: Option<String>, comment: String| {
            rows.push(Row {
                label,
                value,
                comment,
            });
        };
        let offset = |at: Option<chrono::DateTime<chrono::Utc>>| match (at, self.started) {
            (Some(at), Some(started)) => {
                let offset = (at - started).num_milliseconds().max(0) as f64 / 1000.0;
                format!(", at +{offset:.3} s")
            }
            _ => String::new(),
        };
        row(
            "peak charged memory",
            self.memory
                .peak_charged_bytes
                .map(|b| format_bytes(b as f64)),
            // The mark is seen at the sample after it was reached: "by", not "at".
            format!(
                "cgroup high-water mark, page cache included{}",
                offset(self.memory.peak_charged_at).replacen(", at", ", reached by", 1)
            ),
        );
        let peak_comment = match self.memory.peak_source {
            Some(PeakSource::HighestSampledSum) => format!(
                "processes' RSS, highest sampled sum{}",
                offset(self.memory.peak_at)
            ),
            None => String::new(),
        };
        row(
            "peak resident memory",
            self.memory
                .peak_resident_bytes
                .map(|b| format_bytes(b as f64)),
            peak_comment,
        );
        row(
            "max RSS, one process",
            self.memory
                .max_single_process_rss_bytes
                .map(|b| format_bytes(b as f64)),
            "as GNU time -v".into(),
        );
    }

    /// Storage, processes, throttling, limit events and OOM kills.
    fn io_and_limit_rows(&self, rows: &mut Vec<Row>) {
        let mut row = |label, value: Option<String>, comment: String| {
            rows.push(Row {
                label,
                value,
                comment,
            });
        };
        let io_source = self
            .io
            .source
            .as_deref()
            .map(|s| format!("source: {s}"))
            .unwrap_or_default();
        row(
            "read",
            self.io.read_bytes.map(|b| format_bytes(b as f64)),
            io_source,
        );
        row(
            "written",
            self.io.written_bytes.map(|b| format_bytes(b as f64)),
            String::new(),
        );
        row(
            "processes created",
            self.processes_created.map(|n| n.to_string()),
            String::new(),
        );
        row(
            "CPU throttled",
            self.throttled_s.map(format_seconds),
            String::new(),
        );
        for event in &self.limit_events {
            rows.push(Row {
                label: "limit event",
                value: Some(event.count.to_string()),
                comment: format!("{} {}", event.resource.as_str(), event.event.as_str()),
            });
        }
        let victims = self
            .oom_victims
            .iter()
            .map(|v| {
                format!(
                    "{} ({}, {})",
                    v.pid,
                    v.comm,
                    format_bytes(v.rss_kib as f64 * 1024.0)
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        rows.push(Row {
            label: "OOM kills",
            value: self.oom_kills.map(|n| n.to_string()),
            comment: if victims.is_empty() {
                String::new()
            } else {
                format!("victims: {victims}")
            },
        });
    }

    /// GPU, where one was seen.
    fn gpu_rows(&self, rows: &mut Vec<Row>) {
        if let Some(gpu) = &self.gpu {
            rows.push(Row {
                label: "GPU peak utilisation",
                value: gpu.peak_utilization_percent.map(|p| format!("{p:.0} %")),
                comment: format!("{} device(s)", gpu.devices),
            });
            rows.push(Row {
                label: "GPU peak memory",
                value: gpu.peak_memory_bytes.map(|b| format_bytes(b as f64)),
                comment: "summed over the devices".into(),
            });
            for event in &gpu.limit_events {
                let unit = if event.event == "xid" {
                    "XID errors"
                } else {
                    "sampling periods"
                };
                let throttled = event
                    .throttled_s
                    .map(|s| format!(", throttled {}", format_seconds(s)))
                    .unwrap_or_default();
                rows.push(Row {
                    label: "GPU limit event",
                    value: Some(event.count.to_string()),
                    comment: format!("gpu {} on {} ({unit}{throttled})", event.event, event.uuid),
                });
            }
        }
    }

    /// The sampling and how the command ended.
    fn sampling_rows(&self, rows: &mut Vec<Row>) {
        let interval = self
            .sampling
            .interval_usec
            .map(|us| format!("every {}", format_seconds(us as f64 / 1e6)))
            .unwrap_or_default();
        rows.push(Row {
            label: "samples",
            value: Some(self.sampling.samples.to_string()),
            comment: interval,
        });
        rows.push(Row {
            label: "missed ticks",
            value: Some(self.sampling.missed_ticks.to_string()),
            comment: String::new(),
        });
        if let Some(status) = self.exit_status {
            let value = match (status.code, status.signal) {
                (Some(code), _) => code.to_string(),
                (None, Some(signal)) => format!("killed by signal {signal}"),
                (None, None) => "unknown".to_owned(),
            };
            rows.push(Row {
                label: "exit status",
                value: Some(value),
                comment: String::new(),
            });
        }
    }

    /// The summary as an aligned text table (what `run` prints on stderr).
    pub fn to_text(&self) -> String {
        let rows = self.table();
        let values: Vec<String> = rows
            .iter()
            .map(|row| row.value.clone().unwrap_or_else(|| "n/a".to_owned()))
            .collect();
        let label_width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
        let value_width = values.iter().map(|v| v.chars().count()).max().unwrap_or(0);
        let mut out = String::new();
        let title = match &self.command {
            Some(command) => format!("Summary of '{command}'"),
            None => "Summary".to_owned(),
        };
        let scope = self
            .measurement_scope
            .map(|s| format!(" ({} scope)", s.as_str()))
            .unwrap_or_default();
        let _ = writeln!(out, "\n {title}{scope}:\n");
        for (row, value) in rows.iter().zip(&values) {
            let comment = if row.comment.is_empty() {
                String::new()
            } else {
                format!("   # {}", row.comment)
            };
            let _ = writeln!(
                out,
                "   {:<label_width$}  {:>value_width$}{comment}",
                row.label, value
            );
        }
        if let Some(reason) = &self.cumulative_reason {
            let _ = writeln!(out, "\n totals: {reason}");
        }
        if !self.warnings.is_empty() {
            let _ = writeln!(out, "\n warnings:");
            for warning in &self.warnings {
                let _ = writeln!(out, "   {warning}");
            }
        }
        if !self.unknown.is_empty() {
            let _ = writeln!(out, "\n n/a:");
            for entry in &self.unknown {
                let _ = writeln!(out, "   {}: {}", entry.field, entry.reason);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::{format_bytes, format_seconds};

    #[test]
    fn units_are_chosen_on_the_rounded_value() {
        assert_eq!(format_bytes(1023.0), "1023 B");
        assert_eq!(format_bytes(1024.0), "1.00 KiB");
        assert_eq!(format_bytes(1_048_575.0), "1.00 MiB");
        assert_eq!(format_bytes(1_048_000.0), "1023.44 KiB");
        assert_eq!(format_bytes(64.0 * 1024.0 * 1024.0), "64.00 MiB");
        assert_eq!(format_seconds(59.9), "59.900 s");
        assert_eq!(format_seconds(59.9996), "1 min 0.0 s");
        assert_eq!(format_seconds(119.97), "2 min 0.0 s");
        assert_eq!(format_seconds(125.44), "2 min 5.4 s");
        assert_eq!(format_seconds(3600.0), "60 min 0.0 s");
    }
}
