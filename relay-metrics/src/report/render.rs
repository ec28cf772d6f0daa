//! Drawing the report with plotters: one chart per group of series, the limit events as markers
//! on the time axis, and the HTML page around them.

use std::fmt::Write as _;
use std::sync::OnceLock;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;

use super::{Marker, Report, ReportError, Series};
use crate::summary::RunSummary;

/// A chart of seconds since the start against a value.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// What `--format` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChartFormat {
    /// The page: the summary table and the charts (inline SVG), self-contained.
    Html,
    /// The charts alone, one SVG image.
    Svg,
    /// The charts alone, one PNG image.
    Png,
}

/// Width of a chart in pixels.
const WIDTH: u32 = 1000;
/// Height of one chart.
const CHART_HEIGHT: u32 = 240;

const FONT: &str = "sans-serif";

/// One chart: a title, the y axis's label and scale, and its series with their names.
struct ChartSpec {
    title: &'static str,
    y_label: &'static str,
    /// Divides the stored base-unit values (bytes → MiB).
    scale: f64,
    series: &'static [(Series, &'static str)],
}

const MIB: f64 = 1024.0 * 1024.0;

const CHARTS: [ChartSpec; 7] = [
    ChartSpec {
        title: "CPU",
        y_label: "cores",
        scale: 1.0,
        series: &[(Series::Cores, "CPU use (the summary's source)")],
    },
    ChartSpec {
        title: "Resident memory and memory charged to the cgroup",
        y_label: "MiB",
        scale: MIB,
        series: &[
            (Series::Resident, "resident (processes' sum)"),
            (
                Series::CgroupMemory,
                "charged to the cgroup (page cache included)",
            ),
        ],
    },
    ChartSpec {
        title: "Storage I/O",
        y_label: "MiB/s",
        scale: MIB,
        series: &[(Series::DiskRead, "read"), (Series::DiskWrite, "write")],
    },
    ChartSpec {
        title: "Network, whole machine (every interface, not the scope alone)",
        y_label: "MiB/s",
        scale: MIB,
        series: &[
            (Series::NetReceive, "receive"),
            (Series::NetTransmit, "transmit"),
        ],
    },
    ChartSpec {
        title: "GPU utilisation",
        y_label: "%",
        scale: 1.0,
        series: &[(Series::GpuUtilization, "highest device")],
    },
    ChartSpec {
        title: "GPU memory",
        y_label: "MiB",
        scale: MIB,
        series: &[(Series::GpuMemory, "all devices")],
    },
    ChartSpec {
        title: "Processes",
        y_label: "processes",
        scale: 1.0,
        series: &[(Series::Processes, "in scope")],
    },
];

/// The rows of the limit-event chart. The first [`ALWAYS_SHOWN`] always have a row (an empty
/// row says that none happened); the GPU rows only where such an event happened.
const MARKERS: [(Marker, &str, RGBColor); 5] = [
    (Marker::Throttling, "CPU throttling", RGBColor(230, 120, 0)),
    (Marker::OomKill, "OOM kill", RGBColor(200, 0, 0)),
    (Marker::Pressure, "pressure > 10 %", RGBColor(120, 0, 160)),
    (
        Marker::GpuThrottling,
        "GPU throttling",
        RGBColor(0, 140, 140),
    ),
    (Marker::Xid, "GPU XID error", RGBColor(60, 60, 60)),
];

const ALWAYS_SHOWN: usize = 3;

const COLORS: [RGBColor; 2] = [RGBColor(31, 119, 180), RGBColor(214, 39, 40)];

/// Registers the font plotters lays text out with (shipped in the binary: no fontconfig).
fn register_font() -> Result<(), ReportError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let registered = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    if registered {
        Ok(())
    } else {
        Err(ReportError::Draw("the embedded font cannot be read".into()))
    }
}

fn draw_error(error: impl std::fmt::Display) -> ReportError {
    ReportError::Draw(error.to_string())
}

/// The share of a chart's height above the highest value, where the legend goes: the data
/// stay below it.
const LEGEND_HEADROOM: f64 = 1.45;

/// The chart's legend, in its upper right corner (above the data: see [`LEGEND_HEADROOM`]).
fn draw_legend<'a, DB: DrawingBackend + 'a>(chart: &mut Chart<'a, DB>) -> Result<(), ReportError> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK.mix(0.3))
        .label_font((FONT, 12))
        .draw()
        .map_err(draw_error)?;
    Ok(())
}

impl Report {
    /// The charts that have data (an empty chart is not drawn: the page names it).
    fn charts(&self) -> Vec<&'static ChartSpec> {
        CHARTS
            .iter()
            .filter(|chart| self.chart_has_data(chart))
            .collect()
    }

    /// The titles of the charts without data, GPU ones only where a GPU was seen.
    fn empty_charts(&self) -> Vec<&'static str> {
        CHARTS
            .iter()
            .filter(|chart| !self.chart_has_data(chart))
            .filter(|chart| !matches!(chart.title, "GPU utilisation" | "GPU memory"))
            .map(|chart| chart.title)
            .collect()
    }

    fn chart_has_data(&self, chart: &ChartSpec) -> bool {
        chart
            .series
            .iter()
            .any(|(series, _)| self.has_data(*series))
    }

    fn has_data(&self, series: Series) -> bool {
        self.columns
            .iter()
            .any(|column| !column.max[series as usize].is_nan())
    }

    fn x_end_s(&self) -> f64 {
        (self.end_ms / 1000.0).max(0.001)
    }

    /// Column `i`'s time (s since the first snapshot), at its middle.
    fn column_time(&self, i: usize) -> f64 {
        ((i as f64 + 0.5) * self.width_ms / 1000.0).min(self.x_end_s())
    }

    /// Min/max per column as one polyline: vertical strokes keep every peak visible.
    fn points(&self, series: Series, scale: f64) -> Vec<(f64, f64)> {
        let i = series as usize;
        let mut points = Vec::with_capacity(self.columns.len() * 2);
        for (index, column) in self.columns.iter().enumerate() {
            if column.max[i].is_nan() {
                continue;
            }
            let x = self.column_time(index);
            points.push((x, column.min[i] / scale));
            if column.max[i] > column.min[i] {
                points.push((x, column.max[i] / scale));
            }
        }
        points
    }

    fn draw_chart<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
        spec: &ChartSpec,
    ) -> Result<(), ReportError> {
        let lines: Vec<(Vec<(f64, f64)>, &str)> = spec
            .series
            .iter()
            .map(|(series, name)| (self.points(*series, spec.scale), *name))
            .filter(|(points, _)| !points.is_empty())
            .collect();
        let y_max = lines
            .iter()
            .flat_map(|(points, _)| points.iter().map(|p| p.1))
            .fold(0.0f64, f64::max);
        let y_max = if y_max > 0.0 {
            y_max * LEGEND_HEADROOM
        } else {
            1.0
        };
        let caption = if lines.is_empty() {
            format!("{} (no data in the snapshots)", spec.title)
        } else {
            spec.title.to_owned()
        };
        let mut chart = ChartBuilder::on(area)
            .caption(caption, (FONT, 18))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..self.x_end_s(), 0f64..y_max)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("time since start (s)")
            .y_desc(spec.y_label)
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .draw()
            .map_err(draw_error)?;
        for (index, (points, name)) in lines.into_iter().enumerate() {
            let color = COLORS[index % COLORS.len()];
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(1)))
                .map_err(draw_error)?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
        }
        self.draw_marker_lines(&mut chart, y_max)?;
        draw_legend(&mut chart)
    }

    /// OOM kills as thin vertical lines across a chart.
    fn draw_marker_lines<DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'_, DB>,
        y_max: f64,
    ) -> Result<(), ReportError> {
        let color = MARKERS[1].2;
        let lines = self
            .columns
            .iter()
            .enumerate()
            .filter(|(_, column)| column.markers & Marker::OomKill as u8 != 0)
            .map(|(i, _)| {
                let x = self.column_time(i);
                PathElement::new(vec![(x, 0.0), (x, y_max)], color.mix(0.6).stroke_width(1))
            });
        chart.draw_series(lines).map_err(draw_error)?;
        Ok(())
    }

    /// The rows of the limit-event chart: the CPU and memory kinds, then the GPU kinds that
    /// happened.
    fn marker_rows(&self) -> Vec<(Marker, &'static str, RGBColor)> {
        let seen = self
            .columns
            .iter()
            .fold(0u8, |seen, column| seen | column.markers);
        MARKERS
            .iter()
            .enumerate()
            .filter(|(row, (marker, _, _))| *row < ALWAYS_SHOWN || seen & *marker as u8 != 0)
            .map(|(_, row)| *row)
            .collect()
    }

    /// The limit events on the time axis: one row per kind.
    fn draw_events<DB: DrawingBackend>(
        &self,
        area: &DrawingArea<DB, Shift>,
    ) -> Result<(), ReportError> {
        let rows = self.marker_rows();
        let mut chart = ChartBuilder::on(area)
            .caption("Limit events", (FONT, 18))
            .margin(10)
            .x_label_area_size(38)
            .y_label_area_size(150)
            .build_cartesian_2d(0f64..self.x_end_s(), 0f64..rows.len() as f64)
            .map_err(draw_error)?;
        chart
            .configure_mesh()
            .x_desc("time since start (s)")
            .y_labels(2 * rows.len() + 1)
            .y_label_formatter(&|y| {
                rows.get(y.floor() as usize)
                    .filter(|_| (y.fract() - 0.5).abs() < 0.26)
                    .map(|(marker, name, _)| format!("{name} ({})", self.marker_columns(*marker)))
                    .unwrap_or_default()
            })
            .label_style((FONT, 12))
            .axis_desc_style((FONT, 13))
            .disable_y_mesh()
            .draw()
            .map_err(draw_error)?;
        // Each row is named, with its count of columns, on the axis: no legend over the marks.
        for (row, (marker, _, color)) in rows.iter().enumerate() {
            let y = row as f64 + 0.5;
            let points: Vec<(f64, f64)> = self
                .columns
                .iter()
                .enumerate()
                .filter(|(_, column)| column.markers & *marker as u8 != 0)
                .map(|(i, _)| (self.column_time(i), y))
                .collect();
            let color = *color;
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(move |(x, y)| TriangleMarker::new((x, y), 6, color.filled())),
                )
                .map_err(draw_error)?;
        }
        Ok(())
    }

    /// The time columns with `marker`.
    fn marker_columns(&self, marker: Marker) -> usize {
        self.columns
            .iter()
            .filter(|column| column.markers & marker as u8 != 0)
            .count()
    }

    /// Every chart stacked on one drawing area.
    fn draw_all<DB: DrawingBackend>(
        &self,
        root: DrawingArea<DB, Shift>,
    ) -> Result<(), ReportError> {
        register_font()?;
        root.fill(&WHITE).map_err(draw_error)?;
        let charts = self.charts();
        let areas = root.split_evenly((charts.len() + 1, 1));
        for (area, spec) in areas.iter().zip(&charts) {
            self.draw_chart(area, spec)?;
        }
        if let Some(area) = areas.last() {
            self.draw_events(area)?;
        }
        root.present().map_err(draw_error)?;
        Ok(())
    }

    fn stacked_size(&self) -> (u32, u32) {
        let count = u32::try_from(self.charts().len() + 1).unwrap_or(1);
        (WIDTH, CHART_HEIGHT * count)
    }

    /// The charts alone, as one SVG document.
    pub fn to_svg(&self) -> Result<String, ReportError> {
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, self.stacked_size()).into_drawing_area();
            self.draw_all(root)?;
        }
        Ok(svg)
    }

    /// The charts alone, as a PNG image written to `out`.
    pub fn write_png(&self, out: impl std::io::Write) -> Result<(), ReportError> {
        let (width, height) = self.stacked_size();
        let mut pixels = vec![0u8; width as usize * height as usize * 3];
        {
            let root = BitMapBackend::with_buffer(&mut pixels, (width, height)).into_drawing_area();
            self.draw_all(root)?;
        }
        let mut encoder = png::Encoder::new(out, width, height);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(draw_error)?;
        writer.write_image_data(&pixels).map_err(draw_error)?;
        writer.finish().map_err(draw_error)?;
        Ok(())
    }

    /// The self-contained HTML page: title, summary table, one inline SVG per chart. No
    /// script, no external resource.
    pub fn to_html(&self) -> Result<String, ReportError> {
        register_font()?;
        let mut charts = Vec::new();
        for spec in self.charts() {
            let mut svg = String::new();
            {
                let root =
                    SVGBackend::with_string(&mut svg, (WIDTH, CHART_HEIGHT)).into_drawing_area();
                root.fill(&WHITE).map_err(draw_error)?;
                self.draw_chart(&root, spec)?;
                root.present().map_err(draw_error)?;
            }
            charts.push((spec.title, svg));
        }
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, CHART_HEIGHT)).into_drawing_area();
            root.fill(&WHITE).map_err(draw_error)?;
            self.draw_events(&root)?;
            root.present().map_err(draw_error)?;
        }
        charts.push(("Limit events", svg));
        Ok(page(
            &self.summary,
            &charts,
            &self.empty_charts(),
            self.columns.len(),
        ))
    }
}

/// Escapes text for HTML.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The summary as an HTML table (also the Python `_repr_html_` of a summary).
pub(super) fn summary_table(summary: &RunSummary) -> String {
    let mut html = String::from("<table class=\"summary\">\n");
    for (label, value, comment) in summary.rows() {
        let _ = writeln!(
            html,
            "<tr><th>{}</th><td class=\"value\">{}</td><td class=\"comment\">{}</td></tr>",
            escape(label),
            escape(value.as_deref().unwrap_or("n/a")),
            escape(&comment)
        );
    }
    html.push_str("</table>\n");
    if !summary.warnings.is_empty() {
        html.push_str("<div class=\"warnings\"><strong>Warnings</strong><ul>\n");
        for warning in &summary.warnings {
            let _ = writeln!(html, "<li>{}</li>", escape(warning));
        }
        html.push_str("</ul></div>\n");
    }
    if !summary.unknown.is_empty() {
        html.push_str("<details><summary>Why some values are n/a</summary><ul>\n");
        for entry in &summary.unknown {
            let _ = writeln!(
                html,
                "<li><code>{}</code>: {}</li>",
                escape(&entry.field),
                escape(&entry.reason)
            );
        }
        html.push_str("</ul></details>\n");
    }
    html
}

fn page(summary: &RunSummary, charts: &[(&str, String)], empty: &[&str], columns: usize) -> String {
    let title = match &summary.command {
        Some(command) => format!("relay-metrics report: {command}"),
        None => "relay-metrics report".to_owned(),
    };
    let mut html = String::with_capacity(charts.iter().map(|c| c.1.len()).sum::<usize>() + 8192);
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <title>{title}</title>\n<style>\n\
         body {{ font-family: sans-serif; margin: 2em; color: #222; }}\n\
         table.summary {{ border-collapse: collapse; margin-bottom: 1.5em; }}\n\
         table.summary th {{ text-align: left; padding: 2px 1em 2px 0; font-weight: normal; }}\n\
         table.summary td.value {{ text-align: right; font-variant-numeric: tabular-nums; padding: 2px 1em; }}\n\
         table.summary td.comment {{ color: #666; }}\n\
         figure {{ margin: 0 0 1em 0; }}\n\
         </style>\n</head>\n<body>\n<h1>{title}</h1>\n",
        title = escape(&title)
    );
    let scope = summary
        .measurement_scope
        .map(|s| s.as_str())
        .unwrap_or("unknown");
    let span = match (summary.started, summary.ended) {
        (Some(start), Some(end)) => format!("{} to {}", start.to_rfc3339(), end.to_rfc3339()),
        _ => String::new(),
    };
    let _ = writeln!(
        html,
        "<p>Scope: {}. {}. {} samples; charts show the minimum and maximum of each of {} time columns.</p>",
        escape(scope),
        escape(&span),
        summary.sampling.samples,
        columns
    );
    html.push_str("<h2>Summary</h2>\n");
    html.push_str(&summary_table(summary));
    html.push_str("<h2>Over time</h2>\n");
    if !empty.is_empty() {
        let _ = writeln!(
            html,
            "<p class=\"empty\">No data in the snapshots for: {}.</p>",
            escape(&empty.join(", "))
        );
    }
    for (title, svg) in charts {
        let _ = writeln!(
            html,
            "<figure class=\"chart\" aria-label=\"{}\">\n{}\n</figure>",
            escape(title),
            svg
        );
    }
    html.push_str("</body>\n</html>\n");
    html
}
