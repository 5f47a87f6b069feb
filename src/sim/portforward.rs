//! `pods/{name}/portforward`: kubectl's port-forward protocol (`portforward.k8s.io`), with
//! a built-in responder on every port the pod's containers declare.
//!
//! Two ways in, as kube-apiserver offers them (docs/simulator.md, "port-forward"):
//!
//! - **WebSocket** (kubectl 1.31+ by default, `PortForwardWebsockets`): a GET upgrading
//!   to `websocket` with subprotocol `SPDY/3.1+portforward.k8s.io`. The WebSocket's
//!   binary messages then carry a SPDY byte stream (client-go's `TunnelingConnection`),
//!   which the apiserver's stream tunnel hands to the kubelet unchanged.
//! - **SPDY** (kubectl's fallback when the WebSocket upgrade fails, or
//!   `KUBECTL_PORT_FORWARD_WEBSOCKETS=false`): a POST upgrading to `SPDY/3.1` with
//!   `X-Stream-Protocol-Version: portforward.k8s.io`.
//!
//! Either way the client opens, per forwarded connection, an `error` stream and a `data`
//! stream with headers `streamType`, `port` and `requestID`; the kubelet
//! (`pkg/kubelet/cri/streaming/portforward/httpstream.go`) accepts each with an empty
//! SYN_REPLY, pairs them by `requestID`, connects the data stream to the port, writes any
//! failure as text on the error stream, and half-closes both when the connection ends.
//!
//! The responder stands in for the container: if the first bytes are an HTTP/1.x request
//! it answers each request with `200 OK` and a line naming the pod, container and port (so
//! `curl localhost:PORT` works); anything else is echoed back until the client half-closes.
//! A port no container declares fails the way containerd's does (connection refused).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderValue, Request, Response, StatusCode};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use super::spdy::{self, Frame};
use crate::body::{self, Body};
use crate::status::Status;

/// The one port-forward protocol the kubelet speaks.
pub const PROTOCOL: &str = "portforward.k8s.io";
/// client-go's prefix for SPDY tunnelled through a WebSocket (`constants.WebsocketsSPDYTunnelingPrefix`).
pub const TUNNEL_PREFIX: &str = "SPDY/3.1+";
/// Streams a session may hold open at once; more are refused (RST_STREAM).
const MAX_STREAMS: usize = 256;
/// Chunks buffered for a stream whose forwarder has not taken them (backpressure beyond).
const STREAM_BUFFER: usize = 16;
/// Frames waiting to be written to the client.
const OUT_BUFFER: usize = 64;
/// The largest DATA frame written (client-go copies 32 KiB at a time too).
const MAX_DATA: usize = 32 * 1024;

/// What the responder knows about the pod.
#[derive(Debug, Clone)]
struct Pod {
    namespace: String,
    name: String,
    uid: String,
    /// Declared container ports: (port, container name).
    ports: Vec<(u16, String)>,
}

impl Pod {
    fn of(pod: &Value) -> Self {
        let m = &pod["metadata"];
        let mut ports = Vec::new();
        for c in pod["spec"]["containers"].as_array().into_iter().flatten() {
            let cname = c["name"].as_str().unwrap_or("").to_string();
            for p in c["ports"].as_array().into_iter().flatten() {
                if let Some(port) = p["containerPort"]
                    .as_u64()
                    .and_then(|p| u16::try_from(p).ok())
                {
                    ports.push((port, cname.clone()));
                }
            }
        }
        Self {
            namespace: m["namespace"].as_str().unwrap_or("").to_string(),
            name: m["name"].as_str().unwrap_or("").to_string(),
            uid: m["uid"].as_str().unwrap_or("").to_string(),
            ports,
        }
    }
}

fn header_values(headers: &http::HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn upgrades_to(headers: &http::HeaderMap, proto: &str) -> bool {
    header_values(headers, "connection")
        .iter()
        .any(|c| c.eq_ignore_ascii_case("upgrade"))
        && header_values(headers, "upgrade")
            .iter()
            .any(|u| u.eq_ignore_ascii_case(proto))
}

/// Answers a port-forward request for `pod` (already found and checked by the router).
pub fn handle<B: Send + 'static>(mut req: Request<B>, pod: &Value) -> Response<Body> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    // registry/core/pod `PortForwardLocation`.
    if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        return Status::bad_request(format!("pod {name} does not have a host assigned"))
            .into_response();
    }
    let pod = Pod::of(pod);
    let headers = req.headers().clone();
    if upgrades_to(&headers, "websocket") {
        let Some(key) = headers.get("sec-websocket-key") else {
            return Status::bad_request("missing Sec-WebSocket-Key").into_response();
        };
        let wanted = format!("{TUNNEL_PREFIX}{PROTOCOL}");
        let offered = header_values(&headers, "sec-websocket-protocol");
        if !offered.contains(&wanted) {
            return Status::bad_request(format!(
                "unable to upgrade: requested protocols {offered:?} not supported, supported: [{wanted}]"
            ))
            .into_response();
        }
        let accept = derive_accept_key(key.as_bytes());
        let on_upgrade = crate::upgrade::on(&mut req);
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(io) => {
                    let ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
                    serve_websocket(ws, pod).await;
                }
                Err(e) => tracing::debug!(error = %e, "port-forward upgrade failed"),
            }
        });
        let mut resp = switching("websocket");
        let h = resp.headers_mut();
        h.insert(
            "sec-websocket-accept",
            HeaderValue::from_str(&accept).expect("base64 is a valid header"),
        );
        h.insert(
            "sec-websocket-protocol",
            HeaderValue::from_str(&wanted).expect("a valid header"),
        );
        return resp;
    }
    if upgrades_to(&headers, "SPDY/3.1") {
        // httpstream.Handshake: a client that names protocols must name ours.
        let offered = header_values(&headers, "x-stream-protocol-version");
        if !offered.is_empty() && !offered.iter().any(|p| p == PROTOCOL) {
            let mut resp = Response::new(body::full(format!(
                "unable to upgrade: unable to negotiate protocol: client supports {offered:?}, server supports [{PROTOCOL}]\n"
            )));
            *resp.status_mut() = StatusCode::FORBIDDEN;
            return resp;
        }
        let on_upgrade = crate::upgrade::on(&mut req);
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(io) => serve_raw(io, pod).await,
                Err(e) => tracing::debug!(error = %e, "port-forward upgrade failed"),
            }
        });
        let mut resp = switching("SPDY/3.1");
        resp.headers_mut().insert(
            "x-stream-protocol-version",
            HeaderValue::from_static(PROTOCOL),
        );
        return resp;
    }
    Status::bad_request("Upgrade request required").into_response()
}

fn switching(upgrade: &'static str) -> Response<Body> {
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(upgrade));
    resp
}

/// SPDY straight on the upgraded connection.
async fn serve_raw<IO>(io: IO, pod: Pod)
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
{
    let (mut r, mut w) = tokio::io::split(io);
    let (in_tx, in_rx) = mpsc::channel::<Bytes>(STREAM_BUFFER);
    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(OUT_BUFFER);
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if in_tx.send(Bytes::copy_from_slice(&buf[..n])).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some(b) = out_rx.recv().await {
            if w.write_all(&b).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    tokio::join!(reader, writer, Session::new(pod, out_tx).run(in_rx));
}

/// SPDY inside a WebSocket's binary messages (client-go's `TunnelingConnection`).
async fn serve_websocket<S>(ws: WebSocketStream<S>, pod: Pod)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (in_tx, in_rx) = mpsc::channel::<Bytes>(STREAM_BUFFER);
    let (out_tx, mut out_rx) = mpsc::channel::<Bytes>(OUT_BUFFER);
    let reader = async move {
        while let Some(Ok(msg)) = stream.next().await {
            match msg {
                Message::Binary(b) if in_tx.send(b.clone()).await.is_err() => break,
                Message::Binary(_) => {}
                Message::Close(_) => break,
                // Pings are answered by tungstenite; text is not part of the tunnel.
                _ => {}
            }
        }
    };
    let writer = async move {
        while let Some(b) = out_rx.recv().await {
            if sink.send(Message::Binary(b)).await.is_err() {
                return;
            }
        }
        let _ = sink.close().await;
    };
    tokio::join!(reader, writer, Session::new(pod, out_tx).run(in_rx));
}

/// The error and data streams of one forwarded connection, as they arrive, with the
/// receiving ends of their DATA.
#[derive(Default)]
struct Pair {
    error: Option<(u32, mpsc::Receiver<Bytes>)>,
    data: Option<(u32, u16, mpsc::Receiver<Bytes>)>,
}

/// A SPDY server session speaking `portforward.k8s.io`.
struct Session {
    pod: Arc<Pod>,
    out: mpsc::Sender<Bytes>,
    inflater: spdy::HeaderInflater,
    deflater: spdy::HeaderDeflater,
    /// Streams the client still sends on: where their DATA goes. A stream leaves when the
    /// client half-closes or resets it.
    streams: HashMap<u32, mpsc::Sender<Bytes>>,
    pairs: HashMap<String, Pair>,
}

impl Session {
    fn new(pod: Pod, out: mpsc::Sender<Bytes>) -> Self {
        Self {
            pod: Arc::new(pod),
            out,
            inflater: Default::default(),
            deflater: Default::default(),
            streams: HashMap::new(),
            pairs: HashMap::new(),
        }
    }

    /// Reads frames until the client goes away, says GOAWAY, or breaks the protocol.
    async fn run(mut self, mut input: mpsc::Receiver<Bytes>) {
        let mut buf = BytesMut::new();
        'conn: while let Some(chunk) = input.recv().await {
            buf.extend_from_slice(&chunk);
            loop {
                match spdy::next_frame(&mut buf) {
                    Ok(None) => break,
                    Ok(Some(frame)) => {
                        if !self.on_frame(frame).await {
                            break 'conn;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "port-forward: not SPDY the simulator follows");
                        // GOAWAY with PROTOCOL_ERROR, then hang up.
                        let mut p = 0u32.to_be_bytes().to_vec();
                        p.extend_from_slice(&1u32.to_be_bytes());
                        let _ = self
                            .out
                            .send(spdy::control_frame(spdy::GOAWAY, 0, &p))
                            .await;
                        break 'conn;
                    }
                }
            }
        }
        // Every stream's inbound ends; forwarders finish and drop their writers, and the
        // connection closes when the last one has.
        self.streams.clear();
    }

    /// Handles one frame; false ends the session.
    async fn on_frame(&mut self, frame: Frame) -> bool {
        match frame {
            Frame::Data {
                stream,
                flags,
                data,
            } => {
                let Some(tx) = self.streams.get(&stream) else {
                    return true;
                };
                if (!data.is_empty() && tx.send(data).await.is_err()) || flags & spdy::FLAG_FIN != 0
                {
                    self.streams.remove(&stream);
                }
                true
            }
            Frame::Control {
                kind,
                flags,
                payload,
            } => match kind {
                spdy::SYN_STREAM => self.on_syn_stream(flags, &payload).await,
                spdy::RST_STREAM => {
                    if let Ok(id) = spdy::stream_id(kind, &payload) {
                        self.streams.remove(&id);
                    }
                    true
                }
                // spdystream pings every few seconds; an echo is the answer.
                spdy::PING => self
                    .out
                    .send(spdy::control_frame(spdy::PING, 0, &payload))
                    .await
                    .is_ok(),
                spdy::GOAWAY => false,
                // SETTINGS, WINDOW_UPDATE (spdystream does no flow control), HEADERS,
                // anything newer: nothing to do.
                _ => true,
            },
        }
    }

    async fn on_syn_stream(&mut self, flags: u8, payload: &Bytes) -> bool {
        let (id, fin, block) = match spdy::parse_syn_stream(flags, payload) {
            Ok(x) => x,
            Err(_) => return true,
        };
        // The header stream is shared: a block that does not inflate breaks the session.
        let headers = match self
            .inflater
            .inflate(&block)
            .and_then(|b| spdy::parse_header_block(&b))
        {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(error = %e, "port-forward: bad header block");
                return false;
            }
        };
        let get = |name: &str| {
            headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
        };
        // httpStreamReceived: a port and a known stream type, or the stream is reset.
        let port = get("port")
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0);
        let kind = get("streamtype");
        let accepted = match (port, kind.as_deref()) {
            (Some(_), Some("error" | "data")) => {
                self.streams.len() < MAX_STREAMS && self.pairs.len() < MAX_STREAMS
            }
            _ => false,
        };
        if !accepted || self.streams.contains_key(&id) {
            let mut p = id.to_be_bytes().to_vec();
            p.extend_from_slice(&spdy::REFUSED_STREAM.to_be_bytes());
            return self
                .out
                .send(spdy::control_frame(spdy::RST_STREAM, 0, &p))
                .await
                .is_ok();
        }
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        if !fin {
            self.streams.insert(id, tx);
        }
        let mut reply = id.to_be_bytes().to_vec();
        reply.extend_from_slice(&self.deflater.deflate(&spdy::header_block(&[])));
        if self
            .out
            .send(spdy::control_frame(spdy::SYN_REPLY, 0, &reply))
            .await
            .is_err()
        {
            return false;
        }
        let request = get("requestid").unwrap_or_default();
        let pair = self.pairs.entry(request.clone()).or_default();
        match kind.as_deref() {
            Some("error") => pair.error = Some((id, rx)),
            _ => pair.data = Some((id, port.unwrap_or(0), rx)),
        }
        if pair.error.is_some() && pair.data.is_some() {
            let pair = self.pairs.remove(&request).expect("the pair is complete");
            let ((error, _), (data, port, inbound)) =
                (pair.error.expect("complete"), pair.data.expect("complete"));
            // Nothing is read from the error stream: the client closes it at once.
            tokio::spawn(forward(
                self.pod.clone(),
                port,
                inbound,
                Writer::new(data, self.out.clone()),
                Writer::new(error, self.out.clone()),
            ));
        }
        true
    }
}

/// Writes one stream's half of the connection.
struct Writer {
    id: u32,
    out: mpsc::Sender<Bytes>,
}

impl Writer {
    fn new(id: u32, out: mpsc::Sender<Bytes>) -> Self {
        Self { id, out }
    }

    async fn write(&self, data: &[u8]) -> bool {
        for chunk in data.chunks(MAX_DATA) {
            if self
                .out
                .send(spdy::data_frame(self.id, false, chunk))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Half-closes the stream (an empty DATA frame with FIN), as the kubelet's deferred
    /// `Close` does.
    async fn close(self) {
        let _ = self.out.send(spdy::data_frame(self.id, true, &[])).await;
    }
}

/// One forwarded connection: the responder on a declared port, or containerd's refusal.
async fn forward(
    pod: Arc<Pod>,
    port: u16,
    mut inbound: mpsc::Receiver<Bytes>,
    data: Writer,
    error: Writer,
) {
    match pod.ports.iter().find(|(p, _)| *p == port) {
        Some((_, container)) => respond(&pod, container, port, &mut inbound, &data).await,
        None => {
            // What the kubelet writes for containerd's failed dial.
            let msg = format!(
                "error forwarding port {port} to pod {uid}, uid : failed to execute portforward in network namespace \"/var/run/netns/cni-{uid}\": failed to connect to localhost:{port} inside namespace \"{uid}\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 [::1]:{port}: connect: connection refused ",
                uid = pod.uid
            );
            error.write(msg.as_bytes()).await;
        }
    }
    data.close().await;
    error.close().await;
}

/// The container's side: an HTTP responder if the client speaks HTTP/1.x, else an echo.
async fn respond(
    pod: &Pod,
    container: &str,
    port: u16,
    inbound: &mut mpsc::Receiver<Bytes>,
    out: &Writer,
) {
    let Some(first) = inbound.recv().await else {
        return;
    };
    const METHODS: &[&str] = &[
        "GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ",
    ];
    if !METHODS.iter().any(|m| first.starts_with(m.as_bytes())) {
        // Echo until the client half-closes.
        let mut next = Some(first);
        while let Some(chunk) = next {
            if !out.write(&chunk).await {
                return;
            }
            next = inbound.recv().await;
        }
        return;
    }
    let body = format!(
        "hello from pod {}/{}, container {container}, port {port} (watchgate sim)\n",
        pod.namespace, pod.name
    );
    let mut buf = BytesMut::from(&first[..]);
    loop {
        // One request head at a time (bodies by Content-Length are read and dropped).
        let head_end = loop {
            if let Some(at) = memchr::memmem::find(&buf, b"\r\n\r\n") {
                break at + 4;
            }
            if buf.len() > 16 * 1024 {
                let _ = out
                    .write(b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
                return;
            }
            match inbound.recv().await {
                Some(more) => buf.extend_from_slice(&more),
                None => return,
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let content_length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        let close = head
            .lines()
            .any(|l| l.starts_with("connection:") && l.contains("close"));
        let is_head = head.starts_with("head ");
        let _ = buf.split_to(head_end);
        let mut skip = content_length;
        while skip > 0 {
            if buf.is_empty() {
                match inbound.recv().await {
                    Some(more) => buf.extend_from_slice(&more),
                    None => return,
                }
            }
            let n = skip.min(buf.len());
            let _ = buf.split_to(n);
            skip -= n;
        }
        let mut resp = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        if !is_head {
            resp.push_str(&body);
        }
        if !out.write(resp.as_bytes()).await || close {
            return;
        }
        if buf.is_empty() {
            match inbound.recv().await {
                Some(more) => buf.extend_from_slice(&more),
                None => return,
            }
        }
    }
}
