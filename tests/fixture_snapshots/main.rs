//! The fixture tier: whole snapshots over the fixture trees in `tests/fixtures/`, compared with
//! the golden JSON files in `tests/golden/`.
//!
//! Each case collects with a collector over a fixture tree (`internals::collector_with_roots`),
//! masks what depends on wall time or on where the repository lives, and compares with
//! `tests/golden/<case>.json`.
//! `UPDATE_GOLDEN=1 cargo test -p relay-metrics-suite --test fixture_snapshots` rewrites the
//! golden files instead (review the diff before committing). Besides the golden comparison every
//! case asserts its key numbers explicitly, so a careless regeneration cannot hide a regression,
//! and `every_case_has_relays_shape` checks Relay's wire rules on every case.
//!
//! The numbers of the fixture processes are documented in
//! `tests/fixtures/make_process_fixtures.py`, which wrote them. The fixtures assume a 4096-byte
//! page and 100 clock ticks per second (`rss` is in pages, CPU times in ticks); the tests check
//! both first and fail with a clear message on another machine.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers outside #[test] functions fail the test by panicking"
)]

mod cases;
mod drm;
mod rates;
mod shape;
mod support;

use support::*;

/// The golden files are exactly the cases: no stale file survives a renamed case.
#[test]
fn golden_files_match_the_cases() {
    let mut files: Vec<String> = std::fs::read_dir(repo_path("tests/golden"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut expected: Vec<String> = CASES.iter().map(|c| format!("{c}.json")).collect();
    expected.sort();
    assert_eq!(files, expected);
}
