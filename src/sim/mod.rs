//! The simulated apiserver (`watchgate sim`): a faithful in-memory Kubernetes API used by
//! the demo, the tests and the benches. See docs/simulator.md.
//!
//! Layout: [`store`] (etcd stand-in: global RV, MVCC history, watch wake-ups), [`list`]
//! and [`watch`] (read paths), `write` (POST/PUT/PATCH/DELETE), `discovery`, `exec`,
//! `logs`, `seed` (owned by the other sim engineers), [`faults`] and [`stats`]. Answers of
//! resource requests are negotiated in [`answer`] and converted (Table,
//! PartialObjectMetadata) in [`convert`], with the shared `crate::table` printers chosen
//! in [`table`].
//! This file holds the config, the router and the serve loop.

pub mod answer;
pub mod apply;
pub mod auth;
pub mod bookmarks;
pub mod churn;
pub mod convert;
pub mod discovery;
pub mod exec;
pub mod faults;
pub mod gojson;
pub mod lifecycle;
pub mod list;
pub mod list_stream;
pub mod logs;
pub mod objects;
pub mod openapi;
pub mod patch;
pub mod portforward;
pub mod protobuf;
pub mod resources;
pub mod seed;
pub mod spdy;
pub mod stats;
pub mod store;
pub mod table;
pub mod validate;
pub mod watch;
pub mod write;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch as tokio_watch;
use tokio_util::sync::CancellationToken;

use crate::body::{self, Body};
use crate::request::{self, ApiPath, Verb};
use crate::status::Status;

pub use faults::Faults;
pub use resources::ResourceType;
pub use stats::Stats;
pub use store::{Mutation, Store, StoreConfig};

/// kube-apiserver's default `--max-request-body-bytes` is 3 MB (3 * 1024 * 1024).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;

/// Flags of `watchgate sim`.
#[derive(Args, Debug, Clone)]
pub struct SimArgs {
    #[arg(long, default_value = "127.0.0.1")]
    pub address: String,
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Objects to seed per seeded type (0 = only the system namespaces every cluster has).
    #[arg(long, default_value_t = 0)]
    pub seed: usize,
    /// Approximate JSON size of a seeded pod, in bytes.
    #[arg(long, default_value_t = 4096)]
    pub pod_size: usize,
    /// Churn: writes per second across the seeded objects (0 = none).
    #[arg(long, default_value_t = 0.0)]
    pub churn: f64,
    /// History window, in events (0 = unbounded by count).
    #[arg(long, default_value_t = 100_000)]
    pub history_events: usize,
    /// History window, in seconds (0 = unbounded by age).
    #[arg(long, default_value_t = 300)]
    pub history_seconds: u64,
    /// Seconds between watch BOOKMARK events (kube-apiserver: about one minute).
    #[arg(long, default_value_t = 60)]
    pub bookmark_interval: u64,
    /// Fault: end every watch stream after this many seconds (0 = never).
    #[arg(long, default_value_t = 0)]
    pub fault_drop_watch_secs: u64,
    /// Fault: added latency per response, in milliseconds.
    #[arg(long, default_value_t = 0)]
    pub fault_latency_ms: u64,
    /// Fault: answer the next N watches with a 410 ERROR event.
    #[arg(long, default_value_t = 0)]
    pub fault_watch_410: u32,
    /// Concurrent streams allowed on one HTTP/2 connection (kube-apiserver's
    /// --http2-max-streams-per-connection default)
    #[arg(long, default_value_t = DEFAULT_HTTP2_MAX_STREAMS)]
    pub http2_max_streams_per_connection: u32,
    /// A policy file (users, tokens, rules; see docs/simulator.md): requests are then
    /// authenticated and authorized, TokenReview and SubjectAccessReview are served, and
    /// writes are recorded with their identity (/debug/sim/audit). `demo --secure` uses
    /// the built-in demo policy
    #[arg(long)]
    pub policy: Option<std::path::PathBuf>,
}

/// kube-apiserver's default `--http2-max-streams-per-connection` (its secure serving's
/// `MaxConcurrentStreams` when the flag is unset).
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 100;

/// Runtime configuration of the simulator.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub addr: SocketAddr,
    pub store: StoreConfig,
    /// Interval between periodic watch bookmarks.
    pub bookmark_interval: Duration,
    /// How long a list/get waits for a resourceVersion newer than the current one before
    /// answering 504 (kube-apiserver: 3 s, `blockTimeout` in cacher/watch_cache.go).
    pub too_large_rv_wait: Duration,
    /// Seeding (see `seed`): objects per type, approximate pod size.
    pub seed_per_type: usize,
    pub pod_size: usize,
    /// Churn, writes per second (0 = off).
    pub churn_per_sec: f64,
    /// Initial fault settings.
    pub faults: faults::FaultConfig,
    /// Create the namespaces kube-apiserver always has (`default`, `kube-system`,
    /// `kube-public`, `kube-node-lease`) and the widgets' CustomResourceDefinition before
    /// serving. `watchgate sim` and the demo do;
    /// the default is off so that store-level tests start from an empty store at RV 1.
    pub bootstrap_namespaces: bool,
    /// Concurrent streams per HTTP/2 connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub http2_max_streams: u32,
    /// Authentication and authorization policy (`None`: every request is allowed).
    pub policy: Option<Arc<auth::Policy>>,
    /// How list pages' continue tokens write their start key: `Rooted` as kube-apiserver
    /// 1.36 pages from its watch cache (the default), `Relative` as apiservers before
    /// `ListFromCacheSnapshot` paged from etcd3 (`codec::continue_token`).
    pub continue_form: crate::codec::continue_token::KeyForm,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            store: StoreConfig::default(),
            bookmark_interval: Duration::from_secs(60),
            too_large_rv_wait: Duration::from_secs(3),
            seed_per_type: 0,
            pod_size: 4096,
            churn_per_sec: 0.0,
            faults: faults::FaultConfig::default(),
            bootstrap_namespaces: false,
            http2_max_streams: DEFAULT_HTTP2_MAX_STREAMS,
            policy: None,
            continue_form: Default::default(),
        }
    }
}

impl SimConfig {
    pub fn from_args(a: &SimArgs) -> anyhow::Result<Self> {
        let ip: std::net::IpAddr = a
            .address
            .parse()
            .map_err(|e| anyhow::anyhow!("--address {:?}: {e}", a.address))?;
        Ok(Self {
            addr: SocketAddr::new(ip, a.port),
            store: StoreConfig {
                history_events: a.history_events,
                history_duration: (a.history_seconds > 0)
                    .then(|| Duration::from_secs(a.history_seconds)),
            },
            bookmark_interval: Duration::from_secs(a.bookmark_interval.max(1)),
            too_large_rv_wait: Duration::from_secs(3),
            seed_per_type: a.seed,
            pod_size: a.pod_size,
            churn_per_sec: a.churn,
            faults: faults::FaultConfig {
                drop_watch_after: (a.fault_drop_watch_secs > 0)
                    .then(|| Duration::from_secs(a.fault_drop_watch_secs)),
                latency: Duration::from_millis(a.fault_latency_ms),
                watch_410: a.fault_watch_410,
            },
            bootstrap_namespaces: true,
            http2_max_streams: a.http2_max_streams_per_connection.max(1),
            policy: a
                .policy
                .as_deref()
                .map(auth::Policy::load)
                .transpose()?
                .map(Arc::new),
            continue_form: Default::default(),
        })
    }
}

/// Everything a handler needs: shared by all connections.
#[derive(Debug)]
pub struct Sim {
    pub cfg: SimConfig,
    pub store: Arc<Store>,
    pub stats: Arc<Stats>,
    pub faults: Arc<Faults>,
    /// Flips to true on shutdown; watch streams end when it does.
    pub shutdown: tokio_watch::Receiver<bool>,
    /// The writes made, with their identities (recorded with a policy only).
    pub audit: Arc<auth::Audit>,
    /// The watch cache's creation, from which its bookmark ticks count (`bookmarks`).
    pub bookmark_epoch: tokio::time::Instant,
}

impl Sim {
    /// A simulator state without a listener (for unit tests and in-process use).
    pub fn new(cfg: SimConfig) -> (Arc<Self>, tokio_watch::Sender<bool>) {
        let store = Store::new(cfg.store.clone());
        Self::with_store(cfg, store)
    }

    /// A simulator state over an existing store: another apiserver of the same cluster.
    pub fn with_store(cfg: SimConfig, store: Arc<Store>) -> (Arc<Self>, tokio_watch::Sender<bool>) {
        let (tx, rx) = tokio_watch::channel(false);
        let sim = Arc::new(Self {
            store,
            stats: Arc::new(Stats::default()),
            faults: Arc::new(Faults::new(cfg.faults.clone())),
            cfg,
            shutdown: rx,
            audit: Arc::default(),
            bookmark_epoch: tokio::time::Instant::now(),
        });
        (sim, tx)
    }

    /// The newest resourceVersion this server shows: the store's, or less while its view
    /// is frozen ([`Faults::freeze_at`]).
    pub fn visible_rv(&self) -> u64 {
        let current = self.store.current_rv();
        self.faults.frozen().map_or(current, |f| f.min(current))
    }
}

/// A running simulator. Dropping the handle stops it too (the shutdown channel closes),
/// which ends its watch streams; `shutdown()` additionally waits for connections to close.
pub struct SimHandle {
    sim: Arc<Sim>,
    addr: SocketAddr,
    shutdown_tx: tokio_watch::Sender<bool>,
    /// Cancelled by [`SimHandle::kill`]: every connection is dropped at once.
    kill: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl SimHandle {
    /// The bound address (the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.sim.store
    }

    pub fn stats(&self) -> &Arc<Stats> {
        &self.sim.stats
    }

    pub fn faults(&self) -> &Arc<Faults> {
        &self.sim.faults
    }

    pub fn sim(&self) -> &Arc<Sim> {
        &self.sim
    }

    /// Stops accepting, ends watch streams, and waits for connections to close (bounded).
    pub async fn shutdown(self) {
        let _ = self.shutdown_tx.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }

    /// Dies like a killed process: the listener closes and every connection is dropped
    /// at once, mid-stream, with no clean end of any watch. The store lives on (replicas
    /// share it).
    pub async fn kill(self) {
        self.kill.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), self.task).await;
    }
}

/// Binds `cfg.addr` (port 0 allowed), seeds, starts churn, and serves in the background.
pub async fn start(cfg: SimConfig) -> anyhow::Result<SimHandle> {
    // As kube-apiserver listens: a herd of connections is queued, not retried.
    let listener = crate::listen::bind(cfg.addr)?;
    let bootstrap = cfg.bootstrap_namespaces;
    let (sim, shutdown_tx) = Sim::new(cfg);
    if bootstrap {
        write::bootstrap(&sim.store);
        seed::bootstrap_crds(&sim.store);
    }
    seed::seed(&sim);
    churn::spawn_churn(sim.clone());
    listen(listener, sim, shutdown_tx)
}

/// Another apiserver of the same cluster: serves `store` (a running simulator's, see
/// [`SimHandle::store`]) on `cfg.addr`, with its own faults and stats, no seeding and no
/// churn. Like kube-apiservers sharing one etcd: a write through either is seen by both,
/// and each can be killed, restarted or made to lag on its own.
pub async fn start_replica(cfg: SimConfig, store: Arc<Store>) -> anyhow::Result<SimHandle> {
    // As kube-apiserver listens: a herd of connections is queued, not retried.
    let listener = crate::listen::bind(cfg.addr)?;
    let (sim, shutdown_tx) = Sim::with_store(cfg, store);
    listen(listener, sim, shutdown_tx)
}

fn listen(
    listener: TcpListener,
    sim: Arc<Sim>,
    shutdown_tx: tokio_watch::Sender<bool>,
) -> anyhow::Result<SimHandle> {
    let addr = listener.local_addr()?;
    let kill = CancellationToken::new();
    let task = tokio::spawn(serve(listener, sim.clone(), kill.clone()));
    Ok(SimHandle {
        sim,
        addr,
        shutdown_tx,
        kill,
        task,
    })
}

/// `watchgate sim`: runs until Ctrl-C.
pub async fn run(args: SimArgs) -> anyhow::Result<()> {
    let cfg = SimConfig::from_args(&args)?;
    let handle = start(cfg).await?;
    tracing::info!(addr = %handle.addr(), "simulated apiserver listening");
    tokio::signal::ctrl_c().await?;
    handle.shutdown().await;
    Ok(())
}

/// Accept loop: HTTP/1.1 and h2c on the same port (hyper-util's auto builder), upgrades
/// enabled for pods/exec, at most `http2_max_streams` streams per HTTP/2 connection.
async fn serve(listener: TcpListener, sim: Arc<Sim>, kill: CancellationToken) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = sim.shutdown.clone();
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http2()
        .max_concurrent_streams(sim.cfg.http2_max_streams);
    loop {
        tokio::select! {
            res = listener.accept() => {
                let (stream, _) = match res {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of fds and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "sim accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let sim = sim.clone();
                let svc = hyper::service::service_fn(move |req| {
                    let sim = sim.clone();
                    async move { Ok::<_, std::convert::Infallible>(handle(sim, req).await) }
                });
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
                let conn = graceful.watch(conn.into_owned());
                let kill = kill.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = conn => {}
                        // Dropped mid-stream: the socket closes with nothing more said.
                        _ = kill.cancelled() => {}
                    }
                });
            }
            _ = wait_shutdown(&mut shutdown) => break,
            _ = kill.cancelled() => return,
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(3), graceful.shutdown()).await;
}

/// Resolves once the shutdown flag is set (or its sender is gone).
pub async fn wait_shutdown(rx: &mut tokio_watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

fn json_response(code: StatusCode, v: &serde_json::Value) -> Response<Body> {
    let mut bytes = serde_json::to_vec(v).unwrap_or_default();
    bytes.push(b'\n');
    let mut resp = Response::new(body::full(bytes));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Serialises an object the way the apiserver does (compact JSON + newline), 200 OK.
pub fn object_response(v: &serde_json::Value) -> Response<Body> {
    json_response(StatusCode::OK, v)
}

/// The router: every request enters here.
pub async fn handle(sim: Arc<Sim>, req: Request<Incoming>) -> Response<Body> {
    let latency = sim.faults.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    // Go's server refuses a path it cannot decode before any handler runs.
    if crate::apipath::unescape(req.uri().path()).is_err() {
        return go_bad_request();
    }
    let audit_id = req.headers().get(AUDIT_ID).cloned();
    let mut resp = route(sim, req).await;
    filter_headers(&mut resp, audit_id);
    resp
}

/// kube-apiserver's `Audit-ID` request and response header (`auditinternal.HeaderAuditID`).
const AUDIT_ID: header::HeaderName = header::HeaderName::from_static("audit-id");

/// What kube-apiserver's handler chain sets on every answer before a handler runs
/// (DefaultBuildHandlerChain): `WithAuditInit` the `Audit-Id` (the client's, or a new
/// UUID), `WithCacheControl` `Cache-Control: no-cache, private` unless the handler set
/// its own. A 101's headers are written by the upgrade handler itself, on the hijacked
/// connection, so they have neither.
fn filter_headers(resp: &mut Response<Body>, audit_id: Option<HeaderValue>) {
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return;
    }
    let h = resp.headers_mut();
    let audit_id = audit_id.unwrap_or_else(|| {
        let id = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
        HeaderValue::from_str(&id.hyphenated().to_string()).expect("a UUID is a header value")
    });
    h.insert(AUDIT_ID, audit_id);
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-cache, private"));
}

/// The API and the simulator's controls, after the handler chain's filters.
async fn route(sim: Arc<Sim>, req: Request<Incoming>) -> Response<Body> {
    let api = request::parse(req.method(), req.uri());
    // The simulator's own controls (/debug/sim/*) are not part of the API it plays.
    let control = matches!(&api.path, ApiPath::NonResource(p) if p.starts_with("/debug/sim/"));
    let identity = match &sim.cfg.policy {
        Some(_) if control => None,
        Some(policy) => match auth::check(policy, req.headers(), &api) {
            Ok(identity) => Some(identity),
            Err(refused) => return refused,
        },
        None => None,
    };
    if let (Some(policy), ApiPath::Resource(rp)) = (&sim.cfg.policy, &api.path) {
        if *req.method() == Method::POST && rp.name.is_none() && rp.namespace.is_none() {
            let review = match (rp.group.as_str(), rp.version.as_str(), rp.resource.as_str()) {
                ("authentication.k8s.io", "v1", "tokenreviews") => Some(false),
                ("authorization.k8s.io", "v1", "subjectaccessreviews") => Some(true),
                _ => None,
            };
            if let Some(access) = review {
                let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
                    .collect()
                    .await
                {
                    Ok(c) => c.to_bytes(),
                    Err(e) => {
                        return Status::bad_request(format!("unable to read request body: {e}"))
                            .into_response()
                    }
                };
                return if access {
                    auth::access_review(policy, &sim.audit, &body)
                } else {
                    auth::token_review(policy, &sim.audit, &body)
                };
            }
        }
    }
    let rp = match &api.path {
        ApiPath::NonResource(path) => {
            if let Some(resp) = debug_endpoint(&sim, req.method(), path, req.uri().query()) {
                return resp;
            }
            let (parts, _) = req.into_parts();
            // Every path the apiserver registers starts with one `/`; discovery's own
            // matching is forgiving about slashes, the apiserver's mux is not.
            if parts.uri.path().starts_with("//") {
                return page_not_found();
            }
            return discovery::handle(&parts, &api)
                .or_else(|| openapi::handle(&parts))
                .unwrap_or_else(|| {
                    // The OpenAPI handlers' own 404 is kept as the simulator always wrote it.
                    if parts.uri.path().starts_with("/openapi/") {
                        Status::path_not_found().into_response()
                    } else {
                        not_found(parts.uri.path())
                    }
                });
        }
        ApiPath::Resource(rp) => rp.clone(),
    };
    let Some(rt) = resources::find(&rp.group, &rp.version, &rp.resource) else {
        return not_found(req.uri().path());
    };
    // Shapes the apiserver has no route for: extra segments, a namespace on a
    // cluster-scoped type, a subresource the type does not have.
    if !rp.extra.is_empty()
        || (rp.namespace.is_some() && !rt.namespaced)
        || rp
            .subresource
            .as_deref()
            .is_some_and(|s| !rt.subresources.contains(&s))
        || (rp.legacy_watch && !matches!(*req.method(), Method::GET | Method::HEAD))
        // A namespaced type has no route by name outside a namespace (`/api/v1/pods/a`).
        || (rt.namespaced && rp.namespace.is_none() && rp.name.is_some())
    {
        return Status::path_not_found().into_response();
    }
    // Its all-namespaces path (`/api/v1/pods`) has routes for list and watch only:
    // go-restful's 405 for anything else.
    if rt.namespaced
        && rp.namespace.is_none()
        && !matches!(*req.method(), Method::GET | Method::HEAD)
    {
        let mut s = Status::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        );
        s.with_details = true;
        return s.into_response();
    }
    if let Some(status) = path_parameters(&rp, api.verb) {
        return status.into_response();
    }
    let mut rp = rp;
    if rp.namespace.as_deref() == Some("") {
        // `/namespaces//pods`: go-restful matches the empty `{namespace}` and RequestInfo
        // names no namespace, so a list or watch spans all of them.
        rp.namespace = None;
    }
    let ns = rp.namespace.clone().unwrap_or_default();
    match (api.verb, rp.subresource.as_deref(), rp.name.clone()) {
        (Verb::Get, Some("exec" | "attach" | "portforward"), Some(name))
        | (Verb::Create, Some("exec" | "attach" | "portforward"), Some(name)) => {
            exec::handle(&sim, req, rt, &ns, &name).await
        }
        (Verb::Get, Some("log"), Some(name)) => logs::handle(&sim, &api, rt, &ns, &name).await,
        (Verb::Get, None | Some("status"), Some(name)) => {
            list::get(&sim, &api, req.headers(), rt, &ns, &name).await
        }
        (Verb::List, None, None) if sim.faults.take_list_throttle() => {
            // API Priority and Fairness rejecting it, as the gateway's own limits do.
            crate::auth::answers::too_many_requests()
        }
        (Verb::List, None, None) => list::handle(&sim, &api, req.headers(), rt, &rp).await,
        (Verb::Watch, None, _) if sim.faults.take_watch_failure() => Status::new(
            503,
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        )
        .into_response(),
        (Verb::Watch, None, _) => watch::handle(&sim, &api, req.headers(), rt, &rp).await,
        (Verb::Other, _, _) => {
            Status::method_not_supported(&rt.group_resource(), req.method().as_str())
                .into_response()
        }
        _ => {
            // Writes (and GET on the scale subresource) belong to write/.
            let (parts, incoming) = req.into_parts();
            let bytes = match Limited::new(incoming, MAX_BODY_BYTES).collect().await {
                Ok(c) => c.to_bytes(),
                Err(e) => {
                    if e.is::<http_body_util::LengthLimitError>() {
                        return Status::new(
                            413,
                            "RequestEntityTooLarge",
                            "Request entity too large: limit is 3145728",
                        )
                        .into_response();
                    }
                    return Status::bad_request(format!("unable to read request body: {e}"))
                        .into_response();
                }
            };
            let req = Request::from_parts(parts, bytes);
            let resp = write::handle(&sim, &api, rt, req).await;
            if let Some(id) = identity {
                sim.audit.record(auth::AuditRecord {
                    verb: api.verb.as_str(),
                    path: api_path(&api),
                    code: resp.status().as_u16(),
                    user: id.user.name,
                    groups: id.user.groups,
                    extra: id.user.extra,
                    impersonator: id.impersonator,
                });
            }
            resp
        }
    }
}

/// The request path, for the audit records.
fn api_path(api: &request::ApiRequest) -> String {
    match &api.path {
        ApiPath::NonResource(p) => p.clone(),
        ApiPath::Resource(rp) => {
            let mut p = if rp.group.is_empty() {
                format!("/api/{}", rp.version)
            } else {
                format!("/apis/{}/{}", rp.group, rp.version)
            };
            if let Some(ns) = &rp.namespace {
                p.push_str(&format!("/namespaces/{ns}"));
            }
            p.push('/');
            p.push_str(&rp.resource);
            for part in [&rp.name, &rp.subresource].into_iter().flatten() {
                p.push('/');
                p.push_str(part);
            }
            p
        }
    }
}

/// What kube-apiserver answers for a path no handler serves (`crate::apipath`): a
/// go-restful WebService's 404 Status, or Go's `http.NotFound` from the end of the
/// delegation chain.
pub fn not_found(raw_path: &str) -> Response<Body> {
    match crate::apipath::handler_of_raw(raw_path) {
        crate::apipath::Handler::Restful => Status::path_not_found().into_response(),
        _ => page_not_found(),
    }
}

/// Go's `http.NotFound`.
pub fn page_not_found() -> Response<Body> {
    let mut resp = Response::new(body::full("404 page not found\n"));
    *resp.status_mut() = StatusCode::NOT_FOUND;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    resp
}

/// net/http's answer to a request target it cannot parse (here: a bad `%` escape),
/// written before any handler runs.
fn go_bad_request() -> Response<Body> {
    let mut resp = Response::new(body::full("400 Bad Request"));
    *resp.status_mut() = StatusCode::BAD_REQUEST;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

/// The Status the handlers and the storage layer give for the namespace and name that
/// RequestInfo took from the path, before anything is looked up: an empty `{name}`
/// (handlers' `errEmptyName`), an empty `{namespace}` for one object
/// (`NamespaceKeyFunc`), a name that cannot be a key segment (`IsValidPathSegmentName`).
fn path_parameters(rp: &request::ResourcePath, verb: Verb) -> Option<Status> {
    let name = rp.name.as_deref()?;
    if name.is_empty() {
        return Some(Status::bad_request("name must be provided"));
    }
    // A watch of one object is a list with a field selector; nothing is keyed by name.
    if verb == Verb::Watch {
        return None;
    }
    if rp.namespace.as_deref() == Some("") {
        return Some(Status::bad_request("Namespace parameter required."));
    }
    let reasons = crate::apipath::invalid_name_reasons(name);
    if !reasons.is_empty() {
        return Some(Status::bad_request(format!(
            "Name parameter invalid: {}: {}",
            crate::selector::validation::go_quote(name),
            reasons.join(";")
        )));
    }
    None
}

/// `POST /debug/sim/faults/unwatched-write?group=&version=v1&resource=configmaps&namespace=ns-0&name=cm-0[&delete=true]`:
/// changes one object (a `watchgate.dev/unwatched-write` annotation counting up), or
/// deletes it, with an event no watch delivers ([`store::Store::mutate_unwatched`]).
fn unwatched_write(sim: &Arc<Sim>, query: Option<&str>) -> Response<Body> {
    let q: std::collections::HashMap<String, String> =
        form_urlencoded::parse(query.unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let arg = |k: &str| q.get(k).map(String::as_str).unwrap_or("");
    let version = match arg("version") {
        "" => "v1",
        v => v,
    };
    let Some(rt) = resources::find(arg("group"), version, arg("resource")) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &json!({"error": "no such resource: give group, version and resource"}),
        );
    };
    let delete = arg("delete") == "true";
    let written = sim
        .store
        .mutate_unwatched(rt, arg("namespace"), arg("name"), |cur| {
            let Some(cur) = cur else {
                return Ok(store::Mutation::NoOp);
            };
            if delete {
                return Ok(store::Mutation::Delete);
            }
            let mut v = cur.as_ref().clone();
            let annotations = v
                .pointer_mut("/metadata")
                .and_then(Value::as_object_mut)
                .map(|m| m.entry("annotations").or_insert_with(|| json!({})));
            if let Some(Value::Object(a)) = annotations {
                let n = a
                    .get("watchgate.dev/unwatched-write")
                    .and_then(Value::as_str)
                    .and_then(|s| s.parse::<u64>().ok())
                    .unwrap_or(0);
                a.insert(
                    "watchgate.dev/unwatched-write".into(),
                    json!((n + 1).to_string()),
                );
            }
            Ok(store::Mutation::Put(v))
        });
    match written {
        Ok(Some(obj)) => json_response(
            StatusCode::OK,
            &json!({"resourceVersion": obj.pointer("/metadata/resourceVersion"), "deleted": delete}),
        ),
        Ok(None) => json_response(StatusCode::NOT_FOUND, &json!({"error": "no such object"})),
        Err(st) => json_response(StatusCode::BAD_REQUEST, &json!({"error": st.message})),
    }
}

/// `/debug/sim/*`: stats and fault controls (documented in docs/simulator.md).
fn debug_endpoint(
    sim: &Arc<Sim>,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Option<Response<Body>> {
    let resp = match (method, path.trim_end_matches('/')) {
        (&Method::GET, "/debug/sim/stats") => json_response(StatusCode::OK, &sim.stats.to_json()),
        (&Method::GET, "/debug/sim/stats/shapes") => {
            json_response(StatusCode::OK, &sim.stats.shapes_json())
        }
        (&Method::POST, "/debug/sim/stats/reset") => {
            sim.stats.reset();
            json_response(StatusCode::OK, &sim.stats.to_json())
        }
        (&Method::GET, "/debug/sim/audit") => json_response(StatusCode::OK, &sim.audit.to_json()),
        (&Method::GET, "/debug/sim/faults") => json_response(StatusCode::OK, &sim.faults.to_json()),
        (&Method::POST, "/debug/sim/faults/compact") => {
            sim.store.compact_now();
            json_response(
                StatusCode::OK,
                &json!({"compacted": sim.store.compacted_rv()}),
            )
        }
        (&Method::POST, "/debug/sim/faults/watch-410") => {
            sim.faults.force_410_next_watch(1);
            json_response(StatusCode::OK, &sim.faults.to_json())
        }
        (&Method::POST, "/debug/sim/faults/watch-503") => {
            sim.faults.fail_next_watch(1);
            json_response(StatusCode::OK, &sim.faults.to_json())
        }
        (&Method::POST, "/debug/sim/faults/list-429") => {
            sim.faults.throttle_next_list(1);
            json_response(StatusCode::OK, &sim.faults.to_json())
        }
        (&Method::POST, "/debug/sim/faults/drop-watches") => {
            sim.faults.drop_watches_now();
            json_response(StatusCode::OK, &sim.faults.to_json())
        }
        (&Method::POST, "/debug/sim/faults/freeze") => {
            sim.faults.freeze_at(sim.store.current_rv());
            json_response(StatusCode::OK, &sim.faults.to_json())
        }
        (&Method::POST, "/debug/sim/faults/unfreeze") => {
            sim.faults.unfreeze();
            json_response(StatusCode::OK, &sim.faults.to_json())
        }
        (&Method::POST, "/debug/sim/faults/unwatched-write") => unwatched_write(sim, query),
        _ => return None,
    };
    Some(resp)
}
