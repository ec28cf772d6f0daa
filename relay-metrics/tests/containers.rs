//! Real containers: podman runs containers from the project's own image
//! (`deploy/container/build-image.sh`, which `scripts/test-all.sh` runs before this test) with
//! CPU and memory limits, and the agent (`serve --cgroups … --docker-socket …`, on the host)
//! reports each one with its limits, its `container_id`, and its name and image from podman's
//! Docker-compatible API (`podman system service`); a container that hits its memory limit
//! shows an OOM kill on its own series; a removed container's series go away.
//!
//! Needs root, podman, runc (crun refuses this host's hybrid cgroups) and the image; fails
//! with the reason when one is missing. The test names end in `_with_podman`, which
//! `scripts/test-all.sh` runs after building the image (and reports as skipped, by name, when
//! the image build was given up).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when podman or the agent is broken"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{agent_command, scrape_until, series_with, start_command, wait_ready, Reaped};

/// The image `deploy/container/build-image.sh` tags by default.
fn image() -> String {
    format!("localhost/relay-metrics:{}", env!("CARGO_PKG_VERSION"))
}

/// podman, with this test's `containers.conf` and a bound on every call.
struct Podman {
    dir: tempfile::TempDir,
    /// Containers made, removed when dropped.
    names: Vec<String>,
    service: Option<Reaped>,
}

impl Podman {
    fn new() -> Self {
        let podman = Self::bare();
        let exists = podman.run(&["image", "exists", &image()]);
        assert!(
            exists.status.success(),
            "the image {} is missing: build it with deploy/container/build-image.sh \
             (scripts/test-all.sh does before this test)",
            image()
        );
        podman
    }

    /// podman without the project's image (a test that makes its own).
    fn bare() -> Self {
        common::assert_root("podman runs containers as root here");
        let dir = tempfile::tempdir().unwrap();
        // As deploy/container/build-image.sh: runc, and limits the host lets a container raise.
        std::fs::write(
            dir.path().join("containers.conf"),
            "[containers]\ndefault_ulimits = [\"nofile=20000:20000\", \"nproc=32768:32768\"]\n\
             [engine]\nruntime = \"runc\"\n",
        )
        .unwrap();
        let podman = Self {
            dir,
            names: Vec::new(),
            service: None,
        };
        let version = podman.run(&["--version"]);
        assert!(
            version.status.success(),
            "podman does not run (scripts/install-deps.sh installs it): {}",
            String::from_utf8_lossy(&version.stderr)
        );
        podman
    }

    fn command(&self) -> Command {
        let mut command = Command::new("podman");
        // conmon writes an `oom` file into its working directory when a container's process is
        // OOM-killed: keep it in the test's directory.
        command
            .env("CONTAINERS_CONF", self.dir.path().join("containers.conf"))
            .current_dir(self.dir.path())
            .stdin(Stdio::null());
        command
    }

    /// Runs `podman ARGS` to completion within 60 s.
    fn run(&self, args: &[&str]) -> Output {
        let child = self
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("podman (scripts/install-deps.sh installs it): {error}")
            });
        let pid = child.id();
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = sender.send(child.wait_with_output());
        });
        match receiver.recv_timeout(Duration::from_secs(60)) {
            Ok(output) => output.unwrap(),
            Err(_) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
                    nix::sys::signal::Signal::SIGKILL,
                );
                panic!("podman {args:?} did not finish within 60 s");
            }
        }
    }

    /// `podman run -d` with `args` before the image and `command` run by `/bin/sh -c` in it;
    /// returns the full container id.
    fn start(&mut self, name: &str, args: &[&str], command: &str) -> String {
        self.start_from(&image(), name, args, command)
    }

    /// [`Self::start`] from `image`.
    fn start_from(&mut self, image: &str, name: &str, args: &[&str], command: &str) -> String {
        self.names.push(name.to_string());
        let mut all = vec!["run", "-d", "--name", name, "--network", "none"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--entrypoint", "/bin/sh", image, "-c", command]);
        let output = self.run(&all);
        assert!(
            output.status.success(),
            "podman {all:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let id = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert_eq!(id.len(), 64, "a container id: {id:?}");
        id
    }

    /// `podman rm -f -t 0 NAME`.
    fn remove(&mut self, name: &str) {
        let output = self.run(&["rm", "-f", "-t", "0", name]);
        assert!(
            output.status.success(),
            "podman rm {name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        self.names.retain(|n| n != name);
    }

    /// Starts `podman system service` on a socket in the test's directory (the Docker Engine
    /// API) and waits until it answers.
    fn serve_api(&mut self) -> PathBuf {
        let socket = self.dir.path().join("podman.sock");
        let child = self
            .command()
            .args(["system", "service", "--time=0"])
            .arg(format!("unix://{}", socket.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.service = Some(Reaped(child));
        let deadline = Instant::now() + Duration::from_secs(30);
        while !api_answers(&socket) {
            assert!(
                Instant::now() < deadline,
                "podman system service did not answer on {} within 30 s",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        socket
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        if !self.names.is_empty() {
            let mut args = vec!["rm", "-f", "-t", "0"];
            args.extend(self.names.iter().map(String::as_str));
            let _ = self.command().args(&args).output();
        }
    }
}

/// Whether the Docker API answers `GET /_ping` on `socket`.
fn api_answers(socket: &Path) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    if stream
        .write_all(b"GET /_ping HTTP/1.1\r\nHost: d\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.starts_with("HTTP/1.1 200")
}

/// The value of the series named `name` among `series` that also has every label of `labels`
/// (`key="value"` strings).
fn value_of(series: &[&str], name: &str, labels: &[&str]) -> Option<f64> {
    series
        .iter()
        .find(|line| {
            line.starts_with(&format!("{name}{{")) && labels.iter().all(|l| line.contains(l))
        })
        .and_then(|line| line.rsplit(' ').next())
        .map(|value| value.parse().unwrap())
}

/// The OOM kills counted on a container's series.
const OOM_KILLS: (&str, &[&str]) = (
    "relay_metrics_cgroup_memory_events_total",
    &["event=\"oom_kill\""],
);

#[test]
#[ignore = "root: runs containers; tools: podman, runc and the image of deploy/container/build-image.sh (scripts/test-all.sh)"]
fn labels_limits_oom_kill_and_removal_with_podman() {
    let started = Instant::now();
    let mut podman = Podman::new();
    let socket = podman.serve_api();
    let pid = std::process::id();
    let limited = format!("relay-metrics-test-{pid}-limited");
    let oom = format!("relay-metrics-test-{pid}-oom");
    // Half a core and 64 MiB; two sleeping processes.
    let limited_id = podman.start(
        &limited,
        &["--cpus", "0.5", "--memory", "64m"],
        "sleep infinity & exec sleep infinity",
    );
    // 32 MiB, then `tail` reads /dev/zero (no newline ever: it keeps the whole line) until the
    // OOM killer ends it; the shell stays, so the container and its counters stay too.
    let oom_id = podman.start(
        &oom,
        &["--memory", "32m", "--memory-swap", "32m"],
        "tail /dev/zero; exec sleep infinity",
    );

    let mut command = agent_command(&[
        "--interval-ms",
        "500",
        "--cgroups",
        "/libpod_parent/libpod-*",
        "/machine.slice/libpod-*",
        "--docker-socket",
    ]);
    command.arg(&socket);
    let agent = start_command(command);
    wait_ready(&agent.address);

    // Each container: its cgroup, its id, the runtime, and its name from the API.
    let text = scrape_until(
        &agent.address,
        Duration::from_secs(20),
        "both containers labelled with their names",
        ("container_id", &limited_id),
        |text| {
            [(&limited_id, &limited), (&oom_id, &oom)]
                .iter()
                .all(|(id, name)| {
                    series_with(text, "container_id", id)
                        .iter()
                        .any(|line| line.contains(&format!("container_name=\"{name}\"")))
                })
        },
    );
    let series = series_with(&text, "container_id", &limited_id);
    for line in &series {
        assert!(
            line.contains("container_runtime=\"podman\"")
                && line.contains(&format!("cgroup=\"/libpod_parent/libpod-{limited_id}\""))
                && line.contains(&format!("container_name=\"{limited}\""))
                && line.contains(&format!("container_image=\"{}\"", image())),
            "{line}"
        );
    }
    // Its limits.
    assert_eq!(
        value_of(&series, "relay_metrics_cgroup_cpu_limit_cores", &[]),
        Some(0.5),
        "{series:#?}"
    );
    assert_eq!(
        value_of(&series, "relay_metrics_cgroup_memory_limit_bytes", &[]),
        Some(64.0 * 1024.0 * 1024.0),
        "{series:#?}"
    );
    // The OOM kill is on the OOM container's series, not on the other.
    let text = scrape_until(
        &agent.address,
        Duration::from_secs(30),
        "an OOM kill on the container over its memory limit",
        ("container_id", &oom_id),
        |text| {
            value_of(
                &series_with(text, "container_id", &oom_id),
                OOM_KILLS.0,
                OOM_KILLS.1,
            )
            .is_some_and(|kills| kills >= 1.0)
        },
    );
    assert_eq!(
        value_of(
            &series_with(&text, "container_id", &limited_id),
            OOM_KILLS.0,
            OOM_KILLS.1
        ),
        Some(0.0)
    );

    // A removed container's series go within a few periods; the other's stay.
    podman.remove(&limited);
    let text = scrape_until(
        &agent.address,
        Duration::from_secs(10),
        "the removed container's series gone",
        ("container_id", &limited_id),
        |text| series_with(text, "container_id", &limited_id).is_empty(),
    );
    assert!(!series_with(&text, "container_id", &oom_id).is_empty());
    let errors: Vec<String> = agent
        .lines
        .lock()
        .unwrap()
        .iter()
        .filter(|line| line.contains("ERROR"))
        .cloned()
        .collect();
    assert!(errors.is_empty(), "the agent logged errors: {errors:#?}");
    eprintln!("took {:?}", started.elapsed());
}

/// A busybox image from Debian's `busybox-static` (no registry here), made once per host.
fn busybox_image(podman: &Podman) -> String {
    let tag = "localhost/relay-metrics-test-busybox:1".to_owned();
    if podman.run(&["image", "exists", &tag]).status.success() {
        return tag;
    }
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "/bin/busybox is missing: Debian's busybox-static (scripts/install-deps.sh installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    for sub in ["bin", "tmp", "proc", "sys", "dev"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    for applet in ["sh", "sleep", "head", "cat", "tr"] {
        std::os::unix::fs::symlink("busybox", root.join("bin").join(applet)).unwrap();
    }
    let tar = dir.path().join("root.tar");
    let status = Command::new("tar")
        .arg("-C")
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .arg(".")
        .status()
        .unwrap();
    assert!(status.success(), "tar of the busybox root");
    let output = podman.run(&["import", tar.to_str().unwrap(), &tag]);
    assert!(
        output.status.success(),
        "podman import: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    tag
}

/// A value of a cgroup v1 file of a podman container (`/libpod_parent/libpod-<id>`), with a
/// `key value` line's value when `key` is given.
fn container_file(controller: &str, id: &str, file: &str, key: Option<&str>) -> f64 {
    let path = format!("/sys/fs/cgroup/{controller}/libpod_parent/libpod-{id}/{file}");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let value = match key {
        None => text.trim(),
        Some(key) => text
            .lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("{key} in {path}:\n{text}")),
    };
    value.parse().unwrap()
}

/// The result of a query whose `pod` label is `pod`, and its value.
fn result_for(results: &[serde_json::Value], pod: &str) -> (serde_json::Value, f64) {
    let result = results
        .iter()
        .find(|r| r["metric"]["pod"] == pod)
        .unwrap_or_else(|| panic!("no result for pod {pod}: {results:#?}"));
    let value = result["value"][1].as_str().unwrap().parse().unwrap();
    (result["metric"].clone(), value)
}

/// The kubernetes-mixin's cAdvisor rules, evaluated by a real Prometheus scraping
/// `serve --metric-names cadvisor`: two podman containers named as a Docker-API runtime under
/// the kubelet names them (`io.kubernetes.*` labels) each give one result with their
/// namespace, pod and container, whose value matches the container's own cgroup files.
#[test]
#[ignore = "root: runs containers; tools: podman, runc, busybox-static, prometheus (scripts/install-deps.sh)"]
fn kubernetes_mixin_cadvisor_rules_with_podman() {
    let mut podman = Podman::bare();
    let image = busybox_image(&podman);
    let socket = podman.serve_api();
    let pid = std::process::id();
    let kube = |pod: &str, container: &str| {
        [
            "--label".to_owned(),
            "io.kubernetes.pod.namespace=shop".to_owned(),
            "--label".to_owned(),
            format!("io.kubernetes.pod.name={pod}"),
            "--label".to_owned(),
            format!("io.kubernetes.container.name={container}"),
        ]
    };
    let mut args: Vec<String> = kube("web-0", "app").to_vec();
    args.extend(["--cpus".to_owned(), "0.2".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Spins at a fifth of a core: throttled in nearly every period.
    let web = podman.start_from(
        &image,
        &format!("relay-metrics-test-{pid}-web"),
        &args,
        "while :; do :; done",
    );
    let mut args: Vec<String> = kube("db-0", "db").to_vec();
    args.extend(["--memory".to_owned(), "256m".to_owned()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // 32 MiB of page cache (a file in the container's root), most of it inactive.
    let db = podman.start_from(
        &image,
        &format!("relay-metrics-test-{pid}-db"),
        &args,
        "head -c 33554432 /dev/zero > /tmp/fill; exec sleep 100000",
    );

    // This test's two containers only: other podman tests may run at the same time.
    let (web_cgroup, db_cgroup) = (
        format!("/libpod_parent/libpod-{web}"),
        format!("/libpod_parent/libpod-{db}"),
    );
    let mut command = agent_command(&[
        "--interval-ms",
        "500",
        "--metric-names",
        "cadvisor",
        "--cgroups",
        &web_cgroup,
        &db_cgroup,
        "--docker-socket",
    ]);
    command.arg(&socket);
    let agent = start_command(command);
    wait_ready(&agent.address);
    let prometheus = common::Prometheus::start(&[&agent.address]);

    // node_namespace_pod_container:container_cpu_usage_seconds_total:sum_rate5m's expression.
    let cpu = "sum by (namespace, pod, container) (rate(container_cpu_usage_seconds_total{image!=\"\"}[5m]))";
    let deadline = Instant::now() + Duration::from_secs(60);
    while prometheus.query(cpu).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "two CPU results within 60 s: {:#?}",
            prometheus.query(cpu)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // A few seconds of samples for a steady rate.
    std::thread::sleep(Duration::from_secs(8));
    let results = prometheus.query(cpu);
    assert_eq!(results.len(), 2, "one result per container: {results:#?}");
    let (labels, web_rate) = result_for(&results, "web-0");
    assert_eq!(
        labels,
        serde_json::json!({"namespace": "shop", "pod": "web-0", "container": "app"})
    );
    let (labels, _) = result_for(&results, "db-0");
    assert_eq!(
        labels,
        serde_json::json!({"namespace": "shop", "pod": "db-0", "container": "db"})
    );
    // The rule's value: a [5m] rate divides by the whole window, and the test has seconds of
    // samples, so the value is checked with the same expression over [10s]: the cgroup's own
    // counter over 3 s gives the same rate (a fifth of a core).
    assert!(web_rate > 0.0, "{results:#?}");
    let web_rate = result_for(&prometheus.query(&cpu.replace("[5m]", "[10s]")), "web-0").1;
    let before = container_file("cpuacct", &web, "cpuacct.usage", None);
    std::thread::sleep(Duration::from_secs(3));
    let file_rate = (container_file("cpuacct", &web, "cpuacct.usage", None) - before) / 3e9;
    eprintln!("web: rate {web_rate} from Prometheus, {file_rate} from cpuacct.usage");
    assert!(
        (file_rate - 0.2).abs() < 0.03,
        "cpuacct.usage rate {file_rate}"
    );
    assert!(
        (web_rate - file_rate).abs() < 0.03,
        "rate {web_rate}, file {file_rate}"
    );

    // Working set: usage - total_inactive_file, as the cgroup's files give it now.
    let working_set = "container_memory_working_set_bytes{image!=\"\"}";
    let results = prometheus.query(working_set);
    assert_eq!(results.len(), 2, "one result per container: {results:#?}");
    let (_, prom) = result_for(&results, "db-0");
    let usage = container_file("memory", &db, "memory.usage_in_bytes", None);
    let inactive = container_file("memory", &db, "memory.stat", Some("total_inactive_file"));
    eprintln!("db: working set {prom} from Prometheus, usage {usage} - inactive {inactive}");
    // Most of the file is in the page cache (some may be reclaimed under load).
    assert!(
        prom > 0.0 && usage > 16.0 * 1024.0 * 1024.0,
        "{prom}, {usage}"
    );
    assert!(
        (prom - (usage - inactive)).abs() < 2.0 * 1024.0 * 1024.0,
        "working set {prom}, files {}",
        usage - inactive
    );

    let cache = prometheus.first_value("container_memory_cache{pod=\"db-0\"}");
    let file_cache = container_file("memory", &db, "memory.stat", Some("total_cache"));
    assert!(
        cache.is_some_and(|cache| (cache - file_cache).abs() < 1024.0 * 1024.0),
        "container_memory_cache {cache:?}, total_cache {file_cache}"
    );

    // CPUThrottlingHigh's ratio (without its threshold).
    let throttling = "sum(increase(container_cpu_cfs_throttled_periods_total{container!=\"\"}[5m])) without (id, metrics_path, name, image, endpoint, job, node) / sum(increase(container_cpu_cfs_periods_total{}[5m])) without (id, metrics_path, name, image, endpoint, job, node)";
    let results = prometheus.query(throttling);
    let (labels, ratio) = result_for(&results, "web-0");
    assert_eq!(labels["container"], "app", "{labels}");
    let throttled = container_file("cpu", &web, "cpu.stat", Some("nr_throttled"));
    let periods = container_file("cpu", &web, "cpu.stat", Some("nr_periods"));
    eprintln!("web: throttled ratio {ratio} from Prometheus, {throttled}/{periods} from cpu.stat");
    assert!(
        ratio > 0.8,
        "a spinning container at 0.2 CPUs is throttled: {ratio}"
    );
    assert!(
        (ratio - throttled / periods).abs() < 0.1,
        "{ratio} vs {throttled}/{periods}"
    );
    assert_eq!(
        prometheus.first_value("container_spec_cpu_quota{pod=\"web-0\"}"),
        Some(container_file("cpu", &web, "cpu.cfs_quota_us", None))
    );
    assert_eq!(
        prometheus.first_value("container_spec_memory_limit_bytes{pod=\"db-0\"}"),
        Some(256.0 * 1024.0 * 1024.0)
    );
}

/// Names from the first sample: containers started and removed while the agent runs
/// (`--docker-socket`, a snapshot every 200 ms, scraped every 100 ms) never show a series
/// without their name: a new container's cgroup is held out until podman's API names it.
#[test]
#[ignore = "root: runs containers; tools: podman, runc, busybox-static (scripts/install-deps.sh)"]
fn churn_shows_no_series_without_names_with_podman() {
    let mut podman = Podman::bare();
    let image = busybox_image(&podman);
    let socket = podman.serve_api();
    let mut command = agent_command(&[
        "--interval-ms",
        "200",
        "--cgroups",
        "/libpod_parent/libpod-*",
        "--docker-socket",
    ]);
    command.arg(&socket);
    let agent = start_command(command);
    wait_ready(&agent.address);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let (address, stop) = (agent.address.clone(), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut expositions = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                expositions.push(common::get(&address, "/metrics").text());
                std::thread::sleep(Duration::from_millis(100));
            }
            expositions
        })
    };
    let pid = std::process::id();
    let mut ids = Vec::new();
    for round in 0..4 {
        let name = format!("relay-metrics-test-{pid}-churn{round}");
        ids.push((
            podman.start_from(&image, &name, &[], "exec sleep 100000"),
            name.clone(),
        ));
        std::thread::sleep(Duration::from_millis(1500));
        podman.remove(&name);
    }
    std::thread::sleep(Duration::from_millis(500));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let expositions = scraper.join().unwrap();
    // This test's containers only: other podman tests may run at the same time.
    let ours = |line: &str| {
        ids.iter()
            .any(|(id, _)| line.contains(&format!("container_id=\"{id}\"")))
    };
    let mut unnamed = Vec::new();
    for text in &expositions {
        for line in text.lines().filter(|l| ours(l)) {
            if !line.contains("container_name=\"") {
                unnamed.push(line.to_owned());
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "{} series without a name: {:#?}",
        unnamed.len(),
        &unnamed[..unnamed.len().min(5)]
    );
    for (id, name) in &ids {
        assert!(
            expositions
                .iter()
                .any(|text| series_with(text, "container_id", id)
                    .iter()
                    .any(|l| l.contains(&format!("container_name=\"{name}\"")))),
            "{name} was never reported"
        );
    }
    eprintln!(
        "{} expositions, {} containers, none unnamed",
        expositions.len(),
        ids.len()
    );
}

/// The agent under a seccomp profile, in a podman container (runc) as the DaemonSet runs it:
/// only the DaemonSet's capabilities, host PID namespace and cgroups, the node's /sys and its
/// cgroup tree read-only (the runtime's own cgroup mount would hide the node's), the host's
/// root as an overlay (`--rootfs /:O`) so the test's own build runs.
/// Returns the `/snapshot` and `/metrics` it serves after a few snapshots.
fn agent_under_seccomp(
    podman: &mut Podman,
    profile: &Path,
    cgroup: &str,
) -> (serde_json::Value, String) {
    let name = format!("relay-metrics-test-{}-seccomp", std::process::id());
    let listen = common::free_address();
    let binary = common::binary();
    podman.names.push(name.clone());
    let output = podman.run(&[
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        "host",
        "--pid",
        "host",
        "--cgroupns",
        "host",
        "--security-opt",
        &format!("seccomp={}", profile.display()),
        "--cap-drop",
        "all",
        "--cap-add",
        "BPF,PERFMON,DAC_READ_SEARCH,SYS_PTRACE",
        "-v",
        "/sys:/sys:ro",
        "-v",
        "/sys/fs/cgroup:/sys/fs/cgroup:ro",
        "--rootfs",
        "/:O",
        binary,
        "serve",
        "--listen",
        &listen,
        "--scope",
        "global",
        "--cgroups",
        cgroup,
        "--interval-ms",
        "200",
    ]);
    assert!(
        output.status.success(),
        "podman run: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // Listening once it has started in the container.
    let deadline = Instant::now() + Duration::from_secs(20);
    while common::exchange(
        &listen,
        "GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        Duration::from_secs(2),
    )
    .is_err()
    {
        let logs = podman.run(&["logs", &name]);
        assert!(
            Instant::now() < deadline,
            "the agent in the container does not listen: {}{}",
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    wait_ready(&listen);
    std::thread::sleep(Duration::from_secs(1));
    let snapshot: serde_json::Value =
        serde_json::from_str(&common::get(&listen, "/snapshot").text()).unwrap();
    let metrics = common::get(&listen, "/metrics").text();
    podman.remove(&name);
    (snapshot, metrics)
}

/// The seccomp profile the DaemonSet names (deploy/kubernetes/seccomp/relay-metrics.json) lets
/// the agent load its eBPF programs with CAP_BPF and CAP_PERFMON alone (the BPF task iterator
/// serves processes, a cgroup's kernel-event series are there); podman's default profile, from
/// which it is derived, refuses `bpf(2)` without CAP_SYS_ADMIN (the control).
#[test]
#[ignore = "root: runs containers; tools: podman, runc (scripts/install-deps.sh)"]
fn the_agent_loads_its_ebpf_programs_under_the_shipped_seccomp_profile_with_podman() {
    let mut podman = Podman::bare();
    let cgroup = common::TestCgroup::new("seccomp", &["memory", "cpu", "cpuacct", "pids"]);
    let mut sleeper = common::Reaped(Command::new("sleep").arg("600").spawn().unwrap());
    cgroup.enter(sleeper.0.id());
    let profile = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/kubernetes/seccomp/relay-metrics.json");
    let (snapshot, metrics) = agent_under_seccomp(&mut podman, &profile, &cgroup.path);
    let collector = &snapshot["extensions"]["collector"];
    assert_eq!(collector["process_source"], "bpf_iter", "{collector}");
    assert!(
        metrics.contains(&format!(
            "relay_metrics_cgroup_preemptions_total{{cgroup=\"{}\"}}",
            cgroup.path
        )),
        "{metrics}"
    );
    let (snapshot, _) = agent_under_seccomp(
        &mut podman,
        Path::new("/usr/share/containers/seccomp.json"),
        &cgroup.path,
    );
    let collector = &snapshot["extensions"]["collector"];
    assert_eq!(collector["process_source"], "procfs", "{collector}");
    assert!(
        collector["process_source_reason"]
            .as_str()
            .is_some_and(|r| r.contains("Operation not permitted")),
        "{collector}"
    );
    let _ = sleeper.0.kill();
    let _ = sleeper.0.wait();
}
