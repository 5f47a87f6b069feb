//! The reflector's initial state from a watch-list (KEP-3157: `sendInitialEvents=true`),
//! and its fallback to the paged list when the upstream rejects or ignores it (issue 4).
//! The simulator supports watch-list; stub upstreams play the apiservers that do not.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use serde_json::{json, Value};
use support::http::Resp;
use support::stub::{channel_body, handler, json_response, pods_only_discovery, stub_pod, Stub};
use support::wait::wait_for;
use support::watch::wait_until_cached;
use support::Http;
use watchgate::body;
use watchgate::cache::reflector::WatchListMode;
use watchgate::config::GatewayConfig;
use watchgate::server::{Gateway, GatewayHandle};
use watchgate::sim::{start, SimConfig, SimHandle};

/// Pod `name` labelled app=`name`, on node n1, running.
fn put_pod(sim: &SimHandle, ns: &str, name: &str) -> u64 {
    support::watch::put_pod(sim, ns, name, json!({"app": name}), "n1", "Running")
}

async fn gateway(upstream: &str, mode: WatchListMode, idle: Duration) -> GatewayHandle {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).unwrap();
    cfg.reflector.watch_list = mode;
    cfg.reflector.initial_events_idle = idle;
    Gateway::start(cfg).await.expect("gateway starts")
}

/// Waits until the gateway's cache answers an RV=0 pod list with `want` (names and list
/// resourceVersion) and returns that list.
async fn wait_for_cache(gw: &GatewayHandle, want_names: &[&str], want_rv: Option<&str>) -> Value {
    let matches = |r: &Resp| {
        let v = r.json();
        let names: Vec<&str> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap())
            .collect();
        let rv = v["metadata"]["resourceVersion"].as_str().unwrap();
        names == want_names && want_rv.is_none_or(|w| w == rv)
    };
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", matches)
        .await
        .json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_syncs_from_a_watch_list_and_keeps_following_its_stream() {
    let sim = start(SimConfig::default()).await.unwrap();
    put_pod(&sim, "a", "p1");
    put_pod(&sim, "b", "p2");
    let gw = gateway(&sim.url(), WatchListMode::Auto, Duration::from_secs(10)).await;
    // A get starts the pods cache (the simulator does not count gets as lists, so its list
    // counter sees only the reflector).
    wait_until_cached(
        &gw.url(),
        "/api/v1/namespaces/a/pods/p1?resourceVersion=0",
        |_| true,
    )
    .await;
    let rv = sim.store().current_rv().to_string();
    let v = wait_for_cache(&gw, &["p1", "p2"], Some(&rv)).await;
    // One request built the state: a watch with sendInitialEvents, no list.
    assert_eq!(sim.stats().lists("pods"), 0, "no upstream list");
    assert_eq!(sim.stats().watches("pods"), 1, "one upstream watch");
    let direct = Http::new(&sim.url())
        .get("/api/v1/pods?resourceVersion=0")
        .await
        .json();
    assert_eq!(v["items"], direct["items"]);
    assert_eq!(v["metadata"], direct["metadata"]);

    // The same stream goes on as the watch: a new pod arrives without a new request.
    let rv = put_pod(&sim, "c", "p3").to_string();
    wait_for_cache(&gw, &["p1", "p2", "p3"], Some(&rv)).await;
    assert_eq!(
        sim.stats().lists("pods"),
        1,
        "only the test's own direct list"
    );
    assert_eq!(
        sim.stats().watches("pods"),
        1,
        "the watch-list's stream is the watch"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_list_off_lists_then_watches() {
    let sim = start(SimConfig::default()).await.unwrap();
    put_pod(&sim, "a", "p1");
    let gw = gateway(&sim.url(), WatchListMode::Off, Duration::from_secs(10)).await;
    // A get starts the pods cache (the simulator does not count gets as lists, so its list
    // counter sees only the reflector).
    wait_until_cached(
        &gw.url(),
        "/api/v1/namespaces/a/pods/p1?resourceVersion=0",
        |_| true,
    )
    .await;
    let rv = sim.store().current_rv().to_string();
    wait_for_cache(&gw, &["p1"], Some(&rv)).await;
    let rv = put_pod(&sim, "a", "p2").to_string();
    wait_for_cache(&gw, &["p1", "p2"], Some(&rv)).await;
    assert_eq!(sim.stats().lists("pods"), 1, "one paged list");
    assert_eq!(sim.stats().watches("pods"), 1, "one watch from its RV");
}

/// How a stub upstream answers a watch that asks for `sendInitialEvents`.
#[derive(Clone, Copy, Debug)]
enum OldApiserver {
    /// 422 Invalid, as 1.27–1.31 without the WatchList gate (and older servers, which
    /// forbid `resourceVersionMatch` on watches).
    Rejects,
    /// Ignores the parameter: ADDED events for the current state, then a plain watch
    /// that stays open, with no initial-events-end bookmark.
    IgnoresAndStaysOpen,
    /// Ignores the parameter and the stream ends after the ADDED events.
    IgnoresAndCloses,
}

#[derive(Default)]
struct Seen {
    watch_lists: AtomicUsize,
    watches: AtomicUsize,
    lists: AtomicUsize,
}

/// A stub apiserver without watch-list. Its state is pods a and b at RV 10. Plain
/// watches: the first one sends an ERROR 410 (so the reflector resyncs once more), later
/// ones stay open and quiet.
async fn old_apiserver(kind: OldApiserver, seen: Arc<Seen>) -> Stub {
    Stub::start(handler(move |req| {
        let seen = seen.clone();
        async move {
            let q = req.uri().query().unwrap_or("").to_string();
            match req.uri().path() {
                "/api/v1" => pods_only_discovery(),
                "/api/v1/pods" if q.contains("sendInitialEvents=true") => {
                    seen.watch_lists.fetch_add(1, Ordering::SeqCst);
                    if let OldApiserver::Rejects = kind {
                        return json_response(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                               "status": "Failure", "reason": "Invalid", "code": 422,
                               "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}),
                        );
                    }
                    let (tx, body) = channel_body(8);
                    tokio::spawn(async move {
                        for (name, rv) in [("a", 5), ("b", 6)] {
                            let ev = json!({"type": "ADDED", "object": stub_pod(name, rv)});
                            let _ = tx.send(format!("{ev}\n").into()).await;
                        }
                        if let OldApiserver::IgnoresAndStaysOpen = kind {
                            tx.closed().await;
                        }
                    });
                    Response::new(body)
                }
                "/api/v1/pods" if q.contains("watch=true") => {
                    let n = seen.watches.fetch_add(1, Ordering::SeqCst);
                    let (tx, body) = channel_body(8);
                    tokio::spawn(async move {
                        if n == 0 {
                            let gone = json!({"type": "ERROR", "object": {
                                "kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "reason": "Expired", "code": 410,
                                "message": "too old resource version: 10 (11)"}});
                            let _ = tx.send(format!("{gone}\n").into()).await;
                            return;
                        }
                        tx.closed().await;
                    });
                    Response::new(body)
                }
                "/api/v1/pods" => {
                    if q.contains("limit=500") {
                        seen.lists.fetch_add(1, Ordering::SeqCst);
                    }
                    json_response(
                        StatusCode::OK,
                        json!({"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": "10"},
                               "items": [stub_pod("a", 5), stub_pod("b", 6)]}),
                    )
                }
                _ => json_response(StatusCode::NOT_FOUND, json!({})),
            }
        }
    }))
    .await
}

async fn falls_back_to_the_paged_list(kind: OldApiserver) {
    let seen = Arc::new(Seen::default());
    let stub = old_apiserver(kind, seen.clone()).await;
    let gw = gateway(&stub.url(), WatchListMode::Auto, Duration::from_millis(300)).await;
    wait_for_cache(&gw, &["a", "b"], Some("10")).await;

    // The state came from the paged list; then the first plain watch got 410 and the
    // reflector synced again, straight from a paged list: an upstream that rejected or
    // ignored watch-list once is not asked again.
    wait_for(
        &format!("{kind:?}: a watch after the resync (watches seen)"),
        Duration::from_secs(20),
        || async { seen.watches.load(Ordering::SeqCst) },
        |&n| n >= 2,
    )
    .await;
    assert_eq!(
        seen.watch_lists.load(Ordering::SeqCst),
        1,
        "{kind:?}: watch-list tried once"
    );
    assert_eq!(
        seen.lists.load(Ordering::SeqCst),
        2,
        "{kind:?}: the first sync and the resync after the 410 paged a list"
    );
    wait_for_cache(&gw, &["a", "b"], Some("10")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_rejects_watch_list_gets_the_paged_list() {
    falls_back_to_the_paged_list(OldApiserver::Rejects).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_ignores_send_initial_events_gets_the_paged_list() {
    falls_back_to_the_paged_list(OldApiserver::IgnoresAndStaysOpen).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_ends_without_the_bookmark_gets_the_paged_list() {
    falls_back_to_the_paged_list(OldApiserver::IgnoresAndCloses).await;
}

/// A stub apiserver with watch-list whose first watch-list fails midway (an ERROR event:
/// a transient failure), so the reflector pages a list (a@3, RV 4); the plain watch from
/// there gets 410; the resync tries watch-list again, whose initial events carry changes
/// before the closing bookmark, and whose stream then goes on as the watch.
async fn flaky_modern_apiserver(seen: Arc<Seen>) -> Stub {
    Stub::start(handler(move |req| {
        let seen = seen.clone();
        async move {
            let q = req.uri().query().unwrap_or("").to_string();
            let line = |v: Value| bytes::Bytes::from(format!("{v}\n"));
            match req.uri().path() {
                "/api/v1" => pods_only_discovery(),
                "/api/v1/pods" if q.contains("sendInitialEvents=true") => {
                    let n = seen.watch_lists.fetch_add(1, Ordering::SeqCst);
                    let (tx, body) = channel_body(16);
                    tokio::spawn(async move {
                        if n == 0 {
                            let _ = tx
                                .send(line(json!({"type": "ADDED", "object": stub_pod("a", 3)})))
                                .await;
                            let err = json!({"type": "ERROR", "object": {
                                "kind": "Status", "apiVersion": "v1", "metadata": {},
                                "status": "Failure", "reason": "InternalError", "code": 500,
                                "message": "an error on the server"}});
                            let _ = tx.send(line(err)).await;
                            return;
                        }
                        let end = json!({"kind": "Pod", "apiVersion": "v1", "metadata": {
                            "resourceVersion": "8",
                            "annotations": {"k8s.io/initial-events-end": "true"}}});
                        for ev in [
                            json!({"type": "ADDED", "object": stub_pod("a", 5)}),
                            json!({"type": "ADDED", "object": stub_pod("b", 6)}),
                            json!({"type": "DELETED", "object": stub_pod("a", 7)}),
                            json!({"type": "MODIFIED", "object": stub_pod("b", 8)}),
                            json!({"type": "BOOKMARK", "object": end}),
                            // After the bookmark: the same stream is the watch.
                            json!({"type": "MODIFIED", "object": stub_pod("b", 9)}),
                        ] {
                            let _ = tx.send(line(ev)).await;
                        }
                        tx.closed().await;
                    });
                    Response::new(body)
                }
                "/api/v1/pods" if q.contains("watch=true") => {
                    seen.watches.fetch_add(1, Ordering::SeqCst);
                    let gone = json!({"type": "ERROR", "object": {
                        "kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Failure", "reason": "Expired", "code": 410,
                        "message": "too old resource version: 4 (5)"}});
                    Response::new(body::full(line(gone)))
                }
                "/api/v1/pods" => {
                    if q.contains("limit=500") {
                        seen.lists.fetch_add(1, Ordering::SeqCst);
                    }
                    json_response(
                        StatusCode::OK,
                        json!({"kind": "PodList", "apiVersion": "v1",
                               "metadata": {"resourceVersion": "4"},
                               "items": [stub_pod("a", 3)]}),
                    )
                }
                _ => json_response(StatusCode::NOT_FOUND, json!({})),
            }
        }
    }))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_watch_list_falls_back_once_and_changes_before_the_bookmark_count() {
    let seen = Arc::new(Seen::default());
    let stub = flaky_modern_apiserver(seen.clone()).await;
    let gw = gateway(&stub.url(), WatchListMode::Auto, Duration::from_secs(10)).await;
    // a was added then deleted, b modified twice (once before the bookmark, once after).
    let v = wait_for_cache(&gw, &["b"], Some("9")).await;
    assert_eq!(v["items"][0]["metadata"]["resourceVersion"], "9");
    assert_eq!(
        seen.watch_lists.load(Ordering::SeqCst),
        2,
        "a transient failure does not give up on watch-list"
    );
    assert_eq!(seen.lists.load(Ordering::SeqCst), 1, "one fallback list");
    assert_eq!(
        seen.watches.load(Ordering::SeqCst),
        1,
        "one plain watch (the 410)"
    );
}
