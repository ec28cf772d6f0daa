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
//!
//! The YAML is read once. The certificate, key and client CA files it names are read again when
//! one of them changes (`output::reload`), as exporter-toolkit, which reads them at each
//! handshake, serves renewed certificates without a restart.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde::Deserialize;

use crate::config::{check_yaml_nesting, read_input_file, InputKind, MAX_NESTING};
use crate::output::lock;
use crate::output::pem::{read_certificates, read_private_key};
use crate::output::reload::Reloaded;

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

#[derive(Debug, Clone, Deserialize)]
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
    /// The endpoint's TLS, when `tls_server_config` is given.
    pub(super) tls: Option<Arc<Tls>>,
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
        let bytes = read_input_file(path, InputKind::WebConfig).map_err(fail)?;
        // Before the parser, whose time grows with the square of the nesting depth.
        check_yaml_nesting(&bytes, MAX_NESTING).map_err(fail)?;
        let file: File = serde_yaml_ng::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        let tls = file
            .tls_server_config
            .map(|tls| TlsFiles::resolve(tls, base).watch())
            .transpose()
            .map_err(fail)?;
        for (user, hash) in &file.basic_auth_users {
            if !hash.starts_with("$2") {
                return Err(fail(format!("basic_auth_users.{user}: not a bcrypt hash")));
            }
        }
        let auth = if file.basic_auth_users.is_empty() {
            None
        } else {
            Some(Arc::new(
                BasicAuth::new(file.basic_auth_users).map_err(fail)?,
            ))
        };
        Ok(Self { tls, auth })
    }
}

/// The endpoint's TLS: the server config made from the files of `tls_server_config`, made again
/// when one of them changes.
pub(super) type Tls = Reloaded<rustls::ServerConfig>;

/// `tls_server_config` with its paths resolved against the web config file's directory.
struct TlsFiles {
    settings: TlsFile,
}

impl TlsFiles {
    fn resolve(mut settings: TlsFile, base: &Path) -> Self {
        settings.cert_file = base.join(&settings.cert_file);
        settings.key_file = base.join(&settings.key_file);
        settings.client_ca_file = settings.client_ca_file.map(|ca| base.join(ca));
        Self { settings }
    }

    /// The config made from the files now, and made again whenever they change.
    fn watch(self) -> Result<Arc<Tls>, String> {
        let tls = &self.settings;
        let mut files = vec![
            (tls.cert_file.clone(), InputKind::Certificates),
            (tls.key_file.clone(), InputKind::PrivateKey),
        ];
        files.extend(
            tls.client_ca_file
                .clone()
                .map(|ca| (ca, InputKind::Certificates)),
        );
        Reloaded::watch("the endpoint's TLS files", files, move || {
            self.server_config()
        })
    }

    fn server_config(&self) -> Result<rustls::ServerConfig, String> {
        let tls = &self.settings;
        let certs = read_certificates(&tls.cert_file).map_err(|e| format!("cert_file {e}"))?;
        let key = read_private_key(&tls.key_file).map_err(|e| format!("key_file {e}"))?;
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
                let mut roots = rustls::RootCertStore::empty();
                for cert in read_certificates(ca).map_err(|e| format!("client_ca_file {e}"))? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("client_ca_file {}: {e}", ca.display()))?;
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    roots.into(),
                    provider,
                );
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
        Ok(config)
    }
}

/// How long a wrong (user, password) pair is remembered: repeating it within this time is
/// answered without a bcrypt run.
const FAILED_FOR: Duration = Duration::from_secs(300);
/// Wrong (user, password) pairs remembered at most (the oldest goes first).
const FAILED_KEPT: usize = 1024;
/// Verified (user, password) pairs remembered (then forgotten all at once).
const VERIFIED_KEPT: usize = 64;

/// A keyed hash (HMAC-SHA256 under a key drawn at start) of a user and password: what the
/// caches keep instead of the password.
type Tag = [u8; 32];

/// Basic-auth users and their bcrypt hashes, with the machinery that keeps a flood of wrong
/// passwords from starving a legitimate client:
///
/// - bcrypt runs on the blocking pool, at most [`BasicAuth::pool_size`] at once (one per core,
///   at least 2), so verifications proceed in parallel and the async server never blocks;
/// - each client address has at most one verification pending: its other requests queue behind
///   it, so one address flooding wrong passwords holds one slot of the pool and another
///   address's first login waits for at most one verification;
/// - a verified pair and a recently failed pair are answered from a cache of keyed hashes,
///   without bcrypt;
/// - an unknown user is checked against a dummy hash of the users' highest cost, so the answer
///   takes as long as for a known user with a wrong password.
pub(super) struct BasicAuth {
    users: HashMap<String, String>,
    /// A bcrypt hash of a random password at the users' highest cost.
    dummy: String,
    key: ring::hmac::Key,
    verified: Mutex<HashSet<Tag>>,
    failed: Mutex<HashMap<Tag, Instant>>,
    /// One queue per client address with a verification pending.
    clients: Mutex<HashMap<IpAddr, Arc<tokio::sync::Mutex<()>>>>,
    /// Permits of the bcrypt pool: each is held by the blocking task that runs the check, so
    /// a request cancelled meanwhile (its client gone) does not free its place early.
    slots: Arc<tokio::sync::Semaphore>,
    pool_size: usize,
}

impl std::fmt::Debug for BasicAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BasicAuth")
            .field("users", &self.users.len())
            .field("pool_size", &self.pool_size)
            .finish_non_exhaustive()
    }
}

/// The cost of a bcrypt hash (`$2b$12$…` → 12).
fn bcrypt_cost(hash: &str) -> Option<u32> {
    hash.split('$').nth(2)?.parse().ok()
}

/// What a verification concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Allowed,
    Denied,
}

impl BasicAuth {
    /// The users of a web config (their hashes already start with `$2`): makes the dummy hash
    /// (one bcrypt run at the highest cost) and the cache key.
    fn new(users: HashMap<String, String>) -> Result<Self, String> {
        let cost = users
            .iter()
            .map(|(user, hash)| {
                bcrypt_cost(hash).ok_or_else(|| format!("basic_auth_users.{user}: no bcrypt cost"))
            })
            // 4 is bcrypt's lowest cost.
            .try_fold(4, |highest, cost| cost.map(|cost| highest.max(cost)))?;
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| "no random key for the credential cache".to_string())?;
        let mut password = [0u8; 16];
        ring::rand::SecureRandom::fill(&rng, &mut password)
            .map_err(|_| "no random dummy password".to_string())?;
        let dummy = bcrypt::hash(password, cost).map_err(|e| format!("dummy bcrypt hash: {e}"))?;
        let pool_size = std::thread::available_parallelism()
            .map_or(2, std::num::NonZeroUsize::get)
            .clamp(2, 16);
        Ok(Self {
            users,
            dummy,
            key,
            verified: Mutex::new(HashSet::new()),
            failed: Mutex::new(HashMap::new()),
            clients: Mutex::new(HashMap::new()),
            slots: Arc::new(tokio::sync::Semaphore::new(pool_size)),
            pool_size,
        })
    }

    /// How many bcrypt verifications run at once.
    pub(super) fn pool_size(&self) -> usize {
        self.pool_size
    }

    fn tag(&self, user: &str, password: &str) -> Tag {
        let mut context = ring::hmac::Context::with_key(&self.key);
        context.update(&(user.len() as u64).to_le_bytes());
        context.update(user.as_bytes());
        context.update(password.as_bytes());
        let mut tag = [0u8; 32];
        tag.copy_from_slice(context.sign().as_ref());
        tag
    }

    /// The cached verdict of `tag`, if any (an expired failure is forgotten).
    fn cached(&self, tag: &Tag) -> Option<Verdict> {
        if lock(&self.verified).contains(tag) {
            return Some(Verdict::Allowed);
        }
        let mut failed = lock(&self.failed);
        match failed.get(tag) {
            Some(until) if *until > Instant::now() => Some(Verdict::Denied),
            Some(_) => {
                failed.remove(tag);
                None
            }
            None => None,
        }
    }

    fn remember(&self, tag: Tag, verdict: Verdict) {
        match verdict {
            Verdict::Allowed => {
                let mut verified = lock(&self.verified);
                if verified.len() >= VERIFIED_KEPT {
                    verified.clear();
                }
                verified.insert(tag);
            }
            Verdict::Denied => {
                let now = Instant::now();
                let mut failed = lock(&self.failed);
                if failed.len() >= FAILED_KEPT {
                    failed.retain(|_, until| *until > now);
                }
                if failed.len() >= FAILED_KEPT {
                    let oldest = failed
                        .iter()
                        .min_by_key(|(_, until)| **until)
                        .map(|(t, _)| *t);
                    if let Some(oldest) = oldest {
                        failed.remove(&oldest);
                    }
                }
                failed.insert(tag, now + FAILED_FOR);
            }
        }
    }

    /// True when `authorization` (the header's value) names a user with the right password.
    /// `client` is the request's source address (its queue).
    pub(super) async fn allows(
        self: &Arc<Self>,
        authorization: Option<&str>,
        client: IpAddr,
    ) -> bool {
        let Some((user, password)) = authorization.and_then(credentials) else {
            return false;
        };
        let tag = self.tag(&user, &password);
        if let Some(verdict) = self.cached(&tag) {
            return verdict == Verdict::Allowed;
        }
        // One verification at a time per client address.
        let queue = ClientQueue::join(self, client);
        let turn = queue.turn().await;
        // A request of the same client may have settled it meanwhile.
        let verdict = match self.cached(&tag) {
            Some(verdict) => verdict,
            None => self.verify(user, password, tag, (client, turn)).await,
        };
        verdict == Verdict::Allowed
    }

    /// One bcrypt run on the pool (against the dummy hash for an unknown user). The run holds
    /// its pool permit and its client's `turn`, and remembers its verdict itself: a request
    /// cancelled while it runs frees neither for another run (so one address runs one at a
    /// time, hanging up or not), nor loses the verdict.
    async fn verify(
        self: &Arc<Self>,
        user: String,
        password: String,
        tag: Tag,
        (client, turn): (IpAddr, tokio::sync::OwnedMutexGuard<()>),
    ) -> Verdict {
        let Ok(slot) = Arc::clone(&self.slots).acquire_owned().await else {
            return Verdict::Denied;
        };
        let auth = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            let verified = match auth.users.get(&user) {
                Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
                None => {
                    // Same cost, result ignored: an unknown user is never let in.
                    let _ = bcrypt::verify(password, &auth.dummy);
                    false
                }
            };
            let verdict = if verified {
                Verdict::Allowed
            } else {
                Verdict::Denied
            };
            auth.remember(tag, verdict);
            drop((slot, turn));
            // The client's queue goes with its last holder: this run, if its request is gone.
            let mut clients = lock(&auth.clients);
            if clients
                .get(&client)
                .is_some_and(|turn| Arc::strong_count(turn) == 1)
            {
                clients.remove(&client);
            }
            verdict
        })
        .await
        .unwrap_or(Verdict::Denied)
    }
}

/// A request's place in its client address's verification queue; the queue is removed with
/// the last request that holds it, whether it finished or was cancelled.
struct ClientQueue<'a> {
    auth: &'a BasicAuth,
    client: IpAddr,
    /// Taken out in `drop`, before the queue's holders are counted.
    turn: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl<'a> ClientQueue<'a> {
    fn join(auth: &'a BasicAuth, client: IpAddr) -> Self {
        let turn = Arc::clone(lock(&auth.clients).entry(client).or_default());
        Self {
            auth,
            client,
            turn: Some(turn),
        }
    }

    /// Waits for this address's turn.
    async fn turn(&self) -> tokio::sync::OwnedMutexGuard<()> {
        let turn = self
            .turn
            .as_ref()
            .unwrap_or_else(|| unreachable!("taken in drop only"));
        Arc::clone(turn).lock_owned().await
    }
}

impl Drop for ClientQueue<'_> {
    fn drop(&mut self) {
        // This request's clone goes first, so that of requests dropped at once on several
        // threads the last one sees the map's clone alone. A queue only the map holds has no
        // request, and clones are made under the map's lock: removing it is always right.
        drop(self.turn.take());
        let mut clients = lock(&self.auth.clients);
        if clients
            .get(&self.client)
            .is_some_and(|turn| Arc::strong_count(turn) == 1)
        {
            clients.remove(&self.client);
        }
    }
}

/// The user and password of a `Basic` authorization value.
fn credentials(value: &str) -> Option<(String, String)> {
    // The scheme is case-insensitive (RFC 9110 §11.1).
    let (scheme, encoded) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let decoded = String::from_utf8(decoded).ok()?;
    let (user, password) = decoded.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_basic_scheme_is_read_in_any_case() {
        let user_password = Some(("u".to_owned(), "p:q".to_owned()));
        for scheme in ["Basic", "basic", "BASIC", "bAsIc"] {
            assert_eq!(
                super::credentials(&format!("{scheme} dTpwOnE=")),
                user_password
            );
        }
        assert_eq!(super::credentials("Bearer dTpwOnE="), None);
        assert_eq!(super::credentials("BasicdTpwOnE="), None);
    }

    /// Two requests of one address that drop their place in its queue at once, on two threads,
    /// leave no queue behind. (The race the drop order closes, both counting before either
    /// clone is gone, lies between a count and a clone's drop: too narrow for this loop to hit
    /// with the old order; it holds the count the removal needs.)
    #[test]
    fn two_requests_dropping_at_once_leave_no_queue() {
        let hash = bcrypt::hash("right", 4).unwrap();
        let users = std::collections::HashMap::from([("u".to_owned(), hash)]);
        let auth = super::BasicAuth::new(users).unwrap();
        let client = std::net::IpAddr::from([10, 0, 0, 1]);
        let barrier = std::sync::Barrier::new(2);
        for _ in 0..5000 {
            let first = super::ClientQueue::join(&auth, client);
            let second = super::ClientQueue::join(&auth, client);
            std::thread::scope(|scope| {
                for queue in [first, second] {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        drop(queue);
                    });
                }
            });
            assert_eq!(super::lock(&auth.clients).len(), 0);
        }
    }
}
