//! Power, energy and temperatures of a DRM device from its hwmon directory
//! (`/sys/class/drm/card<N>/device/hwmon/hwmon<M>`), as amdgpu, i915 and xe provide them.
//!
//! Power is `power1_average` (older amdgpu) or `power1_input` (newer amdgpu, i915/xe), µW;
//! energy is `energy1_input` (µJ, a counter); temperatures are `temp<N>_input` (m°C), the GPU's
//! being the one labelled `edge` (amdgpu) or else `temp1`, the memory's the one labelled `mem`.
//! Files are found once when the card is scanned and then re-read through held descriptors.

use std::path::Path;

use crate::source::file::{read_once, FileKind, HeldFile};
use crate::source::parse::parse_u64_trimmed;

/// The held hwmon files of one device; any may be absent.
#[derive(Debug, Default)]
pub(crate) struct Hwmon {
    power: Option<HeldFile>,
    energy: Option<HeldFile>,
    temperature: Option<HeldFile>,
    memory_temperature: Option<HeldFile>,
}

/// One read of a device's hwmon values, in base units.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct HwmonValues {
    pub(crate) power_watts: Option<f64>,
    pub(crate) energy_joules: Option<f64>,
    pub(crate) temperature_celsius: Option<f64>,
    pub(crate) memory_temperature_celsius: Option<f64>,
}

impl HwmonValues {
    pub(crate) fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl Hwmon {
    /// Finds the first `hwmon<M>` below `device` (none: every value absent).
    pub(crate) fn find(device: &Path, buf: &mut Vec<u8>) -> Self {
        let mut dirs: Vec<_> = std::fs::read_dir(device.join("hwmon"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .is_some_and(|name| name.starts_with("hwmon"))
            })
            .collect();
        dirs.sort();
        let Some(dir) = dirs.first() else {
            return Self::default();
        };
        let held = |name: &str| {
            let path = dir.join(name);
            path.exists().then(|| HeldFile::new(path, FileKind::Whole))
        };
        let mut temperature = None;
        let mut memory_temperature = None;
        for number in 1..=8 {
            let input = format!("temp{number}_input");
            if !dir.join(&input).exists() {
                continue;
            }
            let label = read_once(&dir.join(format!("temp{number}_label")), buf)
                .ok()
                .map(|bytes| String::from_utf8_lossy(bytes.trim_ascii()).into_owned());
            match label.as_deref() {
                Some("mem") => memory_temperature = held(&input),
                Some("edge") => temperature = held(&input),
                None if number == 1 => temperature = held(&input),
                _ => {}
            }
        }
        Self {
            power: held("power1_average").or_else(|| held("power1_input")),
            energy: held("energy1_input"),
            temperature,
            memory_temperature,
        }
    }

    /// Reads every held file; a failed read or a malformed value is `None`.
    pub(crate) fn read(&mut self, buf: &mut Vec<u8>) -> HwmonValues {
        let mut value = |file: &mut Option<HeldFile>, scale: f64| {
            file.as_mut()
                .and_then(|file| file.read(buf).ok().and_then(parse_u64_trimmed))
                .map(|raw| raw as f64 / scale)
        };
        HwmonValues {
            power_watts: value(&mut self.power, 1e6),
            energy_joules: value(&mut self.energy, 1e6),
            temperature_celsius: value(&mut self.temperature, 1e3),
            memory_temperature_celsius: value(&mut self.memory_temperature, 1e3),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let hwmon = dir.path().join("hwmon/hwmon3");
        std::fs::create_dir_all(&hwmon).unwrap();
        for (name, content) in files {
            std::fs::write(hwmon.join(name), content).unwrap();
        }
        dir
    }

    #[test]
    fn amdgpu_values_are_read_in_base_units_with_labelled_temperatures() {
        let dir = tree(&[
            ("power1_average", "35000000\n"),
            ("energy1_input", "123456789\n"),
            ("temp1_input", "45000\n"),
            ("temp1_label", "edge\n"),
            ("temp2_input", "52000\n"),
            ("temp2_label", "junction\n"),
            ("temp3_input", "61000\n"),
            ("temp3_label", "mem\n"),
        ]);
        let mut buf = Vec::new();
        let mut hwmon = Hwmon::find(dir.path(), &mut buf);
        assert_eq!(
            hwmon.read(&mut buf),
            HwmonValues {
                power_watts: Some(35.0),
                energy_joules: Some(123.456789),
                temperature_celsius: Some(45.0),
                memory_temperature_celsius: Some(61.0),
            }
        );
        // Held files are re-read.
        std::fs::write(dir.path().join("hwmon/hwmon3/power1_average"), "40000000\n").unwrap();
        assert_eq!(hwmon.read(&mut buf).power_watts, Some(40.0));
    }

    #[test]
    fn power1_input_unlabelled_temp1_and_bad_values() {
        let dir = tree(&[("power1_input", "12500000\n"), ("temp1_input", "garbage\n")]);
        let mut buf = Vec::new();
        let values = Hwmon::find(dir.path(), &mut buf).read(&mut buf);
        assert_eq!(values.power_watts, Some(12.5));
        assert_eq!(values.energy_joules, None);
        assert_eq!(values.temperature_celsius, None, "malformed is None");
        assert_eq!(values.memory_temperature_celsius, None);
        let empty = tempfile::tempdir().unwrap();
        assert!(Hwmon::find(empty.path(), &mut buf)
            .read(&mut buf)
            .is_empty());
    }
}
