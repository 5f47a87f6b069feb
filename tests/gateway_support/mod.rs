//! Helpers for the gateway tests: in-process stub upstreams, a gateway in front of them,
//! and low-level clients that send exactly the bytes a test asks for.
#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use watchgate::body::Body;
use watchgate::config::GatewayConfig;
use watchgate::server::{Gateway, GatewayHandle};

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
    task: tokio::task::JoinHandle<()>,
}

impl Stub {
    pub async fn start(h: StubHandler) -> Stub {
        Self::start_on("127.0.0.1:0".parse().unwrap(), h).await
    }

    pub async fn start_on(addr: SocketAddr, h: StubHandler) -> Stub {
        let listener = TcpListener::bind(addr).await.expect("bind stub");
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            loop {
                tokio::select! {
                    Ok((stream, _)) = listener.accept() => {
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
        Stub { addr, task }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A gateway on free loopback ports in front of `upstream_url`.
pub async fn gateway(upstream_url: &str) -> GatewayHandle {
    Gateway::start(GatewayConfig::for_upstream_url(upstream_url).unwrap())
        .await
        .expect("gateway starts")
}

/// An HTTP/1.1 connection that sends requests exactly as built (no added headers).
pub async fn h1(addr: SocketAddr) -> hyper::client::conn::http1::SendRequest<Body> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    send
}

/// An HTTP/2 prior-knowledge (h2c) connection.
pub async fn h2(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Body> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// GET `path` on a fresh connection; the whole response.
pub async fn get(addr: SocketAddr, path: &str) -> (http::response::Parts, Bytes) {
    let mut send = h1(addr).await;
    let req = Request::get(path)
        .header("host", addr.to_string())
        .body(watchgate::body::empty())
        .unwrap();
    let resp = send.send_request(req).await.expect("response");
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts, bytes)
}

/// Write raw bytes and read everything the server answers until it closes (bounded: a
/// test that hangs here fails with a message instead). Well-formed requests should say
/// `Connection: close`; the write side stays open because, like Go's net/http, hyper
/// treats a half-closed client as gone.
pub async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    read_to_close(&mut stream).await
}

pub async fn read_to_close(stream: &mut TcpStream) -> String {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(read.is_ok(), "server did not answer and close within 10s");
    String::from_utf8_lossy(&out).into_owned()
}

/// Read an HTTP/1.1 response head (up to the blank line) from a raw stream.
pub async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    tokio::time::timeout(Duration::from_secs(10), async {
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.expect("read head");
            assert!(
                n > 0,
                "connection closed inside the response head: {head:?}"
            );
            head.push(byte[0]);
        }
    })
    .await
    .expect("response head within 10s");
    String::from_utf8(head).unwrap()
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

/// A free loopback port with nothing listening on it.
pub async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}
