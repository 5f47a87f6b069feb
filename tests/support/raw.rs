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

/// Write raw bytes and read every byte the server answers until it closes (bounded).
pub async fn raw_exchange_bytes(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let _ = stream.write_all(request).await;
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut out)).await;
    assert!(read.is_ok(), "server did not answer and close within 10s");
    out
}

/// An HTTP/1.1 response as it came on the wire: its head, and for a chunked body the
/// size of every chunk (the last, empty one left out) and the body they make.
pub struct Framed {
    pub head: String,
    pub chunks: Vec<usize>,
    pub body: Vec<u8>,
}

/// Splits a raw response (read to its close) into head and chunks; panics on a body that
/// is not chunked or on bad framing.
pub fn unchunk(raw: &[u8]) -> Framed {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8(raw[..end + 4].to_vec()).unwrap();
    let mut rest = &raw[end + 4..];
    let (mut chunks, mut body) = (Vec::new(), Vec::new());
    loop {
        let line = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&rest[..line]).unwrap(), 16)
            .expect("a hex chunk size");
        rest = &rest[line + 2..];
        if size == 0 {
            assert_eq!(rest, b"\r\n", "the end of a chunked body");
            return Framed { head, chunks, body };
        }
        body.extend_from_slice(&rest[..size]);
        assert_eq!(&rest[size..size + 2], b"\r\n", "a chunk's end");
        rest = &rest[size + 2..];
        chunks.push(size);
    }
}
