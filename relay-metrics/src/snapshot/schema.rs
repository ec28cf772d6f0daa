//! The schema table's machinery: the [`sections!`] macro that turns the table in
//! [`crate::snapshot`] into the section structs plus a descriptor of every field
//! ([`SchemaField`], [`SECTIONS`]), and the coverage keys derived from it.
//!
//! Each output is either built from these descriptors or checked against them:
//! - the JSON writer destructures every struct, so a new field does not compile until it is
//!   written (and its tests compare it with serde on every golden snapshot);
//! - the Prometheus/OTLP families and Relay's marks take each field's unit from here, and their
//!   tests fail naming any field flagged `metric` or `relay` that their table lacks;
//! - [`super::COVERAGE_KEYS`] is computed from the fields flagged `sampled`;
//! - the Python object builder destructures every struct, and a test compares the Python
//!   dataclasses with [`SECTIONS`] field for field.

/// The unit family of a measurement field, and the unit Relay collects it in (which decides
/// Relay's value type and the base unit of the `relay_metrics` families).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldUnit {
    /// `DurationUnit`, collected in milliseconds.
    Duration,
    /// `CapacityUnit`, collected in kibibytes (memory).
    Memory,
    /// `CapacityUnit`, collected in bytes (filesystem capacity).
    Capacity,
    /// `DataUnit`, collected in bytes (disk and network amounts).
    Data,
    /// `BandwidthUnit` (rates; always decimals).
    Bandwidth,
    /// `CpuUnit` (CPU amounts; always decimals).
    Cpu,
    /// `UtilizationUnit` (always decimals).
    Utilization,
    /// `CountUnit` (never converted).
    Count,
}

impl FieldUnit {
    /// The Python unit enum a field of this unit is annotated with.
    pub const fn python_enum(self) -> &'static str {
        match self {
            Self::Duration => "DurationUnit",
            Self::Memory | Self::Capacity => "CapacityUnit",
            Self::Data => "DataUnit",
            Self::Bandwidth => "BandwidthUnit",
            Self::Cpu => "CpuUnit",
            Self::Utilization => "UtilizationUnit",
            Self::Count => "CountUnit",
        }
    }
}

/// What the table says about one field of a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaField {
    /// The field's name: the Rust field, the JSON key and the Python dataclass field.
    pub name: &'static str,
    /// The unit of a measurement (`Option<Measurement>`) field; `None` for any other field.
    pub unit: Option<FieldUnit>,
    /// Relay's polling marks carry it (name and description in `output/relay_names/table.rs`).
    pub relay: bool,
    /// A `relay_metrics` Prometheus/OTLP family exports it (name and help in
    /// `output/metrics/table.rs`).
    pub metric: bool,
    /// Its key in `process_sampling.field_sampled_processes` (`<section path>.<field>`), for
    /// fields summed over the sampled processes.
    pub coverage: Option<&'static str>,
}

/// One section (struct) of the schema.
#[derive(Debug, Clone, Copy)]
pub struct SectionInfo {
    /// The struct's name, also the Python dataclass's.
    pub name: &'static str,
    /// Where it sits in the snapshot's JSON (`""` for the snapshot itself).
    pub path: &'static str,
    /// Its fields in declaration (JSON and dataclass) order.
    pub fields: &'static [SchemaField],
}

/// A schema struct and its field descriptors.
pub trait Section {
    /// The section's descriptor.
    const INFO: SectionInfo;
}

/// `true` when `$want` is among the flags.
macro_rules! flag {
    ($want:ident:) => {
        false
    };
    (relay: relay $($rest:ident)*) => {
        true
    };
    (metric: metric $($rest:ident)*) => {
        true
    };
    (sampled: sampled $($rest:ident)*) => {
        true
    };
    ($want:ident: $other:ident $($rest:ident)*) => {
        flag!($want: $($rest)*)
    };
}

/// `Some(FieldUnit::$unit)`, or `None` for a field that is not a measurement.
macro_rules! field_unit {
    () => {
        None
    };
    ($unit:ident) => {
        Some($crate::snapshot::FieldUnit::$unit)
    };
}

/// Rejects a misspelt flag at compile time.
macro_rules! known_flag {
    (relay) => {};
    (metric) => {};
    (sampled) => {};
    ($other:ident) => {
        compile_error!(concat!(
            "unknown schema flag `",
            stringify!($other),
            "`: the flags are relay, metric and sampled"
        ));
    };
}

/// The schema table: declares each section struct, its fields (with their docs) and, for a
/// measurement field, `=> Unit [flags]` (see [`SchemaField`]). Generates the structs, one
/// hidden associated const per field (`CpuMetrics::user_time`, the descriptor the output tables
/// refer to), [`Section`] and [`SECTIONS`].
macro_rules! sections {
    ($(
        $(#[$attr:meta])*
        pub struct $name:ident in $path:literal {
            $(
                $(#[$field_attr:meta])*
                pub $field:ident: $ty:ty $(=> $unit:ident [$($flag:ident)*])?,
            )*
        }
    )*) => {
        $(
            $(#[$attr])*
            pub struct $name {
                $( $(#[$field_attr])* pub $field: $ty, )*
            }

            #[allow(non_upper_case_globals)]
            impl $name {
                $(
                    #[doc(hidden)]
                    pub const $field: $crate::snapshot::SchemaField = $crate::snapshot::SchemaField {
                        name: stringify!($field),
                        unit: field_unit!($($unit)?),
                        relay: false $(|| flag!(relay: $($flag)*))?,
                        metric: false $(|| flag!(metric: $($flag)*))?,
                        coverage: if false $(|| flag!(sampled: $($flag)*))? {
                            Some(concat!($path, ".", stringify!($field)))
                        } else {
                            None
                        },
                    };
                )*
            }

            const _: () = { $($( $( known_flag!($flag); )* )?)* };

            impl $crate::snapshot::Section for $name {
                const INFO: $crate::snapshot::SectionInfo = $crate::snapshot::SectionInfo {
                    name: stringify!($name),
                    path: $path,
                    fields: &[$(Self::$field),*],
                };
            }
        )*

        /// Every section of the schema table, in declaration order.
        pub const SECTIONS: &[SectionInfo] = &[$(<$name as $crate::snapshot::Section>::INFO),*];
    };
}

/// The first coverage key at or after field `f` of section `s` (declaration order), with the
/// position of its field.
const fn next_coverage(
    sections: &[SectionInfo],
    mut s: usize,
    mut f: usize,
) -> Option<(usize, usize, &'static str)> {
    while s < sections.len() {
        let fields = sections[s].fields;
        while f < fields.len() {
            if let Some(key) = fields[f].coverage {
                return Some((s, f, key));
            }
            f += 1;
        }
        s += 1;
        f = 0;
    }
    None
}

/// Number of fields flagged `sampled` in `sections`.
pub(super) const fn coverage_count(sections: &[SectionInfo]) -> usize {
    let mut count = 0;
    let (mut s, mut f) = (0, 0);
    while let Some((at_s, at_f, _)) = next_coverage(sections, s, f) {
        count += 1;
        (s, f) = (at_s, at_f + 1);
    }
    count
}

/// The coverage keys of `sections`, sorted as Relay's `BTreeMap` sorts them (bytewise).
pub(super) const fn coverage_keys<const N: usize>(sections: &[SectionInfo]) -> [&'static str; N] {
    let mut keys = [""; N];
    let mut count = 0;
    let (mut s, mut f) = (0, 0);
    while let Some((at_s, at_f, key)) = next_coverage(sections, s, f) {
        // Insertion sort: shift the larger keys up by one.
        let mut at = count;
        while at > 0 && less(key, keys[at - 1]) {
            keys[at] = keys[at - 1];
            at -= 1;
        }
        keys[at] = key;
        count += 1;
        (s, f) = (at_s, at_f + 1);
    }
    keys
}

/// `a < b`, bytewise.
const fn less(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut i = 0;
    while i < a.len() && i < b.len() {
        if a[i] != b[i] {
            return a[i] < b[i];
        }
        i += 1;
    }
    a.len() < b.len()
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
