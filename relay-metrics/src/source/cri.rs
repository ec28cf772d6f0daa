//! Pod names and namespaces (and the container names and images Kubernetes gave) from the
//! Kubernetes Container Runtime Interface at a runtime's endpoint (containerd's
//! `unix:///run/containerd/containerd.sock`, CRI-O's `unix:///run/crio/crio.sock`): the
//! `runtime.v1.RuntimeService` calls `ListPodSandbox` and `ListContainers`, asked on a thread of
//! its own (`source::runtime_api`) so the sampling thread never waits for the runtime.
//!
//! The client is tonic's gRPC over a Unix socket (tonic and prost are already the OTLP
//! exporter's stack). The messages are declared here with prost's derive, with the field
//! numbers of the CRI's `api.proto` and only the fields the agent reads (protobuf decoding skips
//! the others): the CRI crates on crates.io generate their code from the proto in a build
//! script that needs `protoc`, which a plain `cargo build` must not. Every exchange is bounded:
//! 2 s to connect, 5 s for both calls, 16 MiB per answer (the kubelet's own limit). An endpoint
//! that hangs, answers garbage or is missing gives a reason (in `extensions.targets.reasons`)
//! and empty tables, and is asked again later.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use hyper_util::rt::TokioIo;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::{Channel, Endpoint, Uri};

use super::runtime_api::{Answer, Asker, CONNECT_TIMEOUT, REQUEST_TIMEOUT};

/// The largest answer decoded (the kubelet's limit for CRI messages).
const MAX_MESSAGE: usize = 16 << 20;

/// A pod, as its sandbox's metadata names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Pod {
    pub name: String,
    pub namespace: String,
}

/// What the runtime says about a container id (or a pod sandbox's id, whose cgroup holds the
/// sandbox's pause process).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CriContainer {
    /// Its pod, `None` when its sandbox is not listed.
    pub pod: Option<Arc<Pod>>,
    /// The container's name in the pod spec; `None` for a sandbox.
    pub name: Option<String>,
    /// The image the container was created from; `None` for a sandbox.
    pub image: Option<String>,
}

/// The runtime's pods and containers.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Listing {
    /// Pods by UID.
    pub pods: HashMap<String, Arc<Pod>>,
    /// Containers and pod sandboxes by id.
    pub containers: HashMap<String, CriContainer>,
}

/// The sampling thread's side: the latest listing, and a way to ask for a refresh.
#[derive(Debug)]
pub(crate) struct PodNames {
    asker: Asker<Listing>,
}

impl PodNames {
    /// Starts the thread that asks the CRI at `endpoint` (`unix:///path` or `/path`).
    pub(crate) fn start(endpoint: &str) -> std::io::Result<Self> {
        let socket = crate::config::cri_socket(endpoint)
            .map_err(|reason| std::io::Error::new(std::io::ErrorKind::InvalidInput, reason))?;
        let shown = endpoint.to_owned();
        let asker = Asker::start(
            "relay-metrics-cri",
            format!("the CRI at {endpoint} has not answered yet"),
            move || {
                let socket = socket.clone();
                let shown = shown.clone();
                async move {
                    list(&socket)
                        .await
                        .map_err(|error| format!("CRI at {shown}: {error}"))
                }
            },
        )?;
        Ok(Self { asker })
    }

    /// The latest listing; never blocks (`None`: keep the one you had).
    pub(crate) fn listing(&self) -> Option<Arc<Answer<Listing>>> {
        self.asker.latest()
    }

    /// Asks for a refresh (a pod or container the listing does not know); never blocks.
    pub(crate) fn ask(&self) {
        self.asker.ask();
    }
}

/// Both listings, bounded in time and size.
async fn list(socket: &Path) -> Result<Listing, String> {
    let endpoint = Endpoint::from_static("http://cri").connect_timeout(CONNECT_TIMEOUT);
    // The URI is a placeholder: every connection goes to the socket.
    let socket = socket.to_path_buf();
    let connect = endpoint.connect_with_connector(tower::service_fn(move |_: Uri| {
        let socket = socket.clone();
        async move {
            let stream = tokio::net::UnixStream::connect(socket).await?;
            Ok::<_, std::io::Error>(TokioIo::new(stream))
        }
    }));
    let channel = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| format!("no connection within {CONNECT_TIMEOUT:?}"))?
        .map_err(|error| chain("cannot connect".into(), &error))?;
    let exchange = async {
        let sandboxes: ListPodSandboxResponse = call(&channel, "ListPodSandbox").await?;
        let containers: ListContainersResponse = call(&channel, "ListContainers").await?;
        Ok(listing(sandboxes, containers))
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("no complete answer within {REQUEST_TIMEOUT:?}"))?
}

/// One unary `runtime.v1.RuntimeService` call with an empty request (no filter: everything).
async fn call<R: prost::Message + Default + Send + 'static>(
    channel: &Channel,
    method: &str,
) -> Result<R, String> {
    let mut client =
        tonic::client::Grpc::new(channel.clone()).max_decoding_message_size(MAX_MESSAGE);
    client
        .ready()
        .await
        .map_err(|error| chain(method.into(), &error))?;
    let path = PathAndQuery::try_from(format!("/runtime.v1.RuntimeService/{method}"))
        .map_err(|error| format!("{method}: {error}"))?;
    let codec = tonic_prost::ProstCodec::<(), R>::default();
    client
        .unary(tonic::Request::new(()), path, codec)
        .await
        .map(tonic::Response::into_inner)
        .map_err(|status| {
            let mut text = format!("{method} answered {:?}", status.code());
            let message: String = status.message().chars().take(200).collect();
            if !message.is_empty() {
                text.push_str(": ");
                text.push_str(&message);
            }
            match std::error::Error::source(&status) {
                Some(source) => chain(text, source),
                None => text,
            }
        })
}

/// `text`, then an error and its sources, which is where tonic and hyper say what went wrong
/// (what the text says already is not repeated).
fn chain(mut text: String, error: &dyn std::error::Error) -> String {
    let mut next = Some(error);
    while let Some(cause) = next {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        next = cause.source();
    }
    text
}

/// The tables of two answers.
fn listing(sandboxes: ListPodSandboxResponse, containers: ListContainersResponse) -> Listing {
    let mut out = Listing::default();
    let mut by_sandbox = HashMap::new();
    for sandbox in sandboxes.items {
        let Some(metadata) = sandbox.metadata else {
            continue;
        };
        let pod = Arc::new(Pod {
            name: metadata.name,
            namespace: metadata.namespace,
        });
        if !metadata.uid.is_empty() {
            out.pods.insert(metadata.uid, Arc::clone(&pod));
        }
        by_sandbox.insert(sandbox.id.clone(), Arc::clone(&pod));
        out.containers.insert(
            sandbox.id,
            CriContainer {
                pod: Some(pod),
                name: None,
                image: None,
            },
        );
    }
    for container in containers.containers {
        let nonempty = |text: String| (!text.is_empty()).then_some(text);
        out.containers.insert(
            container.id,
            CriContainer {
                pod: by_sandbox.get(&container.pod_sandbox_id).cloned(),
                name: container.metadata.and_then(|m| nonempty(m.name)),
                image: container.image.and_then(|i| nonempty(i.image)),
            },
        );
    }
    out
}

// The messages read, with the field numbers of `runtime.v1`'s `api.proto`.

/// `ListPodSandboxResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

/// `PodSandbox`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
}

/// `PodSandboxMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
}

/// `ListContainersResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ListContainersResponse {
    #[prost(message, repeated, tag = "1")]
    pub containers: Vec<Container>,
}

/// `Container`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Container {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "3")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "4")]
    pub image: Option<ImageSpec>,
}

/// `ContainerMetadata`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `ImageSpec`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn endpoints_are_unix_sockets() {
        assert_eq!(
            crate::config::cri_socket("unix:///run/containerd/containerd.sock").unwrap(),
            Path::new("/run/containerd/containerd.sock")
        );
        assert_eq!(
            crate::config::cri_socket("/run/crio/crio.sock").unwrap(),
            Path::new("/run/crio/crio.sock")
        );
        for bad in [
            "tcp://127.0.0.1:1234",
            "unix://relative.sock",
            "",
            "run/x.sock",
        ] {
            let error = crate::config::cri_socket(bad).unwrap_err();
            assert!(error.contains("Unix socket"), "{bad}: {error}");
        }
    }

    #[test]
    fn sandboxes_and_containers_map_to_their_pods() {
        // Encoded as a runtime sends them, with fields the agent does not read (state 3,
        // created_at 4).
        let mut item = PodSandbox {
            id: "sb1".into(),
            metadata: Some(PodSandboxMetadata {
                name: "web-0".into(),
                uid: "uid-1".into(),
                namespace: "shop".into(),
            }),
        }
        .encode_to_vec();
        item.extend_from_slice(&[0x18, 0x01, 0x20, 0x05]);
        let mut bytes = vec![0x0a];
        prost::encoding::encode_varint(item.len() as u64, &mut bytes);
        bytes.extend_from_slice(&item);
        let sandboxes = ListPodSandboxResponse::decode(bytes.as_slice()).unwrap();
        let containers = ListContainersResponse {
            containers: vec![
                Container {
                    id: "c1".into(),
                    pod_sandbox_id: "sb1".into(),
                    metadata: Some(ContainerMetadata { name: "app".into() }),
                    image: Some(ImageSpec {
                        image: "localhost/app:1".into(),
                    }),
                },
                Container {
                    id: "c2".into(),
                    pod_sandbox_id: "gone".into(),
                    metadata: None,
                    image: None,
                },
            ],
        };
        let listing = listing(sandboxes, containers);
        let pod = Arc::new(Pod {
            name: "web-0".into(),
            namespace: "shop".into(),
        });
        assert_eq!(listing.pods["uid-1"], pod);
        assert_eq!(
            listing.containers["sb1"],
            CriContainer {
                pod: Some(Arc::clone(&pod)),
                name: None,
                image: None
            }
        );
        assert_eq!(
            listing.containers["c1"],
            CriContainer {
                pod: Some(pod),
                name: Some("app".into()),
                image: Some("localhost/app:1".into())
            }
        );
        assert_eq!(listing.containers["c2"].pod, None);
        assert_eq!(listing.containers["c2"].name, None);
        assert!(ListContainersResponse::decode(&b"\xff\xff\xff"[..]).is_err());
    }
}
