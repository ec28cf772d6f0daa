//! Device values over time: built-in defaults, changed by a scenario file.
//!
//! The scenario file (`FAKE_NVML_SCRIPT`) has one change per line, `#` starting a comment:
//!
//! ```text
//! <at_ms> <device> <key> [<value>]
//! ```
//!
//! From `at_ms` milliseconds after `nvmlInit_v2` on, `key` of device `device` (0 to 7; the
//! two-device scenarios serve 0 and 1) has
//! `value`; the value `unsupported` makes its query answer `NVML_ERROR_NOT_SUPPORTED`. Keys with
//! a value: see [`Key::parse`] (NVML's own units: mW, mJ, °C, MHz, ns, KB/s, percent). Keys
//! without one: `lost` (every query of the device, its handle included, answers
//! `NVML_ERROR_GPU_IS_LOST` until `back`), `back`, and `xid <code>` (an XID critical error
//! event, delivered once by `nvmlEventSetWait_v2` to a set registered for it). `throttle` takes
//! NVML's `clocksThrottleReasons` bitmask (decimal or `0x` hex); `stall_ms` makes every query of
//! the device sleep that long before it answers.
//!
//! The clock is real time since `nvmlInit_v2`, unless `FAKE_NVML_CLOCK_FILE` names a file: then
//! "now" is the number of milliseconds written in it, so a test moves time by rewriting it.

use std::path::PathBuf;
use std::time::Instant;

use crate::script::MAX_DEVICES;

/// One scripted value of a device; `None` answers `NVML_ERROR_NOT_SUPPORTED`.
pub(crate) type Value = Option<u64>;

/// Every scripted value of one device at one moment.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct DeviceState {
    pub(crate) lost: bool,
    pub(crate) values: [Value; Key::COUNT],
}

impl DeviceState {
    pub(crate) fn get(&self, key: Key) -> Value {
        self.values[key as usize]
    }
}

macro_rules! keys {
    ($($variant:ident = $name:literal),* $(,)?) => {
        /// The scripted values.
        #[derive(Clone, Copy, PartialEq, Eq, Debug)]
        pub(crate) enum Key { $($variant),* }

        impl Key {
            const ALL: &'static [Key] = &[$(Key::$variant),*];
            pub(crate) const COUNT: usize = Self::ALL.len();

            /// The key of a scenario line.
            pub(crate) fn parse(name: &str) -> Option<Self> {
                match name {
                    $($name => Some(Key::$variant),)*
                    _ => None,
                }
            }
        }
    };
}

keys! {
    PowerMw = "power_mw",
    PowerLimitMw = "power_limit_mw",
    EnergyMj = "energy_mj",
    TempGpu = "temp_gpu",
    TempMemory = "temp_memory",
    ClockGraphicsMhz = "clock_graphics_mhz",
    ClockSmMhz = "clock_sm_mhz",
    ClockMemoryMhz = "clock_memory_mhz",
    MaxClockGraphicsMhz = "max_clock_graphics_mhz",
    MaxClockSmMhz = "max_clock_sm_mhz",
    MaxClockMemoryMhz = "max_clock_memory_mhz",
    Throttle = "throttle",
    ViolationPowerNs = "violation_power_ns",
    ViolationThermalNs = "violation_thermal_ns",
    ViolationBoardLimitNs = "violation_board_limit_ns",
    ViolationReliabilityNs = "violation_reliability_ns",
    EccCorrectedVolatile = "ecc_corrected_volatile",
    EccUncorrectedVolatile = "ecc_uncorrected_volatile",
    EccCorrectedAggregate = "ecc_corrected_aggregate",
    EccUncorrectedAggregate = "ecc_uncorrected_aggregate",
    RemappedCorrectable = "remapped_correctable",
    RemappedUncorrectable = "remapped_uncorrectable",
    RemapPending = "remap_pending",
    RemapFailure = "remap_failure",
    PcieTxKbps = "pcie_tx_kbps",
    PcieRxKbps = "pcie_rx_kbps",
    PcieReplays = "pcie_replays",
    EncoderPercent = "encoder_percent",
    DecoderPercent = "decoder_percent",
    MigMode = "mig_mode",
    StallMs = "stall_ms",
}

/// Values before any scenario line: device 1 has no memory temperature sensor, ECC, row
/// remapping or encoder, and runs in MIG mode; every other device (0, and 2 to 7 of `big_host`)
/// supports everything, MIG off.
fn defaults(index: usize) -> DeviceState {
    use Key::*;
    let mut values = [None; Key::COUNT];
    let mut set = |key: Key, value: u64| values[key as usize] = Some(value);
    let scale = index as u64 + 1;
    set(PowerMw, 100_000 * scale);
    set(PowerLimitMw, 300_000);
    set(EnergyMj, 1_000_000 * scale);
    set(TempGpu, 40 + 5 * scale);
    set(ClockGraphicsMhz, 1_410);
    set(ClockSmMhz, 1_410);
    set(ClockMemoryMhz, 2_619);
    set(MaxClockGraphicsMhz, 1_980);
    set(MaxClockSmMhz, 1_980);
    set(MaxClockMemoryMhz, 2_619);
    // GPU idle.
    set(Throttle, 0x1);
    set(ViolationPowerNs, 0);
    set(ViolationThermalNs, 0);
    set(ViolationBoardLimitNs, 0);
    set(ViolationReliabilityNs, 0);
    set(PcieTxKbps, 1_000 * scale);
    set(PcieRxKbps, 2_000 * scale);
    set(PcieReplays, 0);
    set(DecoderPercent, 0);
    if index != 1 {
        set(TempMemory, 50);
        set(EccCorrectedVolatile, 0);
        set(EccUncorrectedVolatile, 0);
        set(EccCorrectedAggregate, 2);
        set(EccUncorrectedAggregate, 0);
        set(RemappedCorrectable, 0);
        set(RemappedUncorrectable, 0);
        set(RemapPending, 0);
        set(RemapFailure, 0);
        set(EncoderPercent, 0);
        set(MigMode, 0);
    } else {
        set(MigMode, 1);
    }
    DeviceState {
        lost: false,
        values,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Action {
    Set(Key, Value),
    Lost,
    Back,
    Xid(u64),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Entry {
    at_ms: u64,
    device: usize,
    action: Action,
}

/// An XID event due at `at_ms`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct XidEvent {
    pub(crate) at_ms: u64,
    pub(crate) device: usize,
    pub(crate) xid: u64,
}

/// The parsed scenario and its clock.
pub(crate) struct Timeline {
    entries: Vec<Entry>,
    started: Instant,
    clock_file: Option<PathBuf>,
}

impl Timeline {
    /// Reads `FAKE_NVML_SCRIPT` and `FAKE_NVML_CLOCK_FILE`; an error names the bad line.
    pub(crate) fn from_env() -> Result<Self, String> {
        let entries = match std::env::var_os("FAKE_NVML_SCRIPT").filter(|v| !v.is_empty()) {
            Some(path) => {
                let text = std::fs::read_to_string(&path)
                    .map_err(|error| format!("{}: {error}", PathBuf::from(&path).display()))?;
                parse(&text)?
            }
            None => Vec::new(),
        };
        Ok(Self {
            entries,
            started: Instant::now(),
            clock_file: std::env::var_os("FAKE_NVML_CLOCK_FILE")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        })
    }

    /// Milliseconds since `nvmlInit_v2`, or the clock file's number (0 while unreadable).
    pub(crate) fn now_ms(&self) -> u64 {
        match &self.clock_file {
            Some(path) => std::fs::read_to_string(path)
                .ok()
                .and_then(|text| text.trim().parse().ok())
                .unwrap_or(0),
            None => u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// When `at_ms` is due in real time; `None` with a clock file (polled instead).
    pub(crate) fn due_instant(&self, at_ms: u64) -> Option<Instant> {
        match self.clock_file {
            Some(_) => None,
            None => self
                .started
                .checked_add(std::time::Duration::from_millis(at_ms)),
        }
    }

    /// Device `index` now.
    pub(crate) fn device(&self, index: usize) -> DeviceState {
        let now = self.now_ms();
        let mut state = defaults(index);
        for entry in self
            .entries
            .iter()
            .filter(|e| e.device == index && e.at_ms <= now)
        {
            match entry.action {
                Action::Set(key, value) => state.values[key as usize] = value,
                Action::Lost => state.lost = true,
                Action::Back => state.lost = false,
                Action::Xid(_) => {}
            }
        }
        state
    }

    /// Every XID event of the scenario, in time order.
    pub(crate) fn xid_events(&self) -> Vec<XidEvent> {
        let mut events: Vec<XidEvent> = self
            .entries
            .iter()
            .filter_map(|entry| match entry.action {
                Action::Xid(xid) => Some(XidEvent {
                    at_ms: entry.at_ms,
                    device: entry.device,
                    xid,
                }),
                _ => None,
            })
            .collect();
        events.sort_by_key(|event| event.at_ms);
        events
    }
}

fn parse(text: &str) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let entry = parse_line(line).ok_or_else(|| format!("line {}: {line:?}", number + 1))?;
        entries.push(entry);
    }
    Ok(entries)
}

fn parse_line(line: &str) -> Option<Entry> {
    let mut words = line.split_whitespace();
    let at_ms = words.next()?.parse().ok()?;
    let device = words.next()?.parse().ok().filter(|&d| d < MAX_DEVICES)?;
    let action = match (words.next()?, words.next()) {
        ("lost", None) => Action::Lost,
        ("back", None) => Action::Back,
        ("xid", Some(code)) => Action::Xid(code.parse().ok()?),
        (key, Some("unsupported")) => Action::Set(Key::parse(key)?, None),
        (key, Some(value)) => Action::Set(Key::parse(key)?, Some(parse_number(value)?)),
        _ => return None,
    };
    words.next().is_none().then_some(Entry {
        at_ms,
        device,
        action,
    })
}

fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_bad_lines_are_named() {
        let entries = parse("# c\n100 0 power_mw 5\n200 1 xid 79 # note\n300 1 lost\n0 0 throttle 0x44\n0 1 temp_memory unsupported\n").unwrap();
        assert_eq!(entries.len(), 5);
        assert_eq!(entries[1].action, Action::Xid(79));
        assert_eq!(entries[3].action, Action::Set(Key::Throttle, Some(0x44)));
        assert_eq!(entries[4].action, Action::Set(Key::TempMemory, None));
        assert_eq!(parse("1 0 nope 3").unwrap_err(), "line 1: \"1 0 nope 3\"");
        assert!(parse("1 8 power_mw 3").is_err(), "device 8 does not exist");
        assert!(parse("1 0 power_mw 3 4").is_err());
        assert!(parse("1 0 lost now").is_err());
    }

    #[test]
    fn state_applies_entries_up_to_now() {
        let dir = std::env::temp_dir().join(format!("fake-nvml-clock-{}", std::process::id()));
        std::fs::write(&dir, "150").unwrap();
        let timeline = Timeline {
            entries: parse("100 0 power_mw 5\n200 0 power_mw 6\n120 0 lost\n140 0 back\n").unwrap(),
            started: Instant::now(),
            clock_file: Some(dir.clone()),
        };
        let state = timeline.device(0);
        assert_eq!(state.get(Key::PowerMw), Some(5));
        assert!(!state.lost);
        std::fs::write(&dir, "130").unwrap();
        assert!(timeline.device(0).lost);
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(timeline.now_ms(), 0);
        assert_eq!(timeline.device(0).get(Key::PowerMw), Some(100_000));
    }
}
