//! `field_sampled_processes`: how many processes supplied each per-process field.
//!
//! Relay serialises a map with sorted keys; the set of keys is fixed (17, from the schema table), so this is a fixed
//! array of optional counts that serialises as that map. Filling it never allocates.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::schema::{coverage_count, coverage_keys};
use super::SECTIONS;

/// Every key Relay can report, in Relay's (sorted) order: the fields flagged `sampled` in the
/// schema table.
pub const COVERAGE_KEYS: [&str; coverage_count(SECTIONS)] = coverage_keys(SECTIONS);

/// Per canonical field path, how many sampled processes supplied a value; a key that was not
/// attempted is absent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FieldCoverage {
    counts: [Option<u64>; COVERAGE_KEYS.len()],
}

impl FieldCoverage {
    /// The count for `key`, if that field was attempted.
    pub fn get(&self, key: &str) -> Option<u64> {
        COVERAGE_KEYS
            .iter()
            .position(|k| *k == key)
            .and_then(|index| self.counts[index])
    }

    /// Records the count for `key`. Unknown keys are a programming error and are ignored in
    /// release builds.
    pub fn set(&mut self, key: &str, count: u64) {
        let index = COVERAGE_KEYS.iter().position(|k| *k == key);
        debug_assert!(index.is_some(), "unknown coverage key {key}");
        if let Some(index) = index {
            self.counts[index] = Some(count);
        }
    }

    /// Forgets every count.
    pub fn clear(&mut self) {
        self.counts = [None; COVERAGE_KEYS.len()];
    }

    /// The attempted keys and their counts, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        COVERAGE_KEYS
            .iter()
            .zip(self.counts.iter())
            .filter_map(|(key, count)| count.map(|count| (*key, count)))
    }

    /// Number of attempted keys.
    pub fn len(&self) -> usize {
        self.counts.iter().filter(|c| c.is_some()).count()
    }

    /// True when no key was attempted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Serialize for FieldCoverage {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.len()))?;
        for (key, count) in self.iter() {
            map.serialize_entry(key, &count)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for FieldCoverage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CoverageVisitor;

        impl<'de> Visitor<'de> for CoverageVisitor {
            type Value = FieldCoverage;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map from field path to process count")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FieldCoverage, A::Error> {
                let mut coverage = FieldCoverage::default();
                while let Some((key, count)) = map.next_entry::<String, u64>()? {
                    let index = COVERAGE_KEYS
                        .iter()
                        .position(|k| *k == key)
                        .ok_or_else(|| serde::de::Error::unknown_field(&key, &COVERAGE_KEYS))?;
                    coverage.counts[index] = Some(count);
                }
                Ok(coverage)
            }
        }

        deserializer.deserialize_map(CoverageVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_like_relays_btreemap() {
        let mut sorted = COVERAGE_KEYS;
        sorted.sort_unstable();
        assert_eq!(sorted, COVERAGE_KEYS);
    }

    #[test]
    fn serialises_only_attempted_keys_and_round_trips() {
        let mut coverage = FieldCoverage::default();
        coverage.set("disk.read_throughput", 0);
        coverage.set("cpu.total_time", 3);
        let text = serde_json::to_string(&coverage).unwrap();
        assert_eq!(text, r#"{"cpu.total_time":3,"disk.read_throughput":0}"#);
        assert_eq!(
            serde_json::from_str::<FieldCoverage>(&text).unwrap(),
            coverage
        );
        assert_eq!(coverage.get("cpu.total_time"), Some(3));
        assert_eq!(coverage.get("cpu.user_time"), None);
        assert!(serde_json::from_str::<FieldCoverage>(r#"{"nope":1}"#).is_err());
    }
}
