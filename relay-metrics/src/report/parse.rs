//! Reading NDJSON for the report: batches of lines parsed on one thread per core, each line into
//! just the fields the report reads ([`Line`]), every other key skipped unparsed.
//!
//! A snapshot line is ~8 KB, mostly values the report never reads (per-interface traffic, the
//! cgroups' raw counters, coverage, GPU device values, reasons); building them all was most of
//! the time of a long report. [`Line`] becomes a [`ResourceMetricsSnapshot`] holding only those
//! fields, so the summary and the charts read it as they read a full one.

use std::fmt;
use std::io::{BufRead, Read};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

use chrono::{DateTime, Utc};
use serde::de::{Deserializer, Visitor};
use serde::Deserialize;

use super::{ReportError, MAX_LINE_BYTES};
use crate::snapshot::{
    AcceleratorDeviceMetrics, CollectorInfo, CpuMetrics, Cumulative, CumulativeMethod, DiskMetrics,
    Extensions, GpuExtension, GpuLimitEvent, GpuMetrics, KernelEvents, MeasurementScope,
    MemoryMetrics, NetworkMetrics, NetworkTrafficMetrics, OomVictim, PreciseCpu, ProcessMetrics,
    ResourceLimitEventCount, ResourceLimitEventKind, ResourceLimitResource,
    ResourceMetricsSnapshot, SamplerInfo,
};
use crate::units::{Measurement, MeasurementUnit, MeasurementValue};

/// What the report's summary (`SummaryBuilder::observe`) and charts (`ReportBuilder::observe`)
/// read of a snapshot line. A field either of them starts to read must be added here: the
/// tests compare reports of the same series read through this and through full snapshots.
#[derive(Deserialize)]
struct Line {
    timestamp: DateTime<Utc>,
    measurement_scope: MeasurementScope,
    cpu: Option<Cpu>,
    memory: Option<Memory>,
    process: Option<Process>,
    disk: Option<Disk>,
    gpu: Option<Gpu>,
    network: Option<Network>,
    extensions: Ext,
}

/// `{"value": …, "unit": "…"}`, read without the buffering of [`MeasurementValue`]'s untagged
/// enum (a number is an integer when serde_json sees a `u64`, else a decimal, as there).
#[derive(Deserialize)]
struct Value {
    value: Number,
    unit: MeasurementUnit,
}

struct Number(MeasurementValue);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NumberVisitor;
        impl Visitor<'_> for NumberVisitor {
            type Value = Number;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }

            fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<Number, E> {
                Ok(Number(MeasurementValue::Integer(value)))
            }

            fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<Number, E> {
                Ok(Number(MeasurementValue::Decimal(value as f64)))
            }

            fn visit_f64<E: serde::de::Error>(self, value: f64) -> Result<Number, E> {
                Ok(Number(MeasurementValue::Decimal(value)))
            }
        }
        deserializer.deserialize_any(NumberVisitor)
    }
}

fn measurement(value: Option<Value>) -> Option<Measurement> {
    value.map(|v| Measurement {
        value: v.value.0,
        unit: v.unit,
    })
}

#[derive(Deserialize)]
struct LimitEvent {
    resource: ResourceLimitResource,
    event: ResourceLimitEventKind,
    count: Option<Value>,
}

fn limit_events(events: Vec<LimitEvent>) -> Vec<ResourceLimitEventCount> {
    events
        .into_iter()
        .map(|e| ResourceLimitEventCount {
            resource: e.resource,
            event: e.event,
            count: measurement(e.count),
        })
        .collect()
}

#[derive(Deserialize)]
struct Cpu {
    user_time: Option<Value>,
    system_time: Option<Value>,
    consumption_rate: Option<Value>,
    throttled_time: Option<Value>,
    #[serde(default)]
    effective_limit: Option<Value>,
    some_pressure_stall_time: Option<Value>,
    limit_events: Vec<LimitEvent>,
}

#[derive(Deserialize)]
struct Memory {
    resident: Option<Value>,
    peak_resident: Option<Value>,
    environment_accounted: Option<Value>,
    some_pressure_stall_time: Option<Value>,
    limit_events: Vec<LimitEvent>,
}

#[derive(Deserialize)]
struct Process {
    active_count: Option<Value>,
    limit_events: Vec<LimitEvent>,
}

#[derive(Deserialize)]
struct Disk {
    read_data: Option<Value>,
    write_data: Option<Value>,
    read_throughput: Option<Value>,
    write_throughput: Option<Value>,
}

#[derive(Deserialize)]
struct Gpu {
    device_metrics: Option<Vec<GpuDevice>>,
}

#[derive(Deserialize)]
struct GpuDevice {
    memory_used: Option<Value>,
    compute_utilization: Option<Value>,
}

#[derive(Deserialize)]
struct Network {
    system: Traffic,
}

#[derive(Deserialize)]
struct Traffic {
    receive_throughput: Option<Value>,
    transmit_throughput: Option<Value>,
}

#[derive(Deserialize)]
struct Ext {
    #[serde(default)]
    collector: Option<Collector>,
    precise_cpu: Option<PreciseCpu>,
    kernel_events: Kernel,
    sampler: Option<SamplerInfo>,
    #[serde(default)]
    cumulative: Option<Totals>,
    #[serde(default)]
    gpu: Option<GpuEvents>,
}

#[derive(Deserialize)]
struct Collector {
    /// The bound of the stream's CPU rates (absent in older streams).
    #[serde(default)]
    online_cpus: Option<u32>,
}

#[derive(Deserialize)]
struct Kernel {
    reason: Option<Arc<str>>,
    processes_created: Option<u64>,
    oom_kills: Option<u64>,
    recent_oom_victims: Vec<OomVictim>,
}

#[derive(Deserialize)]
struct Totals {
    method: CumulativeMethod,
    reason: Option<Arc<str>>,
    cpu_user_ns: Option<u64>,
    cpu_system_ns: Option<u64>,
    storage_read_bytes: Option<u64>,
    storage_write_bytes: Option<u64>,
    processes_created: Option<u64>,
    memory_peak_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct GpuEvents {
    limit_events: Vec<GpuLimitEvent>,
}

/// `$ty { field: convert(from.field), …, ..$ty::default() }`: a section with the fields the
/// report reads, each converted from its narrow form.
macro_rules! fill {
    ($from:ident => $ty:ident { $($($field:ident),+ by $convert:path;)+ }) => {
        $ty {
            $($($field: $convert($from.$field),)+)+
            ..$ty::default()
        }
    };
}

impl From<Line> for ResourceMetricsSnapshot {
    fn from(line: Line) -> Self {
        Self {
            timestamp: line.timestamp,
            measurement_scope: line.measurement_scope,
            cpu: line.cpu.map(|c| {
                fill!(c => CpuMetrics {
                    user_time, system_time, consumption_rate, throttled_time, effective_limit,
                    some_pressure_stall_time by measurement;
                    limit_events by limit_events;
                })
            }),
            memory: line.memory.map(|m| {
                fill!(m => MemoryMetrics {
                    resident, peak_resident, environment_accounted,
                    some_pressure_stall_time by measurement;
                    limit_events by limit_events;
                })
            }),
            process: line.process.map(|p| {
                fill!(p => ProcessMetrics {
                    active_count by measurement;
                    limit_events by limit_events;
                })
            }),
            disk: line.disk.map(|d| {
                fill!(d => DiskMetrics {
                    read_data, write_data, read_throughput, write_throughput by measurement;
                })
            }),
            gpu: line.gpu.map(|g| GpuMetrics {
                device_metrics: g.device_metrics.map(gpu_devices),
                process_metrics: None,
            }),
            network: line.network.map(|n| {
                let traffic = n.system;
                NetworkMetrics {
                    system: fill!(traffic => NetworkTrafficMetrics {
                        receive_throughput, transmit_throughput by measurement;
                    }),
                    ..NetworkMetrics::default()
                }
            }),
            extensions: extensions(line.extensions),
            ..Self::default()
        }
    }
}

/// The devices' accelerator measurements the report reads.
fn gpu_devices(devices: Vec<GpuDevice>) -> Vec<AcceleratorDeviceMetrics> {
    let device = |d: GpuDevice| {
        fill!(d => AcceleratorDeviceMetrics {
            memory_used, compute_utilization by measurement;
        })
    };
    devices.into_iter().map(device).collect()
}

/// The extensions the report reads.
fn extensions(ext: Ext) -> Extensions {
    use std::convert::identity as same;
    let kernel = ext.kernel_events;
    Extensions {
        kernel_events: fill!(kernel => KernelEvents {
            reason, processes_created, oom_kills, recent_oom_victims by same;
        }),
        cumulative: ext.cumulative.map(|t| {
            fill!(t => Cumulative {
                method, reason, cpu_user_ns, cpu_system_ns, storage_read_bytes,
                storage_write_bytes, processes_created, memory_peak_bytes by same;
            })
        }),
        gpu: ext.gpu.map(|g| GpuExtension {
            devices: Vec::new(),
            limit_events: g.limit_events,
        }),
        collector: CollectorInfo {
            online_cpus: ext.collector.and_then(|c| c.online_cpus),
            ..CollectorInfo::default()
        },
        precise_cpu: ext.precise_cpu,
        sampler: ext.sampler,
        ..Extensions::default()
    }
}

/// One line as the report reads it.
pub(super) fn parse_line(text: &[u8]) -> Result<ResourceMetricsSnapshot, serde_json::Error> {
    serde_json::from_slice::<Line>(text).map(Into::into)
}

/// The deepest nesting a line may have (a snapshot nests 6 levels). serde_json limits the
/// depth of what it builds, but skips an unread key's value at any depth: a line of 16 MiB of
/// brackets under an unknown key took 0.25 s to refuse.
pub(super) const MAX_DEPTH: usize = 64;

/// Whether `text` nests arrays and objects deeper than [`MAX_DEPTH`] (brackets in strings do
/// not count); stops at the first level too deep.
pub(super) fn too_deep(text: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &byte in text {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// Lines per parsing batch: large enough that a hand-over costs little against the parsing.
const BATCH_LINES: usize = 256;

/// A batch ends early past this size, so that batches in flight stay bounded in memory
/// (a few times this per thread, plus one line of at most [`MAX_LINE_BYTES`]).
const BATCH_BYTES: usize = 4 << 20;

/// Consecutive non-blank NDJSON lines, with the number of each.
pub(super) struct Batch {
    text: Vec<u8>,
    /// Each line's end in `text` and its number in the input.
    lines: Vec<(usize, u64)>,
    /// The number of the input's last line when no newline ends it (the input was cut, or
    /// its writer is still writing it).
    unterminated: Option<u64>,
}

impl Batch {
    /// Reads up to [`BATCH_LINES`] non-blank lines, or [`BATCH_BYTES`] (`None` at the end of
    /// the input).
    pub(super) fn read(
        input: &mut impl BufRead,
        next_line: &mut u64,
    ) -> Result<Option<Self>, ReportError> {
        let mut batch = Self {
            text: Vec::with_capacity(BATCH_LINES * 8 * 1024),
            lines: Vec::with_capacity(BATCH_LINES),
            unterminated: None,
        };
        while batch.lines.len() < BATCH_LINES && batch.text.len() < BATCH_BYTES {
            let start = batch.text.len();
            let number = *next_line;
            *next_line += 1;
            let read = Read::take(input.by_ref(), MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut batch.text)?;
            if read == 0 {
                break;
            }
            if read > MAX_LINE_BYTES {
                return Err(ReportError::BadLine {
                    line: number,
                    reason: format!("longer than {} MiB", MAX_LINE_BYTES >> 20),
                });
            }
            if batch.text[start..].trim_ascii().is_empty() {
                batch.text.truncate(start);
                continue;
            }
            if batch.text.last() != Some(&b'\n') {
                batch.unterminated = Some(number);
            }
            batch.lines.push((batch.text.len(), number));
        }
        Ok((!batch.lines.is_empty()).then_some(batch))
    }

    /// The snapshots up to the first line that is not one, and that line's error.
    fn parse(&self) -> Parsed {
        let mut snapshots = Vec::with_capacity(self.lines.len());
        let mut start = 0;
        for &(end, number) in &self.lines {
            let text = self.text[start..end].trim_ascii();
            if too_deep(text) {
                let error = ReportError::BadLine {
                    line: number,
                    reason: format!("nested deeper than {MAX_DEPTH} levels"),
                };
                return (snapshots, Some(error));
            }
            match parse_line(text) {
                Ok(snapshot) => snapshots.push(snapshot),
                // A cut last line is left out (with a warning); a bad line elsewhere is an
                // error.
                Err(error) if error.is_eof() && self.unterminated == Some(number) => {
                    let cut = ReportError::Cut {
                        line: number,
                        bytes: end - start,
                    };
                    return (snapshots, Some(cut));
                }
                Err(error) => {
                    let error = ReportError::BadLine {
                        line: number,
                        reason: error.to_string(),
                    };
                    return (snapshots, Some(error));
                }
            }
            start = end;
        }
        (snapshots, None)
    }
}

/// A parsed batch: its snapshots up to the first bad line, and that line's error.
pub(super) type Parsed = (Vec<ResourceMetricsSnapshot>, Option<ReportError>);

/// A batch to parse and where its snapshots go.
pub(super) struct ParseJob {
    pub(super) batch: Batch,
    pub(super) done: SyncSender<Parsed>,
}

/// A parsing thread ended without its answer (it panicked).
pub(super) fn stopped() -> ReportError {
    ReportError::Read(std::io::Error::other("a parsing thread stopped"))
}

/// A parsing thread: parses batches until the queue closes.
pub(super) fn parse_jobs(queue: &Mutex<Receiver<ParseJob>>) {
    loop {
        let job = queue.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(ParseJob { batch, done }) = job else {
            return;
        };
        // The reader has stopped waiting after an error: nothing to hand over then.
        let _ = done.send(batch.parse());
    }
}
