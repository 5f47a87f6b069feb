//! Periodic bookmarks (issue 18): one tick per resource type sends them, writing each
//! straight to an idle HTTP/1.1 watch's socket (the express lane) and leaving it to the
//! watch's body otherwise (HTTP/2, a busy connection). Through a real gateway, over
//! HTTP/1.1 and HTTP/2, in JSON and in protobuf (client-go's Accept header for built-in
//! types): each watcher gets its bookmarks on the kube-apiserver cadence (one per
//! interval while idle, never before the interval has passed), each carrying the RV of
//! the last event it was sent (never behind it, never ahead of an event it was not sent),
//! after that event.

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use prost::Message;
use support::objects::pod;
use support::servers::{cluster_config, start_gateway_with, start_sim_with};
use support::watch_clients::{h1_response, H2Conn};
use support::watch_env::{put, update, warm};
use watchgate::config::GatewayConfig;

const INTERVAL: Duration = Duration::from_millis(400);
/// Bookmarks each watcher must get.
const BOOKMARKS: usize = 3;
const JSON: &str = "application/json";
/// client-go's typed clients' Accept header for built-in types.
const CLIENT_GO_PROTOBUF: &str = "application/vnd.kubernetes.protobuf,application/json";

/// What a watcher read: (type, resourceVersion, when it arrived).
type Seen = Vec<(String, u64, Instant)>;

/// Reads events until `BOOKMARKS` bookmarks have arrived.
async fn read_bookmarks(mut w: support::watch::Watch, protobuf: bool) -> Seen {
    let mut seen = Seen::new();
    while seen.iter().filter(|(t, ..)| t == "BOOKMARK").count() < BOOKMARKS {
        let (ty, rv) = if protobuf {
            let (ty, env) = w.next_proto("the next event or bookmark").await;
            let unknown = watchgate::proto::decode_unknown(&env).expect("an envelope");
            let p = k8s_pb::api::core::v1::Pod::decode(unknown.raw).expect("a Pod");
            let rv = p.metadata.expect("metadata").resource_version().parse();
            (ty, rv.expect("a numeric RV"))
        } else {
            let e = w
                .next_within(INTERVAL * 20)
                .await
                .unwrap_or_else(|| panic!("watch {}: the stream ended", w.what));
            (e.ty().to_string(), e.rv())
        };
        seen.push((ty, rv, Instant::now()));
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_arrive_on_schedule_over_http1_and_http2_in_json_and_protobuf() {
    const EACH: usize = 4;
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.watch.bookmark_interval = INTERVAL;
    let gw = start_gateway_with(cfg).await;
    let addr = gw.handle().addr();
    warm(gw.url(), sim.handle()).await;
    put(
        &store,
        pod("ns-1", "p")
            .label("app", "web")
            .running_on("node-1")
            .pad(100)
            .build(),
    );
    let from = store.current_rv();
    let path = format!(
        "/api/v1/namespaces/ns-1/pods?watch=true&resourceVersion={from}\
         &allowWatchBookmarks=true&timeoutSeconds=300"
    );
    let started = Instant::now();
    let conn = H2Conn::connect(addr).await.expect("h2c");
    let mut tasks = Vec::new();
    for (proto_name, accept) in [
        ("h1", JSON),
        ("h1", CLIENT_GO_PROTOBUF),
        ("h2", JSON),
        ("h2", CLIENT_GO_PROTOBUF),
    ] {
        for _ in 0..EACH {
            let resp = match proto_name {
                "h1" => h1_response(addr, &path, accept).await,
                _ => conn.response(&path, accept).await,
            }
            .expect("a response head");
            let what = format!("{proto_name} {accept}");
            let w = support::watch::Watch::from_response(what.clone(), resp);
            assert_eq!(w.status, 200, "{what}");
            w.assert_from_cache();
            let protobuf = accept != JSON;
            tasks.push((what, tokio::spawn(read_bookmarks(w, protobuf))));
        }
    }
    // One event while they wait: the bookmarks after it carry its RV.
    let event_rv = update(&store, "ns-1", "p", |p| {
        p["metadata"]["labels"]["round"] = "1".into();
    })
    .expect("the pod exists");
    for (what, t) in tasks {
        let seen = support::wait::within("a watcher's bookmarks", INTERVAL * 60, t)
            .await
            .expect("the reader does not panic");
        let mut last_sent = from;
        let mut k = 0;
        for (ty, rv, at) in &seen {
            if ty != "BOOKMARK" {
                assert_eq!(
                    (ty.as_str(), *rv),
                    ("MODIFIED", event_rv),
                    "{what}: {seen:?}"
                );
                last_sent = *rv;
                continue;
            }
            k += 1;
            assert_eq!(
                *rv, last_sent,
                "{what}: bookmark {k} carries the RV of the last event sent before it: {seen:?}"
            );
            // Each bookmark is due one interval after the one before it (the first one
            // interval after the watch started), so the k-th cannot come sooner than k
            // intervals after the request was sent.
            assert!(
                at.duration_since(started) >= INTERVAL * k as u32,
                "{what}: bookmark {k} came {:?} after the watch started, before {k} intervals: {seen:?}",
                at.duration_since(started)
            );
        }
        assert!(
            seen.iter().any(|(ty, ..)| ty == "MODIFIED"),
            "{what}: the event arrived: {seen:?}"
        );
    }
    let cache = gw
        .handle()
        .cache()
        .and_then(|r| r.get("", "v1", "pods"))
        .expect("pods are cached");
    let stats = &cache.store.hub().stats;
    let direct = stats.bookmarks_written_directly.load(Ordering::Relaxed) as usize;
    let all = stats.bookmarks.load(Ordering::Relaxed) as usize;
    println!("{all} bookmarks, {direct} through the express lane");
    // The watches were idle when theirs were due: the tick wrote them through the lane,
    // over HTTP/2 as over HTTP/1.1 (a few may have found a stream still busy with the
    // event). Half of the watches are HTTP/2: without its lane at most half would be.
    assert!(
        direct >= all * 3 / 4 && direct <= all,
        "{direct} of {all} bookmarks written through the lane"
    );
}
