//! AMD and Intel devices from Linux DRM sysfs (`/sys/class/drm/card<N>/device`).
//!
//! The card list is read once by [`DrmSource::scan`]; each read then `pread`s the held
//! `mem_info_vram_used` and `gpu_busy_percent` files of the cards that have them. NVIDIA cards are
//! left to NVML. Per-process DRM usage is `drm_clients`'.

use std::path::{Path, PathBuf};

use crate::source::file::{read_once, FileKind, HeldFile};
// Sysfs counter files end in a newline.
use crate::source::parse::parse_u64_trimmed;
use crate::source::Roots;

use super::device_selected;
use super::hwmon::{Hwmon, HwmonValues};

/// PCI vendor IDs of the DRM devices reported here.
const PCI_VENDOR_AMD: u16 = 0x1002;
const PCI_VENDOR_INTEL: u16 = 0x8086;

/// The vendor of a DRM device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DrmVendor {
    /// PCI vendor 0x1002 (amdgpu, radeon).
    Amd,
    /// PCI vendor 0x8086 (i915, xe).
    Intel,
    /// Any other DRM driver's clients (`msm`, `panfrost`, `v3d` ...); never a sysfs device.
    Other,
}

/// One DRM device.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DrmDeviceSample {
    /// From the PCI vendor ID.
    pub vendor: DrmVendor,
    /// Basename of the canonical device path: the PCI address, e.g. `0000:03:00.0`.
    pub identifier: String,
    /// `mem_info_vram_used`, `None` when the driver does not provide it.
    pub memory_used_bytes: Option<u64>,
    /// `gpu_busy_percent` (AMD only), `None` when absent or above 100.
    pub utilization_percent: Option<f64>,
    /// Power, energy and temperatures from the device's hwmon directory.
    pub hwmon: HwmonValues,
}

#[derive(Debug)]
struct Card {
    vendor: DrmVendor,
    identifier: String,
    vram_used: Option<HeldFile>,
    busy_percent: Option<HeldFile>,
    hwmon: Hwmon,
}

/// The DRM cards found by a scan, with their value files held open.
#[derive(Debug)]
pub(crate) struct DrmSource {
    cards: Vec<Card>,
    buf: Vec<u8>,
}

impl DrmSource {
    /// Lists `<sys>/class/drm/card<N>` (connectors such as `card0-DP-1` are not cards), keeps
    /// AMD and Intel devices that pass `selectors` (identifier only: DRM devices have no index),
    /// in card-number order, one entry per PCI device. A missing `/sys/class/drm` gives no cards.
    pub(crate) fn scan(roots: &Roots, selectors: &[String]) -> Self {
        let class = roots.map(Path::new("/sys/class/drm"));
        let mut numbered: Vec<(u32, PathBuf)> = std::fs::read_dir(&class)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                let number = card_number(name.to_str()?)?;
                Some((number, entry.path().join("device")))
            })
            .collect();
        numbered.sort_unstable_by_key(|(number, _)| *number);
        let mut buf = Vec::new();
        let mut cards: Vec<Card> = Vec::new();
        for (_, device) in numbered {
            let Some(card) = open_card(&device, &mut buf) else {
                continue;
            };
            let duplicate = cards
                .iter()
                .any(|known| known.identifier == card.identifier);
            if !duplicate && device_selected(selectors, &card.identifier, None) {
                cards.push(card);
            }
        }
        Self { cards, buf }
    }

    /// Number of cards found by the scan (including those that may report nothing).
    #[cfg(test)]
    pub(crate) fn card_count(&self) -> usize {
        self.cards.len()
    }

    /// Reads every card into `out`, replacing its content but reusing its entries' strings.
    /// A card with neither memory nor utilisation is left out.
    pub(crate) fn read_into(&mut self, out: &mut Vec<DrmDeviceSample>) {
        let mut filled = 0;
        for card in &mut self.cards {
            let memory_used_bytes = card
                .vram_used
                .as_mut()
                .and_then(|file| file.read(&mut self.buf).ok().and_then(parse_u64_trimmed));
            let utilization_percent = card
                .busy_percent
                .as_mut()
                .and_then(|file| file.read(&mut self.buf).ok().and_then(parse_busy_percent));
            let hwmon = card.hwmon.read(&mut self.buf);
            if memory_used_bytes.is_none() && utilization_percent.is_none() && hwmon.is_empty() {
                continue;
            }
            match out.get_mut(filled) {
                Some(slot) => {
                    slot.vendor = card.vendor;
                    slot.identifier.clone_from(&card.identifier);
                    slot.memory_used_bytes = memory_used_bytes;
                    slot.utilization_percent = utilization_percent;
                    slot.hwmon = hwmon;
                }
                None => out.push(DrmDeviceSample {
                    vendor: card.vendor,
                    identifier: card.identifier.clone(),
                    memory_used_bytes,
                    utilization_percent,
                    hwmon,
                }),
            }
            filled += 1;
        }
        out.truncate(filled);
    }
}

/// `card<N>` → N; anything else (connectors, `renderD128`, `version`) → `None`.
fn card_number(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("card")?;
    if digits.is_empty() || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

fn open_card(device: &Path, buf: &mut Vec<u8>) -> Option<Card> {
    let vendor_id = read_once(&device.join("vendor"), buf)
        .ok()
        .and_then(parse_vendor)?;
    let vendor = match vendor_id {
        PCI_VENDOR_AMD => DrmVendor::Amd,
        PCI_VENDOR_INTEL => DrmVendor::Intel,
        _ => return None,
    };
    let canonical = std::fs::canonicalize(device).ok()?;
    let identifier = canonical.file_name()?.to_str()?.to_string();
    let held = |name: &str| {
        let path = device.join(name);
        path.exists().then(|| HeldFile::new(path, FileKind::Whole))
    };
    Some(Card {
        vendor,
        identifier,
        vram_used: held("mem_info_vram_used"),
        busy_percent: match vendor {
            DrmVendor::Amd => held("gpu_busy_percent"),
            DrmVendor::Intel | DrmVendor::Other => None,
        },
        hwmon: Hwmon::find(device, buf),
    })
}

/// The PCI `vendor` file: `0x1002\n`.
fn parse_vendor(bytes: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(bytes.trim_ascii()).ok()?;
    let hex = text
        .strip_prefix("0x")
        .or_else(|| text.strip_prefix("0X"))?;
    u16::from_str_radix(hex, 16).ok()
}

/// `gpu_busy_percent`: 0–100; anything above is not a percentage and is dropped.
fn parse_busy_percent(bytes: &[u8]) -> Option<f64> {
    let percent = parse_u64_trimmed(bytes)?;
    (percent <= 100).then_some(percent as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn parsers_accept_sysfs_content_and_reject_garbage() {
        assert_eq!(parse_vendor(b"0x1002\n"), Some(0x1002));
        assert_eq!(parse_vendor(b"0x8086"), Some(0x8086));
        assert_eq!(parse_vendor(b"1002\n"), None);
        assert_eq!(parse_vendor(b"0xzz\n"), None);
        assert_eq!(parse_u64_trimmed(b"268435456\n"), Some(268_435_456));
        assert_eq!(parse_u64_trimmed(b"-1\n"), None);
        assert_eq!(parse_u64_trimmed(b""), None);
        assert_eq!(parse_busy_percent(b"37\n"), Some(37.0));
        assert_eq!(parse_busy_percent(b"100\n"), Some(100.0));
        assert_eq!(parse_busy_percent(b"101\n"), None);
        assert_eq!(card_number("card12"), Some(12));
        assert_eq!(card_number("card0-DP-1"), None);
        assert_eq!(card_number("renderD128"), None);
        assert_eq!(card_number("card"), None);
    }

    /// Builds `sys/devices/pci0000:00/<pci>` with `files` and links it from
    /// `sys/class/drm/<card>/device`, the way sysfs does.
    fn add_card(sys: &Path, card: &str, pci: &str, files: &[(&str, &str)]) {
        let device = sys.join("devices/pci0000:00").join(pci);
        std::fs::create_dir_all(&device).unwrap();
        for (name, content) in files {
            std::fs::write(device.join(name), content).unwrap();
        }
        let class = sys.join("class/drm").join(card);
        std::fs::create_dir_all(&class).unwrap();
        symlink(
            format!("../../../devices/pci0000:00/{pci}"),
            class.join("device"),
        )
        .unwrap();
    }

    #[test]
    fn scans_amd_and_intel_cards_from_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let sys = dir.path().join("sys");
        add_card(
            &sys,
            "card1",
            "0000:03:00.0",
            &[
                ("vendor", "0x1002\n"),
                ("mem_info_vram_used", "268435456\n"),
                ("gpu_busy_percent", "37\n"),
            ],
        );
        add_card(
            &sys,
            "card0",
            "0000:00:02.0",
            &[("vendor", "0x8086\n"), ("mem_info_vram_used", "4096\n")],
        );
        // NVIDIA is NVML's; an AMD card with nothing to report is left out; connectors are not
        // cards; a second card node of the same PCI device is one device.
        add_card(&sys, "card2", "0000:04:00.0", &[("vendor", "0x10de\n")]);
        add_card(&sys, "card3", "0000:05:00.0", &[("vendor", "0x1002\n")]);
        add_card(
            &sys,
            "card0-DP-1",
            "0000:06:00.0",
            &[("vendor", "0x1002\n")],
        );
        std::fs::create_dir_all(sys.join("class/drm/card4")).unwrap();
        symlink(
            "../../../devices/pci0000:00/0000:03:00.0",
            sys.join("class/drm/card4/device"),
        )
        .unwrap();

        let roots = Roots::fixture(dir.path());
        let mut source = DrmSource::scan(&roots, &[]);
        assert_eq!(source.card_count(), 3);
        let mut out = Vec::new();
        source.read_into(&mut out);
        assert_eq!(
            out,
            vec![
                DrmDeviceSample {
                    vendor: DrmVendor::Intel,
                    identifier: "0000:00:02.0".to_string(),
                    memory_used_bytes: Some(4096),
                    utilization_percent: None,
                    hwmon: HwmonValues::default(),
                },
                DrmDeviceSample {
                    vendor: DrmVendor::Amd,
                    identifier: "0000:03:00.0".to_string(),
                    memory_used_bytes: Some(268_435_456),
                    utilization_percent: Some(37.0),
                    hwmon: HwmonValues::default(),
                },
            ]
        );

        // Held files see new values; an out-of-range busy value becomes `None`.
        let amd = sys.join("devices/pci0000:00/0000:03:00.0");
        std::fs::write(amd.join("gpu_busy_percent"), "250\n").unwrap();
        std::fs::write(amd.join("mem_info_vram_used"), "1048576\n").unwrap();
        source.read_into(&mut out);
        assert_eq!(out[1].memory_used_bytes, Some(1_048_576));
        assert_eq!(out[1].utilization_percent, None);

        let selected = DrmSource::scan(&roots, &["0000:03:00.0".to_string(), "0".to_string()]);
        assert_eq!(selected.card_count(), 1);
    }

    #[test]
    fn a_missing_drm_class_gives_no_cards() {
        let dir = tempfile::tempdir().unwrap();
        let mut source = DrmSource::scan(&Roots::fixture(dir.path()), &[]);
        assert_eq!(source.card_count(), 0);
        let mut out = vec![DrmDeviceSample {
            vendor: DrmVendor::Amd,
            identifier: "stale".to_string(),
            memory_used_bytes: None,
            utilization_percent: None,
            hwmon: HwmonValues::default(),
        }];
        source.read_into(&mut out);
        assert!(out.is_empty());
    }
}
