//! Container names and images from the Docker Engine API (`GET /containers/json?all=true`,
//! which podman's `podman system service` serves too), asked on a thread of its own
//! (`source::runtime_api`) so the sampling thread never waits for the runtime: it only looks up
//! the latest table.
//!
//! The client is hyper's HTTP/1 connection over a Unix socket (hyper is already the agent's HTTP
//! stack; one GET does not justify a Docker SDK and its dependency tree). Every request is
//! bounded: 2 s to connect, 5 s for the whole answer, 8 MiB of body. A socket that hangs, answers
//! garbage or is missing gives a reason (in `extensions.targets.reasons`) and an empty table, and
//! is asked again later.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::runtime_api::{Answer, Asker, CONNECT_TIMEOUT, REQUEST_TIMEOUT};

/// The most body accepted.
const MAX_BODY: usize = 8 << 20;

/// A container's name and image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ContainerInfo {
    /// The name, without Docker's leading `/`.
    pub name: String,
    /// The image as the runtime lists it.
    pub image: String,
    /// Its pod and container in Kubernetes, from the `io.kubernetes.pod.namespace`,
    /// `io.kubernetes.pod.name` and `io.kubernetes.container.name` labels a Docker-API runtime
    /// lists under the kubelet (as cAdvisor reads them); empty where absent.
    pub kubernetes: KubernetesNames,
}

/// A container's Kubernetes names from its runtime labels.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct KubernetesNames {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// The containers by full id.
pub(crate) type Containers = HashMap<String, ContainerInfo>;

/// The sampling thread's side: the latest table, and a way to ask for a refresh.
#[derive(Debug)]
pub(crate) struct ContainerNames {
    asker: Asker<Containers>,
    socket: PathBuf,
}

impl ContainerNames {
    /// Starts the thread that asks the API at `socket`.
    pub(crate) fn start(socket: &Path) -> std::io::Result<Self> {
        let path = socket.to_path_buf();
        let asker = Asker::start(
            "relay-metrics-docker",
            format!(
                "the Docker API at {} has not answered yet",
                socket.display()
            ),
            move || {
                let path = path.clone();
                async move {
                    list_containers(&path)
                        .await
                        .map_err(|error| format!("Docker API at {}: {error}", path.display()))
                }
            },
        )?;
        Ok(Self {
            asker,
            socket: socket.to_path_buf(),
        })
    }

    /// The latest table; never blocks (`None`: keep the one you had).
    pub(crate) fn table(&self) -> Option<Arc<Answer<Containers>>> {
        self.asker.latest()
    }

    /// Asks for a refresh (a container id the table does not know); never blocks.
    pub(crate) fn ask(&self) {
        self.asker.ask();
    }

    /// The socket asked.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }
}

/// One `GET /containers/json?all=true`, bounded in time and size.
async fn list_containers(socket: &Path) -> Result<Containers, String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::UnixStream::connect(socket))
        .await
        .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
        .map_err(|error| format!("cannot connect: {error}"))?;
    let exchange = async {
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake::<_, Empty<Bytes>>(TokioIo::new(stream))
                .await
                .map_err(|error| format!("HTTP handshake: {error}"))?;
        let driver = tokio::spawn(connection);
        let request = hyper::Request::get("/containers/json?all=true")
            .header(hyper::header::HOST, "docker")
            .body(Empty::new())
            .map_err(|error| format!("request: {error}"))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| format!("no valid HTTP answer: {error}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_BODY)
            .collect()
            .await
            .map_err(|error| format!("reading the answer: {error}"))?
            .to_bytes();
        driver.abort();
        if !status.is_success() {
            return Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(200)]).trim()
            ));
        }
        parse_containers(&body)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete answer within {REQUEST_TIMEOUT:?}"))?
}

#[derive(serde::Deserialize)]
struct Listed {
    #[serde(rename = "Id")]
    id: String,
    #[serde(rename = "Names", default)]
    names: Vec<String>,
    #[serde(rename = "Image", default)]
    image: String,
    #[serde(rename = "Labels", default)]
    labels: Option<HashMap<String, String>>,
}

/// The containers of a `/containers/json` answer, by id.
pub(crate) fn parse_containers(body: &[u8]) -> Result<Containers, String> {
    let listed: Vec<Listed> = serde_json::from_slice(body)
        .map_err(|error| format!("the answer is not a container list: {error}"))?;
    Ok(listed
        .into_iter()
        .map(|container| {
            let name = container
                .names
                .first()
                .map(|name| name.trim_start_matches('/').to_owned())
                .unwrap_or_default();
            let mut labels = container.labels.unwrap_or_default();
            let mut take = |key: &str| labels.remove(key).unwrap_or_default();
            let kubernetes = KubernetesNames {
                namespace: take("io.kubernetes.pod.namespace"),
                pod: take("io.kubernetes.pod.name"),
                container: take("io.kubernetes.container.name"),
            };
            (
                container.id,
                ContainerInfo {
                    name,
                    image: container.image,
                    kubernetes,
                },
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_list_gives_names_and_images_by_id() {
        let body = br#"[{"Id":"abc","Names":["/web"],"Image":"nginx:1","State":"running"},{"Id":"def","Names":[],"Image":"","Labels":null},{"Id":"k8s","Names":["/k8s_web_p_ns_u_0"],"Image":"nginx:1","Labels":{"io.kubernetes.pod.namespace":"ns","io.kubernetes.pod.name":"p","io.kubernetes.container.name":"web","other":"x"}}]"#;
        let containers = parse_containers(body).unwrap();
        assert_eq!(
            containers["abc"],
            ContainerInfo {
                name: "web".into(),
                image: "nginx:1".into(),
                kubernetes: KubernetesNames::default(),
            }
        );
        assert_eq!(
            containers["k8s"].kubernetes,
            KubernetesNames {
                namespace: "ns".into(),
                pod: "p".into(),
                container: "web".into()
            }
        );
        assert_eq!(containers["def"].name, "");
        let error = parse_containers(b"hello").unwrap_err();
        assert!(error.contains("not a container list"), "{error}");
        assert!(parse_containers(br#"{"message":"page not found"}"#).is_err());
    }
}
