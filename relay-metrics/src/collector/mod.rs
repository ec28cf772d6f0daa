//! The collector: reads every source into a [`Sample`], then lets the pure model turn it into a
//! snapshot. Data flows one way: sources → sample → model → snapshot → outputs.
//!
//! ```
//! use relay_metrics::{Collector, ResourceMetricsConfig};
//!
//! // The calling process and its children (Relay's default scope), CPU and memory only.
//! let config = ResourceMetricsConfig::from_text(
//!     r#"{"disk": {"enabled": false}, "gpu": {"enabled": false}, "network": {"enabled": false}}"#,
//! )?;
//! let mut collector = Collector::new(config)?;
//! let first = collector.collect();
//! let second = collector.collect(); // rates are relative to `first`
//! let cpu = second.cpu.as_ref().expect("the cpu category is enabled");
//! assert!(cpu.total_time.is_some());
//! println!("{}", serde_json::to_string_pretty(&*second)?);
//! # drop(first);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod environment;
mod gpu;
mod processes;
mod target;

pub use target::Target;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;

use crate::config::{ConfigError, ResourceMetricsConfig};
use crate::model::{self, Baselines, FilesystemValues, GpuValues, InterfaceValues, Sample, Wanted};
use crate::snapshot::{
    CollectorInfo, KernelEvents, ResourceMetricsSnapshot, SamplerInfo, TargetInfo, Unavailable,
};
use crate::source::cgroup::CgroupLayout;
use crate::source::net::{self, InterfaceCounters, NetReader};
use crate::source::system::{SystemFields, SystemReader, SystemSample};
use crate::source::{fs, Roots};

use environment::Environment;
use gpu::GpuFeed;
use processes::ProcessPassReader;

/// A collector that cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The target (pid, cgroup) does not exist or cannot be read.
    #[error("{0}")]
    Target(String),
}

/// Collects snapshots of one target with one configuration. Rate baselines belong to the
/// collector: each collector is one series.
pub struct Collector {
    config: ResourceMetricsConfig,
    target: Target,
    processes: ProcessPassReader,
    system: SystemReader,
    system_sample: SystemSample,
    environment: Environment,
    net: NetReader,
    net_counters: Vec<InterfaceCounters>,
    gpu: GpuFeed,
    baselines: Baselines,
    sequence: u64,
}

impl Collector {
    /// A collector of the running system, validated.
    pub fn new(config: ResourceMetricsConfig) -> Result<Self, CollectorError> {
        Self::with_roots(config, Roots::host())
    }

    /// A collector reading `/proc` and `/sys` from `roots` (fixture trees in tests).
    pub fn with_roots(config: ResourceMetricsConfig, roots: Roots) -> Result<Self, CollectorError> {
        config.validate()?;
        let layout = CgroupLayout::discover(&roots).ok();
        let target = Target::resolve(&config, &roots, layout.as_ref())?;
        let scope = target.scope();
        let wanted = Wanted::from_config(&config, scope);
        let processes = ProcessPassReader::new(&roots, &config, &target, wanted)?;
        let environment = Environment::new(&roots, layout.as_ref(), &target);
        let gpu = GpuFeed::start(&config, &roots);
        Ok(Self {
            system: SystemReader::new(&roots),
            system_sample: SystemSample::default(),
            net: NetReader::new(&roots),
            net_counters: Vec::new(),
            config,
            target,
            processes,
            environment,
            gpu,
            baselines: Baselines::default(),
            sequence: 0,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &ResourceMetricsConfig {
        &self.config
    }

    /// The resolved target.
    pub fn target(&self) -> &Target {
        &self.target
    }

    /// Takes one snapshot. Never fails: whatever cannot be read becomes `null`, with a reason
    /// in `extensions.unavailable`.
    pub fn collect(&mut self) -> Arc<ResourceMetricsSnapshot> {
        self.collect_inner(None)
    }

    /// Takes one snapshot of a fixed-rate series, recording the tick in `extensions.sampler`.
    pub fn collect_with_sampler(&mut self, sampler: SamplerInfo) -> Arc<ResourceMetricsSnapshot> {
        self.collect_inner(Some(sampler))
    }

    fn collect_inner(&mut self, sampler: Option<SamplerInfo>) -> Arc<ResourceMetricsSnapshot> {
        let started = Instant::now();
        let sample = self.sample();
        let mut snapshot = model::derive(&self.config, &sample, &mut self.baselines, Utc::now());
        self.sequence += 1;
        snapshot.extensions.collector = CollectorInfo {
            name: "relay-metrics".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            sequence: self.sequence,
            collect_duration_usec: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        };
        snapshot.extensions.target = self.target_info();
        snapshot.extensions.sampler = sampler;
        Arc::new(snapshot)
    }

    fn target_info(&self) -> TargetInfo {
        match &self.target {
            Target::Global => Default::default(),
            Target::Process { pid, .. } => TargetInfo {
                root_pid: Some(*pid),
                cgroup_path: None,
            },
            Target::Cgroup { path, .. } => TargetInfo {
                root_pid: None,
                cgroup_path: Some(path.clone()),
            },
        }
    }

    /// Reads every source once.
    fn sample(&mut self) -> Sample {
        let scope = self.target.scope();
        let mut unavailable = Vec::new();
        let processes = self.processes.read(&self.target, &mut unavailable);
        let instant = Instant::now();
        let boottime_ns = boottime_ns();

        let global = matches!(self.target, Target::Global);
        let fields = SystemFields {
            meminfo: self.config.memory.enabled,
            stat: global && self.config.cpu.enabled,
            psi: global && (self.config.cpu.enabled || self.config.memory.enabled),
        };
        self.system.read_into(fields, &mut self.system_sample);
        for error in &self.system_sample.errors {
            unavailable.push(Unavailable {
                field: "system".into(),
                reason: error.to_string(),
            });
        }
        let system = processes::system_values(&self.system_sample);

        let (cgroup, cgroup_reports) =
            self.environment
                .read(&self.config, &self.target, &processes, &mut unavailable);

        let filesystems = if self.config.disk.enabled {
            self.config
                .disk
                .filesystem_paths
                .iter()
                .enumerate()
                .map(|(index, path)| {
                    let capacity = fs::filesystem_capacity(std::path::Path::new(path));
                    if let Some(reason) = &capacity.error {
                        unavailable.push(Unavailable {
                            field: format!("disk.filesystems[{index}]"),
                            reason: reason.clone(),
                        });
                    }
                    FilesystemValues {
                        path: path.clone(),
                        total_bytes: capacity.total_bytes,
                        available_bytes: capacity.available_bytes,
                        free_bytes: capacity.free_bytes,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };

        let interfaces = if self.config.network.enabled {
            self.read_interfaces(&mut unavailable)
        } else {
            Vec::new()
        };

        let gpu = if self.config.gpu.enabled {
            self.gpu.latest(&processes, &mut unavailable)
        } else {
            GpuValues::default()
        };

        Sample {
            scope,
            instant,
            boottime_ns,
            clock_ticks_per_second: self.processes.clock_ticks_per_second(),
            private_memory_age_ms: self.processes.private_memory_age_ms(),
            processes,
            system,
            cgroup,
            cgroup_reports,
            filesystems,
            interfaces,
            gpu,
            kernel_events: KernelEvents {
                active: false,
                reason: Some("the eBPF event source is not built into this version".into()),
                ..Default::default()
            },
            unavailable,
        }
    }

    fn read_interfaces(&mut self, unavailable: &mut Vec<Unavailable>) -> Vec<InterfaceValues> {
        if let Err(error) = self.net.read(&mut self.net_counters) {
            unavailable.push(Unavailable {
                field: "network".into(),
                reason: error.to_string(),
            });
            return Vec::new();
        }
        let selection = &self.config.network.interfaces;
        self.net_counters
            .iter()
            .filter(|counters| net::select(selection, counters.name.as_str()))
            .map(|c| InterfaceValues {
                name: c.name.to_string(),
                rx_bytes: c.rx_bytes,
                tx_bytes: c.tx_bytes,
                rx_packets: c.rx_packets,
                tx_packets: c.tx_packets,
                rx_errors: c.rx_errors,
                tx_errors: c.tx_errors,
            })
            .collect()
    }
}

/// `CLOCK_BOOTTIME` in ns: the clock process start times are counted on.
fn boottime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// A collector shared with async code: `collect` runs on tokio's blocking pool, so a slow read
/// never stalls the runtime's workers.
#[derive(Clone)]
pub struct AsyncCollector {
    inner: Arc<Mutex<Collector>>,
}

impl AsyncCollector {
    /// Wraps a collector.
    pub fn new(collector: Collector) -> Self {
        Self {
            inner: Arc::new(Mutex::new(collector)),
        }
    }

    /// Takes one snapshot without blocking the async runtime.
    pub async fn collect(&self) -> Result<Arc<ResourceMetricsSnapshot>, CollectorError> {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut collector = inner
                .lock()
                .map_err(|_| CollectorError::Target("a previous collection panicked".into()))?;
            Ok(collector.collect())
        })
        .await
        .map_err(|error| CollectorError::Target(format!("collection task failed: {error}")))?
    }
}

/// How long ago `instant` was, in whole milliseconds.
pub(crate) fn age_ms(instant: Instant) -> u64 {
    u64::try_from(instant.elapsed().as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ScopeSetting;

    fn own_tree_config() -> ResourceMetricsConfig {
        ResourceMetricsConfig {
            measurement_scope: ScopeSetting::ApplicationProcess,
            ..Default::default()
        }
    }

    #[test]
    fn the_async_collector_runs_on_the_blocking_pool_and_keeps_one_series() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let collector = AsyncCollector::new(Collector::new(own_tree_config()).unwrap());
        let (first, second) = runtime.block_on(async {
            let first = collector.collect().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            (first, collector.collect().await.unwrap())
        });
        assert_eq!(first.extensions.collector.sequence, 1);
        assert_eq!(second.extensions.collector.sequence, 2);
        assert_eq!(second.extensions.target.root_pid, Some(std::process::id()));
        assert!(first.cpu.as_ref().unwrap().consumption_rate.is_none());
        assert!(second.cpu.as_ref().unwrap().consumption_rate.is_some());
    }

    #[test]
    fn an_invalid_config_is_refused_with_relays_message() {
        let mut config = own_tree_config();
        config.polling.interval_millis = 0;
        let error = Collector::new(config).err().unwrap().to_string();
        assert!(
            error.starts_with("invalid resource metrics config: invalid argument:"),
            "{error}"
        );
    }
}
