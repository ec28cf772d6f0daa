//! Machine-wide values read in every scope: system memory (`/proc/meminfo`), filesystem
//! capacities (`statfs`) and network interface counters (`/proc/net/dev`).
//!
//! A high-frequency sampler of one process may not need them at its own rate: they are ~12 µs of
//! the ~45 µs of reads of a 3-process tree (docs/PERFORMANCE.md). With
//! `extensions.system_wide_interval_millis` they are re-read at most that often; in between, the
//! sample keeps the values of the last read (it is reused from pass to pass), the reasons found
//! by that read are repeated, and their age is reported in `extensions.sample_ages`.
//!
//! Filesystem capacities come from a refresher that asks them in helper processes off the
//! sampling path (see [`fs::FilesystemRefresher`]): a read copies its latest answers, whose own
//! age is `extensions.sample_ages.filesystems_ms`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::ResourceMetricsConfig;
use crate::model::{FilesystemValues, InterfaceValues, Sample};
use crate::snapshot::Unavailable;
use crate::source::net::{self, InterfaceCounters, NetReader};
use crate::source::system::{SystemFields, SystemReader, SystemSample};
use crate::source::{fs, Roots};

use super::reasons::Reasons;
use super::CloneFromSlice;

/// How long a `statvfs` may take before its path is reported as hung (it stays pending in its
/// helper process; see [`fs::FilesystemRefresher`]).
const FILESYSTEM_TIMEOUT: Duration = Duration::from_secs(1);

pub(super) struct SystemWide {
    interval: Duration,
    read_at: Option<Instant>,
    /// Reasons the last read recorded, repeated while its values are reused.
    reasons: Vec<Unavailable>,
    filesystems: fs::FilesystemRefresher,
    /// When the round of the filesystem values in the sample started.
    filesystems_at: Option<Instant>,
    capacities: Vec<fs::FilesystemCapacity>,
    meminfo: SystemReader,
    meminfo_sample: SystemSample,
    net: NetReader,
    net_counters: Vec<InterfaceCounters>,
}

impl SystemWide {
    pub(super) fn new(config: &ResourceMetricsConfig, roots: &Roots) -> Self {
        Self {
            interval: Duration::from_millis(config.extensions.system_wide_interval_millis),
            read_at: None,
            reasons: Vec::new(),
            filesystems: fs::FilesystemRefresher::new(
                unique_paths(&config.disk.filesystem_paths),
                FILESYSTEM_TIMEOUT,
            ),
            filesystems_at: None,
            capacities: Vec::new(),
            meminfo: SystemReader::new(roots),
            meminfo_sample: SystemSample::default(),
            net: NetReader::new(roots),
            net_counters: Vec::new(),
        }
    }

    /// Re-reads the machine-wide values into `sample` when the last read is at least the
    /// interval old (always, with an interval of 0), and records why any of them is missing.
    pub(super) fn read(
        &mut self,
        config: &ResourceMetricsConfig,
        reasons: &mut Reasons,
        sample: &mut Sample,
    ) {
        if !(config.memory.enabled || config.disk.enabled || config.network.enabled) {
            sample.system_wide_age_ms = None;
            sample.filesystems_age_ms = None;
            return;
        }
        let due = self
            .read_at
            .is_none_or(|read_at| read_at.elapsed() >= self.interval);
        if due {
            let read_at = Instant::now();
            let first_reason = reasons.as_slice().len();
            self.read_memory(config, reasons, sample);
            self.read_filesystems(config, reasons, &mut sample.filesystems);
            self.read_interfaces(config, reasons, &mut sample.interfaces);
            self.reasons
                .clone_from_slice_or_extend(&reasons.as_slice()[first_reason..]);
            self.read_at = Some(read_at);
            sample.system_wide_instant = read_at;
        } else {
            reasons.repeat(&self.reasons);
        }
        sample.system_wide_age_ms = self.read_at.map(super::age_ms);
        sample.filesystems_age_ms = self.filesystems_at.map(super::age_ms);
    }

    fn read_memory(
        &mut self,
        config: &ResourceMetricsConfig,
        reasons: &mut Reasons,
        sample: &mut Sample,
    ) {
        let fields = SystemFields {
            meminfo: config.memory.enabled,
            ..SystemFields::NONE
        };
        self.meminfo.read_into(fields, &mut self.meminfo_sample);
        for error in &self.meminfo_sample.errors {
            reasons.add("system", format_args!("{error}"));
        }
        let memory = self.meminfo_sample.memory;
        sample.system.memory_total_kib = memory.and_then(|m| m.total_kib);
        sample.system.memory_available_kib = memory.and_then(|m| m.available_kib);
    }

    fn read_filesystems(
        &mut self,
        config: &ResourceMetricsConfig,
        reasons: &mut Reasons,
        out: &mut Vec<FilesystemValues>,
    ) {
        out.clear();
        self.filesystems_at = None;
        if !config.disk.enabled {
            return;
        }
        self.filesystems_at = self.filesystems.read(&mut self.capacities);
        for (path, capacity) in self.filesystems.paths().iter().zip(&self.capacities) {
            if let Some(reason) = &capacity.error {
                reasons.add("disk.filesystems", format_args!("{path}: {reason}"));
            }
            out.push(FilesystemValues {
                path: Arc::clone(path),
                total_bytes: capacity.total_bytes,
                available_bytes: capacity.available_bytes,
                free_bytes: capacity.free_bytes,
            });
        }
    }

    fn read_interfaces(
        &mut self,
        config: &ResourceMetricsConfig,
        reasons: &mut Reasons,
        out: &mut Vec<InterfaceValues>,
    ) {
        if !config.network.enabled {
            out.clear();
            return;
        }
        match self.net.read(&mut self.net_counters) {
            Ok(()) => fill_interfaces(&self.net_counters, &config.network.interfaces, out),
            Err(error) => {
                reasons.add("network", format_args!("{error}"));
                out.clear();
            }
        }
    }
}

/// Copies the selected interfaces into `out`, keeping each name's shared string while the
/// interface list is unchanged.
fn fill_interfaces(
    counters: &[InterfaceCounters],
    selection: &[String],
    out: &mut Vec<InterfaceValues>,
) {
    let mut kept = 0;
    for counter in counters
        .iter()
        .filter(|c| net::select(selection, c.name.as_str()))
    {
        if kept == out.len() {
            out.push(InterfaceValues::default());
        }
        let entry = &mut out[kept];
        if *entry.name != *counter.name {
            entry.name = Arc::from(counter.name.as_str());
        }
        entry.counts = counter.counts;
        kept += 1;
    }
    out.truncate(kept);
}

/// The configured filesystem paths in order, each once: Relay accepts a path listed twice, but
/// a second entry would only repeat the first (and duplicate its Prometheus and OTLP series).
fn unique_paths(paths: &[String]) -> Vec<Arc<str>> {
    let mut unique: Vec<Arc<str>> = Vec::with_capacity(paths.len());
    for path in paths {
        if !unique.iter().any(|known| **known == **path) {
            unique.push(Arc::from(path.as_str()));
        }
    }
    unique
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{json, Value};

    use super::super::test_fixtures::cgroup_v2_machine;
    use crate::config::MetricNames;
    use crate::source::Roots;
    use crate::{Collector, ResourceMetricsConfig};

    /// The global scope of the writable cgroup v2 fixture machine, with one filesystem path that
    /// does not exist (a reason to repeat) and the given interval.
    fn collector(interval_millis: u64) -> (tempfile::TempDir, Collector) {
        let (dir, _) = cgroup_v2_machine();
        let config = ResourceMetricsConfig::from_text(&format!(
            r#"{{"measurement_scope": "global", "gpu": {{"enabled": false}},
                "disk": {{"filesystem_paths": ["/relay-metrics-no-such-path"]}},
                "extensions": {{"kernel_events": false, "system_wide_interval_millis": {interval_millis}}}}}"#
        ))
        .unwrap();
        let collector = Collector::with_roots(config, Roots::fixture(dir.path())).unwrap();
        (dir, collector)
    }

    fn snapshot(collector: &mut Collector) -> Value {
        serde_json::to_value(&*collector.collect()).unwrap()
    }

    /// The fixture's eth0 has received `rx_bytes` and the machine has `total_kib` of memory.
    fn rewrite(dir: &tempfile::TempDir, rx_bytes: u64, total_kib: u64) {
        let proc = dir.path().join("proc");
        let dev = std::fs::read_to_string(proc.join("net/dev")).unwrap();
        let dev = dev.replace("eth0: 1000000 ", &format!("eth0: {rx_bytes} "));
        std::fs::write(proc.join("net/dev"), dev).unwrap();
        let meminfo = std::fs::read_to_string(proc.join("meminfo")).unwrap();
        let meminfo = meminfo.replace(
            "MemTotal:        8388608 kB",
            &format!("MemTotal: {total_kib} kB"),
        );
        std::fs::write(proc.join("meminfo"), meminfo).unwrap();
    }

    fn eth0(v: &Value) -> &Value {
        let interfaces = v["network"]["interfaces"].as_array().unwrap();
        let eth0 = interfaces.iter().find(|i| i["name"] == "eth0").unwrap();
        &eth0["traffic"]
    }

    fn filesystem_reasons(v: &Value) -> usize {
        v["extensions"]["unavailable"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["field"] == "disk.filesystems")
            .count()
    }

    #[test]
    fn without_an_interval_every_snapshot_reads_the_machine_wide_values() {
        let (dir, mut collector) = collector(0);
        let first = snapshot(&mut collector);
        assert_eq!(first["memory"]["system_total"]["value"], json!(8388608));
        assert_eq!(eth0(&first)["received_data"]["value"], json!(1000000));
        rewrite(&dir, 1500000, 9000000);
        let rewritten = std::time::Instant::now();
        let second = snapshot(&mut collector);
        assert_eq!(second["memory"]["system_total"]["value"], json!(9000000));
        assert_eq!(eth0(&second)["received_data"]["value"], json!(1500000));
        assert!(
            eth0(&second)["receive_throughput"]["value"]
                .as_f64()
                .unwrap()
                > 0.0
        );
        // Read during this collect: younger than the rewrite (usually 0 ms; 1 ms was seen on a
        // loaded machine, so no exact figure).
        let age_ms = second["extensions"]["sample_ages"]["system_wide_ms"]
            .as_u64()
            .unwrap();
        assert!(u128::from(age_ms) <= rewritten.elapsed().as_millis());
        assert_eq!(filesystem_reasons(&second), 1);
    }

    #[test]
    fn within_the_interval_the_last_values_their_rates_and_reasons_are_reused_with_their_age() {
        let interval = Duration::from_millis(400);
        let (dir, mut collector) = collector(interval.as_millis() as u64);
        let first = snapshot(&mut collector);
        assert_eq!(filesystem_reasons(&first), 1);

        rewrite(&dir, 1500000, 9000000);
        let reused = snapshot(&mut collector);
        assert_eq!(reused["memory"]["system_total"]["value"], json!(8388608));
        assert_eq!(eth0(&reused)["received_data"]["value"], json!(1000000));
        assert_eq!(reused["disk"]["filesystems"], first["disk"]["filesystems"]);
        assert_eq!(
            filesystem_reasons(&reused),
            1,
            "the read's reason is repeated"
        );

        std::thread::sleep(interval + Duration::from_millis(50));
        let fresh = snapshot(&mut collector);
        assert_eq!(fresh["memory"]["system_total"]["value"], json!(9000000));
        assert_eq!(eth0(&fresh)["received_data"]["value"], json!(1500000));
        // 500000 bytes over the time between the two reads (≥ the interval).
        let rate = eth0(&fresh)["receive_throughput"]["value"]
            .as_f64()
            .unwrap();
        assert!(
            rate > 0.0 && rate <= 500000.0 / interval.as_secs_f64(),
            "{rate}"
        );

        let reused_again = snapshot(&mut collector);
        assert_eq!(
            eth0(&reused_again)["receive_throughput"],
            eth0(&fresh)["receive_throughput"],
            "a reused reading keeps its rate instead of a rate against itself"
        );
        let age = &reused_again["extensions"]["sample_ages"]["system_wide_ms"];
        assert!(age.as_u64().unwrap() < interval.as_millis() as u64, "{age}");
    }

    #[test]
    fn with_no_machine_wide_category_there_is_no_age() {
        let (dir, _) = cgroup_v2_machine();
        let config = ResourceMetricsConfig::from_text(
            r#"{"measurement_scope": "global", "memory": {"enabled": false}, "disk": {"enabled": false},
                "network": {"enabled": false}, "gpu": {"enabled": false},
                "extensions": {"kernel_events": false, "system_wide_interval_millis": 1000}}"#,
        )
        .unwrap();
        let mut collector = Collector::with_roots(config, Roots::fixture(dir.path())).unwrap();
        let v = snapshot(&mut collector);
        assert_eq!(
            v["extensions"]["sample_ages"]["system_wide_ms"],
            Value::Null
        );
        assert_eq!(v["memory"], Value::Null);
    }

    #[test]
    fn a_path_listed_twice_is_reported_and_exported_once() {
        let (dir, _) = cgroup_v2_machine();
        let exported = |paths: &str| {
            let config = ResourceMetricsConfig::from_text(&format!(
                r#"{{"measurement_scope": "global", "gpu": {{"enabled": false}},
                    "disk": {{"filesystem_paths": {paths}}},
                    "extensions": {{"kernel_events": false}}}}"#
            ))
            .unwrap();
            let mut collector = Collector::with_roots(config, Roots::fixture(dir.path())).unwrap();
            let snapshot = collector.collect();
            let listed: Vec<String> = snapshot
                .disk
                .as_ref()
                .unwrap()
                .filesystems
                .iter()
                .map(|fs| fs.path.to_string())
                .collect();
            let mut text = String::new();
            let mut root_series = Vec::new();
            for names in [MetricNames::RelayMetrics, MetricNames::Relay] {
                crate::output::prometheus::encode(&snapshot, names, &mut text);
                root_series.push(
                    text.lines()
                        .filter(|line| !line.starts_with('#') && line.contains(r#"="/""#))
                        .count(),
                );
            }
            (listed, root_series)
        };
        let (listed, root_series) = exported(r#"["/", "/tmp", "/", "/tmp", "/"]"#);
        assert_eq!(listed, ["/", "/tmp"]);
        let (_, once) = exported(r#"["/"]"#);
        assert!(once.iter().all(|series| *series > 0), "{once:?}");
        assert_eq!(root_series, once);
    }
}
