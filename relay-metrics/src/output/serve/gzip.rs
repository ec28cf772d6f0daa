//! gzip bodies made of independently compressed segments, so that the next body compresses only
//! the segments whose bytes changed.
//!
//! A body is cut at line ends into segments of at most 128 lines, counted from a family's start
//! (so a changed value moves no cut). Each segment is compressed on its own and ended
//! with a full flush: its deflate blocks refer to nothing before them and end on a byte, so
//! segments may follow each other in any order and a segment's compressed bytes from the last
//! body may be used again in this one. They are, when the segment's bytes are equal to a segment
//! of the last body (found by its length and first line, then compared byte for byte, except
//! the bytes the text's writer copied from the same place of the last body: those are equal by
//! construction). Between two snapshots a second apart most series keep their value, so most
//! segments are copied, not compressed, and their CRC-32 is the one kept with them.
//!
//! A body is the publication's part, its segments each ended with a full flush, followed by the
//! request's part compressed on its own (the sample's age), and the gzip trailer, whose CRC-32 is
//! combined from the segments' and the request part's.
//!
//! A format made from another text line by line (OpenMetrics from the Prometheus text) is cut
//! into segments where its source is, and each segment converted on its own: a segment whose
//! source is unchanged is copied without being converted again. A cut never falls inside a
//! family's comment lines, so that each segment converts as it would inside the whole text.

use std::hash::BuildHasher;
use std::ops::Range;

use bytes::Bytes;
use flate2::{Compress, Compression, FlushCompress, Status};

#[cfg(test)]
use crate::output::prometheus::CopiedRun;
use crate::output::prometheus::Copies;

/// The start of a gzip stream: header and deflate blocks up to a flush, with the CRC-32 and
/// length of what they hold.
#[derive(Debug)]
pub(super) struct GzipPrefix {
    /// Header and blocks, sent as they are.
    pub bytes: Bytes,
    crc: crc32fast::Hasher,
    length: u64,
}

/// The compressed segments of the last body in one format, by [`segment_key`].
#[derive(Debug, Default)]
pub(super) struct Segments {
    by_key: crate::FastMap<(u64, usize), Segment>,
    /// The number of the text the last body was (its [`Copies::text`]), if it had one.
    text: Option<u64>,
}

#[derive(Debug)]
struct Segment {
    /// Where it starts in the last body.
    start: usize,
    /// The segment's source text, compared with the next body's. A copy, not a slice of the
    /// body: a segment may outlive many bodies, and a slice would keep its whole body
    /// allocated (and the text's writer from writing the next body into it again).
    text: Box<[u8]>,
    deflated: Bytes,
    /// CRC-32 and length of what `deflated` holds: `text`, or `text` converted.
    crc: crc32fast::Hasher,
    length: usize,
}

/// How a format's text is made from a segment of its source: as it is, or converted.
pub(super) type Convert = fn(&[u8]) -> Vec<u8>;

/// gzip header: magic, deflate, no flags, no time, no extra flags, OS unknown.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];

/// Fast compression: text exposition compresses ~10× at level 1 already, and the work is done
/// on the serving thread.
fn compressor() -> Compress {
    Compress::new(Compression::fast(), false)
}

/// A segment ends after its `LINES_PER_SEGMENT`th line (or the first one after it that is not
/// followed by a comment other than `# HELP`), or before a family's `# HELP` line once it holds
/// `MIN_SEGMENT` bytes. Cuts counted in lines from a family's start fall at the same
/// series from one body to the next whatever the lengths of their values, so a changed value
/// changes one segment (cuts placed by bytes would move with every longer value after them).
/// 128 lines of Prometheus text are 16–70 KiB: the segments compress to 12–15 % more than the
/// body in one piece (measured on the agent's bodies at 500 and 2,000 cgroups).
const LINES_PER_SEGMENT: usize = 128;
const MIN_SEGMENT: usize = 4 * 1024;

impl GzipPrefix {
    /// `body` (each segment converted by `convert` where given) compressed, the segments whose
    /// source is equal to one of `last`'s copied from it; `last` then holds `body`'s segments.
    /// `copies` says which bytes `body`'s writer copied from the text before it. `None` if zlib
    /// reports an error.
    pub(super) fn new(
        body: &[u8],
        convert: Option<Convert>,
        copies: Option<&Copies>,
        last: &mut Segments,
    ) -> Option<Self> {
        let mut bytes = Vec::with_capacity(body.len() / 4 + 64);
        bytes.extend_from_slice(&GZIP_HEADER);
        let mut crc = crc32fast::Hasher::new();
        let mut length = 0;
        let mut kept =
            crate::FastMap::with_capacity_and_hasher(last.by_key.len(), Default::default());
        let mut compress = compressor();
        // Copies from the last body: its segments' starts are where those bytes came from.
        let from_last = copies.filter(|copies| last.text == Some(copies.source));
        for range in segments(body) {
            let start = range.start;
            let text = &body[range];
            let key = segment_key(text);
            // Two segments of one body with the same key (the same first line and length) are
            // not both found: the second is compressed again, which is only slower.
            let segment = match last.by_key.remove(&key) {
                Some(same) if same.equals(text, start, from_last) => Segment { start, ..same },
                _ => Segment::compressed(&mut compress, text, start, convert)?,
            };
            bytes.extend_from_slice(&segment.deflated);
            crc.combine(&segment.crc);
            length += segment.length as u64;
            kept.insert(key, segment);
        }
        last.by_key = kept;
        last.text = copies.map(|copies| copies.text);
        Some(Self {
            bytes: Bytes::from(bytes),
            crc,
            length,
        })
    }

    /// The bytes that end the stream after [`Self::bytes`]: `tail` compressed on its own, the
    /// final block and the trailer.
    pub(super) fn finish(&self, tail: &[u8]) -> Option<Bytes> {
        let mut out = Vec::with_capacity(tail.len() + 32);
        deflate(&mut compressor(), tail, &mut out, FlushCompress::Finish)?;
        let mut crc = self.crc.clone();
        crc.update(tail);
        out.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE is the length modulo 2^32 (RFC 1952).
        let length = (self.length + tail.len() as u64) as u32;
        out.extend_from_slice(&length.to_le_bytes());
        Some(Bytes::from(out))
    }
}

impl Segment {
    /// `text`, at `start` in its body, converted where `convert` is given, and compressed.
    fn compressed(
        compress: &mut Compress,
        text: &[u8],
        start: usize,
        convert: Option<Convert>,
    ) -> Option<Self> {
        let converted = convert.map(|convert| convert(text));
        let made = converted.as_deref().unwrap_or(text);
        let mut crc = crc32fast::Hasher::new();
        crc.update(made);
        let mut out = Vec::with_capacity(made.len() / 4 + 64);
        deflate(compress, made, &mut out, FlushCompress::Full)?;
        Some(Self {
            start,
            length: made.len(),
            text: text.into(),
            deflated: Bytes::from(out),
            crc,
        })
    }

    /// Whether `text`, at `start` in its body, is this segment's source text. Bytes that `copies`
    /// (of the body's text from the last one) says were copied from the same place of the last
    /// body as this segment's bytes are equal without being compared; the others are compared.
    fn equals(&self, text: &[u8], start: usize, copies: Option<&Copies>) -> bool {
        if self.text.len() != text.len() {
            return false;
        }
        let Some(copies) = copies else {
            return *self.text == *text;
        };
        // Equal up to `equal` (an offset into both texts).
        let mut equal = 0;
        for run in copies.overlapping(start..start + text.len()) {
            // The run maps this text's bytes onto this segment's: it moved them by as much.
            if run.at + self.start != start + run.from {
                continue;
            }
            let covered =
                run.at.max(start) - start..(run.at + run.len).min(start + text.len()) - start;
            if covered.start > equal
                && text[equal..covered.start] != self.text[equal..covered.start]
            {
                return false;
            }
            equal = equal.max(covered.end);
        }
        let same = text[equal..] == self.text[equal..];
        debug_assert!(
            !same || *self.text == *text,
            "a copied run is not what it says"
        );
        same
    }
}

#[cfg(test)]
impl Segments {
    /// Where each segment's compressed bytes are, to tell copied segments from compressed ones.
    fn deflated_at(&self) -> std::collections::HashSet<*const u8> {
        self.by_key.values().map(|s| s.deflated.as_ptr()).collect()
    }
}

/// What a segment is looked up by among the last body's: a hash of its first line (which names
/// a series and holds its value, so segments rarely share it) and its length. Hashing one line
/// instead of the whole segment leaves an unchanged segment's bytes to a single pass, the
/// comparison.
fn segment_key(text: &[u8]) -> (u64, usize) {
    let first_line = memchr::memchr(b'\n', text).map_or(text, |end| &text[..end]);
    let hash = foldhash::fast::FixedState::default().hash_one(first_line);
    (hash, text.len())
}

/// `body` cut into segments at line ends (the last one ends where `body` does).
fn segments(body: &[u8]) -> impl Iterator<Item = Range<usize>> + '_ {
    let mut start = 0;
    std::iter::from_fn(move || {
        if start == body.len() {
            return None;
        }
        let cut = segment_end(body, start);
        let segment = start..cut;
        start = cut;
        Some(segment)
    })
}

/// Newlines are counted this many bytes at a time (a vectorized count); a block is searched for
/// a family's start while it is in cache.
const COUNTED_BLOCK: usize = 4096;

/// The end of the segment that starts at `start`: the start of the first family (its `# HELP`
/// line) at least `MIN_SEGMENT` bytes on, if it comes before the end of the
/// `LINES_PER_SEGMENT`th line; else the end of that line, or of the first line after it that is
/// not followed by a comment other than `# HELP` (a family's comments stay together); `body`'s
/// end if there is neither. One pass over the bytes, a block at a time: its newlines counted,
/// its `#`s looked at (a family starts at a `#` after a newline), so each block is read from
/// memory once (docs/PERFORMANCE.md, "The gzip segments cut in one pass").
fn segment_end(body: &[u8], start: usize) -> usize {
    let families_from = start + MIN_SEGMENT;
    let mut left = LINES_PER_SEGMENT;
    let mut at = start;
    for block in body[start..].chunks(COUNTED_BLOCK) {
        let count = memchr::memchr_iter(b'\n', block).count();
        let lines_end = (count >= left)
            .then(|| memchr::memchr_iter(b'\n', block).nth(left - 1))
            .flatten()
            .map(|index| at + index + 1);
        let searched = families_from.max(at)..lines_end.unwrap_or(at + block.len());
        if let Some(family) = family_start(body, searched) {
            return family;
        }
        if let Some(end) = lines_end {
            return past_comments(body, end);
        }
        left -= count;
        at += block.len();
    }
    body.len()
}

/// The first `# HELP ` line that begins within `range` of `body`. Found by its `#`, a byte that
/// Prometheus text has only in comments and the odd label value: a search for one byte runs at
/// memchr's full speed, a substring search for the whole pattern did not on these bodies
/// (docs/PERFORMANCE.md, "The gzip segments' passes").
fn family_start(body: &[u8], range: Range<usize>) -> Option<usize> {
    let within = body.get(range.clone())?;
    memchr::memchr_iter(b'#', within)
        .map(|index| range.start + index)
        .find(|&at| at > 0 && body[at - 1] == b'\n' && body[at..].starts_with(b"# HELP "))
}

/// `end`, or past the comment lines other than `# HELP` that begin there.
fn past_comments(body: &[u8], mut end: usize) -> usize {
    while end < body.len() && body[end] == b'#' && !body[end..].starts_with(b"# HELP ") {
        end = memchr::memchr(b'\n', &body[end..]).map_or(body.len(), |at| end + at + 1);
    }
    end
}

/// Compresses all of `input` into `out` and completes `flush` (a full or sync flush, or the end
/// of the stream); `None` if zlib reports an error.
fn deflate(
    compress: &mut Compress,
    input: &[u8],
    out: &mut Vec<u8>,
    flush: FlushCompress,
) -> Option<()> {
    let start = compress.total_in();
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(256));
        }
        let consumed = usize::try_from(compress.total_in() - start).ok()?;
        let status = compress.compress_vec(&input[consumed..], out, flush).ok()?;
        let consumed = usize::try_from(compress.total_in() - start).ok()?;
        let done = match flush {
            FlushCompress::Finish => status == Status::StreamEnd,
            // zlib has flushed everything once it returns with output space left over.
            _ => consumed == input.len() && out.len() < out.capacity(),
        };
        if done {
            return Some(());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    /// A text shaped as the agent's: families of series, one line per cgroup.
    fn text(changed_value: u64) -> Bytes {
        let mut text = String::new();
        for family in 0..40 {
            text.push_str(&format!(
                "# HELP f{family}_bytes Help.\n# TYPE f{family}_bytes gauge\n"
            ));
            for cgroup in 0..500 {
                let value = if family == 7 && cgroup == 250 {
                    changed_value
                } else {
                    cgroup * 4096
                };
                text.push_str(&format!(
                    "f{family}_bytes{{cgroup=\"/bench.slice/c-{cgroup:04}.scope\",unit=\"c-{cgroup:04}.scope\"}} {value}\n"
                ));
            }
        }
        Bytes::from(text)
    }

    fn decoded(prefix: &GzipPrefix, tail: &[u8]) -> Vec<u8> {
        let mut body = prefix.bytes.to_vec();
        body.extend_from_slice(&prefix.finish(tail).unwrap());
        let mut decoded = Vec::new();
        // One gzip member whose trailer (CRC-32 and length) the decoder checks.
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut decoded)
            .unwrap();
        decoded
    }

    #[test]
    fn segments_cover_the_body_at_line_ends_within_their_bounds() {
        let body = text(1);
        let cuts: Vec<_> = segments(&body).collect();
        assert_eq!(cuts.first().unwrap().start, 0);
        assert_eq!(cuts.last().unwrap().end, body.len());
        for pair in cuts.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        for cut in &cuts[..cuts.len() - 1] {
            assert_eq!(body[cut.end - 1], b'\n');
            let lines = memchr::memchr_iter(b'\n', &body[cut.clone()]).count();
            let family_follows = body[cut.end..].starts_with(b"# HELP ");
            assert!(
                lines == LINES_PER_SEGMENT || (family_follows && cut.len() >= MIN_SEGMENT),
                "{cut:?}: {lines} lines"
            );
        }
        // 40 families of 502 lines: four segments each (128, 128, 128, 118 lines).
        assert_eq!(cuts.len(), 160);
        // A body with no line end, and an empty one.
        assert_eq!(segments(&[b'x'; 100]).collect::<Vec<_>>(), vec![0..100]);
        assert_eq!(segments(b"").count(), 0);
    }

    #[test]
    fn a_body_after_another_copies_the_unchanged_segments_and_decodes_to_itself() {
        let mut last = Segments::default();
        let first = text(1);
        let compressed = GzipPrefix::new(&first, None, None, &mut last).unwrap();
        assert_eq!(
            decoded(&compressed, b"tail 1\n"),
            [&first[..], b"tail 1\n"].concat()
        );
        let before = last.deflated_at();

        // One value changed (and made longer): its segment is compressed again, the rest copied.
        let second = text(123_456_789);
        assert_ne!(first, second);
        let compressed = GzipPrefix::new(&second, None, None, &mut last).unwrap();
        assert_eq!(
            decoded(&compressed, b"tail 2\n"),
            [&second[..], b"tail 2\n"].concat()
        );
        let after = last.deflated_at();
        let copied = after.intersection(&before).count();
        assert!(after.len() > 20, "{}", after.len());
        assert_eq!(copied + 1, after.len(), "{copied} of {}", after.len());

        // The same body a third time: every segment copied, the output the same bytes.
        let again = GzipPrefix::new(&second, None, None, &mut last).unwrap();
        assert_eq!(again.bytes, compressed.bytes);
        assert_eq!(last.deflated_at(), after);

        // Nothing kept (a new agent) compresses the same body to a stream that decodes the same.
        let fresh = GzipPrefix::new(&second, None, None, &mut Segments::default()).unwrap();
        assert_eq!(decoded(&fresh, b""), &second[..]);
    }

    /// The runs of a writer that copied `second` from `first` but for the bytes at `changed`
    /// (in `first`) and a line put first: what is before and after the change, moved.
    fn copies_around(
        first: &[u8],
        changed: Range<usize>,
        second: &[u8],
        put_first: usize,
    ) -> Copies {
        let after_in_second = second.len() - (first.len() - changed.end);
        Copies {
            text: 2,
            source: 1,
            runs: vec![
                CopiedRun {
                    at: put_first,
                    from: 0,
                    len: changed.start,
                },
                CopiedRun {
                    at: after_in_second,
                    from: changed.end,
                    len: first.len() - changed.end,
                },
            ],
        }
    }

    /// The byte range of the one line that differs between `text(1)` and `text(value)`.
    fn changed_line(first: &[u8], value: u64) -> Range<usize> {
        let other = text(value);
        let start = first
            .iter()
            .zip(other.iter())
            .position(|(a, b)| a != b)
            .unwrap();
        let start = first[..start]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |at| at + 1);
        let end = start + memchr::memchr(b'\n', &first[start..]).unwrap() + 1;
        start..end
    }

    #[test]
    fn bytes_copied_from_the_last_body_keep_the_same_segments_as_bytes_compared() {
        let first = text(1);
        let changed = changed_line(&first, 123_456_789);
        let put_first = b"# a line put first\n";
        let second = [&put_first[..], &text(123_456_789)].concat();
        let copies = copies_around(&first, changed, &second, put_first.len());
        let (mut compared, mut trusted) = (Segments::default(), Segments::default());
        GzipPrefix::new(&first, None, None, &mut compared).unwrap();
        let numbered = Copies {
            text: 1,
            ..Copies::default()
        };
        GzipPrefix::new(&first, None, Some(&numbered), &mut trusted).unwrap();
        let before = (compared.deflated_at(), trusted.deflated_at());
        let by_comparing = GzipPrefix::new(&second, None, None, &mut compared).unwrap();
        let by_copies = GzipPrefix::new(&second, None, Some(&copies), &mut trusted).unwrap();
        assert_eq!(by_copies.bytes, by_comparing.bytes);
        assert_eq!(decoded(&by_copies, b""), second);
        // The same segments are copied: all but the first family's (whose cuts the line put
        // first moved) and the changed line's.
        let kept = |before: &std::collections::HashSet<_>, after: &Segments| {
            before.intersection(&after.deflated_at()).count()
        };
        assert_eq!(kept(&before.1, &trusted), kept(&before.0, &compared));
        assert_eq!(kept(&before.1, &trusted) + 5, trusted.deflated_at().len());

        // Copies from a text the segments are not of are not taken: all is compared.
        let stale = Copies {
            source: 7,
            ..copies_around(&first, changed_line(&first, 5), &text(5), 0)
        };
        let third = text(5);
        let compressed = GzipPrefix::new(&third, None, Some(&stale), &mut trusted).unwrap();
        assert_eq!(decoded(&compressed, b""), third);
    }

    /// A run's bytes are not compared: a run whose bytes differ is not seen in a release build,
    /// and debug builds (the tests) check every run they trust.
    #[test]
    #[cfg_attr(
        debug_assertions,
        should_panic(expected = "a copied run is not what it says")
    )]
    fn a_copied_run_is_trusted_and_debug_builds_check_it() {
        let first = text(1);
        let mut last = Segments::default();
        let numbered = Copies {
            text: 1,
            ..Copies::default()
        };
        GzipPrefix::new(&first, None, Some(&numbered), &mut last).unwrap();
        // The same length, one byte different, said to be copied whole from the same place.
        let mut second = first.to_vec();
        let at = second.len() / 2;
        second[at] = if second[at] == b'0' { b'1' } else { b'0' };
        let lie = Copies {
            text: 2,
            source: 1,
            runs: vec![CopiedRun {
                at: 0,
                from: 0,
                len: second.len(),
            }],
        };
        let compressed = GzipPrefix::new(&second, None, Some(&lie), &mut last).unwrap();
        assert_eq!(decoded(&compressed, b""), first);
    }

    /// Short families (`# HELP`, `# TYPE`, `# UNIT` and one to four series) of Prometheus text,
    /// so that the 128th line of a segment falls on each of a family's lines in turn.
    fn short_families(changed_value: u64) -> Bytes {
        let mut text = String::new();
        for family in 0..400 {
            let (name, kind) = if family % 2 == 0 {
                (format!("f{family}_seconds_total"), "counter")
            } else {
                (format!("f{family}_seconds"), "gauge")
            };
            text.push_str(&format!(
                "# HELP {name} Help \"{family}\".\n# TYPE {name} {kind}\n# UNIT {name} seconds\n"
            ));
            for series in 0..1 + family % 4 {
                let value = if family == 201 { changed_value } else { 7 };
                text.push_str(&format!("{name}{{c=\"{series}\"}} {value}\n"));
            }
        }
        Bytes::from(text)
    }

    #[test]
    fn openmetrics_converted_by_segment_equals_the_whole_text_converted() {
        use super::super::encode::to_openmetrics;
        let first = short_families(1);
        // No segment starts inside a family's comments.
        for cut in segments(&first) {
            let segment = &first[cut];
            assert!(
                !segment.starts_with(b"#") || segment.starts_with(b"# HELP "),
                "{}",
                String::from_utf8_lossy(&segment[..40])
            );
        }
        let mut last = Segments::default();
        let compressed = GzipPrefix::new(&first, Some(to_openmetrics), None, &mut last).unwrap();
        assert_eq!(
            decoded(&compressed, b"# EOF\n"),
            [&to_openmetrics(&first)[..], b"# EOF\n"].concat()
        );
        let before = last.deflated_at();

        // One value changed: one segment converted and compressed again, the rest copied.
        let second = short_families(123_456);
        let compressed = GzipPrefix::new(&second, Some(to_openmetrics), None, &mut last).unwrap();
        assert_eq!(decoded(&compressed, b""), to_openmetrics(&second));
        let after = last.deflated_at();
        assert!(after.len() > 10, "{}", after.len());
        assert_eq!(after.intersection(&before).count() + 1, after.len());
    }

    /// The measurement behind docs/PERFORMANCE.md's figure for compressed OpenMetrics
    /// (`cargo test --release -p relay-metrics --lib gzip::tests::bench -- --ignored
    /// --nocapture`): a body of 20,000 series, one value changed from body to body, compressed as
    /// OpenMetrics by converting the whole text first and by converting changed segments only,
    /// alternated, medians of 61 rounds each; then the same body cut into segments by searching
    /// and line by line. With `BENCH_BODY=<file>` (a saved `/metrics` body of the agent) that
    /// body is compressed each round instead, unchanged: the steady state of an idle node.
    #[test]
    #[ignore = "a measurement: run with --release --nocapture"]
    fn bench_openmetrics_by_segment_against_the_whole_text_converted() {
        use super::super::encode::to_openmetrics;
        let bodies = match std::env::var_os("BENCH_BODY") {
            Some(path) => {
                let body = Bytes::from(std::fs::read(path).unwrap());
                [body.clone(), body]
            }
            None => [text(1), text(2)],
        };
        let (mut whole_last, mut by_segment_last) = (Segments::default(), Segments::default());
        let (mut whole, mut by_segment) = (Vec::new(), Vec::new());
        let median = |mut samples: Vec<f64>| {
            samples.sort_by(f64::total_cmp);
            samples[samples.len() / 2]
        };
        for round in 0..63 {
            let body = &bodies[round % 2];
            let start = std::time::Instant::now();
            let converted = Bytes::from(to_openmetrics(body));
            let a = GzipPrefix::new(&converted, None, None, &mut whole_last).unwrap();
            let a_seconds = start.elapsed().as_secs_f64();
            let start = std::time::Instant::now();
            let b =
                GzipPrefix::new(body, Some(to_openmetrics), None, &mut by_segment_last).unwrap();
            let b_seconds = start.elapsed().as_secs_f64();
            // The first two rounds fill the segment caches.
            if round >= 2 {
                whole.push(a_seconds);
                by_segment.push(b_seconds);
            }
            assert_eq!(decoded(&a, b""), decoded(&b, b""));
        }
        let (mut searched, mut line_by_line) = (Vec::new(), Vec::new());
        for _ in 0..61 {
            let start = std::time::Instant::now();
            let cuts = segments(&bodies[0]).count();
            searched.push(start.elapsed().as_secs_f64());
            let start = std::time::Instant::now();
            assert_eq!(segments_line_by_line(&bodies[0]).len(), cuts);
            line_by_line.push(start.elapsed().as_secs_f64());
        }
        eprintln!(
            "cutting into segments: searched {:.0} µs, line by line {:.0} µs (medians of 61)",
            median(searched) * 1e6,
            median(line_by_line) * 1e6,
        );
        let rounds = whole.len();
        eprintln!(
            "{} bytes: whole text converted {:.0} µs, by segment {:.0} µs (medians of {rounds})",
            bodies[0].len(),
            median(whole) * 1e6,
            median(by_segment) * 1e6,
        );
    }

    /// The cut rule of [`segments`] applied line by line: the oracle for its searches.
    fn segments_line_by_line(body: &[u8]) -> Vec<Range<usize>> {
        let mut cuts = Vec::new();
        let mut start = 0;
        while start < body.len() {
            let (mut end, mut lines) = (start, 0);
            let cut = loop {
                let Some(at) = memchr::memchr(b'\n', &body[end..]) else {
                    break body.len();
                };
                end += at + 1;
                lines += 1;
                let next = &body[end..];
                let family_starts = next.starts_with(b"# HELP ");
                let inside_comments = next.starts_with(b"#") && !family_starts;
                if (lines >= LINES_PER_SEGMENT && !inside_comments)
                    || (family_starts && end - start >= MIN_SEGMENT)
                {
                    break end;
                }
            };
            cuts.push(start..cut);
            start = cut;
        }
        cuts
    }

    #[test]
    fn segments_found_by_searching_equal_the_rule_applied_line_by_line() {
        let mut bodies = vec![
            text(1),
            short_families(1),
            Bytes::from_static(b""),
            Bytes::from_static(b"\n\n\n"),
            Bytes::from_static(b"no line end"),
            Bytes::from_static(b"# HELP a x\n# TYPE a gauge\na 1"),
        ];
        // Families of every length from 0 to 300 series, lines of varied lengths, comments that
        // are not a family's, and a body that ends inside a family's comments.
        let mut varied = String::new();
        for family in 0..300 {
            varied.push_str(&format!("# HELP v{family} h\n# TYPE v{family} gauge\n"));
            if family % 7 == 0 {
                varied.push_str("# a comment of no family\n");
            }
            for series in 0..family {
                let pad = "x".repeat((family * 31 + series * 17) % 90);
                varied.push_str(&format!("v{family}{{p=\"{pad}\"}} {series}\n"));
            }
        }
        varied.push_str("# HELP end h\n# TYPE end gauge");
        bodies.push(Bytes::from(varied));
        for body in &bodies {
            let found: Vec<_> = segments(body).collect();
            assert_eq!(found, segments_line_by_line(body), "{} bytes", body.len());
        }
    }

    #[test]
    fn segments_that_share_their_key_are_each_compressed_right() {
        // The same families twice: every segment of the second half has the key of one of the
        // first half's, which the first half takes.
        let half = text(1);
        let body = Bytes::from([&half[..], &half[..]].concat());
        let mut last = Segments::default();
        for _ in 0..3 {
            let compressed = GzipPrefix::new(&body, None, None, &mut last).unwrap();
            assert_eq!(decoded(&compressed, b""), &body[..]);
        }
    }

    #[test]
    fn an_empty_body_and_a_body_of_one_line_without_its_end_compress() {
        for body in [Bytes::new(), Bytes::from_static(b"no line end")] {
            let compressed = GzipPrefix::new(&body, None, None, &mut Segments::default()).unwrap();
            assert_eq!(
                decoded(&compressed, b"end\n"),
                [&body[..], b"end\n"].concat()
            );
        }
    }
}
