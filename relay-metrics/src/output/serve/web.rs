//! `--web-config-file`: access control in the YAML format of Prometheus's exporter-toolkit (as
//! node_exporter reads it): TLS for the endpoint (rustls, ring provider), optionally requiring a
//! client certificate, and HTTP basic auth against bcrypt hashes.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # paths relative to this file
//!   key_file: server.key
//!   client_ca_file: clients.crt  # optional: clients must present a certificate it signed
//! basic_auth_users:
//!   prometheus: $2b$12$...       # bcrypt hash
//! ```
//!
//! `client_auth_type` may say `RequireAndVerifyClientCert` (the default with a `client_ca_file`),
//! `VerifyClientCertIfGiven` or `NoClientCert`. Other exporter-toolkit keys (cipher suites, TLS
//! versions, HTTP/2, extra headers) are refused at start rather than ignored.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// A web config file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("web config {path}: {reason}")]
pub struct WebConfigError {
    path: PathBuf,
    reason: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<String>,
}

/// TLS and basic auth, ready to use.
#[derive(Clone)]
pub struct WebConfig {
    /// The TLS acceptor, when `tls_server_config` is given.
    pub(super) tls: Option<tokio_rustls::TlsAcceptor>,
    /// Basic-auth users, when any are configured.
    pub(super) auth: Option<Arc<BasicAuth>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("auth", &self.auth.is_some())
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks `path`: the YAML, the certificate and key files, the client CA.
    pub fn load(path: &Path) -> Result<Self, WebConfigError> {
        let fail = |reason: String| WebConfigError {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let file: File = serde_yaml_ng::from_str(&text).map_err(|e| fail(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .map(|tls| tls_acceptor(&tls, base))
            .transpose()
            .map_err(fail)?;
        for (user, hash) in &file.basic_auth_users {
            if !hash.starts_with("$2") {
                return Err(fail(format!("basic_auth_users.{user}: not a bcrypt hash")));
            }
        }
        let auth = (!file.basic_auth_users.is_empty()).then(|| {
            Arc::new(BasicAuth {
                users: file.basic_auth_users,
                verified: Mutex::new(HashSet::new()),
                slots: tokio::sync::Semaphore::new(BCRYPT_AT_ONCE),
            })
        });
        Ok(Self { tls, auth })
    }
}

fn tls_acceptor(tls: &TlsFile, base: &Path) -> Result<tokio_rustls::TlsAcceptor, String> {
    let resolve = |file: &Path| base.join(file);
    let cert_file = resolve(&tls.cert_file);
    let certs = CertificateDer::pem_file_iter(&cert_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cert_file {}: {e}", cert_file.display()))?;
    if certs.is_empty() {
        return Err(format!("cert_file {}: no certificate", cert_file.display()));
    }
    let key_file = resolve(&tls.key_file);
    let key = PrivateKeyDer::from_pem_file(&key_file)
        .map_err(|e| format!("key_file {}: {e}", key_file.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mode = tls.client_auth_type.as_deref();
    let builder = match (&tls.client_ca_file, mode) {
        (None, None | Some("NoClientCert")) | (Some(_), Some("NoClientCert")) => {
            builder.with_no_client_auth()
        }
        (Some(ca), None | Some("RequireAndVerifyClientCert" | "VerifyClientCertIfGiven")) => {
            let ca = resolve(ca);
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(&ca)
                .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?
            {
                let cert = cert.map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider);
            let verifier = if mode == Some("VerifyClientCertIfGiven") {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            builder.with_client_cert_verifier(verifier.build().map_err(|e| e.to_string())?)
        }
        (None, Some(mode)) => {
            return Err(format!("client_auth_type {mode} needs a client_ca_file"));
        }
        (Some(_), Some(mode)) => {
            return Err(format!(
                "client_auth_type {mode}: use RequireAndVerifyClientCert, VerifyClientCertIfGiven or NoClientCert"
            ));
        }
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("cert_file and key_file: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// bcrypt checks at once: each costs tens of milliseconds of CPU on purpose, so a client
/// guessing passwords waits for a slot instead of taking the cores.
const BCRYPT_AT_ONCE: usize = 2;
/// Verified `Authorization` values remembered (then forgotten all at once).
const VERIFIED_KEPT: usize = 64;

/// Basic-auth users and their bcrypt hashes.
#[derive(Debug)]
pub(super) struct BasicAuth {
    users: HashMap<String, String>,
    /// `Authorization` values that verified: a scraper sends the same one every time, and
    /// bcrypt is slow by design.
    verified: Mutex<HashSet<String>>,
    slots: tokio::sync::Semaphore,
}

impl BasicAuth {
    /// True when `authorization` (the header's value) names a user with the right password.
    pub(super) async fn allows(self: &Arc<Self>, authorization: Option<&str>) -> bool {
        let Some(value) = authorization else {
            return false;
        };
        if self
            .verified
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(value)
        {
            return true;
        }
        let Some(encoded) = value
            .strip_prefix("Basic ")
            .or_else(|| value.strip_prefix("basic "))
        else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let Ok(decoded) = String::from_utf8(decoded) else {
            return false;
        };
        let Some((user, password)) = decoded.split_once(':') else {
            return false;
        };
        let Some(hash) = self.users.get(user).cloned() else {
            return false;
        };
        let Ok(_slot) = self.slots.acquire().await else {
            return false;
        };
        let password = password.to_string();
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(password, &hash))
            .await
            .is_ok_and(|verified| verified.unwrap_or(false));
        if ok {
            let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if verified.len() >= VERIFIED_KEPT {
                verified.clear();
            }
            verified.insert(value.to_string());
        }
        ok
    }
}
