//! Stub upstreams in-process: an HTTP/1.1 + h2c server whose every answer a test writes
//! itself, for playing apiservers the simulator cannot (broken, slow, old, malicious).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use watchgate::body::Body;
pub type StubHandler = Arc<
    dyn Fn(Request<Incoming>) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> + Send + Sync,
>;

/// Wrap an async closure as a stub handler.
pub fn handler<F, Fut>(f: F) -> StubHandler
where
    F: Fn(Request<Incoming>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    Arc::new(move |req| Box::pin(f(req)))
}

/// A stub upstream: HTTP/1.1 and h2c, upgrades enabled. Dropping it closes the listener
/// and every open connection, like an apiserver that went away.
pub struct Stub {
    pub addr: SocketAddr,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Stub {
    pub async fn start(h: StubHandler) -> Stub {
        Self::start_on("127.0.0.1:0".parse().unwrap(), h).await
    }

    pub async fn start_on(addr: SocketAddr, h: StubHandler) -> Stub {
        let listener = TcpListener::bind(addr).await.expect("bind stub");
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    Ok((stream, _)) = listener.accept() => {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let h = h.clone();
                        conns.spawn(async move {
                            let svc = service_fn(move |req| {
                                let h = h.clone();
                                async move { Ok::<_, Infallible>(h(req).await) }
                            });
                            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                                .serve_connection_with_upgrades(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                    Some(_) = conns.join_next() => {}
                }
            }
        });
        Stub {
            addr,
            accepted,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A body fed by a bounded channel: the test decides when each chunk leaves the stub.
pub fn channel_body(capacity: usize) -> (tokio::sync::mpsc::Sender<Bytes>, Body) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(capacity);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|b| (Ok::<_, Infallible>(http_body::Frame::data(b)), rx))
    });
    (
        tx,
        watchgate::body::boxed(http_body_util::StreamBody::new(stream)),
    )
}

/// A stub whose every answer streams a body the test feeds (capacity 1: it holds at most
/// one chunk the gateway has not taken). Each request's sender arrives on the returned
/// receiver, in request order. `content_type`, if any, is the answer's: it decides
/// whether the gateway treats the stream as line-delimited (e.g. when draining).
pub async fn channel_stub(
    content_type: Option<&'static str>,
) -> (
    Stub,
    tokio::sync::mpsc::Receiver<tokio::sync::mpsc::Sender<Bytes>>,
) {
    let (senders_tx, senders_rx) = tokio::sync::mpsc::channel(4);
    let stub = Stub::start(handler(move |_req| {
        let senders_tx = senders_tx.clone();
        async move {
            let (tx, body) = channel_body(1);
            senders_tx.send(tx).await.unwrap();
            let mut resp = Response::new(body);
            if let Some(ct) = content_type {
                resp.headers_mut()
                    .insert("content-type", ct.parse().unwrap());
            }
            resp
        }
    }))
    .await;
    (stub, senders_rx)
}

/// A free loopback port with nothing listening on it.
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// A JSON answer with `code`, as an apiserver sends it.
pub fn json_response(code: StatusCode, v: Value) -> Response<Body> {
    let mut r = Response::new(watchgate::body::full(v.to_string()));
    *r.status_mut() = code;
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

/// `GET /api/v1` of an apiserver that serves pods alone: what a reflector's discovery needs.
pub fn pods_only_discovery() -> Response<Body> {
    json_response(
        StatusCode::OK,
        json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [{"name": "pods", "namespaced": true, "kind": "Pod",
                           "verbs": ["get", "list", "watch"]}]}),
    )
}

/// A minimal pod in namespace `ns` at `rv`, as a stub upstream lists or streams it.
pub fn stub_pod(name: &str, rv: u64) -> Value {
    json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()},
           "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
}

/// The test CA (tests/fixtures/tls) that signed [`TlsStub`]'s certificate for 127.0.0.1.
const TEST_CA: &str = include_str!("../fixtures/tls/ca.crt");
const TEST_CERT: &str = include_str!("../fixtures/tls/server.crt");
const TEST_KEY: &str = include_str!("../fixtures/tls/server.key");

/// An HTTPS stub upstream offering `h2` and `http/1.1` through ALPN, as kube-apiserver
/// does, and allowing `max_streams` concurrent streams per HTTP/2 connection
/// (kube-apiserver's `--http2-max-streams-per-connection`, 100 by default). Counts the
/// TCP connections it accepts. Dropping it closes the listener and every connection.
pub struct TlsStub {
    pub addr: SocketAddr,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl TlsStub {
    pub async fn start(h: StubHandler, max_streams: u32) -> TlsStub {
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs = vec![CertificateDer::from_pem_slice(TEST_CERT.as_bytes()).unwrap()];
        let key = PrivateKeyDer::from_pem_slice(TEST_KEY.as_bytes()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind stub");
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(max_streams);
            let builder = Arc::new(builder);
            loop {
                tokio::select! {
                    Ok((tcp, _)) = listener.accept() => {
                        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let (h, acceptor, builder) = (h.clone(), acceptor.clone(), builder.clone());
                        conns.spawn(async move {
                            let Ok(tls) = acceptor.accept(tcp).await else { return };
                            let svc = service_fn(move |req| {
                                let h = h.clone();
                                async move { Ok::<_, Infallible>(h(req).await) }
                            });
                            let _ = builder.serve_connection_with_upgrades(TokioIo::new(tls), svc).await;
                        });
                    }
                    Some(_) = conns.join_next() => {}
                }
            }
        });
        TlsStub {
            addr,
            accepted,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.addr.port())
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// A kube config for this stub that trusts the test CA and has no credentials.
    pub fn kube_config(&self) -> kube::Config {
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        use tokio_rustls::rustls::pki_types::CertificateDer;
        let mut cfg = kube::Config::new(self.url().parse().unwrap());
        let ca = CertificateDer::from_pem_slice(TEST_CA.as_bytes()).unwrap();
        cfg.root_cert = Some(vec![ca.to_vec()]);
        cfg
    }
}

impl Drop for TlsStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A body that never ends and never sends anything: a watch with no events.
pub fn endless_body() -> Body {
    watchgate::body::boxed(http_body_util::StreamBody::new(
        futures_util::stream::pending::<Result<http_body::Frame<Bytes>, Infallible>>(),
    ))
}
