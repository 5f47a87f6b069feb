//! The `watchgate serve` binary as a process: it prints where it serves, streams a 50 MB
//! body with bounded memory (measured as the process's peak RSS), warns loudly when bound
//! beyond loopback, and drains on SIGTERM with a clean end of open watches.

mod support;

use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use support::raw::*;
use support::serve::Served;
use support::stub::*;
use watchgate::body::{self, Body};

/// `watchgate serve` in front of `upstream` on free ports, logging warnings only.
async fn spawn_gateway(upstream: &str, extra: &[&str]) -> Served {
    let args: Vec<&str> = ["--server", upstream]
        .iter()
        .chain(extra)
        .copied()
        .collect();
    Served::start_with_env(&args, &[("RUST_LOG", "warn")]).await
}

/// `VmRSS` and `VmHWM` (peak RSS) of a process, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} in /proc/{pid}/status"))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[tokio::test]
async fn a_50mb_body_streams_through_the_process_with_bounded_memory() {
    const TOTAL: u64 = 50 * 1024 * 1024;
    const CHUNK: usize = 64 * 1024;
    let stub = Stub::start(handler(|req: Request<hyper::body::Incoming>| async move {
        let total = if req.uri().query() == Some("limit=1") {
            CHUNK as u64
        } else {
            TOTAL
        };
        let chunk = Bytes::from(vec![b' '; CHUNK]);
        // Produced lazily: only as fast as the gateway takes it.
        let stream = futures_util::stream::unfold(0u64, move |sent| {
            let chunk = chunk.clone();
            async move {
                (sent < total).then(|| {
                    (
                        Ok::<_, std::convert::Infallible>(http_body::Frame::data(chunk)),
                        sent + CHUNK as u64,
                    )
                })
            }
        });
        let body: Body = body::boxed(http_body_util::StreamBody::new(stream));
        Response::builder()
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    }))
    .await;
    // Pods not cached: a consistent list would start a cache whose reflector lists the
    // stub's 50 MiB too, and this test measures forwarding alone.
    let gw = spawn_gateway(&stub.url(), &["--no-cache", "pods"]).await;
    let pid = gw.pid();

    // Warm up (connection pools, first allocations), then take the baseline.
    let (parts, bytes) = get(gw.addr(), "/api/v1/pods?limit=1").await;
    assert_eq!(parts.status, 200);
    assert_eq!(bytes.len(), CHUNK);
    let (rss_before, peak_before) = rss_kib(pid);

    let resp = h1_get(gw.addr(), "/api/v1/pods").await;
    let mut body = resp.into_body();
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        received += frame
            .unwrap()
            .into_data()
            .map(|d| d.len() as u64)
            .unwrap_or(0);
    }
    assert_eq!(received, TOTAL);
    let (rss_after, peak_after) = rss_kib(pid);
    let growth_mib = peak_after.saturating_sub(peak_before.max(rss_before)) as f64 / 1024.0;
    eprintln!(
        "watchgate RSS: before {rss_before} KiB (peak {peak_before} KiB), after {rss_after} KiB \
         (peak {peak_after} KiB); peak growth while streaming 50 MiB: {growth_mib:.1} MiB"
    );
    assert!(
        growth_mib < 16.0,
        "peak RSS grew by {growth_mib:.1} MiB while streaming 50 MiB"
    );
}

#[tokio::test]
async fn sigterm_drains_open_watches_cleanly_and_exits_by_the_deadline() {
    let (stub, mut rx_slot) = channel_stub(None).await;
    // Pods not cached: the stub answers only the watch (a cache would list and watch first).
    let gw = spawn_gateway(
        &stub.url(),
        &["--shutdown-timeout", "5s", "--no-cache", "pods"],
    )
    .await;
    let (parts, bytes) = get(gw.admin_addr(), "/healthz").await;
    assert_eq!((parts.status.as_u16(), &bytes[..]), (200, &b"ok"[..]));

    let resp = h1_get(gw.addr(), "/api/v1/pods?watch=true").await;
    let upstream = rx_slot.recv().await.unwrap();
    let event = Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\"}}\n");
    upstream.send(event.clone()).await.unwrap();
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, event);

    let signalled = Instant::now();
    gw.sigterm().await;

    // A clean end of the chunked stream: no error, no more data.
    let end = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("watch ended within the deadline");
    assert!(end.is_none(), "clean end of stream, got {end:?}");

    // The process exits successfully, well within its 5 s deadline.
    let exit = gw.wait_exit(Duration::from_secs(7)).await;
    assert!(exit.success(), "{exit}");
    assert!(signalled.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn binding_beyond_loopback_prints_a_loud_warning() {
    let stub = Stub::start(handler(|_req: Request<hyper::body::Incoming>| async move {
        Response::new(body::full("{}"))
    }))
    .await;
    let gw = spawn_gateway(&stub.url(), &["--address", "0.0.0.0"]).await;
    let stderr = gw.first_stderr_lines(3).await;
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("WARNING") && l.contains("0.0.0.0")),
        "{stderr:?}"
    );
    // It still works (over loopback).
    assert_eq!(get(gw.addr(), "/api").await.0.status, 200);
}
