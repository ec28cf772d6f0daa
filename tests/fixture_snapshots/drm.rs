//! Per-process GPU records of AMD, Intel and other DRM clients (`fdinfo`), over the `drm-clients`
//! fixture tree (its processes and numbers are documented in `make_process_fixtures.py`).
//!
//! Utilisation needs two scans of the GPU thread with counters that moved in between. The test
//! serves the tree through a `proc` symlink and swaps it for an edited copy with one `rename`, so
//! each scan sees either tree. Scans read processes in pid order, so when both the lowest and the
//! highest DRM process show their moved counters, the scan before read only the old tree and this
//! scan only the new one: every value in between is exact. A swap that lands inside a scan (a
//! ~1 ms window in a 500 ms period) is detected that way and the experiment is run again.

use std::path::Path;
use std::time::{Duration, Instant};

use relay_metrics::ResourceMetricsConfig;
use serde_json::{json, Value};

use crate::rates::edit;
use crate::support::*;
use relay_metrics::internals::copy_tree;

/// The counters moved between the two scans. amdgpu (pid 300) and panfrost (pid 303, the
/// markers) get ~2.8 h of busy time: clamped to 100 % whatever the interval; the i915 client's
/// counters stay (0 %); xe's cycle counters advance by a quarter of the elapsed cycles (25 %).
fn advance(proc: &Path) {
    edit(
        &proc.join("300/fdinfo/3"),
        "drm-engine-gfx:\t1238484 ns",
        "drm-engine-gfx:\t10000001238484 ns",
    );
    edit(
        &proc.join("303/fdinfo/3"),
        "drm-engine-fragment:\t0 ns",
        "drm-engine-fragment:\t10000000000000 ns",
    );
    for fd in [3, 4] {
        let path = proc.join(format!("302/fdinfo/{fd}"));
        for (from, to) in [
            ("drm-cycles-rcs:\t1000\n", "drm-cycles-rcs:\t2000\n"),
            (
                "drm-total-cycles-rcs:\t40000",
                "drm-total-cycles-rcs:\t44000",
            ),
            ("drm-cycles-vcs:\t0\n", "drm-cycles-vcs:\t1000\n"),
            (
                "drm-total-cycles-vcs:\t40000",
                "drm-total-cycles-vcs:\t44000",
            ),
        ] {
            edit(&path, from, to);
        }
    }
}

fn utilisation(s: &Value, pid: u64) -> Option<f64> {
    let records = at(s, "/gpu/process_metrics").as_array().unwrap();
    let record = records.iter().find(|r| r["process_id"] == pid)?;
    record["compute_utilization"]["value"].as_f64()
}

/// One experiment: the first snapshot, then the first one whose GPU sample is newer than the
/// swap. `None` when the swap landed inside a scan.
fn experiment(config: &Value) -> Option<(Snap, Snap)> {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("drm-clients");
    let (old, new) = (dir.path().join("old"), dir.path().join("new"));
    copy_tree(&fixture("drm-clients"), &old).unwrap();
    copy_tree(&fixture("drm-clients"), &new).unwrap();
    advance(&new.join("proc"));
    std::fs::create_dir(&base).unwrap();
    std::os::unix::fs::symlink(old.join("proc"), base.join("proc")).unwrap();
    std::os::unix::fs::symlink(old.join("sys"), base.join("sys")).unwrap();

    let config = ResourceMetricsConfig::from_value(config.clone()).unwrap();
    let mut collector = relay_metrics::internals::collector_with_roots(
        config,
        relay_metrics::internals::Roots::fixture(&base),
    )
    .unwrap();
    let first = collector.collect();
    let first = Snap::new(&first, &base);

    let swap = base.join("proc.new");
    std::os::unix::fs::symlink(new.join("proc"), &swap).unwrap();
    std::fs::rename(&swap, base.join("proc")).unwrap();
    let swapped = Instant::now();

    // The GPU thread scans every 500 ms; the first scan that sees the new tree makes the markers
    // 100 %. Bounded: a few periods, generous for a loaded machine.
    let deadline = swapped + Duration::from_secs(20);
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let snapshot = collector.collect();
        // How many collections it took to see the new scan depends on timing.
        let second = Snap::masking(&snapshot, &base, &["/extensions/collector/sequence"]);
        let (low, high) = (utilisation(&second, 300), utilisation(&second, 303));
        if low == Some(100.0) || high == Some(100.0) {
            let clean = low == Some(100.0) && high == Some(100.0);
            return clean.then_some((first, second));
        }
        assert!(
            Instant::now() < deadline,
            "no scan saw the edited tree within 20 s"
        );
    }
}

/// Global scope, GPU only: the DRM process records of every process, with their memory and, on
/// the second scan, utilisation.
#[test]
fn gpu_drm_clients() {
    let case = case("gpu_drm_clients");
    assert_machine_matches_fixtures();
    nvml_env();
    let (first, second) = (0..3)
        .find_map(|_| experiment(&case.config))
        .expect("three swaps in a row landed inside a scan");
    check_golden(case.name, &second);

    // The first scan has no baseline: memory, no utilisation.
    let records = at(&first, "/gpu/process_metrics").as_array().unwrap();
    let pids: Vec<&Value> = records.iter().map(|r| &r["process_id"]).collect();
    // Ordered by device, then pid; nouveau's client is NVML's; pid 1 has no DRM fds.
    assert_eq!(pids, [&json!(301), &json!(300), &json!(302), &json!(303)]);
    for record in records {
        assert!(record["compute_utilization"].is_null(), "{record}");
        assert!(record["device_index"].is_null(), "{record}");
    }

    let s = &second;
    let expect = [
        // pid, vendor, device, resident KiB, utilisation %
        (300, "amd", "0000:03:00.0", 23992 + 192, 100.0),
        (301, "intel", "0000:00:02.0", 4096 + 256, 0.0),
        (302, "intel", "0000:05:00.0", 12 * 1024 + 4, 25.0),
        (303, "other", "drm-minor-132", 2048, 100.0),
    ];
    let records = at(s, "/gpu/process_metrics").as_array().unwrap();
    assert_eq!(records.len(), expect.len());
    for (pid, vendor, device, kib, percent) in expect {
        let record = records.iter().find(|r| r["process_id"] == pid).unwrap();
        assert_eq!(record["vendor"], vendor, "pid {pid}");
        assert_eq!(record["device_identifier"], device, "pid {pid}");
        assert_eq!(
            record["memory_used"],
            json!({"value": kib, "unit": "kibibytes"}),
            "pid {pid}"
        );
        assert_close(
            record["compute_utilization"]["value"].as_f64().unwrap(),
            percent,
            &format!("utilisation of pid {pid}"),
        );
        assert_eq!(record["compute_utilization"]["unit"], "percentage");
    }
    // The AMD card's sysfs device record is still there.
    assert_eq!(
        at(s, "/gpu/device_metrics/0/device_identifier"),
        "0000:03:00.0"
    );
}
