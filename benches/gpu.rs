//! GPU costs against the fake libnvidia-ml (`tools/fake-nvml`, built here with cargo):
//!
//! - `gpu_thread/query_two_devices`: one `NvmlSource::sample` over the fake's two devices, every
//!   value (memory, utilisation, processes, power, energy, temperatures, clocks, throttle
//!   reasons, violation times, ECC, remapped rows, PCIe, encoder/decoder, MIG): the GPU thread's
//!   work per period. Per device per sample is half of it. The fake answers from memory, so
//!   this is the wrapper's and the collector's cost, not a driver's.
//! - `collect_gpu/{off,on}/{1,2}`: `collect()` of this process (application_process, every other
//!   category off) with the GPU category off, then on with the fake loaded and the GPU and XID
//!   threads running, interleaved in one run: the collect path only reads the GPU thread's
//!   last sample.
//!
//! Run with `cargo bench -p relay-metrics-suite --bench gpu`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use relay_metrics::internals::gpu::{NvmlOptions, NvmlSource};
use relay_metrics::{Collector, ResourceMetricsConfig};

/// Builds the fake library into its own target directory and returns a private copy's path.
fn fake_library() -> PathBuf {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fake-nvml-bench");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "fake-nvml",
            "--target-dir",
        ])
        .arg(&target)
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .status();
    assert!(
        status.is_ok_and(|s| s.success()),
        "building fake-nvml failed"
    );
    let built = target.join("release/libfake_nvml.so");
    let copy = target.join("libnvidia-ml.so.1");
    std::fs::copy(&built, &copy).unwrap_or_else(|e| panic!("{}: {e}", built.display()));
    copy
}

fn config(gpu: bool) -> ResourceMetricsConfig {
    let text = format!(
        r#"{{"measurement_scope": "application_process", "disk": {{"enabled": false}},
            "network": {{"enabled": false}}, "gpu": {{"enabled": {gpu}}}}}"#
    );
    ResourceMetricsConfig::from_text(&text).unwrap_or_else(|e| panic!("config: {e}"))
}

fn benches(c: &mut Criterion) {
    let library = fake_library();
    std::env::set_var("FAKE_NVML_SCENARIO", "two_devices");
    std::env::set_var("RELAY_METRICS_NVML_LIBRARY", &library);

    let mut source = NvmlSource::new(NvmlOptions {
        library: Some(library.clone()),
        ..NvmlOptions::default()
    });
    let first = source
        .sample(&mut |_| true)
        .unwrap_or_else(|e| panic!("fake NVML: {e}"));
    assert_eq!(first.devices.len(), 2);
    assert!(first.devices[0].values.missing.is_empty());
    let mut group = c.benchmark_group("gpu_thread");
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("query_two_devices", |b| {
        b.iter(|| source.sample(&mut |_| true).map(|s| s.devices.len()))
    });
    group.finish();

    let mut off = Collector::new(config(false)).unwrap_or_else(|e| panic!("{e}"));
    let mut on = Collector::new(config(true)).unwrap_or_else(|e| panic!("{e}"));
    off.collect();
    // Wait for the GPU thread's first sample, so that `on` measures the steady state.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while on.collect().extensions.gpu.is_none() {
        assert!(std::time::Instant::now() < deadline, "no GPU sample");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut group = c.benchmark_group("collect_gpu");
    group.measurement_time(Duration::from_secs(3));
    for round in 1..=2 {
        group.bench_function(format!("off/{round}"), |b| b.iter(|| off.collect()));
        group.bench_function(format!("on/{round}"), |b| b.iter(|| on.collect()));
    }
    group.finish();
}

criterion_group!(gpu, benches);
criterion_main!(gpu);
