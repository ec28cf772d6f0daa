//! Usage errors exit 2 (the convention) with a one-line error first, then clap's usage; other
//! errors are one line and exit 1.

mod common;

fn assert_usage_error(args: &[&str], message: &str) {
    let output = common::relay_metrics(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(output.stdout.is_empty(), "{args:?}");
    let first = stderr.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("error: ") && first.contains(message),
        "{args:?}: first line {first:?}"
    );
    // The next line is blank: the message is one line.
    assert_eq!(stderr.lines().nth(1), Some(""), "{args:?}: {stderr}");
}

#[test]
fn usage_errors_exit_2_with_a_one_line_error_first() {
    assert_usage_error(&["snapshot", "--bogus"], "unexpected argument '--bogus'");
    assert_usage_error(
        &["watch", "--interval-ms", "86400001"],
        "expected whole milliseconds from 1 to 86400000 (one day)",
    );
    assert_usage_error(&["snapshot", "--interval-ms", "0"], "from 1 to 86400000");
    // clap writes this one over two lines.
    assert_usage_error(
        &["run"],
        "the following required arguments were not provided: <CMD>...",
    );
}

#[test]
fn other_errors_are_one_line_and_exit_1() {
    let output = common::relay_metrics(&["snapshot", "--config", "/nonexistent/relay.json"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("relay-metrics: error: cannot read config file"),
        "{stderr}"
    );
}
