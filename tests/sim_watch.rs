//! WATCH semantics of the simulator: every cell of api-concepts.md's watch table
//! (resourceVersion unset, "0", N), 410 for a compacted RV as an ERROR event, bookmarks,
//! sendInitialEvents with the initial-events-end bookmark, timeoutSeconds, label and
//! field selectors with objects moving in and out, legacy /watch/ paths, faults.

// The store's closures return `Result<_, Status>` by design.
#![allow(clippy::result_large_err)]

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::json;
use support::sim::*;
use support::watch::{delete_pod, pods, put_pod, rv_of, Watch};
use support::Http;

const PODS: &str = "/api/v1/namespaces/ns1/pods";

/// rv2 a, rv3 b, rv4 a modified, rv5 c.
async fn fixture_with(f: impl FnOnce(&mut watchgate::sim::SimConfig)) -> watchgate::sim::SimHandle {
    let h = sim_with(f).await;
    put_pod(&h, "ns1", "a", json!({"app": "web"}), "node-1", "Pending");
    put_pod(&h, "ns1", "b", json!({"app": "db"}), "node-1", "Running");
    put_pod(&h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    put_pod(&h, "ns1", "c", json!({"app": "web"}), "node-1", "Running");
    assert_eq!(h.store().current_rv(), 5);
    h
}

async fn fixture() -> watchgate::sim::SimHandle {
    fixture_with(|_| {}).await
}

fn t(kind: &str, name: &str) -> (String, String) {
    (kind.to_string(), name.to_string())
}

async fn assert_live_changes(h: &watchgate::sim::SimHandle, w: &mut Watch) {
    put_pod(h, "ns1", "d", json!({}), "node-1", "Running");
    assert_eq!(w.next("an event").await.typed(), t("ADDED", "d"));
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "web", "v": "2"}),
        "node-1",
        "Running",
    );
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "MODIFIED");
    assert_eq!(e["object"]["metadata"]["labels"]["v"], "2");
    assert_eq!(e["object"]["kind"], "Pod");
    let rv = delete_pod(h, "ns1", "b");
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(e["object"]["metadata"]["name"], "b");
    assert_eq!(rv_of(&e["object"]), rv, "DELETED carries the deletion RV");
}

#[tokio::test]
async fn rv_unset_gets_state_then_changes() {
    let h = fixture().await;
    let mut w = watch(&h, &format!("{PODS}?watch=1")).await;
    assert_eq!(w.status, StatusCode::OK);
    for n in ["a", "b", "c"] {
        assert_eq!(w.next("an event").await.typed(), t("ADDED", n));
    }
    w.expect_quiet(Duration::from_millis(200)).await;
    assert_live_changes(&h, &mut w).await;
}

#[tokio::test]
async fn rv_0_gets_state_then_changes() {
    let h = fixture().await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=0")).await;
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "ADDED");
    assert_eq!(
        rv_of(&e["object"]),
        4,
        "initial ADDED carries the object's own RV"
    );
    assert_eq!(w.next("an event").await.typed(), t("ADDED", "b"));
    assert_eq!(w.next("an event").await.typed(), t("ADDED", "c"));
    assert_live_changes(&h, &mut w).await;
}

#[tokio::test]
async fn rv_n_starts_after_n_without_initial_state() {
    let h = fixture().await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=3")).await;
    let e = w.next("an event").await.json;
    assert_eq!(
        (e["type"].as_str(), rv_of(&e["object"])),
        (Some("MODIFIED"), 4)
    );
    let e = w.next("an event").await.json;
    assert_eq!(
        (e["type"].as_str(), rv_of(&e["object"])),
        (Some("ADDED"), 5)
    );
    w.expect_quiet(Duration::from_millis(200)).await;
    assert_live_changes(&h, &mut w).await;
}

#[tokio::test]
async fn rv_current_sends_only_new_changes() {
    let h = fixture().await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    w.expect_quiet(Duration::from_millis(200)).await;
    assert_live_changes(&h, &mut w).await;
}

#[tokio::test]
async fn compacted_rv_is_200_then_one_410_error_event() {
    let h = fixture().await;
    h.store().compact(4);
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=2")).await;
    assert_eq!(w.status, StatusCode::OK);
    let e = w.next("an event").await.json;
    assert_eq!(
        e,
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
               "status": "Failure", "message": "too old resource version: 2 (4)",
               "reason": "Expired", "code": 410}})
    );
    w.expect_end(Duration::from_secs(5)).await;
    // The compaction point itself is still watchable.
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=4")).await;
    assert_eq!(w.next("an event").await.typed(), t("ADDED", "c"));
}

#[tokio::test]
async fn watcher_behind_the_history_window_gets_410() {
    // History of 3 events: a watcher starting at RV 2 while 5 more writes land is behind.
    let h = fixture_with(|c| c.store.history_events = 3).await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=1")).await;
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    assert_eq!(e["object"]["message"], "too old resource version: 1 (2)");
    w.expect_end(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn bookmarks_are_periodic_when_allowed() {
    let h = fixture_with(|c| c.bookmark_interval = Duration::from_millis(200)).await;
    let mut w = watch(
        &h,
        &format!("{PODS}?watch=1&resourceVersion=5&allowWatchBookmarks=true"),
    )
    .await;
    let e = w.next_within(Duration::from_secs(3)).await.unwrap().json;
    assert_eq!(
        e,
        // The type's zero object, as the apiserver's watch cache writes a bookmark.
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"resourceVersion": "5"},
               "spec": {"containers": null}, "status": {}}})
    );
    // A write moves the next bookmark's RV, even for another namespace's object.
    put_pod(&h, "other", "x", json!({}), "node-1", "Running");
    let e = w.next_within(Duration::from_secs(3)).await.unwrap().json;
    assert_eq!(e["type"], "BOOKMARK");
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "6");
    // Without allowWatchBookmarks: none.
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=6")).await;
    w.expect_quiet(Duration::from_millis(700)).await;
}

#[tokio::test]
async fn send_initial_events_ends_with_annotated_bookmark() {
    let h = fixture().await;
    let mut w = watch(
        &h,
        &format!("{PODS}?watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersion=&resourceVersionMatch=NotOlderThan"),
    )
    .await;
    assert_eq!(w.status, StatusCode::OK);
    for n in ["a", "b", "c"] {
        assert_eq!(w.next("an event").await.typed(), t("ADDED", n));
    }
    assert_eq!(
        w.next("an event").await.json,
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"resourceVersion": "5",
                            "annotations": {"k8s.io/initial-events-end": "true"}},
               "spec": {"containers": null}, "status": {}}})
    );
    assert_live_changes(&h, &mut w).await;
}

#[tokio::test]
async fn send_initial_events_with_rv_n_waits_for_n() {
    let h = fixture_with(|c| c.too_large_rv_wait = Duration::from_millis(300)).await;
    let q =
        "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan";
    let mut w = watch(&h, &format!("{PODS}?{q}&resourceVersion=3")).await;
    for n in ["a", "b", "c"] {
        assert_eq!(w.next("an event").await.typed(), t("ADDED", n));
    }
    let e = w.next("an event").await.json;
    assert_eq!(e["object"]["metadata"]["resourceVersion"], "5");
    // An RV that never comes: the 504 arrives as an ERROR event.
    let mut w = watch(&h, &format!("{PODS}?{q}&resourceVersion=99")).await;
    assert_eq!(w.status, StatusCode::OK);
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 504);
    assert_eq!(
        e["object"]["message"],
        "Timeout: Too large resource version: 99, current: 5"
    );
}

#[tokio::test]
async fn watch_rv_unset_defaults_to_watch_list_but_legacy_path_does_not() {
    let h = fixture().await;
    // kube-apiserver 1.32+ SetListOptionsDefaults: watch=1 with RV unset/0 is a watch-list.
    let mut w = watch(&h, &format!("{PODS}?watch=1&allowWatchBookmarks=true")).await;
    for n in ["a", "b", "c"] {
        assert_eq!(w.next("an event").await.typed(), t("ADDED", n));
    }
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "BOOKMARK");
    assert_eq!(
        e["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    // The legacy /watch/ path does not set opts.Watch, so it is not defaulted.
    let mut w = watch(
        &h,
        "/api/v1/watch/namespaces/ns1/pods?allowWatchBookmarks=true",
    )
    .await;
    for n in ["a", "b", "c"] {
        assert_eq!(w.next("an event").await.typed(), t("ADDED", n));
    }
    w.expect_quiet(Duration::from_millis(300)).await;
    assert_live_changes(&h, &mut w).await;
}

#[tokio::test]
async fn send_initial_events_validation() {
    let h = fixture().await;
    for (q, msg) in [
        ("watch=1&sendInitialEvents=true",
         "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"),
        ("watch=1&resourceVersion=5&resourceVersionMatch=NotOlderThan",
         "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"),
        ("watch=1&sendInitialEvents=true&resourceVersionMatch=Exact&resourceVersion=5",
         "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan, resourceVersionMatch: Unsupported value: \"Exact\": supported values: \"NotOlderThan\"]"),
        ("sendInitialEvents=true",
         "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list"),
    ] {
        let (code, v) = get(&h, &format!("{PODS}?{q}")).await;
        assert_eq!(code.as_u16(), 422, "{q}: {v}");
        assert_eq!(v["reason"], "Invalid");
        assert_eq!(v["message"], msg, "{q}");
    }
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream_cleanly() {
    let h = fixture().await;
    let started = std::time::Instant::now();
    let mut w = watch(
        &h,
        &format!("{PODS}?watch=1&resourceVersion=5&timeoutSeconds=1"),
    )
    .await;
    w.expect_end(Duration::from_secs(5)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
}

/// A negative timeoutSeconds (or one that wraps to negative) is a timer that has fired
/// before kube-apiserver's serve loop selects; the loop then picks it or a ready event at
/// random, and the simulator gives the likeliest outcome every time: no event.
#[tokio::test]
async fn an_expired_timeout_ends_the_stream_before_the_initial_state() {
    let h = fixture().await;
    for timeout in ["-1", "9223372036854775807"] {
        let mut w = watch(
            &h,
            &format!("{PODS}?watch=1&resourceVersion=0&timeoutSeconds={timeout}"),
        )
        .await;
        w.expect_end(Duration::from_secs(5)).await;
    }
}

#[tokio::test]
async fn label_selector_transitions() {
    let h = fixture().await;
    let mut w = watch(
        &h,
        &format!("{PODS}?watch=1&resourceVersion=5&labelSelector=app%3Dweb"),
    )
    .await;
    // b starts matching → ADDED.
    put_pod(&h, "ns1", "b", json!({"app": "web"}), "node-1", "Running");
    assert_eq!(w.next("an event").await.typed(), t("ADDED", "b"));
    // a stops matching → DELETED carrying the PREVIOUS state at the event's RV
    // (cache_watcher.go convertToWatchEvent).
    let before = h.store().get(pods(), "ns1", "a").unwrap();
    let rv = put_pod(&h, "ns1", "a", json!({"app": "db"}), "node-1", "Running");
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "DELETED");
    let mut want = before.as_ref().clone();
    want["metadata"]["resourceVersion"] = json!(rv.to_string());
    assert_eq!(e["object"], want);
    assert_eq!(e["object"]["metadata"]["labels"]["app"], "web");
    // Changes of non-matching objects are invisible; matching before and after → MODIFIED.
    put_pod(
        &h,
        "ns1",
        "a",
        json!({"app": "db", "x": "1"}),
        "node-1",
        "Running",
    );
    put_pod(
        &h,
        "ns1",
        "c",
        json!({"app": "web", "x": "1"}),
        "node-1",
        "Running",
    );
    assert_eq!(w.next("an event").await.typed(), t("MODIFIED", "c"));
    delete_pod(&h, "ns1", "a");
    delete_pod(&h, "ns1", "c");
    assert_eq!(w.next("an event").await.typed(), t("DELETED", "c"));
    w.expect_quiet(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn field_selector_transitions_and_initial_state() {
    let h = fixture().await;
    let mut w = watch(
        &h,
        &format!("{PODS}?watch=1&fieldSelector=status.phase%3DPending"),
    )
    .await;
    // Initial state: nobody is Pending.
    put_pod(&h, "ns1", "b", json!({"app": "db"}), "node-1", "Pending");
    assert_eq!(w.next("an event").await.typed(), t("ADDED", "b"));
    let rv = put_pod(&h, "ns1", "b", json!({"app": "db"}), "node-1", "Running");
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "DELETED");
    assert_eq!(
        e["object"]["status"]["phase"], "Pending",
        "the previous state"
    );
    assert_eq!(rv_of(&e["object"]), rv, "at the event's RV");
}

#[tokio::test]
async fn single_object_watches() {
    let h = fixture().await;
    let mut legacy = watch(&h, "/api/v1/watch/namespaces/ns1/pods/a?resourceVersion=3").await;
    let mut by_field = watch(
        &h,
        &format!("{PODS}?watch=1&resourceVersion=3&fieldSelector=metadata.name%3Da"),
    )
    .await;
    for w in [&mut legacy, &mut by_field] {
        let e = w.next("an event").await.json;
        assert_eq!(
            (e["type"].as_str(), rv_of(&e["object"])),
            (Some("MODIFIED"), 4)
        );
    }
    put_pod(&h, "ns1", "b", json!({}), "node-1", "Running");
    put_pod(&h, "ns1", "a", json!({"n": "2"}), "node-1", "Running");
    for w in [&mut legacy, &mut by_field] {
        assert_eq!(w.next("an event").await.typed(), t("MODIFIED", "a"));
    }
    let (code, v) = get(
        &h,
        "/api/v1/watch/namespaces/ns1/pods/a?fieldSelector=metadata.name%3Db",
    )
    .await;
    assert_eq!(code.as_u16(), 400);
    assert_eq!(
        v["message"],
        "fieldSelector metadata.name doesn't match requested name"
    );
}

#[tokio::test]
async fn namespace_scope_and_all_namespaces() {
    let h = fixture().await;
    let mut all = watch(&h, "/api/v1/pods?watch=1&resourceVersion=5").await;
    let mut ns2 = watch(&h, "/api/v1/namespaces/ns2/pods?watch=1&resourceVersion=5").await;
    put_pod(&h, "ns1", "x", json!({}), "node-1", "Running");
    put_pod(&h, "ns2", "y", json!({}), "node-1", "Running");
    assert_eq!(all.next("an event").await.typed(), t("ADDED", "x"));
    assert_eq!(all.next("an event").await.typed(), t("ADDED", "y"));
    assert_eq!(ns2.next("an event").await.typed(), t("ADDED", "y"));
    ns2.expect_quiet(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn faults_force_410_and_drop_streams() {
    let h = fixture().await;
    h.faults().force_410_next_watch(1);
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    let e = w.next("an event").await.json;
    assert_eq!(e["type"], "ERROR");
    assert_eq!(e["object"]["code"], 410);
    w.expect_end(Duration::from_secs(5)).await;
    // Only the next one.
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    w.expect_quiet(Duration::from_millis(200)).await;
    h.faults().drop_watches_now();
    w.expect_end(Duration::from_secs(5)).await;
    // Periodic drops.
    h.faults()
        .set_drop_watch_after(Some(Duration::from_millis(300)));
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    w.expect_end(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn stats_count_watches() {
    let h = fixture().await;
    let _w1 = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    let _w2 = watch(&h, "/api/v1/watch/pods?resourceVersion=5").await;
    assert_eq!(h.stats().watches("pods"), 2);
    assert_eq!(h.stats().lists("pods"), 0);
}

#[tokio::test]
async fn many_writes_arrive_in_order_without_loss() {
    let h = fixture().await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    let mut want = Vec::new();
    for i in 0..600 {
        want.push(put_pod(
            &h,
            "ns1",
            &format!("p{}", i % 50),
            json!({"i": i.to_string()}),
            "node-1",
            "Running",
        ));
    }
    for rv in want {
        let e = w.next("an event").await.json;
        assert_eq!(rv_of(&e["object"]), rv);
    }
}

#[tokio::test]
async fn fault_http_endpoints_and_latency() {
    let h = fixture().await;
    let http = Http::new(&h.url());
    let resp = http
        .request(
            Method::POST,
            "/debug/sim/faults/watch-410",
            &[],
            Bytes::new(),
        )
        .await;
    assert_eq!(resp.status, StatusCode::OK);
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    assert_eq!(w.next("an event").await.json["object"]["code"], 410);
    let resp = http
        .request(Method::POST, "/debug/sim/faults/compact", &[], Bytes::new())
        .await;
    assert_eq!(resp.status, StatusCode::OK);
    put_pod(&h, "ns1", "z", json!({}), "node-1", "Running");
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=4")).await;
    let e = w.next("an event").await.json;
    assert_eq!(e["object"]["message"], "too old resource version: 4 (5)");
    h.faults().set_latency(Duration::from_millis(300));
    let started = std::time::Instant::now();
    let (code, _) = get(&h, PODS).await;
    assert_eq!(code, StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let (_, v) = get(&h, "/debug/sim/faults").await;
    assert_eq!(v["latencyMs"], 300);
}

#[tokio::test]
async fn watch_over_h2c() {
    let h = fixture().await;
    let c: hyper_util::client::legacy::Client<_, http_body_util::Empty<bytes::Bytes>> =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .http2_only(true)
            .build_http();
    let req = http::Request::get(format!("{}{PODS}?watch=1&resourceVersion=4", h.url()))
        .body(http_body_util::Empty::new())
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let mut body = resp.into_body();
    let frame = tokio::time::timeout(
        Duration::from_secs(5),
        http_body_util::BodyExt::frame(&mut body),
    )
    .await
    .unwrap()
    .unwrap()
    .unwrap();
    let line = frame.into_data().unwrap();
    let e: serde_json::Value = serde_json::from_slice(&line).unwrap();
    assert_eq!(e["type"], "ADDED");
    assert_eq!(e["object"]["metadata"]["name"], "c");
}

#[tokio::test]
async fn shutdown_ends_watch_streams() {
    let h = fixture().await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    w.expect_quiet(Duration::from_millis(100)).await;
    tokio::time::timeout(Duration::from_secs(10), h.shutdown())
        .await
        .expect("shutdown within 10s");
    w.expect_end(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn stalled_watcher_that_falls_behind_compaction_gets_410() {
    // A watcher whose client stops reading blocks on its (bounded) socket; meanwhile
    // history moves past its cursor. When the client reads again it sees a gap-free
    // prefix of events, then the 410 ERROR, then the end — never a silent gap.
    let h = fixture_with(|c| c.store.history_events = 20).await;
    let mut w = watch(&h, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    w.expect_quiet(Duration::from_millis(100)).await;
    let big = "x".repeat(16 * 1024);
    let mut last = 0;
    for i in 0..1500 {
        let obj = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": format!("p{}", i % 10), "namespace": "ns1"},
            "spec": {"blob": big, "i": i}});
        let out = h
            .store()
            .mutate(pods(), "ns1", &format!("p{}", i % 10), |_| {
                Ok(watchgate::sim::Mutation::Put(obj))
            })
            .unwrap()
            .unwrap();
        last = rv_of(&out);
    }
    let mut expect_rv = 6;
    loop {
        let e = w
            .next_within(Duration::from_secs(20))
            .await
            .expect("stream ends only after the ERROR")
            .json;
        if e["type"] == "ERROR" {
            assert_eq!(e["object"]["code"], 410);
            let msg = e["object"]["message"].as_str().unwrap().to_string();
            // "too old resource version: N (M)": N is the last RV delivered, M the
            // compaction point when the watcher noticed (at most the final one).
            let prefix = format!("too old resource version: {} (", expect_rv - 1);
            let m: u64 = msg
                .strip_prefix(&prefix)
                .and_then(|r| r.strip_suffix(')'))
                .unwrap_or_else(|| panic!("unexpected message {msg}"))
                .parse()
                .unwrap();
            assert!(m > expect_rv - 1 && m <= h.store().compacted_rv(), "{msg}");
            break;
        }
        assert_eq!(
            rv_of(&e["object"]),
            expect_rv,
            "events are gap-free and in order"
        );
        expect_rv += 1;
    }
    assert!(
        expect_rv < last,
        "the watcher fell behind (got up to {expect_rv} of {last})"
    );
    w.expect_end(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn bookmarks_keep_coming_under_constant_churn() {
    let h = fixture_with(|c| c.bookmark_interval = Duration::from_millis(200)).await;
    let mut w = watch(
        &h,
        &format!("{PODS}?watch=1&resourceVersion=5&allowWatchBookmarks=true"),
    )
    .await;
    let store = h.store().clone();
    let churn = tokio::spawn(async move {
        for i in 0..200 {
            let obj = json!({"kind": "Pod", "apiVersion": "v1",
                "metadata": {"name": "x", "namespace": "other"}, "spec": {"i": i}});
            store
                .mutate(pods(), "other", "x", |_| {
                    Ok(watchgate::sim::Mutation::Put(obj))
                })
                .unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let e = w.next_within(Duration::from_secs(3)).await.unwrap().json;
    assert_eq!(e["type"], "BOOKMARK");
    let first: u64 = e["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let e = w.next_within(Duration::from_secs(3)).await.unwrap().json;
    assert_eq!(e["type"], "BOOKMARK");
    let second: u64 = e["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        second > first,
        "bookmark RVs advance with the churn ({first} → {second})"
    );
    churn.abort();
}

/// Two apiservers of one cluster: a replica serves the primary's store; freezing one makes
/// it lag like a watch cache behind etcd; killing one drops its connections mid-stream.
#[tokio::test]
async fn replicas_share_the_store_lag_when_frozen_and_die_when_killed() {
    use http_body_util::BodyExt;
    let primary = fixture().await;
    let replica = watchgate::sim::start_replica(
        watchgate::sim::SimConfig {
            too_large_rv_wait: Duration::from_millis(200),
            ..Default::default()
        },
        primary.store().clone(),
    )
    .await
    .unwrap();
    // A write through either is seen by both.
    let (code, _) = get(&replica, &format!("{PODS}/a")).await;
    assert_eq!(code, 200);

    replica.faults().freeze_at(5);
    let rv6 = put_pod(&primary, "ns1", "d", json!({}), "node-1", "Running");
    assert_eq!(rv6, 6);
    // A watch from 5 gets d from the primary, nothing from the frozen replica...
    let mut on_primary = watch(&primary, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    assert_eq!(on_primary.next("d").await.typed(), t("ADDED", "d"));
    let mut on_replica = watch(&replica, &format!("{PODS}?watch=1&resourceVersion=5")).await;
    on_replica.expect_quiet(Duration::from_millis(300)).await;
    // ...whose RV=0 reads are at 5, and whose reads that need 6 time out: 504 "Too large
    // resource version" (for a watch-list, as its ERROR event).
    let (code, list) = get(&replica, &format!("{PODS}?resourceVersion=0")).await;
    assert_eq!((code.as_u16(), list_rv(&list)), (200, 5));
    assert_eq!(names(&list), ["a", "b", "c"]);
    let (code, st) = get(&replica, &format!("{PODS}?resourceVersion=6")).await;
    assert_eq!(code, 504);
    assert_eq!(
        st["message"],
        "Timeout: Too large resource version: 6, current: 5"
    );
    assert_eq!(
        st["details"]["causes"][0]["reason"],
        "ResourceVersionTooLarge"
    );
    let mut wl = watch(
        &replica,
        &format!("{PODS}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"),
    )
    .await;
    let e = wl.next("the watch-list's error").await.json;
    assert_eq!(
        (e["type"].as_str(), e["object"]["code"].as_u64()),
        (Some("ERROR"), Some(504))
    );
    assert_eq!(
        e["object"]["message"],
        "Timeout: Too large resource version: 6, current: 5"
    );
    // A consistent list is fresh (kube-apiserver reads it from etcd).
    let (_, fresh) = get(&replica, PODS).await;
    assert_eq!(list_rv(&fresh), 6);
    // Caught up: the waiting watch continues.
    replica.faults().unfreeze();
    assert_eq!(
        on_replica.next("d, once caught up").await.typed(),
        t("ADDED", "d")
    );

    // Killed: the open watch breaks off (no clean end) and nothing listens any more.
    let addr = replica.addr();
    let mut open = support::raw::h1_get(addr, &format!("{PODS}?watch=1&resourceVersion=6")).await;
    assert_eq!(open.status(), 200);
    replica.kill().await;
    let end = tokio::time::timeout(Duration::from_secs(5), open.body_mut().frame())
        .await
        .expect("the watch breaks off within 5 s");
    assert!(matches!(end, Some(Err(_))), "a cut stream, got {end:?}");
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    // The primary and the store live on.
    assert_eq!(
        put_pod(&primary, "ns1", "e", json!({}), "node-1", "Running"),
        7
    );
    assert_eq!(on_primary.next("e").await.typed(), t("ADDED", "e"));
}

/// HTTP/2 clients are told kube-apiserver's default stream limit: 100 per connection.
#[tokio::test]
async fn http2_connections_allow_100_streams() {
    let h = sim().await;
    let tcp = tokio::net::TcpStream::connect(h.addr()).await.unwrap();
    let (mut client, mut conn) = h2::client::handshake(tcp).await.unwrap();
    // The server's SETTINGS arrive while a request is answered.
    let req = http::Request::get(format!("http://{}/version", h.addr()))
        .body(())
        .unwrap();
    let (mut resp, _) = client.send_request(req, true).unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(5), async {
        // The connection must be polled for the answer to arrive.
        tokio::select! {
            r = &mut resp => r,
            r = &mut conn => panic!("the connection ended: {r:?}"),
        }
    })
    .await
    .expect("an answer within 5 s");
    assert_eq!(resp.unwrap().status(), 200);
    assert_eq!(conn.max_concurrent_send_streams(), 100);
}
