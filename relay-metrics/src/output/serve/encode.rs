//! Encodings of a publication, each made on the first request that needs it: the snapshot's
//! JSON and Prometheus text, OpenMetrics text (from the Prometheus text) and gzip (compressed
//! OpenMetrics is converted from the Prometheus text segment by segment, `super::gzip`).
//!
//! `/metrics` ends with a few values made per request (the sample's age), so a compressed body
//! is the publication's part, compressed once, followed by the request's part compressed on its
//! own (`super::gzip`). A request costs a few hundred bytes of compression, not the whole body.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use bytes::Bytes;

use super::gzip::{Convert, GzipPrefix, Segments};
use super::Publication;
use crate::config::MetricNames;
use crate::output::budget::SeriesBudget;
use crate::output::prometheus;
use crate::snapshot::ResourceMetricsSnapshot;

/// What a publication is made of: outputs encoded already, or a snapshot whose outputs are
/// written on the first request for each.
#[derive(Debug)]
pub(super) enum Source {
    #[cfg(test)]
    Ready { json: Bytes, prometheus: Bytes },
    Snapshot {
        snapshot: Arc<ResourceMetricsSnapshot>,
        text: Arc<TextSettings>,
    },
}

/// How the agent writes its snapshots' Prometheus text, whether it is asked for, and what the
/// compression of the last body in each format left for the next.
#[derive(Debug)]
pub(crate) struct TextSettings {
    /// What requests asked for since the sampling thread last looked ([`Self::take_asked`]), as
    /// the bits of an [`Asked`].
    asked: AtomicU8,
    /// The last compressed body in each [`Format`], whose unchanged segments the next one copies.
    compressed: [Mutex<Segments>; 3],
    /// The naming, the series budget and the last text, whose unchanged cgroups' lines the
    /// next one copies.
    lines: Mutex<prometheus::CgroupLines>,
}

impl TextSettings {
    /// Text in `names`' naming, with the series `budget` keeps.
    pub(crate) fn new(names: MetricNames, budget: SeriesBudget) -> Self {
        Self {
            asked: AtomicU8::new(0),
            compressed: Default::default(),
            lines: Mutex::new(prometheus::CgroupLines::new(names, budget)),
        }
    }

    /// What requests asked for since the last call. The sampling thread encodes the same for
    /// the next publication itself ([`Publication::prepare`]): a scraper that came for the last
    /// snapshot comes for the next one too (at one scrape a period, every body is then ready
    /// when it is asked for), while a scraper coming every 15 periods costs two texts in 15,
    /// not 15.
    pub(super) fn take_asked(&self) -> Asked {
        Asked(self.asked.swap(0, Ordering::Relaxed))
    }

    fn ask(&self, what: u8) {
        self.asked.fetch_or(what, Ordering::Relaxed);
    }

    /// `snapshot`'s families, then the build info and the agent's own process series as of now;
    /// with the bytes it copied from the text written before it.
    fn write(&self, snapshot: &Arc<ResourceMetricsSnapshot>) -> WrittenText {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        let text = lines.write(snapshot, super::own::append);
        WrittenText {
            bytes: Bytes::from_owner(SharedText(text)),
            copies: lines.copies(),
        }
    }
}

/// A publication's Prometheus text and the bytes it copied from the text before it, which its
/// gzip segments need not compare with that text's.
#[derive(Debug)]
struct WrittenText {
    bytes: Bytes,
    copies: Option<Arc<prometheus::Copies>>,
}

/// A text served as [`Bytes`] while the next text copies from it.
struct SharedText(Arc<String>);

impl AsRef<[u8]> for SharedText {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// What requests asked a publication for: its text, and its compressed body in some formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Asked(u8);

/// [`Asked`]'s bit for the text; a compressed body in a format has bit `2 << format.index()`.
const ASKED_TEXT: u8 = 1;

impl Asked {
    pub(super) fn text(self) -> bool {
        self.0 & ASKED_TEXT != 0
    }

    /// The text formats of the compressed bodies asked for.
    pub(super) fn compressed(self) -> impl Iterator<Item = Format> {
        [Format::Prometheus, Format::OpenMetrics]
            .into_iter()
            .filter(move |format| self.0 & format.asked_compressed() != 0)
    }
}

/// The text formats a publication is served in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    /// Prometheus text exposition 0.0.4.
    Prometheus,
    /// OpenMetrics text 1.0.0.
    OpenMetrics,
    /// The snapshot's JSON.
    Json,
}

impl Format {
    /// Its [`Asked`] bit for a compressed body.
    fn asked_compressed(self) -> u8 {
        2 << self.index()
    }

    fn index(self) -> usize {
        match self {
            Self::Prometheus => 0,
            Self::OpenMetrics => 1,
            Self::Json => 2,
        }
    }
}

/// The encodings of one publication made on the first request for each.
#[derive(Debug, Default)]
pub(super) struct Derived {
    json: OnceLock<Bytes>,
    prometheus: OnceLock<WrittenText>,
    openmetrics: OnceLock<Bytes>,
    gzip: [OnceLock<Option<GzipPrefix>>; 3],
}

impl Publication {
    /// The publication's part of a body in `format`.
    pub(super) fn encoded(&self, format: Format) -> Bytes {
        match format {
            Format::Prometheus => self.prometheus(),
            Format::Json => self.json(),
            Format::OpenMetrics => self
                .derived
                .openmetrics
                .get_or_init(|| Bytes::from(to_openmetrics(&self.prometheus())))
                .clone(),
        }
    }

    /// The snapshot as JSON (written now if this is the first request for it).
    pub(crate) fn json(&self) -> Bytes {
        match &self.source {
            #[cfg(test)]
            Source::Ready { json, .. } => json.clone(),
            Source::Snapshot { snapshot, .. } => self
                .derived
                .json
                .get_or_init(|| {
                    let mut json = Vec::with_capacity(64 * 1024);
                    snapshot.write_json(&mut json);
                    Bytes::from(json)
                })
                .clone(),
        }
    }

    /// The compressed body in `format` if it was compressed already.
    #[cfg(test)]
    pub(super) fn derived_gzip(&self, format: Format) -> Option<&GzipPrefix> {
        self.derived.gzip[format.index()].get()?.as_ref()
    }

    /// The Prometheus text if it was written already.
    #[cfg(test)]
    pub(super) fn derived_prometheus(&self) -> Option<&Bytes> {
        self.derived.prometheus.get().map(|text| &text.bytes)
    }

    /// The snapshot in Prometheus text format 0.0.4, with the agent's own series (written now if
    /// this is the first request for it).
    pub(crate) fn prometheus(&self) -> Bytes {
        self.text(true)
    }

    /// Encodes what the requests of the last publication asked for (`asked`) before any
    /// request asks this one, not counted as asked: on the sampling thread, while the snapshot
    /// and the text just written are in its cache.
    pub(super) fn prepare(&self, asked: Asked) {
        if asked.text() {
            self.text(false);
        }
        for format in asked.compressed() {
            self.compressed(format, false);
        }
    }

    fn text(&self, asked: bool) -> Bytes {
        match &self.source {
            #[cfg(test)]
            Source::Ready { prometheus, .. } => prometheus.clone(),
            Source::Snapshot { snapshot, text } => {
                if asked {
                    text.ask(ASKED_TEXT);
                }
                self.derived
                    .prometheus
                    .get_or_init(|| text.write(snapshot))
                    .bytes
                    .clone()
            }
        }
    }

    /// The publication's part of a body in `format`, gzip-compressed and not yet finished
    /// (`None` if compression failed: then the body is sent uncompressed).
    pub(super) fn gzip(&self, format: Format) -> Option<&GzipPrefix> {
        self.compressed(format, true)
    }

    /// [`Self::gzip`]; `asked`: for a request (else for [`Self::prepare`]). The text formats are
    /// asked for again by the next scrape; the JSON, one segment compressed whole, is left to
    /// its requests, off the sampling thread.
    fn compressed(&self, format: Format, asked: bool) -> Option<&GzipPrefix> {
        if let (true, Source::Snapshot { text, .. }) = (asked, &self.source) {
            if format != Format::Json {
                text.ask(format.asked_compressed());
            }
        }
        self.derived.gzip[format.index()]
            .get_or_init(|| {
                // OpenMetrics is converted segment by segment from the Prometheus text, so an
                // unchanged segment is neither converted nor compressed again.
                let (body, convert): (Bytes, Option<Convert>) = match format {
                    Format::Prometheus => (self.text(asked), None),
                    Format::OpenMetrics => (self.text(asked), Some(to_openmetrics)),
                    Format::Json => (self.json(), None),
                };
                let copies = match format {
                    Format::Prometheus | Format::OpenMetrics => self.derived.prometheus.get(),
                    Format::Json => None,
                };
                let copies = copies.and_then(|text| text.copies.as_deref());
                match &self.source {
                    #[cfg(test)]
                    Source::Ready { .. } => {
                        GzipPrefix::new(&body, convert, None, &mut Segments::default())
                    }
                    Source::Snapshot { text, .. } => {
                        let last = &text.compressed[format.index()];
                        GzipPrefix::new(
                            &body,
                            convert,
                            copies,
                            &mut last.lock().unwrap_or_else(PoisonError::into_inner),
                        )
                    }
                }
            })
            .as_ref()
    }
}

/// OpenMetrics 1.0 text from Prometheus 0.0.4 text: a counter family is named without its
/// `_total` (its samples keep it; a counter whose name lacks it becomes `unknown`), `untyped`
/// becomes `unknown`, help text escapes double quotes, a `# UNIT` line (after its family's
/// `# TYPE`, as the Prometheus encoder writes it) is kept only where the name ends with its unit
/// (as OpenMetrics requires), other comments and blank lines go. The
/// closing `# EOF` is the caller's, after the per-request values.
pub(super) fn to_openmetrics(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len() + text.len() / 16);
    let mut help: Option<&[u8]> = None;
    // The last family announced: its name in the input and in the output.
    let mut family: (&[u8], &[u8]) = (b"", b"");
    let mut rest = text;
    while !rest.is_empty() {
        if rest[0] != b'#' {
            // Series lines are the same in both formats: a run of them up to the next comment
            // is copied whole (most of a node's text).
            let end = memchr::memmem::find(rest, b"\n#").map_or(rest.len(), |at| at + 1);
            copy_series(&rest[..end], &mut out);
            rest = &rest[end..];
            continue;
        }
        let end = memchr::memchr(b'\n', rest).map_or(rest.len(), |at| at + 1);
        let line = rest[..end].strip_suffix(b"\n").unwrap_or(&rest[..end]);
        rest = &rest[end..];
        if let Some(rest) = line.strip_prefix(b"# HELP ") {
            help = Some(rest);
        } else if let Some(rest) = line.strip_prefix(b"# UNIT ") {
            let (name, unit) = split_word(rest);
            let renamed = family.1;
            let suffixed = renamed.len() > unit.len()
                && renamed.ends_with(unit)
                && renamed[renamed.len() - unit.len() - 1] == b'_';
            if name == family.0 && suffixed {
                out.extend_from_slice(b"# UNIT ");
                out.extend_from_slice(renamed);
                out.push(b' ');
                out.extend_from_slice(unit);
                out.push(b'\n');
            }
        } else if let Some(rest) = line.strip_prefix(b"# TYPE ") {
            let (name, kind) = split_word(rest);
            let (renamed, kind): (&[u8], &[u8]) = match kind {
                b"counter" => match name.strip_suffix(b"_total") {
                    Some(renamed) => (renamed, b"counter"),
                    None => (name, b"unknown"),
                },
                b"untyped" => (name, b"unknown"),
                kind => (name, kind),
            };
            family = (name, renamed);
            if let Some(help) = help.take() {
                let (help_name, help_text) = split_word(help);
                if help_name == name {
                    out.extend_from_slice(b"# HELP ");
                    out.extend_from_slice(renamed);
                    out.push(b' ');
                    for &byte in help_text {
                        if byte == b'"' {
                            out.push(b'\\');
                        }
                        out.push(byte);
                    }
                    out.push(b'\n');
                }
            }
            out.extend_from_slice(b"# TYPE ");
            out.extend_from_slice(renamed);
            out.push(b' ');
            out.extend_from_slice(kind);
            out.push(b'\n');
        }
        // Other comments go.
    }
    out
}

/// Series lines as they are, each ended by a newline, blank lines left out.
fn copy_series(run: &[u8], out: &mut Vec<u8>) {
    let mut rest = run;
    loop {
        let start = rest.iter().position(|&b| b != b'\n').unwrap_or(rest.len());
        rest = &rest[start..];
        if rest.is_empty() {
            return;
        }
        let end = memchr::memmem::find(rest, b"\n\n").map_or(rest.len(), |at| at + 1);
        out.extend_from_slice(&rest[..end]);
        if !rest[..end].ends_with(b"\n") {
            out.push(b'\n');
        }
        rest = &rest[end..];
    }
}

/// The first word of `line` and the rest after one space.
fn split_word(line: &[u8]) -> (&[u8], &[u8]) {
    match line.iter().position(|&b| b == b' ') {
        Some(at) => (&line[..at], &line[at + 1..]),
        None => (line, b""),
    }
}
