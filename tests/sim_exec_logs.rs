//! `pods/exec` (WebSocket v5/v4 and the raw SPDY echo) and `pods/log` (plain, tail,
//! timestamps, follow), over real sockets, plus kubectl `exec -i … cat` and `logs -f`.

mod support;

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use support::objects::pod;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use watchgate::sim::resources::find;
use watchgate::sim::{start, Mutation, SimConfig, SimHandle};

const WAIT: Duration = Duration::from_secs(10);

async fn sim_with_pods() -> SimHandle {
    let h = start(SimConfig::default()).await.expect("sim starts");
    let pods = find("", "v1", "pods").unwrap();
    for (name, containers) in [
        ("p1", json!([{"name": "app", "image": "x"}])),
        (
            "multi",
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]),
        ),
    ] {
        let obj = pod("ns1", name)
            .running_on("node-1")
            .merge(json!({"spec": {"containers": containers}}))
            .build();
        h.store()
            .mutate(pods, "ns1", name, |_| Ok(Mutation::Put(obj)))
            .unwrap();
    }
    h
}

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<TcpStream>>;

async fn ws_exec(h: &SimHandle, query: &str, protocols: &str) -> (Ws, String) {
    let url = format!(
        "ws://{}/api/v1/namespaces/ns1/pods/p1/exec?{query}",
        h.addr()
    );
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("sec-websocket-protocol", protocols.parse().unwrap());
    let (ws, resp) = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(req))
        .await
        .expect("handshake in time")
        .expect("websocket upgrade");
    assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
    let proto = resp.headers()["sec-websocket-protocol"]
        .to_str()
        .unwrap()
        .to_string();
    (ws, proto)
}

/// The next binary message as (channel, payload); None when the socket closes.
async fn next_frame(ws: &mut Ws) -> Option<(u8, Vec<u8>)> {
    loop {
        let msg = tokio::time::timeout(WAIT, ws.next())
            .await
            .expect("message in time")?;
        match msg.expect("websocket ok") {
            Message::Binary(b) => return Some((b[0], b[1..].to_vec())),
            Message::Close(_) => return None,
            _ => continue,
        }
    }
}

fn stdin(data: &[u8]) -> Message {
    let mut v = vec![0u8];
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

#[tokio::test]
async fn websocket_v5_cat_echoes_until_stdin_closes() {
    let h = sim_with_pods().await;
    let (mut ws, proto) = ws_exec(
        &h,
        "command=cat&stdin=true&stdout=true&stderr=true",
        "v5.channel.k8s.io, v4.channel.k8s.io",
    )
    .await;
    assert_eq!(proto, "v5.channel.k8s.io");
    ws.send(stdin(b"hello\n")).await.unwrap();
    assert_eq!(next_frame(&mut ws).await, Some((1, b"hello\n".to_vec())));
    ws.send(stdin(b"world\n")).await.unwrap();
    assert_eq!(next_frame(&mut ws).await, Some((1, b"world\n".to_vec())));
    // v5 stdin half-close: [255, 0].
    ws.send(Message::Binary(vec![255u8, 0].into()))
        .await
        .unwrap();
    let (ch, status) = next_frame(&mut ws).await.expect("status frame");
    assert_eq!(ch, 3);
    assert_eq!(
        serde_json::from_slice::<Value>(&status).unwrap(),
        json!({"metadata": {}, "status": "Success"})
    );
    assert_eq!(
        next_frame(&mut ws).await,
        None,
        "server closes after the status"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn websocket_v4_cat_echoes_until_socket_closes() {
    let h = sim_with_pods().await;
    let (mut ws, proto) = ws_exec(
        &h,
        "command=cat&stdin=true&stdout=true",
        "v4.channel.k8s.io",
    )
    .await;
    assert_eq!(proto, "v4.channel.k8s.io");
    let big = vec![b'x'; 100_000];
    ws.send(stdin(&big)).await.unwrap();
    assert_eq!(next_frame(&mut ws).await, Some((1, big)));
    ws.close(None).await.unwrap();
    h.shutdown().await;
}

#[tokio::test]
async fn websocket_commands_report_exit_status() {
    let h = sim_with_pods().await;
    let (mut ws, _) = ws_exec(
        &h,
        "command=echo&command=hello&command=world&stdout=true",
        "v5.channel.k8s.io",
    )
    .await;
    assert_eq!(
        next_frame(&mut ws).await,
        Some((1, b"hello world\n".to_vec()))
    );
    let (ch, st) = next_frame(&mut ws).await.unwrap();
    assert_eq!(ch, 3);
    assert_eq!(
        serde_json::from_slice::<Value>(&st).unwrap()["status"],
        "Success"
    );
    assert_eq!(next_frame(&mut ws).await, None);

    let (mut ws, _) = ws_exec(&h, "command=false&stdout=true", "v5.channel.k8s.io").await;
    let (ch, st) = next_frame(&mut ws).await.unwrap();
    assert_eq!(ch, 3);
    let st: Value = serde_json::from_slice(&st).unwrap();
    assert_eq!(st["status"], "Failure");
    assert_eq!(st["reason"], "NonZeroExitCode");
    assert_eq!(
        st["details"]["causes"],
        json!([{"reason": "ExitCode", "message": "1"}])
    );
    h.shutdown().await;
}

async fn http_get(h: &SimHandle, path: &str) -> (StatusCode, Bytes) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let resp = client
        .request(
            Request::get(format!("{}{path}", h.url()))
                .body(Empty::new())
                .unwrap(),
        )
        .await
        .unwrap();
    let s = resp.status();
    (s, resp.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test]
async fn exec_errors_match_the_apiserver() {
    let h = sim_with_pods().await;
    let cases = [
        (
            "/api/v1/namespaces/ns1/pods/p1/exec?command=cat&stdout=true",
            400,
            "Upgrade request required",
        ),
        (
            "/api/v1/namespaces/ns1/pods/nope/exec?command=cat&stdout=true",
            404,
            "pods \"nope\" not found",
        ),
        (
            "/api/v1/namespaces/ns1/pods/multi/exec?command=cat&stdout=true",
            400,
            "a container name must be specified for pod multi, choose one of: [a b]",
        ),
        (
            "/api/v1/namespaces/ns1/pods/p1/exec?command=cat&stdout=true&container=zzz",
            400,
            "container zzz is not valid for pod p1",
        ),
    ];
    for (path, code, msg) in cases {
        let (s, b) = http_get(&h, path).await;
        assert_eq!(s.as_u16(), code, "{path}");
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["message"], msg, "{path}");
    }
    h.shutdown().await;
}

#[tokio::test]
async fn spdy_upgrade_is_a_raw_echo_tunnel() {
    let h = sim_with_pods().await;
    let mut s = TcpStream::connect(h.addr()).await.unwrap();
    s.write_all(
        b"POST /api/v1/namespaces/ns1/pods/p1/exec?command=cat&stdin=true&stdout=true HTTP/1.1\r\n\
          Host: sim\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\
          X-Stream-Protocol-Version: v4.channel.k8s.io\r\nX-Stream-Protocol-Version: v3.channel.k8s.io\r\n\
          Content-Length: 0\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        tokio::time::timeout(WAIT, s.read_exact(&mut b))
            .await
            .expect("response head in time")
            .unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap().to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: spdy/3.1"), "{head}");
    assert!(
        head.contains("x-stream-protocol-version: v4.channel.k8s.io"),
        "{head}"
    );
    let payload: Vec<u8> = (0..=255u8).cycle().take(64 * 1024).collect();
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
        payload
    });
    let mut back = Vec::new();
    tokio::time::timeout(WAIT, r.read_to_end(&mut back))
        .await
        .expect("echo ends after our half-close")
        .unwrap();
    assert_eq!(back, writer.await.unwrap());
    h.shutdown().await;
}

#[tokio::test]
async fn logs_plain_tail_timestamps_and_errors() {
    let h = sim_with_pods().await;
    let (s, b) = http_get(&h, "/api/v1/namespaces/ns1/pods/p1/log").await;
    assert_eq!(s, StatusCode::OK);
    let text = String::from_utf8(b.to_vec()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 20);
    assert_eq!(lines[0], "p1/app line 0: GET /healthz 200 OK");
    assert_eq!(lines[19], "p1/app line 19: GET /healthz 200 OK");

    let (_, b) = http_get(&h, "/api/v1/namespaces/ns1/pods/p1/log?tailLines=2").await;
    assert_eq!(
        String::from_utf8(b.to_vec()).unwrap(),
        "p1/app line 18: GET /healthz 200 OK\np1/app line 19: GET /healthz 200 OK\n"
    );
    let (_, b) = http_get(
        &h,
        "/api/v1/namespaces/ns1/pods/p1/log?tailLines=1&timestamps=true",
    )
    .await;
    let line = String::from_utf8(b.to_vec()).unwrap();
    let (ts, rest) = line.split_once(' ').unwrap();
    assert!(ts.parse::<jiff::Timestamp>().is_ok(), "{ts}");
    assert_eq!(rest, "p1/app line 19: GET /healthz 200 OK\n");
    let (_, b) = http_get(&h, "/api/v1/namespaces/ns1/pods/p1/log?limitBytes=6").await;
    assert_eq!(&b[..], b"p1/app");
    let (_, b) = http_get(
        &h,
        "/api/v1/namespaces/ns1/pods/multi/log?container=b&tailLines=1",
    )
    .await;
    assert_eq!(&b[..], b"multi/b line 19: GET /healthz 200 OK\n");

    for (path, code, msg) in [
        (
            "/api/v1/namespaces/ns1/pods/nope/log",
            404,
            "pods \"nope\" not found",
        ),
        (
            "/api/v1/namespaces/ns1/pods/multi/log",
            400,
            "a container name must be specified for pod multi, choose one of: [a b]",
        ),
        (
            "/api/v1/namespaces/ns1/pods/p1/log?container=zzz",
            400,
            "container zzz is not valid for pod p1",
        ),
        (
            "/api/v1/namespaces/ns1/pods/p1/log?previous=true",
            400,
            "previous terminated container \"app\" in pod \"p1\" not found",
        ),
    ] {
        let (s, b) = http_get(&h, path).await;
        assert_eq!(s.as_u16(), code, "{path}");
        assert_eq!(
            serde_json::from_slice::<Value>(&b).unwrap()["message"],
            msg,
            "{path}"
        );
    }
    let (s, b) = http_get(&h, "/api/v1/namespaces/ns1/pods/p1/log?tailLines=-1").await;
    assert_eq!(s.as_u16(), 422);
    assert_eq!(
        serde_json::from_slice::<Value>(&b).unwrap()["reason"],
        "Invalid"
    );
    h.shutdown().await;
}

#[tokio::test]
async fn logs_follow_streams_new_lines() {
    let h = sim_with_pods().await;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let resp = client
        .request(
            Request::get(format!(
                "{}/api/v1/namespaces/ns1/pods/p1/log?follow=true&tailLines=1",
                h.url()
            ))
            .body(Empty::new())
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "text/plain");
    let mut body = resp.into_body();
    let mut text = String::new();
    // History (line 19) first, then lines 20 and 21 as they are "written".
    while text.lines().count() < 3 {
        let frame = tokio::time::timeout(WAIT, body.frame())
            .await
            .expect("a log line within 10s")
            .expect("stream still open")
            .unwrap();
        if let Ok(d) = frame.into_data() {
            text.push_str(std::str::from_utf8(&d).unwrap());
        }
    }
    assert_eq!(
        text,
        "p1/app line 19: GET /healthz 200 OK\np1/app line 20: GET /healthz 200 OK\np1/app line 21: GET /healthz 200 OK\n"
    );
    drop(body);
    h.shutdown().await;
}

#[tokio::test]
async fn kubectl_exec_cat_and_logs_follow() {
    let h = sim_with_pods().await;
    let mut child = tokio::process::Command::new(support::tools::kubectl())
        .args([
            "--server",
            &h.url(),
            "exec",
            "-i",
            "-n",
            "ns1",
            "p1",
            "--",
            "cat",
        ])
        .env("KUBECONFIG", "/dev/null")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"hello\nworld\n").await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("kubectl exec ends when stdin closes")
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"hello\nworld\n");

    let out = tokio::process::Command::new(support::tools::kubectl())
        .args([
            "--server",
            &h.url(),
            "exec",
            "-n",
            "ns1",
            "p1",
            "--",
            "false",
        ])
        .env("KUBECONFIG", "/dev/null")
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "kubectl maps the ExitCode cause"
    );

    let mut child = tokio::process::Command::new(support::tools::kubectl())
        .args([
            "--server",
            &h.url(),
            "logs",
            "-f",
            "--tail=1",
            "-n",
            "ns1",
            "p1",
        ])
        .env("KUBECONFIG", "/dev/null")
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for n in 19..=20 {
        let line = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("kubectl logs -f prints in time")
            .unwrap()
            .unwrap();
        assert_eq!(line, format!("p1/app line {n}: GET /healthz 200 OK"));
    }
    child.kill().await.unwrap();
    h.shutdown().await;
}
