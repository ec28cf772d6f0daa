//! Prometheus text exposition (format 0.0.4) of a snapshot: the families of
//! [`super::metrics`], each series labelled with the snapshot's `scope`.

use std::fmt::Write;

use super::metrics::{self, Family, Kind, Sink};
use crate::snapshot::ResourceMetricsSnapshot;

/// Prometheus's content type for this format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Writes the exposition: a HELP and TYPE header per family, then one line per series.
struct Text<'o> {
    out: &'o mut String,
    scope: &'static str,
}

impl Sink for Text<'_> {
    fn begin(&mut self, family: &Family) {
        let kind = match family.kind {
            Kind::Gauge => "gauge",
            Kind::Counter => "counter",
        };
        let _ = writeln!(self.out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(self.out, "# TYPE {} {}", family.name, kind);
    }

    fn point(&mut self, family: &Family, labels: &[(&str, &str)], value: f64) {
        let _ = write!(self.out, "{}{{scope=\"{}\"", family.name, self.scope);
        for (key, label_value) in labels {
            let _ = write!(self.out, ",{key}=\"");
            escape_label(self.out, label_value);
            self.out.push('"');
        }
        let _ = writeln!(self.out, "}} {value}");
    }
}

/// Label values escape backslash, double quote and newline.
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes the exposition of `snapshot` into `out` (cleared first).
pub fn encode(snapshot: &ResourceMetricsSnapshot, out: &mut String) {
    out.clear();
    let scope = metrics::scope_name(snapshot.measurement_scope);
    metrics::walk(snapshot, &mut Text { out, scope });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_family_is_announced_once_and_label_values_are_escaped() {
        let mut out = String::new();
        let mut text = Text {
            out: &mut out,
            scope: "global",
        };
        let family = Family {
            name: "m_bytes",
            kind: Kind::Gauge,
            help: "help",
        };
        text.begin(&family);
        text.point(&family, &[("path", "/a \"b\"\\c\n")], 1.0);
        text.point(&family, &[], 2.5);
        assert_eq!(
            out,
            "# HELP m_bytes help\n# TYPE m_bytes gauge\n\
             m_bytes{scope=\"global\",path=\"/a \\\"b\\\"\\\\c\\n\"} 1\n\
             m_bytes{scope=\"global\"} 2.5\n"
        );
    }
}
