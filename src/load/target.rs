//! Where the load goes: an apiserver-compatible URL, reached with kube's config inference
//! (kubeconfig, context, credentials, TLS) through the crate's own upstream client, or, for
//! HTTP/2 over plain `http://`, through explicit prior-knowledge connections so that the
//! number of streams per connection is exactly what was asked for.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http::{Method, Request, Response, Uri};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::body::{self, Body};
use crate::upstream::{Upstream, UpstreamOptions};

/// How watch streams reach the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// One HTTP/1.1 connection per watch (chunked responses), as client-go without h2.
    Http1,
    /// HTTP/2 with `--streams-per-connection` watches multiplexed on each connection.
    Http2,
}

/// A target: requests go through kube's layers (auth, TLS, path prefix).
#[derive(Clone)]
pub struct Target {
    upstream: Upstream,
    url: Uri,
    /// Prior-knowledge HTTP/2 connections for plain http targets (see [`Target::h2`]).
    h2: Arc<H2Pool>,
}

struct H2Pool {
    per_connection: usize,
    next: AtomicUsize,
    conns: tokio::sync::Mutex<Vec<hyper::client::conn::http2::SendRequest<Body>>>,
}

pub const USER_AGENT: &str = concat!("watchgate-load/", env!("CARGO_PKG_VERSION"));

impl Target {
    /// `--server` alone, or a kubeconfig (explicit path, or kube's inference) with an
    /// optional `--server` override, as `watchgate serve` resolves its upstream.
    pub async fn resolve(
        server: Option<&str>,
        kubeconfig: Option<&PathBuf>,
        context: Option<&str>,
        streams_per_connection: usize,
    ) -> anyhow::Result<Self> {
        let config = match (server, kubeconfig) {
            (Some(url), None) => {
                let uri: Uri = url
                    .parse()
                    .with_context(|| format!("invalid --server URL {url:?}"))?;
                kube::Config::new(uri)
            }
            _ => {
                let options = KubeConfigOptions {
                    context: context.map(String::from),
                    ..Default::default()
                };
                let mut cfg = if let Some(path) = kubeconfig {
                    let kc = Kubeconfig::read_from(path)
                        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                    kube::Config::from_custom_kubeconfig(kc, &options).await?
                } else {
                    kube::Config::infer()
                        .await
                        .context("no target: pass --server or a kubeconfig")?
                };
                if let Some(url) = server {
                    cfg.cluster_url = url.parse().context("invalid --server URL")?;
                }
                cfg
            }
        };
        Self::from_config(&config, streams_per_connection)
    }

    pub fn from_config(
        config: &kube::Config,
        streams_per_connection: usize,
    ) -> anyhow::Result<Self> {
        // A load generator opens as many connections as its scenario asks for: the
        // gateway's default bound on upstream connections does not apply to it.
        let upstream = Upstream::with_options(
            config,
            UpstreamOptions {
                connect_timeout: Duration::from_secs(10),
                max_connections: usize::MAX,
                ..Default::default()
            },
        )?;
        Ok(Self {
            url: config.cluster_url.clone(),
            upstream,
            h2: Arc::new(H2Pool {
                per_connection: streams_per_connection.max(1),
                next: AtomicUsize::new(0),
                conns: tokio::sync::Mutex::new(Vec::new()),
            }),
        })
    }

    pub fn url(&self) -> &Uri {
        &self.url
    }

    fn build(
        method: Method,
        path: &str,
        body: Option<(&str, Bytes)>,
        accept: &str,
    ) -> anyhow::Result<Request<Body>> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::USER_AGENT, USER_AGENT)
            .header(http::header::ACCEPT, accept);
        let body = match body {
            Some((ct, bytes)) => {
                b = b.header(http::header::CONTENT_TYPE, ct);
                body::full(bytes)
            }
            None => body::empty(),
        };
        Ok(b.body(body)?)
    }

    /// One request (list, write, or an HTTP/1.1 / ALPN watch).
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Bytes)>,
    ) -> anyhow::Result<Response<Body>> {
        self.send_accepting(method, path, body, "application/json")
            .await
    }

    /// [`Target::send`] with this Accept header (`--encoding`).
    pub async fn send_accepting(
        &self,
        method: Method,
        path: &str,
        body: Option<(&str, Bytes)>,
        accept: &str,
    ) -> anyhow::Result<Response<Body>> {
        let req = Self::build(method, path, body, accept)?;
        Ok(self.upstream.send(req).await?.map(body::boxed))
    }

    /// A GET over HTTP/2 with prior knowledge on a shared connection: watch `i` uses
    /// connection `i / streams_per_connection`. Only for `http://` targets; `https://`
    /// targets negotiate h2 through ALPN in [`Target::send`].
    pub async fn get_h2(&self, path: &str) -> anyhow::Result<Response<Body>> {
        self.get_h2_accepting(path, "application/json").await
    }

    /// [`Target::get_h2`] with this Accept header (`--encoding`).
    pub async fn get_h2_accepting(
        &self,
        path: &str,
        accept: &str,
    ) -> anyhow::Result<Response<Body>> {
        anyhow::ensure!(
            self.url.scheme_str() == Some("http"),
            "--protocol http2 with explicit streams per connection needs an http:// target \
             (https targets negotiate HTTP/2 through ALPN with --protocol http1)"
        );
        let slot = self.h2.next.fetch_add(1, Ordering::Relaxed) / self.h2.per_connection;
        let mut sender = self.h2_connection(slot).await?;
        let base = self.url.path().trim_end_matches('/');
        let uri: Uri = format!(
            "http://{}{base}{path}",
            self.url.authority().map(|a| a.as_str()).unwrap_or("")
        )
        .parse()?;
        let mut req = Self::build(Method::GET, path, None, accept)?;
        *req.uri_mut() = uri;
        sender.ready().await?;
        Ok(sender.send_request(req).await?.map(body::boxed))
    }

    async fn h2_connection(
        &self,
        slot: usize,
    ) -> anyhow::Result<hyper::client::conn::http2::SendRequest<Body>> {
        // Held across the connect: slots are filled in order and each is opened once.
        let mut conns = self.h2.conns.lock().await;
        while conns.len() <= slot {
            let c = self.h2_connect().await?;
            conns.push(c);
        }
        if conns[slot].is_closed() {
            conns[slot] = self.h2_connect().await?;
        }
        Ok(conns[slot].clone())
    }

    async fn h2_connect(&self) -> anyhow::Result<hyper::client::conn::http2::SendRequest<Body>> {
        let authority = self
            .url
            .authority()
            .context("the target URL has no host")?
            .to_string();
        let addr = if authority.contains(':') {
            authority
        } else {
            format!("{authority}:80")
        };
        let tcp = tokio::net::TcpStream::connect(&addr)
            .await
            .with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .adaptive_window(true)
            .handshake(TokioIo::new(tcp))
            .await?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// Number of HTTP/2 connections opened so far.
    pub async fn h2_connections(&self) -> usize {
        self.h2.conns.lock().await.len()
    }
}
