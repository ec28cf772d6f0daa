//! The deployment files under `deploy/`, checked by real tools: the systemd unit by
//! `systemd-analyze verify` (which exits 0 on unknown keys and silently drops unknown
//! capability names, so any output fails and every capability name is checked with `capsh`),
//! and the DaemonSet by PyPI's `kubernetes-validate --strict` (offline schemas, from the
//! virtualenv `scripts/install-deps.sh` makes). The unit's `AmbientCapabilities=` is the one home
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

#[test]
#[ignore = "tools: kubernetes-validate in the OTLP virtualenv target/otlp-venv (scripts/install-deps.sh)"]
fn the_daemonset_has_host_pid_sys_the_minimal_capabilities_probes_and_scrape_annotations() {
    let script = "import json, sys, yaml\nprint(json.dumps(yaml.safe_load(open(sys.argv[1]))))";
    let output = Command::new(venv_bin("python"))
        .args(["-c", script])
        .arg(repo("deploy/kubernetes/daemonset.yaml"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let daemonset: Value = serde_json::from_slice(&output.stdout).unwrap();
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
