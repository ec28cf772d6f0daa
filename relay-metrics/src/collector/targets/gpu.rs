//! GPU use per measured cgroup: the GPU thread's last per-process records (NVIDIA devices, as
//! the collect already holds them: no NVML call here) joined with the process pass's pid →
//! cgroup grouping, summed over each measured cgroup's subtree per device.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::GpuProcessValues;
use crate::snapshot::{AcceleratorVendor, CgroupTargetReport, TargetGpuUse};

/// Fills `gpus` of every report: `null` without records, else the sums of the records whose
/// process sits in the report's subtree. `cgroup_of` gives the scanned cgroup listing a pid,
/// `parent_of` a scanned cgroup's parent, `path_of` its path. A record whose process no measured
/// cgroup contains counts nowhere.
pub(super) fn attribute<'p>(
    records: Option<&[GpuProcessValues]>,
    cgroup_of: impl Fn(u32) -> Option<usize>,
    parent_of: impl Fn(usize) -> Option<usize>,
    path_of: impl Fn(usize) -> &'p str,
    reports: &mut [CgroupTargetReport],
) {
    let Some(records) = records else {
        for report in reports.iter_mut() {
            report.gpus = None;
        }
        return;
    };
    for report in reports.iter_mut() {
        report.gpus.get_or_insert_with(Vec::new).clear();
    }
    let nvidia = records
        .iter()
        .filter_map(|r| Some((r, r.index?)))
        .filter(|(r, _)| r.vendor == AcceleratorVendor::Nvidia);
    let mut slots: Option<HashMap<Arc<str>, usize>> = None;
    for (record, index) in nvidia {
        let Some(mut cgroup) = cgroup_of(record.pid) else {
            continue;
        };
        let slots = slots.get_or_insert_with(|| {
            reports
                .iter()
                .enumerate()
                .map(|(slot, r)| (Arc::clone(&r.cgroup), slot))
                .collect()
        });
        // The cgroup listing the process and each of its ancestors that is measured.
        loop {
            if let Some(&slot) = slots.get(path_of(cgroup)) {
                let gpus = reports[slot].gpus.get_or_insert_with(Vec::new);
                add(gpus, index, record);
            }
            match parent_of(cgroup) {
                Some(parent) => cgroup = parent,
                None => break,
            }
        }
    }
    for report in reports.iter_mut() {
        if let Some(gpus) = &mut report.gpus {
            gpus.sort_by_key(|use_| use_.index);
        }
    }
}

/// Adds one process's record to its device's entry.
fn add(gpus: &mut Vec<TargetGpuUse>, index: u32, record: &GpuProcessValues) {
    let Some(use_) = gpus.iter_mut().find(|u| u.index == index) else {
        gpus.push(TargetGpuUse {
            index,
            uuid: Arc::clone(&record.identifier),
            processes: 1,
            memory_used_bytes: record.memory_used_bytes,
            sm_utilization_percent: record.utilization_percent,
            memory_utilization_percent: record.memory_utilization_percent,
        });
        return;
    };
    use_.processes += 1;
    // One process's unknown memory makes the sum unknown; utilisation sums the samples there are.
    use_.memory_used_bytes = use_
        .memory_used_bytes
        .zip(record.memory_used_bytes)
        .map(|(a, b)| a + b);
    use_.sm_utilization_percent =
        sum_known(use_.sm_utilization_percent, record.utilization_percent);
    use_.memory_utilization_percent = sum_known(
        use_.memory_utilization_percent,
        record.memory_utilization_percent,
    );
}

fn sum_known(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        vendor: AcceleratorVendor,
        index: Option<u32>,
        pid: u32,
        memory: Option<u64>,
        sm: Option<f64>,
        mem: Option<f64>,
    ) -> GpuProcessValues {
        GpuProcessValues {
            vendor,
            identifier: Arc::from(match index {
                Some(0) => "GPU-0",
                Some(_) => "GPU-1",
                None => "0000:03:00.0",
            }),
            index,
            pid,
            memory_used_bytes: memory,
            utilization_percent: sm,
            memory_utilization_percent: mem,
        }
    }

    fn nvidia(index: u32, pid: u32, memory: Option<u64>, sm: Option<f64>) -> GpuProcessValues {
        record(
            AcceleratorVendor::Nvidia,
            Some(index),
            pid,
            memory,
            sm,
            sm.map(|s| s / 2.0),
        )
    }

    /// Scanned cgroups: 0 `/`, 1 `/a`, 2 `/a/x`, 3 `/b`, 4 `/c` (not measured); measured: `/a`,
    /// `/a/x`, `/b`. Pids: 10 and 11 in `/a/x`, 12 in `/a`, 13 in `/b`, 14 in `/c`, 15 listed by
    /// no scanned cgroup.
    fn join(records: Option<&[GpuProcessValues]>) -> Vec<CgroupTargetReport> {
        let paths = ["/", "/a", "/a/x", "/b", "/c"];
        let parents = [None, Some(0), Some(1), Some(0), Some(0)];
        let mut reports: Vec<CgroupTargetReport> = ["/a", "/a/x", "/b"]
            .into_iter()
            .map(|path| CgroupTargetReport {
                cgroup: Arc::from(path),
                // Stale entries from an earlier snapshot are replaced.
                gpus: Some(vec![TargetGpuUse::default()]),
                ..CgroupTargetReport::default()
            })
            .collect();
        attribute(
            records,
            |pid| match pid {
                10 | 11 => Some(2),
                12 => Some(1),
                13 => Some(3),
                14 => Some(4),
                _ => None,
            },
            |cgroup| parents[cgroup],
            |cgroup| paths[cgroup],
            &mut reports,
        );
        reports
    }

    fn gpu_use(
        index: u32,
        processes: u64,
        memory: Option<u64>,
        sm: Option<f64>,
        mem: Option<f64>,
    ) -> TargetGpuUse {
        TargetGpuUse {
            index,
            uuid: Arc::from(if index == 0 { "GPU-0" } else { "GPU-1" }),
            processes,
            memory_used_bytes: memory,
            sm_utilization_percent: sm,
            memory_utilization_percent: mem,
        }
    }

    #[test]
    fn records_are_summed_per_device_over_each_measured_subtree() {
        let records = [
            nvidia(0, 10, Some(100), Some(30.0)),
            nvidia(0, 11, Some(50), None),
            nvidia(1, 10, Some(7), Some(4.0)),
            nvidia(0, 12, Some(1000), Some(10.0)),
            nvidia(1, 13, None, Some(70.0)),
            nvidia(1, 13, Some(1), None),
            // In no measured cgroup, or in none at all: counted nowhere.
            nvidia(0, 14, Some(1 << 20), Some(99.0)),
            nvidia(0, 15, Some(1 << 21), Some(98.0)),
            // A DRM client of the same process: not an NVML record.
            record(
                AcceleratorVendor::Amd,
                None,
                10,
                Some(1 << 22),
                Some(50.0),
                None,
            ),
        ];
        let reports = join(Some(&records));
        let gpus = |slot: usize| reports[slot].gpus.clone().unwrap();
        assert_eq!(
            gpus(0),
            vec![
                // /a: 10, 11 below it and its own 12.
                gpu_use(0, 3, Some(1150), Some(40.0), Some(20.0)),
                gpu_use(1, 1, Some(7), Some(4.0), Some(2.0)),
            ]
        );
        assert_eq!(
            gpus(1),
            vec![
                gpu_use(0, 2, Some(150), Some(30.0), Some(15.0)),
                gpu_use(1, 1, Some(7), Some(4.0), Some(2.0)),
            ]
        );
        // One unknown memory makes the sum unknown; the known utilisation still sums.
        assert_eq!(gpus(2), vec![gpu_use(1, 2, None, Some(70.0), Some(35.0))]);
    }

    #[test]
    fn without_records_every_target_is_null_and_without_use_empty() {
        assert!(join(None).iter().all(|r| r.gpus.is_none()));
        let reports = join(Some(&[nvidia(0, 14, Some(1), Some(1.0))]));
        assert!(reports.iter().all(|r| r.gpus.as_deref() == Some(&[])));
    }
}
