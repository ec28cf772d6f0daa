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

/// A failure that may repeat many times in a row (`accept` out of descriptors): logged at most
/// once a minute, with the number of failures not logged since.
#[derive(Debug)]
pub(super) struct Burst {
    what: &'static str,
    logged: Option<std::time::Instant>,
    unlogged: u64,
}

/// Shortest time between two lines about the same kind of failure.
const BURST_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

impl Burst {
    /// Failures of `what` (logged with their error).
    pub(super) fn new(what: &'static str) -> Self {
        Self {
            what,
            logged: None,
            unlogged: 0,
        }
    }

    /// One failure; `making_room` says the server closes idle connections to recover.
    pub(super) fn failed(&mut self, error: &dyn Display, making_room: bool) {
        if self
            .logged
            .is_some_and(|logged| logged.elapsed() < BURST_LOG_INTERVAL)
        {
            self.unlogged += 1;
            return;
        }
        let remedy = if making_room {
            " (closing the longest idle connections to make room)"
        } else {
            ""
        };
        tracing::warn!(
            more_since_last_line = self.unlogged,
            "{}: {error}{remedy}",
            self.what
        );
        self.logged = Some(std::time::Instant::now());
        self.unlogged = 0;
    }
}
