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

/// The age past which the GPU thread's latest sample is not served: its queries take well
/// under a period even on 8 GPUs, so a sample this old means an NVML call is blocked, and its
/// values would be exported as current.
const STALE_AFTER: Duration = Duration::from_secs(5);

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
        out.age_ms = None;
        if let Some(reason) = &self.spawn_error {
            reasons.add("gpu", format_args!("{reason}"));
        }
        let sample = self.nvml_sample();
        if sample.is_none() && self.sampler.is_some() {
            reasons.add(
                "gpu",
                format_args!("NVML has not answered its first query yet"),
            );
        }
        let stale = sample
            .as_ref()
            .map(|sample| sample.age())
            .filter(|age| *age > STALE_AFTER);
        if let Some(age) = stale {
            reasons.add(
                "gpu",
                format_args!(
                    "NVML's last answer is {:.1} s old (a query is blocked): its values are left \
                     out",
                    age.as_secs_f64()
                ),
            );
        }
        let nvml = sample.as_ref().filter(|_| stale.is_none());
        // A device whose process lists NVML refuses, or that NVML cannot open at all (lost, no
        // permission), may run any process: no join is complete then (the reasons are under
        // `gpu.process_metrics` and `gpu`).
        out.nvml_processes = self.process_metrics
            && matches!(processes, ProcessPass::Sampled(_))
            && nvml.as_ref().is_some_and(|sample| {
                sample.error.is_none()
                    && sample.lost.is_empty()
                    && sample
                        .devices
                        .iter()
                        .all(|device| device.process_lists_error.is_none())
            });
        if let Some(sample) = &nvml {
            if let Some(error) = &sample.error {
                reasons.add("gpu", format_args!("NVML: {error}"));
            }
            if let Some(error) = &sample.drm_error {
                reasons.add("gpu", format_args!("DRM clients: {error}"));
            }
            out.age_ms = Some(u64::try_from(sample.age().as_millis()).unwrap_or(u64::MAX));
        }
        if let Some(drm) = &mut self.drm {
            drm.read_into(&mut self.drm_devices);
        }

        fill_devices(nvml.map(|s| &**s), &self.drm_devices, &mut out.devices);
        fill_processes(nvml.map(|s| &**s), processes, &mut out.processes);
        extension::fill(
            sample.as_deref(),
            stale.is_none(),
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

/// The device records, NVIDIA devices first (NVML index order), then DRM devices.
fn fill_devices(
    nvml: Option<&GpuSample>,
    drm_devices: &[DrmDeviceSample],
    out: &mut Vec<GpuDeviceValues>,
) {
    let nvml_devices = nvml
        .into_iter()
        .flat_map(|s| &s.devices)
        .map(|d| DeviceRecord {
            vendor: AcceleratorVendor::Nvidia,
            identifier: &d.identifier,
            index: Some(d.index),
            memory_used_bytes: d.memory_used_bytes,
            utilization_percent: d.utilization_percent,
        });
    let drm_devices = drm_devices.iter().map(|d| DeviceRecord {
        vendor: accelerator_vendor(d.vendor),
        identifier: &d.identifier,
        index: None,
        memory_used_bytes: d.memory_used_bytes,
        utilization_percent: d.utilization_percent,
    });
    let mut devices = 0;
    for record in nvml_devices.chain(drm_devices) {
        let entry = slot(out, &mut devices, GpuDeviceValues::default);
        entry.vendor = record.vendor;
        share(&mut entry.identifier, record.identifier);
        entry.index = record.index;
        entry.memory_used_bytes = record.memory_used_bytes;
        entry.utilization_percent = record.utilization_percent;
    }
    out.truncate(devices);
}

/// The process records of the processes sampled in this pass (none without a sample).
fn fill_processes(
    nvml: Option<&GpuSample>,
    processes: &ProcessPass,
    out: &mut Vec<GpuProcessValues>,
) {
    let mut records = 0;
    if let (Some(sample), ProcessPass::Sampled(set)) = (nvml, processes) {
        let in_scope = |pid: u32| set.processes.iter().any(|p| p.pid == pid);
        let nvml_processes = sample.processes_matching(in_scope).map(|p| ProcessRecord {
            device: DeviceRecord {
                vendor: AcceleratorVendor::Nvidia,
                identifier: &p.device_identifier,
                index: Some(p.device_index),
                memory_used_bytes: p.memory_used_bytes,
                utilization_percent: p.sm_utilization_percent,
            },
            pid: p.pid,
            memory_utilization_percent: p.memory_utilization_percent,
        });
        let drm_processes = sample
            .drm_processes
            .iter()
            .filter(|p| {
                set.processes
                    .iter()
                    .any(|q| q.pid == p.pid && q.start_time_ticks == p.start_time_ticks)
            })
            .map(|p| ProcessRecord {
                device: DeviceRecord {
                    vendor: accelerator_vendor(p.vendor),
                    identifier: &p.identifier,
                    index: None,
                    memory_used_bytes: p.memory_used_bytes,
                    utilization_percent: p.utilization_percent,
                },
                pid: p.pid,
                memory_utilization_percent: None,
            });
        for record in nvml_processes.chain(drm_processes) {
            let entry = slot(out, &mut records, GpuProcessValues::default);
            let device = record.device;
            entry.vendor = device.vendor;
            share(&mut entry.identifier, device.identifier);
            entry.index = device.index;
            entry.pid = record.pid;
            entry.memory_used_bytes = device.memory_used_bytes;
            entry.utilization_percent = device.utilization_percent;
            entry.memory_utilization_percent = record.memory_utilization_percent;
        }
    }
    out.truncate(records);
}

/// A device's (or a process's use of a device's) memory and utilisation, from NVML or DRM.
struct DeviceRecord<'a> {
    vendor: AcceleratorVendor,
    identifier: &'a str,
    index: Option<u32>,
    memory_used_bytes: Option<u64>,
    utilization_percent: Option<f64>,
}

/// One process's use of a device.
struct ProcessRecord<'a> {
    device: DeviceRecord<'a>,
    pid: u32,
    memory_utilization_percent: Option<f64>,
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
