//! The watch fan-out end to end (issue 5), in its simplest shape: many watchers of one
//! resource through the gateway are served from the cache by one upstream watch, each
//! getting every event once and in order. The exhaustive semantics, scale, slow-watcher
//! and real-client tests live in the other `watch_*` files.

mod support;

use serde_json::{json, Value};

use support::objects::configmap;
use support::Env;

async fn cache_rv(env: &Env, path: &str) -> String {
    // Lists with RV=0 start the resource's cache.
    support::watch::wait_until_cached(env.url(), path, |_| true)
        .await
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_watchers_one_upstream_watch_every_event_once_in_order() {
    let env = Env::gateway().await;
    let rv = cache_rv(
        &env,
        "/api/v1/namespaces/default/configmaps?resourceVersion=0",
    )
    .await;
    let upstream_watches = env.sim.handle().stats().watches("configmaps");

    let mut watches = Vec::new();
    for _ in 0..50 {
        watches.push(
            env.http
                .watch(&format!(
                    "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}"
                ))
                .await,
        );
    }
    let mut written = Vec::new();
    for i in 0..10 {
        let r = env
            .direct_http
            .post_json(
                "/api/v1/namespaces/default/configmaps",
                &configmap("", &format!("fan-{i}"))
                    .data(json!({"i": i.to_string()}))
                    .build(),
            )
            .await;
        written.push(r.expect(201)["metadata"]["resourceVersion"].clone());
    }
    for w in &mut watches {
        let mut got = Vec::new();
        for _ in 0..10 {
            let ev: Value = w.next("an event").await.json;
            assert_eq!(ev["type"], "ADDED", "{ev}");
            got.push(ev["object"]["metadata"]["resourceVersion"].clone());
        }
        assert_eq!(got, written);
    }
    assert_eq!(
        env.sim.handle().stats().watches("configmaps"),
        upstream_watches,
        "50 downstream watches opened no upstream watch of their own"
    );

    // The answer says where it came from, and a short watch ends on time.
    let r = env
        .http
        .get(&format!(
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1"
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["x-watchgate-source"], "cache");
    assert_eq!(r.headers["content-type"], "application/json");
    let lines: Vec<Value> = r
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 10);
}

#[tokio::test]
async fn a_resource_version_older_than_the_history_is_410_in_an_error_event() {
    let env = Env::gateway().await;
    let rv: u64 = cache_rv(&env, "/api/v1/configmaps?resourceVersion=0")
        .await
        .parse()
        .unwrap();
    let r = env
        .http
        .get(&format!(
            "/api/v1/configmaps?watch=true&resourceVersion={}",
            rv - 1
        ))
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.headers["x-watchgate-source"], "cache");
    let ev = r.json();
    assert_eq!(ev["type"], "ERROR");
    assert_eq!(ev["object"]["code"], 410);
    assert_eq!(ev["object"]["reason"], "Expired");
    assert_eq!(
        ev["object"]["message"],
        format!("too old resource version: {} ({rv})", rv - 1)
    );
}
