//! `serve` over the big-host scenario: the agent started in-process (the binary's own entry
//! point), /metrics scraped over HTTP and each series compared with the oracle.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use relay_metrics::output::serve::{AgentOptions, Limits};
use relay_metrics::Collector;

use super::{device_oracle, oracle, row, row_all, uuid, Host, CGROUPS, DEVICES, PROCESSES};
use crate::{lock, ENV_LOCK};

/// Starts the agent (`serve`'s in-process entry point) with a collector over `library`,
/// scrapes /metrics until it carries the second NVML answer, stops it by SIGTERM (the agent's
/// handler takes it; nothing else in this test binary listens for it).
pub(super) fn metrics(host: &Host, library: &std::path::Path) -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let env = lock(&ENV_LOCK);
    host.set_env(library);
    let collector = Collector::new(host.config()).unwrap();
    let options = AgentOptions {
        listen: format!("127.0.0.1:{port}"),
        period: Duration::from_millis(250),
        otlp: None,
        limits: Limits::default(),
        web: None,
        budget: Default::default(),
    };
    let agent = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(relay_metrics::output::serve::run(collector, options))
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let text = loop {
        let text = scrape(port).unwrap_or_default();
        let sampled = text
            .lines()
            .filter(|l| l.starts_with("relay_metrics_gpu_process_utilization_ratio{"))
            .count();
        // 180 of the 200 have a sample (p % 10 != 9): the second NVML answer is in.
        if sampled >= PROCESSES * 9 / 10 {
            break text;
        }
        assert!(Instant::now() < deadline, "no complete /metrics: {text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::env::remove_var("RELAY_METRICS_NVML_LIBRARY");
    drop(env);
    nix::sys::signal::raise(nix::sys::signal::Signal::SIGTERM).unwrap();
    agent.join().unwrap().unwrap();
    text
}

/// One HTTP/1.0 GET of /metrics: the body, or `None` until the agent listens.
fn scrape(port: u16) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.0 200").then(|| body.to_string())
}

/// The values of `name`'s series carrying every label of `labels`.
fn series(text: &str, name: &str, labels: &[(&str, String)]) -> Vec<f64> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(name)?.strip_prefix('{')?;
            let (set, number) = rest.rsplit_once("} ")?;
            labels
                .iter()
                .all(|(k, v)| set.split(',').any(|l| l == format!("{k}=\"{v}\"")))
                .then(|| number.parse().ok())
                .flatten()
        })
        .collect()
}

/// Whether exactly one series matches and its value is within 1e-9 of `oracle` (ratios are
/// percent / 100 in floating point).
fn one_equal(text: &str, name: &str, labels: &[(&str, String)], oracle: f64) -> bool {
    matches!(series(text, name, labels)[..], [v] if (v - oracle).abs() < 1e-9)
}

pub(super) fn check(text: &str, host: &Host) {
    let mut equal = 0;
    for d in 0..DEVICES {
        let [memory, utilization, power, energy, temperature, ..] = device_oracle(d);
        let device = || vec![("device", uuid(d))];
        let by_uuid = || vec![("uuid", uuid(d))];
        equal += [
            one_equal(
                text,
                "relay_metrics_gpu_memory_used_bytes",
                &device(),
                memory,
            ),
            one_equal(
                text,
                "relay_metrics_gpu_utilization_ratio",
                &device(),
                utilization / 100.0,
            ),
            one_equal(text, "relay_metrics_gpu_power_watts", &by_uuid(), power),
            one_equal(
                text,
                "relay_metrics_gpu_energy_joules_total",
                &by_uuid(),
                energy,
            ),
            one_equal(
                text,
                "relay_metrics_gpu_temperature_celsius",
                &[("uuid", uuid(d)), ("sensor", "gpu".to_string())],
                temperature,
            ),
        ]
        .iter()
        .filter(|&&e| e)
        .count();
    }
    row_all(
        "serve /metrics: device values (memory, utilisation, power, energy, temperature) × 8",
        equal,
        DEVICES * 5,
    );

    let memory_series = text
        .lines()
        .filter(|l| l.starts_with("relay_metrics_gpu_process_memory_used_bytes{"))
        .count();
    row(
        "serve /metrics: relay_metrics_gpu_process_memory_used_bytes series",
        memory_series,
        PROCESSES,
        memory_series == PROCESSES,
    );
    let equal = (0..PROCESSES)
        .filter(|&p| {
            let o = oracle(p);
            let labels = [
                ("device", uuid(o.device)),
                ("pid", host.pids[p].to_string()),
            ];
            let name = "relay_metrics_gpu_process_utilization_ratio";
            one_equal(
                text,
                "relay_metrics_gpu_process_memory_used_bytes",
                &labels,
                o.memory_bytes as f64,
            ) && match o.utilization {
                Some((sm, _)) => one_equal(text, name, &labels, sm / 100.0),
                None => series(text, name, &labels).is_empty(),
            }
        })
        .count();
    row_all(
        "serve /metrics: per-process memory and utilisation (by PID label)",
        equal,
        PROCESSES,
    );

    let mut equal = 0;
    for (k, cgroup) in host.cgroups.iter().enumerate() {
        for d in 0..DEVICES {
            let (n, memory, sm, mem) = Host::cgroup_oracle(k, d);
            let labels = [("cgroup", cgroup.path.clone()), ("uuid", uuid(d))];
            let checks = [
                ("relay_metrics_cgroup_gpu_processes", n as f64),
                ("relay_metrics_cgroup_gpu_memory_used_bytes", memory as f64),
                ("relay_metrics_cgroup_gpu_sm_utilization_ratio", sm / 100.0),
                (
                    "relay_metrics_cgroup_gpu_memory_utilization_ratio",
                    mem / 100.0,
                ),
            ];
            equal += usize::from(
                checks
                    .iter()
                    .all(|(name, x)| one_equal(text, name, &labels, *x)),
            );
        }
    }
    row_all(
        "serve /metrics: GPU use per measured cgroup and device (4 series each)",
        equal,
        CGROUPS * DEVICES,
    );
    assert!(series(text, "relay_metrics_gpu_process_memory_used_bytes", &[]).len() == PROCESSES);
}
