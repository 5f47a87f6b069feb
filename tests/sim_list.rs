//! LIST semantics of the simulator: every cell of api-concepts.md's
//! resourceVersion × resourceVersionMatch × limit/continue table, plus continue-token
//! expiry, compaction, the 3-second wait + 504 for a too-large RV, namespace scoping,
//! selectors and etcd key order.

// The store's closures return `Result<_, Status>` by design.
#![allow(clippy::result_large_err)]

mod support;

use std::time::{Duration, Instant};

use http::StatusCode;
use serde_json::{json, Value};
use support::sim::*;
use support::watch::{pods, put_pod, rv_of};

/// A cluster whose history is known:
/// rv2 a created, rv3 b created  (MID = 3: state {a@2, b@3})
/// rv4 a modified, rv5 c created (current = 5: {a@4, b@3, c@5})
async fn fixture() -> watchgate::sim::SimHandle {
    let h = sim().await;
    assert_eq!(
        put_pod(&h, "ns1", "a", json!({"app": "web"}), "node-1", "Pending"),
        2
    );
    assert_eq!(
        put_pod(&h, "ns1", "b", json!({"app": "db"}), "node-1", "Running"),
        3
    );
    assert_eq!(
        put_pod(&h, "ns1", "a", json!({"app": "web"}), "node-1", "Running"),
        4
    );
    assert_eq!(
        put_pod(&h, "ns1", "c", json!({"app": "web"}), "node-1", "Running"),
        5
    );
    h
}
const MID: u64 = 3;
const CUR: u64 = 5;
const PODS: &str = "/api/v1/namespaces/ns1/pods";

async fn ok(h: &watchgate::sim::SimHandle, q: &str) -> Value {
    let (code, v) = get(h, &format!("{PODS}?{q}")).await;
    assert_eq!(code, StatusCode::OK, "{q}: {v}");
    assert_eq!(v["kind"], "PodList");
    assert_eq!(v["apiVersion"], "v1");
    v
}

async fn status(h: &watchgate::sim::SimHandle, q: &str, code: u16, reason: &str, msg: &str) {
    let (c, v) = get(h, &format!("{PODS}?{q}")).await;
    assert_eq!(c.as_u16(), code, "{q}: {v}");
    assert_eq!(v["kind"], "Status", "{q}");
    assert_eq!(v["reason"], reason, "{q}: {v}");
    assert_eq!(v["message"], msg, "{q}");
    assert_eq!(v["code"], code);
}

fn item_rv(list: &Value, name: &str) -> u64 {
    let i = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == name)
        .unwrap();
    rv_of(i)
}

const NO_RV_FOR_MATCH: &str = "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided";
const EXACT_ZERO: &str = "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"";

// --- row: resourceVersionMatch unset, limit unset -------------------------------------

#[tokio::test]
async fn unset_nolimit_rv_unset_is_most_recent() {
    let h = fixture().await;
    let v = ok(&h, "").await;
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
    assert_eq!(item_rv(&v, "a"), 4);
    assert!(v["metadata"].get("continue").is_none());
    assert!(v["metadata"].get("remainingItemCount").is_none());
}

#[tokio::test]
async fn unset_nolimit_rv0_is_any() {
    let h = fixture().await;
    let v = ok(&h, "resourceVersion=0").await;
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
}

#[tokio::test]
async fn unset_nolimit_rvn_is_not_older_than() {
    let h = fixture().await;
    let v = ok(&h, &format!("resourceVersion={MID}")).await;
    // Not older than MID: the newest state is served.
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
    assert_eq!(item_rv(&v, "a"), 4);
}

// --- row: resourceVersionMatch unset, limit set, continue unset ------------------------

#[tokio::test]
async fn unset_limit_rv_unset_is_most_recent() {
    let h = fixture().await;
    let v = ok(&h, "limit=2").await;
    assert_eq!(names(&v), ["a", "b"]);
    assert_eq!(list_rv(&v), CUR);
    assert_eq!(v["metadata"]["remainingItemCount"], 1);
    assert!(v["metadata"]["continue"]
        .as_str()
        .is_some_and(|c| !c.is_empty()));
}

#[tokio::test]
async fn unset_limit_rv0_is_any() {
    let h = fixture().await;
    let v = ok(&h, "limit=2&resourceVersion=0").await;
    // Served from the watch cache, which ignores limit for RV="0" (cacher.go
    // computeListLimit): the whole list, no continue token.
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
    assert!(v["metadata"].get("remainingItemCount").is_none());
    assert!(v["metadata"].get("continue").is_none());
}

#[tokio::test]
async fn unset_limit_rvn_is_exact() {
    let h = fixture().await;
    let v = ok(&h, &format!("limit=1&resourceVersion={MID}")).await;
    assert_eq!(names(&v), ["a"]);
    assert_eq!(list_rv(&v), MID);
    assert_eq!(item_rv(&v, "a"), 2, "a as it was at MID");
    assert_eq!(v["metadata"]["remainingItemCount"], 1);
    let cont = v["metadata"]["continue"].as_str().unwrap().to_string();
    let v2 = ok(&h, &format!("limit=1&continue={cont}")).await;
    assert_eq!(names(&v2), ["b"], "c did not exist at MID");
    assert_eq!(list_rv(&v2), MID);
    assert!(v2["metadata"].get("continue").is_none());
}

// --- row: resourceVersionMatch unset, limit set, continue set --------------------------

async fn first_page(h: &watchgate::sim::SimHandle) -> String {
    let v = ok(h, "limit=1").await;
    assert_eq!(names(&v), ["a"]);
    v["metadata"]["continue"].as_str().unwrap().to_string()
}

/// The token's bytes, decoded: clients treat it as opaque, but the cache issues first pages
/// whose continuations the upstream resumes, and the bytes must be kube-apiserver's.
fn token_json(t: &str) -> String {
    use base64::Engine;
    String::from_utf8(
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(t)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn continue_tokens_are_the_1_36_watch_caches_rooted_keys() {
    // kube-apiserver 1.36 pages from its watch cache, whose GetList trims the request's
    // key (`/pods/ns1`, `/pods`: no trailing slash) from the object's key
    // (k8s.io/apiserver pkg/storage/cacher/cacher.go `GetList` →
    // storage.PrepareContinueToken → EncodeContinue): the start key keeps its slash.
    let h = fixture().await;
    // In a namespace: relative to /registry/pods/ns1.
    let cont = first_page(&h).await;
    assert_eq!(
        token_json(&cont),
        r#"{"v":"meta.k8s.io/v1","rv":5,"start":"/a\u0000"}"#
    );
    // Over all namespaces: relative to /registry/pods.
    let (code, v) = get(&h, "/api/v1/pods?limit=1").await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let cont = v["metadata"]["continue"].as_str().unwrap();
    assert_eq!(
        token_json(cont),
        r#"{"v":"meta.k8s.io/v1","rv":5,"start":"/ns1/a\u0000"}"#
    );
    let (_, v) = get(&h, &format!("/api/v1/pods?limit=5&continue={cont}")).await;
    assert_eq!(names(&v), ["b", "c"]);
}

#[tokio::test]
async fn an_etcd3_token_without_the_slash_resumes_too() {
    // What apiservers before `ListFromCacheSnapshot` (and 1.36's etcd3 store) write:
    // DecodeContinue roots the key, so it names the same place.
    use base64::Engine;
    let h = fixture().await;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let relative = b64.encode(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"a\u0000"}"#);
    let v = ok(&h, &format!("limit=1&continue={relative}")).await;
    assert_eq!(names(&v), ["b"]);
    // The next token is in the simulator's (1.36's) form again.
    assert_eq!(
        token_json(v["metadata"]["continue"].as_str().unwrap()),
        r#"{"v":"meta.k8s.io/v1","rv":5,"start":"/b\u0000"}"#
    );
    let all = b64.encode(r#"{"v":"meta.k8s.io/v1","rv":5,"start":"ns1/a\u0000"}"#);
    let (_, v) = get(&h, &format!("/api/v1/pods?limit=5&continue={all}")).await;
    assert_eq!(names(&v), ["b", "c"]);
}

#[tokio::test]
async fn unset_continue_rv_unset_is_continue_exact() {
    let h = fixture().await;
    let cont = first_page(&h).await;
    // Writes after the first page are not visible in later pages.
    put_pod(
        &h,
        "ns1",
        "b",
        json!({"app": "changed"}),
        "node-1",
        "Failed",
    );
    put_pod(&h, "ns1", "bb", json!({}), "node-1", "Running");
    let v = ok(&h, &format!("limit=5&continue={cont}")).await;
    assert_eq!(names(&v), ["b", "c"]);
    assert_eq!(list_rv(&v), CUR);
    assert_eq!(item_rv(&v, "b"), 3);
    assert!(v["metadata"].get("continue").is_none());
}

#[tokio::test]
async fn unset_continue_rv0_is_treated_as_continue_exact() {
    let h = fixture().await;
    let cont = first_page(&h).await;
    put_pod(&h, "ns1", "bb", json!({}), "node-1", "Running");
    let v = ok(&h, &format!("limit=5&resourceVersion=0&continue={cont}")).await;
    assert_eq!(names(&v), ["b", "c"]);
    assert_eq!(list_rv(&v), CUR);
}

#[tokio::test]
async fn unset_continue_rvn_is_400() {
    let h = fixture().await;
    let cont = first_page(&h).await;
    status(
        &h,
        &format!("limit=5&resourceVersion={MID}&continue={cont}"),
        400,
        "BadRequest",
        "specifying resource version is not allowed when using continue",
    )
    .await;
}

// --- rows: resourceVersionMatch=Exact ---------------------------------------------------

#[tokio::test]
async fn exact_nolimit_rv_unset_is_invalid() {
    let h = fixture().await;
    status(
        &h,
        "resourceVersionMatch=Exact",
        422,
        "Invalid",
        NO_RV_FOR_MATCH,
    )
    .await;
    let (_, v) = get(&h, &format!("{PODS}?resourceVersionMatch=Exact")).await;
    assert_eq!(
        v["details"],
        json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": [{
            "reason": "FieldValueForbidden",
            "message": "Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided",
            "field": "resourceVersionMatch"}]})
    );
}

#[tokio::test]
async fn exact_nolimit_rv0_is_invalid() {
    let h = fixture().await;
    status(
        &h,
        "resourceVersionMatch=Exact&resourceVersion=0",
        422,
        "Invalid",
        EXACT_ZERO,
    )
    .await;
}

#[tokio::test]
async fn exact_nolimit_rvn_is_exact() {
    let h = fixture().await;
    let v = ok(
        &h,
        &format!("resourceVersionMatch=Exact&resourceVersion={MID}"),
    )
    .await;
    assert_eq!(names(&v), ["a", "b"]);
    assert_eq!(list_rv(&v), MID);
    assert_eq!(item_rv(&v, "a"), 2);
    // Exact at the current RV is the current state.
    let v = ok(
        &h,
        &format!("resourceVersionMatch=Exact&resourceVersion={CUR}"),
    )
    .await;
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
}

#[tokio::test]
async fn exact_limit_rv_unset_is_invalid() {
    let h = fixture().await;
    status(
        &h,
        "resourceVersionMatch=Exact&limit=1",
        422,
        "Invalid",
        NO_RV_FOR_MATCH,
    )
    .await;
}

#[tokio::test]
async fn exact_limit_rv0_is_invalid() {
    let h = fixture().await;
    status(
        &h,
        "resourceVersionMatch=Exact&resourceVersion=0&limit=1",
        422,
        "Invalid",
        EXACT_ZERO,
    )
    .await;
}

#[tokio::test]
async fn exact_limit_rvn_is_exact() {
    let h = fixture().await;
    let v = ok(&h, "resourceVersionMatch=Exact&resourceVersion=4&limit=2").await;
    assert_eq!(names(&v), ["a", "b"]);
    assert_eq!(list_rv(&v), 4);
    assert_eq!(item_rv(&v, "a"), 4);
    assert!(
        v["metadata"].get("continue").is_none(),
        "only 2 pods existed at 4"
    );
    let v = ok(
        &h,
        &format!("resourceVersionMatch=Exact&resourceVersion={MID}&limit=1"),
    )
    .await;
    assert_eq!(names(&v), ["a"]);
    assert_eq!(list_rv(&v), MID);
    assert_eq!(v["metadata"]["remainingItemCount"], 1);
}

// --- rows: resourceVersionMatch=NotOlderThan --------------------------------------------

#[tokio::test]
async fn notolderthan_nolimit_rv_unset_is_invalid() {
    let h = fixture().await;
    status(
        &h,
        "resourceVersionMatch=NotOlderThan",
        422,
        "Invalid",
        NO_RV_FOR_MATCH,
    )
    .await;
}

#[tokio::test]
async fn notolderthan_nolimit_rv0_is_any() {
    let h = fixture().await;
    let v = ok(&h, "resourceVersionMatch=NotOlderThan&resourceVersion=0").await;
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
}

#[tokio::test]
async fn notolderthan_nolimit_rvn_is_not_older_than() {
    let h = fixture().await;
    let v = ok(
        &h,
        &format!("resourceVersionMatch=NotOlderThan&resourceVersion={MID}"),
    )
    .await;
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert!(list_rv(&v) >= MID);
    assert_eq!(list_rv(&v), CUR);
}

#[tokio::test]
async fn notolderthan_limit_rv_unset_is_invalid() {
    let h = fixture().await;
    status(
        &h,
        "resourceVersionMatch=NotOlderThan&limit=1",
        422,
        "Invalid",
        NO_RV_FOR_MATCH,
    )
    .await;
}

#[tokio::test]
async fn notolderthan_limit_rv0_is_any() {
    let h = fixture().await;
    let v = ok(
        &h,
        "resourceVersionMatch=NotOlderThan&resourceVersion=0&limit=2",
    )
    .await;
    // RV="0" ignores limit in the watch cache (computeListLimit).
    assert_eq!(names(&v), ["a", "b", "c"]);
    assert_eq!(list_rv(&v), CUR);
    assert!(v["metadata"].get("continue").is_none());
}

#[tokio::test]
async fn notolderthan_limit_rvn_is_not_older_than() {
    let h = fixture().await;
    let v = ok(
        &h,
        &format!("resourceVersionMatch=NotOlderThan&resourceVersion={MID}&limit=2"),
    )
    .await;
    assert_eq!(names(&v), ["a", "b"]);
    assert_eq!(list_rv(&v), CUR);
    assert_eq!(item_rv(&v, "a"), 4);
    let cont = v["metadata"]["continue"].as_str().unwrap().to_string();
    let v2 = ok(&h, &format!("limit=2&continue={cont}")).await;
    assert_eq!(names(&v2), ["c"]);
    assert_eq!(list_rv(&v2), CUR);
}

#[tokio::test]
async fn continue_with_match_is_invalid() {
    let h = fixture().await;
    let cont = first_page(&h).await;
    status(
        &h,
        &format!("resourceVersionMatch=NotOlderThan&resourceVersion=0&continue={cont}"),
        422,
        "Invalid",
        "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided",
    )
    .await;
}

// --- expiry, compaction, too large ---------------------------------------------------

const INCONSISTENT: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

#[tokio::test]
async fn a_continue_token_expires_with_the_compaction_of_its_revision() {
    // etcd3's tokens carry no expiry of their own: they stop working when etcd compacts
    // their revision (every 5 minutes by default; the simulator's history window).
    let h = fixture().await;
    let cont = first_page(&h).await;
    // Still valid after a write, as long as the revision is kept.
    put_pod(&h, "ns1", "d", json!({}), "node-1", "Running");
    let v = ok(&h, &format!("limit=1&continue={cont}")).await;
    assert_eq!(names(&v), ["b"]);
    h.store().compact_now();
    let (code, v) = get(&h, &format!("{PODS}?limit=1&continue={cont}")).await;
    assert_eq!(code, StatusCode::GONE, "{v}");
    assert_eq!(v["reason"], "Expired");
    assert_eq!(v["message"], INCONSISTENT);
    // The Status carries a token to continue (inconsistently) at the latest revision
    // (rv -1, `handleCompactedErrorForPaging`): the rest of the list as it is now,
    // including the pod written after the first page.
    let fresh = v["metadata"]["continue"]
        .as_str()
        .expect("new token")
        .to_string();
    // Written by etcd3's store (the cacher has no snapshot below a compaction), whose
    // key prefix ends in a slash: the start key is relative.
    assert_eq!(
        token_json(&fresh),
        r#"{"v":"meta.k8s.io/v1","rv":-1,"start":"a\u0000"}"#
    );
    let v = ok(&h, &format!("limit=5&continue={fresh}")).await;
    assert_eq!(names(&v), ["b", "c", "d"]);
}

#[tokio::test]
async fn history_is_five_minutes_and_the_wait_is_three_seconds() {
    let cfg = watchgate::sim::SimConfig::default();
    assert_eq!(
        cfg.store.history_duration,
        Some(Duration::from_secs(300)),
        "etcd's default compaction interval"
    );
    assert_eq!(cfg.too_large_rv_wait, Duration::from_secs(3));
}

#[tokio::test]
async fn exact_at_compacted_rv_is_410() {
    let h = fixture().await;
    h.store().compact(4);
    status(
        &h,
        &format!("resourceVersionMatch=Exact&resourceVersion={MID}"),
        410,
        "Expired",
        "The resourceVersion for the provided list is too old.",
    )
    .await;
    // The compaction point itself is still served.
    let v = ok(&h, "resourceVersionMatch=Exact&resourceVersion=4").await;
    assert_eq!(list_rv(&v), 4);
    // NotOlderThan an old RV is fine: the newest state is not older than it.
    let v = ok(&h, "resourceVersionMatch=NotOlderThan&resourceVersion=2").await;
    assert_eq!(list_rv(&v), CUR);
}

#[tokio::test]
async fn too_large_rv_waits_three_seconds_then_504() {
    let h = fixture().await;
    let started = Instant::now();
    let (code, v) = get(&h, &format!("{PODS}?resourceVersion=100")).await;
    let waited = started.elapsed();
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert!(
        waited >= Duration::from_millis(2900),
        "waited only {waited:?}"
    );
    assert!(waited < Duration::from_secs(6), "waited {waited:?}");
    assert_eq!(
        v,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "Timeout: Too large resource version: 100, current: 5",
               "reason": "Timeout",
               "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                                       "message": "Too large resource version"}],
                           "retryAfterSeconds": 1},
               "code": 504})
    );
}

#[tokio::test]
async fn too_large_rv_for_every_match_mode() {
    let h = sim_with(|c| c.too_large_rv_wait = Duration::from_millis(200)).await;
    put_pod(&h, "ns1", "a", json!({}), "node-1", "Running");
    for q in [
        "resourceVersion=50",
        "resourceVersion=50&resourceVersionMatch=NotOlderThan",
        "resourceVersion=50&resourceVersionMatch=Exact",
        "resourceVersion=50&limit=1",
    ] {
        let (code, v) = get(&h, &format!("{PODS}?{q}")).await;
        assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{q}: {v}");
        assert_eq!(
            v["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
        assert_eq!(v["details"]["retryAfterSeconds"], 1);
    }
}

#[tokio::test]
async fn write_during_the_wait_satisfies_it() {
    let h = fixture().await;
    let store = h.store().clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let rt = pods();
        store
            .mutate(rt, "ns1", "late", |_| {
                Ok(watchgate::sim::Mutation::Put(json!({"kind":"Pod","apiVersion":"v1","metadata":{"name":"late","namespace":"ns1"}})))
            })
            .unwrap();
    });
    let v = ok(&h, "resourceVersion=6").await;
    writer.await.unwrap();
    assert_eq!(list_rv(&v), 6);
    assert_eq!(names(&v), ["a", "b", "c", "late"]);
}

// --- scope, selectors, order ------------------------------------------------------------

#[tokio::test]
async fn namespace_scope_and_etcd_key_order() {
    let h = sim().await;
    put_pod(&h, "a", "z", json!({}), "node-1", "Running");
    put_pod(&h, "a-b", "y", json!({}), "node-1", "Running");
    put_pod(&h, "a", "x", json!({}), "node-1", "Running");
    put_pod(&h, "b", "w", json!({}), "node-1", "Running");
    // etcd orders keys bytewise: "a-b/y" < "a/x" because '-' < '/'.
    let (_, v) = get(&h, "/api/v1/pods").await;
    assert_eq!(names(&v), ["y", "x", "z", "w"]);
    let (_, v) = get(&h, "/api/v1/namespaces/a/pods").await;
    assert_eq!(names(&v), ["x", "z"]);
    let (_, v) = get(&h, "/api/v1/namespaces/none/pods").await;
    assert_eq!(v["items"], json!([]));
    assert_eq!(list_rv(&v), 5);
}

#[tokio::test]
async fn label_and_field_selectors() {
    let h = fixture().await;
    for (q, want) in [
        ("labelSelector=app%3Dweb", vec!["a", "c"]),
        ("labelSelector=app%20in%20(db)", vec!["b"]),
        ("labelSelector=app!%3Dweb", vec!["b"]),
        ("labelSelector=!app", vec![]),
        ("fieldSelector=metadata.name%3Db", vec!["b"]),
        (
            "fieldSelector=status.phase%3DRunning,metadata.name!%3Da",
            vec!["b", "c"],
        ),
        (
            "fieldSelector=spec.nodeName%3Dnode-1&labelSelector=app%3Dweb",
            vec!["a", "c"],
        ),
        ("fieldSelector=metadata.namespace%3Dother", vec![]),
    ] {
        let v = ok(&h, q).await;
        assert_eq!(names(&v), want, "{q}");
        assert_eq!(list_rv(&v), CUR);
    }
    // With a selector the remaining count is unknown: no remainingItemCount.
    let v = ok(&h, "labelSelector=app%3Dweb&limit=1").await;
    assert_eq!(names(&v), ["a"]);
    assert!(v["metadata"].get("remainingItemCount").is_none());
    let cont = v["metadata"]["continue"].as_str().unwrap().to_string();
    let v = ok(
        &h,
        &format!("labelSelector=app%3Dweb&limit=1&continue={cont}"),
    )
    .await;
    assert_eq!(names(&v), ["c"]);
}

#[tokio::test]
async fn get_one_and_not_found() {
    let h = fixture().await;
    let (code, v) = get(&h, "/api/v1/namespaces/ns1/pods/a").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(v["kind"], "Pod");
    assert_eq!(rv_of(&v), 4);
    let (code, v) = get(&h, "/api/v1/namespaces/ns1/pods/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert_eq!(
        v,
        json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
               "message":"pods \"nope\" not found","reason":"NotFound",
               "details":{"name":"nope","kind":"pods"},"code":404})
    );
}

#[tokio::test]
async fn stats_count_lists_per_resource() {
    let h = fixture().await;
    ok(&h, "").await;
    ok(&h, "limit=1").await;
    get(&h, "/apis/apps/v1/deployments").await;
    assert_eq!(h.stats().lists("pods"), 2);
    assert_eq!(h.stats().lists("deployments.apps"), 1);
    let (_, v) = get(&h, "/debug/sim/stats").await;
    assert_eq!(v["list"]["pods"], 2);
    // By shape: the consistent list and the limit=1 probe-like one apart.
    let (_, v) = get(&h, "/debug/sim/stats/shapes").await;
    assert_eq!(
        v["list"],
        json!({"pods": {"consistent": 1, "consistent,limit=1": 1},
               "deployments.apps": {"consistent": 1}})
    );
}

#[tokio::test]
async fn get_with_resource_version() {
    let h = sim_with(|c| c.too_large_rv_wait = Duration::from_millis(200)).await;
    put_pod(&h, "ns1", "a", json!({}), "node-1", "Running");
    for q in ["", "?resourceVersion=0", "?resourceVersion=2"] {
        let (code, v) = get(&h, &format!("/api/v1/namespaces/ns1/pods/a{q}")).await;
        assert_eq!(code, StatusCode::OK, "{q}: {v}");
        assert_eq!(rv_of(&v), 2);
    }
    let (code, v) = get(&h, "/api/v1/namespaces/ns1/pods/a?resourceVersion=9").await;
    assert_eq!(code, StatusCode::GATEWAY_TIMEOUT, "{v}");
    assert_eq!(
        v["message"],
        "Timeout: Too large resource version: 9, current: 2"
    );
    assert_eq!(h.stats().count("get", "pods"), 4);
}

/// kube-apiserver 1.34+ streams a JSON list item by item through net/http's 2,048-byte
/// response buffer: over HTTP/1.1 a large list is chunked, every chunk 2,048 bytes but the
/// last; a list that fits the buffer gets a Content-Length (docs/simulator.md, "List").
#[tokio::test]
async fn a_large_json_list_streams_in_gos_2048_byte_chunks_and_a_small_one_has_a_length() {
    use support::raw::{raw_exchange_bytes, unchunk};
    use watchgate::load::cluster::seed_objects;
    use watchgate::load::pool::PoolResource;

    let h = sim().await;
    seed_objects(&h, PoolResource::Configmaps, 300, 600);
    let req = |path: &str| {
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\nConnection: close\r\n\r\n")
    };
    let raw = raw_exchange_bytes(h.addr(), req("/api/v1/configmaps").as_bytes()).await;
    let framed = unchunk(&raw);
    let head = framed.head.to_ascii_lowercase();
    assert!(head.contains("transfer-encoding: chunked\r\n"), "{head}");
    assert!(!head.contains("content-length"), "{head}");
    let (last, full) = framed.chunks.split_last().unwrap();
    assert!(full.len() > 50, "{:?}", framed.chunks);
    assert!(full.iter().all(|&n| n == 2048), "{:?}", framed.chunks);
    assert!(*last <= 2048);
    // The body is the list: every item once, as a whole read gives it.
    let list: Value = serde_json::from_slice(&framed.body).unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 300);
    assert_eq!(framed.body.last(), Some(&b'\n'));
    let (_, whole) = get(&h, "/api/v1/configmaps").await;
    assert_eq!(whole["items"], list["items"]);

    // A list that fits the buffer: one piece with its length.
    let raw = raw_exchange_bytes(
        h.addr(),
        req("/api/v1/configmaps?labelSelector=absent%3Dyes").as_bytes(),
    )
    .await;
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let head = head.to_ascii_lowercase();
    assert!(!head.contains("transfer-encoding"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}\r\n", body.len()))
            || head.ends_with(&format!("content-length: {}", body.len())),
        "{head}"
    );
    let small: Value = serde_json::from_str(body).unwrap();
    assert_eq!(small["items"], json!([]));
}
