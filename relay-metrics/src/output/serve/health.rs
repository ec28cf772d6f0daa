//! Liveness: whether the sampler still publishes, and the agent's own series that change per
//! request (the latest sample's age, the exporter's failures), appended to `/metrics`.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::Publication;
use crate::output::otlp::ExportFailures;

/// A snapshot older than this many periods means the sampler is stuck.
pub(super) const STALE_PERIODS: u32 = 3;

/// What `/healthz` and the per-request series need to know.
#[derive(Debug)]
pub(super) struct Liveness {
    /// The sampling period.
    pub period: Duration,
    /// When the agent started (the age of "no snapshot yet").
    pub started: Instant,
    /// The exporter's failure count, when exporting.
    pub export: Option<ExportFailures>,
}

impl Liveness {
    /// `Ok` with `ok`, or `Err` with why the agent is not live.
    pub(super) fn check(&self, latest: Option<&Publication>, now: Instant) -> Result<(), String> {
        let limit = self.period * STALE_PERIODS;
        match latest {
            Some(publication) => {
                let age = now.saturating_duration_since(publication.taken);
                if age > limit {
                    return Err(format!(
                        "stale: the latest snapshot is {:.1} s old, more than {STALE_PERIODS} \
                         sampling periods ({:.1} s); the sampler is stuck\n",
                        age.as_secs_f64(),
                        limit.as_secs_f64()
                    ));
                }
                Ok(())
            }
            None => Err(format!(
                "no snapshot yet ({:.1} s after start)\n",
                now.saturating_duration_since(self.started).as_secs_f64()
            )),
        }
    }

    /// The per-request series, appended after the publication's: the sample's age and, when
    /// exporting, the exporter's failures; in OpenMetrics, also the closing `# EOF`.
    pub(super) fn tail(
        &self,
        publication: &Publication,
        now: Instant,
        openmetrics: bool,
    ) -> String {
        let mut out = String::with_capacity(512);
        let scope = publication.scope;
        let age = now
            .saturating_duration_since(publication.taken)
            .as_secs_f64();
        let _ = writeln!(
            out,
            "# HELP relay_metrics_sample_age_seconds Time since the latest snapshot was taken, \
             when this response was made."
        );
        let _ = writeln!(out, "# TYPE relay_metrics_sample_age_seconds gauge");
        if openmetrics {
            let _ = writeln!(out, "# UNIT relay_metrics_sample_age_seconds seconds");
        }
        let _ = writeln!(
            out,
            "relay_metrics_sample_age_seconds{{scope=\"{scope}\"}} {age}"
        );
        if let Some(export) = &self.export {
            let family = if openmetrics {
                "relay_metrics_otlp_export_failures"
            } else {
                "relay_metrics_otlp_export_failures_total"
            };
            let _ = writeln!(
                out,
                "# HELP {family} OTLP exports that failed since the agent started."
            );
            let _ = writeln!(out, "# TYPE {family} counter");
            let _ = writeln!(
                out,
                "relay_metrics_otlp_export_failures_total{{scope=\"{scope}\"}} {}",
                export.get()
            );
        }
        if openmetrics {
            out.push_str("# EOF\n");
        }
        out
    }
}
