//! Connections: the accept loop, the per-connection HTTP/1.1 server (hyper) and the limits that
//! keep slow, idle and non-reading clients from starving the others.
//!
//! A connection costs a descriptor and a small task, nothing else: requests are answered from
//! the latest publication without waiting on anything. So the server holds many connections
//! (see [`Limits::max_connections`]) and, when it must make room (at the cap, or when `accept`
//! fails for want of descriptors), closes the connection that has been idle longest: one that
//! has not sent a complete request head since it connected or since its last response. A flood
//! of idle or slowloris connections thus only ever displaces itself, and a client that sends its
//! request promptly is served. A head must arrive within the header-read timeout, and a response
//! write that makes no progress for the write timeout closes its connection (a client that
//! never reads).

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::time::Sleep;

use super::http::App;
use super::logging::Burst;
use super::web::Tls;

/// Limits of the HTTP server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time a client has to send a complete request head, counted from the connection's start
    /// or the end of its previous response: it also closes idle keep-alive connections.
    pub header_read_timeout: Duration,
    /// Time a response may make no write progress (a client that does not read) before its
    /// connection is closed.
    pub write_timeout: Duration,
    /// Time a response may take from its request to its last byte, progress or not: a client
    /// that reads a little every few seconds holds its connection and the publication it is
    /// sent for no longer than this.
    pub response_timeout: Duration,
    /// Connections held at once. At the cap, the one idle longest is closed for a new one; if
    /// none is idle, the new connection is closed.
    pub max_connections: usize,
    /// Time given at shutdown to requests in flight (and to the last OTLP export).
    pub shutdown_grace: Duration,
}

/// Connections held at most, whatever the open-file limit.
const MAX_CONNECTIONS: usize = 4096;
/// Connections held at least, however low the open-file limit.
const MIN_CONNECTIONS: usize = 32;
/// Largest request head: hyper's read buffer (its minimum is 8 KiB); longer heads get 431.
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The kernel send buffer of a connection (the kernel doubles it for its bookkeeping): enough
/// for a scrape over a real network, and a client that never reads pins ~0.5 MB of kernel
/// memory, not the few MB an auto-tuned buffer grows to.
const SEND_BUFFER_BYTES: usize = 256 * 1024;
/// Pause before accepting again after `accept` failed with nothing to close.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

impl Default for Limits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(60),
            max_connections: MAX_CONNECTIONS,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl Limits {
    /// The default limits, with at most half of the descriptors still free under the
    /// open-file limit given to connections (the other half stays with the collector, which
    /// opens files as processes appear), between 32 and 4096.
    pub fn for_open_file_limit() -> Self {
        let limit = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
            .map_or(1024, |(soft, _)| soft);
        let open = crate::source::procfs::open_fd_count().unwrap_or(64);
        let free = usize::try_from(limit.saturating_sub(open) / 2).unwrap_or(usize::MAX);
        Self {
            max_connections: free.clamp(MIN_CONNECTIONS, MAX_CONNECTIONS),
            ..Self::default()
        }
    }
}

/// The connections being served and how long each has been idle.
#[derive(Debug, Default)]
pub(super) struct Registry {
    state: Mutex<State>,
    /// Woken when a connection closes.
    closed: Notify,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    connections: HashMap<u64, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// Since when the connection has waited for a request head (`None` while a response is
    /// being made or sent).
    idle_since: Option<Instant>,
    /// Responses not yet handed over completely.
    busy: u32,
    /// Since when it has had a response not handed over (`None` while idle).
    busy_since: Option<Instant>,
    /// Tells the connection's task to close it.
    shed: Arc<Notify>,
    shedding: bool,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connections being served.
    pub(super) fn len(&self) -> usize {
        self.lock().connections.len()
    }

    /// Adds a new (idle) connection; the registration removes it when dropped.
    pub(super) fn register(self: &Arc<Self>) -> (Registration, Arc<Notify>) {
        let shed = Arc::new(Notify::new());
        let mut state = self.lock();
        let id = state.next;
        state.next += 1;
        state.connections.insert(
            id,
            Entry {
                idle_since: Some(Instant::now()),
                busy: 0,
                busy_since: None,
                shed: Arc::clone(&shed),
                shedding: false,
            },
        );
        (
            Registration {
                id,
                registry: Arc::clone(self),
            },
            shed,
        )
    }

    /// Tells the connection idle longest to close; false if none is idle.
    pub(super) fn shed_oldest_idle(&self) -> bool {
        let mut state = self.lock();
        let oldest = state
            .connections
            .values_mut()
            .filter(|entry| !entry.shedding && entry.busy == 0)
            .filter_map(|entry| Some((entry.idle_since?, entry)))
            .min_by_key(|(since, _)| *since);
        match oldest {
            Some((_, entry)) => {
                entry.shedding = true;
                entry.shed.notify_one();
                true
            }
            None => false,
        }
    }
}

/// A connection's place in the registry.
#[derive(Debug)]
pub(super) struct Registration {
    id: u64,
    registry: Arc<Registry>,
}

impl Registration {
    /// Marks the connection busy until the guard is dropped.
    pub(super) fn busy(&self) -> Busy {
        if let Some(entry) = self.registry.lock().connections.get_mut(&self.id) {
            entry.busy += 1;
            entry.idle_since = None;
            entry.busy_since.get_or_insert_with(Instant::now);
        }
        Busy {
            id: self.id,
            registry: Arc::clone(&self.registry),
        }
    }

    /// How long the connection has had a response not handed over (`None` while idle).
    pub(super) fn busy_for(&self) -> Option<Duration> {
        let state = self.registry.lock();
        let since = state.connections.get(&self.id)?.busy_since?;
        Some(since.elapsed())
    }

    /// Ready once a response has taken `limit` or longer (checked at least every quarter of
    /// it, so within a quarter more).
    pub(super) async fn overdue(&self, limit: Duration) {
        let step = limit / 4;
        loop {
            let wait = match self.busy_for() {
                Some(busy) if busy >= limit => return,
                Some(busy) => (limit - busy).min(step),
                None => step,
            };
            tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.lock().connections.remove(&self.id);
        self.registry.closed.notify_one();
    }
}

/// A response being made or sent: its connection is not idle.
#[derive(Debug)]
pub(super) struct Busy {
    id: u64,
    registry: Arc<Registry>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(entry) = self.registry.lock().connections.get_mut(&self.id) {
            entry.busy = entry.busy.saturating_sub(1);
            if entry.busy == 0 {
                entry.idle_since = Some(Instant::now());
                entry.busy_since = None;
            }
        }
    }
}

/// Descriptor or memory exhaustion: making room (closing an idle connection) helps.
fn out_of_resources(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Accepts and serves connections on `listener` until `stop` turns true, then stops accepting
/// and waits (at most the shutdown grace) for the connections to finish their requests.
pub(super) async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    mut stop: watch::Receiver<bool>,
) {
    let registry = Arc::new(Registry::default());
    let mut failures = Burst::new("cannot accept a connection");
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.wait_for(|stop| *stop) => break,
        };
        match accepted {
            Ok((stream, peer)) => {
                if registry.len() >= limits.max_connections && !registry.shed_oldest_idle() {
                    // Every connection is busy sending a response: this one waits its turn by
                    // reconnecting.
                    drop(stream);
                    continue;
                }
                let (registration, shed) = registry.register();
                tokio::spawn(connection(
                    stream,
                    peer.ip(),
                    Arc::clone(&app),
                    limits,
                    tls.clone(),
                    registration,
                    shed,
                    stop.clone(),
                ));
            }
            Err(error) => {
                let make_room = out_of_resources(&error);
                failures.failed(&error, make_room);
                if make_room && registry.shed_oldest_idle() {
                    // The pending connection stays in the backlog: retry once a descriptor is
                    // free again.
                    let _ = tokio::time::timeout(ACCEPT_RETRY, registry.closed.notified()).await;
                } else if make_room {
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
                // Anything else (a connection reset before it was taken) concerns one client.
            }
        }
    }
    drop(listener);
    let deadline = tokio::time::Instant::now() + limits.shutdown_grace;
    while registry.len() > 0 {
        if tokio::time::timeout_at(deadline, registry.closed.notified())
            .await
            .is_err()
        {
            tracing::warn!(
                connections = registry.len(),
                "shutdown grace over: closing connections with requests still in flight"
            );
            break;
        }
    }
}

/// Serves one connection until it ends, is shed, or the server stops (then requests in flight
/// are finished within the shutdown grace).
#[expect(
    clippy::too_many_arguments,
    reason = "one call site, each argument a different part of the server"
)]
async fn connection(
    stream: tokio::net::TcpStream,
    client: IpAddr,
    app: Arc<App>,
    limits: Limits,
    tls: Option<Arc<Tls>>,
    registration: Registration,
    shed: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    // A fixed send buffer instead of one that grows to megabytes: a client that does not read
    // pins at most this much kernel memory, and a burst of them costs little to fill.
    let _ = socket2::SockRef::from(&stream).set_send_buffer_size(SEND_BUFFER_BYTES);
    let stream = WriteTimeout::new(stream, limits.write_timeout);
    let Some(tls) = tls else {
        return http(stream, client, app, limits, registration, shed, stop).await;
    };
    // The handshake has the header-read timeout too, and a connection in it can be shed; at a
    // stop it has no request in flight to finish.
    let handshake = tokio::select! {
        handshake = tokio::time::timeout(limits.header_read_timeout, tokio_rustls::TlsAcceptor::from(tls.current()).accept(stream)) => handshake,
        () = shed.notified() => return,
        _ = stop.wait_for(|stop| *stop) => return,
    };
    match handshake {
        Ok(Ok(stream)) => http(stream, client, app, limits, registration, shed, stop).await,
        Ok(Err(error)) => tracing::debug!(%error, "TLS handshake failed"),
        Err(_) => tracing::debug!("TLS handshake timed out"),
    }
}

async fn http<S>(
    stream: S,
    client: IpAddr,
    app: Arc<App>,
    limits: Limits,
    registration: Registration,
    shed: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let registration = Arc::new(registration);
    // Requests handed to the service and not answered yet (a stop lets them finish).
    let in_service = Arc::new(AtomicUsize::new(0));
    let service = {
        let registration = Arc::clone(&registration);
        let in_service = Arc::clone(&in_service);
        service_fn(move |request| {
            let app = Arc::clone(&app);
            let registration = Arc::clone(&registration);
            let entered = InService::enter(&in_service);
            async move {
                let _entered = entered;
                // Busy from the response on, not while credentials are checked: a connection
                // waiting for its check may be closed to make room, so connections that send
                // credentials to be checked cannot hold every place.
                let mut response = app.authorized(&request, client).await;
                response.body_mut().hold(registration.busy());
                Ok::<_, Infallible>(response)
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let overdue = registration.overdue(limits.response_timeout);
    tokio::pin!(overdue);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = shed.notified() => return,
        () = &mut overdue => {
            tracing::debug!(%client, "a response outlasted the response timeout: connection closed");
            return;
        }
        _ = stop.wait_for(|stop| *stop) => {}
    }
    // Nothing asked that the stop must finish (idle, or a request head not complete: hyper
    // would wait for the rest of it): closed at once.
    if in_service.load(Ordering::Acquire) == 0 && registration.busy_for().is_none() {
        return;
    }
    connection.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(limits.shutdown_grace, connection).await;
}

/// A request in the service, counted in its connection's `in_service` until dropped (answered,
/// or cancelled with its connection).
struct InService(Arc<AtomicUsize>);

impl InService {
    fn enter(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(count))
    }
}

impl Drop for InService {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream whose writes fail with `TimedOut` after making no progress for a while.
pub(super) struct WriteTimeout<S> {
    inner: S,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    armed: bool,
}

impl<S> WriteTimeout<S> {
    pub(super) fn new(inner: S, timeout: Duration) -> Self {
        Self {
            inner,
            timeout,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            armed: false,
        }
    }

    /// After the inner stream returned `Pending`: arms the deadline on the first stall, and
    /// fails once it passed.
    fn stalled<T>(&mut self, context: &mut Context<'_>) -> Poll<io::Result<T>> {
        if !self.armed {
            self.armed = true;
            self.deadline
                .as_mut()
                .reset(tokio::time::Instant::now() + self.timeout);
        }
        match std::future::Future::poll(self.deadline.as_mut(), context) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client read nothing for the write timeout",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progressed<T>(
        &mut self,
        result: Poll<io::Result<T>>,
        context: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(result) => {
                self.armed = false;
                Poll::Ready(result)
            }
            Poll::Pending => self.stalled(context),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(context, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(context, buf);
        this.progressed(result, context)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(context, bufs);
        this.progressed(result, context)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(context);
        this.progressed(result, context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_shutdown(context);
        this.progressed(result, context)
    }
}
