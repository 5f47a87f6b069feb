//! The gateway in front of the simulated apiserver: a forwarded watch delivers each
//! write's event within 100 ms and in order; lists come back byte-identical.

mod support;

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use http::Request;
use http_body_util::BodyExt;
use support::objects::configmap;
use support::raw::*;
use support::servers::gateway;
use watchgate::body;
use watchgate::sim::store::Mutation;

async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    json: Option<String>,
) -> (u16, Bytes) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    if json.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req.body(json.map_or_else(body::empty, body::full)).unwrap();
    let resp = h1(addr).await.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

/// Read one newline-terminated watch event, however the stream is chunked.
async fn next_event(body: &mut hyper::body::Incoming, buf: &mut BytesMut) -> serde_json::Value {
    loop {
        if let Some(i) = buf.iter().position(|b| *b == b'\n') {
            let line = buf.split_to(i + 1);
            return serde_json::from_slice(&line).expect("a JSON watch event");
        }
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("a watch event within 5s")
            .expect("stream open")
            .expect("frame ok");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
}

#[tokio::test]
// The simulator store's mutate closure returns Result<_, Status>; its size is not ours to change.
#[allow(clippy::result_large_err)]
async fn watch_events_arrive_through_the_gateway_within_100ms_in_order() {
    let sim = watchgate::sim::start(watchgate::sim::SimConfig::default())
        .await
        .unwrap();
    let gw = gateway(&sim.url()).await;

    let resp = h1_get(
        gw.addr(),
        "/api/v1/namespaces/default/configmaps?watch=true&allowWatchBookmarks=false",
    )
    .await;
    assert_eq!(resp.status(), 200);
    // The first watch of configmaps joins its cache's first sync (docs/cache.md, "A cold
    // cache") and is served by the fan-out.
    assert_eq!(resp.headers()["x-watchgate-source"], "cache");
    let mut stream = resp.into_body();
    let mut buf = BytesMut::new();

    // Another client writes: straight into the simulator's store (its HTTP write path is
    // built on another branch), which wakes the simulator's watch the same way.
    let rt = watchgate::sim::resources::find("", "v1", "configmaps").unwrap();
    let cm = |v: &str| {
        configmap("default", "gw-watch")
            .data(serde_json::json!({ "v": v }))
            .build()
    };
    let writes = [
        (Mutation::Put(cm("1")), "ADDED"),
        (Mutation::Put(cm("2")), "MODIFIED"),
        (Mutation::Delete, "DELETED"),
    ];
    let mut last_rv = 0u64;
    for (mutation, want) in writes {
        let written = Instant::now();
        sim.store()
            .mutate(rt, "default", "gw-watch", |_| Ok(mutation))
            .unwrap();
        let event = next_event(&mut stream, &mut buf).await;
        let latency = written.elapsed();
        assert_eq!(event["type"], want, "{event}");
        assert_eq!(event["object"]["metadata"]["name"], "gw-watch");
        let rv: u64 = event["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            rv > last_rv,
            "resourceVersions increase: {rv} after {last_rv}"
        );
        last_rv = rv;
        assert!(
            latency < Duration::from_millis(100),
            "{want} took {latency:?}"
        );
    }
}

#[tokio::test]
async fn lists_and_errors_match_the_simulator_byte_for_byte() {
    let sim = watchgate::sim::start(watchgate::sim::SimConfig::default())
        .await
        .unwrap();
    let gw = gateway(&sim.url()).await;
    for path in [
        "/api/v1/namespaces",
        "/api/v1/namespaces/default/configmaps/absent",
        "/api",
        "/apis",
    ] {
        let direct = send(sim.addr(), "GET", path, None).await;
        let through = send(gw.addr(), "GET", path, None).await;
        assert_eq!(through, direct, "{path}");
    }
}

#[tokio::test]
#[allow(clippy::result_large_err)]
async fn kube_rs_lists_and_watches_through_the_gateway() {
    use futures_util::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, WatchEvent, WatchParams};

    let sim = watchgate::sim::start(watchgate::sim::SimConfig::default())
        .await
        .unwrap();
    let gw = gateway(&sim.url()).await;
    let config = kube::Config::new(gw.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");

    let list = api.list(&ListParams::default()).await.unwrap();
    let rv = list.metadata.resource_version.clone().unwrap();
    let mut stream = api
        .watch(&WatchParams::default(), &rv)
        .await
        .unwrap()
        .boxed();

    let rt = watchgate::sim::resources::find("", "v1", "configmaps").unwrap();
    let obj = configmap("default", "from-kube-rs")
        .data(serde_json::json!({"k": "v"}))
        .build();
    sim.store()
        .mutate(rt, "default", "from-kube-rs", |_| Ok(Mutation::Put(obj)))
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("event within 5s")
        .unwrap()
        .expect("stream open");
    match event {
        WatchEvent::Added(cm) => {
            assert_eq!(cm.metadata.name.as_deref(), Some("from-kube-rs"));
            assert_eq!(cm.data.unwrap()["k"], "v");
        }
        other => panic!("expected ADDED, got {other:?}"),
    }
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(names.contains(&"from-kube-rs".to_string()), "{names:?}");
}

#[tokio::test]
async fn websocket_exec_through_the_gateway_to_the_simulator() {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Message;

    let cfg = watchgate::sim::SimConfig {
        seed_per_type: 1,
        ..Default::default()
    };
    let sim = watchgate::sim::start(cfg).await.unwrap();
    let gw = gateway(&sim.url()).await;
    let (code, pods) = send(gw.addr(), "GET", "/api/v1/pods", None).await;
    assert_eq!(code, 200);
    let pods: serde_json::Value = serde_json::from_slice(&pods).unwrap();
    let pod = &pods["items"][0]["metadata"];
    let (ns, name) = (
        pod["namespace"].as_str().unwrap(),
        pod["name"].as_str().unwrap(),
    );

    // What kubectl 1.37 does for `kubectl exec -i POD -- cat`: a v5 websocket.
    let mut req = format!(
        "ws://{}/api/v1/namespaces/{ns}/pods/{name}/exec?command=cat&container=app&stdin=true&stdout=true&stderr=true",
        gw.addr()
    )
    .into_client_request()
    .unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "v5.channel.k8s.io, v4.channel.k8s.io".parse().unwrap(),
    );
    let tcp = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(
        resp.headers()["sec-websocket-protocol"],
        "v5.channel.k8s.io"
    );

    let mut stdin = vec![0u8];
    stdin.extend_from_slice(b"typed through the gateway\n");
    ws.send(Message::Binary(stdin.into())).await.unwrap();
    // v5 stdin close: [255, 0].
    ws.send(Message::Binary(vec![255u8, 0].into()))
        .await
        .unwrap();

    let mut stdout = Vec::new();
    let mut status = None;
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(msg)) = ws.next().await {
            if let Message::Binary(b) = msg {
                match b.first() {
                    Some(1) => stdout.extend_from_slice(&b[1..]),
                    Some(3) => {
                        status = Some(serde_json::from_slice::<serde_json::Value>(&b[1..]).unwrap())
                    }
                    _ => {}
                }
            }
        }
    })
    .await;
    assert!(read.is_ok(), "exec ended within 5s");
    assert_eq!(
        String::from_utf8(stdout).unwrap(),
        "typed through the gateway\n"
    );
    assert_eq!(
        status.expect("exit status on channel 3")["status"],
        "Success"
    );
}

#[tokio::test]
async fn followed_logs_stream_through_the_gateway() {
    let cfg = watchgate::sim::SimConfig {
        seed_per_type: 1,
        ..Default::default()
    };
    let sim = watchgate::sim::start(cfg).await.unwrap();
    let gw = gateway(&sim.url()).await;
    let (_, pods) = send(gw.addr(), "GET", "/api/v1/pods", None).await;
    let pods: serde_json::Value = serde_json::from_slice(&pods).unwrap();
    let pod = &pods["items"][0]["metadata"];
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}/log?follow=true&container=app",
        pod["namespace"].as_str().unwrap(),
        pod["name"].as_str().unwrap()
    );
    let resp = h1_get(gw.addr(), &path).await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.into_body();
    let mut buf = BytesMut::new();
    // Lines keep arriving on an open stream (the simulator writes them over time).
    let mut lines = 0;
    while lines < 3 {
        let frame = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .expect("a log line within 10s")
            .expect("stream still open")
            .unwrap();
        if let Ok(d) = frame.into_data() {
            buf.extend_from_slice(&d);
            lines = buf.iter().filter(|b| **b == b'\n').count();
        }
    }
    assert!(
        !http_body::Body::is_end_stream(&body),
        "a followed log stays open"
    );
}

/// A forwarded list leaves the gateway in pieces of at least 64 KiB, not in the
/// upstream's 2 KiB chunks (src/proxy/gather.rs), with the upstream's bytes exactly.
#[tokio::test]
async fn a_forwarded_list_goes_out_in_64_kib_pieces_with_the_upstreams_bytes() {
    use watchgate::load::cluster::seed_objects;
    use watchgate::load::pool::PoolResource;

    let sim = watchgate::sim::start(watchgate::sim::SimConfig::default())
        .await
        .unwrap();
    seed_objects(&sim, PoolResource::Configmaps, 3000, 600);
    // Caches nothing: every list is forwarded.
    let gw = support::servers::forwarding_gateway(&sim.url()).await;
    let req = b"GET /api/v1/configmaps?resourceVersion=0 HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\nConnection: close\r\n\r\n";
    let direct = unchunk(&raw_exchange_bytes(sim.addr(), req).await);
    let through = unchunk(&raw_exchange_bytes(gw.addr(), req).await);
    assert!(
        direct.chunks.iter().all(|&n| n <= 2048),
        "{:?}",
        direct.chunks
    );
    assert_eq!(through.body, direct.body);
    assert!(
        through.head.contains("x-watchgate-source: upstream"),
        "{}",
        through.head
    );
    let (last, pieces) = through.chunks.split_last().unwrap();
    assert!(pieces.len() >= 20, "{:?}", through.chunks);
    assert!(
        pieces.iter().all(|&n| n >= 64 * 1024),
        "{:?}",
        through.chunks
    );
    assert!(*last > 0);
}
