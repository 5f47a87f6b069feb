//! Transparent forwarding: method, path, query, body and end-to-end headers pass
//! unchanged; hop-by-hop headers are removed in both directions; upstream errors come back
//! byte for byte; HTTP/2 prior-knowledge clients work.

mod support;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::BodyExt;
use support::raw::*;
use support::servers::forwarding_gateway;
use support::stub::*;
use watchgate::body;

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

/// A stub that records every request and answers with hop-by-hop noise in its headers.
async fn recording_stub() -> (Stub, Arc<Mutex<Vec<Seen>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    let stub = Stub::start(handler(move |req: Request<hyper::body::Incoming>| {
        let log = log.clone();
        async move {
            let (parts, b) = req.into_parts();
            let bytes = b.collect().await.unwrap().to_bytes();
            log.lock().unwrap().push(Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                headers: parts.headers,
                body: bytes,
            });
            Response::builder()
                .status(201)
                .header("content-type", "application/json")
                .header("audit-id", "11111111-2222")
                .header("warning", "299 - \"deprecated\"")
                .header("connection", "X-Upstream-Private")
                .header("x-upstream-private", "secret")
                .header("keep-alive", "timeout=5")
                .header("proxy-authenticate", "Basic")
                .body(body::full(r#"{"kind":"ConfigMap"}"#))
                .unwrap()
        }
    }))
    .await;
    (stub, seen)
}

#[tokio::test]
async fn method_path_query_body_and_headers_pass_hop_by_hop_do_not() {
    let (stub, seen) = recording_stub().await;
    let gw = forwarding_gateway(&stub.url()).await;

    let mut send = h1(gw.addr()).await;
    let payload = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#;
    let req =
        Request::post("/api/v1/namespaces/default/configmaps?fieldManager=kubectl&dryRun=All")
            .header("host", gw.addr().to_string())
            .header(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io, application/json",
            )
            .header("content-type", "application/json")
            .header("accept-encoding", "gzip")
            .header("user-agent", "kubectl/v1.37.1 (linux/amd64)")
            .header("impersonate-user", "alice")
            .header("impersonate-group", "devs")
            .header("impersonate-group", "ops")
            .header("audit-id", "client-audit-1")
            .header("authorization", "Bearer client-token")
            .header("content-length", payload.len().to_string())
            .header("connection", "keep-alive, X-Hop")
            .header("x-hop", "private")
            .header("keep-alive", "timeout=5")
            .header("proxy-authorization", "Basic eDp5")
            .header("proxy-connection", "keep-alive")
            .header("te", "trailers")
            .header("upgrade", "h2c")
            .body(body::full(payload))
            .unwrap();
    let resp = send.send_request(req).await.unwrap();

    // Response: status, end-to-end headers and body unchanged; hop-by-hop gone.
    assert_eq!(resp.status(), StatusCode::CREATED);
    let h = resp.headers().clone();
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["audit-id"], "11111111-2222");
    assert_eq!(h["warning"], "299 - \"deprecated\"");
    assert_eq!(h["x-watchgate-source"], "upstream");
    for gone in ["x-upstream-private", "keep-alive", "proxy-authenticate"] {
        assert!(
            !h.contains_key(gone),
            "response kept hop-by-hop {gone}: {h:?}"
        );
    }
    let got = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(got, r#"{"kind":"ConfigMap"}"#);

    // Request as the upstream saw it.
    let seen = seen
        .lock()
        .unwrap()
        .pop()
        .expect("upstream got the request");
    assert_eq!(seen.method, "POST");
    assert_eq!(
        seen.uri,
        "/api/v1/namespaces/default/configmaps?fieldManager=kubectl&dryRun=All"
    );
    assert_eq!(seen.body, payload);
    let h = &seen.headers;
    assert_eq!(
        h["accept"],
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/json"
    );
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["accept-encoding"], "gzip");
    assert_eq!(h["user-agent"], "kubectl/v1.37.1 (linux/amd64)");
    assert_eq!(h["impersonate-user"], "alice");
    let groups: Vec<_> = h.get_all("impersonate-group").iter().collect();
    assert_eq!(groups, ["devs", "ops"]);
    assert_eq!(h["audit-id"], "client-audit-1");
    assert_eq!(h["authorization"], "Bearer client-token");
    assert_eq!(h["content-length"], payload.len().to_string());
    assert_eq!(h["host"], stub.addr.to_string(), "Host names the upstream");
    for gone in [
        "connection",
        "x-hop",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "upgrade",
    ] {
        assert!(
            !h.contains_key(gone),
            "upstream got hop-by-hop {gone}: {h:?}"
        );
    }
}

#[tokio::test]
async fn every_method_is_forwarded() {
    let (stub, seen) = recording_stub().await;
    let gw = forwarding_gateway(&stub.url()).await;
    let mut send = h1(gw.addr()).await;
    for method in ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS", "POST"] {
        let req = Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/a/pods/p")
            .header("host", "gw")
            .body(body::empty())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 201, "{method}");
        resp.into_body().collect().await.unwrap();
    }
    let methods: Vec<String> = seen
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.method.clone())
        .collect();
    assert_eq!(
        methods,
        ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS", "POST"]
    );
}

#[tokio::test]
async fn upstream_errors_are_forwarded_byte_for_byte() {
    let status_body: &'static str = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\
        \"status\":\"Failure\",\"message\":\"pods \\\"nope\\\" not found\",\"reason\":\"NotFound\",\
        \"details\":{\"name\":\"nope\",\"kind\":\"pods\"},\"code\":404}\n";
    let stub = Stub::start(handler(
        move |req: Request<hyper::body::Incoming>| async move {
            let code = if req.uri().path().ends_with("/nope") {
                404
            } else {
                500
            };
            Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .header("cache-control", "no-cache, private")
                .body(body::full(if code == 404 {
                    status_body
                } else {
                    "<html>boom</html>"
                }))
                .unwrap()
        },
    ))
    .await;
    let gw = forwarding_gateway(&stub.url()).await;

    let (parts, bytes) = get(gw.addr(), "/api/v1/namespaces/a/pods/nope").await;
    assert_eq!(parts.status, 404);
    assert_eq!(parts.headers["cache-control"], "no-cache, private");
    assert_eq!(bytes, status_body);

    // Even an upstream's non-JSON 500 is the upstream's to send; it passes unchanged.
    let (parts, bytes) = get(gw.addr(), "/api/v1/other").await;
    assert_eq!(parts.status, 500);
    assert_eq!(bytes, "<html>boom</html>");
}

#[tokio::test]
async fn absolute_form_targets_never_leave_for_another_host() {
    let (stub, seen) = recording_stub().await;
    let gw = forwarding_gateway(&stub.url()).await;
    let answer = raw_exchange(
        gw.addr(),
        b"GET http://evil.example:9/api/v1/pods?limit=1 HTTP/1.1\r\nHost: evil.example:9\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    let seen = seen.lock().unwrap().pop().unwrap();
    assert_eq!(seen.uri, "/api/v1/pods?limit=1");
    assert_eq!(seen.headers["host"], stub.addr.to_string());
}

#[tokio::test]
async fn upstream_path_prefix_is_kept() {
    let (stub, seen) = recording_stub().await;
    let gw = forwarding_gateway(&format!("{}/k8s/clusters/c-1", stub.url())).await;
    let (parts, _) = get(gw.addr(), "/api/v1/pods?watch=false").await;
    assert_eq!(parts.status, 201);
    assert_eq!(
        seen.lock().unwrap().pop().unwrap().uri,
        "/k8s/clusters/c-1/api/v1/pods?watch=false"
    );
}

#[tokio::test]
async fn http2_prior_knowledge_clients_are_served() {
    let (stub, seen) = recording_stub().await;
    let gw = forwarding_gateway(&stub.url()).await;
    let mut send = h2(gw.addr()).await;
    for i in 0..3 {
        let req = Request::put(format!(
            "http://{}/api/v1/namespaces/a/configmaps/c{i}",
            gw.addr()
        ))
        .header("content-type", "application/json")
        .body(body::full(format!("{{\"i\":{i}}}")))
        .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 201);
        assert_eq!(resp.headers()["x-watchgate-source"], "upstream");
        let got = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(got, r#"{"kind":"ConfigMap"}"#);
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[2].uri, "/api/v1/namespaces/a/configmaps/c2");
    assert_eq!(seen[2].body, "{\"i\":2}");
}

#[tokio::test]
async fn admin_listener_answers_health_and_liveness() {
    let (stub, _) = recording_stub().await;
    let gw = forwarding_gateway(&stub.url()).await;
    for path in ["/healthz", "/livez"] {
        let (parts, bytes) = get(gw.admin_addr(), path).await;
        assert_eq!(parts.status, 200, "{path}");
        assert_eq!(bytes, "ok");
    }
    let (parts, bytes) = get(gw.admin_addr(), "/nope").await;
    assert_eq!(parts.status, 404);
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["reason"], "NotFound");
}
