//! The reflector against an upstream that misbehaves (issue 4, bad input): a malformed
//! object in a list is skipped, a malformed watch event makes the reflector relist, and
//! neither crashes it nor leaves a stale or broken object in the cache. (Its transitions
//! one by one, without a server: `cache::reflector::step`'s unit tests.)

mod support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};
use support::stub::{channel_body, handler, json_response, pods_only_discovery, stub_pod, Stub};
use support::watch::wait_until_cached;
use tokio::sync::mpsc;
use watchgate::body;
use watchgate::cache::reflector::WatchListMode;
use watchgate::config::GatewayConfig;
use watchgate::server::{Gateway, GatewayHandle};

/// How a scripted watch goes on once its script is done.
enum Then {
    /// Open until the client goes away.
    StayOpen,
    /// The upstream ends the stream.
    Close,
}

/// The one stub upstream of these tests: an apiserver serving pods alone, scripted.
///
/// Its paged lists with `limit=500` (the reflector's) answer `lists[n]` for the n-th one,
/// the last entry from then on; other reads of the collection (the gateway forwards them
/// before its cache has synced) see the state of the last reflector list, so that they
/// do not move the script on. Its n-th watch streams what `watch(n, tx)` sends and then
/// goes on as the script returns. Also returns the count of reflector lists.
async fn list_watch_stub<W, Fut>(
    lists: Vec<(&'static str, Value)>,
    watch: W,
) -> (Stub, Arc<AtomicUsize>)
where
    W: Fn(usize, mpsc::Sender<Bytes>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Then> + Send + 'static,
{
    let lists = Arc::new(lists);
    let listed = Arc::new(AtomicUsize::new(0));
    let watches = Arc::new(AtomicUsize::new(0));
    let watch = Arc::new(watch);
    let count = listed.clone();
    let stub = Stub::start(handler(move |req| {
        let (lists, listed, watches, watch) = (
            lists.clone(),
            listed.clone(),
            watches.clone(),
            watch.clone(),
        );
        async move {
            let q = req.uri().query().unwrap_or("").to_string();
            match req.uri().path() {
                "/api/v1" => pods_only_discovery(),
                "/api/v1/pods" if q.contains("watch=true") => {
                    let n = watches.fetch_add(1, Ordering::SeqCst);
                    let (tx, body) = channel_body(8);
                    let script = watch(n, tx.clone());
                    tokio::spawn(async move {
                        if let Then::StayOpen = script.await {
                            tx.closed().await;
                        }
                    });
                    let mut r = Response::new(body);
                    r.headers_mut()
                        .insert("content-type", "application/json".parse().unwrap());
                    r
                }
                "/api/v1/pods" => {
                    let n = if q.contains("limit=500") {
                        listed.fetch_add(1, Ordering::SeqCst)
                    } else {
                        listed.load(Ordering::SeqCst).saturating_sub(1)
                    };
                    let (rv, items) = &lists[n.min(lists.len() - 1)];
                    json_response(
                        StatusCode::OK,
                        json!({"kind": "PodList", "apiVersion": "v1",
                                         "metadata": {"resourceVersion": rv}, "items": items}),
                    )
                }
                _ => {
                    let mut r = Response::new(body::empty());
                    *r.status_mut() = StatusCode::NOT_FOUND;
                    r
                }
            }
        }
    }))
    .await;
    (stub, count)
}

/// Sends one watch event line.
async fn send(tx: &mpsc::Sender<Bytes>, event: Value) {
    let _ = tx.send(format!("{event}\n").into()).await;
}

/// The ERROR event of a compacted resourceVersion.
fn expired(message: &str) -> Value {
    json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "status": "Failure", "message": message, "reason": "Expired", "code": 410}})
}

/// A gateway in front of `stub` that lists and watches (these scripts are for list+watch;
/// tests/cache_watch_list.rs covers watch-list), caching pods from the start if `prewarm`.
async fn gateway(stub: &Stub, prewarm: bool) -> GatewayHandle {
    let mut cfg = GatewayConfig::for_upstream_url(&stub.url()).unwrap();
    cfg.reflector.watch_list = WatchListMode::Off;
    if prewarm {
        cfg.cache = Some(watchgate::cache::registry::CachePolicy {
            prewarm: vec!["pods".into()],
            exclude: vec![],
        });
    }
    Gateway::start(cfg).await.expect("gateway starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_upstream_objects_are_skipped_or_relisted_never_cached() {
    let (stub, lists) = list_watch_stub(
        vec![
            // A list with one item that has no resourceVersion.
            ("10", json!([stub_pod("a", 5), {"metadata": {"name": "bad", "namespace": "ns"}}, stub_pod("b", 6)])),
            // The relist: a moved on, b is gone, c is new.
            ("20", json!([stub_pod("a", 12), stub_pod("c", 15)])),
        ],
        |n, tx| async move {
            if n == 0 {
                // One good event, then one the reflector cannot understand.
                send(&tx, json!({"type": "MODIFIED", "object": stub_pod("a", 11)})).await;
                send(&tx, json!({"type": "MODIFIED", "object": {"metadata": {"name": "a"}}})).await;
            }
            Then::StayOpen
        },
    )
    .await;
    let gw = gateway(&stub, false).await;

    // The first cacheable read starts the reflector; poll until the relisted state shows.
    // Every state a reader sees on the way is one the upstream described: never the broken
    // object, never a half-applied relist.
    let mut seen_first_state = false;
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |resp| {
        let v = resp.json();
        let got: Vec<(String, String)> = v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().unwrap().to_string(),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_string(),
                )
            })
            .collect();
        let rv = v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
        let allowed: [(&str, Vec<(&str, &str)>); 3] = [
            ("10", vec![("a", "5"), ("b", "6")]),
            ("11", vec![("a", "11"), ("b", "6")]),
            ("20", vec![("a", "12"), ("c", "15")]),
        ];
        let ok = allowed.iter().any(|(arv, items)| {
            *arv == rv
                && got.len() == items.len()
                && got.iter().zip(items).all(|(g, w)| g.0 == w.0 && g.1 == w.1)
        });
        assert!(
            ok,
            "a reader saw a state the upstream never had: rv {rv}, {got:?}"
        );
        seen_first_state |= rv != "20";
        // The relist after the malformed event.
        rv == "20"
    })
    .await;
    assert!(
        seen_first_state,
        "the first list's state (without the malformed item) was never served"
    );
    assert!(lists.load(Ordering::SeqCst) >= 2, "a relist happened");
}

/// A relist answered by an apiserver that is behind (a list older than the cache, which a
/// consistent read never is) must not be installed: it would end every downstream watch
/// ("relist contradicts the cache"). The reflector drops it and lists again, and the
/// watcher's stream continues with the difference.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_older_than_the_cache_is_not_installed() {
    let (stub, lists) = list_watch_stub(
        vec![
            ("10", json!([stub_pod("a", 5), stub_pod("b", 6)])),
            // The relist, from an apiserver behind the cache's 11.
            ("8", json!([stub_pod("a", 5), stub_pod("b", 6)])),
            ("20", json!([stub_pod("a", 12), stub_pod("c", 15)])),
        ],
        |n, tx| async move {
            if n > 0 {
                return Then::StayOpen;
            }
            send(
                &tx,
                json!({"type": "MODIFIED", "object": stub_pod("a", 11)}),
            )
            .await;
            send(&tx, expired("too old resource version: 11 (12)")).await;
            Then::Close
        },
    )
    .await;
    let gw = gateway(&stub, true).await;
    support::watch::wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let mut watch =
        support::watch::open_ok(&gw.url(), "/api/v1/pods?watch=true&resourceVersion=10").await;
    watch.assert_from_cache();
    let got: Vec<(String, String, u64)> = watch
        .take(4, "the change, then the relist's difference")
        .await
        .iter()
        .map(|e| (e.ty().to_string(), e.name().to_string(), e.rv()))
        .collect();
    assert_eq!(
        got,
        [
            ("MODIFIED".into(), "a".into(), 11),
            ("MODIFIED".into(), "a".into(), 12),
            ("ADDED".into(), "c".into(), 15),
            ("DELETED".into(), "b".into(), 20),
        ]
    );
    assert!(
        lists.load(Ordering::SeqCst) >= 3,
        "the stale list was followed by another"
    );
    let stats = gw
        .cache()
        .unwrap()
        .caches()
        .into_iter()
        .find(|c| c.info.resource == "pods")
        .unwrap()
        .stats
        .clone();
    assert!(stats.behind.load(Ordering::Relaxed) >= 1);
    watch.expect_quiet(Duration::from_millis(300)).await;
}

/// Issue 27 item 2, the reflector's side: with a single `--server` endpoint, a relist
/// answered by a state older than the cache three times in a row is an upstream whose
/// resourceVersions went back (a restore), not a lagging one: every cache is dropped and
/// rebuilt, its watches end with an ERROR 410, and the new cache holds the new state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_relists_from_a_lone_upstream_reset_the_caches() {
    let go = Arc::new(tokio::sync::Notify::new());
    let g = go.clone();
    let (stub, lists) = list_watch_stub(
        vec![
            ("10", json!([stub_pod("a", 5), stub_pod("b", 6)])),
            // The restored cluster, behind the cache's 10 for good.
            ("8", json!([stub_pod("x", 3)])),
        ],
        move |n, tx| {
            let go = g.clone();
            async move {
                if n > 0 {
                    return Then::StayOpen;
                }
                // Once the test's watch is open: the restored etcd compacted.
                go.notified().await;
                send(&tx, expired("too old resource version: 10 (12)")).await;
                Then::Close
            }
        },
    )
    .await;
    let gw = gateway(&stub, true).await;
    support::watch::wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let mut watch =
        support::watch::open_ok(&gw.url(), "/api/v1/pods?watch=true&resourceVersion=0").await;
    watch.assert_from_cache();
    watch.take(2, "the old cluster's pods").await;
    go.notify_one();

    // Three older relists (about 1 to 1.5 s apart), then the reset.
    let e = support::wait::within(
        "the reset's ERROR event",
        Duration::from_secs(20),
        watch.next_within(Duration::from_secs(20)),
    )
    .await
    .expect("an ERROR event, not the end of the stream");
    assert_eq!(e.ty(), "ERROR", "{e:?}");
    assert_eq!(e.object()["code"], 410, "{e:?}");
    assert_eq!(e.object()["reason"], "Expired", "{e:?}");
    watch.expect_end(Duration::from_secs(5)).await;
    let registry = gw.cache().unwrap();
    assert_eq!(registry.resets(), 1);

    let r =
        support::watch::wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true)
            .await;
    let list = r.json();
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["x"], "only the restored cluster's objects");
    assert_eq!(r.json()["metadata"]["resourceVersion"], "8");
    assert_eq!(registry.resets(), 1);
    assert_eq!(
        lists.load(Ordering::SeqCst),
        1 + 3 + 1,
        "the first list, three older ones, the new cache's"
    );
}
