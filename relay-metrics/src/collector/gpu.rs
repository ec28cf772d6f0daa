//! GPU values for a pass: the latest NVML sample from its own thread (NVML calls take
//! milliseconds, the sampling path must not wait on them) plus DRM sysfs devices.

use std::sync::Arc;
use std::time::Duration;

use crate::config::ResourceMetricsConfig;
use crate::model::{GpuDeviceValues, GpuProcessValues, GpuValues, ProcessPass};
use crate::snapshot::{AcceleratorVendor, Unavailable};
use crate::source::gpu::{
    DrmDeviceSample, DrmSource, DrmVendor, GpuSample, GpuSampler, NvmlOptions, NvmlSource,
};
use crate::source::Roots;

/// How often the NVML thread queries the driver. NVML's own utilisation counters update at
/// about 6 Hz, so querying faster would only repeat values.
const NVML_PERIOD: Duration = Duration::from_millis(500);

/// How long the first collection waits for the first NVML answer (a missing library answers
/// at once; a real driver within a few ms).
const FIRST_SAMPLE_WAIT: Duration = Duration::from_millis(500);

pub(super) struct GpuFeed {
    sampler: Option<GpuSampler>,
    spawn_error: Option<String>,
    waited_for_first: bool,
    drm: Option<DrmSource>,
    drm_devices: Vec<DrmDeviceSample>,
}

impl GpuFeed {
    pub(super) fn start(config: &ResourceMetricsConfig, roots: &Roots) -> Self {
        let gpu = &config.gpu;
        let wanted = gpu.enabled && (gpu.device_metrics || gpu.process_metrics);
        let (sampler, spawn_error) = if wanted {
            let options = NvmlOptions {
                devices: gpu.devices.clone(),
                device_metrics: gpu.device_metrics,
                process_metrics: gpu.process_metrics,
                ..NvmlOptions::from_env()
            };
            match GpuSampler::spawn(NvmlSource::new(options), NVML_PERIOD) {
                Ok(sampler) => (Some(sampler), None),
                Err(error) => (None, Some(format!("cannot start the NVML thread: {error}"))),
            }
        } else {
            (None, None)
        };
        let drm = (gpu.enabled && gpu.device_metrics).then(|| DrmSource::scan(roots, &gpu.devices));
        Self {
            sampler,
            spawn_error,
            waited_for_first: false,
            drm,
            drm_devices: Vec::new(),
        }
    }

    /// Device records and the process records of processes in this pass.
    pub(super) fn latest(
        &mut self,
        processes: &ProcessPass,
        unavailable: &mut Vec<Unavailable>,
    ) -> GpuValues {
        let mut values = GpuValues::default();
        if let Some(reason) = &self.spawn_error {
            unavailable.push(Unavailable {
                field: "gpu".into(),
                reason: reason.clone(),
            });
        }
        if let Some(sample) = self.nvml_sample() {
            if let Some(error) = &sample.error {
                unavailable.push(Unavailable {
                    field: "gpu".into(),
                    reason: format!("NVML: {error}"),
                });
            }
            values.age_ms = Some(u64::try_from(sample.age().as_millis()).unwrap_or(u64::MAX));
            values
                .devices
                .extend(sample.devices.iter().map(|d| GpuDeviceValues {
                    vendor: AcceleratorVendor::Nvidia,
                    identifier: d.identifier.clone(),
                    index: Some(d.index),
                    memory_used_bytes: d.memory_used_bytes,
                    utilization_percent: d.utilization_percent,
                }));
            if let ProcessPass::Sampled(set) = processes {
                let in_scope = |pid: u32| set.processes.iter().any(|p| p.pid == pid);
                values
                    .processes
                    .extend(
                        sample
                            .processes_matching(in_scope)
                            .map(|p| GpuProcessValues {
                                vendor: AcceleratorVendor::Nvidia,
                                identifier: p.device_identifier.clone(),
                                index: Some(p.device_index),
                                pid: p.pid,
                                memory_used_bytes: p.memory_used_bytes,
                                utilization_percent: p.sm_utilization_percent,
                            }),
                    );
            }
        }
        if let Some(drm) = &mut self.drm {
            drm.read_into(&mut self.drm_devices);
            values
                .devices
                .extend(self.drm_devices.iter().map(|d| GpuDeviceValues {
                    vendor: match d.vendor {
                        DrmVendor::Amd => AcceleratorVendor::Amd,
                        DrmVendor::Intel => AcceleratorVendor::Intel,
                    },
                    identifier: d.identifier.clone(),
                    index: None,
                    memory_used_bytes: d.memory_used_bytes,
                    utilization_percent: d.utilization_percent,
                }));
        }
        values
    }

    fn nvml_sample(&mut self) -> Option<Arc<GpuSample>> {
        let sampler = self.sampler.as_ref()?;
        if !self.waited_for_first {
            self.waited_for_first = true;
            return sampler.wait_for_sample(None, FIRST_SAMPLE_WAIT);
        }
        sampler.latest()
    }
}
