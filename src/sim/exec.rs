//! `pods/{name}/exec` and `pods/{name}/attach` (and the route to `portforward`): upgrade
//! endpoints that run a tiny fake command set, so that the gateway's upgrade tunnel can be
//! tested end to end.
//!
//! WebSocket (what kubectl 1.37 uses by default): the client offers
//! `Sec-WebSocket-Protocol: v5.channel.k8s.io, v4.channel.k8s.io` and the server picks
//! the first it supports in that order. Every binary message starts with a channel
//! byte: 0 stdin, 1 stdout, 2 stderr, 3 error (a `metav1.Status` JSON when the command
//! ends), 4 resize. v5 adds the close message `[255, channel]`, which the client sends
//! on stdin EOF (k8s.io/apimachinery `pkg/util/remotecommand/constants.go`, client-go
//! `tools/remotecommand/websocket.go`). Without v5 there is no stdin half-close, so `cat`
//! only ends when the socket closes.
//!
//! Commands: `cat` echoes stdin to stdout until stdin closes; `echo ARGS` prints its
//! arguments; `true`/`false` exit 0/1; `hostname` prints the pod name; `sh -c "echo …"`
//! runs the echo; anything else fails like a missing executable. `attach` behaves as
//! `cat`. Exit status goes on channel 3 as `{"metadata":{},"status":"Success"}` or the
//! `NonZeroExitCode` failure kubelet reports, then the server closes the socket.
//!
//! SPDY: an exec or attach request with `Upgrade: SPDY/3.1` gets `101 Switching
//! Protocols` (echoing the first offered `X-Stream-Protocol-Version`) and then every byte
//! is echoed back raw. This is NOT SPDY framing — a real SPDY exec client (kubectl with
//! websockets disabled) will not work against it. It exists to exercise the gateway's
//! byte tunnel. `portforward` is `super::portforward`, which does speak SPDY.
//!
//! A request without an upgrade gets 400 `Upgrade request required`, like the apiserver.
// metav1.Status is the crate's error type (large by design; see status.rs).
#![allow(clippy::result_large_err)]

use futures_util::{SinkExt, StreamExt};
use http::{header, HeaderValue, Request, Response, StatusCode};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use std::sync::Arc;

use hyper::body::Incoming;

use super::resources::ResourceType;
use super::Sim;
use crate::body::{self, Body};
use crate::status::Status;

pub const V5: &str = "v5.channel.k8s.io";
pub const V4: &str = "v4.channel.k8s.io";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const ERROR: u8 = 3;
const CLOSE: u8 = 255;

/// The query of an exec/attach request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecParams {
    pub command: Vec<String>,
    pub container: Option<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl ExecParams {
    pub fn from_query(query: Option<&str>) -> Self {
        let mut p = ExecParams::default();
        for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let truthy = v == "true" || v == "1";
            match &*k {
                "command" => p.command.push(v.into_owned()),
                "container" => p.container = Some(v.into_owned()),
                "stdin" => p.stdin = truthy,
                "stdout" => p.stdout = truthy,
                "stderr" => p.stderr = truthy,
                "tty" => p.tty = truthy,
                _ => {}
            }
        }
        p
    }
}

/// Which stream protocol an exec session speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    V5,
    V4,
}

fn header_list(req_headers: &http::HeaderMap, name: &str) -> Vec<String> {
    req_headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn is_upgrade_to(req_headers: &http::HeaderMap, proto: &str) -> bool {
    let conn = header_list(req_headers, "connection")
        .iter()
        .any(|c| c.eq_ignore_ascii_case("upgrade"));
    let up = header_list(req_headers, "upgrade")
        .iter()
        .any(|u| u.eq_ignore_ascii_case(proto));
    conn && up
}

/// The pod's container names, in spec order.
fn containers(pod: &Value) -> Vec<String> {
    pod["spec"]["containers"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .filter_map(|c| c["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks the request against the pod the way the apiserver's pod strategy does
/// (`pkg/registry/core/pod/strategy.go` `ExecLocation`/`AttachLocation`).
fn validate(pod: &Value, p: &ExecParams, attach: bool) -> Result<(), Status> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let cs = containers(pod);
    if let Some(c) = &p.container {
        if !cs.contains(c) {
            return Err(Status::bad_request(format!(
                "container {c} is not valid for pod {name}"
            )));
        }
    } else if cs.len() > 1 {
        return Err(Status::bad_request(format!(
            "a container name must be specified for pod {name}, choose one of: [{}]",
            cs.join(" ")
        )));
    }
    if !attach && p.command.is_empty() {
        return Err(Status::bad_request("you must specify at least 1 command"));
    }
    if !(p.stdin || p.stdout || p.stderr) {
        return Err(Status::bad_request(
            "you must specify at least one of stdin, stdout, stderr",
        ));
    }
    if pod["spec"]["nodeName"].as_str().unwrap_or("").is_empty() {
        return Err(Status::bad_request(format!(
            "pod {name} does not have a host assigned"
        )));
    }
    Ok(())
}

/// What a finished fake command reports.
struct Outcome {
    stdout: Vec<u8>,
    exit: i32,
    error: Option<String>,
}

/// Runs a non-interactive command (everything but `cat`).
fn run_simple(cmd: &[String], pod_name: &str) -> Outcome {
    let ok = |s: String| Outcome {
        stdout: s.into_bytes(),
        exit: 0,
        error: None,
    };
    match cmd.first().map(String::as_str) {
        Some("echo") => ok(format!("{}\n", cmd[1..].join(" "))),
        Some("true") => ok(String::new()),
        Some("false") => Outcome {
            stdout: Vec::new(),
            exit: 1,
            error: None,
        },
        Some("hostname") => ok(format!("{pod_name}\n")),
        Some("sh") | Some("/bin/sh") | Some("bash") | Some("/bin/bash")
            if cmd.get(1).map(String::as_str) == Some("-c") =>
        {
            let script: Vec<String> = cmd
                .get(2)
                .map(|s| s.split_whitespace().map(str::to_string).collect())
                .unwrap_or_default();
            run_simple(&script, pod_name)
        }
        Some(other) => Outcome {
            stdout: Vec::new(),
            exit: 126,
            error: Some(format!(
                "OCI runtime exec failed: exec failed: unable to start container process: exec: \"{other}\": executable file not found in $PATH: unknown"
            )),
        },
        None => ok(String::new()),
    }
}

/// The Status kubelet sends on the error channel when a command ends.
pub fn exit_status(cmd: &[String], exit: i32, error: Option<&str>) -> Value {
    if let Some(e) = error {
        return json!({"metadata": {}, "status": "Failure", "message": e, "reason": "InternalError",
                      "details": {"causes": [{"message": e}]}, "code": 500});
    }
    if exit == 0 {
        json!({"metadata": {}, "status": "Success"})
    } else {
        json!({"metadata": {}, "status": "Failure",
               "message": format!("command terminated with non-zero exit code: error executing command [{}], exit code {exit}", cmd.join(" ")),
               "reason": "NonZeroExitCode",
               "details": {"causes": [{"reason": "ExitCode", "message": exit.to_string()}]}})
    }
}

fn framed(channel: u8, data: &[u8]) -> Message {
    let mut v = Vec::with_capacity(data.len() + 1);
    v.push(channel);
    v.extend_from_slice(data);
    Message::Binary(v.into())
}

/// Drives one WebSocket exec session to completion.
async fn serve_ws<S>(
    ws: WebSocketStream<S>,
    proto: Proto,
    params: ExecParams,
    pod_name: String,
    attach: bool,
) -> Result<(), tokio_tungstenite::tungstenite::Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws.split();
    let is_cat = attach || params.command.first().map(String::as_str) == Some("cat");
    let out_channel = STDOUT;
    let mut client_closed = false;
    let outcome = if is_cat {
        if params.stdin {
            // Echo stdin until the client half-closes it (v5) or closes the socket.
            while let Some(msg) = rx.next().await {
                match msg? {
                    Message::Binary(data) => match data.first() {
                        Some(&STDIN) if data.len() > 1 && params.stdout => {
                            tx.send(framed(out_channel, &data[1..])).await?;
                        }
                        Some(&CLOSE) if proto == Proto::V5 && data.get(1) == Some(&STDIN) => break,
                        _ => {} // resize, empty keep-alives
                    },
                    Message::Close(_) => {
                        client_closed = true;
                        break;
                    }
                    _ => {}
                }
            }
        }
        Outcome {
            stdout: Vec::new(),
            exit: 0,
            error: None,
        }
    } else {
        run_simple(&params.command, &pod_name)
    };
    if client_closed {
        return Ok(());
    }
    if !outcome.stdout.is_empty() && params.stdout {
        tx.send(framed(out_channel, &outcome.stdout)).await?;
    }
    let _ = STDERR; // stderr carries nothing for the fake commands
    let status = serde_json::to_vec(&exit_status(
        &params.command,
        outcome.exit,
        outcome.error.as_deref(),
    ))
    .expect("json");
    tx.send(framed(ERROR, &status)).await?;
    tx.send(Message::Close(Some(CloseFrame {
        code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: "".into(),
    })))
    .await?;
    // Wait (boundedly) for the client's close so the TCP connection ends cleanly.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(Ok(m)) = rx.next().await {
            if m.is_close() {
                break;
            }
        }
    })
    .await;
    Ok(())
}

fn switching(upgrade: &'static str) -> Response<Body> {
    let mut resp = Response::new(body::empty());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(upgrade));
    resp
}

/// Router contract: `pods/{name}/exec`, `attach` and `portforward` with the raw request
/// (so the upgrade can be taken). A missing pod is the apiserver's 404.
pub async fn handle(
    sim: &Arc<Sim>,
    req: Request<Incoming>,
    rt: &'static ResourceType,
    ns: &str,
    name: &str,
) -> Response<Body> {
    let Some(pod) = sim.store.get(rt, ns, name) else {
        return Status::not_found(&rt.group_resource(), name).into_response();
    };
    let sub = req
        .uri()
        .path()
        .rsplit('/')
        .next()
        .unwrap_or("")
        .to_string();
    match sub.as_str() {
        "portforward" => super::portforward::handle(req, &pod),
        "attach" => handle_pod(req, &pod, true),
        _ => handle_pod(req, &pod, false),
    }
}

fn spdy_echo<B: Send + 'static>(mut req: Request<B>) -> Response<Body> {
    let version = header_list(req.headers(), "x-stream-protocol-version")
        .into_iter()
        .next();
    let on_upgrade = crate::upgrade::on(&mut req);
    tokio::spawn(async move {
        if let Ok(upgraded) = on_upgrade.await {
            // Raw echo, not SPDY framing (see the module docs).
            let (mut r, mut w) = tokio::io::split(upgraded);
            let _ = tokio::io::copy(&mut r, &mut w).await;
            let _ = tokio::io::AsyncWriteExt::shutdown(&mut w).await;
        }
    });
    let mut resp = switching("SPDY/3.1");
    if let Some(v) = version.and_then(|v| HeaderValue::from_str(&v).ok()) {
        resp.headers_mut().insert("x-stream-protocol-version", v);
    }
    resp
}

/// Handles an exec (`attach == false`) or attach request for `pod`.
pub fn handle_pod<B>(mut req: Request<B>, pod: &Value, attach: bool) -> Response<Body>
where
    B: Send + 'static,
{
    let params = ExecParams::from_query(req.uri().query());
    if let Err(s) = validate(pod, &params, attach) {
        return s.into_response();
    }
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let headers = req.headers().clone();

    if is_upgrade_to(&headers, "websocket") {
        let Some(key) = headers.get("sec-websocket-key") else {
            return Status::bad_request("missing Sec-WebSocket-Key").into_response();
        };
        let offered = header_list(&headers, "sec-websocket-protocol");
        let proto = if offered.iter().any(|p| p == V5) {
            Proto::V5
        } else if offered.iter().any(|p| p == V4) {
            Proto::V4
        } else {
            return Status::bad_request(format!(
                "unable to upgrade connection: requested protocols {offered:?} not supported, supported: [{V5} {V4}]"
            ))
            .into_response();
        };
        let accept = derive_accept_key(key.as_bytes());
        let on_upgrade = crate::upgrade::on(&mut req);
        tokio::spawn(async move {
            match on_upgrade.await {
                Ok(upgraded) => {
                    let ws = WebSocketStream::from_raw_socket(upgraded, Role::Server, None).await;
                    if let Err(e) = serve_ws(ws, proto, params, pod_name, attach).await {
                        tracing::debug!(error = %e, "exec websocket session ended with error");
                    }
                }
                Err(e) => tracing::debug!(error = %e, "exec upgrade failed"),
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
            HeaderValue::from_static(if proto == Proto::V5 { V5 } else { V4 }),
        );
        return resp;
    }

    if is_upgrade_to(&headers, "SPDY/3.1") {
        return spdy_echo(req);
    }

    Status::bad_request("Upgrade request required").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repeated_command() {
        let p = ExecParams::from_query(Some(
            "command=echo&command=hello&stdin=true&stdout=true&container=app",
        ));
        assert_eq!(p.command, vec!["echo", "hello"]);
        assert!(p.stdin && p.stdout && !p.stderr && !p.tty);
        assert_eq!(p.container.as_deref(), Some("app"));
    }

    #[test]
    fn validation_messages() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n",
            "containers": [{"name": "a"}, {"name": "b"}]}});
        let p = ExecParams::from_query(Some("command=cat&stdout=true"));
        assert_eq!(
            validate(&pod, &p, false).unwrap_err().message,
            "a container name must be specified for pod p, choose one of: [a b]"
        );
        let p = ExecParams::from_query(Some("command=cat&stdout=true&container=c"));
        assert_eq!(
            validate(&pod, &p, false).unwrap_err().message,
            "container c is not valid for pod p"
        );
    }
}
