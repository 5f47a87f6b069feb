//! What an idle HTTP/1.1 watch costs the gateway, counted on the heap (issue 5: at most
//! 4 KiB of gateway memory per idle watcher).
//!
//! Served by hyper for its whole life, an HTTP/1.1 watch kept hyper's per-connection
//! buffers (about 27 KiB); it now leaves hyper once its head is written (src/server/h1.rs).
//! The benchmarks measure RSS with 10,000 watchers (docs/benchmarks.md); this test counts
//! live heap bytes with a counting allocator, so it fails if the watches stay in hyper.

mod support;

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::servers::{start_gateway, start_sim};

use support::counting_alloc::{live_bytes, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const PATH: &str = "/api/v1/namespaces/default/pods";
const WATCHERS: usize = 200;
/// Well under hyper's ~27 KiB per connection, with room for the client's side (its socket)
/// and allocator noise. Measured: about 3.3 KiB with the hand-over, 29 KiB without it.
const MAX_PER_WATCH: usize = 8 * 1024;

/// Opens a raw HTTP/1.1 watch and reads its response head, nothing more.
async fn open_watch(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!("GET {PATH}?watch=true&resourceVersion=0 HTTP/1.1\r\nHost: x\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut head = [0u8; 1024];
    let mut n = 0;
    let read = tokio::time::timeout(Duration::from_secs(10), async {
        while !head[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            let got = s.read(&mut head[n..]).await.unwrap();
            assert!(got > 0, "closed before the head");
            n += got;
        }
    })
    .await;
    assert!(read.is_ok(), "no watch head within 10 s");
    let head = String::from_utf8_lossy(&head[..n]);
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("x-watchgate-source: cache"), "{head}");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http1_watch_costs_a_few_kib() {
    let sim = start_sim().await;
    let gw = start_gateway(sim.url()).await;
    let list = format!("{PATH}?resourceVersion=0");
    support::watch::wait_until_cached(gw.url(), &list, |_| true).await;
    let addr = gw.url().trim_start_matches("http://").to_string();

    // Warm up what the first watches allocate once (index buckets, metric series).
    let mut warm = Vec::new();
    for _ in 0..10 {
        warm.push(open_watch(&addr).await);
    }
    let before = live_bytes();
    let mut watches = Vec::with_capacity(WATCHERS);
    for _ in 0..WATCHERS {
        watches.push(open_watch(&addr).await);
    }
    // The hand-over follows the head's flush at once; poll (bounded) for it to settle.
    support::wait::wait_for(
        &format!("at most {MAX_PER_WATCH} heap bytes per idle HTTP/1.1 watch (bytes per watch)"),
        Duration::from_secs(10),
        || async { live_bytes().saturating_sub(before) / WATCHERS },
        |&per_watch| per_watch <= MAX_PER_WATCH,
    )
    .await;
    drop((watches, warm));
}
