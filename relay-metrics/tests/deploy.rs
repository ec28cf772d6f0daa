//! The deployment files under `deploy/`, checked by real tools: the systemd unit by
//! `systemd-analyze verify` (which exits 0 on unknown keys and silently drops unknown
//! capability names, so any output fails and every capability name is checked with `capsh`),
//! the DaemonSet and its ServiceAccount, PriorityClass and headless Service by PyPI's
//! `kubernetes-validate --strict` (offline schemas, from the virtualenv `scripts/install-deps.sh`
//! makes), and the example Prometheus configuration and alerting rules by `promtool check
//! config`, `promtool check rules` and `promtool test rules`. The unit's `AmbientCapabilities=` is the one home
//! of the capability set (`tests/capabilities.rs` proves it sufficient and minimal); its bounding
//! set and the DaemonSet must grant the same. The container image is built by
//! `deploy/container/build-image.sh` in `scripts/test-all.sh`.

#![expect(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly when their setup breaks"
)]

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::venv_bin;
use serde_json::Value;

/// libcap2-bin installs capsh in /usr/sbin, which is not on an ordinary user's PATH.
const CAPSH: &str = "/usr/sbin/capsh";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `systemd-analyze verify` of `unit` (named `relay-metrics.service` in a temporary
/// directory, with ExecStart pointing at the built binary, which verify requires to exist);
/// returns its exit status and everything it printed.
fn verify(unit: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let unit = unit.replace(
        "ExecStart=/usr/local/bin/relay-metrics",
        &format!("ExecStart={}", env!("CARGO_BIN_EXE_relay-metrics")),
    );
    let path = dir.path().join("relay-metrics.service");
    std::fs::write(&path, unit).unwrap();
    let output = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze (Debian's systemd package) is installed");
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

fn unit_text() -> String {
    std::fs::read_to_string(repo("deploy/systemd/relay-metrics.service")).unwrap()
}

#[test]
#[ignore = "tools: systemd-analyze (Debian package systemd)"]
fn the_systemd_unit_verifies_without_a_word() {
    let unit = unit_text();
    assert!(unit.contains("ExecStart=/usr/local/bin/relay-metrics serve "));
    let (ok, output) = verify(&unit);
    assert!(ok && output.is_empty(), "systemd-analyze verify: {output}");
    // The check bites: an unknown key exits 0 but is reported.
    let (ok, output) = verify(&unit.replace("[Service]\n", "[Service]\nProtectEverything=yes\n"));
    assert!(ok, "systemd-analyze exits 0 on unknown keys");
    assert!(output.contains("Unknown key"), "{output}");
}

/// The capability names on a unit's `key=` lines.
fn unit_capabilities(unit: &str, key: &str) -> BTreeSet<String> {
    unit.lines()
        .filter_map(|line| line.strip_prefix(&format!("{key}=")))
        .flat_map(|value| value.split_whitespace().map(str::to_owned))
        .collect()
}

#[test]
#[ignore = "tools: capsh (Debian package libcap2-bin)"]
fn the_systemd_unit_grants_exactly_the_minimal_known_capabilities() {
    let unit = unit_text();
    let minimal = unit_capabilities(&unit, "AmbientCapabilities");
    assert_eq!(minimal.len(), 4, "{minimal:?}");
    for key in ["AmbientCapabilities", "CapabilityBoundingSet"] {
        let capabilities = unit_capabilities(&unit, key);
        assert_eq!(capabilities, minimal, "{key}");
        for name in &capabilities {
            // systemd drops names it does not know without a word: ask libcap.
            let known = Command::new(CAPSH)
                .arg(format!("--supports={name}"))
                .output()
                .expect("capsh (libcap2-bin) is installed")
                .status
                .success();
            assert!(known, "{key}: {name} is not a capability");
        }
    }
    let bogus = Command::new(CAPSH)
        .arg("--supports=CAP_NOT_A_CAPABILITY")
        .output()
        .unwrap();
    assert!(!bogus.status.success(), "capsh must refuse unknown names");
    assert!(unit.contains("\nNoNewPrivileges=yes\n"));
    assert!(unit.contains("\nDynamicUser=yes\n"));
}

fn kubernetes_validate(path: &Path) -> (bool, String) {
    let output = Command::new(venv_bin("kubernetes-validate"))
        .arg("--strict")
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
#[ignore = "tools: kubernetes-validate in the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn the_daemonset_passes_kubernetes_validate_strict() {
    let path = repo("deploy/kubernetes/daemonset.yaml");
    let (ok, output) = kubernetes_validate(&path);
    assert!(ok, "{output}");
    assert!(output.contains("passed"), "{output}");
    // The validator bites: a misspelt field fails in strict mode.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("daemonset.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&bad, text.replace("hostPID: true", "hostPid: true")).unwrap();
    let (ok, output) = kubernetes_validate(&bad);
    assert!(!ok, "{output}");
}

/// The objects of the Kubernetes manifest, by kind.
fn manifest_objects() -> Vec<Value> {
    let script =
        "import json, sys, yaml\nprint(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    let output = Command::new(venv_bin("python"))
        .args(["-c", script])
        .arg(repo("deploy/kubernetes/daemonset.yaml"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice::<Vec<Value>>(&output.stdout).unwrap()
}

fn object<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes/daemonset.yaml"))
}

#[test]
#[ignore = "tools: kubernetes-validate in the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn the_manifest_has_a_tokenless_account_a_priority_class_and_a_headless_service() {
    let objects = manifest_objects();
    let daemonset = object(&objects, "DaemonSet");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"]["kubernetes.io/os"], "linux");
    let account = object(&objects, "ServiceAccount");
    assert_eq!(account["automountServiceAccountToken"], false);
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(pod["automountServiceAccountToken"], false);
    let priority = object(&objects, "PriorityClass");
    assert_eq!(pod["priorityClassName"], priority["metadata"]["name"]);
    let value = priority["value"].as_i64().unwrap();
    // Above ordinary pods, below the system-*-critical classes.
    assert!((1..1_000_000_000).contains(&value), "{value}");
    let service = object(&objects, "Service");
    assert_eq!(service["spec"]["clusterIP"], "None");
    let labels = &daemonset["spec"]["template"]["metadata"]["labels"];
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[key], value, "the Service selects the agent's pods");
    }
    assert_eq!(service["spec"]["ports"][0]["port"], 9464);
    // Every host path is mounted read-only: the cgroup tree (under /sys) and the runtime's
    // socket directory.
    let container = &pod["containers"][0];
    let mounts = container["volumeMounts"].as_array().unwrap();
    for mount in mounts {
        assert_eq!(mount["readOnly"], true, "{mount}");
    }
    let host_paths: BTreeSet<&str> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["hostPath"]["path"].as_str().unwrap())
        .collect();
    // Not all of /run: containerd's socket directory only.
    assert_eq!(
        host_paths,
        BTreeSet::from(["/sys", "/sys/fs/cgroup", "/run/containerd"])
    );
    assert_eq!(
        daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        "10%"
    );
}

/// The seccomp profile the DaemonSet names is the one shipped, as derive-profile.py makes it
/// from the runtime default on this host: `bpf` and `perf_event_open` allowed without
/// CAP_SYS_ADMIN, `mount` not allowed; everything else the default's.
#[test]
#[ignore = "tools: kubernetes-validate in the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn the_daemonset_names_the_shipped_seccomp_profile_derived_from_the_default() {
    let objects = manifest_objects();
    let container = &object(&objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    let seccomp = &container["securityContext"]["seccompProfile"];
    assert_eq!(seccomp["type"], "Localhost");
    let name = seccomp["localhostProfile"].as_str().unwrap();
    let file = name.strip_prefix("profiles/").unwrap();
    let shipped = std::fs::read_to_string(repo("deploy/kubernetes/seccomp").join(file)).unwrap();
    let output = Command::new("python3")
        .arg(repo("deploy/kubernetes/seccomp/derive-profile.py"))
        .arg("/usr/share/containers/seccomp.json")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8(output.stdout).unwrap(),
        shipped,
        "regenerate it"
    );
    let profile: Value = serde_json::from_str(&shipped).unwrap();
    assert_eq!(profile["defaultAction"], "SCMP_ACT_ERRNO");
    let unconditional = |call: &str| {
        profile["syscalls"].as_array().unwrap().iter().any(|rule| {
            rule["action"] == "SCMP_ACT_ALLOW"
                && rule["includes"].as_object().is_none_or(|i| i.is_empty())
                && rule["names"].as_array().unwrap().iter().any(|n| n == call)
        })
    };
    assert!(unconditional("bpf") && unconditional("perf_event_open"));
    assert!(unconditional("read") && unconditional("openat"));
    assert!(!unconditional("mount") && !unconditional("umount2"));
}

#[test]
#[ignore = "tools: kubernetes-validate in the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn the_daemonset_has_host_pid_sys_the_minimal_capabilities_probes_and_scrape_annotations() {
    let objects = manifest_objects();
    let daemonset = object(&objects, "DaemonSet");
    let template = &daemonset["spec"]["template"];
    let annotations = &template["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"], "true");
    assert_eq!(annotations["prometheus.io/port"], "9464");
    let pod = &template["spec"];
    assert_eq!(pod["hostPID"], true);
    let container = &pod["containers"][0];
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(container[probe]["httpGet"]["path"], "/healthz", "{probe}");
    }
    let security = &container["securityContext"];
    let added: BTreeSet<String> = security["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("CAP_{}", c.as_str().unwrap()))
        .collect();
    assert_eq!(
        added,
        unit_capabilities(&unit_text(), "AmbientCapabilities")
    );
    assert_eq!(security["capabilities"]["drop"][0], "ALL");
    assert_eq!(security["allowPrivilegeEscalation"], false);
    let sys = container["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|mount| mount["mountPath"] == "/sys")
        .expect("/sys is mounted");
    let volume = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|volume| volume["name"] == sys["name"])
        .unwrap();
    assert_eq!(volume["hostPath"]["path"], "/sys");
}

/// `promtool ARGS` in `deploy/prometheus`; its status and everything it printed.
fn promtool(args: &[&str]) -> (bool, String) {
    let output = Command::new("promtool")
        .args(args)
        .current_dir(repo("deploy/prometheus"))
        .output()
        .expect("promtool (Debian package prometheus, installed by scripts/install-deps.sh)");
    let text = String::from_utf8_lossy(&output.stdout).to_string()
        + &String::from_utf8_lossy(&output.stderr);
    (output.status.success(), text)
}

#[test]
#[ignore = "tools: promtool (Debian package prometheus)"]
fn the_alerting_rules_check_and_fire_on_oom_kills_throttling_and_memory_near_the_limit() {
    let (ok, output) = promtool(&["check", "rules", "relay-metrics-rules.yml"]);
    assert!(ok && output.contains("SUCCESS: 3 rules found"), "{output}");
    // Each alert fires on the series that should raise it and not on the others
    // (relay-metrics-rules.test.yml).
    let (ok, output) = promtool(&["test", "rules", "relay-metrics-rules.test.yml"]);
    assert!(ok && output.contains("SUCCESS"), "{output}");
    // The rules name families the agent exports, with the labels it gives them.
    let rules = std::fs::read_to_string(repo("deploy/prometheus/relay-metrics-rules.yml")).unwrap();
    let audit = std::fs::read_to_string(repo("docs/METRICS.md")).unwrap();
    for family in [
        "relay_metrics_limit_events_total",
        "relay_metrics_cpu_throttled_seconds_total",
        "relay_metrics_memory_cgroup_charged_bytes",
        "relay_metrics_memory_limit_bytes",
        "relay_metrics_cgroup_memory_events_total",
        "relay_metrics_cgroup_cpu_throttled_seconds_total",
        "relay_metrics_cgroup_memory_usage_bytes",
        "relay_metrics_cgroup_memory_limit_bytes",
    ] {
        assert!(rules.contains(family), "{family}");
        assert!(
            audit.contains(&format!("`{family}`")),
            "{family} is not exported"
        );
    }
    // promtool bites: a rule with a broken expression fails.
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yml");
    std::fs::write(&broken, rules.replace("> 0.9", "> > 0.9")).unwrap();
    let (ok, output) = promtool(&["check", "rules", broken.to_str().unwrap()]);
    assert!(!ok, "{output}");
}

#[test]
#[ignore = "tools: promtool (Debian package prometheus)"]
fn the_example_prometheus_configuration_checks() {
    let (ok, output) = promtool(&["check", "config", "prometheus.yml"]);
    assert!(ok, "{output}");
    assert!(output.contains("SUCCESS: 1 rule files found"), "{output}");
}

#[test]
#[ignore = "tools: the OTLP virtualenv target/otlp-venv (PyYAML reads the manifest; scripts/install-deps.sh)"]
fn the_daemonsets_arguments_start_an_agent_in_per_container_mode() {
    let objects = manifest_objects();
    let container = &object(&objects, "DaemonSet")["spec"]["template"]["spec"]["containers"][0];
    let mut args: Vec<String> = container["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args[0], "serve");
    assert!(args.iter().any(|a| a == "--cgroup-depth"), "{args:?}");
    // The runtime sockets it names lie under a read-only host mount.
    let mounts = container["volumeMounts"].as_array().unwrap();
    for flag in ["--docker-socket", "--cri-endpoint"] {
        let Some(at) = args.iter().position(|a| a == flag) else {
            continue;
        };
        let value = &args[at + 1];
        let socket = value.trim_start_matches("unix://");
        assert!(
            mounts.iter().any(|m| {
                socket.starts_with(m["mountPath"].as_str().unwrap()) && m["readOnly"] == true
            }),
            "{flag} {socket} is not under a read-only mount"
        );
    }
    // The same arguments on a free loopback port.
    let listen = args.iter().position(|a| a == "--listen").unwrap();
    args[listen + 1] = "127.0.0.1:0".to_owned();
    let refs: Vec<&str> = args[1..].iter().map(String::as_str).collect();
    let mut command = Command::new(common::binary());
    command.arg("serve").args(&refs[..]);
    let agent = common::start_command(command);
    common::wait_ready(&agent.address);
    let metrics = common::get(&agent.address, "/metrics").text();
    let targets: f64 = common::sample(&metrics, "relay_metrics_targets")
        .parse()
        .unwrap();
    assert!(targets >= 1.0, "no cgroup measured one by one:\n{metrics}");
    assert!(
        metrics.contains("relay_metrics_cgroup_memory_usage_bytes{"),
        "{metrics}"
    );
}
