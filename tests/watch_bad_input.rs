//! Bad watch input through the gateway (issue 5, "Bad input"): invalid watch parameters
//! get exactly the simulator's answer (status code, and the Status body's code, reason and
//! message), and clients that send garbage or half-close their connection affect nobody
//! else: another watcher keeps receiving its events.

mod support;

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::servers::{cluster_config, start_gateway, start_sim_with, GatewayServer, SimServer};
use support::watch::{open, open_ok, put_pod, rv_at_least, typed, wait_until_cached, Event, Watch};

const NS1: &str = "/api/v1/namespaces/ns1/pods";

async fn started() -> (SimServer, GatewayServer, u64) {
    let sim = start_sim_with(cluster_config()).await;
    let h = sim.handle();
    put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    let n = put_pod(h, "ns1", "b", json!({"app": "db"}), "node-2", "Pending");
    let gw = start_gateway(sim.url()).await;
    wait_until_cached(gw.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(n)).await;
    (sim, gw, n)
}

/// What one answer looked like: the status, then either the Status body or, for a 200
/// stream, its events up to the end.
#[derive(Debug, PartialEq)]
enum Answer {
    Error(u16, Value),
    Stream(Vec<Value>),
}

async fn answer(w: &mut Watch) -> Answer {
    if w.status.as_u16() != 200 {
        return Answer::Error(w.status.as_u16(), w.body_json().await);
    }
    let mut evs = Vec::new();
    // A 200 here must be a stream that ends by itself (a negative timeout): bounded.
    while let Some(e) = w.next_within(Duration::from_secs(10)).await {
        evs.push(e.json);
    }
    Answer::Stream(evs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_watch_parameters_get_the_apiservers_status() {
    let (sim, gw, n) = started().await;
    let cases: Vec<String> = vec![
        // sendInitialEvents without (or with a wrong) resourceVersionMatch.
        format!("{NS1}?watch=1&sendInitialEvents=true"),
        format!("{NS1}?watch=1&resourceVersion=0&sendInitialEvents=true"),
        format!("{NS1}?watch=1&resourceVersion={n}&sendInitialEvents=true"),
        format!("{NS1}?watch=1&resourceVersion={n}&sendInitialEvents=true&resourceVersionMatch=Exact"),
        format!("{NS1}?watch=1&resourceVersion=0&sendInitialEvents=true&resourceVersionMatch=Bogus"),
        // (`sendInitialEvents=maybe` is not bad input: apimachinery's
        // Convert_Slice_string_To_bool reads anything but "0"/"false" as true.)
        // resourceVersionMatch on a watch without sendInitialEvents, and invalid values.
        format!("{NS1}?watch=1&resourceVersion={n}&resourceVersionMatch=NotOlderThan"),
        format!("{NS1}?watch=1&resourceVersion=0&resourceVersionMatch=Exact"),
        format!("{NS1}?watch=1&resourceVersion={n}&resourceVersionMatch=Foo"),
        "/api/v1/watch/namespaces/ns1/pods?resourceVersion=0&sendInitialEvents=true&resourceVersionMatch=NotOlderThan".to_string(),
        // timeoutSeconds: negative (a stream that ends at once) and not a number.
        format!("{NS1}?watch=1&resourceVersion={n}&timeoutSeconds=-1"),
        format!("{NS1}?watch=1&resourceVersion=0&timeoutSeconds=-5"),
        format!("{NS1}?watch=1&resourceVersion={n}&timeoutSeconds=soon"),
        // Past what Go's int64 nanoseconds hold: handlers/get.go's
        // `time.Duration(n) * time.Second` wraps (no error, no panic) to a negative
        // duration (-1 s for the largest), so these end at once, like -1.
        format!("{NS1}?watch=1&resourceVersion={n}&timeoutSeconds=9223372036854775807"),
        format!("{NS1}?watch=1&resourceVersion=0&timeoutSeconds=9223372036854775807"),
        format!("{NS1}?watch=1&resourceVersion={n}&timeoutSeconds=9223372037"),
        format!("{NS1}?watch=1&resourceVersion=0&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=9223372037"),
        // One past the int64 range: the decoder's 400.
        format!("{NS1}?watch=1&resourceVersion={n}&timeoutSeconds=9223372036854775808"),
        // Malformed label selectors.
        format!("{NS1}?watch=1&resourceVersion={n}&labelSelector=app%3D%3D%3D"),
        format!("{NS1}?watch=1&resourceVersion=0&labelSelector=a%20b"),
        format!("{NS1}?watch=1&resourceVersion={n}&labelSelector=app%20in%20(a"),
        format!("{NS1}?watch=1&resourceVersion={n}&labelSelector=,"),
        // Malformed field selectors and unsupported field labels.
        format!("{NS1}?watch=1&resourceVersion={n}&fieldSelector=foo"),
        format!("{NS1}?watch=1&resourceVersion=0&fieldSelector=a%3Db%5C"),
        format!("{NS1}?watch=1&resourceVersion={n}&fieldSelector=spec.bogus%3Dx"),
        format!("/api/v1/pods?watch=1&resourceVersion=0&fieldSelector=metadata.labels%3Dx"),
        format!("/api/v1/watch/namespaces/ns1/pods/a?resourceVersion={n}&fieldSelector=metadata.name%3Db"),
        // Non-numeric, negative and out-of-range resourceVersions.
        format!("{NS1}?watch=1&resourceVersion=abc"),
        format!("{NS1}?watch=1&resourceVersion=-1"),
        format!("{NS1}?watch=1&resourceVersion=1.5"),
        format!("{NS1}?watch=1&resourceVersion=18446744073709551616"),
        "/api/v1/watch/namespaces/ns1/pods?resourceVersion=x1".to_string(),
        format!("{NS1}?watch=1&resourceVersion=-3&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
    ];
    let mut mismatches = Vec::new();
    let mut streams_from_cache = Vec::new();
    for path in &cases {
        let mut s = open(sim.url(), path).await;
        let mut g = open(gw.url(), path).await;
        let (sa, ga) = (answer(&mut s).await, answer(&mut g).await);
        if let Answer::Error(code, body) = &sa {
            // The ground truth must be a real Status, or the comparison proves nothing.
            assert_eq!(
                body["kind"], "Status",
                "{path}: simulator answered {code} {body}"
            );
            assert_eq!(body["code"], json!(code), "{path}: {body}");
        }
        if sa != ga {
            mismatches.push(format!(
                "{path}\n  simulator (expected): {sa:?}\n  gateway (got):        {ga:?}"
            ));
        }
        if matches!(sa, Answer::Stream(_)) && g.source() != Some("cache") {
            streams_from_cache.push(format!("{path}: x-watchgate-source {:?}", g.source()));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} bad watch requests answered differently through the gateway:\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );
    assert!(
        streams_from_cache.is_empty(),
        "valid (if odd) watches with an RV must be served from the cache:\n{}",
        streams_from_cache.join("\n")
    );
}

/// Reads from `conn` until EOF, at most 10 s; returns what came.
async fn read_to_end(conn: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut out = Vec::new();
    match tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut out)).await {
        Ok(Ok(_)) => out,
        // A reset is also an end.
        Ok(Err(_)) => out,
        Err(_) => panic!(
            "{what}: the gateway neither answered nor closed within 10 s (got {:?})",
            String::from_utf8_lossy(&out)
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_half_closed_clients_do_not_affect_other_watchers() {
    let (sim, gw, n) = started().await;
    let h = sim.handle();
    let addr = gw.url().trim_start_matches("http://").to_string();
    let watch_path = format!("{NS1}?watch=1&resourceVersion={n}");
    let mut healthy = open_ok(gw.url(), &watch_path).await;

    // 1. Garbage instead of HTTP: an error answer (or a close), never a hang.
    let mut c = TcpStream::connect(&addr).await.unwrap();
    c.write_all(b"\x16\x03\x01GARBAGE \x00\xff /// HTTP/9.9\r\nfoo\r\n\r\n")
        .await
        .unwrap();
    let got = read_to_end(&mut c, "garbage").await;
    assert!(
        got.is_empty() || got.starts_with(b"HTTP/1.1 4"),
        "garbage must get a 4xx or a close, got {:?}",
        String::from_utf8_lossy(&got)
    );

    // 2. A watch request, then the client half-closes its side (FIN) without reading.
    let mut half = TcpStream::connect(&addr).await.unwrap();
    half.write_all(
        format!("GET {watch_path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    half.shutdown().await.unwrap();

    // 3. Half a request line, then a half-close.
    let mut partial = TcpStream::connect(&addr).await.unwrap();
    partial
        .write_all(b"GET /api/v1/namespaces/ns1/po")
        .await
        .unwrap();
    partial.shutdown().await.unwrap();
    read_to_end(&mut partial, "a half request, half-closed").await;

    // 4. A watch whose client goes away without a word, and one that never reads.
    let gone = open_ok(gw.url(), &watch_path).await;
    drop(gone);
    let mut stalled = TcpStream::connect(&addr).await.unwrap();
    stalled
        .write_all(format!("GET {watch_path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();

    // 5. An HTTP/1.1 request with a malformed header block on a watch path.
    let mut bad = TcpStream::connect(&addr).await.unwrap();
    bad.write_all(format!("GET {watch_path} HTTP/1.1\r\nHost {addr}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let got = read_to_end(&mut bad, "a malformed header").await;
    assert!(
        got.is_empty() || got.starts_with(b"HTTP/1.1 4"),
        "a malformed header must get a 4xx or a close, got {:?}",
        String::from_utf8_lossy(&got)
    );

    // The healthy watcher receives every change, in order, and a new watcher works.
    let mut want = Vec::new();
    for i in 0..20 {
        want.push(put_pod(
            h,
            "ns1",
            &format!("p{i}"),
            json!({}),
            "node-1",
            "Running",
        ));
    }
    let evs: Vec<Event> = healthy.take(20, "the healthy watcher's events").await;
    let rvs: Vec<u64> = evs.iter().map(Event::rv).collect();
    assert_eq!(rvs, want, "every change, once, in order");
    let mut fresh = open_ok(
        gw.url(),
        &format!("{NS1}?watch=1&resourceVersion={}", want[19]),
    )
    .await;
    put_pod(h, "ns1", "late", json!({}), "node-1", "Running");
    let e = fresh.next("a new watcher's event").await;
    assert_eq!(vec![e.typed()], typed(&[("ADDED", "late")]));
    let e = healthy.next("the healthy watcher's next event").await;
    assert_eq!(vec![e.typed()], typed(&[("ADDED", "late")]));
    healthy.assert_from_cache();
    fresh.assert_from_cache();
    drop(half);
    drop(stalled);
}
