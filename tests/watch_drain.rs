//! Watches served from the cache when the gateway drains (docs/watch.md): every stream,
//! over HTTP/1.1 and HTTP/2, ends cleanly at an event boundary as soon as the drain
//! begins, long before the drain's deadline, and is counted as ended for `shutdown`.

mod support;

use std::time::{Duration, Instant};

use support::objects::pod;
use support::servers::{cluster_config, start_gateway, start_sim_with};
use support::watch_clients::{h1_watch, H2Conn, Watch};
use support::watch_env::{put, warm};
use watchgate::drain::DrainOutcome;
use watchgate::watch::stats::EndReason;

/// Reads a stream to its end: every line must be a whole event, and the end clean.
async fn read_to_clean_end(w: &mut Watch, what: &str) -> usize {
    let mut events = 0;
    loop {
        match w.lines.next_line_within(Duration::from_secs(10)).await {
            Ok(Some(line)) => {
                let v: serde_json::Value = serde_json::from_slice(&line)
                    .unwrap_or_else(|e| panic!("{what}: not a whole event ({e}): {line:?}"));
                assert!(v["type"].is_string(), "{what}: {v}");
                events += 1;
            }
            Ok(None) => return events,
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_watches_end_cleanly_when_the_drain_begins() {
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store();
    let rv = put(
        store,
        pod("default", "a")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let gw = start_gateway(sim.url()).await;
    warm(gw.url(), sim.handle()).await;
    let addr = gw.handle().addr();

    let h2 = H2Conn::connect(addr).await.unwrap();
    let mut watches = Vec::new();
    for i in 0..3 {
        let path = format!("/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true");
        let mut w = h1_watch(addr, &path).await.unwrap();
        assert_eq!(w.source().as_deref(), Some("cache"), "h1 watch {i}");
        watches.push((format!("http/1.1 watch {i}"), w));
        w = h2.watch(&path).await.unwrap();
        assert_eq!(w.source().as_deref(), Some("cache"), "h2 watch {i}");
        watches.push((format!("http/2 watch {i}"), w));
    }
    // One event reaches every watcher, so each is live and idle when the drain begins.
    put(
        store,
        pod("default", "b")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    for (what, w) in &mut watches {
        let line = w
            .lines
            .next_line_within(Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"))
            .expect("an event");
        assert!(line.starts_with(br#"{"type":"ADDED""#), "{what}");
    }
    let pods = gw
        .handle()
        .cache()
        .expect("the cache is on")
        .get("", "v1", "pods")
        .expect("the pod cache");
    let ended_before = pods.store.hub().stats.terminated(EndReason::Shutdown);

    // A long deadline: the streams must end because the drain began, not because it cut.
    let mut handle = gw.into_handle();
    let started = Instant::now();
    let drain = tokio::spawn(async move { handle.drain_within(Duration::from_secs(60)).await });
    for (what, w) in &mut watches {
        let more = read_to_clean_end(w, what).await;
        assert_eq!(more, 0, "{what}: nothing after the drain began");
    }
    let outcome = drain.await.unwrap();
    assert_eq!(outcome, DrainOutcome::Complete);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the streams ended {:?} after the drain began",
        started.elapsed()
    );
    assert_eq!(
        pods.store.hub().stats.terminated(EndReason::Shutdown) - ended_before,
        6,
        "every cached watch ended for the shutdown"
    );
}
