//! Low-level clients for the gateway tests: one hyper connection that sends requests
//! exactly as built (no added headers), or raw bytes on a TCP stream.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use watchgate::body::Body;

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

/// `GET path` with nothing but a Host header, as the tests' hand-built requests are.
pub fn get_request(path: &str) -> Request<Body> {
    Request::get(path)
        .header("host", "x")
        .body(watchgate::body::empty())
        .unwrap()
}

/// [`get_request`] on a fresh HTTP/1.1 connection; returns at the response head, so the
/// body can be read as it streams (a watch, a follow).
pub async fn h1_get(addr: SocketAddr, path: &str) -> Response<Incoming> {
    h1(addr)
        .await
        .send_request(get_request(path))
        .await
        .unwrap()
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
