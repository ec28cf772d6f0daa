//! GPU values for a pass: the latest sample of the GPU thread (NVML calls take milliseconds and
//! finding DRM clients means listing every fd of every process: the sampling path must not wait
//! on either) plus DRM sysfs devices.

use std::sync::Arc;
use std::time::Duration;

use crate::config::ResourceMetricsConfig;
use crate::model::{GpuDeviceValues, GpuProcessValues, GpuValues, ProcessPass};
use crate::snapshot::AcceleratorVendor;
use crate::source::gpu::{
    DrmClientScanner, DrmDeviceSample, DrmFdCheck, DrmSource, DrmVendor, GpuSample, GpuSampler,
    NvmlOptions, NvmlSource, XidWatcher,
};

mod extension;
use crate::source::Roots;

use super::reasons::Reasons;

/// How often the GPU thread queries NVML and scans for DRM clients. NVML's own utilisation
/// counters update at about 6 Hz, so querying faster would only repeat values.
const NVML_PERIOD: Duration = Duration::from_millis(500);

/// How long the first collection waits for the first NVML answer (a missing library answers
/// at once; a real driver within a few ms).
const FIRST_SAMPLE_WAIT: Duration = Duration::from_millis(500);

pub(super) struct GpuFeed {
    sampler: Option<GpuSampler>,
    /// XID errors through NVML's event API (device metrics only), or why its thread could not
    /// start.
    xid: Option<Result<XidWatcher, String>>,
    spawn_error: Option<String>,
    /// NVML lists processes (the config's `gpu.process_metrics`).
    process_metrics: bool,
    waited_for_first: bool,
    drm: Option<DrmSource>,
    drm_devices: Vec<DrmDeviceSample>,
}

impl GpuFeed {
    pub(super) fn start(config: &ResourceMetricsConfig, roots: &Roots) -> Self {
        let gpu = &config.gpu;
        let wanted = gpu.enabled && (gpu.device_metrics || gpu.process_metrics);
        let mut xid = None;
        let (sampler, spawn_error) = if wanted {
            let options = NvmlOptions {
                devices: gpu.devices.clone(),
                device_metrics: gpu.device_metrics,
                process_metrics: gpu.process_metrics,
                ..NvmlOptions::from_env()
            };
            // Fixture trees cannot hold device nodes: their DRM fds are links named /dev/dri/*.
            let check = if *roots == Roots::host() {
                DrmFdCheck::DeviceNumber
            } else {
                DrmFdCheck::LinkName
            };
            let drm_clients = gpu
                .process_metrics
                .then(|| DrmClientScanner::new(roots, check, &gpu.devices));
            xid = gpu.device_metrics.then(|| {
                XidWatcher::spawn(options.clone())
                    .map_err(|error| format!("cannot start the XID thread: {error}"))
            });
            match GpuSampler::spawn_with_drm(NvmlSource::new(options), drm_clients, NVML_PERIOD) {
                Ok(sampler) => (Some(sampler), None),
                Err(error) => (None, Some(format!("cannot start the GPU thread: {error}"))),
            }
        } else {
            (None, None)
        };
        let drm = (gpu.enabled && gpu.device_metrics).then(|| DrmSource::scan(roots, &gpu.devices));
        Self {
            sampler,
            xid,
            spawn_error,
            process_metrics: wanted && gpu.process_metrics,
            waited_for_first: false,
            drm,
            drm_devices: Vec::new(),
        }
    }

    /// Device records and the process records of processes in this pass, written into `out`.
    pub(super) fn fill(
        &mut self,
        processes: &ProcessPass,
        reasons: &mut Reasons,
        out: &mut GpuValues,
    ) {
        let mut devices = 0;
        let mut records = 0;
        out.age_ms = None;
        if let Some(reason) = &self.spawn_error {
            reasons.add("gpu", format_args!("{reason}"));
        }
        let nvml = self.nvml_sample();
        out.nvml_processes = self.process_metrics
            && matches!(processes, ProcessPass::Sampled(_))
            && nvml.as_ref().is_some_and(|sample| sample.error.is_none());
        if let Some(sample) = &nvml {
            if let Some(error) = &sample.error {
                reasons.add("gpu", format_args!("NVML: {error}"));
            }
            out.age_ms = Some(u64::try_from(sample.age().as_millis()).unwrap_or(u64::MAX));
            for d in &sample.devices {
                let entry = slot(&mut out.devices, &mut devices, || GpuDeviceValues {
                    vendor: AcceleratorVendor::Nvidia,
                    identifier: Arc::from(""),
                    index: None,
                    memory_used_bytes: None,
                    utilization_percent: None,
                });
                entry.vendor = AcceleratorVendor::Nvidia;
                share(&mut entry.identifier, &d.identifier);
                entry.index = Some(d.index);
                entry.memory_used_bytes = d.memory_used_bytes;
                entry.utilization_percent = d.utilization_percent;
            }
            if let ProcessPass::Sampled(set) = processes {
                let in_scope = |pid: u32| set.processes.iter().any(|p| p.pid == pid);
                for p in sample.processes_matching(in_scope) {
                    let entry = slot(&mut out.processes, &mut records, || GpuProcessValues {
                        vendor: AcceleratorVendor::Nvidia,
                        identifier: Arc::from(""),
                        index: None,
                        pid: 0,
                        memory_used_bytes: None,
                        utilization_percent: None,
                        memory_utilization_percent: None,
                    });
                    entry.vendor = AcceleratorVendor::Nvidia;
                    share(&mut entry.identifier, &p.device_identifier);
                    entry.index = Some(p.device_index);
                    entry.pid = p.pid;
                    entry.memory_used_bytes = p.memory_used_bytes;
                    entry.utilization_percent = p.sm_utilization_percent;
                    entry.memory_utilization_percent = p.memory_utilization_percent;
                }
                for p in sample.drm_processes.iter().filter(|p| {
                    set.processes
                        .iter()
                        .any(|q| q.pid == p.pid && q.start_time_ticks == p.start_time_ticks)
                }) {
                    let entry = slot(&mut out.processes, &mut records, || GpuProcessValues {
                        vendor: AcceleratorVendor::Other,
                        identifier: Arc::from(""),
                        index: None,
                        pid: 0,
                        memory_used_bytes: None,
                        utilization_percent: None,
                        memory_utilization_percent: None,
                    });
                    entry.vendor = accelerator_vendor(p.vendor);
                    share(&mut entry.identifier, &p.identifier);
                    entry.index = None;
                    entry.pid = p.pid;
                    entry.memory_used_bytes = p.memory_used_bytes;
                    entry.utilization_percent = p.utilization_percent;
                    entry.memory_utilization_percent = None;
                }
            }
            if let Some(error) = &sample.drm_error {
                reasons.add("gpu", format_args!("DRM clients: {error}"));
            }
        }
        if let Some(drm) = &mut self.drm {
            drm.read_into(&mut self.drm_devices);
            for d in &self.drm_devices {
                let entry = slot(&mut out.devices, &mut devices, || GpuDeviceValues {
                    vendor: AcceleratorVendor::Other,
                    identifier: Arc::from(""),
                    index: None,
                    memory_used_bytes: None,
                    utilization_percent: None,
                });
                entry.vendor = accelerator_vendor(d.vendor);
                share(&mut entry.identifier, &d.identifier);
                entry.index = None;
                entry.memory_used_bytes = d.memory_used_bytes;
                entry.utilization_percent = d.utilization_percent;
            }
        }
        out.devices.truncate(devices);
        out.processes.truncate(records);
        extension::fill(
            nvml.as_deref(),
            self.xid.as_ref().map(Result::as_ref),
            &self.drm_devices,
            reasons,
            &mut out.extension,
        );
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

fn accelerator_vendor(vendor: DrmVendor) -> AcceleratorVendor {
    match vendor {
        DrmVendor::Amd => AcceleratorVendor::Amd,
        DrmVendor::Intel => AcceleratorVendor::Intel,
        DrmVendor::Other => AcceleratorVendor::Other,
    }
}

/// The next entry of a list being rewritten in place, created only when the list grows.
fn slot<'a, T>(list: &'a mut Vec<T>, used: &mut usize, create: impl FnOnce() -> T) -> &'a mut T {
    if *used == list.len() {
        list.push(create());
    }
    *used += 1;
    &mut list[*used - 1]
}

/// Points `target` at `value`, allocating a new shared string only when the text changed.
fn share(target: &mut Arc<str>, value: &str) {
    if **target != *value {
        *target = Arc::from(value);
    }
}
