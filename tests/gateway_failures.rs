//! Failure handling: an unreachable or broken upstream yields a 503 metav1.Status quickly
//! and the gateway recovers when the upstream returns; malformed or abandoned requests
//! get the right answer and never disturb other clients.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use support::raw::*;
use support::servers::gateway;
use support::stub::*;
use support::wait::wait_for;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use watchgate::body;

fn ok_stub_handler() -> StubHandler {
    handler(|req: Request<hyper::body::Incoming>| async move {
        let path = req.uri().path_and_query().unwrap().to_string();
        // Read the whole body so truncated uploads surface as an error upstream too.
        let read = req.into_body().collect().await;
        let (code, len) = match read {
            Ok(b) => (200, b.to_bytes().len()),
            Err(_) => (499, 0),
        };
        Response::builder()
            .status(code)
            .header("x-body-len", len)
            .header("content-type", "application/json")
            .body(body::full(format!("{{\"path\":{path:?}}}")))
            .unwrap()
    })
}

fn assert_unavailable_status(parts: &http::response::Parts, bytes: &Bytes) {
    assert_eq!(parts.status, 503);
    assert_eq!(parts.headers["content-type"], "application/json");
    let v: serde_json::Value = serde_json::from_slice(bytes).expect("a JSON Status, not HTML");
    assert_eq!(v["kind"], "Status");
    assert_eq!(v["apiVersion"], "v1");
    assert_eq!(v["status"], "Failure");
    assert_eq!(v["reason"], "ServiceUnavailable");
    assert_eq!(v["code"], 503);
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .starts_with("the server is currently unable to handle the request"),
        "{v}"
    );
}

#[tokio::test]
async fn upstream_down_gives_503_status_quickly_and_recovers_without_restart() {
    let addr = dead_addr().await;
    let gw = gateway(&format!("http://{addr}")).await;

    let started = Instant::now();
    let (parts, bytes) = get(gw.addr(), "/api/v1/pods").await;
    assert_unavailable_status(&parts, &bytes);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    // A synthesized error is not an upstream answer: the gateway made it.
    assert_eq!(parts.headers["x-watchgate-source"], "gateway");

    // The upstream comes back on the same address.
    let stub = Stub::start_on(addr, ok_stub_handler()).await;
    let (parts, bytes) = get(gw.addr(), "/api/v1/pods?limit=5").await;
    assert_eq!(parts.status, 200);
    assert_eq!(bytes, r#"{"path":"/api/v1/pods?limit=5"}"#);

    // And goes away again, taking its pooled connections with it.
    drop(stub);
    let (parts, bytes) = wait_for(
        "503 once the upstream is gone",
        Duration::from_secs(5),
        || get(gw.addr(), "/api/v1/pods"),
        |(parts, _)| parts.status == 503,
    )
    .await;
    assert_unavailable_status(&parts, &bytes);
    // The admin listener kept answering throughout.
    assert_eq!(get(gw.admin_addr(), "/healthz").await.0.status, 200);
}

/// The gateway's own Statuses are written as the apiserver's `ErrorNegotiated` writes
/// errors: protobuf to client-go's typed clients, JSON to JSON clients, indented JSON when
/// nothing in Accept is acceptable.
#[tokio::test]
async fn the_gateways_own_statuses_are_in_the_negotiated_encoding() {
    let addr = dead_addr().await;
    let gw = gateway(&format!("http://{addr}")).await;
    let http = support::Http::new(&gw.url());
    let ask = |accept: &'static str| {
        let http = &http;
        async move {
            http.request(
                http::Method::GET,
                "/api/v1/namespaces/a/configmaps/x",
                &[("accept", accept)],
                Bytes::new(),
            )
            .await
        }
    };
    let json = ask("application/json").await;
    assert_eq!(json.status, 503);
    assert_eq!(json.headers["content-type"], "application/json");
    let pb = ask("application/vnd.kubernetes.protobuf,application/json").await;
    assert_eq!(pb.status, 503);
    assert_eq!(
        pb.headers["content-type"],
        "application/vnd.kubernetes.protobuf"
    );
    let decoded = watchgate::proto::decode_object(&pb.body).expect("a protobuf Status");
    let decoded: serde_json::Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(decoded, json.json());
    let table_only = ask("application/json;as=Table;g=meta.k8s.io;v=v1").await;
    assert_eq!(table_only.status, 503);
    assert!(
        table_only.body.starts_with(b"{\n  \"kind\": \"Status\""),
        "{:?}",
        table_only.text()
    );
}

#[tokio::test]
async fn a_broken_upstream_gives_503_status() {
    // Accepts, answers with something that is not HTTP, and hangs up.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.6\r\n\r\n").await;
        }
    });
    let gw = gateway(&format!("http://{addr}")).await;
    let (parts, bytes) = get(gw.addr(), "/api").await;
    assert_unavailable_status(&parts, &bytes);
}

#[tokio::test]
async fn an_upstream_that_never_answers_gives_503_status_at_the_response_timeout() {
    // Accepts connections and reads requests, but never says a word.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let mut cfg =
        watchgate::config::GatewayConfig::for_upstream_url(&format!("http://{addr}")).unwrap();
    cfg.upstream_response_timeout = Duration::from_millis(300);
    cfg.cache = None;
    let gw = watchgate::server::Gateway::start(cfg).await.unwrap();
    let started = Instant::now();
    let (parts, bytes) = get(gw.addr(), "/api/v1/namespaces/a/configmaps/c").await;
    assert_unavailable_status(&parts, &bytes);
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("no response from the upstream"),
        "{v}"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// One raw request and the status line the gateway must answer it with.
async fn expect_status(gw: std::net::SocketAddr, raw: &[u8], want: &str) -> String {
    let answer = raw_exchange(gw, raw).await;
    assert!(
        answer.starts_with(want),
        "request {:?}\nwanted {want:?}, got {answer:?}",
        String::from_utf8_lossy(&raw[..raw.len().min(80)])
    );
    answer
}

#[tokio::test]
async fn malformed_and_abandoned_requests_are_answered_and_harm_no_one() {
    let stub = Stub::start(ok_stub_handler()).await;
    let gw = gateway(&stub.url()).await;
    let addr = gw.addr();

    // Bad request line.
    expect_status(addr, b"GARBAGE\r\n\r\n", "HTTP/1.1 400").await;
    expect_status(addr, b"GET /api HTTP/9.9\r\nHost: x\r\n\r\n", "HTTP/1.1 4").await;
    // Header section larger than the server accepts.
    let mut huge = b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 2 * 1024 * 1024));
    huge.extend_from_slice(b"\r\n\r\n");
    expect_status(addr, &huge, "HTTP/1.1 431").await;
    // Not a path: asterisk-form and CONNECT get Status answers from the gateway itself.
    let a = expect_status(
        addr,
        b"OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "HTTP/1.1 400",
    )
    .await;
    assert!(a.contains("\"reason\":\"BadRequest\""), "{a}");
    let a = expect_status(
        addr,
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n",
        "HTTP/1.1 405",
    )
    .await;
    assert!(a.contains("\"reason\":\"MethodNotAllowed\""), "{a}");
    // Odd but valid paths are the apiserver's to judge: forwarded verbatim.
    let a = expect_status(
        addr,
        b"GET /api/v1/namespaces/%zz/pods/..%2f..%2fetc?labelSelector=%%%%&x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        "HTTP/1.1 200",
    )
    .await;
    assert!(
        a.ends_with(r#"{"path":"/api/v1/namespaces/%zz/pods/..%2f..%2fetc?labelSelector=%%%%&x"}"#),
        "{a}"
    );

    // A body cut short: Content-Length promises 100 bytes, the client sends 9 and leaves.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"short\"")
            .await
            .unwrap();
        drop(s);
    }
    // A client that vanishes inside its request head.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /api/v1/pods HTTP/1.1\r\nHost: x\r\nAcc")
            .await
            .unwrap();
        drop(s);
    }
    // Both Content-Length and chunked (request-smuggling material): chunked wins and the
    // bogus Content-Length is not forwarded, so the upstream reads exactly "hello".
    let a = expect_status(
        addr,
        b"PUT /api/v1/namespaces/default/configmaps/c HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "HTTP/1.1 200",
    )
    .await;
    assert!(a.contains("x-body-len: 5\r\n"), "{a}");
    // A body that breaks off mid-stream while the client still listens: the upload to the
    // upstream is aborted and the gateway answers with a BadRequest Status itself.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"PUT /api/v1/namespaces/default/configmaps/c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\n")
            .await
            .unwrap();
        let answer = read_to_close(&mut s).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains("\"reason\":\"BadRequest\""), "{answer}");
        assert!(
            answer.contains("the request body ended before it was complete"),
            "{answer}"
        );
    }
    // Garbage on an upgraded connection (the websocket stub closes on it).
    {
        let up = Stub::start(handler(
            |mut req: Request<hyper::body::Incoming>| async move {
                let on = hyper::upgrade::on(&mut req);
                tokio::spawn(async move {
                    if let Ok(io) = on.await {
                        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                            hyper_util::rt::TokioIo::new(io),
                            tokio_tungstenite::tungstenite::protocol::Role::Server,
                            None,
                        )
                        .await;
                        // Protocol error on garbage: the stream ends and the socket closes.
                        while let Some(Ok(_)) = futures_util::StreamExt::next(&mut ws).await {}
                    }
                });
                Response::builder()
                    .status(101)
                    .header("connection", "Upgrade")
                    .header("upgrade", "websocket")
                    .body(body::empty())
                    .unwrap()
            },
        ))
        .await;
        let gw2 = gateway(&up.url()).await;
        let mut s = TcpStream::connect(gw2.addr()).await.unwrap();
        s.write_all(b"GET /api/v1/namespaces/a/pods/p/exec HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            .await
            .unwrap();
        let head = read_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        s.write_all(&[0xff; 64]).await.unwrap();
        s.write_all(b"\x00\x01 not a websocket frame")
            .await
            .unwrap();
        // The upstream rejects the garbage and closes; the tunnel follows.
        let _ = read_to_close(&mut s).await;
        // gw2 still serves.
        let (parts, _) = get(gw2.addr(), "/api/v1/pods").await;
        assert_eq!(
            parts.status, 101,
            "the upgrade stub answers everything with 101"
        );
    }

    // After all of it, the gateway serves others normally.
    for i in 0..5 {
        let (parts, bytes) = get(addr, &format!("/api/v1/pods?i={i}")).await;
        assert_eq!(parts.status, 200);
        assert_eq!(bytes, format!("{{\"path\":\"/api/v1/pods?i={i}\"}}"));
    }
}

#[tokio::test]
async fn a_client_leaving_a_watch_releases_the_upstream_stream() {
    let (stub, mut rx_slot) = channel_stub(None).await;
    // Forwarding is under test: a caching gateway would hold the watch for its cache's
    // sync, which the stub never completes.
    let gw = support::servers::forwarding_gateway(&stub.url()).await;
    let mut send = h1(gw.addr()).await;
    let resp = send
        .send_request(get_request("/api/v1/pods?watch=1"))
        .await
        .unwrap();
    let upstream = rx_slot.recv().await.unwrap();
    upstream
        .send(Bytes::from_static(b"{\"type\":\"ADDED\"}\n"))
        .await
        .unwrap();
    let mut body = resp.into_body();
    assert!(body.frame().await.is_some());
    // The client goes away mid-stream.
    drop(body);
    drop(send);
    // The gateway drops its upstream request, which the stub sees as a closed stream.
    tokio::time::timeout(Duration::from_secs(5), upstream.closed())
        .await
        .expect("upstream stream released after the client left");
}
