//! `run`'s NDJSON stream, written in batches: at 1 kHz one `write` per line costs more than
//! the rest of the line's output path (each call to a file also updates its inode). Lines wait
//! in memory until [`BATCH_BYTES`] are pending, or until waiting for the next line would keep
//! the oldest one past [`BATCH_MAX_AGE`]; at periods of [`BATCH_MAX_AGE`] or more every line is
//! written at once, as is every line to a terminal. The caller writes what is pending when the
//! stream ends, whatever ends it.

use std::io::Write;
use std::time::{Duration, Instant};

/// Pending bytes that make a batch (about eight lines of a small process tree).
pub(super) const BATCH_BYTES: usize = 64 * 1024;

/// The longest a line waits before it is written, give or take one collect: a reader that
/// follows the stream (`report -`, `tail -f`) sees it this late at most.
pub(super) const BATCH_MAX_AGE: Duration = Duration::from_millis(100);

/// Lines waiting to be written to `out`.
pub(super) struct LineBatch<'o> {
    out: &'o mut dyn Write,
    pending: Vec<u8>,
    /// When the oldest pending line was added.
    oldest: Option<Instant>,
    /// How long until the next line comes (the sampling period); `None`: write every line.
    period: Option<Duration>,
}

impl<'o> LineBatch<'o> {
    /// Batches lines that come every `period`; `period: None` writes each line at once.
    pub(super) fn new(out: &'o mut dyn Write, period: Option<Duration>) -> Self {
        Self {
            out,
            // Reused for every batch; room for a batch and one more line, so that it does not
            // grow in steady state.
            pending: Vec::with_capacity(BATCH_BYTES + 32 * 1024),
            oldest: None,
            period,
        }
    }

    /// Adds the line that `fill` appends (without its newline), then writes what is pending if
    /// the batch is full or its oldest line cannot wait for the next one.
    pub(super) fn line(&mut self, fill: impl FnOnce(&mut Vec<u8>)) -> std::io::Result<()> {
        let now = Instant::now();
        fill(&mut self.pending);
        self.pending.push(b'\n');
        let oldest = *self.oldest.get_or_insert(now);
        let due = match self.period {
            None => true,
            Some(period) => {
                self.pending.len() >= BATCH_BYTES
                    || now.saturating_duration_since(oldest) + period >= BATCH_MAX_AGE
            }
        };
        if due {
            self.flush()
        } else {
            Ok(())
        }
    }

    /// Writes every pending line.
    pub(super) fn flush(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            // Cleared even when the write fails: the stream is broken, nothing is retried.
            let result = self.out.write_all(&self.pending);
            self.pending.clear();
            self.oldest = None;
            result?;
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Writes {
        bytes: Vec<u8>,
        calls: usize,
    }

    impl Write for Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.calls += 1;
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn line_of(len: usize) -> impl FnOnce(&mut Vec<u8>) {
        move |out: &mut Vec<u8>| out.extend(std::iter::repeat_n(b'x', len))
    }

    #[test]
    fn small_lines_at_a_short_period_wait_until_a_batch_is_full() {
        let mut out = Writes::default();
        let mut batch = LineBatch::new(&mut out, Some(Duration::from_millis(1)));
        let line = 999; // 1,000 bytes with the newline
        for _ in 0..BATCH_BYTES / 1000 {
            batch.line(line_of(line)).unwrap();
        }
        drop(batch);
        assert_eq!(out.calls, 0, "written before the batch was full");
        let mut batch = LineBatch::new(&mut out, Some(Duration::from_millis(1)));
        for _ in 0..=BATCH_BYTES / 1000 {
            batch.line(line_of(line)).unwrap();
        }
        assert_eq!(out.calls, 1);
        assert_eq!(out.bytes.len(), (BATCH_BYTES / 1000 + 1) * 1000);
        assert!(out.bytes.ends_with(b"x\n"));
    }

    #[test]
    fn a_line_never_waits_past_the_age_bound() {
        let mut out = Writes::default();
        let mut batch = LineBatch::new(&mut out, Some(BATCH_MAX_AGE / 10));
        batch.line(line_of(10)).unwrap();
        // The oldest line is new and the next one a tenth of the bound away: it waits.
        batch.line(line_of(10)).unwrap();
        assert_eq!(batch.pending.len(), 22);
        std::thread::sleep(BATCH_MAX_AGE);
        // Now the oldest is as old as the bound allows: written with this one.
        batch.line(line_of(10)).unwrap();
        drop(batch);
        assert_eq!(out.calls, 1);
        assert_eq!(out.bytes.len(), 33);
    }

    #[test]
    fn long_periods_and_terminals_write_every_line() {
        let mut out = Writes::default();
        for period in [Some(BATCH_MAX_AGE), Some(Duration::from_secs(1)), None] {
            let mut batch = LineBatch::new(&mut out, period);
            batch.line(line_of(5)).unwrap();
            batch.line(line_of(5)).unwrap();
        }
        assert_eq!(out.calls, 6);
    }

    #[test]
    fn flush_writes_what_is_pending_once() {
        let mut out = Writes::default();
        let mut batch = LineBatch::new(&mut out, Some(Duration::from_millis(1)));
        batch.line(line_of(3)).unwrap();
        batch.line(line_of(3)).unwrap();
        batch.flush().unwrap();
        batch.flush().unwrap();
        drop(batch);
        assert_eq!(out.bytes, b"xxx\nxxx\n");
        assert_eq!(out.calls, 1);
    }

    #[test]
    fn a_failed_write_is_reported_and_not_retried() {
        let mut full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut batch = LineBatch::new(&mut full, Some(Duration::from_millis(1)));
        batch.line(line_of(3)).unwrap();
        assert!(batch.flush().is_err());
        assert!(batch.pending.is_empty());
    }
}
