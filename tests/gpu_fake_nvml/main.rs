//! The NVML source against the fake driver library of the `fake-nvml` crate, through the real
//! loading path (`dlopen`, lazy symbol lookup by `nvml-wrapper`, NVML's calling conventions).
//!
//! The fake library is built by the tests themselves: `$CARGO build -p fake-nvml` into its own
//! target directory below `CARGO_TARGET_TMPDIR` (so it never contends for the lock of the
//! `cargo test` that runs us), once per variant per test run, with the artifact path read from
//! cargo's JSON messages. A fresh clone needs nothing more than `cargo test`.
//!
//! Each test loads a private copy of the library: the dynamic loader shares one instance per file,
//! and the fake keeps its scenario in a global, so copies keep parallel tests apart. The fake
//! reads its scenario from the environment during `nvmlInit_v2`; tests set the variables and
//! initialise under one lock.

#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test set-up helpers outside #[test] functions fail the test by panicking"
)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

mod big_host;
mod scenario;
mod snapshot;
mod targets;

use relay_metrics::internals::gpu::{
    GpuDeviceSample, GpuError, GpuProcessSample, GpuSampler, NvmlOptions, NvmlSource,
    NVML_LIBRARY_ENV,
};

const UUID_0: &str = "GPU-6a1f0c3e-0000-4000-8000-000000000000";
const UUID_1: &str = "GPU-6a1f0c3e-0000-4000-8000-000000000001";
const MIB: u64 = 1024 * 1024;
/// Above the kernel's largest `pid_max`, so they sort after our own PID.
const PID_B: u32 = 4_194_305;
const PID_C: u32 = 4_194_306;

/// A build of the fake library.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Variant {
    /// Every entry point.
    Full,
    /// Built with `missing-optional-symbols`.
    MissingOptionalSymbols,
}

fn built_library(variant: Variant) -> PathBuf {
    static BUILDS: OnceLock<Mutex<HashMap<Variant, Arc<OnceLock<PathBuf>>>>> = OnceLock::new();
    let cell = {
        let mut builds = lock(BUILDS.get_or_init(Default::default));
        Arc::clone(builds.entry(variant).or_default())
    };
    cell.get_or_init(|| build(variant)).clone()
}

fn build(variant: Variant) -> PathBuf {
    let (name, features): (&str, &[&str]) = match variant {
        Variant::Full => ("full", &[]),
        Variant::MissingOptionalSymbols => (
            "missing-optional-symbols",
            &["--features", "missing-optional-symbols"],
        ),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fake-nvml-{name}"));
    let output = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--message-format=json",
            "-p",
            "fake-nvml",
        ])
        .arg("--manifest-path")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .args(features)
        .output()
        .expect("running cargo to build fake-nvml");
    assert!(
        output.status.success(),
        "building fake-nvml ({name}) failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| {
            message["reason"] == "compiler-artifact" && message["target"]["name"] == "fake_nvml"
        })
        .flat_map(|message| message["filenames"].as_array().cloned().unwrap_or_default())
        .filter_map(|file| file.as_str().map(PathBuf::from))
        .find(|file| file.extension().is_some_and(|ext| ext == "so"))
        .unwrap_or_else(|| panic!("cargo reported no libfake_nvml.so:\n{stdout}"))
}

/// A private directory below the target's tmp dir, removed on drop.
struct TestDir(PathBuf);

impl TestDir {
    fn new(label: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "gpu-fake-nvml-{}-{}-{label}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    /// Copies the fake library here as `libnvidia-ml.so.1`.
    fn install(&self, variant: Variant) -> PathBuf {
        let path = self.0.join("libnvidia-ml.so.1");
        std::fs::copy(built_library(variant), &path).unwrap();
        path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serialises environment changes with the library initialisations that read them.
static ENV_LOCK: Mutex<()> = Mutex::new(());

/// A loaded source over a private copy of the fake library, and that copy's directory.
struct Fake {
    source: NvmlSource,
    library: PathBuf,
    /// Taken with [`ENV_LOCK`] held, just before the library's `nvmlInit_v2` (whose clock the
    /// fake's scenario times follow): not delayed by another test holding the lock.
    before_init: Instant,
    // Declared after `source`, so the library is unloaded before its file is removed.
    _dir: TestDir,
}

fn open(variant: Variant, scenario: &str, options: NvmlOptions) -> (Fake, Result<(), GpuError>) {
    open_with(variant, scenario, options, &[])
}

/// Environment variables of the fake's scenario files (and its list growth); unset unless a
/// test passes them.
const SCRIPT_VARIABLES: [&str; 3] = [
    "FAKE_NVML_SCRIPT",
    "FAKE_NVML_CLOCK_FILE",
    "FAKE_NVML_GROWTH",
];

/// As [`open`], with `env` (of [`SCRIPT_VARIABLES`]) set during the initialisation.
fn open_with(
    variant: Variant,
    scenario: &str,
    options: NvmlOptions,
    env: &[(&str, &Path)],
) -> (Fake, Result<(), GpuError>) {
    let dir = TestDir::new(scenario);
    let library = dir.install(variant);
    let mut source = NvmlSource::new(NvmlOptions {
        library: Some(library.clone()),
        ..options
    });
    let (loaded, before_init) = {
        let _env = lock(&ENV_LOCK);
        let before_init = Instant::now();
        std::env::set_var("FAKE_NVML_SCENARIO", scenario);
        std::env::set_var(
            "FAKE_NVML_PIDS",
            format!("{},{PID_B},{PID_C}", std::process::id()),
        );
        for name in SCRIPT_VARIABLES {
            match env.iter().find(|(key, _)| *key == name) {
                Some((_, value)) => std::env::set_var(name, value),
                None => std::env::remove_var(name),
            }
        }
        (source.ensure_loaded(), before_init)
    };
    (
        Fake {
            source,
            library,
            before_init,
            _dir: dir,
        },
        loaded,
    )
}

fn open_ok(variant: Variant, scenario: &str, options: NvmlOptions) -> Fake {
    let (fake, loaded) = open(variant, scenario, options);
    loaded.unwrap();
    fake
}

/// Index, identifier, memory and utilisation of a device record.
type DeviceSummary = (u32, String, Option<u64>, Option<f64>);

fn device(
    index: u32,
    identifier: &str,
    memory: Option<u64>,
    utilization: Option<f64>,
) -> DeviceSummary {
    (index, identifier.to_string(), memory, utilization)
}

fn summary(devices: &[GpuDeviceSample]) -> Vec<DeviceSummary> {
    devices
        .iter()
        .map(|d| {
            (
                d.index,
                d.identifier.clone(),
                d.memory_used_bytes,
                d.utilization_percent,
            )
        })
        .collect()
}

fn process(
    device_index: u32,
    device_identifier: &str,
    pid: u32,
    memory: Option<u64>,
    utilization: Option<(f64, f64)>,
) -> GpuProcessSample {
    GpuProcessSample {
        device_index,
        device_identifier: device_identifier.to_string(),
        pid,
        memory_used_bytes: memory,
        sm_utilization_percent: utilization.map(|(sm, _)| sm),
        memory_utilization_percent: utilization.map(|(_, memory)| memory),
    }
}

fn own_pid() -> u32 {
    std::process::id()
}

#[test]
fn two_devices_report_exact_memory_and_utilization() {
    let mut fake = open_ok(Variant::Full, "two_devices", NvmlOptions::default());
    let sample = fake.source.sample(&mut |_| true).unwrap();
    // 4 MiB of memory v1 `used` (Relay's number) → 4194304 bytes; 25 % busy.
    assert_eq!(
        summary(&sample.devices),
        vec![
            device(0, UUID_0, Some(4_194_304), Some(25.0)),
            device(1, UUID_1, Some(8 * MIB), Some(50.0)),
        ]
    );
    // First query: no process utilisation yet; memory is the larger of the compute (4096) and
    // graphics (8192) entries; NVML_VALUE_NOT_AVAILABLE is `None`.
    assert_eq!(
        sample.processes,
        vec![
            process(0, UUID_0, own_pid(), Some(8192), None),
            process(0, UUID_0, PID_B, Some(MIB), None),
            process(1, UUID_1, PID_C, None, None),
        ]
    );
    assert!(sample
        .devices
        .iter()
        .all(|d| d.process_lists_error.is_none()));
    assert_eq!(fake.source.unavailable_reason(), None);
}

#[test]
fn process_utilization_is_none_on_the_first_query_then_the_newest_sample() {
    let mut fake = open_ok(Variant::Full, "two_devices", NvmlOptions::default());
    let first = fake.source.sample(&mut |_| true).unwrap();
    assert!(first
        .processes
        .iter()
        .all(|process| process.sm_utilization_percent.is_none()));
    let expected = vec![
        // Two samples (sm 20 mem 10, then sm 30 mem 12): the newer wins.
        process(0, UUID_0, own_pid(), Some(8192), Some((30.0, 12.0))),
        // Only the sample from before the first query mentions B: passing the last seen
        // timestamp keeps it out.
        process(0, UUID_0, PID_B, Some(MIB), None),
        // C appears on device 0 only in utilisation samples.
        process(0, UUID_0, PID_C, None, Some((5.0, 2.0))),
        process(1, UUID_1, PID_C, None, Some((70.0, 40.0))),
    ];
    let second = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(second.processes, expected);
    // The fake only returns samples newer than the timestamp passed: a wrong one loses them.
    let third = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(third.processes, expected);
}

#[test]
fn processes_are_filtered_by_the_callers_predicate() {
    let mut fake = open_ok(Variant::Full, "two_devices", NvmlOptions::default());
    let mut asked = Vec::new();
    let sample = fake
        .source
        .sample(&mut |pid| {
            asked.push(pid);
            pid == own_pid()
        })
        .unwrap();
    assert_eq!(
        sample.processes,
        vec![process(0, UUID_0, own_pid(), Some(8192), None)]
    );
    assert_eq!(asked, vec![own_pid(), PID_B, PID_C]);
    assert_eq!(sample.devices.len(), 2);
}

#[test]
fn uuid_failure_falls_back_to_nvidia_index() {
    let mut fake = open_ok(Variant::Full, "uuid_fails", NvmlOptions::default());
    let sample = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(
        summary(&sample.devices),
        vec![
            device(0, "nvidia:0", Some(4 * MIB), Some(25.0)),
            device(1, UUID_1, Some(8 * MIB), Some(50.0)),
        ]
    );
    assert_eq!(
        sample.processes,
        vec![
            process(0, "nvidia:0", own_pid(), Some(8192), None),
            process(0, "nvidia:0", PID_B, Some(MIB), None),
            process(1, UUID_1, PID_C, None, None),
        ]
    );
}

#[test]
fn missing_optional_symbols_make_only_their_fields_none() {
    let mut fake = open_ok(
        Variant::MissingOptionalSymbols,
        "two_devices",
        NvmlOptions::default(),
    );
    let first = fake.source.sample(&mut |_| true).unwrap();
    // No nvmlDeviceGetMemoryInfo (v1): `_v2` answers, without the 1 MiB reserved.
    // No nvmlDeviceGetUtilizationRates: `None`.
    assert_eq!(
        summary(&first.devices),
        vec![
            device(0, UUID_0, Some(3 * MIB), None),
            device(1, UUID_1, Some(7 * MIB), None),
        ]
    );
    // No graphics list: memory comes from the compute list alone (4096, not 8192).
    // No nvmlDeviceGetProcessUtilization: SM utilisation stays `None` on later queries too.
    let expected = vec![
        process(0, UUID_0, own_pid(), Some(4096), None),
        process(0, UUID_0, PID_B, Some(MIB), None),
        process(1, UUID_1, PID_C, None, None),
    ];
    assert_eq!(first.processes, expected);
    // A graphics process would be missing: each device says so.
    for device in &first.devices {
        let error = device.process_lists_error.as_deref().unwrap_or_default();
        assert!(error.starts_with("its graphics process list: "), "{error}");
    }
    let second = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(second.processes, expected);
    assert_eq!(summary(&second.devices), summary(&first.devices));
}

#[test]
fn not_supported_queries_degrade_per_field() {
    let mut fake = open_ok(Variant::Full, "not_supported", NvmlOptions::default());
    let sample = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(
        summary(&sample.devices),
        vec![
            device(0, UUID_0, Some(4 * MIB), Some(25.0)),
            device(1, UUID_1, None, None),
        ]
    );
    // Device 0's compute list is unsupported: the graphics list still gives A's memory, and B
    // (compute only) is not listed, which the device says.
    assert_eq!(
        sample.processes,
        vec![
            process(0, UUID_0, own_pid(), Some(8192), None),
            process(1, UUID_1, PID_C, None, None),
        ]
    );
    let errors: Vec<_> = sample
        .devices
        .iter()
        .map(|d| &d.process_lists_error)
        .collect();
    let compute = errors[0]
        .as_deref()
        .expect("device 0's compute list failed");
    assert!(
        compute.starts_with("its compute process list: "),
        "{compute}"
    );
    assert!(!compute.contains("graphics"), "{compute}");
    assert_eq!(errors[1], &None);
}

#[test]
fn init_failure_gives_a_clear_error_and_no_records() {
    let (mut fake, loaded) = open(Variant::Full, "init_fails", NvmlOptions::default());
    let library = fake.library.display().to_string();
    let expected = GpuError::Init {
        library: library.clone(),
        reason: "NVIDIA driver is not loaded".to_string(),
    };
    assert_eq!(loaded, Err(expected.clone()));
    assert_eq!(fake.source.sample(&mut |_| true), Err(expected));
    assert_eq!(
        fake.source.unavailable_reason(),
        Some(format!(
            "NVML library {library} loaded but nvmlInit_v2 failed: NVIDIA driver is not loaded"
        ))
    );
}

#[test]
fn device_count_failure_gives_no_records() {
    let mut fake = open_ok(Variant::Full, "count_fails", NvmlOptions::default());
    let error = fake.source.sample(&mut |_| true).unwrap_err();
    assert_eq!(
        error,
        GpuError::DeviceCount {
            reason: "an internal driver error occurred".to_string()
        }
    );
}

#[test]
fn selectors_choose_devices_by_index_or_uuid() {
    let by_index = NvmlOptions {
        devices: vec!["1".to_string()],
        ..NvmlOptions::default()
    };
    let mut fake = open_ok(Variant::Full, "two_devices", by_index);
    let sample = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(
        summary(&sample.devices),
        vec![device(1, UUID_1, Some(8 * MIB), Some(50.0))]
    );
    assert_eq!(
        sample.processes,
        vec![process(1, UUID_1, PID_C, None, None)]
    );

    let by_uuid = NvmlOptions {
        devices: vec![UUID_0.to_string(), "GPU-unknown".to_string()],
        device_metrics: false,
        ..NvmlOptions::default()
    };
    let mut fake = open_ok(Variant::Full, "two_devices", by_uuid);
    let sample = fake.source.sample(&mut |_| true).unwrap();
    assert_eq!(
        summary(&sample.devices),
        vec![device(0, UUID_0, None, None)]
    );
    assert_eq!(sample.processes.len(), 2);
}

#[test]
fn a_missing_library_path_from_the_environment_is_a_clear_error_retried_after_the_interval() {
    let dir = TestDir::new("missing");
    let path = dir.0.join("absent").join("libnvidia-ml.so.1");
    let options = {
        let _env = lock(&ENV_LOCK);
        std::env::set_var(NVML_LIBRARY_ENV, &path);
        let options = NvmlOptions::from_env();
        std::env::remove_var(NVML_LIBRARY_ENV);
        options
    };
    assert_eq!(options.library.as_deref(), Some(path.as_path()));
    let mut source = NvmlSource::new(options);
    let error = source.sample(&mut |_| true).unwrap_err();
    let GpuError::Load { library, reason } = &error else {
        panic!("expected a load error, got {error:?}");
    };
    assert_eq!(library, &path.display().to_string());
    assert!(reason.contains("No such file or directory"), "{reason}");
    assert!(error.to_string().starts_with(&format!(
        "NVML library {} could not be loaded: ",
        path.display()
    )));

    // The library appears, but within the retry interval the failure stands.
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::copy(built_library(Variant::Full), &path).unwrap();
    let _env = lock(&ENV_LOCK);
    std::env::set_var("FAKE_NVML_SCENARIO", "two_devices");
    assert_eq!(source.sample(&mut |_| true), Err(error));
    source.set_retry_interval(Duration::ZERO);
    let sample = source.sample(&mut |_| true).unwrap();
    assert_eq!(sample.devices.len(), 2);
    assert_eq!(source.unavailable_reason(), None);
}

#[test]
fn a_library_without_nvml_entry_points_is_a_load_error() {
    // glibc is everywhere and exports no nvmlInit_v2.
    let mut source = NvmlSource::new(NvmlOptions {
        library: Some(PathBuf::from("libc.so.6")),
        ..NvmlOptions::default()
    });
    let error = source.ensure_loaded().unwrap_err();
    let GpuError::Load { library, reason } = &error else {
        panic!("expected a load error, got {error:?}");
    };
    assert_eq!(library, "libc.so.6");
    assert!(
        reason.starts_with("not a usable NVML library (nvmlInit_v2: "),
        "{reason}"
    );
}

#[test]
fn the_sampler_hands_over_samples_taken_on_its_thread() {
    let fake = open_ok(Variant::Full, "two_devices", NvmlOptions::default());
    let sampler = GpuSampler::spawn(fake.source, Duration::from_millis(20)).unwrap();
    let first = sampler
        .wait_for_sample(None, Duration::from_secs(10))
        .unwrap();
    assert_eq!(first.error, None);
    assert_eq!(
        summary(&first.devices),
        vec![
            device(0, UUID_0, Some(4 * MIB), Some(25.0)),
            device(1, UUID_1, Some(8 * MIB), Some(50.0)),
        ]
    );
    let second = sampler
        .wait_for_sample(Some(first.taken_at), Duration::from_secs(10))
        .unwrap();
    assert!(second.taken_at > first.taken_at);
    let mine: Vec<_> = second
        .processes_matching(|pid| pid == own_pid())
        .cloned()
        .collect();
    assert_eq!(
        mine,
        vec![process(
            0,
            UUID_0,
            own_pid(),
            Some(8192),
            Some((30.0, 12.0))
        )]
    );
    let latest = sampler.latest().unwrap();
    assert!(latest.taken_at >= second.taken_at);
    assert!(latest.age() < Duration::from_secs(10));
    drop(sampler);
}
