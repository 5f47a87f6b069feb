//! Responses stream through frame by frame as they arrive: each chunk reaches the client
//! before the upstream sends the next, and a watch event arrives within 100 ms.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use http_body_util::BodyExt;
use support::raw::*;
use support::servers::forwarding_gateway;
use support::stub::*;
use watchgate::body;

async fn next_data(body: &mut hyper::body::Incoming) -> Option<Bytes> {
    let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("a frame within 5s")?;
    Some(frame.expect("frame ok").into_data().expect("data frame"))
}

#[tokio::test]
async fn each_chunk_arrives_before_the_upstream_sends_the_next() {
    let (stub, mut senders) = channel_stub(Some("application/json")).await;
    let gw = forwarding_gateway(&stub.url()).await;
    let mut send = h1(gw.addr()).await;
    let resp = send
        .send_request(get_request("/api/v1/namespaces/a/pods/p/log?follow=true"))
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let upstream = senders.recv().await.unwrap();
    let mut body = resp.into_body();
    for i in 0..20 {
        let line = Bytes::from(format!("log line {i}\n"));
        upstream.send(line.clone()).await.unwrap();
        // The upstream will not send line i+1 until line i came out the other side:
        // a gateway that waited for more data (or the end) would time out here.
        assert_eq!(next_data(&mut body).await.unwrap(), line);
    }
    drop(upstream);
    assert!(
        next_data(&mut body).await.is_none(),
        "clean end after upstream ends"
    );
}

#[tokio::test]
async fn a_watch_event_arrives_within_100ms_in_order() {
    let (stub, mut senders) = channel_stub(Some("application/json")).await;
    let gw = forwarding_gateway(&stub.url()).await;
    // Both protocols a client may use towards the gateway. The watch has no
    // resourceVersion, so it is forwarded (watches with one are served from the cache).
    for proto in ["h1", "h2"] {
        let req = Request::get(format!("http://{}/api/v1/pods?watch=true", gw.addr()))
            .body(body::empty())
            .unwrap();
        let resp = if proto == "h1" {
            h1(gw.addr()).await.send_request(req).await.unwrap()
        } else {
            h2(gw.addr()).await.send_request(req).await.unwrap()
        };
        let upstream = senders.recv().await.unwrap();
        let mut body = resp.into_body();
        let mut worst = Duration::ZERO;
        for (i, kind) in ["ADDED", "MODIFIED", "DELETED"].iter().enumerate() {
            let event = Bytes::from(format!(
                "{{\"type\":\"{kind}\",\"object\":{{\"kind\":\"Pod\",\"metadata\":{{\"resourceVersion\":\"{}\"}}}}}}\n",
                11 + i
            ));
            let written = Instant::now();
            upstream.send(event.clone()).await.unwrap();
            let got = next_data(&mut body).await.unwrap();
            let latency = written.elapsed();
            assert_eq!(got, event, "{proto}: events arrive whole and in order");
            worst = worst.max(latency);
        }
        // Generous for CI; on a quiet machine this is well under a millisecond.
        assert!(
            worst < Duration::from_millis(100),
            "{proto}: worst latency {worst:?}"
        );
    }
}

// Bounded memory for large bodies is measured on the real process, where kernel socket
// buffers do not blur the figure: gateway_process::a_50mb_body_streams_through_the_process_with_bounded_memory.
