//! Names the runtimes' APIs give the measured cgroups: container names and images from the
//! Docker Engine API (`extensions.docker_socket`), pod names and namespaces (and the container
//! names and images Kubernetes gave, where the Docker API does not name a container) from the
//! CRI (`extensions.cri_endpoint`). Each API is asked on a thread of its own; here the sampling
//! thread only takes the latest answers and looks ids up.

#[cfg(feature = "agent")]
use std::sync::Arc;

use crate::config::ExtensionsConfig;
use crate::snapshot::TargetLabels;

/// Where names come from.
#[derive(Debug, Default)]
pub(super) struct Names {
    #[cfg(feature = "agent")]
    docker: Option<Docker>,
    #[cfg(feature = "agent")]
    cri: Option<Cri>,
    /// Why an API cannot be asked at all.
    unavailable: Vec<String>,
}

#[cfg(feature = "agent")]
#[derive(Debug)]
struct Docker {
    client: crate::source::docker::ContainerNames,
    table: Option<Arc<crate::source::runtime_api::Answer<crate::source::docker::Containers>>>,
}

#[cfg(feature = "agent")]
#[derive(Debug)]
struct Cri {
    client: crate::source::cri::PodNames,
    listing: Option<Arc<crate::source::runtime_api::Answer<crate::source::cri::Listing>>>,
}

impl Names {
    /// Starts a client for each API the config names.
    pub(super) fn start(extensions: &ExtensionsConfig) -> Self {
        let mut names = Self::default();
        #[cfg(feature = "agent")]
        {
            if let Some(socket) = &extensions.docker_socket {
                match crate::source::docker::ContainerNames::start(std::path::Path::new(socket)) {
                    Ok(client) => {
                        names.docker = Some(Docker {
                            client,
                            table: None,
                        });
                    }
                    Err(error) => names.unavailable.push(format!(
                        "cannot start the thread asking the Docker API at {socket}: {error}"
                    )),
                }
            }
            if let Some(endpoint) = &extensions.cri_endpoint {
                match crate::source::cri::PodNames::start(endpoint) {
                    Ok(client) => {
                        names.cri = Some(Cri {
                            client,
                            listing: None,
                        });
                    }
                    Err(error) => names.unavailable.push(format!(
                        "cannot start the thread asking the CRI at {endpoint}: {error}"
                    )),
                }
            }
        }
        #[cfg(not(feature = "agent"))]
        for (what, given) in [
            ("container names from", &extensions.docker_socket),
            ("pod names from", &extensions.cri_endpoint),
        ] {
            if let Some(given) = given {
                names.unavailable.push(format!(
                    "{what} {given} need the agent build (feature `agent`)"
                ));
            }
        }
        names
    }

    /// Takes the latest answers and reports why names are missing, if they are.
    pub(super) fn refresh(&mut self, reasons: &mut Vec<String>) {
        reasons.extend(self.unavailable.iter().cloned());
        #[cfg(feature = "agent")]
        {
            if let Some(Docker { client, table }) = &mut self.docker {
                if let Some(latest) = client.table() {
                    *table = Some(latest);
                }
                if let Some(error) = table.as_ref().and_then(|t| t.error.as_ref()) {
                    reasons.push(format!(
                        "no container names: {error} (the socket was {})",
                        client.socket().display()
                    ));
                }
            }
            if let Some(Cri { client, listing }) = &mut self.cri {
                if let Some(latest) = client.listing() {
                    *listing = Some(latest);
                }
                if let Some(error) = listing.as_ref().and_then(|l| l.error.as_ref()) {
                    reasons.push(format!("no pod names: {error}"));
                }
            }
        }
    }

    /// Whether a cgroup labelled `labels` still waits for a name an API should give: a
    /// container id the Docker API (or the CRI) has not named yet, or a pod UID the CRI has not,
    /// while the API answers. The caller holds such a cgroup out of its snapshots for a bounded
    /// time, so that its series appear once, named, rather than first without names.
    pub(super) fn awaited(&self, labels: &TargetLabels) -> bool {
        #[cfg(feature = "agent")]
        {
            let answering = |error: Option<&String>| error.is_none();
            let docker = self
                .docker
                .as_ref()
                .is_some_and(|d| d.table.as_ref().is_none_or(|t| answering(t.error.as_ref())));
            let cri = self.cri.as_ref().is_some_and(|c| {
                c.listing
                    .as_ref()
                    .is_none_or(|l| answering(l.error.as_ref()))
            });
            let container = labels.container_id.is_some()
                && labels.container_name.is_none()
                && (docker
                    || (cri && labels.pod_uid.is_some())
                    || (cri
                        && matches!(
                            labels.container_runtime.as_deref(),
                            Some("containerd" | "cri-o")
                        )));
            let pod = labels.pod_uid.is_some() && labels.pod_name.is_none() && cri;
            container || pod
        }
        #[cfg(not(feature = "agent"))]
        {
            let _ = labels;
            false
        }
    }

    /// Fills the names the APIs know for a cgroup's labels; asks for a refresh where an API
    /// should know an id and does not (a container or pod started since its last answer).
    pub(super) fn label(&self, labels: &mut TargetLabels) {
        #[cfg(feature = "agent")]
        {
            let named = self.docker.as_ref().is_some_and(|d| d.label(labels));
            if let Some(cri) = &self.cri {
                cri.label(labels, named);
            }
        }
        #[cfg(not(feature = "agent"))]
        let _ = labels;
    }
}

#[cfg(feature = "agent")]
impl Docker {
    /// Returns whether the API named the container.
    fn label(&self, labels: &mut TargetLabels) -> bool {
        let (Some(id), Some(table)) = (&labels.container_id, &self.table) else {
            return false;
        };
        match table.value.get(id) {
            Some(info) => {
                set(&mut labels.container_name, &info.name);
                set(&mut labels.container_image, &info.image);
                // A Docker-API runtime under the kubelet names the pod in its labels; a CRI
                // answer, where there is one, names it the same.
                let kubernetes = &info.kubernetes;
                if !kubernetes.pod.is_empty() {
                    set(&mut labels.pod_name, &kubernetes.pod);
                    set(&mut labels.pod_namespace, &kubernetes.namespace);
                }
                if !kubernetes.container.is_empty() {
                    set(&mut labels.kubernetes_container, &kubernetes.container);
                }
                true
            }
            None => {
                if table.error.is_none() {
                    self.client.ask();
                }
                false
            }
        }
    }
}

#[cfg(feature = "agent")]
impl Cri {
    /// `named`: the Docker API named the container already.
    fn label(&self, labels: &mut TargetLabels, named: bool) {
        let Some(listing) = &self.listing else {
            return;
        };
        let table = &listing.value;
        // A pod's cgroup, and its containers' below it, carry its UID.
        let mut pod = labels.pod_uid.as_ref().and_then(|uid| table.pods.get(uid));
        let mut missing = labels.pod_uid.is_some() && pod.is_none();
        if let Some(id) = &labels.container_id {
            // Container ids the CRI should know: in a pod's cgroup, or a CRI runtime's scope.
            let ours = labels.pod_uid.is_some()
                || matches!(
                    labels.container_runtime.as_deref(),
                    Some("containerd" | "cri-o")
                );
            match table.containers.get(id) {
                Some(container) => {
                    pod = pod.or(container.pod.as_ref());
                    missing = false;
                    // The CRI's container name is the one Kubernetes gave.
                    if let Some(name) = container.name.as_deref().filter(|n| !n.is_empty()) {
                        set(&mut labels.kubernetes_container, name);
                    }
                    if !named {
                        set(
                            &mut labels.container_name,
                            container.name.as_deref().unwrap_or(""),
                        );
                        set(
                            &mut labels.container_image,
                            container.image.as_deref().unwrap_or(""),
                        );
                    }
                }
                None => missing |= ours,
            }
        }
        if let Some(pod) = pod {
            set(&mut labels.pod_name, &pod.name);
            set(&mut labels.pod_namespace, &pod.namespace);
        }
        if missing && listing.error.is_none() {
            self.client.ask();
        }
    }
}

/// Sets a label to `value` (`None` when empty), allocating only when it changes.
#[cfg(feature = "agent")]
fn set(label: &mut Option<String>, value: &str) {
    if value.is_empty() {
        *label = None;
    } else if label.as_deref() != Some(value) {
        *label = Some(value.to_owned());
    }
}

#[cfg(all(test, feature = "agent"))]
mod tests {
    use super::*;
    use crate::source::cri::{CriContainer, Listing, Pod, PodNames};
    use crate::source::runtime_api::Answer;

    fn cri(listing: Listing) -> Cri {
        // Never answers: the listing below is what the sampling side looks up.
        let Ok(client) = PodNames::start("unix:///nonexistent/relay-metrics-test.sock") else {
            panic!("the CRI thread starts");
        };
        Cri {
            client,
            listing: Some(Arc::new(Answer {
                value: listing,
                error: None,
            })),
        }
    }

    #[test]
    fn pods_by_uid_and_containers_and_sandboxes_by_id() {
        let pod = Arc::new(Pod {
            name: "web-0".into(),
            namespace: "shop".into(),
        });
        let mut listing = Listing::default();
        listing.pods.insert("uid-1".into(), Arc::clone(&pod));
        listing.containers.insert(
            "sandbox".into(),
            CriContainer {
                pod: Some(Arc::clone(&pod)),
                name: None,
                image: None,
            },
        );
        listing.containers.insert(
            "app".into(),
            CriContainer {
                pod: Some(Arc::clone(&pod)),
                name: Some("app".into()),
                image: Some("nginx:1".into()),
            },
        );
        let cri = cri(listing);
        fn named(labels: &TargetLabels) -> [Option<&str>; 4] {
            [
                labels.pod_name.as_deref(),
                labels.pod_namespace.as_deref(),
                labels.container_name.as_deref(),
                labels.container_image.as_deref(),
            ]
        }

        // The pod's own cgroup: by UID.
        let mut pod_cgroup = TargetLabels {
            pod_uid: Some("uid-1".into()),
            ..TargetLabels::default()
        };
        cri.label(&mut pod_cgroup, false);
        assert_eq!(
            named(&pod_cgroup),
            [Some("web-0"), Some("shop"), None, None]
        );

        // A container whose path names no pod (a runtime scope): by its id.
        let mut container = TargetLabels {
            container_id: Some("app".into()),
            container_runtime: Some("containerd".into()),
            ..TargetLabels::default()
        };
        cri.label(&mut container, false);
        assert_eq!(
            named(&container),
            [Some("web-0"), Some("shop"), Some("app"), Some("nginx:1")]
        );

        // The sandbox's cgroup: its pod, no container name.
        let mut sandbox = TargetLabels {
            container_id: Some("sandbox".into()),
            pod_uid: Some("uid-1".into()),
            ..TargetLabels::default()
        };
        cri.label(&mut sandbox, false);
        assert_eq!(named(&sandbox), [Some("web-0"), Some("shop"), None, None]);

        // A name the Docker API gave stays.
        let mut docker_named = TargetLabels {
            container_id: Some("app".into()),
            container_name: Some("k8s_app_web-0".into()),
            ..TargetLabels::default()
        };
        cri.label(&mut docker_named, true);
        assert_eq!(
            named(&docker_named),
            [Some("web-0"), Some("shop"), Some("k8s_app_web-0"), None]
        );

        // Unknown ids and UIDs leave the labels as they are.
        let mut unknown = TargetLabels {
            container_id: Some("other".into()),
            pod_uid: Some("uid-2".into()),
            ..TargetLabels::default()
        };
        cri.label(&mut unknown, false);
        assert_eq!(named(&unknown), [None, None, None, None]);
    }
}
