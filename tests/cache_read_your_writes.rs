//! Read-your-writes for writes made through the gateway (issue 15, item 3): once a write's
//! answer is back, every read the cache answers, with any resourceVersion semantics,
//! holds it, and that costs the upstream nothing (the answer carried the write's
//! resourceVersion; docs/consistency.md, "Read-your-writes").

mod support;

use serde_json::{json, Value};

use support::http::MERGE_PATCH;
use support::servers::Env;
use support::watch::{open_ok, rv_of, wait_until_cached};

const ROUNDS: usize = 300;

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_after_a_write_through_the_gateway_sees_it_at_no_upstream_cost() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    env.http
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &json!({"metadata": {"name": "ryw"}, "data": {"v": "0"}}),
        )
        .await
        .expect(201);
    let old = rv_of(
        &wait_until_cached(&gw, "/api/v1/configmaps?resourceVersion=0", |_| true)
            .await
            .json(),
    );
    let path = "/api/v1/namespaces/default/configmaps/ryw";
    let lists = sim.stats().lists("configmaps");
    let gets = sim.stats().count("get", "configmaps");
    let mut stale = Vec::new();
    for i in 1..=ROUNDS {
        let v = i.to_string();
        let written = env
            .http
            .patch(path, MERGE_PATCH, &json!({"data": {"v": v}}))
            .await
            .expect(200);
        let w = rv_of(&written);
        // At once, every semantics but Exact: Any, NotOlderThan an older RV, and the
        // initial state of a watch from "0".
        let reads = [
            env.http.get(&format!("{path}?resourceVersion=0")).await,
            env.http
                .get("/api/v1/namespaces/default/configmaps?resourceVersion=0")
                .await,
            env.http
                .get(&format!(
                    "/api/v1/configmaps?resourceVersion={old}&resourceVersionMatch=NotOlderThan"
                ))
                .await,
        ];
        for (what, r) in ["get RV=0", "list RV=0", "list NotOlderThan"]
            .iter()
            .zip(&reads)
        {
            assert_eq!(r.source(), Some("cache"), "{what}: {}", r.text());
            let body = r.json();
            let obj = match body["items"].as_array() {
                Some(items) => items
                    .iter()
                    .find(|o| o["metadata"]["name"] == "ryw")
                    .cloned()
                    .unwrap_or(Value::Null),
                None => body,
            };
            if obj["data"]["v"] != v.as_str() || rv_of(&obj) < w {
                stale.push(format!("round {i}: {what} at {} saw {}", w, obj["data"]));
            }
        }
        let mut watch = open_ok(
            &gw,
            "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0&fieldSelector=metadata.name%3Dryw",
        )
        .await;
        watch.assert_from_cache();
        let added = watch.next("the initial ADDED").await;
        if added.object()["data"]["v"] != v.as_str() {
            stale.push(format!(
                "round {i}: watch from 0 saw {}",
                added.object()["data"]
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "{} stale reads:\n{}",
        stale.len(),
        stale.join("\n")
    );
    assert_eq!(
        sim.stats().lists("configmaps"),
        lists,
        "read-your-writes must not cost probes (the answers carry the RV)"
    );
    assert_eq!(
        sim.stats().count("get", "configmaps"),
        gets,
        "no read was forwarded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_delete_through_the_gateway_the_object_is_gone_from_every_read() {
    let env = Env::gateway().await;
    let gw = env.url().to_string();
    let sim = env.sim.handle();
    wait_until_cached(&gw, "/api/v1/configmaps?resourceVersion=0", |_| true).await;
    for i in 0..50 {
        let name = format!("gone-{i}");
        env.http
            .post_json(
                "/api/v1/namespaces/default/configmaps",
                &json!({"metadata": {"name": name}}),
            )
            .await
            .expect(201);
        let lists = sim.stats().lists("configmaps");
        // A DELETE's answer names no deletion RV: one probe on the next read finds it.
        let r = env
            .http
            .delete(&format!("/api/v1/namespaces/default/configmaps/{name}"))
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let got = env
            .http
            .get(&format!(
                "/api/v1/namespaces/default/configmaps/{name}?resourceVersion=0"
            ))
            .await;
        assert_eq!(
            (got.status.as_u16(), got.source()),
            (404, Some("cache")),
            "{name}"
        );
        let list = env
            .http
            .get("/api/v1/namespaces/default/configmaps?resourceVersion=0")
            .await;
        assert!(!names(&list.json()).contains(&name), "{name} still listed");
        assert_eq!(
            sim.stats().lists("configmaps"),
            lists + 1,
            "one probe for both reads"
        );
    }
}
