//! The series budget (`serve --metrics`, `--no-metrics`, `--no-histograms`, `--interfaces`,
//! `--no-interfaces`): which families and which interfaces' series are exported, applied to the
//! families as the naming gives them, on `/metrics` and over OTLP alike.
//!
//! Globs are matched against a family's name as the naming gives it before Prometheus's
//! suffixes (`relay_metrics_cgroup_pids`, `container_memory_rss`, `node_network_receive_bytes_total`;
//! in the `otel` naming the dotted name, `container.cpu.time`): `*` any run of characters, `?`
//! one. A family is kept when it matches an include glob (or none is given) and no exclude glob.

use super::metrics::{
    join_labels, Family, Histogram, Kind, Label, Number, Sink, CGROUP_SERIES_LABELS,
};

/// The snapshot's categories that are off (`"cpu": {"enabled": false}`, …): their per-cgroup
/// families are not exported either.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CategoriesOff {
    pub cpu: bool,
    pub memory: bool,
    pub disk: bool,
    pub gpu: bool,
    pub process: bool,
}

impl CategoriesOff {
    /// Those of `snapshot` (a category that is off leaves its section out).
    pub(crate) fn of(snapshot: &crate::snapshot::ResourceMetricsSnapshot) -> Self {
        Self {
            cpu: snapshot.cpu.is_none(),
            memory: snapshot.memory.is_none(),
            disk: snapshot.disk.is_none(),
            gpu: snapshot.gpu.is_none(),
            process: snapshot.process.is_none(),
        }
    }

    fn any(self) -> bool {
        self.cpu || self.memory || self.disk || self.gpu || self.process
    }

    /// Whether `name` is a per-cgroup family of a category that is off.
    fn drops(self, name: &str) -> bool {
        let per_cgroup = [
            "relay_metrics_cgroup_",
            "relay_metrics.cgroup.",
            "container_",
            "container.",
        ]
        .iter()
        .any(|prefix| name.starts_with(prefix));
        if !per_cgroup || !self.any() {
            return false;
        }
        let has = |parts: &[&str]| parts.iter().any(|part| name.contains(part));
        (self.gpu && has(&["gpu"]))
            || (self.cpu && has(&["cpu", "run_queue", "preemption"]))
            || (self.memory && has(&["memory", "oom", "reclaim"]))
            || (self.disk && has(&["_io_", "disk", "container_fs_"]))
            || (self.process && has(&["process", "thread", "file_descriptor", "pids"]))
    }
}

/// Which series are exported. The default keeps everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SeriesBudget {
    include: Vec<String>,
    exclude: Vec<String>,
    histograms: bool,
    interfaces_include: Vec<String>,
    interfaces_exclude: Vec<String>,
    /// Everything kept: the walk skips the filter.
    everything: bool,
}

/// A glob the budget refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid glob {glob:?}: {why}")]
pub struct BudgetError {
    glob: String,
    why: &'static str,
}

impl SeriesBudget {
    /// Everything exported.
    pub fn everything() -> Self {
        Self {
            histograms: true,
            everything: true,
            ..Self::default()
        }
    }

    /// A budget from include and exclude globs over family names, whether histograms are
    /// exported, and include and exclude globs over interface names.
    pub fn new(
        include: Vec<String>,
        exclude: Vec<String>,
        histograms: bool,
        interfaces_include: Vec<String>,
        interfaces_exclude: Vec<String>,
    ) -> Result<Self, BudgetError> {
        for glob in include
            .iter()
            .chain(&exclude)
            .chain(&interfaces_include)
            .chain(&interfaces_exclude)
        {
            check(glob)?;
        }
        let everything = include.is_empty()
            && exclude.is_empty()
            && histograms
            && interfaces_include.is_empty()
            && interfaces_exclude.is_empty();
        Ok(Self {
            include,
            exclude,
            histograms,
            interfaces_include,
            interfaces_exclude,
            everything,
        })
    }

    /// Whether the walk needs the filter, with `off`.
    pub(crate) fn filters(&self, off: CategoriesOff) -> bool {
        !self.everything || off.any()
    }

    /// Whether `family` is exported at all.
    pub(crate) fn keeps_family(&self, family: &Family) -> bool {
        if family.kind == Kind::Histogram && !self.histograms {
            return false;
        }
        keeps(&self.include, &self.exclude, family.name)
    }

    /// Whether a series of an exported family is, by its interface label.
    fn keeps_series(&self, family: &Family, labels: &[(&str, Label<'_>)]) -> bool {
        if self.interfaces_include.is_empty() && self.interfaces_exclude.is_empty() {
            return true;
        }
        let node_network = family.name.starts_with("node_network_");
        labels.iter().all(|&(key, value)| {
            let interface = key == "interface"
                || key == "network.interface.name"
                || (node_network && key == "device");
            match (interface, value) {
                (true, Label::Str(name)) => {
                    keeps(&self.interfaces_include, &self.interfaces_exclude, name)
                }
                _ => true,
            }
        })
    }
}

fn keeps(include: &[String], exclude: &[String], name: &str) -> bool {
    (include.is_empty()
        || include
            .iter()
            .any(|g| matches(g.as_bytes(), name.as_bytes())))
        && !exclude
            .iter()
            .any(|g| matches(g.as_bytes(), name.as_bytes()))
}

fn check(glob: &str) -> Result<(), BudgetError> {
    let why = if glob.is_empty() {
        "empty"
    } else if glob.len() > 256 {
        "longer than 256 characters"
    } else if !glob
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.:-*?@".contains(&b))
    {
        "only letters, digits, `_ . : - @` and the wildcards `*` `?` are allowed"
    } else {
        return Ok(());
    };
    Err(BudgetError {
        glob: glob.to_owned(),
        why,
    })
}

/// `*` any run, `?` one byte; iterative with one backtrack point (linear in practice, never
/// exponential).
fn matches(glob: &[u8], name: &[u8]) -> bool {
    let (mut g, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match glob.get(g) {
            Some(b'*') => {
                star = Some((g, n));
                g += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                g += 1;
                n += 1;
            }
            _ => match star {
                Some((star_g, star_n)) => {
                    g = star_g + 1;
                    n = star_n + 1;
                    star = Some((star_g, star_n + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == b'*')
}

/// A sink that passes on only what `budget` keeps.
pub(crate) struct Budgeted<'s, S> {
    sink: &'s mut S,
    budget: &'s SeriesBudget,
    off: CategoriesOff,
    /// The family begun last and whether it is kept; a family is announced only with its
    /// first kept series (an empty family is never announced).
    current: Option<(&'static str, bool)>,
    announced: bool,
}

impl<'s, S: Sink> Budgeted<'s, S> {
    pub(crate) fn new(sink: &'s mut S, budget: &'s SeriesBudget, off: CategoriesOff) -> Self {
        Self {
            sink,
            budget,
            off,
            current: None,
            announced: false,
        }
    }

    fn keeps(&self, family: &Family) -> bool {
        self.budget.keeps_family(family) && !self.off.drops(family.name)
    }

    /// Whether `family` is kept, taking it as the current family.
    fn keeps_current(&mut self, family: &Family) -> bool {
        if self.current.map(|(name, _)| name) != Some(family.name) {
            self.current = Some((family.name, self.keeps(family)));
            self.announced = false;
        }
        self.current.is_some_and(|(_, kept)| kept)
    }

    /// Whether a series of `family` with `labels` goes through; announces the family first.
    fn pass(&mut self, family: &Family, labels: &[(&str, Label<'_>)]) -> bool {
        if !self.keeps_current(family) || !self.budget.keeps_series(family, labels) {
            return false;
        }
        if !self.announced {
            self.announced = true;
            self.sink.begin(family);
        }
        true
    }
}

impl<S: Sink> Sink for Budgeted<'_, S> {
    fn begin(&mut self, family: &Family) {
        // Announced with its first kept series.
        self.current = Some((family.name, self.keeps(family)));
        self.announced = false;
    }

    fn point(&mut self, family: &Family, labels: &[(&str, Label<'_>)], value: Number) {
        if self.pass(family, labels) {
            self.sink.point(family, labels, value);
        }
    }

    fn cgroup_point<'l>(
        &mut self,
        family: &Family,
        cgroup: usize,
        base: &[(&'l str, Label<'l>)],
        extra: &[(&'l str, Label<'l>)],
        value: Number,
    ) {
        let mut all = [("", Label::Int(0)); CGROUP_SERIES_LABELS];
        let count = join_labels(base, extra, &mut all);
        if self.pass(family, &all[..count]) {
            self.sink.cgroup_point(family, cgroup, base, extra, value);
        }
    }

    /// Lines copied from the last walk were written under the same budget: they pass whole.
    fn cgroup_lines(&mut self, family: &Family, cgroup: usize, _announced: bool) -> bool {
        if !self.keeps_current(family) {
            return false;
        }
        let copied = self.sink.cgroup_lines(family, cgroup, self.announced);
        self.announced |= copied;
        copied
    }

    fn histogram(&mut self, family: &Family, labels: &[(&str, Label<'_>)], histogram: &Histogram) {
        if self.pass(family, labels) {
            self.sink.histogram(family, labels, histogram);
        }
    }

    fn cgroup_histogram(
        &mut self,
        family: &Family,
        cgroup: usize,
        labels: &[(&str, Label<'_>)],
        histogram: &Histogram,
    ) {
        if self.pass(family, labels) {
            self.sink
                .cgroup_histogram(family, cgroup, labels, histogram);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_whole_names() {
        assert!(matches(b"veth*", b"veth12ab"));
        assert!(!matches(b"veth*", b"eth0"));
        assert!(matches(b"*_bucket", b"a_bucket"));
        assert!(matches(b"container_memory_*", b"container_memory_rss"));
        assert!(!matches(
            b"container_memory_*",
            b"container_cpu_usage_seconds_total"
        ));
        assert!(matches(b"a?c", b"abc"));
        assert!(!matches(b"a?c", b"ac"));
        assert!(matches(b"*a*b*", b"xxaxxbxx"));
        assert!(!matches(b"*a*b", b"xxaxxbxx"));
        assert!(matches(b"*", b""));
    }

    #[test]
    fn bad_globs_are_refused_with_the_reason() {
        let error = SeriesBudget::new(vec!["a{b".into()], vec![], true, vec![], vec![]);
        assert!(error.unwrap_err().to_string().contains("only letters"));
        assert!(SeriesBudget::new(vec![], vec![String::new()], true, vec![], vec![]).is_err());
        assert!(!SeriesBudget::new(vec![], vec![], true, vec![], vec![])
            .unwrap()
            .filters(CategoriesOff::default()));
    }

    /// A snapshot with two interfaces and one measured cgroup with a run-queue histogram.
    fn snapshot() -> crate::snapshot::ResourceMetricsSnapshot {
        use crate::snapshot::{
            CgroupTargetReport, NetworkInterfaceMetrics, NetworkMetrics, NetworkTrafficMetrics,
            TargetKernelEvents, Targets,
        };
        use crate::units::{DataUnit, Measurement};
        let traffic = NetworkTrafficMetrics {
            received_data: Some(Measurement::integer(10, DataUnit::Bytes, DataUnit::Bytes)),
            ..NetworkTrafficMetrics::default()
        };
        let mut snapshot = crate::snapshot::ResourceMetricsSnapshot {
            network: Some(NetworkMetrics {
                interfaces: ["eth0", "veth1a2b"]
                    .map(|name| NetworkInterfaceMetrics {
                        name: name.into(),
                        traffic: traffic.clone(),
                    })
                    .to_vec(),
                ..NetworkMetrics::default()
            }),
            ..Default::default()
        };
        snapshot.cpu = Some(Default::default());
        snapshot.memory = Some(Default::default());
        snapshot.process = Some(Default::default());
        snapshot.disk = Some(Default::default());
        snapshot.gpu = Some(Default::default());
        snapshot.extensions.targets = Some(Box::new(Targets {
            cgroups: vec![CgroupTargetReport {
                cgroup: "/a".into(),
                cpu_usage_ns: Some(1_000_000_000),
                pids_current: Some(3),
                memory_current_bytes: Some(4096),
                kernel_events: Some(TargetKernelEvents {
                    run_queue_histogram: vec![0; 32],
                    ..TargetKernelEvents::default()
                }),
                ..CgroupTargetReport::default()
            }],
            ..Targets::default()
        }));
        snapshot
    }

    fn encode(
        snapshot: &crate::snapshot::ResourceMetricsSnapshot,
        names: crate::config::MetricNames,
        budget: &SeriesBudget,
    ) -> String {
        let mut out = String::new();
        crate::output::prometheus::encode_within(snapshot, names, budget, &mut out);
        out
    }

    #[test]
    fn a_glob_turns_a_family_off_and_veth_interfaces_histograms_go() {
        use crate::config::MetricNames;
        let snapshot = snapshot();
        let all = encode(
            &snapshot,
            MetricNames::RelayMetrics,
            &SeriesBudget::everything(),
        );
        for present in [
            "relay_metrics_cgroup_pids{",
            "interface=\"veth1a2b\"",
            "relay_metrics_cgroup_run_queue_delay_seconds_bucket{",
            "relay_metrics_cgroup_memory_usage_bytes{",
        ] {
            assert!(all.contains(present), "{present} in\n{all}");
        }
        let budget = SeriesBudget::new(
            vec![],
            vec!["relay_metrics_cgroup_pids*".into()],
            false,
            vec![],
            vec!["veth*".into()],
        )
        .unwrap();
        let text = encode(&snapshot, MetricNames::RelayMetrics, &budget);
        for gone in [
            "relay_metrics_cgroup_pids",
            "veth",
            "relay_metrics_cgroup_run_queue_delay_seconds",
        ] {
            assert!(!text.contains(gone), "{gone} in\n{text}");
        }
        assert!(text.contains("relay_metrics_network_received_bytes_total{scope=\"global\",interface=\"eth0\"} 10"), "{text}");
        assert!(
            text.contains("relay_metrics_cgroup_cpu_usage_seconds_total{cgroup=\"/a\"} 1"),
            "{text}"
        );
        // cAdvisor's naming: node_exporter's interface label is `device`.
        let text = encode(&snapshot, MetricNames::Cadvisor, &budget);
        assert!(
            text.contains("node_network_receive_bytes_total{device=\"eth0\"} 10"),
            "{text}"
        );
        assert!(!text.contains("veth"), "{text}");
        // Only the listed families, and no announcement of a family without series.
        let only = SeriesBudget::new(vec!["container_cpu_*".into()], vec![], true, vec![], vec![])
            .unwrap();
        let text = encode(&snapshot, MetricNames::Cadvisor, &only);
        assert_eq!(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>(),
            ["container_cpu_usage_seconds_total{id=\"/a\",cpu=\"total\"} 1"],
            "{text}"
        );
        assert_eq!(text.matches("# TYPE").count(), 1, "{text}");
    }

    #[test]
    fn a_category_that_is_off_drops_its_per_cgroup_families() {
        use crate::config::MetricNames;
        let mut snapshot = snapshot();
        snapshot.memory = None;
        let text = encode(
            &snapshot,
            MetricNames::RelayMetrics,
            &SeriesBudget::everything(),
        );
        assert!(
            !text.contains("relay_metrics_cgroup_memory_usage_bytes"),
            "{text}"
        );
        assert!(
            text.contains("relay_metrics_cgroup_cpu_usage_seconds_total"),
            "{text}"
        );
        let text = encode(
            &snapshot,
            MetricNames::Cadvisor,
            &SeriesBudget::everything(),
        );
        assert!(!text.contains("container_memory_usage_bytes"), "{text}");
        assert!(text.contains("container_cpu_usage_seconds_total"), "{text}");
    }
}
