//! The helpers every values table's test uses: fill a struct with a different number in each
//! value through its JSON, list the numbers of a JSON, hold a table to both, render its block of
//! docs/METRICS.md.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::{ValueRow, ValueUnit};

/// `template` with every `null` or number of its JSON (outside the paths `is_text` names) a
/// different number, read back through serde; with that JSON. A table's test fills its struct
/// this way so that a field added to the struct is filled without editing the test. The items
/// of a list are filled too (path `list[]`), so a template gives a list one item where its
/// numbers are to be counted.
pub(crate) fn distinct<T: Serialize + DeserializeOwned>(
    template: &T,
    is_text: fn(&str) -> bool,
) -> (T, Value) {
    let mut json = serde_json::to_value(template).unwrap();
    let mut next = 0u64;
    fill(&mut json, "", is_text, &mut next);
    let value: T = serde_json::from_value(json.clone()).unwrap();
    (value, json)
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn fill(value: &mut Value, path: &str, is_text: fn(&str) -> bool, next: &mut u64) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                fill(child, &child_path(path, key), is_text, next);
            }
        }
        Value::Array(items) => {
            for item in items {
                fill(item, &format!("{path}[]"), is_text, next);
            }
        }
        Value::Null | Value::Number(_) if !is_text(path) => {
            *next += 1;
            *value = Value::from(*next);
        }
        _ => {}
    }
}

/// Every number's path in `json` (an item of a list: `list[]`, `list[].key`), with its value.
pub(crate) fn numeric_paths(value: &Value, path: &str, out: &mut Vec<(String, f64)>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                numeric_paths(child, &child_path(path, key), out);
            }
        }
        Value::Array(items) => {
            for item in items {
                numeric_paths(item, &format!("{path}[]"), out);
            }
        }
        Value::Number(n) => out.push((path.to_owned(), n.as_f64().unwrap())),
        _ => {}
    }
}

/// Holds a table to its struct: `value` is the struct filled by [`distinct`] and `json` its
/// JSON; every number of the JSON has one row and that row reads it, and every row names a
/// number of the JSON. `what` names the struct, `home` the table's file.
pub(crate) fn assert_rows_read_their_paths<'r, T: 'r>(
    rows: impl IntoIterator<Item = &'r ValueRow<T>>,
    value: &T,
    json: &Value,
    what: &str,
    home: &str,
) {
    let rows: Vec<_> = rows.into_iter().collect();
    let mut paths = Vec::new();
    numeric_paths(json, "", &mut paths);
    assert!(!paths.is_empty(), "{what}: no number in {json}");
    for (path, number) in &paths {
        let found: Vec<_> = rows.iter().filter(|row| row.json_path == path).collect();
        assert_eq!(
            found.len(),
            1,
            "{path} is a number of {what} with {} rows in its values table \
             (relay-metrics/src/snapshot/{home}): want 1",
            found.len()
        );
        assert_eq!(
            (found[0].read)(value),
            Some(*number),
            "the row of {path} (snapshot/{home}) reads another value"
        );
    }
    for row in rows {
        assert!(
            paths.iter().any(|(path, _)| path == row.json_path),
            "{} (snapshot/{home}) is no number of the JSON of {what}",
            row.json_path
        );
    }
}

/// The unit as docs/METRICS.md writes it.
fn unit_name(unit: ValueUnit) -> &'static str {
    match unit {
        ValueUnit::Nanoseconds => "ns",
        ValueUnit::Microseconds => "µs",
        ValueUnit::Milliseconds => "ms",
        ValueUnit::Seconds => "s",
        ValueUnit::Bytes => "bytes",
        ValueUnit::Kibibytes => "KiB",
        ValueUnit::BytesPerSecond => "bytes/s",
        ValueUnit::Cores => "logical processors",
        ValueUnit::Percent => "%",
        ValueUnit::Watts => "W",
        ValueUnit::Joules => "J",
        ValueUnit::Celsius => "°C",
        ValueUnit::Hertz => "Hz",
        ValueUnit::Count => "count",
        ValueUnit::Identifier => "identifier",
    }
}

/// A values table as docs/METRICS.md lists it: `(JSON key, unit, source)` per row, the key
/// written as given.
pub(crate) fn rendered_doc_table<'r>(
    rows: impl Iterator<Item = (String, ValueUnit, &'r str)>,
) -> String {
    let mut table = String::from("\n\n| JSON key | unit | source |\n| --- | --- | --- |\n");
    for (key, unit, source) in rows {
        table.push_str(&format!(
            "| `{key}` | {} | {} |\n",
            unit_name(unit),
            source.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    table.push('\n');
    table
}

/// Fails, printing the block to paste, unless docs/METRICS.md has `table` (from
/// [`rendered_doc_table`]); `what` names the table and `home` its file.
pub(crate) fn assert_docs_metrics_md_has(table: &str, what: &str, home: &str) {
    let doc = include_str!("../../../docs/METRICS.md");
    assert!(
        doc.contains(table),
        "docs/METRICS.md's table of {what} is not the one relay-metrics/src/snapshot/{home} \
         renders; it should read:{table}"
    );
}
