//! GPU sources: NVIDIA devices and processes through NVML, AMD and Intel devices through Linux
//! DRM sysfs, and the processes using AMD, Intel and other DRM devices through `fdinfo`.
//!
//! NVML calls cost milliseconds each, so [`NvmlSource`] is meant to run on its own thread inside
//! a [`GpuSampler`], which hands the latest [`GpuSample`] (with its age) to the sampling path
//! without ever waiting on the driver. The library is loaded at run time (`nvml-wrapper`): the
//! path comes from `RELAY_METRICS_NVML_LIBRARY` or the normal `libnvidia-ml.so.1` lookup, a failed
//! load keeps a reason for the snapshot and is retried at most once per minute, and an entry point
//! the driver lacks makes only its own field `None`.
//!
//! [`DrmSource`] reads `/sys/class/drm/card<N>/device` through [`crate::source::Roots`]; it is
//! cheap (a few held sysfs files) and runs on the sampling path. [`DrmClientScanner`] lists every
//! fd of every process to find DRM clients, which is not cheap: it runs on the GPU thread next to
//! NVML.

mod drm;
mod drm_clients;
pub(crate) mod fdinfo;
mod hwmon;
mod loader_lock;
mod nvml;
mod nvml_values;
mod sampler;
mod throttle;
mod xid;

pub(crate) use drm::{DrmDeviceSample, DrmSource, DrmVendor};
pub(crate) use drm_clients::{DrmClientScanner, DrmFdCheck, DrmProcessSample};
pub use nvml::{NvmlOptions, NvmlSample, NvmlSource, NVML_LIBRARY_ENV};
pub use nvml_values::{throttle_reason_names, NvmlDeviceValues, THROTTLE_REASONS};
pub(crate) use sampler::GpuSample;
pub use sampler::GpuSampler;
pub use xid::{XidCounts, XidDevice, XidWatcher};

/// One NVIDIA device as NVML reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuDeviceSample {
    /// NVML device index.
    pub index: u32,
    /// NVML UUID (`GPU-…`), or `nvidia:<index>` when the UUID query failed.
    pub identifier: String,
    /// Device memory in use (`nvmlDeviceGetMemoryInfo`), `None` when unavailable.
    pub memory_used_bytes: Option<u64>,
    /// Percentage of the last sample period in which a kernel ran (0–100), `None` when
    /// unavailable.
    pub utilization_percent: Option<f64>,
    /// Power, energy, temperatures, clocks, throttling, ECC, PCIe, MIG … (all `None`, without
    /// reasons, when device metrics are off).
    pub values: NvmlDeviceValues,
    /// Throttling counted by this source since it first saw the device.
    pub throttle: ThrottleCounts,
    /// Why processes of the device may be missing from the sample's process records: its
    /// compute or graphics process list could not be read (`None`: both were, or process
    /// metrics are off).
    pub process_lists_error: Option<String>,
}

/// The GPU limit events NVML's clock-event reasons are grouped into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuThrottleEvent {
    /// `sw_power_cap`: clocks lowered to hold the power limit.
    PowerCap,
    /// `sw_thermal_slowdown` or `hw_thermal_slowdown`.
    Thermal,
    /// `hw_slowdown`, `hw_thermal_slowdown` or `hw_power_brake_slowdown`: the hardware cut the
    /// clocks (by half or more).
    HwSlowdown,
}

impl GpuThrottleEvent {
    /// Every event, in report order.
    pub const ALL: [Self; 3] = [Self::PowerCap, Self::Thermal, Self::HwSlowdown];

    /// The event's name in limit events and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PowerCap => "power_cap",
            Self::Thermal => "thermal",
            Self::HwSlowdown => "hw_slowdown",
        }
    }

    /// The clock-event reason bits that make the event active.
    pub fn mask(self) -> u64 {
        match self {
            Self::PowerCap => 0x4,
            Self::Thermal => 0x20 | 0x40,
            Self::HwSlowdown => 0x8 | 0x40 | 0x80,
        }
    }
}

/// Throttling of one device counted over the source's sampling periods.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ThrottleCounts {
    /// Periods whose clock-event reasons could be read.
    pub sampled_periods: u64,
    /// Periods in which each [`GpuThrottleEvent`] was active, in [`GpuThrottleEvent::ALL`]
    /// order.
    pub active_periods: [u64; 3],
    /// Growth of the power violation time since the first period, ns (`None` when NVML has no
    /// violation time for it).
    pub power_violation_ns: Option<u64>,
    /// Growth of the thermal violation time since the first period, ns.
    pub thermal_violation_ns: Option<u64>,
}

/// A device NVML could not open in a query (fallen off the bus, reset, no permission).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostDevice {
    /// NVML index.
    pub index: u32,
    /// Its UUID when an earlier query knew it.
    pub identifier: Option<String>,
    /// NVML's reason (e.g. `GPU is lost`).
    pub reason: String,
}

/// One process's use of one NVIDIA device.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuProcessSample {
    /// NVML index of the device.
    pub device_index: u32,
    /// Identifier of the device, as in [`GpuDeviceSample::identifier`].
    pub device_identifier: String,
    /// The process.
    pub pid: u32,
    /// Device memory used by the process (largest of the compute and graphics lists), `None`
    /// when the driver does not know it or the process only appears in utilisation samples.
    pub memory_used_bytes: Option<u64>,
    /// SM utilisation of the process from the newest driver sample since the previous query,
    /// `None` on the first query of a device, when unsupported, or when the process had no
    /// sample in that interval.
    pub sm_utilization_percent: Option<f64>,
    /// Memory-controller (bandwidth) utilisation of the process from the same sample, `None`
    /// when the SM utilisation is.
    pub memory_utilization_percent: Option<f64>,
}

/// Why NVML gave no records at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// The shared library could not be opened, or is not an NVML library.
    #[error("NVML library {library} could not be loaded: {reason}")]
    Load {
        /// The path or name that was opened.
        library: String,
        /// The loader's reason.
        reason: String,
    },
    /// The library loaded but `nvmlInit_v2` failed (no driver, no permission …).
    #[error("NVML library {library} loaded but nvmlInit_v2 failed: {reason}")]
    Init {
        /// The path or name that was opened.
        library: String,
        /// NVML's reason.
        reason: String,
    },
    /// The device count could not be read, so no device can be enumerated.
    #[error("NVML nvmlDeviceGetCount_v2 failed: {reason}")]
    DeviceCount {
        /// NVML's reason.
        reason: String,
    },
}

/// Whether a device passes the configured `gpu.devices` selectors: an empty list selects every
/// device; otherwise a selector matches the backend identifier exactly or, for NVML devices, the
/// decimal index (`"0"`, not `"00"`).
pub(crate) fn device_selected(selectors: &[String], identifier: &str, index: Option<u32>) -> bool {
    selectors.is_empty()
        || selectors.iter().any(|selector| {
            selector == identifier || index.is_some_and(|index| is_decimal_of(selector, index))
        })
}

fn is_decimal_of(text: &str, value: u32) -> bool {
    let canonical = !text.is_empty()
        && text.bytes().all(|byte| byte.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical && text.parse::<u32>() == Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selectors(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn empty_selectors_select_everything() {
        assert!(device_selected(&[], "GPU-x", Some(3)));
        assert!(device_selected(&[], "0000:03:00.0", None));
    }

    #[test]
    fn selectors_match_identifier_or_decimal_index() {
        let list = selectors(&["1", "GPU-b", "0000:03:00.0"]);
        assert!(device_selected(&list, "GPU-a", Some(1)));
        assert!(device_selected(&list, "GPU-b", Some(7)));
        assert!(!device_selected(&list, "GPU-a", Some(0)));
        assert!(device_selected(&list, "0000:03:00.0", None));
        // DRM devices have no index: a numeric selector never matches them.
        assert!(!device_selected(&selectors(&["0"]), "0000:03:00.0", None));
    }

    #[test]
    fn index_selectors_are_canonical_decimals() {
        assert!(is_decimal_of("0", 0));
        assert!(is_decimal_of("12", 12));
        assert!(!is_decimal_of("00", 0));
        assert!(!is_decimal_of("+1", 1));
        assert!(!is_decimal_of(" 1", 1));
        assert!(!is_decimal_of("", 0));
        assert!(!is_decimal_of("99999999999", 0));
    }
}
