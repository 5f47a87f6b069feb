//! The upstream client, built from kube's `Config` with kube's own auth and extra-header
//! layers, so every credential kind kube supports works unchanged, over watchgate's own
//! connection pool (`pool.rs`) to one or several apiservers (`endpoint.rs`).
//!
//! Regular requests get HTTP/2 through ALPN when the apiserver speaks it (plain
//! `http://` upstreams get HTTP/1.1); requests that switch protocols (exec, attach,
//! port-forward) get an HTTP/1.1 connection of their own, because `Connection: Upgrade`
//! does not exist in HTTP/2.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{header, Method, Request, Response, Uri};
use http_body_util::BodyExt;
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder};

use super::class::{Class, Internal};
use super::conn::{Connector, Limits};
use super::endpoint::{CheckResult, Endpoints};
use super::error::UpstreamError;
use super::pool::{EndpointPool, Pool, SendError, UpstreamBody};
use crate::body::{Body, BoxError};

/// A response as it comes from the upstream: headers now, body frames as they arrive.
/// The body holds the request's stream (or connection) in the pool until it ends or is
/// dropped.
pub type UpstreamResponse = Response<UpstreamBody>;

type Svc = BoxCloneSyncService<Request<Body>, UpstreamResponse, BoxError>;

/// `--upstream-max-connections`' default: over HTTP/2 (every TLS apiserver) 256
/// connections carry 25,600 streams, far beyond what a caching gateway forwards; over
/// HTTP/1.1 they carry 256 requests at once, above the apiserver's own default
/// `--max-requests-inflight` share of one client; and together with its clients the
/// gateway stays below the common 1024 open-file soft limit. See docs/proxy.md.
pub const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// How long a `/readyz` check of an endpoint may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);
/// How often idle connections are swept and due checks started.
const TICK: Duration = Duration::from_secs(1);

/// How the upstream client connects.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// The apiservers, in order of preference; empty: the kube config's `cluster_url`.
    pub servers: Vec<Uri>,
    /// TCP connect and TLS handshake, per connection.
    pub connect_timeout: Duration,
    /// Upstream connections open at most, over all endpoints and classes.
    pub max_connections: usize,
}

impl Default for UpstreamOptions {
    fn default() -> Self {
        Self {
            servers: Vec::new(),
            connect_timeout: Duration::from_secs(5),
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// The endpoint that answered, set on every [`UpstreamResponse`]'s extensions: index
/// into [`Upstream::endpoints`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub endpoint: usize,
}

/// Marks a request as switching protocols (set by [`Upstream::send_upgrade`]).
#[derive(Clone, Copy)]
struct Upgrade;

/// Sends a request to this endpoint only (the readiness checks).
#[derive(Clone, Copy)]
struct Pinned(usize);

/// The upstream apiserver(s). Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    url: Uri,
    /// Set once any response (whatever its code) came back: readiness needs the upstream
    /// to have been reached.
    reached: AtomicBool,
    endpoints: Arc<Endpoints>,
    pool: Arc<Pool>,
    svc: Svc,
    /// The background task (idle sweeps, endpoint checks) starts with the first request,
    /// inside the runtime.
    maintenance: AtomicBool,
}

impl Upstream {
    /// One endpoint, kube's `cluster_url`, with the default bound.
    pub fn new(config: &kube::Config, connect_timeout: Duration) -> anyhow::Result<Self> {
        Self::with_options(
            config,
            UpstreamOptions {
                connect_timeout,
                ..Default::default()
            },
        )
    }

    /// Build the client from kube's config. Fails on bad TLS material or credentials.
    pub fn with_options(config: &kube::Config, opts: UpstreamOptions) -> anyhow::Result<Self> {
        if config.proxy_url.is_some() {
            tracing::warn!("kubeconfig proxy-url is not supported yet; connecting directly");
        }
        anyhow::ensure!(
            opts.max_connections >= 1,
            "--upstream-max-connections must be at least 1"
        );
        let servers = if opts.servers.is_empty() {
            vec![config.cluster_url.clone()]
        } else {
            opts.servers.clone()
        };
        let pools: Vec<Arc<EndpointPool>> = servers
            .iter()
            .map(|u| Arc::new(EndpointPool::new(u.clone())))
            .collect();
        let endpoints = Arc::new(Endpoints::new(pools.clone()));
        let pool = Arc::new(Pool::new(
            Connector::new(config, opts.connect_timeout)?,
            Limits::new(opts.max_connections),
            pools,
        ));
        // kube's layers, in the order kube's own ClientBuilder applies them (the base URI
        // is the pool's, per endpoint): extra and impersonation headers, then credentials
        // (static, file-backed or exec plugin, refreshed as needed).
        let svc = ServiceBuilder::new()
            .option_layer(config.auth_layer()?)
            .layer(config.extra_headers_layer()?)
            .map_err(BoxError::from)
            .service(PoolService {
                pool: pool.clone(),
                endpoints: endpoints.clone(),
            });
        Ok(Self {
            inner: Arc::new(Inner {
                url: servers[0].clone(),
                reached: Default::default(),
                endpoints,
                pool,
                svc: BoxCloneSyncService::new(svc),
                maintenance: AtomicBool::new(false),
            }),
        })
    }

    /// The first upstream endpoint's URL.
    pub fn url(&self) -> &Uri {
        &self.inner.url
    }

    /// Every endpoint's URL, in order of preference.
    pub fn endpoints(&self) -> Vec<Uri> {
        self.inner
            .endpoints
            .iter()
            .map(|e| e.pool.base().clone())
            .collect()
    }

    /// Whether any request has had a response from the upstream yet.
    pub fn reached(&self) -> bool {
        self.inner.reached.load(Ordering::Acquire)
    }

    /// Connections open now, by class (short, long-running), over every endpoint.
    pub fn connections_open(&self) -> [usize; 2] {
        self.inner.pool.limits().open()
    }

    /// Endpoint `endpoint` (see [`Served`]) answered "Too large resource version": its
    /// watch cache lags behind. The others come first for a while.
    pub fn mark_behind(&self, endpoint: usize) {
        if endpoint < self.inner.endpoints.len() {
            self.inner.endpoints.mark_behind(endpoint);
        }
    }

    /// Send a regular request; only `path_and_query` of its URI is used. A request whose
    /// [`Class`] extension says long-running (the forwarder sets it from the parsed request,
    /// `Class::of`) goes on long-running connections, everything else on short ones; a
    /// request that finds no room at `--upstream-max-connections` fails at once with
    /// [`UpstreamError::TooManyRequests`].
    pub fn send(&self, req: Request<Body>) -> ResponseFuture {
        self.start_maintenance();
        self.observed(call(&self.inner.svc, req))
    }

    /// Send a request that asks to switch protocols, over HTTP/1.1.
    pub fn send_upgrade(&self, mut req: Request<Body>) -> ResponseFuture {
        self.start_maintenance();
        req.extensions_mut().insert(Upgrade);
        self.observed(call(&self.inner.svc, req))
    }

    /// Counts the call by code and times it until the response head, off the hot path's
    /// way: one counter and one histogram per upstream request. A refusal at the bound
    /// never reached the upstream: it is counted as a refusal, not as a request.
    fn observed(&self, fut: ResponseFuture) -> ResponseFuture {
        use crate::metrics as m;
        let inner = self.inner.clone();
        Box::pin(async move {
            let started = std::time::Instant::now();
            let result = fut.await;
            let code = match &result {
                Ok(resp) => {
                    inner.reached.store(true, Ordering::Release);
                    metrics::gauge!(m::UPSTREAM_UP).set(1.0);
                    resp.status().as_str().to_owned()
                }
                Err(UpstreamError::TooManyRequests(_)) => return result,
                Err(_) => {
                    metrics::gauge!(m::UPSTREAM_UP).set(0.0);
                    "error".to_owned()
                }
            };
            metrics::histogram!(m::UPSTREAM_REQUEST_DURATION, "code" => code.clone())
                .record(started.elapsed().as_secs_f64());
            metrics::counter!(m::UPSTREAM_REQUESTS_TOTAL, "code" => code).increment(1);
            result
        })
    }

    fn start_maintenance(&self) {
        if self.inner.maintenance.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(maintain(weak));
    }
}

/// Sweeps idle connections and checks the endpoints' readiness, until the client is gone.
async fn maintain(inner: Weak<Inner>) {
    let mut ticks: u64 = 0;
    loop {
        tokio::time::sleep(TICK).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        ticks += 1;
        if ticks % 10 == 0 {
            for e in inner.endpoints.iter() {
                e.pool.sweep();
            }
        }
        for i in inner.endpoints.due_checks() {
            let svc = inner.svc.clone();
            let endpoints = inner.endpoints.clone();
            tokio::spawn(async move {
                let result = check(svc, i).await;
                endpoints.checked(i, result);
            });
        }
    }
}

/// `GET /readyz` on endpoint `i`, with the gateway's credentials.
async fn check(svc: Svc, i: usize) -> CheckResult {
    let mut req = Request::builder()
        .method(Method::GET)
        .uri("/readyz")
        .header(header::ACCEPT, "text/plain")
        .body(crate::body::empty())
        .expect("a static request");
    req.extensions_mut().insert(Internal);
    req.extensions_mut().insert(Pinned(i));
    let exchange = async {
        let resp = call(&svc, req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        // Read (and drop) the short answer, so the connection serves the next request.
        let _ = http_body_util::Limited::new(resp.into_body(), 64 << 10)
            .collect()
            .await;
        Ok::<_, String>(status)
    };
    match tokio::time::timeout(CHECK_TIMEOUT, exchange).await {
        Ok(Ok(status)) => CheckResult::Answered(status),
        Ok(Err(e)) => CheckResult::Failed(e),
        Err(_) => CheckResult::Failed(format!("/readyz gave no answer within {CHECK_TIMEOUT:?}")),
    }
}

/// The future of an upstream call. Boxed here, where every type is concrete, so callers'
/// futures stay `Send` without higher-ranked lifetime trouble.
pub type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<UpstreamResponse, UpstreamError>> + Send + 'static>>;

fn call(svc: &Svc, req: Request<Body>) -> ResponseFuture {
    let mut svc = svc.clone();
    Box::pin(async move {
        // `poll_ready` then `call` rather than `oneshot`: the latter's state machine trips
        // rustc's higher-ranked `Send` inference for boxed-error bodies.
        std::future::poll_fn(|cx| svc.poll_ready(cx))
            .await
            .map_err(UpstreamError::from_client)?;
        svc.call(req).await.map_err(UpstreamError::from_client)
    })
}

/// The innermost service, under kube's layers: picks the endpoint, then a connection.
#[derive(Clone)]
struct PoolService {
    pool: Arc<Pool>,
    endpoints: Arc<Endpoints>,
}

impl Service<Request<Body>> for PoolService {
    type Response = UpstreamResponse;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<UpstreamResponse, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let pool = self.pool.clone();
        let endpoints = self.endpoints.clone();
        Box::pin(async move {
            dispatch(&pool, &endpoints, req)
                .await
                .map_err(BoxError::from)
        })
    }
}

/// Tries the endpoints in order of preference; a connection that cannot be made leaves
/// its endpoint out and the request (not sent yet) goes to the next one.
async fn dispatch(
    pool: &Pool,
    endpoints: &Endpoints,
    mut req: Request<Body>,
) -> Result<UpstreamResponse, UpstreamError> {
    let upgrade = req.extensions_mut().remove::<Upgrade>().is_some();
    let internal = req.extensions().get::<Internal>().is_some();
    let pinned = req.extensions_mut().remove::<Pinned>().map(|p| p.0);
    // Set by the forwarder from the parsed request (`Class::of`), or by the gateway's own
    // requests (`open_internal`); the short answers the gateway asks for itself (reviews,
    // probes) set none. The URI is never parsed here.
    let class = req
        .extensions_mut()
        .remove::<Class>()
        .unwrap_or(Class::Short);
    let order = match pinned {
        Some(i) => vec![i],
        None => endpoints.order(),
    };
    let mut last = None;
    for i in order {
        let ep = &endpoints.get(i).pool;
        let sent = if upgrade {
            pool.send_upgrade(ep, internal, req).await
        } else {
            pool.send(ep, class, internal, req).await
        };
        match sent {
            Ok(mut resp) => {
                resp.extensions_mut().insert(Served { endpoint: i });
                return Ok(resp);
            }
            Err(SendError::Connect(e, back)) => {
                if pinned.is_none() {
                    endpoints.eject(i, &e);
                }
                tracing::debug!(endpoint = %ep.base(), error = %e, "upstream endpoint unreachable");
                last = Some(e);
                req = *back;
            }
            Err(SendError::Failed(e)) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| UpstreamError::Connect("no upstream endpoint".into())))
}
