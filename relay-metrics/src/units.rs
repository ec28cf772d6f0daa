//! Units of measurement and the conversion rule of Relay's snapshots.
//!
//! Values are collected in a base unit (ms, KiB, bytes, B/s, logical processors, percent) and
//! converted once, at the end. An integer stays an integer when the conversion is exact and fits
//! a `u64`, otherwise it becomes a decimal (1500 ms → 1.5 s, 1 KiB → 0.0009765625 MiB). Decimal
//! values scale by the ratio of factors; a non-finite result is not a value (`None`).

use serde::{Deserialize, Serialize};

/// A family of units that convert into one another through integer factors.
pub trait UnitFamily: Copy + Into<MeasurementUnit> {
    /// Size of this unit, as an integer multiple of the family's smallest unit.
    fn factor(self) -> u128;
}

macro_rules! unit_family {
    (
        $(#[$meta:meta])*
        $name:ident { $( $(#[$vmeta:meta])* $variant:ident = $factor:expr ),+ $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $( $(#[$vmeta])* $variant ),+
        }

        impl UnitFamily for $name {
            fn factor(self) -> u128 {
                match self {
                    $( Self::$variant => $factor ),+
                }
            }
        }

        impl $name {
            /// This family's unit of that name, if `unit` is one of this family.
            pub fn from_measurement_unit(unit: MeasurementUnit) -> Option<Self> {
                match unit {
                    $( MeasurementUnit::$variant => Some(Self::$variant), )+
                    #[allow(unreachable_patterns, reason = "not every family leaves units out")]
                    _ => None,
                }
            }
        }

        impl From<$name> for MeasurementUnit {
            fn from(unit: $name) -> Self {
                match unit {
                    $( $name::$variant => MeasurementUnit::$variant ),+
                }
            }
        }
    };
}

unit_family! {
    /// Units for durations (factor in microseconds).
    DurationUnit {
        /// µs.
        Microseconds = 1,
        /// ms.
        Milliseconds = 1_000,
        /// s.
        Seconds = 1_000_000,
        /// min.
        Minutes = 60_000_000,
    }
}

/// A family of byte-count units: the same names and factors (in bytes) for capacities and data.
macro_rules! byte_family {
    ($(#[$meta:meta])* $name:ident) => {
        unit_family! {
            $(#[$meta])*
            $name {
                /// B.
                Bytes = 1,
                /// kB.
                Kilobytes = 1_000,
                /// MB.
                Megabytes = 1_000_000,
                /// GB.
                Gigabytes = 1_000_000_000,
                /// TB.
                Terabytes = 1_000_000_000_000,
                /// KiB.
                Kibibytes = 1 << 10,
                /// MiB.
                Mebibytes = 1 << 20,
                /// GiB.
                Gibibytes = 1 << 30,
                /// TiB.
                Tebibytes = 1 << 40,
            }
        }
    };
}

byte_family! {
    /// Units for capacities (factor in bytes): decimal ×1000 and binary ×1024 multiples.
    CapacityUnit
}

byte_family! {
    /// Units for transferred data (disk and network); same names and factors as capacities.
    DataUnit
}

unit_family! {
    /// Units for transfer rates (factor in bits per second, so that every factor is an integer).
    BandwidthUnit {
        /// B/s.
        BytesPerSecond = 8,
        /// KiB/s.
        KibibytesPerSecond = 8 << 10,
        /// MiB/s.
        MebibytesPerSecond = 8 << 20,
        /// GiB/s.
        GibibytesPerSecond = 8 << 30,
        /// bit/s.
        BitsPerSecond = 1,
        /// Mbit/s.
        MegabitsPerSecond = 1_000_000,
        /// Gbit/s.
        GigabitsPerSecond = 1_000_000_000,
    }
}

unit_family! {
    /// Units for CPU capacity (factor in millicores).
    CpuUnit {
        /// Logical processors (1 = one fully busy CPU).
        LogicalProcessors = 1_000,
        /// Thousandths of a logical processor.
        Millicores = 1,
    }
}

unit_family! {
    /// Units for utilisation (factor in percent).
    UtilizationUnit {
        /// 0–100.
        Percentage = 1,
        /// 0–1.
        Fraction = 100,
    }
}

/// Units for counts. Counts never convert; the unit only names what is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CountUnit {
    /// Processes.
    Processes,
    /// Threads.
    Threads,
    /// Open file descriptors.
    FileDescriptors,
    /// Windows handles.
    Handles,
    /// Events.
    Events,
    /// I/O operations (read/write system calls on Linux).
    Operations,
    /// Network packets.
    Packets,
    /// Errors.
    Errors,
}

impl From<CountUnit> for MeasurementUnit {
    fn from(unit: CountUnit) -> Self {
        match unit {
            CountUnit::Processes => Self::Processes,
            CountUnit::Threads => Self::Threads,
            CountUnit::FileDescriptors => Self::FileDescriptors,
            CountUnit::Handles => Self::Handles,
            CountUnit::Events => Self::Events,
            CountUnit::Operations => Self::Operations,
            CountUnit::Packets => Self::Packets,
            CountUnit::Errors => Self::Errors,
        }
    }
}

/// The flat unit enum and its wire names, from one list (`Variant => "wire_name"`).
macro_rules! measurement_units {
    ($( $variant:ident => $name:literal ),+ $(,)?) => {
        /// Every unit name that can appear in a snapshot (Relay's flat `ResourceMeasurementUnit`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        #[expect(
            missing_docs,
            reason = "the names are the documentation; see the family enums"
        )]
        pub enum MeasurementUnit {
            $( $variant ),+
        }

        impl MeasurementUnit {
            /// Every unit, in declaration order.
            pub const ALL: &[Self] = &[$( Self::$variant ),+];

            /// The wire name, e.g. `"kibibytes"`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $name ),+
                }
            }
        }
    };
}

measurement_units! {
    Microseconds => "microseconds",
    Milliseconds => "milliseconds",
    Seconds => "seconds",
    Minutes => "minutes",
    Bytes => "bytes",
    Kilobytes => "kilobytes",
    Megabytes => "megabytes",
    Gigabytes => "gigabytes",
    Terabytes => "terabytes",
    Kibibytes => "kibibytes",
    Mebibytes => "mebibytes",
    Gibibytes => "gibibytes",
    Tebibytes => "tebibytes",
    BytesPerSecond => "bytes_per_second",
    KibibytesPerSecond => "kibibytes_per_second",
    MebibytesPerSecond => "mebibytes_per_second",
    GibibytesPerSecond => "gibibytes_per_second",
    BitsPerSecond => "bits_per_second",
    MegabitsPerSecond => "megabits_per_second",
    GigabitsPerSecond => "gigabits_per_second",
    LogicalProcessors => "logical_processors",
    Millicores => "millicores",
    Percentage => "percentage",
    Fraction => "fraction",
    Processes => "processes",
    Threads => "threads",
    FileDescriptors => "file_descriptors",
    Handles => "handles",
    Events => "events",
    Operations => "operations",
    Packets => "packets",
    Errors => "errors",
}

/// A measured number: an exact integer or a decimal.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MeasurementValue {
    /// An exact unsigned integer.
    Integer(u64),
    /// A decimal (always finite).
    Decimal(f64),
}

impl MeasurementValue {
    /// The value as a float (for comparisons and exports).
    pub fn as_f64(self) -> f64 {
        match self {
            Self::Integer(value) => value as f64,
            Self::Decimal(value) => value,
        }
    }
}

/// One available value and its unit: serialises as exactly `{"value": …, "unit": "…"}`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measurement {
    /// The number.
    pub value: MeasurementValue,
    /// Its unit.
    pub unit: MeasurementUnit,
}

impl Measurement {
    /// Converts an integer counted in `from` into `to`: integer if exact and within `u64`,
    /// otherwise a decimal.
    pub fn integer<U: UnitFamily>(value: u64, from: U, to: U) -> Self {
        let scaled = u128::from(value) * from.factor();
        let divisor = to.factor();
        let value = if scaled.is_multiple_of(divisor) {
            u64::try_from(scaled / divisor)
                .map(MeasurementValue::Integer)
                .unwrap_or(MeasurementValue::Decimal(scaled as f64 / divisor as f64))
        } else {
            MeasurementValue::Decimal(scaled as f64 / divisor as f64)
        };
        Self {
            value,
            unit: to.into(),
        }
    }

    /// Converts a decimal counted in `from` into `to`; `None` if the value or the result is not
    /// finite.
    pub fn decimal<U: UnitFamily>(value: f64, from: U, to: U) -> Option<Self> {
        let converted = value * (from.factor() as f64 / to.factor() as f64);
        converted.is_finite().then(|| Self {
            value: MeasurementValue::Decimal(converted),
            unit: to.into(),
        })
    }

    /// A count in its fixed unit.
    pub fn count(value: u64, unit: CountUnit) -> Self {
        Self {
            value: MeasurementValue::Integer(value),
            unit: unit.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(measurement: Measurement) -> String {
        serde_json::to_string(&measurement).unwrap()
    }

    #[test]
    fn exact_conversions_stay_integers_and_inexact_ones_become_decimals() {
        use DurationUnit::{Microseconds, Milliseconds, Minutes, Seconds};
        let kib_to_mib =
            |kib| Measurement::integer(kib, CapacityUnit::Kibibytes, CapacityUnit::Mebibytes);
        let ms_to = |ms, to| Measurement::integer(ms, Milliseconds, to);
        assert_eq!(json(kib_to_mib(1024)), r#"{"value":1,"unit":"mebibytes"}"#);
        assert_eq!(kib_to_mib(1).value, MeasurementValue::Decimal(0.0009765625));
        assert_eq!(
            ms_to(210, Microseconds).value,
            MeasurementValue::Integer(210_000)
        );
        assert_eq!(
            json(ms_to(1500, Seconds)),
            r#"{"value":1.5,"unit":"seconds"}"#
        );
        assert_eq!(ms_to(330, Minutes).value, MeasurementValue::Decimal(0.0055));
        let m = Measurement::integer(1000, DataUnit::Bytes, DataUnit::Kilobytes);
        assert_eq!(json(m), r#"{"value":1,"unit":"kilobytes"}"#);
    }

    #[test]
    fn integers_beyond_u64_become_decimals() {
        let m = Measurement::integer(u64::MAX, CapacityUnit::Kibibytes, CapacityUnit::Bytes);
        assert_eq!(m.value, MeasurementValue::Decimal(u64::MAX as f64 * 1024.0));
    }

    #[test]
    fn decimal_conversions_scale_by_the_factor_ratio() {
        let rate = |to| Measurement::decimal(125_000.0, BandwidthUnit::BytesPerSecond, to);
        assert_eq!(
            rate(BandwidthUnit::MegabitsPerSecond).unwrap().value,
            MeasurementValue::Decimal(1.0)
        );
        assert_eq!(
            rate(BandwidthUnit::BitsPerSecond).unwrap().value,
            MeasurementValue::Decimal(1_000_000.0)
        );
        let cpu = Measurement::decimal(1.5, CpuUnit::LogicalProcessors, CpuUnit::Millicores);
        assert_eq!(cpu.unwrap().value, MeasurementValue::Decimal(1500.0));
        let share =
            Measurement::decimal(25.0, UtilizationUnit::Percentage, UtilizationUnit::Fraction);
        assert_eq!(share.unwrap().value, MeasurementValue::Decimal(0.25));
        assert!(
            Measurement::decimal(f64::INFINITY, CpuUnit::Millicores, CpuUnit::Millicores).is_none()
        );
        assert!(Measurement::decimal(f64::NAN, CpuUnit::Millicores, CpuUnit::Millicores).is_none());
    }

    #[test]
    fn factor_tables_match_relay() {
        let bytes_per_second = |unit: BandwidthUnit| unit.factor() as f64 / 8.0;
        assert_eq!(bytes_per_second(BandwidthUnit::KibibytesPerSecond), 1024.0);
        assert_eq!(
            bytes_per_second(BandwidthUnit::MebibytesPerSecond),
            1_048_576.0
        );
        assert_eq!(
            bytes_per_second(BandwidthUnit::GibibytesPerSecond),
            1_073_741_824.0
        );
        assert_eq!(bytes_per_second(BandwidthUnit::BitsPerSecond), 0.125);
        assert_eq!(
            bytes_per_second(BandwidthUnit::GigabitsPerSecond),
            125_000_000.0
        );
        assert_eq!(CapacityUnit::Terabytes.factor(), 1_000_000_000_000);
        assert_eq!(CapacityUnit::Tebibytes.factor(), 1_099_511_627_776);
        assert_eq!(DurationUnit::Minutes.factor(), 60_000_000);
    }

    #[test]
    fn unit_names_round_trip_through_serde() {
        for unit in [
            MeasurementUnit::BytesPerSecond,
            MeasurementUnit::LogicalProcessors,
            MeasurementUnit::FileDescriptors,
            MeasurementUnit::Tebibytes,
        ] {
            let name = serde_json::to_string(&unit).unwrap();
            assert_eq!(name, format!("\"{}\"", unit.as_str()));
            assert_eq!(
                serde_json::from_str::<MeasurementUnit>(&name).unwrap(),
                unit
            );
        }
        let err = serde_json::from_str::<DurationUnit>("\"mebibytes\"").unwrap_err();
        assert!(err
            .to_string()
            .starts_with("unknown variant `mebibytes`, expected one of `microseconds`"));
    }
}
