//! `relay-metrics report`: a self-contained HTML report (the run summary and charts over time)
//! of a `run` or `watch` NDJSON stream, or the charts alone as SVG or PNG.

use std::io::BufReader;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};

use relay_metrics::report::{ChartFormat, ReportBuilder};
use relay_metrics::summary::{Baseline, RunEnd};

#[derive(Args)]
pub(crate) struct ReportArgs {
    /// The snapshots: NDJSON written by `run` or `watch` (`-` reads stdin, e.g. a live `watch`).
    #[arg(value_name = "RUN.ndjson")]
    input: PathBuf,
    /// Where to write the report.
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// html: the summary table and the charts, one self-contained file (no script, no network);
    /// svg, png: the charts alone. Default: from the output's extension, else html.
    #[arg(long, value_enum)]
    format: Option<Format>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Html,
    Svg,
    Png,
}

/// The format `--format` names, else the output's extension, else HTML.
fn format_of(format: Option<Format>, output: &Path) -> ChartFormat {
    let format = format.or_else(|| {
        match output
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("svg") => Some(Format::Svg),
            Some("png") => Some(Format::Png),
            _ => None,
        }
    });
    match format {
        Some(Format::Svg) => ChartFormat::Svg,
        Some(Format::Png) => ChartFormat::Png,
        Some(Format::Html) | None => ChartFormat::Html,
    }
}

/// Reads the stream and writes the report; returns the exit code.
pub(crate) fn run(args: ReportArgs) -> Result<i32> {
    let mut builder = ReportBuilder::for_stream(Baseline::FirstSample);
    let name = args.input.display().to_string();
    if args.input.as_os_str() == "-" {
        builder.read_ndjson(std::io::stdin().lock())
    } else {
        let file =
            std::fs::File::open(&args.input).with_context(|| format!("cannot open {name}"))?;
        builder.read_ndjson(BufReader::with_capacity(1 << 20, file))
    }
    .with_context(|| format!("cannot read {name}"))?;
    let report = builder
        .finish(RunEnd::default())
        .with_context(|| name.clone())?;
    let output = &args.output;
    let written = match format_of(args.format, output) {
        ChartFormat::Html => report
            .to_html()
            .map_err(anyhow::Error::from)
            .and_then(|html| std::fs::write(output, html).map_err(Into::into)),
        ChartFormat::Svg => report
            .to_svg()
            .map_err(anyhow::Error::from)
            .and_then(|svg| std::fs::write(output, svg).map_err(Into::into)),
        ChartFormat::Png => std::fs::File::create(output)
            .map_err(anyhow::Error::from)
            .and_then(|file| {
                let mut file = std::io::BufWriter::new(file);
                report.write_png(&mut file)?;
                std::io::Write::flush(&mut file)?;
                Ok(())
            }),
    };
    written.with_context(|| format!("cannot write {}", output.display()))?;
    Ok(0)
}
