//! Relay's `resource_metrics` component configuration: the same keys, defaults, unknown-key
//! rejection and validation messages (Relay 0.10.4), read from JSON or TOML, plus our
//! additions (`cgroup` scope with `cgroup_path`, `root_pid`, and an `extensions` section).

use std::path::Path;

use serde::{Deserialize, Serialize};

/// The largest config file read: a full Relay config is a few KiB, and a bound keeps a wrong
/// path (a device, a huge log) from being read until memory runs out.
pub const MAX_CONFIG_BYTES: u64 = InputKind::Config.max_bytes();

/// Every configuration error message starts with this, as in Relay.
pub const ERROR_PREFIX: &str = "invalid resource metrics config: ";

/// A configuration that could not be read or is invalid.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// Relay's validation and deserialisation errors, with Relay's message.
    #[error("{ERROR_PREFIX}{0}")]
    Invalid(String),
    /// The configuration file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The file is neither JSON nor TOML.
    #[error("config file {path} is not valid JSON or TOML: {reason}")]
    Syntax {
        /// The file.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// Relay's plugin-host error for a second `resource_metrics` component.
    #[error("plugin component kind 'resource_metrics' may only appear once")]
    DuplicateComponent,
}

/// Which processes to measure, as configured (also the CLI's `--scope`, which has no
/// `runtime_default`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "cli", value(rename_all = "snake_case"))]
pub enum ScopeSetting {
    /// `process_tree` rooted at the calling process in the library (Relay's embedded APIs);
    /// `global` in the CLI when neither `--pid` nor `--cgroup` is given.
    #[default]
    #[cfg_attr(feature = "cli", value(skip))]
    RuntimeDefault,
    /// Every process of the system.
    Global,
    /// One process without its children.
    ApplicationProcess,
    /// A root process and its live descendants.
    ProcessTree,
    /// relay-metrics addition: every process of the cgroup subtree at `cgroup_path`.
    Cgroup,
}

/// The `resource_metrics` component configuration.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ResourceMetricsConfig {
    /// Which processes to measure.
    pub measurement_scope: ScopeSetting,
    /// Periodic collection.
    pub polling: PollingConfig,
    /// CPU category.
    pub cpu: CategoryConfig,
    /// Memory category.
    pub memory: CategoryConfig,
    /// Process category.
    pub process: CategoryConfig,
    /// Disk category.
    pub disk: DiskConfig,
    /// GPU category.
    pub gpu: GpuConfig,
    /// Network category.
    pub network: NetworkConfig,
    /// Output units.
    pub units: UnitsConfig,
    /// relay-metrics addition: the cgroup measured by the `cgroup` scope, e.g.
    /// `/system.slice/foo.service`, relative to the cgroup mounts.
    pub cgroup_path: Option<String>,
    /// relay-metrics addition: root process of `process_tree` / `application_process`
    /// (default: the calling process).
    pub root_pid: Option<u32>,
    /// relay-metrics additions that tune the collector itself.
    pub extensions: ExtensionsConfig,
}

/// `polling` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PollingConfig {
    /// Collect periodically (the CLI's `watch` and `run` always do).
    pub enabled: bool,
    /// Period between polls; must be greater than zero even when polling is off.
    pub interval_millis: u64,
}

/// The longest sampling period used: one day (86,400,000 ms). `--interval-ms` refuses more;
/// `polling.interval_millis` accepts up to `u64::MAX`, as Relay does, and samples at least
/// once a day ([`PollingConfig::period`]).
pub const MAX_INTERVAL_MILLIS: u64 = 86_400_000;

impl PollingConfig {
    /// The period between polls: `interval_millis`, at most [`MAX_INTERVAL_MILLIS`].
    pub fn period(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.interval_millis.min(MAX_INTERVAL_MILLIS))
    }
}

/// Parses an interval flag (`--interval-ms`): whole milliseconds from 1 to
/// [`MAX_INTERVAL_MILLIS`].
pub fn parse_interval_millis(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(ms) if (1..=MAX_INTERVAL_MILLIS).contains(&ms) => Ok(ms),
        _ => Err(format!(
            "expected whole milliseconds from 1 to {MAX_INTERVAL_MILLIS} (one day), got {text:?}"
        )),
    }
}

impl Default for PollingConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            interval_millis: 5000,
        }
    }
}

/// A category that can only be switched on or off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CategoryConfig {
    /// Collect this category.
    pub enabled: bool,
}

impl Default for CategoryConfig {
    fn default() -> Self {
        Self { enabled: true }
    }
}

/// `disk` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DiskConfig {
    /// Disk category (both subgroups).
    pub enabled: bool,
    /// Per-process I/O counters and throughput.
    pub process_io: bool,
    /// Absolute paths whose filesystem capacity is reported, in this order.
    pub filesystem_paths: Vec<String>,
}

impl Default for DiskConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            process_io: true,
            filesystem_paths: Vec::new(),
        }
    }
}

/// `gpu` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GpuConfig {
    /// GPU category.
    pub enabled: bool,
    /// Device selectors: identifier (UUID, PCI address) or decimal NVML index; empty = all.
    pub devices: Vec<String>,
    /// Device-wide group.
    pub device_metrics: bool,
    /// Per-process group.
    pub process_metrics: bool,
}

impl Default for GpuConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            devices: Vec::new(),
            device_metrics: true,
            process_metrics: true,
        }
    }
}

/// `network` section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Network category.
    pub enabled: bool,
    /// Exact interface names; empty = all visible.
    pub interfaces: Vec<String>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            interfaces: Vec::new(),
        }
    }
}

/// relay-metrics additions that tune the collector (not part of Relay's config).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExtensionsConfig {
    /// Minimum age before `memory.private` is read again (its only exact source,
    /// `smaps_rollup`, costs ~90 µs per process). 0 = every snapshot, as in Relay.
    pub private_memory_interval_millis: u64,
    /// Minimum age before the machine-wide values read in every scope are read again: system
    /// memory (`/proc/meminfo`), filesystem capacities (`statfs`) and network interface counters
    /// (`/proc/net/dev`), ~12 µs of a 3-process tree's ~45 µs of reads. 0 = every snapshot, as
    /// in Relay.
    pub system_wide_interval_millis: u64,
    /// Load the eBPF programs for kernel event counters (needs root; off gives a reason).
    pub kernel_events: bool,
    /// At most this many processes keep their /proc files open between snapshots; beyond it,
    /// files are opened per read (slower, still correct).
    pub max_held_processes: usize,
    /// The names the agent's metrics (Prometheus and OTLP) are exported under.
    pub metric_names: MetricNames,
    /// Where per-process values come from (see [`ProcessSource`]).
    pub process_source: ProcessSource,
    /// Where the measured cgroups' values come from (see [`CgroupSource`]).
    pub cgroup_source: CgroupSource,
    /// Cgroups measured one by one besides the scope (the agent's per-container series): glob
    /// patterns over cgroup paths (`*` and `?` within one path component, `[…]` classes, `**`
    /// any number of components), e.g. `/system.slice/*.service`. Empty with no
    /// [`Self::cgroup_depth`]: none.
    pub cgroups: Vec<String>,
    /// Bounds the depth of the cgroups measured one by one (`/a` is depth 1). Without
    /// [`Self::cgroups`] patterns, every cgroup down to this depth that holds a process (itself
    /// or below) is measured.
    pub cgroup_depth: Option<u32>,
    /// At most this many cgroups are measured one by one; the others (the last in path order)
    /// are dropped with a warning and counted.
    pub max_targets: usize,
    /// The Docker Engine API socket (docker's, or podman's `podman system service`) that names
    /// the containers among [`Self::cgroups`]; asked off the sampling thread.
    pub docker_socket: Option<String>,
    /// The Kubernetes CRI endpoint (`unix:///run/containerd/containerd.sock`, CRI-O's
    /// `unix:///run/crio/crio.sock`, or the socket's path) that names the pods among
    /// [`Self::cgroups`]; asked off the sampling thread.
    pub cri_endpoint: Option<String>,
    /// List each network interface in `network.interfaces` (Relay's schema). Off, the list is
    /// empty and only the totals over the interfaces (`network.system`) are given: most of a
    /// line on a machine with many interfaces (`run` without `--config` turns it off).
    pub network_interfaces: bool,
}

/// The naming of exported metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "cli", value(rename_all = "snake_case"))]
pub enum MetricNames {
    /// `relay_metrics_*` families in base units (seconds, bytes, …), counters ending in
    /// `_total`.
    #[default]
    RelayMetrics,
    /// NeMo Relay's mark measurements: `nemo.relay.resource.*` gauges in the configured units
    /// (dots become underscores in Prometheus).
    Relay,
    /// OpenTelemetry semantic-convention names (`system.cpu.time`, `process.memory.usage`,
    /// `container.cpu.time`, …) with UCUM units, `relay_metrics.*` where no convention exists
    /// (Prometheus: dots become underscores, unit suffixes and `_total` are added).
    Otel,
    /// cAdvisor's names, types, units and labels as the kubelet's `/metrics/cadvisor` gives
    /// them for the cgroups measured one by one, node_exporter's for the machine's values, and
    /// the `relay_metrics_*` names for what neither has (docs/METRICS.md maps each).
    Cadvisor,
}

/// `extensions.process_source`: where per-process values come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProcessSource {
    /// The BPF task iterator where it loads and serves the scope, else procfs (with the reason
    /// in `extensions.collector.process_source_reason`).
    #[default]
    Auto,
    /// The BPF task iterator; a collector cannot be created where it does not load.
    BpfIter,
    /// Always procfs.
    Procfs,
}

impl ProcessSource {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::BpfIter => "bpf_iter",
            Self::Procfs => "procfs",
        }
    }
}

/// `extensions.cgroup_source`: where the measured cgroups' (`extensions.cgroups`) values that
/// the kernel keeps exactly in memory come from (memory usage, peak, failcnt and OOM kills, pids
/// in use, the CFS counters; docs/ARCHITECTURE.md lists them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupSource {
    /// The BPF cgroup iterator (one read per hierarchy and snapshot) where it loads and is the
    /// cheaper path (enough cgroups measured against the cgroups its walks meet), else the
    /// files (with the reason in `extensions.collector.cgroup_source_reason`).
    #[default]
    Auto,
    /// The BPF cgroup iterator; a collector measuring cgroups cannot be created where it does
    /// not load. Each kind still comes from its file where the iterator disagreed with it.
    BpfIter,
    /// Always the files; the iterator is never loaded.
    Files,
}

impl CgroupSource {
    /// The configuration spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::BpfIter => "bpf_iter",
            Self::Files => "files",
        }
    }
}

impl Default for ExtensionsConfig {
    fn default() -> Self {
        Self {
            private_memory_interval_millis: 0,
            system_wide_interval_millis: 0,
            kernel_events: true,
            max_held_processes: 4096,
            metric_names: MetricNames::RelayMetrics,
            process_source: ProcessSource::Auto,
            cgroup_source: CgroupSource::Auto,
            cgroups: Vec::new(),
            cgroup_depth: None,
            max_targets: 2000,
            docker_socket: None,
            cri_endpoint: None,
            network_interfaces: true,
        }
    }
}

impl ResourceMetricsConfig {
    /// Reads a configuration from JSON or TOML text, validated. Accepts either the component
    /// config itself or a Relay plugin configuration (`components` list, as in `plugins.toml`)
    /// holding one `resource_metrics` component.
    pub fn from_text(text: &str) -> Result<Self, ConfigError> {
        let value = parse_document(text).map_err(|reason| ConfigError::Syntax {
            path: "<text>".into(),
            reason,
        })?;
        Self::from_value(value)
    }

    /// Reads and validates a configuration file (`.json`, `.toml`, or either by content).
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text = read_config_text(path).map_err(|reason| ConfigError::Read {
            path: path.display().to_string(),
            reason,
        })?;
        let value = parse_document(&text).map_err(|reason| ConfigError::Syntax {
            path: path.display().to_string(),
            reason,
        })?;
        Self::from_value(value)
    }

    /// Deserialises and validates a parsed document.
    pub fn from_value(value: serde_json::Value) -> Result<Self, ConfigError> {
        let component = extract_component(value)?;
        // Going through `serde_json::Value` gives Relay's messages without line/column suffixes.
        let config: Self = serde_json::from_value(component)
            .map_err(|error| ConfigError::Invalid(error.to_string()))?;
        config.validate()?;
        Ok(config)
    }

    /// Relay's validation rules, then ours. Returns the first failure, as Relay does.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |tail: String| Err(ConfigError::Invalid(format!("invalid argument: {tail}")));
        if let Err(reason) =
            crate::source::cgroup::CgroupPattern::parse_all(&self.extensions.cgroups)
        {
            return invalid(format!("resource_metrics.extensions.cgroups: {reason}"));
        }
        if let Some(endpoint) = &self.extensions.cri_endpoint {
            cri_socket(endpoint).map_err(|reason| {
                ConfigError::Invalid(format!(
                    "invalid argument: resource_metrics.extensions.cri_endpoint: {reason}"
                ))
            })?;
        }
        if self.extensions.cgroup_depth == Some(0) {
            return invalid("resource_metrics.extensions.cgroup_depth must be at least 1".into());
        }
        if self.polling.interval_millis == 0 {
            return invalid(
                "resource_metrics.polling.interval_millis must be greater than zero".into(),
            );
        }
        for (index, path) in self.disk.filesystem_paths.iter().enumerate() {
            if path.is_empty() {
                return invalid(format!(
                    "resource_metrics.disk.filesystem_paths[{index}] must not be empty"
                ));
            }
            if !path.starts_with('/') {
                return invalid(format!(
                    "resource_metrics.disk.filesystem_paths[{index}] must be absolute"
                ));
            }
        }
        if self
            .network
            .interfaces
            .iter()
            .any(|name| name.trim().is_empty())
        {
            return invalid(
                "resource_metrics.network.interfaces must not contain blank names".into(),
            );
        }
        if self
            .gpu
            .devices
            .iter()
            .any(|selector| selector.trim().is_empty())
        {
            return invalid(
                "resource_metrics.gpu.devices must not contain empty identifiers".into(),
            );
        }
        if let Some(path) = &self.cgroup_path {
            validate_cgroup_path(path).or_else(invalid)?;
        }
        if self.measurement_scope == ScopeSetting::Cgroup && self.cgroup_path.is_none() {
            return invalid(
                "resource_metrics.cgroup_path is required when measurement_scope is cgroup".into(),
            );
        }
        if self.root_pid == Some(0) {
            return invalid(
                "resource_metrics.root_pid must be a process id greater than zero".into(),
            );
        }
        Ok(())
    }
}

/// A cgroup path must be absolute and must not climb out of the cgroup mount.
pub fn validate_cgroup_path(path: &str) -> Result<(), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "resource_metrics.cgroup_path must be absolute (like /system.slice/foo.service), got {path:?}"
        ));
    }
    if path.split('/').any(|component| component == "..") {
        return Err(format!(
            "resource_metrics.cgroup_path must not contain '..' (it would escape the cgroup mount), got {path:?}"
        ));
    }
    Ok(())
}

/// Checks one `extensions.cgroups` pattern (`--cgroups`): absolute, no `..`, classes closed,
/// `**` only as a whole component.
pub fn check_cgroup_pattern(pattern: &str) -> Result<(), String> {
    crate::source::cgroup::CgroupPattern::parse(pattern).map(|_| ())
}

/// The socket of a CRI endpoint (`extensions.cri_endpoint`, `serve --cri-endpoint`):
/// `unix:///path` or an absolute path, as `crictl` takes them.
pub fn cri_socket(endpoint: &str) -> Result<std::path::PathBuf, String> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if path.starts_with('/') {
        Ok(std::path::PathBuf::from(path))
    } else {
        Err(format!(
            "a CRI endpoint is a Unix socket, unix:///path or /path (like unix:///run/containerd/containerd.sock), got {endpoint:?}"
        ))
    }
}

/// Parses JSON, or TOML when the text is not JSON. A leading UTF-8 byte order mark (which
/// some Windows editors write) is skipped for both.
fn parse_document(text: &str) -> Result<serde_json::Value, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    match serde_json::from_str(text) {
        Ok(value) => Ok(value),
        Err(json_error) => {
            // Checked before the TOML parser, which reads a whole deep document before its own
            // recursion limit stops it (serde_json stops at 128 levels as it reads).
            let toml = check_toml_nesting(text.as_bytes(), MAX_NESTING).and_then(|()| {
                toml::from_str::<serde_json::Value>(text)
                    .map_err(|toml_error| toml_error.message().to_owned())
            });
            toml.map_err(|toml_error| format!("as JSON: {json_error}; as TOML: {toml_error}"))
        }
    }
}

/// Unwraps a Relay plugin configuration down to its `resource_metrics` component config.
/// A document without a `components` key is taken as the component config itself.
fn extract_component(value: serde_json::Value) -> Result<serde_json::Value, ConfigError> {
    let Some(components) = value.get("components").and_then(|c| c.as_array()) else {
        return Ok(value);
    };
    let mut found = components.iter().filter(|component| {
        component.get("kind").and_then(|k| k.as_str()) == Some("resource_metrics")
    });
    let Some(component) = found.next() else {
        return Err(ConfigError::Invalid(
            "the plugin configuration has no resource_metrics component".into(),
        ));
    };
    if found.next().is_some() {
        return Err(ConfigError::DuplicateComponent);
    }
    if component.get("enabled").and_then(|e| e.as_bool()) == Some(false) {
        return Err(ConfigError::Invalid(
            "the resource_metrics component is disabled (enabled = false)".into(),
        ));
    }
    Ok(component
        .get("config")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({})))
}

mod input;
mod nesting;
mod units;

pub use input::{read_input_file, InputKind};
pub use nesting::{check_toml_nesting, check_yaml_nesting, MAX_NESTING};
pub use units::*;

/// Reads a config file through the input guard ([`read_input_file`]), as UTF-8.
fn read_config_text(path: &Path) -> Result<String, String> {
    let bytes = read_input_file(path, InputKind::Config)?;
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".into())
}

#[cfg(test)]
mod tests;
