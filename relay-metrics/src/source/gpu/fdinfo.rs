//! The DRM client usage statistics a driver prints in `/proc/<pid>/fdinfo/<fd>` of a DRM file
//! descriptor (the kernel's "DRM client usage stats" format, printed by amdgpu, i915, xe, msm,
//! panfrost and others), and the utilisation between two readings of one client.
//!
//! Relay's rules, which these follow: memory is the sum of the `drm-resident-<region>` values
//! (bytes, `KiB` or `MiB`, normalised; any other unit makes it unknown); an engine's
//! utilisation is Δ`drm-cycles-<e>` ÷ Δ`drm-total-cycles-<e>` when the driver prints cycle
//! counters (xe), else Δ`drm-engine-<e>` ns ÷ (elapsed ns × `drm-engine-capacity-<e>`) (amdgpu,
//! i915); a client's utilisation is the largest of its engines', clamped to 0–100 %.

/// One engine's counters from one fdinfo reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmEngine {
    /// The engine's key (`gfx`, `render`, `rcs`, `video` ...).
    pub name: String,
    /// `drm-engine-<e>`: busy time in ns.
    pub busy_ns: Option<u64>,
    /// `drm-engine-capacity-<e>`: engines of this class the busy time is spread over (1 when
    /// absent).
    pub capacity: u64,
    /// `drm-cycles-<e>`: GPU cycles the client's work ran for.
    pub cycles: Option<u64>,
    /// `drm-total-cycles-<e>`: GPU cycles elapsed, the denominator of `cycles`.
    pub total_cycles: Option<u64>,
}

impl DrmEngine {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            busy_ns: None,
            capacity: 1,
            cycles: None,
            total_cycles: None,
        }
    }
}

/// The usage statistics of one DRM client (one open DRM file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmFdinfo {
    /// `drm-driver`: the kernel driver (`amdgpu`, `i915`, `xe` ...).
    pub driver: String,
    /// `drm-client-id`: unique per open DRM file, shared by duplicated descriptors.
    pub client_id: u64,
    /// `drm-pdev`: PCI address of the device, when the driver prints it.
    pub pdev: Option<String>,
    /// Engines in file order.
    pub engines: Vec<DrmEngine>,
    /// Σ `drm-resident-<region>` in bytes; `None` without such keys, with an unknown unit, a
    /// malformed value or an overflowing sum.
    pub resident_bytes: Option<u64>,
}

/// Parses the fdinfo text of a DRM file. `None` when it is not a DRM client's (no `drm-driver`,
/// no numeric `drm-client-id`) or not UTF-8. Unknown keys are ignored; a malformed engine value
/// leaves that counter `None`, which makes the client's utilisation unknown rather than
/// understated.
pub fn parse_drm_fdinfo(bytes: &[u8]) -> Option<DrmFdinfo> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut driver = None;
    let mut client_id = None;
    let mut pdev = None;
    let mut engines: Vec<DrmEngine> = Vec::new();
    let mut memory = Resident::None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        let Some(key) = key.strip_prefix("drm-") else {
            continue;
        };
        match key {
            "driver" => driver = Some(value.to_string()),
            "client-id" => client_id = Some(value.parse::<u64>().ok()?),
            "pdev" => pdev = Some(value.to_string()),
            _ => {
                if let Some(region) = key.strip_prefix("resident-") {
                    if !region.is_empty() {
                        memory = memory.add(value);
                    }
                } else if let Some(name) = key.strip_prefix("engine-capacity-") {
                    let capacity = value.parse::<u64>().ok().filter(|&c| c > 0);
                    // An unreadable capacity makes the engine's busy time unusable.
                    let engine = engine_mut(&mut engines, name);
                    match capacity {
                        Some(capacity) => engine.capacity = capacity,
                        None => engine.capacity = 0,
                    }
                } else if let Some(name) = key.strip_prefix("engine-") {
                    engine_mut(&mut engines, name).busy_ns = parse_suffixed(value, " ns");
                } else if let Some(name) = key.strip_prefix("total-cycles-") {
                    engine_mut(&mut engines, name).total_cycles = value.parse().ok();
                } else if let Some(name) = key.strip_prefix("cycles-") {
                    engine_mut(&mut engines, name).cycles = value.parse().ok();
                }
            }
        }
    }
    Some(DrmFdinfo {
        driver: driver?,
        client_id: client_id?,
        pdev,
        engines,
        resident_bytes: memory.bytes(),
    })
}

fn engine_mut<'a>(engines: &'a mut Vec<DrmEngine>, name: &str) -> &'a mut DrmEngine {
    let index = match engines.iter().position(|engine| engine.name == name) {
        Some(index) => index,
        None => {
            engines.push(DrmEngine::new(name));
            engines.len() - 1
        }
    };
    &mut engines[index]
}

/// `<digits><suffix>`, e.g. `1234 ns`.
fn parse_suffixed(value: &str, suffix: &str) -> Option<u64> {
    value.strip_suffix(suffix)?.parse().ok()
}

/// The running sum of the `drm-resident-*` values, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resident {
    /// No key seen yet.
    None,
    /// The sum so far.
    Bytes(u64),
    /// An unknown unit, a malformed value or an overflow.
    Invalid,
}

impl Resident {
    /// Adds one value. The kernel picks each value's unit on its own (the largest of bytes, KiB
    /// and MiB that divides it exactly, so `0` has none), which is why units differ between the
    /// regions of one client and every value is normalised before summing.
    fn add(self, text: &str) -> Self {
        let (digits, unit_bytes) = match text.split_once(' ') {
            None => (text, 1),
            Some((digits, "KiB")) => (digits, 1 << 10),
            Some((digits, "MiB")) => (digits, 1 << 20),
            Some(_) => return Self::Invalid,
        };
        let value = digits
            .parse::<u64>()
            .ok()
            .and_then(|value| value.checked_mul(unit_bytes));
        match (self, value) {
            (Self::None, Some(value)) => Self::Bytes(value),
            (Self::Bytes(sum), Some(value)) => {
                sum.checked_add(value).map_or(Self::Invalid, Self::Bytes)
            }
            _ => Self::Invalid,
        }
    }

    fn bytes(self) -> Option<u64> {
        match self {
            Self::Bytes(bytes) => Some(bytes),
            Self::None | Self::Invalid => None,
        }
    }
}

/// One engine's utilisation (0–100 %) between two readings of the same client, `elapsed_ns` apart.
/// Cycle counters win when both readings have them; otherwise busy ns over elapsed time and
/// capacity. `None` without a baseline, when a counter went backwards (a reset), or when the
/// denominator is zero.
pub fn engine_utilization_percent(
    previous: &DrmEngine,
    current: &DrmEngine,
    elapsed_ns: u64,
) -> Option<f64> {
    let ratio = match (
        previous.cycles,
        previous.total_cycles,
        current.cycles,
        current.total_cycles,
    ) {
        (Some(c0), Some(t0), Some(c1), Some(t1)) => {
            let busy = c1.checked_sub(c0)?;
            let total = t1.checked_sub(t0)?;
            if total == 0 {
                return None;
            }
            busy as f64 / total as f64
        }
        _ => {
            let busy = current.busy_ns?.checked_sub(previous.busy_ns?)?;
            if current.capacity == 0 || current.capacity != previous.capacity || elapsed_ns == 0 {
                return None;
            }
            busy as f64 / (elapsed_ns as f64 * current.capacity as f64)
        }
    };
    Some((ratio * 100.0).clamp(0.0, 100.0))
}

/// A process's utilisation of one device from its clients there, each given as (previous reading,
/// current reading, ns between them). Per engine the clients' utilisations add up (each is its
/// share of that engine's time); the result is the busiest engine's, clamped to 100 %. With one
/// client this is Relay's rule: the largest of its engines'. `None` when any engine of a current
/// reading has no usable pair (so a reset engine cannot hide behind an idle one), or without
/// engines.
pub fn utilization_percent<'a>(
    clients: impl IntoIterator<Item = (&'a DrmFdinfo, &'a DrmFdinfo, u64)>,
) -> Option<f64> {
    let mut per_engine: Vec<(&str, f64)> = Vec::new();
    for (previous, current, elapsed_ns) in clients {
        for engine in &current.engines {
            let before = previous.engines.iter().find(|e| e.name == engine.name)?;
            let percent = engine_utilization_percent(before, engine, elapsed_ns)?;
            match per_engine.iter_mut().find(|(name, _)| *name == engine.name) {
                Some((_, sum)) => *sum += percent,
                None => per_engine.push((&engine.name, percent)),
            }
        }
    }
    per_engine
        .into_iter()
        .map(|(_, sum)| sum.min(100.0))
        .reduce(f64::max)
}

#[cfg(test)]
mod tests;
