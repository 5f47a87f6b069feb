//! Upgrade tunnels (exec/attach/port-forward): SPDY/3.1 and websocket `v5.channel.k8s.io`
//! round-trip bytes both ways through the gateway until either side closes.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use support::raw::*;
use support::servers::gateway;
use support::stub::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use watchgate::body;

/// An upstream that accepts SPDY and websocket upgrades on `.../exec` and echoes:
/// SPDY bytes upper-cased, websocket messages with their channel byte kept. Anything
/// else is refused with 403, as an apiserver does without the right RBAC.
pub async fn exec_stub() -> Stub {
    Stub::start(handler(
        |mut req: Request<hyper::body::Incoming>| async move {
            let upgrade = req
                .headers()
                .get("upgrade")
                .map(|v| v.to_str().unwrap().to_ascii_lowercase());
            if !req.uri().path().ends_with("/exec") || upgrade.is_none() {
                return Response::builder()
                    .status(403)
                    .header("content-type", "application/json")
                    .body(body::full(r#"{"kind":"Status","code":403}"#))
                    .unwrap();
            }
            let on = hyper::upgrade::on(&mut req);
            match upgrade.as_deref() {
                Some("spdy/3.1") => {
                    tokio::spawn(async move {
                        let mut io = TokioIo::new(on.await.unwrap());
                        let mut buf = [0u8; 4096];
                        loop {
                            match io.read(&mut buf).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => {
                                    buf[..n].make_ascii_uppercase();
                                    if io.write_all(&buf[..n]).await.is_err() {
                                        break;
                                    }
                                }
                            }
                        }
                    });
                    Response::builder()
                        .status(StatusCode::SWITCHING_PROTOCOLS)
                        .header("connection", "Upgrade")
                        .header("upgrade", "SPDY/3.1")
                        .header("x-stream-protocol-version", "v4.channel.k8s.io")
                        .body(body::empty())
                        .unwrap()
                }
                _ => {
                    let key = req.headers()["sec-websocket-key"].as_bytes().to_vec();
                    let proto = req.headers()["sec-websocket-protocol"].clone();
                    tokio::spawn(async move {
                        let io = TokioIo::new(on.await.unwrap());
                        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
                            io,
                            Role::Server,
                            None,
                        )
                        .await;
                        while let Some(Ok(msg)) = ws.next().await {
                            match msg {
                                Message::Binary(b) => {
                                    let mut out = b.to_vec();
                                    out[1..].make_ascii_uppercase();
                                    if ws.send(Message::Binary(out.into())).await.is_err() {
                                        break;
                                    }
                                }
                                Message::Close(_) => break,
                                _ => {}
                            }
                        }
                    });
                    Response::builder()
                        .status(StatusCode::SWITCHING_PROTOCOLS)
                        .header("connection", "Upgrade")
                        .header("upgrade", "websocket")
                        .header("sec-websocket-accept", derive_accept_key(&key))
                        .header("sec-websocket-protocol", proto)
                        .body(body::empty())
                        .unwrap()
                }
            }
        },
    ))
    .await
}

const EXEC: &str =
    "/api/v1/namespaces/default/pods/web-0/exec?command=sh&stdin=true&stdout=true&tty=true";

#[tokio::test]
async fn spdy_tunnel_round_trips_bytes_both_ways() {
    let stub = exec_stub().await;
    let gw = gateway(&stub.url()).await;
    let mut conn = TcpStream::connect(gw.addr()).await.unwrap();
    conn.write_all(
        format!(
            "POST {EXEC} HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
             X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n\
             Content-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let head = read_head(&mut conn).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");
    assert!(head.contains("connection: upgrade"), "{head}");
    assert!(
        head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );

    // Several exchanges, including bytes that are not text.
    for msg in [
        &b"echo hello\n"[..],
        b"ls -l /\n",
        &[0x80, 0x00, 0x03, 0xff, b'a'],
    ] {
        conn.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        tokio::time::timeout(Duration::from_secs(5), conn.read_exact(&mut got))
            .await
            .expect("echo within 5s")
            .unwrap();
        assert_eq!(got, msg.to_ascii_uppercase());
    }
    // The client closes its side: the upstream sees EOF, closes, and so does the tunnel.
    conn.shutdown().await.unwrap();
    let rest = read_to_close(&mut conn).await;
    assert_eq!(rest, "");
}

#[tokio::test]
async fn websocket_tunnel_round_trips_channel_frames() {
    let stub = exec_stub().await;
    let gw = gateway(&stub.url()).await;
    let mut req = format!("ws://{}{EXEC}", gw.addr())
        .into_client_request()
        .unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "v5.channel.k8s.io".parse().unwrap(),
    );
    let tcp = TcpStream::connect(gw.addr()).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.status(), 101);
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "v5.channel.k8s.io"
    );
    assert_eq!(resp.headers()["x-watchgate-source"], "upstream");

    for (channel, text) in [(0u8, "date\n"), (0, "uname -a\n"), (4, "resize")] {
        let mut frame = vec![channel];
        frame.extend_from_slice(text.as_bytes());
        ws.send(Message::Binary(frame.into())).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), ws.next())
            .await
            .expect("echo within 5s")
            .unwrap()
            .unwrap();
        let mut want = vec![channel];
        want.extend_from_slice(text.to_ascii_uppercase().as_bytes());
        assert_eq!(got, Message::Binary(want.into()));
    }
    ws.close(None).await.unwrap();
    // The close handshake completes through the tunnel and the stream ends.
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
    assert!(end.is_ok(), "websocket did not end after close");
}

#[tokio::test]
async fn a_refused_upgrade_is_forwarded_as_an_ordinary_response() {
    let stub = exec_stub().await;
    let gw = gateway(&stub.url()).await;
    let mut send = h1(gw.addr()).await;
    let resp = send
        .send_request(
            Request::post("/api/v1/namespaces/default/pods/web-0/attach")
                .header("host", "gw")
                .header("connection", "Upgrade")
                .header("upgrade", "SPDY/3.1")
                .body(body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    assert!(!resp.headers().contains_key("upgrade"));
    let got = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(got, r#"{"kind":"Status","code":403}"#);
}
