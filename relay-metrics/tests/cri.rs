//! `serve --cri-endpoint`: pod names and namespaces from the Kubernetes CRI.
//!
//! Against a real containerd (Debian's `containerd` with runc): the test starts its own
//! (config, root, state and socket in a temporary directory), imports a pause image it builds
//! itself (`cri_image.sh`: no registry), runs host-network pod sandboxes with containers
//! through the CRI under a kubepods-style cgroup parent of its own, and checks that the agent's
//! series for the pod, its sandbox and its container carry `pod_name` and `pod_namespace` (and
//! the container's name and image), in Prometheus, `/snapshot` and OTLP (`k8s.pod.name`,
//! `k8s.namespace.name`, checked against the OpenTelemetry conventions). It removes every pod,
//! process, mount and cgroup it made.
//!
//! Without a runtime: an endpoint that hangs, answers garbage or is missing gives a reason and
//! never stalls sampling.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    agent_command, assert_quiet, assert_root, assert_sampling_goes_on, fake_api_socket,
    scrape_until, series_with, snapshot, snapshot_from, start_agent, venv_python, wait_ready,
    Agent, Reaped,
};
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The pause image the test builds and imports.
const PAUSE_IMAGE: &str = "localhost/relay-metrics-cri-test-pause:1";

/// Runs `command` to completion within `timeout`; fails the test with its output otherwise.
fn run_bounded(mut command: Command, timeout: Duration) -> String {
    let what = format!("{command:?}");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("{what}: {error}"));
    let pid = child.id();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = sender.send(child.wait_with_output());
    });
    let output = match receiver.recv_timeout(timeout) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            kill(pid);
            panic!("{what} did not finish within {timeout:?}");
        }
    };
    assert!(
        output.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn kill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// The cgroup hierarchies of this host: each v1 controller's, or the unified one alone.
fn hierarchies() -> Vec<PathBuf> {
    let base = Path::new("/sys/fs/cgroup");
    if base.join("cgroup.controllers").exists() {
        return vec![base.to_path_buf()];
    }
    std::fs::read_dir(base)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("cgroup.procs").exists())
        .collect()
}

/// Every directory of a cgroup tree, deepest first.
fn tree(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                tree(&entry.path(), out);
            }
        }
        out.push(dir.to_path_buf());
    }
}

// The CRI messages the test sends, with the field numbers of `runtime.v1`'s `api.proto` (the
// agent declares those it reads in its own source).

#[derive(Clone, PartialEq, prost::Message)]
struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    uid: String,
    #[prost(string, tag = "3")]
    namespace: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct NamespaceOption {
    /// `NamespaceMode`: 2 is `NODE` (the host's network).
    #[prost(int32, tag = "1")]
    network: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    metadata: Option<PodSandboxMetadata>,
    #[prost(message, optional, tag = "8")]
    linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    config: Option<PodSandboxConfig>,
}

/// `RunPodSandboxResponse`, `CreateContainerResponse`, and the requests that carry one id
/// (`StopPodSandbox`, `RemovePodSandbox`, `StartContainer`): field 1 in each.
#[derive(Clone, PartialEq, prost::Message)]
struct Id {
    #[prost(string, tag = "1")]
    id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerMetadata {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ImageSpec {
    #[prost(string, tag = "1")]
    image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    image: Option<ImageSpec>,
    #[prost(string, repeated, tag = "3")]
    command: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    sandbox_config: Option<PodSandboxConfig>,
}

/// A pod the test ran.
struct Pod {
    uid: String,
    sandbox: String,
    config: PodSandboxConfig,
}

/// A containerd of the test's own, and the pods it ran there; all removed when dropped.
struct Containerd {
    dir: tempfile::TempDir,
    socket: PathBuf,
    process: Option<Reaped>,
    runtime: tokio::runtime::Runtime,
    channel: Option<Channel>,
    /// The sandbox ids of the pods run.
    pods: Vec<String>,
    /// The top of the test's cgroups (`/relay-metrics-test-cri-PID`).
    cgroup_root: String,
    /// Directories of `/run/containerd` the shims may make, that did not exist before.
    run_dirs: Vec<PathBuf>,
}

impl Containerd {
    fn start() -> Self {
        assert_root("containerd runs pods as root here");
        for (tool, package) in [
            ("containerd", "containerd"),
            ("ctr", "containerd"),
            ("runc", "runc"),
            ("gcc", "gcc"),
        ] {
            let found = Command::new(tool)
                .arg("--version")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success());
            assert!(
                found,
                "{tool} is missing: scripts/install-deps.sh installs it (Debian package {package})"
            );
        }
        let run_dirs = ["/run/containerd/s", "/run/containerd"]
            .iter()
            .map(PathBuf::from)
            .filter(|dir| !dir.exists())
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let socket = path.join("containerd.sock");
        // Host-network pods need no CNI; cgroupfs driver (no systemd here); runc's state in the
        // test's directory.
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc}"
"#,
            root = path.join("root").display(),
            state = path.join("state").display(),
            socket = socket.display(),
            cni = path.join("cni").display(),
            runc = path.join("runc").display(),
        );
        std::fs::write(path.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(path.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(path.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut containerd = Self {
            socket,
            process: Some(Reaped(child)),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            channel: None,
            pods: Vec::new(),
            cgroup_root: format!("/relay-metrics-test-cri-{}", std::process::id()),
            run_dirs,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&containerd.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "containerd did not listen on {} within 20 s: {}",
                containerd.socket.display(),
                containerd.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let archive = containerd.dir.path().join("pause.tar");
        let mut build = Command::new("bash");
        build
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cri_image.sh"))
            .arg(&archive)
            .arg(PAUSE_IMAGE);
        run_bounded(build, Duration::from_secs(60));
        let mut import = Command::new("ctr");
        import
            .arg("--address")
            .arg(&containerd.socket)
            .args(["--namespace", "k8s.io", "images", "import"])
            .arg(&archive);
        run_bounded(import, Duration::from_secs(60));
        let socket = containerd.socket.clone();
        let endpoint = Endpoint::from_static("http://cri");
        let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }));
        containerd.channel = Some(containerd.runtime.block_on(connect).unwrap());
        containerd
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    /// One `runtime.v1.RuntimeService` call, within 60 s.
    fn call<Q, R>(&self, method: &str, request: Q) -> Result<R, String>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        let channel = self.channel.clone().ok_or("not connected")?;
        let path = format!("/runtime.v1.RuntimeService/{method}");
        let exchange = async move {
            let mut client = tonic::client::Grpc::new(channel);
            client.ready().await.map_err(|error| error.to_string())?;
            let path = tonic::codegen::http::uri::PathAndQuery::try_from(path)
                .map_err(|error| error.to_string())?;
            client
                .unary(
                    tonic::Request::new(request),
                    path,
                    tonic_prost::ProstCodec::<Q, R>::default(),
                )
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| format!("{:?}: {}", status.code(), status.message()))
        };
        self.runtime
            .block_on(async { tokio::time::timeout(Duration::from_secs(60), exchange).await })
            .map_err(|_| format!("{method}: no answer within 60 s"))?
            .map_err(|error| format!("{method}: {error}"))
    }

    /// Runs a host-network pod sandbox `namespace/name` with a fresh UID under
    /// `<cgroup root>/kubepods/besteffort/pod<uid>`.
    fn run_pod(&mut self, name: &str, namespace: &str) -> Pod {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let uid = format!(
            "{:08x}-{:04x}-4000-8000-{:012x}",
            std::process::id(),
            self.pods.len(),
            nanos & 0xffff_ffff_ffff
        );
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.clone(),
                namespace: namespace.into(),
            }),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/kubepods/besteffort/pod{uid}", self.cgroup_root),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption { network: 2 }),
                }),
            }),
        };
        let request = RunPodSandboxRequest {
            config: Some(config.clone()),
        };
        let sandbox: Id = self
            .call("RunPodSandbox", request)
            .unwrap_or_else(|error| panic!("{error}\ncontainerd's log:\n{}", self.log()));
        self.pods.push(sandbox.id.clone());
        Pod {
            uid,
            sandbox: sandbox.id,
            config,
        }
    }

    /// Creates and starts a container `name` of the pause image in `pod`; returns its id.
    fn run_container(&self, pod: &Pod, name: &str) -> String {
        let request = CreateContainerRequest {
            pod_sandbox_id: pod.sandbox.clone(),
            config: Some(ContainerConfig {
                metadata: Some(ContainerMetadata { name: name.into() }),
                image: Some(ImageSpec {
                    image: PAUSE_IMAGE.into(),
                }),
                command: vec!["/pause".into()],
            }),
            sandbox_config: Some(pod.config.clone()),
        };
        let created: Id = self
            .call("CreateContainer", request)
            .unwrap_or_else(|error| panic!("{error}\ncontainerd's log:\n{}", self.log()));
        let started: Result<(), String> = self.call("StartContainer", created.clone());
        started.unwrap_or_else(|error| panic!("{error}\ncontainerd's log:\n{}", self.log()));
        created.id
    }

    /// Stops and removes a pod sandbox and its containers.
    fn remove_pod(&mut self, sandbox: &str) -> Result<(), String> {
        let id = Id { id: sandbox.into() };
        self.call::<_, ()>("StopPodSandbox", id.clone())?;
        self.call::<_, ()>("RemovePodSandbox", id)?;
        self.pods.retain(|pod| pod != sandbox);
        Ok(())
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        for sandbox in self.pods.clone() {
            if let Err(error) = self.remove_pod(&sandbox) {
                eprintln!("removing pod sandbox {sandbox}: {error}");
            }
        }
        self.channel = None;
        if let Some(mut process) = self.process.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(process.0.id()).unwrap_or(0)),
                nix::sys::signal::Signal::SIGTERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && matches!(process.0.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // Dropping it kills it if it is still there, and reaps it.
        }
        // Shims of this containerd (they outlive it by design) and what still runs in the
        // test's cgroups, if a removal above failed.
        let address = self.socket.display().to_string();
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                    continue;
                };
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                let cmdline = String::from_utf8_lossy(&cmdline);
                if cmdline.contains("containerd-shim") && cmdline.contains(&address) {
                    kill(pid);
                }
            }
        }
        let mut dirs = Vec::new();
        for hierarchy in hierarchies() {
            tree(&hierarchy.join(&self.cgroup_root[1..]), &mut dirs);
        }
        for dir in &dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|line| line.parse().ok()) {
                kill(pid);
            }
        }
        // The shims unmount the containers' root file systems; anything left under the test's
        // directory is detached, deepest first.
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut mounts: Vec<&str> = mountinfo
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(self.dir.path()))
            .collect();
        mounts.sort_by_key(|point| std::cmp::Reverse(point.len()));
        for point in mounts {
            let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
        }
        for dir in &dirs {
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(dir).is_err() && dir.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        for dir in &self.run_dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Whether the cgroup has series and every one carries every label of `labels`.
fn all_carry(exposition: &str, cgroup: &str, labels: &[String]) -> bool {
    let series = series_with(exposition, "cgroup", cgroup);
    !series.is_empty()
        && series
            .iter()
            .all(|line| labels.iter().all(|label| line.contains(label.as_str())))
}

#[test]
#[ignore = "root: runs containerd, which makes cgroups and mounts; tools: containerd, runc, gcc and the OTLP virtualenv (scripts/install-deps.sh)"]
fn pods_and_containers_get_pod_names_and_namespaces_from_a_real_containerd() {
    let started = Instant::now();
    let mut containerd = Containerd::start();
    let namespace = format!("relay-test-{}", std::process::id());
    let web = containerd.run_pod("web-0", &namespace);
    let app = containerd.run_container(&web, "app");
    let root = containerd.cgroup_root.clone();
    let pod_cgroup = format!("{root}/kubepods/besteffort/pod{}", web.uid);
    let sandbox_cgroup = format!("{pod_cgroup}/{}", web.sandbox);
    let app_cgroup = format!("{pod_cgroup}/{app}");
    eprintln!(
        "containerd and a pod with a container in {:?}",
        started.elapsed()
    );

    let endpoint = format!("unix://{}", containerd.socket.display());
    let pattern = format!("{root}/**");
    let args = [
        "--cgroups",
        &pattern,
        "--interval-ms",
        "200",
        "--cri-endpoint",
        &endpoint,
    ];
    let agent = start_agent(&args);
    wait_ready(&agent.address);
    let pod_labels = vec![
        format!("pod_uid=\"{}\"", web.uid),
        "pod_name=\"web-0\"".to_string(),
        format!("pod_namespace=\"{namespace}\""),
        "qos_class=\"BestEffort\"".to_string(),
    ];
    let mut app_labels = pod_labels.clone();
    app_labels.extend([
        format!("container_id=\"{app}\""),
        "container_name=\"app\"".to_string(),
        format!("container_image=\"{PAUSE_IMAGE}\""),
    ]);
    let mut sandbox_labels = pod_labels.clone();
    sandbox_labels.push(format!("container_id=\"{}\"", web.sandbox));
    let text = scrape_until(
        &agent.address,
        Duration::from_secs(20),
        "the pod, its sandbox and its container named",
        ("cgroup", &app_cgroup),
        |text| {
            all_carry(text, &pod_cgroup, &pod_labels)
                && all_carry(text, &app_cgroup, &app_labels)
                && all_carry(text, &sandbox_cgroup, &sandbox_labels)
        },
    );
    // The pause process's cgroup is the sandbox's: no container name.
    assert!(
        series_with(&text, "cgroup", &sandbox_cgroup)
            .iter()
            .all(|line| !line.contains("container_name=")),
        "{:#?}",
        series_with(&text, "cgroup", &sandbox_cgroup)
    );
    // Cgroups above the pod have no pod.
    assert!(
        series_with(&text, "cgroup", &format!("{root}/kubepods/besteffort"))
            .iter()
            .all(|line| !line.contains("pod_name="))
    );
    // The same labels in /snapshot, and no reason about the CRI.
    let snapshot = snapshot(&agent);
    let targets = &snapshot["extensions"]["targets"];
    let app_report = targets["cgroups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["cgroup"] == app_cgroup.as_str())
        .unwrap_or_else(|| panic!("{app_cgroup} in {targets}"));
    assert_eq!(app_report["labels"]["pod_name"], "web-0");
    assert_eq!(app_report["labels"]["pod_namespace"], namespace.as_str());
    assert_eq!(app_report["labels"]["container_name"], "app");
    assert!(
        !targets["reasons"].to_string().contains("CRI"),
        "{}",
        targets["reasons"]
    );

    // A pod started while the agent runs is named as soon as its cgroups appear, not at the
    // next periodic listing (every 10 s): the agent asks again when it sees an unknown pod.
    let worker = containerd.run_pod("worker-1", &namespace);
    let job = containerd.run_container(&worker, "job");
    let job_cgroup = format!("{root}/kubepods/besteffort/pod{}/{job}", worker.uid);
    scrape_until(
        &agent.address,
        Duration::from_secs(20),
        "the new container measured",
        ("cgroup", &job_cgroup),
        |text| !series_with(text, "cgroup", &job_cgroup).is_empty(),
    );
    let appeared = Instant::now();
    let job_labels = [
        "pod_name=\"worker-1\"".to_string(),
        format!("pod_namespace=\"{namespace}\""),
        "container_name=\"job\"".to_string(),
    ];
    scrape_until(
        &agent.address,
        Duration::from_secs(4),
        "the new pod's container named (asked again at once, not at the next 10 s listing)",
        ("cgroup", &job_cgroup),
        |text| all_carry(text, &job_cgroup, &job_labels),
    );
    eprintln!(
        "the new pod named {:?} after its container's cgroup appeared",
        appeared.elapsed()
    );
    assert_quiet(&agent);
    drop(agent);

    // OTLP with OpenTelemetry names: k8s.pod.name and k8s.namespace.name, checked against the
    // conventions.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let otlp = format!("http://{}", listener.local_addr().unwrap());
    let mut otel_args = args.to_vec();
    otel_args.extend([
        "--metric-names",
        "otel",
        "--otlp-endpoint",
        &otlp,
        "--otlp-protocol",
        "http/json",
    ]);
    let agent = start_agent(&otel_args);
    // Names come from the CRI thread's first answer: take the first export that has them.
    let requests = common::receive_requests(listener, 10, Duration::from_secs(30));
    let named = requests
        .iter()
        .map(|(_, body)| body)
        .find(|body| String::from_utf8_lossy(body).contains("\"k8s.pod.name\""))
        .unwrap_or_else(|| panic!("no export with k8s.pod.name in {} exports", requests.len()));
    let text = String::from_utf8_lossy(named);
    assert!(text.contains("\"k8s.namespace.name\""), "{text}");
    assert!(text.contains(&format!("\"{namespace}\"")), "{text}");
    let file = containerd.dir.path().join("export.json");
    std::fs::write(&file, named).unwrap();
    let output = Command::new(venv_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel_semconv.py"))
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    drop(agent);

    // cAdvisor's naming: the app container's series carry the kubelet's labels.
    let mut cadvisor_args = args.to_vec();
    cadvisor_args.extend(["--metric-names", "cadvisor"]);
    let agent = start_agent(&cadvisor_args);
    wait_ready(&agent.address);
    let want = [
        "container=\"app\"".to_string(),
        "pod=\"web-0\"".to_string(),
        format!("namespace=\"{namespace}\""),
        format!("image=\"{PAUSE_IMAGE}\""),
    ];
    scrape_until(
        &agent.address,
        Duration::from_secs(20),
        "cAdvisor's labels on the app container",
        ("pod", "web-0"),
        |text| {
            text.lines().any(|line| {
                line.starts_with("container_cpu_usage_seconds_total{")
                    && want.iter().all(|label| line.contains(label.as_str()))
            })
        },
    );
    drop(agent);

    containerd.remove_pod(&worker.sandbox).unwrap();
    drop(containerd);
    for hierarchy in hierarchies() {
        assert!(
            !hierarchy.join(&root[1..]).exists(),
            "{} is left behind",
            hierarchy.join(&root[1..]).display()
        );
    }
    eprintln!("done in {:?}", started.elapsed());
}

#[test]
fn a_cri_endpoint_that_hangs_answers_garbage_or_is_missing_gives_a_reason_and_never_stalls_sampling(
) {
    let dir = tempfile::tempdir().unwrap();
    let hang = dir.path().join("hang.sock");
    fake_api_socket(&hang, None);
    let garbage = dir.path().join("garbage.sock");
    fake_api_socket(&garbage, Some("\x00\x01garbage\r\n\r\n"));
    let http1 = dir.path().join("http1.sock");
    fake_api_socket(
        &http1,
        Some("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nnot grpc!!!"),
    );
    let missing = dir.path().join("missing.sock");
    let cases = [
        (&hang, "no complete answer within 5s"),
        (&garbage, "ListPodSandbox"),
        (&http1, "ListPodSandbox"),
        (&missing, "cannot connect"),
    ];
    let agents: Vec<_> = cases
        .iter()
        .map(|(socket, expected)| {
            let endpoint = format!("unix://{}", socket.display());
            let agent = start_agent(&[
                "--cgroups",
                "/",
                "--interval-ms",
                "100",
                "--cri-endpoint",
                &endpoint,
            ]);
            (agent, *expected, endpoint)
        })
        .collect();
    for (agent, expected, endpoint) in &agents {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let snapshot = snapshot_from(agent, 1);
            let reasons = snapshot["extensions"]["targets"]["reasons"].to_string();
            if reasons.contains(expected) {
                assert!(reasons.contains("no pod names"), "{reasons}");
                assert!(reasons.contains(endpoint.as_str()), "{reasons}");
                eprintln!("{endpoint}: {reasons}");
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no reason {expected:?}: {reasons}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // Sampling goes on while the endpoint is asked again (a hung answer takes 5 s).
    let agents: Vec<(&Agent, &str)> = agents.iter().map(|(a, e, _)| (a, *e)).collect();
    assert_sampling_goes_on(&agents);
}

#[test]
fn a_cri_endpoint_that_is_not_a_unix_socket_is_a_usage_error() {
    let output = agent_command(&["--cri-endpoint", "tcp://127.0.0.1:1234"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    common::assert_refused(&output, "a CRI endpoint is a Unix socket");
}
