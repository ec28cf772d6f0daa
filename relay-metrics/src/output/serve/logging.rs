//! The agent's logs: `tracing` events on stderr, as text or JSON lines, filtered by `RUST_LOG`
//! (default `info`), and repeated failures reported once per burst.

use std::fmt::Display;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One human-readable line per event.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields.message`, other fields, `target`).
    Json,
}

/// Installs the global subscriber: stderr, `format`, the `RUST_LOG` filter (`info` when unset
/// or invalid). A second call changes nothing. A closed stderr drops the lines.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        // Its report of a failed write goes through `eprintln!`, which panics on a closed
        // stderr: an agent whose stderr went away keeps running without its lines.
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// A failure that may repeat many times in a row (`accept` out of descriptors): the first one
/// of a burst is logged, the rest are counted and reported with the recovery.
#[derive(Debug)]
pub(super) struct Burst {
    what: &'static str,
    recovered: &'static str,
    failures: u64,
}

impl Burst {
    /// `what` fails (logged with the error); `recovered` is logged when it works again.
    pub(super) fn new(what: &'static str, recovered: &'static str) -> Self {
        Self {
            what,
            recovered,
            failures: 0,
        }
    }

    /// One failure; logged when it starts a burst. `making_room` says the server closes idle
    /// connections to recover.
    pub(super) fn failed(&mut self, error: &dyn Display, making_room: bool) {
        if self.failures == 0 {
            if making_room {
                tracing::warn!(
                    "{}: {error} (closing the longest idle connections to make room)",
                    self.what
                );
            } else {
                tracing::warn!("{}: {error}", self.what);
            }
        }
        self.failures += 1;
    }

    /// The operation succeeded: ends a burst, logging how many failures it had.
    pub(super) fn ended(&mut self) {
        if self.failures > 0 {
            tracing::info!(failures = self.failures, "{}", self.recovered);
            self.failures = 0;
        }
    }
}
