//! A pooled hyper-util client built from kube's `Config`, with kube's own TLS, auth and
//! extra-header layers, so every credential kind kube supports works unchanged.
//!
//! Two clients share one config: the regular one offers HTTP/2 through ALPN (one TCP
//! connection multiplexes all forwarded requests when the apiserver speaks h2), and an
//! HTTP/1.1-only one for upgrade requests, because `Connection: Upgrade` does not exist
//! in HTTP/2 and exec/attach/port-forward need a raw byte stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use tower::util::BoxCloneSyncService;
use tower::{Service, ServiceBuilder};

use super::error::UpstreamError;
use crate::body::{Body, BoxError};

/// A response as it comes from the upstream: headers now, body frames as they arrive.
pub type UpstreamResponse = Response<Incoming>;

type Svc = BoxCloneSyncService<Request<Body>, UpstreamResponse, BoxError>;

/// The upstream apiserver. Cheap to clone; clones share the connection pools.
#[derive(Clone)]
pub struct Upstream {
    inner: Arc<Inner>,
}

struct Inner {
    url: Uri,
    /// Set once any response (whatever its code) came back: readiness needs the upstream
    /// to have been reached.
    reached: std::sync::atomic::AtomicBool,
    pooled: Svc,
    upgrades: Svc,
}

#[derive(Clone, Copy)]
enum Alpn {
    /// Offer h2 and http/1.1; hyper-util uses h2 when the server picks it.
    Any,
    /// http/1.1 only, for requests that may switch protocols.
    Http1,
}

impl Upstream {
    /// Build the clients from kube's config. Fails on bad TLS material or credentials.
    pub fn new(config: &kube::Config, connect_timeout: Duration) -> anyhow::Result<Self> {
        if config.proxy_url.is_some() {
            tracing::warn!("kubeconfig proxy-url is not supported yet; connecting directly");
        }
        Ok(Self {
            inner: Arc::new(Inner {
                url: config.cluster_url.clone(),
                reached: Default::default(),
                pooled: build(config, connect_timeout, Alpn::Any)?,
                upgrades: build(config, connect_timeout, Alpn::Http1)?,
            }),
        })
    }

    /// The upstream base URL.
    pub fn url(&self) -> &Uri {
        &self.inner.url
    }

    /// Whether any request has had a response from the upstream yet.
    pub fn reached(&self) -> bool {
        self.inner
            .reached
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Send a regular request; only `path_and_query` of its URI is used.
    pub fn send(&self, req: Request<Body>) -> ResponseFuture {
        self.observed(call(&self.inner.pooled, req))
    }

    /// Send a request that asks to switch protocols, over HTTP/1.1.
    pub fn send_upgrade(&self, req: Request<Body>) -> ResponseFuture {
        self.observed(call(&self.inner.upgrades, req))
    }

    /// Counts the call by code and times it until the response head, off the hot path's
    /// way: one counter and one histogram per upstream request.
    fn observed(&self, fut: ResponseFuture) -> ResponseFuture {
        use crate::metrics as m;
        let inner = self.inner.clone();
        Box::pin(async move {
            let started = std::time::Instant::now();
            let result = fut.await;
            let code = match &result {
                Ok(resp) => {
                    inner
                        .reached
                        .store(true, std::sync::atomic::Ordering::Release);
                    metrics::gauge!(m::UPSTREAM_UP).set(1.0);
                    resp.status().as_str().to_owned()
                }
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

fn build(config: &kube::Config, connect_timeout: Duration, alpn: Alpn) -> anyhow::Result<Svc> {
    let connector = connector(config, connect_timeout, alpn)?;
    let mut builder = Client::builder(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        // Keep-alive pings detect a silently dead apiserver under long watches.
        .http2_keep_alive_interval(Duration::from_secs(30))
        .http2_keep_alive_timeout(Duration::from_secs(20))
        .http2_adaptive_window(true);
    let client: Client<_, Body> = builder.build(connector);

    // kube's layers, in the order kube's own ClientBuilder applies them: the base URI
    // (which also keeps any path prefix of the cluster URL), extra and impersonation
    // headers, then credentials (static, file-backed or exec plugin, refreshed as needed).
    let svc = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(BoxCloneSyncService::new(svc))
}

fn connector(
    config: &kube::Config,
    connect_timeout: Duration,
    alpn: Alpn,
) -> anyhow::Result<HttpsConnector<HttpConnector>> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let timeout = config
        .connect_timeout
        .map_or(connect_timeout, |t| t.min(connect_timeout));
    http.set_connect_timeout(Some(timeout));

    // kube's rustls config carries the CA bundle, client certificates (also those an
    // exec plugin returns) and insecure-skip-tls-verify.
    let tls = config.rustls_client_config()?;
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        builder = builder
            .with_server_name_resolver(FixedServerNameResolver::new(name.clone().try_into()?));
    }
    Ok(match alpn {
        Alpn::Any => builder.enable_all_versions().wrap_connector(http),
        Alpn::Http1 => builder.enable_http1().wrap_connector(http),
    })
}
