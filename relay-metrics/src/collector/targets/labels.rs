//! What a cgroup path says about what runs in it: the systemd unit, the container and its
//! runtime, the Kubernetes pod and its QoS class. Pure: the path alone, no I/O.

/// Labels derived from a cgroup path; `None` where the path does not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct PathLabels {
    /// The deepest systemd unit (`nginx.service`, `docker-….scope`, `kubepods.slice`).
    pub unit: Option<String>,
    /// The container's full id (64 hex digits for docker, podman, containerd and CRI-O).
    pub container_id: Option<String>,
    /// `docker`, `podman`, `containerd` or `cri-o`; `None` for a container id under
    /// `kubepods` whose runtime the path does not name (the cgroupfs driver).
    pub container_runtime: Option<&'static str>,
    /// The pod's UID (dashes, as the API spells it).
    pub pod_uid: Option<String>,
    /// `Guaranteed`, `Burstable` or `BestEffort`, as the API spells them.
    pub qos_class: Option<&'static str>,
}

const UNIT_SUFFIXES: [&str; 6] = [".service", ".scope", ".slice", ".socket", ".mount", ".swap"];

/// Scope prefixes of the runtimes (systemd driver: `docker-<id>.scope`; cgroupfs driver of
/// podman: `libpod-<id>`).
const RUNTIMES: [(&str, &str); 4] = [
    ("docker-", "docker"),
    ("libpod-", "podman"),
    ("cri-containerd-", "containerd"),
    ("crio-", "cri-o"),
];

fn is_container_id(text: &str) -> bool {
    text.len() >= 12 && text.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The labels of the cgroup at `path`.
pub(crate) fn path_labels(path: &str) -> PathLabels {
    let mut labels = PathLabels::default();
    let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
    let mut in_kubepods = false;
    let mut parent: Option<&str> = None;
    for component in &components {
        if UNIT_SUFFIXES
            .iter()
            .any(|suffix| component.ends_with(suffix))
        {
            labels.unit = Some((*component).to_owned());
        }
        let stem = UNIT_SUFFIXES
            .iter()
            .find_map(|suffix| component.strip_suffix(suffix))
            .unwrap_or(component);
        let mut found = false;
        for (prefix, runtime) in RUNTIMES {
            if let Some(id) = stem.strip_prefix(prefix) {
                // `libpod-conmon-<id>` and `crio-conmon-<id>` hold the monitor, not the container.
                if is_container_id(id) {
                    labels.container_id = Some(id.to_owned());
                    labels.container_runtime = Some(runtime);
                    found = true;
                }
            }
        }
        // cgroupfs drivers: `/docker/<id>`, `/kubepods/…/pod<uid>/<id>`.
        if !found && is_container_id(stem) && stem.len() == 64 {
            let runtime = match parent {
                Some("docker") => Some("docker"),
                Some("libpod_parent") => Some("podman"),
                _ => None,
            };
            if runtime.is_some() || in_kubepods {
                labels.container_id = Some(stem.to_owned());
                labels.container_runtime = runtime;
            }
        }
        if *component == "kubepods.slice" || *component == "kubepods" {
            in_kubepods = true;
            labels.qos_class = Some("Guaranteed");
        } else if in_kubepods {
            let plain = stem.strip_prefix("kubepods-").unwrap_or(stem);
            match plain {
                "burstable" => labels.qos_class = Some("Burstable"),
                "besteffort" => labels.qos_class = Some("BestEffort"),
                _ => {}
            }
            // systemd driver: `kubepods-burstable-pod<uid with _>.slice`; cgroupfs: `pod<uid>`.
            let pod = plain
                .strip_prefix("burstable-")
                .or_else(|| plain.strip_prefix("besteffort-"))
                .unwrap_or(plain);
            if let Some(uid) = pod.strip_prefix("pod") {
                let uid = uid.replace('_', "-");
                if uid.len() >= 32 && uid.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
                    labels.pod_uid = Some(uid);
                }
            }
        }
        parent = Some(component);
    }
    if !in_kubepods {
        labels.qos_class = None;
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    const UID: &str = "1c2d3e4f-aaaa-bbbb-cccc-0123456789ab";

    #[test]
    fn systemd_units_and_runtime_scopes() {
        let service = path_labels("/system.slice/nginx.service");
        assert_eq!(service.unit.as_deref(), Some("nginx.service"));
        assert_eq!(service.container_id, None);
        let docker = path_labels(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(docker.container_id.as_deref(), Some(ID));
        assert_eq!(docker.container_runtime, Some("docker"));
        assert_eq!(docker.unit, Some(format!("docker-{ID}.scope")));
        let podman = path_labels(&format!("/machine.slice/libpod-{ID}.scope/container"));
        assert_eq!(podman.container_id.as_deref(), Some(ID));
        assert_eq!(podman.container_runtime, Some("podman"));
        let conmon = path_labels(&format!("/machine.slice/libpod-conmon-{ID}.scope"));
        assert_eq!(conmon.container_id, None);
        let cgroupfs = path_labels(&format!("/libpod_parent/libpod-{ID}"));
        assert_eq!(cgroupfs.container_runtime, Some("podman"));
        let plain_docker = path_labels(&format!("/docker/{ID}"));
        assert_eq!(plain_docker.container_runtime, Some("docker"));
        assert_eq!(plain_docker.container_id.as_deref(), Some(ID));
        let crio = path_labels(&format!("/crio-{ID}.scope"));
        assert_eq!(crio.container_runtime, Some("cri-o"));
        assert_eq!(path_labels("/").unit, None);
        assert_eq!(path_labels("/abcdef0123456789").container_id, None);
    }

    #[test]
    fn kubernetes_pods_with_both_drivers() {
        let systemd = path_labels(&format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{}.slice/cri-containerd-{ID}.scope",
            UID.replace('-', "_")
        ));
        assert_eq!(systemd.pod_uid.as_deref(), Some(UID));
        assert_eq!(systemd.qos_class, Some("Burstable"));
        assert_eq!(systemd.container_runtime, Some("containerd"));
        assert_eq!(systemd.container_id.as_deref(), Some(ID));
        let guaranteed = path_labels(&format!(
            "/kubepods.slice/kubepods-pod{}.slice",
            UID.replace('-', "_")
        ));
        assert_eq!(guaranteed.qos_class, Some("Guaranteed"));
        assert_eq!(guaranteed.pod_uid.as_deref(), Some(UID));
        let cgroupfs = path_labels(&format!("/kubepods/besteffort/pod{UID}/{ID}"));
        assert_eq!(cgroupfs.qos_class, Some("BestEffort"));
        assert_eq!(cgroupfs.pod_uid.as_deref(), Some(UID));
        assert_eq!(cgroupfs.container_id.as_deref(), Some(ID));
        assert_eq!(cgroupfs.container_runtime, None);
        assert_eq!(path_labels("/system.slice").qos_class, None);
    }
}
