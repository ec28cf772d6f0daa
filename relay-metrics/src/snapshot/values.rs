//! What the values tables of `extensions` are made of: a row declares one number of a section's
//! JSON once, with its path, its unit and where it comes from, and reads it from the struct.
//!
//! The tables: the scope's cgroups (`snapshot/scope_values.rs`), the measured cgroups (whose
//! rows are the series of their families, `snapshot/target_values.rs`) and every other
//! section of `extensions` (`snapshot/extension_values.rs`). Their tests hold each table to its
//! struct through the struct's JSON (every number has one row, and each row reads the number at
//! its path: `snapshot/values_tests.rs`) and to docs/METRICS.md, whose blocks they render.

/// The unit of a number as the snapshot holds it (the key's suffix says it too: `_ns`,
/// `_bytes`); an exported family converts it to its base unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueUnit {
    /// Nanoseconds.
    Nanoseconds,
    /// Microseconds.
    Microseconds,
    /// Milliseconds.
    Milliseconds,
    /// Seconds.
    Seconds,
    /// Bytes.
    Bytes,
    /// Kibibytes.
    Kibibytes,
    /// Bytes per second.
    BytesPerSecond,
    /// Logical processors.
    Cores,
    /// Percent (0–100).
    Percent,
    /// Watts.
    Watts,
    /// Joules.
    Joules,
    /// Degrees Celsius.
    Celsius,
    /// Hertz.
    Hertz,
    /// A plain count.
    Count,
    /// A number that names something (a pid, a CPU, a device index, an XID code): no quantity.
    Identifier,
}

/// One number of a section's JSON: its path, unit and source, and how to read it from `T`.
#[derive(Debug)]
pub struct ValueRow<T> {
    /// Its path in the JSON of `T` (`pressure.cpu_some_usec`); empty for a list of numbers,
    /// whose rows are its items.
    pub json_path: &'static str,
    /// Its unit as the snapshot holds it.
    pub unit: ValueUnit,
    /// Where it comes from (which kernel file, API or counter) and what it counts.
    pub source: &'static str,
    /// The value, as a number; `None` when `T` does not have it.
    pub read: fn(&T) -> Option<f64>,
}

// By hand: a derive would ask `T: Clone`, and a row is a few references whatever `T` is.
impl<T> Clone for ValueRow<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for ValueRow<T> {}

/// A number of the snapshot as a row reads it.
pub(crate) trait Number {
    /// The number, `None` when absent.
    fn number(self) -> Option<f64>;
}

impl Number for u64 {
    fn number(self) -> Option<f64> {
        Some(self as f64)
    }
}

impl Number for u32 {
    fn number(self) -> Option<f64> {
        Some(f64::from(self))
    }
}

impl Number for f64 {
    fn number(self) -> Option<f64> {
        Some(self)
    }
}

impl<N: Number> Number for Option<N> {
    fn number(self) -> Option<f64> {
        self.and_then(Number::number)
    }
}

#[cfg(test)]
#[path = "values_tests.rs"]
pub(crate) mod tests;
