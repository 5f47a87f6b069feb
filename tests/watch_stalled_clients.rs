//! Clients that stop reading in the middle of their initial state (docs/watch.md, "Slow
//! watchers and memory"): `resourceVersion=0` and `sendInitialEvents` watchers that never
//! read, during churn, over HTTP/1.1 (the whole connection stalls) and as HTTP/2 streams
//! (the stream's window stays shut while the connection lives on).
//!
//! What must hold, with `--write-stall-timeout` at 2 s:
//! - no stalled watcher keeps its starting snapshot past the timeout (counted in-process
//!   by the hub: the versions of the state pinned by watchers still sending their
//!   initial state), though the state keeps changing, and the history stays within its
//!   budget;
//! - each stalled HTTP/1.1 connection is closed by the gateway (its client, reading at
//!   last, finds the connection closed without the response's end), and its watch's
//!   resources are freed;
//! - a stalled HTTP/2 stream's connection lives on: its other streams get every event,
//!   and the stalled stream, read at last, ends cleanly;
//! - healthy watchers beside them receive every event, in order.

mod support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::objects::pod;
use support::servers::{cluster_config, start_gateway_with, start_sim_with};
use support::wait::wait_for_every;
use support::watch_checker::{Sig, StreamChecker};
use support::watch_clients::{h1_watch, H2Conn, LineReader, RawWatch};
use support::watch_env::{self, put, update, warm};
use watchgate::config::GatewayConfig;
use watchgate::watch::hub::Hub;
use watchgate::watch::stats::EndReason;

const STALL: Duration = Duration::from_secs(2);
const BIG: usize = 128 * 1024;
/// The initial state: 4 MB, far more than a stalled client's socket buffers (a few KiB
/// with the small receive buffer) or an HTTP/2 stream's window (1 MiB) take.
const BIGS: usize = 32;
const HISTORY_BYTES: usize = 16 << 20;
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Reads a reading watcher's stream up to the sentinel.
async fn read_to_sentinel(mut lines: LineReader, what: String) -> Result<Vec<Sig>, String> {
    let mut out = Vec::new();
    loop {
        let line = match lines.next_line_within(EVENT_TIMEOUT).await {
            Ok(Some(l)) => l,
            Ok(None) => return Err(format!("{what}: ended after {} events", out.len())),
            Err(e) => return Err(format!("{what}: {e} (after {} events)", out.len())),
        };
        let sig = Sig::from_line(&line)?;
        let done = sig.key == "live/zz-sentinel";
        out.push(sig);
        if done {
            return Ok(out);
        }
    }
}

fn counted(hub: &Hub) -> (u64, u64) {
    (
        hub.stats.terminated(EndReason::Slow),
        hub.stats.terminated(EndReason::ClientGone),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_initial_states_are_released_and_stalled_connections_closed() {
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    for i in 0..BIGS {
        put(
            &store,
            pod("bulk", &format!("big-{i}"))
                .label("app", "bulk")
                .running_on("node-9")
                .pad(BIG)
                .build(),
        );
    }
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.write_stall_timeout = Some(STALL);
    cfg.watch.stall_timeout = STALL;
    cfg.watch.history_bytes = HISTORY_BYTES;
    let gw = start_gateway_with(cfg).await;
    warm(gw.url(), sim.handle()).await;
    let cache = gw
        .handle()
        .cache()
        .and_then(|r| r.get("", "v1", "pods"))
        .expect("the pod cache");
    let hub = cache.store.hub();
    let addr = gw.handle().addr();
    let from = store.current_rv();
    let (slow_before, gone_before) = counted(hub);

    // Healthy watchers: one on its own HTTP/1.1 connection, one stream of the HTTP/2
    // connection that also carries two stalled streams.
    let path = format!("/api/v1/pods?watch=true&resourceVersion={from}");
    let healthy_h1 = h1_watch(addr, &path).await.expect("healthy h1 watch");
    let h2 = H2Conn::connect(addr).await.expect("h2c connection");
    let healthy_h2 = h2.watch(&path).await.expect("healthy h2 watch");
    let healthy = [("h1", healthy_h1), ("h2", healthy_h2)].map(|(name, w)| {
        assert_eq!(w.status, 200);
        tokio::spawn(read_to_sentinel(w.lines, format!("healthy {name} watcher")))
    });

    // Stalled: RV=0 and watch-list (sendInitialEvents) watches that never read.
    let rv0 = "/api/v1/pods?watch=true&resourceVersion=0";
    let watch_list = "/api/v1/pods?watch=true&resourceVersion=0&sendInitialEvents=true\
                      &resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let opened = Instant::now();
    let mut stalled_h1 = Vec::new();
    for path in [rv0, rv0, watch_list, watch_list] {
        let mut w = RawWatch::open(addr, path, 4096).await.expect("stalled h1");
        let (code, _) = w.head().await.expect("response head");
        assert_eq!(code, 200);
        stalled_h1.push(w);
    }
    let mut stalled_h2 = Vec::new();
    for path in [rv0, watch_list] {
        let w = h2.watch(path).await.expect("stalled h2 stream");
        assert_eq!(w.status, 200);
        stalled_h2.push(w);
    }
    let stalled = stalled_h1.len() + stalled_h2.len();
    assert!(
        hub.pinned_snapshots() >= stalled,
        "{} snapshots pinned with {stalled} watchers still sending their initial state",
        hub.pinned_snapshots()
    );

    // Churn on the big pods (each write a full-size new version, so a pinned snapshot
    // would grow apart from the current state) until every stalled watcher has let go:
    // no snapshot pinned, and only the two healthy watchers and the two HTTP/2 streams
    // (whose connection lives) still open.
    #[derive(Debug)]
    struct Churned {
        after: Duration,
        writes: usize,
        pinned: usize,
        open: i64,
    }
    let mut writes = 0usize;
    let mut max_history = 0usize;
    let churned = wait_for_every(
        "every stalled watcher has let go: 0 snapshots pinned, 4 watchers open",
        (STALL + EVENT_TIMEOUT).saturating_sub(opened.elapsed()),
        Duration::from_millis(50),
        || {
            update(&store, "bulk", &format!("big-{}", writes % BIGS), |p| {
                let c = char::from(b'a' + (writes % 26) as u8);
                p["metadata"]["annotations"]["pad"] = c.to_string().repeat(BIG).into();
            })
            .expect("big pods exist");
            writes += 1;
            max_history = max_history.max(hub.history_stats().bytes);
            std::future::ready(Churned {
                open: hub.stats.watchers.load(Ordering::Relaxed),
                pinned: hub.pinned_snapshots(),
                after: opened.elapsed(),
                writes,
            })
        },
        |c| c.pinned == 0 && c.open == 4,
    )
    .await;
    let (released, writes) = (churned.after, churned.writes);
    println!(
        "{stalled} stalled watchers let go after {released:?} ({writes} writes of {} KiB); \
         history peaked at {:.1} MB (budget {} MB)",
        BIG >> 10,
        max_history as f64 / 1e6,
        HISTORY_BYTES >> 20
    );
    assert!(
        released >= STALL,
        "released after {released:?}, before the {STALL:?} stall timeout"
    );
    assert!(
        max_history <= HISTORY_BYTES + 2 * BIG + (64 << 10),
        "the history held {max_history} bytes (budget {HISTORY_BYTES})"
    );
    // Each stalled watcher is counted once: as slow when the hub took its snapshot back
    // first, as gone when its connection was closed first. The HTTP/2 streams' snapshots
    // can only have been taken back.
    let (slow, gone) = counted(hub);
    let (slow, gone) = (slow - slow_before, gone - gone_before);
    assert_eq!(slow + gone, stalled as u64, "slow {slow}, gone {gone}");
    assert!(slow >= stalled_h2.len() as u64, "slow {slow}");

    // The healthy watchers got every event, in order, with the connection beside them
    // alive (the HTTP/2 one) or closed (the HTTP/1.1 ones).
    put(
        &store,
        pod("live", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let expected = Arc::new(watch_env::log_since(&store, from, None));
    for (i, t) in healthy.into_iter().enumerate() {
        let events = tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("healthy watchers finish within 60 s")
            .unwrap()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut checker = StreamChecker::new(expected.clone());
        for e in &events {
            checker.observe(e);
        }
        let v = checker.finish(true);
        assert!(v.is_empty(), "healthy watcher {i}: {v:?}");
    }

    // Read at last: each stalled HTTP/1.1 client finds its connection closed without the
    // response's terminating chunk (cut, not ended), after what its buffers held.
    for (i, w) in stalled_h1.iter_mut().enumerate() {
        let mut lines = 0;
        let end = loop {
            match w.next_line_within(EVENT_TIMEOUT).await {
                Ok(Some(_)) => lines += 1,
                other => break other,
            }
        };
        match end {
            Err(e) if e.contains("without the terminating chunk") || e.contains("read:") => {}
            other => panic!("stalled h1 watcher {i}: after {lines} events, {other:?}"),
        }
        assert!(
            lines < BIGS,
            "stalled h1 watcher {i} got its whole initial state"
        );
    }
    // The stalled HTTP/2 streams end cleanly once read, without their whole initial state.
    for (i, w) in stalled_h2.into_iter().enumerate() {
        let mut lines = w.lines;
        let mut n = 0;
        loop {
            match lines.next_line_within(EVENT_TIMEOUT).await {
                Ok(Some(_)) => n += 1,
                Ok(None) => break,
                Err(e) => panic!("stalled h2 stream {i}: {e} after {n} events"),
            }
        }
        assert!(
            n < BIGS,
            "stalled h2 stream {i} got its whole initial state"
        );
    }
}
