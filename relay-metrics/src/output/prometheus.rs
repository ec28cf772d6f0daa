//! Prometheus text exposition (format 0.0.4) of a snapshot: the families of
//! [`super::metrics`], each series labelled with the snapshot's `scope`, each family with a
//! `# UNIT` line where it has a unit (a comment to Prometheus 0.0.4; kept in OpenMetrics).

use std::fmt::Write;
use std::ops::Range;
use std::sync::Arc;

use super::budget::{CategoriesOff, SeriesBudget};
use super::metrics::{self, Family, Histogram, Kind, Label, Number, Sink, Unit};
use crate::config::MetricNames;
use crate::snapshot::ResourceMetricsSnapshot;

/// Prometheus's content type for this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Writes the exposition: HELP, TYPE and UNIT (where the family has a unit) per family, then
/// one line per series.
struct Text<'o> {
    out: &'o mut String,
    /// Histogram bucket bounds as formatted last (`f64` bits and text), by bucket index.
    bounds: Vec<(u64, String)>,
    /// The family announced last and its metric name as written: a family's series follow its
    /// announcement, and a node's text has thousands of series per family.
    announced: Option<(FamilyKey, String)>,
    /// A series' labels as written, kept for its capacity.
    labels: String,
    /// Each measured cgroup's labels as written, by its index in the walk's targets, once
    /// written (see [`Sink::cgroup_point`]): a node's cgroup has ~40 series, all with its labels.
    cgroup_labels: Vec<Option<String>>,
    /// The last text's lines of measured cgroups, for those whose report did not change.
    reuse: Option<Reuse<'o>>,
}

/// Where each measured cgroup's lines of each family are in a text: per family, in the order
/// the walk reached them, a range per cgroup (by its index in the walk's targets; empty: none).
#[derive(Debug, Default)]
struct Blocks {
    families: Vec<(&'static str, Vec<Range<usize>>)>,
}

impl Blocks {
    /// The family named `name` (there are some 40: a scan costs less than a hash).
    fn find(&self, name: &str) -> Option<usize> {
        self.families.iter().position(|(known, _)| *known == name)
    }

    fn get(&self, family: usize, cgroup: usize) -> Option<Range<usize>> {
        let range = self.families.get(family)?.1.get(cgroup)?;
        (!range.is_empty()).then(|| range.clone())
    }

    fn insert(&mut self, family: usize, cgroup: usize, range: Range<usize>) {
        let Some((_, ranges)) = self.families.get_mut(family) else {
            return;
        };
        if ranges.len() <= cgroup {
            ranges.resize(cgroup + 1, 0..0);
        }
        ranges[cgroup] = range;
    }
}

/// What the text being written copies from the last one, and what it records for the next.
struct Reuse<'o> {
    last: Option<&'o LastText>,
    /// For each measured cgroup of this walk, the index in the last text's targets of a report
    /// equal to its own: its lines (labels and values) are then those the last text has.
    equal: Vec<Option<usize>>,
    /// This text's blocks.
    blocks: Blocks,
    /// The family whose cgroups' lines are being written: its name, its place in `blocks` and
    /// in the last text's.
    family: Option<(&'static str, usize, Option<usize>)>,
    /// The block being written: its cgroup and where it starts (its family is `family`).
    open: Option<(usize, usize)>,
    /// Blocks copied from the last text.
    copied: usize,
    /// Where the copied bytes are, in this text and in the last.
    runs: Vec<CopiedRun>,
}

impl Reuse<'_> {
    /// Takes `name` as the family being written: its place here and in the last text.
    fn enter(&mut self, name: &'static str) -> (usize, Option<usize>) {
        match self.family {
            Some((known, here, there)) if known == name => (here, there),
            _ => {
                let here = self.blocks.find(name).unwrap_or_else(|| {
                    self.blocks.families.push((name, Vec::new()));
                    self.blocks.families.len() - 1
                });
                let there = self.last.and_then(|last| last.blocks.find(name));
                self.family = Some((name, here, there));
                (here, there)
            }
        }
    }
}

/// The last text written by a [`CgroupLines`], with what it was written from.
#[derive(Debug)]
struct LastText {
    snapshot: Arc<ResourceMetricsSnapshot>,
    off: CategoriesOff,
    body: Arc<String>,
    blocks: Blocks,
    /// Blocks it copied from the text before it.
    copied: usize,
    /// Its number and the bytes it copied from the text before it.
    copies: Arc<Copies>,
}

/// The bytes a text copied from the text written before it by the same [`CgroupLines`]: a
/// reader that compares the two texts (the gzip segments) need not compare these. Texts are
/// numbered in the order they were written.
// Read by the agent's gzip only (`output/serve/gzip.rs`).
#[cfg_attr(not(feature = "agent"), allow(dead_code))]
#[derive(Debug, Default)]
pub(crate) struct Copies {
    /// The text's number.
    pub(crate) text: u64,
    /// The number of the text its bytes were copied from (`text - 1`).
    pub(crate) source: u64,
    /// In the order of `at`, not overlapping.
    pub(crate) runs: Vec<CopiedRun>,
}

/// `len` bytes at `at` in a text, copied from `from` in the text before it.
// Read by the agent's gzip only (`output/serve/gzip.rs`).
#[cfg_attr(not(feature = "agent"), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CopiedRun {
    pub(crate) at: usize,
    pub(crate) from: usize,
    pub(crate) len: usize,
}

// Read by the agent's gzip only (`output/serve/gzip.rs`).
#[cfg_attr(not(feature = "agent"), allow(dead_code))]
impl Copies {
    /// The runs that overlap `range` of the text.
    pub(crate) fn overlapping(&self, range: Range<usize>) -> impl Iterator<Item = &CopiedRun> {
        let first = self
            .runs
            .partition_point(|run| run.at + run.len <= range.start);
        let runs = self.runs[first..].iter();
        runs.take_while(move |run| run.at < range.end)
    }
}

/// Adds a run after the last of `runs`, joined to it where both its places continue the last's.
fn push_run(runs: &mut Vec<CopiedRun>, run: CopiedRun) {
    match runs.last_mut() {
        Some(last) if last.at + last.len == run.at && last.from + last.len == run.from => {
            last.len += run.len;
        }
        _ => runs.push(run),
    }
}

/// Writes texts one after another, each copying from the last the lines of the measured
/// cgroups whose reports are equal to those the last was written from (family by family: a
/// node's cgroups are mostly idle, and an idle cgroup's ~40 lines do not change between
/// snapshots). Every other line is written as [`encode_within`] writes it, and so is the text.
/// Only the `relay_metrics` and `cadvisor` namings copy (`otel` renames labels per series);
/// cAdvisor's `container_last_seen`, the snapshot's time, is written every time. The naming
/// and the budget are fixed when it is made, so that every text it copies from was written
/// with them.
#[derive(Debug)]
pub struct CgroupLines {
    names: MetricNames,
    budget: SeriesBudget,
    /// Texts written so far: the last one's number.
    written: u64,
    last: Option<LastText>,
    /// The text before the last, whose buffer the next text is written into once nothing else
    /// holds it: a node's text is megabytes, and a fresh buffer costs a page fault for each of
    /// its pages.
    spare: Option<Arc<String>>,
}

impl CgroupLines {
    /// Texts in `names`' naming, of the series `budget` keeps.
    pub fn new(names: MetricNames, budget: SeriesBudget) -> Self {
        Self {
            names,
            budget,
            written: 0,
            last: None,
            spare: None,
        }
    }

    /// The text of `snapshot` (as [`encode_within`] writes it), followed by what `tail`
    /// appends.
    pub fn write(
        &mut self,
        snapshot: &Arc<ResourceMetricsSnapshot>,
        tail: impl FnOnce(&mut String),
    ) -> Arc<String> {
        let off = CategoriesOff::of(snapshot);
        let last = self.last.as_ref().filter(|last| last.off == off);
        let mut out = self
            .spare
            .take()
            .and_then(|spare| Arc::try_unwrap(spare).ok())
            .unwrap_or_default();
        out.clear();
        // The next text is about as long as the last one.
        out.reserve(last.map_or(16 * 1024, |last| last.body.len() + 1024));
        let reuse = Reuse {
            last,
            equal: last.map_or_else(Vec::new, |last| equal_reports(&last.snapshot, snapshot)),
            blocks: Blocks::default(),
            family: None,
            open: None,
            copied: 0,
            runs: Vec::new(),
        };
        let (blocks, copied, runs) =
            write_text(snapshot, self.names, &self.budget, &mut out, Some(reuse))
                .map(|reuse| (reuse.blocks, reuse.copied, reuse.runs))
                .unwrap_or_default();
        tail(&mut out);
        let body = Arc::new(out);
        self.written += 1;
        let copies = Copies {
            text: self.written,
            source: self.written - 1,
            runs,
        };
        let last = self.last.replace(LastText {
            snapshot: Arc::clone(snapshot),
            off,
            body: Arc::clone(&body),
            blocks,
            copied,
            copies: Arc::new(copies),
        });
        self.spare = last.map(|last| last.body);
        body
    }

    /// How many cgroups' lines of a family the last text copied.
    pub fn copied(&self) -> usize {
        self.last.as_ref().map_or(0, |last| last.copied)
    }

    /// The bytes the last text copied from the one before it.
    #[cfg_attr(not(feature = "agent"), allow(dead_code))]
    pub(crate) fn copies(&self) -> Option<Arc<Copies>> {
        self.last.as_ref().map(|last| Arc::clone(&last.copies))
    }
}

/// For each measured cgroup of `now`, the index of an equal report among `last`'s (the same
/// index first: the walk keeps the cgroups' order).
fn equal_reports(
    last: &ResourceMetricsSnapshot,
    now: &ResourceMetricsSnapshot,
) -> Vec<Option<usize>> {
    let (Some(last), Some(now)) = (&last.extensions.targets, &now.extensions.targets) else {
        return Vec::new();
    };
    let mut by_path: Option<crate::FastMap<&str, usize>> = None;
    let reports = now.cgroups.iter().enumerate();
    reports
        .map(|(index, report)| {
            let at = match last.cgroups.get(index) {
                Some(same) if same.cgroup == report.cgroup => index,
                _ => *by_path
                    .get_or_insert_with(|| {
                        let paths = last.cgroups.iter().enumerate();
                        paths.map(|(at, r)| (&*r.cgroup, at)).collect()
                    })
                    .get(&*report.cgroup)?,
            };
            (last.cgroups[at] == *report).then_some(at)
        })
        .collect()
}

/// What a family's metric name depends on.
type FamilyKey = (&'static str, Kind, Unit, MetricNames);

fn family_key(family: &Family) -> FamilyKey {
    (family.name, family.kind, family.unit, family.names)
}

/// Writes a metric or label name; Relay's and OpenTelemetry's dots become underscores (the
/// only other character in their names is `_`). Copied in runs between dots: most names have
/// none.
fn write_name(out: &mut String, name: &str) {
    let mut rest = name;
    while let Some(at) = memchr::memchr(b'.', rest.as_bytes()) {
        out.push_str(&rest[..at]);
        out.push('_');
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// Writes a family's metric name: in `otel` naming, as OpenTelemetry's Prometheus exporters
/// write it (the unit's suffix: `_seconds`, `_bytes`, none for `{annotations}`; then `_total`
/// for a monotonic sum), with two exceptions (docs/METRICS.md):
///
/// - a `.count` gauge or up-down counter of `{thing}` (`system.process.count`) takes the
///   plural of its thing instead (`system_processes`): Prometheus reserves `_count` for a
///   histogram's or summary's count series (promtool lints it);
/// - a name cAdvisor exports (`container_memory_usage_bytes`, for `container.memory.usage`)
///   takes the `relay_metrics_` namespace, as OpenTelemetry's Prometheus exporters' namespace
///   option would give it, so that our series never mix with the kubelet's in one family.
fn write_family_name(out: &mut String, family: &Family) {
    if family.names != MetricNames::Otel {
        write_name(out, family.name);
        return;
    }
    let start = out.len();
    match counted(family) {
        Some((stem, thing)) => {
            write_name(out, stem);
            out.push('_');
            out.push_str(thing);
            out.push_str(if thing.ends_with('s') { "es" } else { "s" });
        }
        None => write_name(out, family.name),
    }
    if let Some(suffix) = family.unit.suffix() {
        out.push('_');
        out.push_str(suffix);
    }
    if family.kind == Kind::Counter {
        out.push_str("_total");
    }
    if super::target_metrics::is_cadvisor_name(&out[start..]) {
        out.insert_str(start, "relay_metrics_");
    }
}

impl Text<'_> {
    /// The family's metric name, as written when it was announced.
    fn family_name(&mut self, family: &Family) {
        match &self.announced {
            Some((key, name)) if *key == family_key(family) => self.out.push_str(name),
            _ => write_family_name(self.out, family),
        }
    }
}

/// A `.count` gauge or up-down counter of `{thing}` whose name ends with `thing.count`: the
/// name before `.thing` and the thing. A counter keeps OpenTelemetry's translation
/// (`system_network_packet_count_total`): its `_total` already keeps it off `_count`.
fn counted(family: &Family) -> Option<(&'static str, &'static str)> {
    if !matches!(family.kind, Kind::Gauge | Kind::UpDownCounter) {
        return None;
    }
    let Unit::Ucum(unit) = family.unit else {
        return None;
    };
    let thing = unit.strip_prefix('{')?.strip_suffix('}')?;
    let stem = family
        .name
        .strip_suffix(".count")?
        .strip_suffix(thing)?
        .strip_suffix('.')?;
    Some((stem, thing))
}

impl Sink for Text<'_> {
    fn begin(&mut self, family: &Family) {
        // A block opened just before its family's first series starts after the announcement.
        let empty_block = self.reuse.as_ref().and_then(|reuse| reuse.open);
        let empty_block = empty_block.filter(|&(_, start)| start == self.out.len());
        self.close_block();
        self.announce(family);
        if let (Some(reuse), Some((cgroup, _))) = (self.reuse.as_mut(), empty_block) {
            reuse.open = Some((cgroup, self.out.len()));
        }
    }

    fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        self.close_block();
        self.family_name(family);
        write_labels(self.out, labels);
        if !labels.is_empty() {
            self.out.push('}');
        }
        write_value(self.out, value);
    }

    fn cgroup_lines(&mut self, family: &Family, cgroup: usize, announced: bool) -> bool {
        self.close_block();
        let Some(reuse) = &mut self.reuse else {
            return false;
        };
        let (here, there) = reuse.enter(family.name);
        let lines = reuse.equal.get(cgroup).copied().flatten().and_then(|at| {
            let last = reuse.last?;
            let range = last.blocks.get(there?, at)?;
            Some((last.body.get(range.clone())?, range.start))
        });
        let Some((lines, from)) = lines else {
            reuse.open = Some((cgroup, self.out.len()));
            return false;
        };
        if !announced {
            self.announce(family);
        }
        let start = self.out.len();
        self.out.push_str(lines);
        if let Some(reuse) = &mut self.reuse {
            reuse.blocks.insert(here, cgroup, start..self.out.len());
            reuse.copied += 1;
            let run = CopiedRun {
                at: start,
                from,
                len: lines.len(),
            };
            push_run(&mut reuse.runs, run);
        }
        true
    }

    fn cgroup_point<'l>(
        &mut self,
        family: &Family,
        cgroup: usize,
        base: &[(&'l str, Label<'l>)],
        extra: &[(&'l str, Label<'l>)],
        value: Number,
    ) {
        self.close_block_unless(family, cgroup);
        self.family_name(family);
        let written = self.take_cgroup_labels(cgroup, base);
        self.out.push_str(&written);
        self.cgroup_labels[cgroup] = Some(written);
        write_more_labels(self.out, extra, !base.is_empty());
        if !base.is_empty() || !extra.is_empty() {
            self.out.push('}');
        }
        write_value(self.out, value);
    }

    fn histogram(&mut self, family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram) {
        self.close_block();
        // Every line of one histogram has the same labels: they are written once.
        let mut block = std::mem::take(&mut self.labels);
        block.clear();
        write_labels(&mut block, labels);
        self.histogram_lines(family, &block, histogram);
        self.labels = block;
    }

    fn cgroup_histogram(
        &mut self,
        family: &Family,
        cgroup: usize,
        labels: &[(&str, Label<'_>)],
        histogram: &Histogram,
    ) {
        self.close_block_unless(family, cgroup);
        let block = self.take_cgroup_labels(cgroup, labels);
        self.histogram_lines(family, &block, histogram);
        self.cgroup_labels[cgroup] = Some(block);
    }
}

impl Text<'_> {
    /// Ends the block being written: its lines are recorded for the next text.
    fn close_block(&mut self) {
        let Some(reuse) = &mut self.reuse else {
            return;
        };
        if let (Some((cgroup, start)), Some((_, here, _))) = (reuse.open.take(), reuse.family) {
            if self.out.len() > start {
                reuse.blocks.insert(here, cgroup, start..self.out.len());
            }
        }
    }

    /// Ends the block being written unless it is `cgroup`'s of `family`.
    fn close_block_unless(&mut self, family: &Family, cgroup: usize) {
        let Some(reuse) = &self.reuse else {
            return;
        };
        let same = reuse.family.is_some_and(|(name, _, _)| name == family.name);
        if reuse.open.is_some_and(|(open, _)| !same || open != cgroup) {
            self.close_block();
        }
    }

    /// The family's HELP, TYPE and UNIT lines.
    fn announce(&mut self, family: &Family) {
        let kind = match family.kind {
            Kind::Gauge | Kind::UpDownCounter => "gauge",
            Kind::Counter => "counter",
            Kind::Histogram => "histogram",
        };
        let mut name = self
            .announced
            .take()
            .map(|(_, name)| name)
            .unwrap_or_default();
        name.clear();
        write_family_name(&mut name, family);
        self.announced = Some((family_key(family), name));
        self.out.push_str("# HELP ");
        self.family_name(family);
        let _ = write!(self.out, " {}", family.help);
        // Relay's names carry no unit suffix: the unit is said here instead.
        if let Unit::Configured(unit) = family.unit {
            let _ = write!(self.out, " ({})", unit.as_str());
        }
        self.out.push_str("\n# TYPE ");
        self.family_name(family);
        let _ = writeln!(self.out, " {kind}");
        // Prometheus 0.0.4 ignores the line; the OpenMetrics conversion keeps it where the
        // family's name ends with the unit (as OpenMetrics requires).
        let unit = match (family.names, family.unit) {
            (MetricNames::Relay, Unit::Configured(unit)) => Some(unit.as_str()),
            (_, unit) => unit.suffix(),
        };
        if let Some(unit) = unit {
            self.out.push_str("# UNIT ");
            self.family_name(family);
            let _ = writeln!(self.out, " {unit}");
        }
    }
}

impl Text<'_> {
    /// The labels of the walk's measured cgroup `cgroup` as [`write_labels`] writes them,
    /// written the first time the walk asks (taken out of the cache: the caller puts them back).
    fn take_cgroup_labels(&mut self, cgroup: usize, base: &[(&str, Label<'_>)]) -> String {
        if self.cgroup_labels.len() <= cgroup {
            self.cgroup_labels.resize(cgroup + 1, None);
        }
        let written = self.cgroup_labels[cgroup].take().unwrap_or_else(|| {
            let mut written = String::new();
            write_labels(&mut written, base);
            written
        });
        debug_assert_eq!(written, {
            let mut again = String::new();
            write_labels(&mut again, base);
            again
        });
        written
    }

    /// One histogram's lines, each with the labels `block` (as [`write_labels`] writes them).
    fn histogram_lines(&mut self, family: &Family, block: &str, histogram: &Histogram) {
        for (at, &(le, count)) in histogram.buckets.iter().enumerate() {
            // Every cgroup's histogram has the same bounds: each is formatted once.
            if self
                .bounds
                .get(at)
                .is_none_or(|(bits, _)| *bits != le.to_bits())
            {
                let mut text = String::new();
                let _ = write!(text, "{le}");
                self.bounds.truncate(at);
                self.bounds.push((le.to_bits(), text));
            }
            let bound = std::mem::take(&mut self.bounds[at].1);
            self.series_with(family, "_bucket", block, Some(&bound));
            self.bounds[at].1 = bound;
            write_value(self.out, Number::U64(count));
        }
        self.series_with(family, "_bucket", block, Some("+Inf"));
        write_value(self.out, Number::U64(histogram.count));
        self.series_with(family, "_sum", block, None);
        write_value(self.out, Number::F64(histogram.sum));
        self.series_with(family, "_count", block, None);
        write_value(self.out, Number::U64(histogram.count));
    }

    /// A series' name (with `suffix`) and `labels` as [`write_labels`] wrote them (with `le`
    /// last when given), without its value.
    fn series_with(&mut self, family: &Family, suffix: &str, labels: &str, le: Option<&str>) {
        self.family_name(family);
        self.out.push_str(suffix);
        self.out.push_str(labels);
        if let Some(le) = le {
            self.out.push_str(if labels.is_empty() {
                "{le=\""
            } else {
                ",le=\""
            });
            self.out.push_str(le);
            self.out.push('"');
        }
        if !labels.is_empty() || le.is_some() {
            self.out.push('}');
        }
    }
}

/// Labels as a series writes them, without the closing brace: `{key="value",…`, nothing for
/// none.
fn write_labels(out: &mut String, labels: &[(&str, Label<'_>)]) {
    write_more_labels(out, labels, false);
}

/// [`write_labels`] after labels already written when `opened` (the brace is open).
fn write_more_labels(out: &mut String, labels: &[(&str, Label<'_>)], opened: bool) {
    for (index, (key, label_value)) in labels.iter().enumerate() {
        out.push(if index == 0 && !opened { '{' } else { ',' });
        write_name(out, key);
        out.push_str("=\"");
        match label_value {
            Label::Str(text) => escape_label(out, text),
            Label::Int(number) => out.push_str(itoa::Buffer::new().format(*number)),
        }
        out.push('"');
    }
}

/// A series' value after a space, as `Display` writes it, and the line's end. Integers, and
/// whole `f64`s of magnitude below 2^53 (where `Display`'s shortest digits are the integer's),
/// are written by `itoa`: most values of a node's text are byte and event counts.
fn write_value(out: &mut String, value: Number) {
    const EXACT_INTEGERS: f64 = 9_007_199_254_740_992.0;
    out.push(' ');
    match value {
        Number::U64(number) => out.push_str(itoa::Buffer::new().format(number)),
        Number::F64(number)
            if number.fract() == 0.0
                && number.abs() < EXACT_INTEGERS
                && !(number == 0.0 && number.is_sign_negative()) =>
        {
            // Exact: a whole number below 2^53 converts to i64 without loss.
            out.push_str(itoa::Buffer::new().format(number as i64));
        }
        Number::F64(number) => {
            let _ = write!(out, "{number}");
        }
    }
    out.push('\n');
}

/// Label values escape backslash, double quote and newline (copied in runs between them: most
/// values have none).
fn escape_label(out: &mut String, value: &str) {
    let mut rest = value;
    while let Some(at) = memchr::memchr3(b'\\', b'"', b'\n', rest.as_bytes()) {
        out.push_str(&rest[..at]);
        out.push_str(match rest.as_bytes()[at] {
            b'\\' => "\\\\",
            b'"' => "\\\"",
            _ => "\\n",
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

/// Writes the exposition of `snapshot` in `names`' naming into `out` (cleared first).
pub fn encode(snapshot: &ResourceMetricsSnapshot, names: MetricNames, out: &mut String) {
    encode_within(snapshot, names, &SeriesBudget::everything(), out);
}

/// [`encode`] within a series budget.
pub fn encode_within(
    snapshot: &ResourceMetricsSnapshot,
    names: MetricNames,
    budget: &SeriesBudget,
    out: &mut String,
) {
    out.clear();
    write_text(snapshot, names, budget, out, None);
}

/// Writes the exposition into `out`, copying and recording cgroups' lines with `reuse`;
/// returns `reuse` with this text's blocks.
fn write_text<'o>(
    snapshot: &ResourceMetricsSnapshot,
    names: MetricNames,
    budget: &SeriesBudget,
    out: &'o mut String,
    reuse: Option<Reuse<'o>>,
) -> Option<Reuse<'o>> {
    let mut text = Text {
        out,
        bounds: Vec::new(),
        announced: None,
        labels: String::new(),
        cgroup_labels: Vec::new(),
        reuse,
    };
    if names == MetricNames::Otel {
        text.target_info();
    }
    metrics::walk_within(snapshot, names, budget, &mut text);
    text.close_block();
    text.reuse
}

impl Text<'_> {
    /// OpenTelemetry's `target_info` (its Prometheus form of the resource): the resource
    /// attributes as labels of a gauge of 1.
    fn target_info(&mut self) {
        self.out.push_str(
            "# HELP target_info Target metadata (the OpenTelemetry resource).\n# TYPE target_info gauge\ntarget_info",
        );
        let attributes: Vec<_> = metrics::resource_attributes()
            .iter()
            .map(|(key, value)| (*key, Label::Str(value)))
            .collect();
        write_labels(self.out, &attributes);
        if !attributes.is_empty() {
            self.out.push('}');
        }
        self.out.push_str(" 1\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::CgroupTargetReport;

    fn text_into(out: &mut String) -> Text<'_> {
        Text {
            out,
            bounds: Vec::new(),
            announced: None,
            labels: String::new(),
            cgroup_labels: Vec::new(),
            reuse: None,
        }
    }

    /// Hands everything to the text through [`Sink::point`]: a cgroup's labels written with
    /// each series, as [`Sink::cgroup_point`]'s default does.
    struct PointsOnly<'t, 'o>(&'t mut Text<'o>);

    impl Sink for PointsOnly<'_, '_> {
        fn begin(&mut self, family: &Family) {
            self.0.begin(family);
        }

        fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
            self.0.point(family, labels, value);
        }

        fn histogram(&mut self, family: &Family, labels: &[(&str, Label<'_>)], h: &Histogram) {
            self.0.histogram(family, labels, h);
        }
    }

    /// Measured cgroups whose labels differ in number and need escaping, with per-device and
    /// per-GPU series (labels of their own after the cgroup's), and run-queue histograms for
    /// some.
    fn measured_cgroups() -> ResourceMetricsSnapshot {
        use crate::snapshot::{TargetDeviceIo, TargetGpuUse, TargetKernelEvents, TargetLabels};
        let report = |index: u64| CgroupTargetReport {
            cgroup: format!("/pod{index}/c \"{index}\"\\\n").into(),
            labels: TargetLabels {
                unit: index.is_multiple_of(2).then(|| format!("u{index}.scope")),
                container_id: Some(format!("{index:064x}")),
                pod_name: index.is_multiple_of(3).then(|| format!("p\"{index}")),
                kubernetes_container: (index % 3 == 1).then(|| "app".to_owned()),
                ..TargetLabels::default()
            },
            cpu_usage_ns: Some(1_000 * index),
            memory_current_bytes: (index != 2).then_some(4096 * index),
            devices: (0..index % 3)
                .map(|d| TargetDeviceIo {
                    device: format!("8:{d}"),
                    read_bytes: index + d,
                    ..TargetDeviceIo::default()
                })
                .collect(),
            gpus: Some(vec![TargetGpuUse {
                index: 0,
                uuid: format!("GPU-{index}").into(),
                processes: 1,
                memory_used_bytes: Some(index),
                sm_utilization_percent: None,
                memory_utilization_percent: Some(1.5),
            }]),
            kernel_events: (index != 4).then(|| TargetKernelEvents {
                run_queue_count: 3 * index,
                run_queue_total_ns: 5_000 * index,
                run_queue_histogram: (0..32).map(|bucket| index * (bucket % 3)).collect(),
                ..TargetKernelEvents::default()
            }),
            ..CgroupTargetReport::default()
        };
        let mut snapshot = ResourceMetricsSnapshot {
            cpu: Some(Default::default()),
            memory: Some(Default::default()),
            disk: Some(Default::default()),
            gpu: Some(Default::default()),
            ..ResourceMetricsSnapshot::default()
        };
        snapshot.extensions.targets = Some(Box::new(crate::snapshot::Targets {
            cgroups: (0..7).map(report).collect(),
            ..Default::default()
        }));
        snapshot
    }

    #[test]
    fn each_cgroups_labels_written_once_per_walk_give_the_text_of_labels_written_per_series() {
        let snapshot = measured_cgroups();
        for names in [
            MetricNames::RelayMetrics,
            MetricNames::Cadvisor,
            MetricNames::Otel,
        ] {
            let (mut once, mut per_series) = (String::new(), String::new());
            metrics::walk(&snapshot, names, &mut text_into(&mut once));
            metrics::walk(
                &snapshot,
                names,
                &mut PointsOnly(&mut text_into(&mut per_series)),
            );
            assert_eq!(once, per_series, "{names:?}");
            // Within a budget that drops some of each cgroup's families.
            let budget =
                SeriesBudget::new(vec![], vec!["*gpu*".into()], false, vec![], vec![]).unwrap();
            let (mut kept_once, mut kept_per_series) = (String::new(), String::new());
            metrics::walk_within(&snapshot, names, &budget, &mut text_into(&mut kept_once));
            let mut points_only = text_into(&mut kept_per_series);
            metrics::walk_within(&snapshot, names, &budget, &mut PointsOnly(&mut points_only));
            assert_eq!(kept_once, kept_per_series, "{names:?} within a budget");
            assert!(!kept_once.contains("GPU-") && kept_once.len() < once.len());
            // The walk reached the cgroups' series, with extra labels after theirs.
            assert!(once.contains("device=\"8:1\"}"), "{names:?}: {once}");
            assert!(once.contains("le=\"+Inf\"} 18\n"), "{names:?}: {once}");
            assert!(once.contains("p\\\"3"), "{names:?}");
        }
    }

    /// Snapshots one after another, each changed from the one before in one way.
    fn changing_snapshots() -> Vec<(&'static str, ResourceMetricsSnapshot)> {
        let first = measured_cgroups();
        let mut steps = vec![("first", first.clone()), ("the same again", first)];
        let mut change = |what: &'static str, edit: &dyn Fn(&mut Vec<CgroupTargetReport>)| {
            let mut next = steps.last().map(|(_, s)| s.clone()).unwrap_or_default();
            if let Some(targets) = next.extensions.targets.as_mut() {
                edit(&mut targets.cgroups);
            }
            steps.push((what, next));
        };
        change("one value", &|c| c[3].memory_current_bytes = Some(1));
        change("one label", &|c| {
            c[1].labels.pod_name = Some("renamed".into())
        });
        change("the first cgroup's value gone", &|c| {
            c[0].cpu_usage_ns = None
        });
        change("a cgroup removed", &|c| drop(c.remove(2)));
        change("reversed, one added", &|c| {
            c.reverse();
            let mut added = c[0].clone();
            added.cgroup = "/added".into();
            c.push(added);
        });
        change("a histogram gone", &|c| c[1].kernel_events = None);
        change("every CPU value gone", &|c| {
            c.iter_mut().for_each(|r| r.cpu_usage_ns = None)
        });
        change("a device added", &|c| {
            let mut device = c[0].devices.first().cloned().unwrap_or_default();
            device.device = "9:9".into();
            c[0].devices.push(device);
        });
        change("the same again", &|_| {});
        let mut off = steps.last().map(|(_, s)| s.clone()).unwrap_or_default();
        off.cpu = None;
        steps.push(("CPU off", off));
        steps
    }

    /// The namings that copy: `otel` renames labels per series and `relay` has no per-cgroup
    /// families.
    fn copies(names: MetricNames) -> bool {
        matches!(names, MetricNames::RelayMetrics | MetricNames::Cadvisor)
    }

    /// Each family and cgroup that has a cgroup's series.
    #[derive(Default)]
    struct CgroupFamilies(std::collections::HashSet<(&'static str, usize)>);

    impl Sink for CgroupFamilies {
        fn begin(&mut self, _: &Family) {}

        fn point(&mut self, _: &Family, _: &[(&str, Label<'_>)], _: Number) {}

        fn cgroup_point<'l>(
            &mut self,
            family: &Family,
            cgroup: usize,
            _: &[(&'l str, Label<'l>)],
            _: &[(&'l str, Label<'l>)],
            _: Number,
        ) {
            self.0.insert((family.name, cgroup));
        }

        fn histogram(&mut self, _: &Family, _: &[(&str, Label<'_>)], _: &Histogram) {}

        fn cgroup_histogram(
            &mut self,
            family: &Family,
            cgroup: usize,
            _: &[(&str, Label<'_>)],
            _: &Histogram,
        ) {
            self.0.insert((family.name, cgroup));
        }
    }

    /// Each run's bytes are where it says in `text` and in `previous` (there are none without
    /// one), and the runs are in order without overlapping.
    fn check_runs(runs: &[CopiedRun], text: &str, previous: Option<&String>) {
        assert!(runs.is_empty() || previous.is_some());
        let mut end = 0;
        for run in runs {
            assert!(run.at >= end, "{run:?} after {end}");
            end = run.at + run.len;
            let previous = previous.unwrap();
            assert_eq!(
                text.get(run.at..end),
                previous.get(run.from..run.from + run.len),
                "{run:?}"
            );
        }
    }

    #[test]
    fn a_text_that_copies_unchanged_cgroups_lines_is_the_text_written_whole() {
        let tail = |out: &mut String| out.push_str("# tail\n");
        let everything = SeriesBudget::everything();
        let no_gpu = SeriesBudget::new(vec![], vec!["*gpu*".into()], false, vec![], vec![]);
        for names in [
            MetricNames::RelayMetrics,
            MetricNames::Cadvisor,
            MetricNames::Otel,
            MetricNames::Relay,
        ] {
            for budget in [&everything, no_gpu.as_ref().unwrap()] {
                let mut lines = CgroupLines::new(names, budget.clone());
                let mut copied = 0;
                let mut previous: Option<Arc<String>> = None;
                for (step, snapshot) in changing_snapshots() {
                    let snapshot = Arc::new(snapshot);
                    let written = lines.write(&snapshot, tail);
                    let runs = lines.copies().unwrap();
                    assert_eq!(runs.source + 1, runs.text);
                    check_runs(&runs.runs, &written, previous.as_deref());
                    previous = Some(Arc::clone(&written));
                    if step == "the same again" && copies(names) {
                        // Each cgroup's lines of each family of an unchanged snapshot are
                        // copied, but for the snapshot's time.
                        let mut pairs = CgroupFamilies::default();
                        metrics::walk_within(&snapshot, names, budget, &mut pairs);
                        pairs
                            .0
                            .retain(|(family, _)| *family != "container_last_seen");
                        assert_eq!(lines.copied(), pairs.0.len(), "{names:?}, after {step}");
                    }
                    let mut whole = String::new();
                    encode_within(&snapshot, names, budget, &mut whole);
                    tail(&mut whole);
                    assert_eq!(*written, whole, "{names:?}, after {step}");
                    copied += lines.copied();
                }
                assert_eq!(
                    copied > 100,
                    copies(names),
                    "{names:?}: {copied} blocks copied"
                );
            }
        }
    }

    #[test]
    fn a_text_is_written_into_the_buffer_of_the_text_before_the_last_unless_it_is_held() {
        let snapshot = Arc::new(measured_cgroups());
        let mut whole = String::new();
        encode(&snapshot, MetricNames::RelayMetrics, &mut whole);
        let mut lines = CgroupLines::new(MetricNames::RelayMetrics, SeriesBudget::everything());
        let mut write = || lines.write(&snapshot, |_| {});
        drop(write());
        let second = write();
        let second_at = second.as_ptr();
        drop(second);
        let third = write();
        // The second text's buffer, held by nothing but the writer, is the fourth's.
        let fourth = write();
        assert_eq!(fourth.as_ptr(), second_at);
        // The third's is still held here: the fifth is written elsewhere, the third unchanged.
        let fifth = write();
        assert_ne!(fifth.as_ptr(), third.as_ptr());
        for text in [&third, &fourth, &fifth] {
            assert_eq!(***text, whole);
        }
    }

    #[test]
    fn a_family_is_announced_once_and_label_values_are_escaped() {
        let mut out = String::new();
        let mut text = text_into(&mut out);
        let family = Family {
            name: "m_bytes",
            kind: Kind::Gauge,
            help: "help",
            unit: Unit::Bytes,
            names: MetricNames::RelayMetrics,
        };
        text.begin(&family);
        let scope = ("scope", Label::Str("global"));
        text.point(
            &family,
            &[scope, ("path", Label::Str("/a \"b\"\\c\n"))],
            Number::F64(1.0),
        );
        text.point(&family, &[scope], Number::F64(2.5));
        text.point(&family, &[], Number::U64(3));
        assert_eq!(
            out,
            "# HELP m_bytes help\n# TYPE m_bytes gauge\n# UNIT m_bytes bytes\n\
             m_bytes{scope=\"global\",path=\"/a \\\"b\\\"\\\\c\\n\"} 1\n\
             m_bytes{scope=\"global\"} 2.5\n\
             m_bytes 3\n"
        );
    }

    /// Names and label values, short and long: each character to replace replaced, the rest
    /// copied.
    #[test]
    fn names_and_label_values_are_written_with_their_replacements() {
        let escaped = |text: &str| {
            text.chars()
                .map(|c| match c {
                    '\\' => "\\\\".to_owned(),
                    '"' => "\\\"".to_owned(),
                    '\n' => "\\n".to_owned(),
                    c => c.to_string(),
                })
                .collect::<String>()
        };
        for text in [
            "",
            "some",
            "8:0",
            "a\"b",
            "x\\",
            "line\n",
            "sixteen-bytes-ok",
            "seventeen-bytes-x",
            "/kubepods.slice/pod\"1\"/c\\d\n",
            "a long value with no character to escape at all",
        ] {
            let mut out = String::new();
            escape_label(&mut out, text);
            assert_eq!(out, escaped(text), "{text:?}");
            let mut name = String::new();
            write_name(&mut name, &text.replace(['"', '\\', '\n'], "."));
            assert_eq!(name, text.replace(['"', '\\', '\n', '.'], "_"), "{text:?}");
        }
    }

    #[test]
    fn a_histograms_lines_share_its_labels_and_end_with_le() {
        let mut out = String::new();
        let mut text = text_into(&mut out);
        let family = Family {
            name: "h_seconds",
            kind: Kind::Histogram,
            help: "help",
            unit: Unit::Seconds,
            names: MetricNames::RelayMetrics,
        };
        let histogram = Histogram {
            buckets: vec![(0.5, 1), (2.0, 3)],
            count: 4,
            sum: 2.25,
        };
        text.histogram(
            &family,
            &[("a.b", Label::Str("x\"y")), ("n", Label::Int(7))],
            &histogram,
        );
        text.histogram(&family, &[], &histogram);
        let series: Vec<_> = out.lines().collect();
        assert_eq!(
            series,
            [
                "h_seconds_bucket{a_b=\"x\\\"y\",n=\"7\",le=\"0.5\"} 1",
                "h_seconds_bucket{a_b=\"x\\\"y\",n=\"7\",le=\"2\"} 3",
                "h_seconds_bucket{a_b=\"x\\\"y\",n=\"7\",le=\"+Inf\"} 4",
                "h_seconds_sum{a_b=\"x\\\"y\",n=\"7\"} 2.25",
                "h_seconds_count{a_b=\"x\\\"y\",n=\"7\"} 4",
                "h_seconds_bucket{le=\"0.5\"} 1",
                "h_seconds_bucket{le=\"2\"} 3",
                "h_seconds_bucket{le=\"+Inf\"} 4",
                "h_seconds_sum 2.25",
                "h_seconds_count 4",
            ]
        );
    }

    #[test]
    fn a_series_is_named_by_its_own_family_not_the_one_announced_last() {
        let mut out = String::new();
        let mut text = text_into(&mut out);
        let family = |name| Family {
            name,
            kind: Kind::Counter,
            help: "help",
            unit: Unit::Bytes,
            names: MetricNames::Otel,
        };
        text.begin(&family("a.read"));
        text.point(&family("a.read"), &[], Number::U64(1));
        text.begin(&family("b.written"));
        text.point(&family("a.read"), &[], Number::U64(2));
        text.point(
            &family("b.written"),
            &[("x.y", Label::Int(3))],
            Number::U64(4),
        );
        let series: Vec<_> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            series,
            [
                "a_read_bytes_total 1",
                "a_read_bytes_total 2",
                "b_written_bytes_total{x_y=\"3\"} 4"
            ]
        );
    }

    /// The otel Prometheus name of a family of `kind` named `name` in `{packet}`s.
    fn otel_name(name: &'static str, kind: Kind) -> String {
        let mut out = String::new();
        write_family_name(
            &mut out,
            &Family {
                name,
                kind,
                help: "help",
                unit: Unit::Ucum("{packet}"),
                names: MetricNames::Otel,
            },
        );
        out
    }

    #[test]
    fn only_a_gauge_or_up_down_counter_count_takes_the_plural() {
        let name = "system.network.packet.count";
        assert_eq!(otel_name(name, Kind::Gauge), "system_network_packets");
        assert_eq!(
            otel_name(name, Kind::UpDownCounter),
            "system_network_packets"
        );
        // OpenTelemetry's own translation of a monotonic sum.
        assert_eq!(
            otel_name(name, Kind::Counter),
            "system_network_packet_count_total"
        );
    }

    /// Values are written as `Display` writes them, whichever way they are formatted.
    #[test]
    fn values_are_written_as_display_writes_them() {
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1e-7,
            123_456.789,
            4_503_599_627_370_497.0,
            9_007_199_254_740_991.0,
            9_007_199_254_740_992.0,
            -9_007_199_254_740_991.0,
            1e21,
            1.5e300,
            f64::MAX,
            f64::MIN_POSITIVE,
        ];
        // Whole and fractional values over the range, from a fixed sequence.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let shift = state % 64;
            values.push((state >> shift) as f64);
            let any = f64::from_bits(state);
            if any.is_finite() {
                values.push(any);
            }
        }
        for value in values {
            let mut out = String::new();
            write_value(&mut out, Number::F64(value));
            assert_eq!(out, format!(" {value}\n"), "{value:e}");
        }
        for value in [0, 1, u64::MAX, 1 << 53] {
            let mut out = String::new();
            write_value(&mut out, Number::U64(value));
            assert_eq!(out, format!(" {value}\n"));
        }
    }
}
