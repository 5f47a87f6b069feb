//! Tiered mode (issue 6): client → watchgate (edge) → watchgate (origin) → simulator gives
//! the same list results and the same watch event streams as going to the simulator
//! directly. watchgate speaks the apiserver's protocol on both sides, so the edge's
//! reflector lists and watches the origin exactly as it would an apiserver.

mod support;

use serde_json::{json, Value};
use watchgate::cache::reflector::WatchListMode;
use watchgate::cache::registry::CachePolicy;
use watchgate::config::GatewayConfig;

use support::objects::pod;
use support::servers::{start_gateway_with, start_sim, GatewayServer};
use support::wait::wait_until;
use support::{Http, Kubectl, EVENT_TIMEOUT};

async fn gateway_caching_pods(upstream: &str) -> GatewayServer {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["pods".into()],
        exclude: vec![],
    });
    start_gateway_with(cfg).await
}

/// The edge: like any gateway, but its reflectors use the paged list and a watch from its
/// resourceVersion (`--upstream-watch-list=off`), which the origin's cache answers. (A
/// watch-list has no resourceVersion: a consistent read, which the origin also answers
/// from its cache, after one probe of the apiserver, docs/consistency.md.)
async fn edge_caching_pods(upstream: &str) -> GatewayServer {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["pods".into()],
        exclude: vec![],
    });
    cfg.reflector.watch_list = WatchListMode::Off;
    start_gateway_with(cfg).await
}

async fn wait_ready(gw: &GatewayServer, which: &str) {
    let admin = Http::new(&format!("http://{}", gw.handle().admin_addr()));
    wait_until(
        &format!("{which} /readyz answers 200"),
        EVENT_TIMEOUT,
        || {
            let admin = admin.clone();
            async move { admin.get("/readyz").await.status == 200 }
        },
    )
    .await;
}

/// A pod of app `tiered`, labelled with its tier if it has one.
fn tiered_pod(name: &str, tier: Option<&str>) -> Value {
    let p = pod("default", name).label("app", "tiered");
    match tier {
        Some(t) => p.label("tier", t),
        None => p,
    }
    .build()
}

const PODS: &str = "/api/v1/namespaces/default/pods";

/// What a stream comparison looks at: the event type and the whole object.
fn summary(events: &[Value]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|e| {
            (
                e["type"].as_str().unwrap_or("?").to_string(),
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                e["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_in_front_of_an_origin_answers_like_the_apiserver() {
    let sim = start_sim().await;
    let direct = Http::new(sim.url());
    for (i, tier) in [Some("web"), None, Some("web"), Some("db"), Some("web")]
        .into_iter()
        .enumerate()
    {
        let resp = direct
            .post_json(PODS, &tiered_pod(&format!("p{i}"), tier))
            .await;
        assert_eq!(resp.status, 201, "{}", resp.text());
    }
    let origin = gateway_caching_pods(sim.url()).await;
    let edge = edge_caching_pods(origin.url()).await;
    wait_ready(&origin, "origin").await;
    wait_ready(&edge, "edge").await;
    let through = Http::new(edge.url());

    // Lists: the edge's cache (RV=0 and NotOlderThan), and forwarded through both tiers.
    let listed = direct.get_json(PODS).await;
    let rv = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    for path in [
        format!("{PODS}?resourceVersion={rv}&resourceVersionMatch=NotOlderThan"),
        format!("{PODS}?resourceVersion=0"),
        PODS.to_string(),
        format!("{PODS}?labelSelector=tier%3Dweb&resourceVersion=0"),
    ] {
        let resp = through.get(&path).await;
        assert_eq!(resp.status, 200, "{path}: {}", resp.text());
        let want = if path.contains("labelSelector") {
            direct
                .get_json(&format!("{PODS}?labelSelector=tier%3Dweb"))
                .await
        } else {
            listed.clone()
        };
        assert_eq!(resp.json()["items"], want["items"], "{path}");
        assert_eq!(resp.json()["kind"], "PodList", "{path}");
        // The consistent list too: the edge proves its cache fresh with a probe that the
        // origin answers (docs/consistency.md).
        assert_eq!(resp.source(), Some("cache"), "{path}");
    }
    // A real client through both tiers: kubectl's list (a consistent read) and its view of
    // the objects equal the direct answer.
    let via_edge = Kubectl::new(edge.url());
    let via_sim = Kubectl::new(sim.url());
    for args in [
        &["get", "pods", "-n", "default", "-o", "json"][..],
        &[
            "get", "pods", "-n", "default", "-l", "tier=web", "-o", "name",
        ][..],
    ] {
        let got = via_edge.ok(args).await;
        let want = via_sim.ok(args).await;
        if args.contains(&"json") {
            let (g, w): (Value, Value) = (
                serde_json::from_str(&got).unwrap(),
                serde_json::from_str(&want).unwrap(),
            );
            assert_eq!(g["items"], w["items"], "kubectl {args:?}");
        } else {
            assert_eq!(got, want, "kubectl {args:?}");
        }
    }

    // A get of one object, from the edge's cache.
    let got = through.get(&format!("{PODS}/p3?resourceVersion=0")).await;
    assert_eq!(
        got.json(),
        direct.get_json(&format!("{PODS}/p3")).await,
        "get p3"
    );

    // Watches from the same resourceVersion, from RV=0 (synthetic ADDED first) and with a
    // label selector (transitions become ADDED/DELETED), through the tiers and directly.
    let paths = [
        format!("{PODS}?watch=true&resourceVersion={rv}"),
        format!("{PODS}?watch=true&resourceVersion=0"),
        format!("{PODS}?watch=true&resourceVersion={rv}&labelSelector=tier%3Dweb"),
    ];
    let mut direct_watches = Vec::new();
    let mut edge_watches = Vec::new();
    for p in &paths {
        direct_watches.push(direct.watch(p).await);
        edge_watches.push(through.watch(p).await);
    }

    // Changes, made directly at the simulator.
    let resp = direct.post_json(PODS, &tiered_pod("p5", Some("web"))).await;
    assert_eq!(resp.status, 201, "{}", resp.text());
    let merge = "application/merge-patch+json";
    for (name, patch) in [
        ("p1", json!({"metadata": {"labels": {"tier": "web"}}})),
        ("p0", json!({"metadata": {"labels": {"tier": "db"}}})),
        (
            "p2",
            json!({"metadata": {"annotations": {"touched": "yes"}}}),
        ),
    ] {
        let resp = direct.patch(&format!("{PODS}/{name}"), merge, &patch).await;
        assert_eq!(resp.status, 200, "{}", resp.text());
    }
    let resp = direct.delete(&format!("{PODS}/p4")).await;
    assert_eq!(resp.status, 200, "{}", resp.text());

    // Read each direct stream up to the last change (p4's deletion; the simulator also
    // schedules new pods, which adds MODIFIED events), then as many events from the edge.
    let mut selector = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let mut want = Vec::new();
        loop {
            let ev = direct_watches[i].next("an event").await.json;
            let last = ev["type"] == "DELETED" && ev["object"]["metadata"]["name"] == "p4";
            want.push(ev);
            if last {
                break;
            }
        }
        let mut got = Vec::new();
        for _ in 0..want.len() {
            got.push(edge_watches[i].next("an event").await.json);
        }
        assert_eq!(
            summary(&got),
            summary(&want),
            "{path}: the edge's stream differs from the apiserver's"
        );
        for (g, w) in got.iter().zip(&want) {
            // An object that stopped matching the selector: the cache sends DELETED with the
            // object's *previous* state (kube-apiserver's cache_watcher.go
            // convertToWatchEvent); the simulator sends its new state (docs/simulator.md).
            // Same event, same object and RV; the state differs by design.
            let stopped_matching = path.contains("labelSelector")
                && w["type"] == "DELETED"
                && w["object"]["metadata"]["labels"]["tier"] != "web"
                && w["object"]["metadata"]["labels"].is_object();
            if stopped_matching {
                assert_eq!(
                    g["object"]["metadata"]["uid"],
                    w["object"]["metadata"]["uid"]
                );
                assert_eq!(
                    g["object"]["metadata"]["labels"]["tier"], "web",
                    "{path}: the stopped-matching DELETED carries the previous state: {g}"
                );
                continue;
            }
            assert_eq!(g, w, "{path}: the objects differ");
        }
        if path.contains("labelSelector") {
            selector = summary(&want);
        }
    }
    // The selector stream in words, so that both sides cannot agree on something wrong:
    // p5 ADDED, p1 started matching (ADDED), p0 stopped (DELETED), p2 MODIFIED, p4 DELETED.
    let kinds: Vec<(&str, &str)> = selector
        .iter()
        .map(|(t, n, _)| (t.as_str(), n.as_str()))
        .filter(|e| *e != ("MODIFIED", "p5"))
        .collect();
    assert_eq!(
        kinds,
        [
            ("ADDED", "p5"),
            ("ADDED", "p1"),
            ("DELETED", "p0"),
            ("MODIFIED", "p2"),
            ("DELETED", "p4"),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_origin_watches_the_apiserver() {
    let sim = start_sim().await;
    let origin = gateway_caching_pods(sim.url()).await;
    // The edge starts once the origin's cache is in: before that the origin forwards the
    // edge's list and watch to the apiserver, and that watch stays there until it ends.
    wait_ready(&origin, "origin").await;
    let edge = edge_caching_pods(origin.url()).await;
    wait_ready(&edge, "edge").await;
    // Downstream watches on the edge, from its cache.
    let through = Http::new(edge.url());
    let rv = through.get_json(&format!("{PODS}?resourceVersion=0")).await["metadata"]
        ["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watches = Vec::new();
    for _ in 0..3 {
        watches.push(
            through
                .watch(&format!("{PODS}?watch=true&resourceVersion={rv}"))
                .await,
        );
    }
    let direct = Http::new(sim.url());
    let resp = direct.post_json(PODS, &tiered_pod("late", None)).await;
    assert_eq!(resp.status, 201, "{}", resp.text());
    for w in &mut watches {
        let ev = w.next("an event").await.json;
        assert_eq!(
            (
                ev["type"].as_str(),
                ev["object"]["metadata"]["name"].as_str()
            ),
            (Some("ADDED"), Some("late"))
        );
    }
    // The edge's reflector watches the origin, whose cache answers it: the apiserver
    // holds one watch for pods, the origin's.
    assert_eq!(
        sim.handle().stats().watches("pods"),
        1,
        "watches the apiserver received: {}",
        sim.handle().stats().to_json()
    );
}
