//! The run report: a self-contained HTML page (the run summary and charts over time), or the
//! charts alone as SVG or PNG, from a series of snapshots (`run`/`watch` NDJSON, or snapshots
//! handed over one by one).
//!
//! Memory stays bounded whatever the length of the series: each chart keeps at most
//! [`MAX_COLUMNS`] time columns with the minimum and maximum of every series in them (what
//! plotting tools do per pixel column), so a peak of one sample stays visible. When the series
//! outgrows the columns, their width doubles and neighbours merge.

mod parse;
mod render;

use std::collections::VecDeque;
use std::io::BufRead;
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};

use crate::snapshot::{GpuLimitEvent, ResourceLimitEventKind, ResourceMetricsSnapshot};
use crate::summary::{values, Baseline, RunEnd, RunSummary, SummaryBuilder};

use parse::{parse_jobs, stopped, Batch, ParseJob, Parsed};
pub use render::ChartFormat;

/// Time columns kept per chart (twice the chart's width in pixels, so a column is never wider
/// than a pixel once drawn).
pub const MAX_COLUMNS: usize = 2048;

/// The longest NDJSON line accepted (a snapshot with thousands of GPU processes or interfaces
/// stays far below it).
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// The plotted series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Series {
    Cores,
    Resident,
    CgroupMemory,
    DiskRead,
    DiskWrite,
    NetReceive,
    NetTransmit,
    GpuUtilization,
    GpuMemory,
    Processes,
}

const SERIES: usize = 10;

/// Limit events drawn as markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Marker {
    Throttling = 1,
    OomKill = 2,
    Pressure = 4,
    /// A GPU held its clocks down: power cap, thermal or hardware slowdown.
    GpuThrottling = 8,
    /// An XID error of a GPU.
    Xid = 16,
}

/// One time column: min and max of every series (NaN: no value), and the markers in it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Column {
    pub(crate) min: [f64; SERIES],
    pub(crate) max: [f64; SERIES],
    pub(crate) markers: u8,
    pub(crate) samples: u32,
}

impl Column {
    const EMPTY: Self = Self {
        min: [f64::NAN; SERIES],
        max: [f64::NAN; SERIES],
        markers: 0,
        samples: 0,
    };

    fn add(&mut self, series: Series, value: Option<f64>) {
        let Some(value) = value.filter(|v| v.is_finite()) else {
            return;
        };
        let i = series as usize;
        // f64::min/max ignore a NaN operand: the first value replaces the column's NaN.
        self.min[i] = self.min[i].min(value);
        self.max[i] = self.max[i].max(value);
    }

    fn merge(&mut self, other: &Self) {
        for i in 0..SERIES {
            self.min[i] = self.min[i].min(other.min[i]);
            self.max[i] = self.max[i].max(other.max[i]);
        }
        self.markers |= other.markers;
        self.samples += other.samples;
    }
}

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The input could not be read.
    #[error("cannot read the input: {0}")]
    Read(#[from] std::io::Error),
    /// A line is not a snapshot.
    #[error("line {line}: not a relay-metrics snapshot: {reason}")]
    BadLine {
        /// 1-based line number.
        line: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// The input has no snapshot.
    #[error("no snapshot in the input")]
    Empty,
    /// The input's last line is cut (no newline ends it and it is not a whole snapshot): a
    /// warning, not an error, when the lines before it are read.
    #[error("line {line}: cut ({bytes} bytes, no newline at the end of the input): left out")]
    Cut {
        /// 1-based line number.
        line: u64,
        /// Its length.
        bytes: usize,
    },
    /// The charts could not be drawn.
    #[error("cannot draw the charts: {0}")]
    Draw(String),
}

/// Accumulates snapshots into a report: the summary and the downsampled series.
#[derive(Debug, Clone)]
pub struct ReportBuilder {
    summary: SummaryBuilder,
    start: Option<DateTime<Utc>>,
    end_ms: f64,
    /// Column width in milliseconds.
    width_ms: f64,
    columns: Vec<Column>,
    previous_throttled: Option<f64>,
    previous_oom: Option<f64>,
    /// The last CPU and memory "some" stall totals (µs) and when they were read.
    previous_pressure: [Option<(f64, DateTime<Utc>)>; 2],
    /// Each GPU limit event's last count: event, device UUID, count.
    previous_gpu: Vec<(String, Arc<str>, u64)>,
    /// What was left out of the input, for the summary's warnings.
    warnings: Vec<String>,
}

/// PSI stall share above which a sample interval is marked as under pressure.
const PRESSURE_MARK_SHARE: f64 = 0.10;

impl Default for ReportBuilder {
    fn default() -> Self {
        Self::new(Baseline::FirstSample)
    }
}

impl ReportBuilder {
    /// A report whose summary's totals start at `baseline`, of processes that ran on this
    /// machine (a recording): CPU rates are bounded by this process's CPUs.
    pub fn new(baseline: Baseline) -> Self {
        Self::with_summary(SummaryBuilder::new(baseline))
    }

    /// A report of a stream recorded elsewhere (a file): CPU rates are bounded by the CPUs
    /// online that its collectors recorded.
    pub fn for_stream(baseline: Baseline) -> Self {
        Self::with_summary(SummaryBuilder::for_stream(baseline))
    }

    fn with_summary(summary: SummaryBuilder) -> Self {
        Self {
            summary,
            start: None,
            end_ms: 0.0,
            width_ms: 1.0,
            columns: Vec::with_capacity(MAX_COLUMNS),
            previous_throttled: None,
            previous_oom: None,
            previous_pressure: [None; 2],
            previous_gpu: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Snapshots observed so far.
    pub fn samples(&self) -> u64 {
        self.summary.samples()
    }

    /// Takes one snapshot into the summary and the charts.
    pub fn observe(&mut self, snapshot: &ResourceMetricsSnapshot) {
        self.summary.observe(snapshot);
        let start = *self.start.get_or_insert(snapshot.timestamp);
        let offset_ms =
            ((snapshot.timestamp - start).num_microseconds().unwrap_or(0) as f64 / 1000.0).max(0.0);
        self.end_ms = self.end_ms.max(offset_ms);
        let mut index = (offset_ms / self.width_ms) as usize;
        while index >= MAX_COLUMNS {
            self.halve();
            index = (offset_ms / self.width_ms) as usize;
        }
        if self.columns.len() <= index {
            self.columns.resize(index + 1, Column::EMPTY);
        }
        let mut markers = 0u8;
        let throttled = values::throttled_usec(snapshot);
        if let (Some(now), Some(before)) = (throttled, self.previous_throttled) {
            if now > before {
                markers |= Marker::Throttling as u8;
            }
        }
        self.previous_throttled = throttled.or(self.previous_throttled);
        let oom = oom_count(snapshot);
        if let (Some(now), Some(before)) = (oom, self.previous_oom) {
            if now > before {
                markers |= Marker::OomKill as u8;
            }
        }
        self.previous_oom = oom.or(self.previous_oom);
        // Each resource on its own: 6 % of CPU stall and 6 % of memory stall is no 10 %.
        let stalls = values::pressure_some_usec(snapshot);
        for (stall, previous) in stalls.into_iter().zip(&mut self.previous_pressure) {
            let Some(stall) = stall else { continue };
            if let Some((before, at)) = *previous {
                let elapsed_us = (snapshot.timestamp - at).num_microseconds().unwrap_or(0) as f64;
                if elapsed_us > 0.0 && (stall - before) / elapsed_us > PRESSURE_MARK_SHARE {
                    markers |= Marker::Pressure as u8;
                }
            }
            *previous = Some((stall, snapshot.timestamp));
        }
        if let Some(gpu) = &snapshot.extensions.gpu {
            markers |= self.gpu_markers(&gpu.limit_events);
        }
        let column = &mut self.columns[index];
        column.samples += 1;
        column.markers |= markers;
        // The rates the summary's totals and peak come from, over the same windows.
        let rates = self.summary.last_rates();
        column.add(Series::Cores, rates.cores);
        column.add(Series::Resident, values::resident_bytes(snapshot));
        column.add(Series::CgroupMemory, values::cgroup_memory_bytes(snapshot));
        column.add(Series::DiskRead, rates.read);
        column.add(Series::DiskWrite, rates.write);
        let (receive, transmit) = values::network_rates(snapshot);
        column.add(Series::NetReceive, receive);
        column.add(Series::NetTransmit, transmit);
        if let Some((utilization, memory)) = values::gpu(snapshot) {
            column.add(Series::GpuUtilization, utilization);
            column.add(Series::GpuMemory, memory);
        }
        column.add(Series::Processes, values::process_count(snapshot));
    }

    /// The GPU markers of a snapshot: a throttling or XID count of a device that grew since
    /// the previous snapshot. As in the summary, an event's first count is its baseline.
    fn gpu_markers(&mut self, events: &[GpuLimitEvent]) -> u8 {
        let mut markers = 0;
        for event in events {
            let marker = match &*event.event {
                "power_cap" | "thermal" | "hw_slowdown" => Marker::GpuThrottling,
                "xid" => Marker::Xid,
                _ => continue,
            };
            let previous = self
                .previous_gpu
                .iter_mut()
                .find(|(name, uuid, _)| *name == event.event && *uuid == event.uuid);
            match previous {
                Some((_, _, count)) => {
                    if event.count > *count {
                        markers |= marker as u8;
                    }
                    // A device that returns after being lost counts from zero again.
                    *count = event.count;
                }
                None => self.previous_gpu.push((
                    event.event.to_string(),
                    Arc::clone(&event.uuid),
                    event.count,
                )),
            }
        }
        markers
    }

    /// Doubles the column width: column `i` becomes the merge of `2i` and `2i + 1`.
    fn halve(&mut self) {
        let len = self.columns.len();
        for i in 0..len.div_ceil(2) {
            let mut merged = self.columns[2 * i];
            if let Some(next) = self.columns.get(2 * i + 1) {
                merged.merge(next);
            }
            self.columns[i] = merged;
        }
        self.columns.truncate(len.div_ceil(2));
        self.width_ms *= 2.0;
    }

    /// Reads snapshots from NDJSON (a `run` or `watch` stream): blank lines are skipped, a line
    /// longer than [`MAX_LINE_BYTES`] or one that is not a snapshot is an error with its number.
    ///
    /// Parsing is most of the work, so batches of lines are parsed on one thread per core while
    /// this thread reads the next ones; the snapshots are observed in their order. At most
    /// two batches per thread are in flight, so memory stays bounded.
    pub fn read_ndjson(&mut self, mut input: impl BufRead) -> Result<(), ReportError> {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let (jobs, job_queue) = mpsc::sync_channel::<ParseJob>(threads);
        let job_queue = Mutex::new(job_queue);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| parse_jobs(&job_queue));
            }
            // Owned here, so that any return closes the queue and the threads end before the
            // scope waits for them.
            let jobs = jobs;
            let mut in_flight = VecDeque::with_capacity(2 * threads);
            let mut next_line = 1;
            let unread = loop {
                let batch = match Batch::read(&mut input, &mut next_line) {
                    Ok(Some(batch)) => batch,
                    Ok(None) => break None,
                    Err(error) => break Some(error),
                };
                let (done, parsed) = mpsc::sync_channel(1);
                if jobs.send(ParseJob { batch, done }).is_err() {
                    return Err(stopped());
                }
                in_flight.push_back(parsed);
                if in_flight.len() == 2 * threads {
                    self.observe_batch(in_flight.pop_front())?;
                }
            };
            drop(jobs);
            // The lines before an unreadable one come first, with their own errors.
            while let Some(parsed) = in_flight.pop_front() {
                self.observe_batch(Some(parsed))?;
            }
            unread.map_or(Ok(()), Err)
        })
    }

    /// Observes a parsed batch's snapshots, then returns its error if it has one.
    fn observe_batch(&mut self, parsed: Option<Receiver<Parsed>>) -> Result<(), ReportError> {
        let (snapshots, error) = parsed
            .and_then(|parsed| parsed.recv().ok())
            .ok_or_else(stopped)?;
        for snapshot in &snapshots {
            self.observe(snapshot);
        }
        match error {
            Some(cut @ ReportError::Cut { .. }) => {
                self.warnings.push(cut.to_string());
                Ok(())
            }
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// The report: the summary (with what the caller knows of the end) and the charts' data.
    pub fn finish(&self, end: RunEnd) -> Result<Report, ReportError> {
        if self.samples() == 0 {
            return Err(ReportError::Empty);
        }
        let mut summary = self.summary.finish(end);
        summary.warnings.extend(self.warnings.iter().cloned());
        Ok(Report {
            summary,
            columns: self.columns.clone(),
            width_ms: self.width_ms,
            end_ms: self.end_ms,
        })
    }
}

fn oom_count(snapshot: &ResourceMetricsSnapshot) -> Option<f64> {
    let kernel = snapshot
        .extensions
        .kernel_events
        .oom_kills
        .map(|n| n as f64);
    let limits = snapshot.memory.as_ref().map(|memory| {
        memory
            .limit_events
            .iter()
            .filter(|e| e.event == ResourceLimitEventKind::Terminated)
            .filter_map(values::limit_count)
            .sum::<f64>()
    });
    match (kernel, limits) {
        (Some(kernel), Some(limits)) => Some(kernel.max(limits)),
        (kernel, limits) => kernel.or(limits),
    }
}

/// A finished report: render it with [`Report::to_html`], [`Report::to_svg`] or
/// [`Report::write_png`].
#[derive(Debug, Clone)]
pub struct Report {
    /// The run summary.
    pub summary: RunSummary,
    columns: Vec<Column>,
    width_ms: f64,
    end_ms: f64,
}

#[cfg(test)]
mod tests;
