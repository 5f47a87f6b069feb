//! The upstream connection pool: per endpoint and per [`Class`], HTTP/2 connections that
//! each carry at most as many streams as the apiserver allows (its
//! `SETTINGS_MAX_CONCURRENT_STREAMS`, read from hyper's connection), HTTP/1.1 connections
//! that carry one request at a time, and a shared bound on how many are open
//! ([`Limits`]). A request takes a stream on a connection with room, or opens another
//! connection, or, at the bound, is refused at once with [`UpstreamError::TooManyRequests`]:
//! nothing ever queues behind a stream that does not end (docs/proxy.md).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::uri::PathAndQuery;
use http::{header, HeaderValue, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use pin_project_lite::pin_project;

use super::class::Class;
use super::conn::{Alpn, Connector, Full, Limits, Slot, Socket};
use super::error::{error_chain, UpstreamError};
use crate::body::Body;
use crate::metrics as m;

/// Idle connections are closed after this long (hyper-util's pool default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Streams on one HTTP/2 connection, at most, whatever the apiserver allows: one that
/// sends no limit would otherwise get every watch on one TCP connection.
const MAX_STREAMS_PER_CONNECTION: usize = 1000;
/// Before the apiserver's SETTINGS arrive, a new connection is assumed to allow this many
/// streams: kube-apiserver's default `--http2-max-streams-per-connection` (hyper's own
/// default too).
const INITIAL_MAX_STREAMS: usize = 100;
/// Attempts on pooled connections that turn out closed before the request was sent.
const SEND_ATTEMPTS: usize = 3;

/// The protocol an endpoint speaks, once known.
const PROTO_UNKNOWN: u8 = 0;
const PROTO_HTTP1: u8 = 1;
const PROTO_HTTP2: u8 = 2;

/// The connections of one endpoint.
pub struct EndpointPool {
    /// Scheme, authority and any path prefix of the endpoint's URL.
    base: Uri,
    /// `host:port`, for metrics and logs.
    label: String,
    h2: [Mutex<Vec<Arc<H2Conn>>>; 2],
    h1_idle: [Mutex<Vec<IdleH1>>; 2],
    protocol: AtomicU8,
    /// One HTTP/2 connection is opened at a time per class: requests that find no room
    /// while one is being opened wait for it instead of each opening its own.
    opener: [tokio::sync::Mutex<()>; 2],
    /// The last failed connect, so that requests that waited for it fail fast too.
    last_failure: Mutex<Option<(Instant, UpstreamError)>>,
    /// `watchgate_upstream_streams` for each class, looked up once (on first use, after
    /// the gateway has installed its recorder) rather than on every request.
    streams: std::sync::OnceLock<[metrics::Gauge; 2]>,
}

impl EndpointPool {
    pub fn new(base: Uri) -> Self {
        let label = base
            .authority()
            .map_or_else(|| base.to_string(), |a| a.to_string());
        // No TLS, no ALPN: plain http:// upstreams speak HTTP/1.1 (h2c is not offered).
        let protocol = if base.scheme_str() == Some("https") {
            PROTO_UNKNOWN
        } else {
            PROTO_HTTP1
        };
        Self {
            base,
            label,
            h2: Default::default(),
            h1_idle: Default::default(),
            protocol: AtomicU8::new(protocol),
            opener: Default::default(),
            last_failure: Mutex::new(None),
            streams: std::sync::OnceLock::new(),
        }
    }

    fn streams_gauge(&self, class: Class) -> metrics::Gauge {
        self.streams.get_or_init(|| {
            Class::ALL.map(|c| {
                metrics::gauge!(m::UPSTREAM_STREAMS, "class" => c.as_str(), "endpoint" => self.label.clone())
            })
        })[class.index()]
        .clone()
    }

    pub fn base(&self) -> &Uri {
        &self.base
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// The request's path and query under the endpoint's URL: absolute for HTTP/2 (its
    /// `:scheme` and `:authority`), origin-form for HTTP/1.1. Any path prefix of the
    /// endpoint's URL is kept, as kube's `BaseUriLayer` does.
    fn target(&self, pq: &PathAndQuery, absolute: bool) -> Uri {
        let base_path = self.base.path().trim_end_matches('/');
        let path = format!("{base_path}{pq}");
        if !absolute {
            return path.parse().unwrap_or_else(|_| Uri::from_static("/"));
        }
        let mut b = Uri::builder();
        if let Some(s) = self.base.scheme() {
            b = b.scheme(s.clone());
        }
        if let Some(a) = self.base.authority() {
            b = b.authority(a.clone());
        }
        b.path_and_query(path)
            .build()
            .unwrap_or_else(|_| Uri::from_static("/"))
    }

    /// A stream on an open connection with room, if there is one.
    fn acquire(self: &Arc<Self>, class: Class) -> Option<Lease> {
        if self.protocol.load(Ordering::Acquire) != PROTO_HTTP1 {
            let mut conns = self.h2[class.index()].lock().expect("pool lock");
            conns.retain(|c| !c.closed.load(Ordering::Acquire));
            if let Some(conn) = conns.iter().find(|c| c.has_room()) {
                return Some(Lease::h2(conn.clone(), class, self.streams_gauge(class)));
            }
        }
        let mut idle = self.h1_idle[class.index()].lock().expect("pool lock");
        while let Some(c) = idle.pop() {
            if c.conn.usable() && c.since.elapsed() < IDLE_TIMEOUT {
                return Some(Lease::h1(
                    c.conn,
                    class,
                    self.streams_gauge(class),
                    Arc::downgrade(self),
                ));
            }
            c.conn.slot.release();
        }
        None
    }

    /// Closes one idle connection (of `class`, or of any class), giving its place back.
    fn evict_idle(&self, class: Option<Class>) -> bool {
        for c in Class::ALL {
            if class.is_some_and(|want| want != c) {
                continue;
            }
            if let Some(idle) = self.h1_idle[c.index()].lock().expect("pool lock").pop() {
                idle.conn.slot.release();
                return true;
            }
            let mut conns = self.h2[c.index()].lock().expect("pool lock");
            if let Some(i) = conns
                .iter()
                .position(|conn| conn.in_flight.load(Ordering::Acquire) == 0)
            {
                let conn = conns.swap_remove(i);
                conn.slot.release();
                return true;
            }
        }
        false
    }

    /// Drops closed connections and those idle for longer than [`IDLE_TIMEOUT`].
    pub fn sweep(&self) {
        for c in Class::ALL {
            self.h2[c.index()]
                .lock()
                .expect("pool lock")
                .retain(|conn| {
                    let keep = !conn.closed.load(Ordering::Acquire) && !conn.idle_for(IDLE_TIMEOUT);
                    if !keep {
                        conn.slot.release();
                    }
                    keep
                });
            self.h1_idle[c.index()]
                .lock()
                .expect("pool lock")
                .retain(|idle| {
                    let keep = idle.conn.usable() && idle.since.elapsed() < IDLE_TIMEOUT;
                    if !keep {
                        idle.conn.slot.release();
                    }
                    keep
                });
        }
    }

    /// Forgets every pooled connection (the endpoint was found dead): in-flight requests
    /// keep theirs until they end.
    pub fn clear(&self) {
        for c in Class::ALL {
            for conn in self.h2[c.index()].lock().expect("pool lock").drain(..) {
                if conn.in_flight.load(Ordering::Acquire) == 0 {
                    conn.slot.release();
                }
            }
            for idle in self.h1_idle[c.index()].lock().expect("pool lock").drain(..) {
                idle.conn.slot.release();
            }
        }
    }

    fn record_failure(&self, err: &UpstreamError) {
        *self.last_failure.lock().expect("pool lock") = Some((Instant::now(), err.clone()));
    }

    fn failed_since(&self, t: Instant) -> Option<UpstreamError> {
        match &*self.last_failure.lock().expect("pool lock") {
            Some((at, err)) if *at >= t => Some(err.clone()),
            _ => None,
        }
    }
}

/// One HTTP/2 connection.
struct H2Conn {
    sender: http2::SendRequest<Body>,
    in_flight: AtomicUsize,
    /// The apiserver's current SETTINGS_MAX_CONCURRENT_STREAMS, capped.
    max_streams: Arc<AtomicUsize>,
    closed: Arc<AtomicBool>,
    /// When the last stream ended (None while streams are open, or never used).
    idle_since: Mutex<Option<Instant>>,
    slot: Slot,
}

impl H2Conn {
    fn has_room(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) < self.max_streams.load(Ordering::Acquire)
    }

    fn idle_for(&self, d: Duration) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
            && self
                .idle_since
                .lock()
                .expect("pool lock")
                .is_some_and(|t| t.elapsed() >= d)
    }
}

/// One HTTP/1.1 connection, between requests or carrying one.
struct H1Conn {
    sender: http1::SendRequest<Body>,
    closed: Arc<AtomicBool>,
    slot: Slot,
}

impl H1Conn {
    /// Not known to be closed. (Right after a response, hyper's connection task may not
    /// have taken in its end yet: [`Lease::send`] waits for it to be ready.)
    fn usable(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && !self.sender.is_closed()
    }
}

/// How long a pooled HTTP/1.1 connection may take to be ready for its next request once
/// its previous answer was read to the end (microseconds, normally).
const H1_READY_TIMEOUT: Duration = Duration::from_secs(1);

struct IdleH1 {
    conn: H1Conn,
    since: Instant,
}

/// A request's hold on a stream (HTTP/2) or a connection (HTTP/1.1), until its response
/// body ends or is dropped.
pub struct Lease {
    kind: LeaseKind,
    class: Class,
    /// `watchgate_upstream_streams` of the class and endpoint.
    streams: metrics::Gauge,
}

enum LeaseKind {
    H2(Arc<H2Conn>),
    H1 {
        conn: Option<H1Conn>,
        /// Back to the idle list when the response is complete; `None` for upgrades.
        pool: Option<Weak<EndpointPool>>,
        complete: bool,
    },
}

impl Lease {
    fn h2(conn: Arc<H2Conn>, class: Class, streams: metrics::Gauge) -> Self {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        *conn.idle_since.lock().expect("pool lock") = None;
        Self::counted(LeaseKind::H2(conn), class, streams)
    }

    fn h1(conn: H1Conn, class: Class, streams: metrics::Gauge, pool: Weak<EndpointPool>) -> Self {
        Self::counted(
            LeaseKind::H1 {
                conn: Some(conn),
                pool: Some(pool),
                complete: false,
            },
            class,
            streams,
        )
    }

    fn counted(kind: LeaseKind, class: Class, streams: metrics::Gauge) -> Self {
        streams.increment(1.0);
        Self {
            kind,
            class,
            streams,
        }
    }

    fn is_h2(&self) -> bool {
        matches!(self.kind, LeaseKind::H2(_))
    }

    /// The response was read to its end: an HTTP/1.1 connection may serve the next one.
    fn complete(&mut self) {
        if let LeaseKind::H1 { complete, .. } = &mut self.kind {
            *complete = true;
        }
    }

    /// Sends `req` on the leased stream or connection. `Err(Ok(req))`: the connection
    /// was gone before the request left, so another may take it.
    async fn send(
        &mut self,
        req: Request<Body>,
    ) -> Result<Response<Incoming>, Result<Request<Body>, UpstreamError>> {
        let result = match &mut self.kind {
            LeaseKind::H2(conn) => {
                let mut sender = conn.sender.clone();
                let r = sender.try_send_request(req).await;
                if r.is_err() {
                    conn.closed.store(true, Ordering::Release);
                }
                r
            }
            LeaseKind::H1 { conn, .. } => {
                let c = conn.as_mut().expect("a leased connection");
                let ready = tokio::time::timeout(H1_READY_TIMEOUT, c.sender.ready()).await;
                if !matches!(ready, Ok(Ok(()))) {
                    c.closed.store(true, Ordering::Release);
                    return Err(Ok(req));
                }
                let r = c.sender.try_send_request(req).await;
                if r.is_err() {
                    c.closed.store(true, Ordering::Release);
                }
                r
            }
        };
        result.map_err(|mut e| match e.take_message() {
            Some(req) => Ok(req),
            None => Err(UpstreamError::Broken(error_chain(&e.into_error()))),
        })
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.streams.decrement(1.0);
        match &mut self.kind {
            LeaseKind::H2(conn) => {
                if conn.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
                    *conn.idle_since.lock().expect("pool lock") = Some(Instant::now());
                }
            }
            LeaseKind::H1 {
                conn,
                pool,
                complete,
            } => {
                let (Some(conn), Some(pool), true) = (conn.take(), pool.take(), *complete) else {
                    // Dropped before its end: hyper closes the connection.
                    return;
                };
                if let Some(pool) = pool.upgrade() {
                    pool.h1_idle[self.class.index()]
                        .lock()
                        .expect("pool lock")
                        .push(IdleH1 {
                            conn,
                            since: Instant::now(),
                        });
                }
            }
        }
    }
}

pin_project! {
    /// An upstream response body: hyper's, plus the request's [`Lease`], given back when
    /// the body ends or is dropped.
    pub struct UpstreamBody {
        #[pin]
        inner: Incoming,
        lease: Option<Lease>,
    }
}

impl UpstreamBody {
    fn new(inner: Incoming, mut lease: Lease) -> Self {
        use http_body::Body as _;
        if inner.is_end_stream() {
            lease.complete();
            return Self { inner, lease: None };
        }
        Self {
            inner,
            lease: Some(lease),
        }
    }
}

impl http_body::Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        let r = this.inner.as_mut().poll_frame(cx);
        match &r {
            // The end, or the last frame of a body whose length was known: hyper's server
            // stops polling a body that says it has ended, so this may be the last poll.
            Poll::Ready(None) => {
                if let Some(mut lease) = this.lease.take() {
                    lease.complete();
                }
            }
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => {
                if let Some(mut lease) = this.lease.take() {
                    lease.complete();
                }
            }
            Poll::Ready(Some(Err(_))) => {
                this.lease.take();
            }
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Why a request was not answered by an endpoint.
pub enum SendError {
    /// No connection could be made: the request was not sent and comes back, so that
    /// another endpoint may take it.
    /// (Boxed: a request head is large, and this is the rare path.)
    Connect(UpstreamError, Box<Request<Body>>),
    /// Anything else, including a refusal at the bound.
    Failed(UpstreamError),
}

/// Every endpoint's connections and the bound they share.
pub struct Pool {
    connector: Connector,
    limits: Arc<Limits>,
    endpoints: Vec<Arc<EndpointPool>>,
    h2: http2::Builder<TokioExecutor>,
}

impl Pool {
    pub fn new(
        connector: Connector,
        limits: Arc<Limits>,
        endpoints: Vec<Arc<EndpointPool>>,
    ) -> Self {
        let mut h2 = http2::Builder::new(TokioExecutor::new());
        h2.timer(TokioTimer::new())
            .initial_max_send_streams(INITIAL_MAX_STREAMS)
            // Keep-alive pings detect a silently dead apiserver under long watches, and
            // keep an idle pooled connection known to be alive.
            .keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20))
            .keep_alive_while_idle(true)
            .adaptive_window(true);
        Self {
            connector,
            limits,
            endpoints,
            h2,
        }
    }

    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }

    /// Sends `req` to endpoint `ep`.
    pub async fn send(
        &self,
        ep: &Arc<EndpointPool>,
        class: Class,
        internal: bool,
        req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let mut req = req;
        for _ in 0..SEND_ATTEMPTS {
            let mut lease = match ep.acquire(class) {
                Some(l) => l,
                None => match self.open(ep, class, internal).await {
                    Ok(l) => l,
                    Err(e @ UpstreamError::Connect(_)) => {
                        return Err(SendError::Connect(e, Box::new(req)))
                    }
                    Err(e) => return Err(SendError::Failed(e)),
                },
            };
            let prepared = prepare(ep, req, lease.is_h2());
            match lease.send(prepared).await {
                Ok(resp) => {
                    let (parts, body) = resp.into_parts();
                    return Ok(Response::from_parts(parts, UpstreamBody::new(body, lease)));
                }
                Err(Ok(back)) => req = back,
                Err(Err(e)) => return Err(SendError::Failed(e)),
            }
        }
        Err(SendError::Connect(
            UpstreamError::Broken("pooled connections kept closing before the request left".into()),
            Box::new(req),
        ))
    }

    /// Sends a request that switches protocols over a fresh HTTP/1.1 connection of its
    /// own: after a `101` the socket (and its place in the bound) becomes the tunnel.
    pub async fn send_upgrade(
        &self,
        ep: &Arc<EndpointPool>,
        internal: bool,
        req: Request<Body>,
    ) -> Result<Response<UpstreamBody>, SendError> {
        let class = Class::LongRunning;
        let slot = match self.reserve(class, internal, ep) {
            Ok(s) => s,
            Err(e) => return Err(SendError::Failed(e)),
        };
        let (sock, _) = match self
            .connector
            .connect(&ep.base, Alpn::Http1, slot.clone())
            .await
        {
            Ok(s) => s,
            Err(e) => return Err(SendError::Connect(e, Box::new(req))),
        };
        let conn = match handshake_h1(sock, slot, true).await {
            Ok(c) => c,
            Err(e) => return Err(SendError::Connect(e, Box::new(req))),
        };
        let mut lease = Lease::counted(
            LeaseKind::H1 {
                conn: Some(conn),
                pool: None,
                complete: false,
            },
            class,
            ep.streams_gauge(class),
        );
        let prepared = prepare(ep, req, false);
        match lease.send(prepared).await {
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                Ok(Response::from_parts(parts, UpstreamBody::new(body, lease)))
            }
            Err(Ok(back)) => Err(SendError::Connect(
                UpstreamError::Broken("the connection closed before the request left".into()),
                Box::new(back),
            )),
            Err(Err(e)) => Err(SendError::Failed(e)),
        }
    }

    /// A lease on a new connection to `ep`.
    async fn open(
        &self,
        ep: &Arc<EndpointPool>,
        class: Class,
        internal: bool,
    ) -> Result<Lease, UpstreamError> {
        let started = Instant::now();
        let _opening = if ep.protocol.load(Ordering::Acquire) != PROTO_HTTP1 {
            let guard = ep.opener[class.index()].lock().await;
            // Whoever held the lock may have opened a connection with room for us, or
            // found the endpoint unreachable: no need to try again at once.
            if let Some(lease) = ep.acquire(class) {
                return Ok(lease);
            }
            if let Some(err) = ep.failed_since(started) {
                return Err(err);
            }
            Some(guard)
        } else {
            None
        };
        let slot = self.reserve(class, internal, ep)?;
        let (sock, h2) = match self
            .connector
            .connect(&ep.base, Alpn::Any, slot.clone())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                ep.record_failure(&e);
                return Err(e);
            }
        };
        let result = if h2 {
            ep.protocol.store(PROTO_HTTP2, Ordering::Release);
            self.handshake_h2(sock, slot).await.map(|conn| {
                let conn = Arc::new(conn);
                let mut conns = ep.h2[class.index()].lock().expect("pool lock");
                conns.push(conn.clone());
                // Leased under the lock, like `acquire`, so the count never overshoots.
                Lease::h2(conn, class, ep.streams_gauge(class))
            })
        } else {
            ep.protocol.store(PROTO_HTTP1, Ordering::Release);
            handshake_h1(sock, slot, false)
                .await
                .map(|conn| Lease::h1(conn, class, ep.streams_gauge(class), Arc::downgrade(ep)))
        };
        if let Err(e) = &result {
            ep.record_failure(e);
        }
        result
    }

    /// A place for a new connection, making room by closing an idle one if need be.
    fn reserve(
        &self,
        class: Class,
        internal: bool,
        ep: &EndpointPool,
    ) -> Result<Slot, UpstreamError> {
        loop {
            let full = match self.limits.reserve(class, internal, &ep.label) {
                Ok(slot) => return Ok(slot),
                Err(full) => full,
            };
            let evicted = match full {
                Full::Total => self.endpoints.iter().any(|e| e.evict_idle(None)),
                Full::LongRunning => self
                    .endpoints
                    .iter()
                    .any(|e| e.evict_idle(Some(Class::LongRunning))),
            };
            if !evicted {
                metrics::counter!(m::UPSTREAM_REFUSALS_TOTAL, "class" => class.as_str())
                    .increment(1);
                return Err(UpstreamError::TooManyRequests(class));
            }
        }
    }

    async fn handshake_h2(&self, sock: Socket, slot: Slot) -> Result<H2Conn, UpstreamError> {
        let (sender, conn) = self
            .h2
            .handshake(sock)
            .await
            .map_err(|e| UpstreamError::Connect(error_chain(&e)))?;
        let max_streams = Arc::new(AtomicUsize::new(INITIAL_MAX_STREAMS));
        let closed = Arc::new(AtomicBool::new(false));
        let (max, done) = (max_streams.clone(), closed.clone());
        tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            // The apiserver's stream limit, as hyper's connection last saw it: read after
            // every poll of the connection, which runs whenever a request is sent on it.
            let res = poll_fn(|cx| {
                let r = conn.as_mut().poll(cx);
                max.store(
                    conn.current_max_send_streams()
                        .min(MAX_STREAMS_PER_CONNECTION),
                    Ordering::Release,
                );
                r
            })
            .await;
            done.store(true, Ordering::Release);
            if let Err(e) = res {
                tracing::debug!(error = %e, "upstream HTTP/2 connection ended with an error");
            }
        });
        Ok(H2Conn {
            sender,
            in_flight: AtomicUsize::new(0),
            max_streams,
            closed,
            idle_since: Mutex::new(None),
            slot,
        })
    }
}

async fn handshake_h1(sock: Socket, slot: Slot, upgrades: bool) -> Result<H1Conn, UpstreamError> {
    let (sender, conn) = http1::Builder::new()
        .handshake(sock)
        .await
        .map_err(|e| UpstreamError::Connect(error_chain(&e)))?;
    let closed = Arc::new(AtomicBool::new(false));
    let done = closed.clone();
    tokio::spawn(async move {
        let res = if upgrades {
            conn.with_upgrades().await
        } else {
            conn.await
        };
        done.store(true, Ordering::Release);
        if let Err(e) = res {
            tracing::debug!(error = %e, "upstream HTTP/1.1 connection ended with an error");
        }
    });
    Ok(H1Conn {
        sender,
        closed,
        slot,
    })
}

/// A request's own path and query, before any endpoint's URL was put around it.
#[derive(Clone)]
struct Target(PathAndQuery);

/// The request as the chosen connection needs it: the endpoint's URL, the version, and a
/// `Host` for HTTP/1.1 (HTTP/2 takes its `:authority` from the URI).
fn prepare(ep: &EndpointPool, req: Request<Body>, h2: bool) -> Request<Body> {
    let (mut parts, body) = req.into_parts();
    // The caller's path and query, kept aside the first time: a request that comes back
    // unsent already carries one endpoint's URL, prefix included.
    let pq = match parts.extensions.get::<Target>() {
        Some(Target(pq)) => pq.clone(),
        None => {
            let pq = parts
                .uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
            parts.extensions.insert(Target(pq.clone()));
            pq
        }
    };
    parts.uri = ep.target(&pq, h2);
    if h2 {
        parts.version = Version::HTTP_2;
        parts.headers.remove(header::HOST);
    } else {
        parts.version = Version::HTTP_11;
        if let Some(a) = ep.base.authority() {
            if let Ok(v) = HeaderValue::from_str(a.as_str()) {
                parts.headers.insert(header::HOST, v);
            }
        }
    }
    Request::from_parts(parts, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_keep_the_endpoints_path_prefix() {
        let ep = EndpointPool::new("https://10.0.0.1:6443/prefix/".parse().unwrap());
        let pq = PathAndQuery::from_static("/api/v1/pods?watch=1");
        assert_eq!(
            ep.target(&pq, true),
            "https://10.0.0.1:6443/prefix/api/v1/pods?watch=1"
        );
        assert_eq!(ep.target(&pq, false), "/prefix/api/v1/pods?watch=1");
        let plain = EndpointPool::new("http://127.0.0.1:8080".parse().unwrap());
        assert_eq!(plain.target(&pq, false), "/api/v1/pods?watch=1");
        assert_eq!(plain.protocol.load(Ordering::Relaxed), PROTO_HTTP1);
        assert_eq!(plain.label(), "127.0.0.1:8080");
    }

    #[test]
    fn a_request_that_comes_back_unsent_is_prepared_from_its_own_path_again() {
        let a = EndpointPool::new("https://a:6443/a-prefix".parse().unwrap());
        let b = EndpointPool::new("http://b:8080/b-prefix".parse().unwrap());
        let req = Request::get("/api/v1/pods?limit=1")
            .body(crate::body::empty())
            .unwrap();
        let on_a = prepare(&a, req, true);
        assert_eq!(on_a.uri(), "https://a:6443/a-prefix/api/v1/pods?limit=1");
        let on_b = prepare(&b, on_a, false);
        assert_eq!(on_b.uri(), "/b-prefix/api/v1/pods?limit=1");
        assert_eq!(on_b.headers()["host"], "b:8080");
        assert_eq!(on_b.version(), Version::HTTP_11);
    }
}
