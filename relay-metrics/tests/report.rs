//! `relay-metrics report` end to end: a real `run` stream in, the HTML page, SVG and PNG out,
//! GPU limit events as markers, bad input refused with its line number, and the page loaded by
//! headless Chromium.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when the binary or its output is broken"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::relay_metrics;

/// The chart titles and axis labels every report has (no GPU on the test machines: the GPU
/// charts appear only where a GPU was seen).
const TITLES: [&str; 6] = [
    "CPU",
    "Resident memory and memory charged to the cgroup",
    "Storage I/O",
    "Network, whole machine (every interface, not the scope alone)",
    "Processes",
    "Limit events",
];
const AXES: [&str; 4] = ["time since start (s)", "cores", "MiB", "MiB/s"];

/// The limit-event rows that appear only where such an event happened.
const GPU_ROWS: [&str; 2] = ["GPU throttling", "GPU XID error"];

const UUID: &str = "GPU-6a1f0c3e-0000-4000-8000-000000000000";

/// A `run` stream of a shell that starts a few children and burns some CPU: ~0.25 s each
/// (300,000 iterations of dash's loop), so the stream has ~20 lines or more at 20 ms even on
/// an idle machine (30,000 iterations gave 6-8 lines on a busy one, under the 6 needed below).
fn run_stream(dir: &Path) -> PathBuf {
    let stream = dir.join("run.ndjson");
    let output = relay_metrics(&[
        "run",
        "--interval-ms",
        "20",
        "--output",
        stream.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "for n in 1 2 3; do i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done & done; wait",
    ]);
    assert!(output.status.success(), "run failed: {output:?}");
    stream
}

/// `stream` with the GPU limit events of one device added to each line, as the NVML thread
/// writes them: power capping in every period from the fifth line on, XID 79 at the last line
/// (no test machine has a GPU; tests/gpu_fake_nvml drives the collector through the fake
/// library). The lines are put 20 ms apart, so that each is a time column of its own.
fn with_gpu_events(stream: &Path, dir: &Path) -> (PathBuf, u64) {
    let text = std::fs::read_to_string(stream).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        (6..3000).contains(&lines.len()),
        "a run of {} lines",
        lines.len()
    );
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        let mut snapshot: serde_json::Value = serde_json::from_str(line).unwrap();
        let ms = i * 20;
        snapshot["timestamp"] =
            format!("2026-01-01T00:00:{:02}.{:03}Z", ms / 1000, ms % 1000).into();
        let capped = (i as u64).saturating_sub(4);
        let xid = u64::from(i + 1 == lines.len());
        let event = |event: &str, count: u64, seconds: serde_json::Value| {
            serde_json::json!({
                "resource": "gpu", "event": event, "index": 0, "uuid": UUID, "count": count,
                "sampled_periods": if event == "xid" { serde_json::Value::Null } else { (i as u64).into() },
                "throttled_seconds": seconds,
            })
        };
        snapshot["extensions"]["gpu"] = serde_json::json!({
            "devices": [],
            "limit_events": [
                event("power_cap", capped, (capped as f64 * 0.02).into()),
                event("thermal", 0, 0.0.into()),
                event("hw_slowdown", 0, serde_json::Value::Null),
                event("xid", xid, serde_json::Value::Null),
            ],
        });
        out.push_str(&snapshot.to_string());
        out.push('\n');
    }
    let path = dir.join("gpu.ndjson");
    std::fs::write(&path, out).unwrap();
    (path, lines.len() as u64 - 5)
}

/// `relay-metrics report STREAM -o OUT EXTRA…`.
fn report(stream: &Path, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "report",
        stream.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    relay_metrics(&args)
}

#[test]
fn report_writes_a_self_contained_page_and_the_charts_alone() {
    let dir = tempfile::tempdir().unwrap();
    let stream = run_stream(dir.path());
    let html = dir.path().join("report.html");
    let output = report(&stream, &html, &[]);
    assert!(output.status.success(), "report failed: {output:?}");
    let page = std::fs::read_to_string(&html).unwrap();
    for text in TITLES.iter().chain(&AXES) {
        assert!(page.contains(text), "{text} missing from the page");
    }
    assert!(page.contains("wall time") && page.contains("peak resident memory"));
    // Self-contained: no script and no resource from elsewhere (the only URL is the SVG
    // namespace, which is a name, not a fetch).
    assert!(!page.contains("<script"), "the page has a script");
    let without_namespace = page.replace("http://www.w3.org/2000/svg", "");
    for fetch in ["http://", "https://", "src=", "@import", "url("] {
        assert!(!without_namespace.contains(fetch), "the page loads {fetch}");
    }
    assert_eq!(page.matches("<svg").count(), TITLES.len());
    for row in GPU_ROWS {
        assert!(!page.contains(row), "{row} on a page without GPU events");
    }
    assert!(page.contains("CPU throttling (") && page.contains("OOM kill ("));

    let svg = dir.path().join("charts.svg");
    let output = report(&stream, &svg, &[]);
    assert!(output.status.success(), "svg failed: {output:?}");
    let svg = std::fs::read_to_string(svg).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("charged to the cgroup"));
    assert!(!svg.contains("wall time"), "the SVG holds the charts alone");

    let png = dir.path().join("charts.out");
    let output = report(&stream, &png, &["--format", "png"]);
    assert!(output.status.success(), "png failed: {output:?}");
    let (width, height, variance) = png_variance(&png);
    assert_eq!(width, 1000);
    assert!(height >= 6 * 240);
    assert!(variance > 100.0, "the PNG is blank (variance {variance})");
}

#[test]
fn report_marks_gpu_throttling_and_xid_errors_and_lists_them_in_the_summary() {
    let dir = tempfile::tempdir().unwrap();
    let (stream, capped) = with_gpu_events(&run_stream(dir.path()), dir.path());
    let html = dir.path().join("report.html");
    let output = report(&stream, &html, &[]);
    assert!(output.status.success(), "report failed: {output:?}");
    let page = std::fs::read_to_string(&html).unwrap();
    // Each growth marks its line's column; the first line is the baseline. Each row is named
    // with its count on the axis.
    let legend = |name: &str| {
        page.split(&format!("{name} ("))
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {name} legend entry"))
    };
    assert_eq!(legend("GPU throttling"), capped);
    assert_eq!(legend("GPU XID error"), 1);
    assert_eq!(legend("OOM kill"), 0);
    for row in [
        format!("<td class=\"value\">{capped}</td><td class=\"comment\">gpu power_cap on {UUID} (sampling periods, throttled "),
        format!("<td class=\"value\">1</td><td class=\"comment\">gpu xid on {UUID} (XID errors)</td>"),
    ] {
        assert!(page.contains(&row), "no summary row {row}");
    }

    // The charts alone carry the same rows.
    let svg = dir.path().join("charts.svg");
    assert!(report(&stream, &svg, &[]).status.success());
    let svg = std::fs::read_to_string(svg).unwrap();
    for row in GPU_ROWS {
        assert!(
            svg.contains(&format!("{row} (")),
            "{row} missing from the SVG"
        );
    }
}

#[test]
fn report_names_the_bad_line_and_refuses_an_empty_input() {
    let dir = tempfile::tempdir().unwrap();
    let stream = run_stream(dir.path());
    let mut text = std::fs::read_to_string(&stream).unwrap();
    let good_lines = text.lines().count();
    text.push_str("{\"timestamp\": 5}\n");
    let bad = dir.path().join("bad.ndjson");
    std::fs::write(&bad, &text).unwrap();
    let out = dir.path().join("r.html");
    let output = report(&bad, &out, &[]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "line {}: not a relay-metrics snapshot",
            good_lines + 1
        )),
        "{stderr}"
    );
    assert!(!out.exists(), "no report from a bad stream");

    let empty = dir.path().join("empty.ndjson");
    std::fs::write(&empty, "\n\n").unwrap();
    let output = report(&empty, &out, &[]);
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("no snapshot in the input"));
}

/// Width, height and the variance of the grey levels of a PNG.
fn png_variance(path: &Path) -> (u32, u32, f64) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buffer = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buffer).unwrap();
    let channels = info.color_type.samples();
    let pixels = &buffer[..info.buffer_size()];
    let greys: Vec<f64> = pixels
        .chunks(channels)
        .map(|p| {
            p.iter().take(3).map(|&c| f64::from(c)).sum::<f64>() / 3.0_f64.min(channels as f64)
        })
        .collect();
    let mean = greys.iter().sum::<f64>() / greys.len() as f64;
    let variance = greys.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / greys.len() as f64;
    (info.width, info.height, variance)
}

/// Headless Chromium with everything that would reach the network off, and a profile of its own.
fn chromium(profile: &Path, args: &[&str]) -> Output {
    Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .output()
        .expect("chromium runs (scripts/install-deps.sh installs it)")
}

/// The report of `stream` written as `NAME.html` in `dir`, as headless Chromium's DOM of it, and
/// its URL.
fn dom_of_report(stream: &Path, dir: &Path, name: &str) -> (String, String) {
    let html = dir.join(format!("{name}.html"));
    let output = report(stream, &html, &[]);
    assert!(output.status.success(), "report failed: {output:?}");
    let url = format!("file://{}", html.display());
    let dom = chromium(&dir.join(format!("profile-{name}")), &["--dump-dom", &url]);
    assert!(dom.status.success(), "chromium --dump-dom failed: {dom:?}");
    (String::from_utf8_lossy(&dom.stdout).into_owned(), url)
}

#[test]
#[ignore = "tools: chromium"]
fn chromium_renders_the_report_with_its_charts() {
    let dir = tempfile::tempdir().unwrap();
    let stream = run_stream(dir.path());
    let (dom, url) = dom_of_report(&stream, dir.path(), "report");
    assert!(
        dom.contains("<table class=\"summary\">"),
        "no summary table in the DOM"
    );
    for text in TITLES.iter().chain(&AXES) {
        assert!(
            dom.contains(&format!("\n{text}\n</text>")),
            "{text} is not a text element of the DOM"
        );
    }
    for row in GPU_ROWS {
        assert!(!dom.contains(row), "{row} in a page without GPU events");
    }

    // With GPU events: their rows (axis labels) and legend entries are text of the DOM.
    let (gpu_stream, _) = with_gpu_events(&stream, dir.path());
    let (gpu_dom, _) = dom_of_report(&gpu_stream, dir.path(), "gpu");
    for row in GPU_ROWS {
        assert!(
            gpu_dom.contains(&format!("\n{row} (")),
            "{row} is not an axis label of the DOM"
        );
    }

    let shot = dir.path().join("shot.png");
    let output = chromium(
        &dir.path().join("profile-shot"),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1100,2200",
            "--hide-scrollbars",
            &url,
        ],
    );
    assert!(
        output.status.success(),
        "chromium --screenshot failed: {output:?}"
    );
    let (width, height, variance) = png_variance(&shot);
    assert_eq!((width, height), (1100, 2200));
    assert!(
        variance > 100.0,
        "the screenshot is blank (variance {variance})"
    );
}

/// `relay-metrics report` of `text` written as a file in `dir`: its exit status, stderr and
/// the page (empty when none was written).
fn report_of(dir: &Path, name: &str, text: &[u8]) -> (Option<i32>, String, String) {
    let input = dir.join(format!("{name}.ndjson"));
    std::fs::write(&input, text).unwrap();
    let out = dir.join(format!("{name}.html"));
    let output = report(&input, &out, &[]);
    let page = std::fs::read_to_string(&out).unwrap_or_default();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        page,
    )
}

#[test]
fn a_cut_last_line_is_left_out_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let stream = run_stream(dir.path());
    let text = std::fs::read(&stream).unwrap();
    let lines = text
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    // As `head -c`: the last line stops in the middle.
    let last_start = text[..text.len() - 1]
        .iter()
        .rposition(|b| *b == b'\n')
        .unwrap()
        + 1;
    let cut = &text[..last_start + (text.len() - last_start) / 2];
    let (code, stderr, page) = report_of(dir.path(), "cut", cut);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        page.contains(&format!("line {lines}: cut (")),
        "no warning about the cut line"
    );
    assert!(page.contains(&format!("<td class=\"value\">{}</td>", lines - 1)));
    // A bad line before the end is still an error.
    let mut bad = text[..last_start].to_vec();
    bad.extend_from_slice(b"{\"timestamp\": 5}\n");
    bad.extend_from_slice(&text[last_start..]);
    let (code, stderr, _) = report_of(dir.path(), "bad", &bad);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains(&format!("line {lines}: not a relay-metrics snapshot")),
        "{stderr}"
    );
}

#[test]
fn odd_streams_give_warnings_and_no_impossible_figure() {
    // Issue 33, item 6: a timestamp 57 years back printed "at +-1796432405.000 s", and a
    // counter that fell and then jumped printed "peak cores 10000542.43" on a 2-core machine.
    let dir = tempfile::tempdir().unwrap();
    let stream = run_stream(dir.path());
    let text = std::fs::read_to_string(&stream).unwrap();
    let mut lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let n = lines.len();
    assert!(n >= 6, "{n} lines");
    let cumulative = |line: &mut serde_json::Value| line["extensions"]["cumulative"].clone();
    let cpu = cumulative(&mut lines[n / 2])["cpu_user_ns"]
        .as_u64()
        .unwrap();
    lines[n / 2]["extensions"]["cumulative"]["cpu_user_ns"] = 0.into();
    lines[n / 2 + 1]["extensions"]["cumulative"]["cpu_user_ns"] =
        (cpu + 10_000_000_000_000_000).into();
    lines[2]["timestamp"] = "1970-01-01T00:00:00Z".into();
    let odd: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let (code, stderr, page) = report_of(dir.path(), "odd", odd.as_bytes());
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        page.contains("timestamps go backwards 1 time(s)"),
        "no warning about time"
    );
    assert!(page.contains("counters fell"), "no warning about the fall");
    assert!(!page.contains("+-"), "a negative offset");
    // The run spans from the first line to the latest, not from 1970.
    let wall = page
        .split("<th>wall time</th><td class=\"value\">")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|value| value.parse::<f64>().ok())
        .expect("a wall time in seconds");
    assert!(wall < 60.0, "wall time {wall} s");
    let peak = page
        .split("<th>peak cores</th><td class=\"value\">")
        .nth(1)
        .and_then(|rest| rest.split('<').next())
        .and_then(|value| value.parse::<f64>().ok())
        .expect("a peak cores value");
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(peak <= cpus, "peak cores {peak} on {cpus} CPUs");
}

#[test]
fn deep_nesting_in_a_line_fails_fast() {
    // Issue 33: every structured input is refused quickly however it nests (a line of 8 MiB
    // of brackets, under the 16 MiB line limit), in a known key and in one the report skips.
    let dir = tempfile::tempdir().unwrap();
    for (name, prefix) in [("known", "{\"cpu\":"), ("skipped", "{\"other\":")] {
        let depth = 4 << 20;
        let mut line = String::from(prefix);
        line.push_str(&"[".repeat(depth));
        line.push_str(&"]".repeat(depth));
        line.push_str("}\n");
        let started = std::time::Instant::now();
        let (code, stderr, _) = report_of(dir.path(), name, line.as_bytes());
        let took = started.elapsed();
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains("line 1:"), "{stderr}");
        assert!(took < std::time::Duration::from_secs(2), "{name}: {took:?}");
    }
}
