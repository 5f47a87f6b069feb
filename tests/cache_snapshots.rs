//! Past states from the cache (issue 15, item 2): `resourceVersionMatch=Exact` lists and
//! continue tokens are served from snapshots the cache keeps or rebuilds from its watch
//! history, as kube-apiserver 1.34+ serves them (`ListFromCacheSnapshot`), while the
//! history reaches back to them; memory for kept snapshots is bounded and reported
//! (docs/consistency.md, "Past states").

mod support;

use std::time::Duration;

use serde_json::json;

use support::http::Resp;
use support::metrics::sample;
use support::servers::{cluster_config, start_gateway_with};
use support::watch::{delete_pod, put_pod, rv_at_least, rv_of, wait_until_cached};
use support::{wait_until, Http, EVENT_TIMEOUT};
use watchgate::config::GatewayConfig;
use watchgate::server::GatewayHandle;
use watchgate::sim::{start, SimHandle};

const PODS: &[(&str, &str)] = &[("group", ""), ("resource", "pods")];

async fn setup(window: Duration) -> (SimHandle, GatewayHandle) {
    let sim = start(cluster_config()).await.unwrap();
    for ns in ["a", "b"] {
        for name in ["p1", "p2", "p3"] {
            put_pod(&sim, ns, name, json!({"app": "x"}), "n", "Running");
        }
    }
    let mut cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    cfg.watch.history_window = window;
    let gw = start_gateway_with(cfg).await.into_handle();
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    (sim, gw)
}

async fn metrics(gw: &GatewayHandle) -> String {
    Http::new(&format!("http://{}", gw.admin_addr()))
        .get("/metrics")
        .await
        .text()
}

#[track_caller]
fn assert_same(path: &str, direct: &Resp, through: &Resp, source: &str) {
    assert_eq!(through.source(), Some(source), "{path}: {}", through.text());
    assert_eq!(through.status, direct.status, "{path}: {}", through.text());
    assert_eq!(through.json(), direct.json(), "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_lists_match_the_simulator_at_every_rv_of_the_window() {
    let (sim, gw) = setup(Duration::from_secs(300)).await;
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw.url()));
    let from = sim.store().current_rv();
    // Creations, updates, a deletion, a re-creation, writes to other resources.
    put_pod(&sim, "a", "p1", json!({"app": "y"}), "n", "Running");
    put_pod(&sim, "a", "p4", json!({"app": "x"}), "n", "Running");
    delete_pod(&sim, "b", "p2");
    support::watch::put_object(
        &sim,
        support::watch::resource("", "v1", "configmaps"),
        "default",
        json!({"metadata": {"name": "c", "namespace": "default"}}),
    );
    put_pod(&sim, "b", "p2", json!({"app": "back"}), "n", "Pending");
    delete_pod(&sim, "a", "p3");
    let to = sim.store().current_rv();
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(to)).await;
    for rv in from..=to {
        for path in [
            format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact"),
            format!("/api/v1/namespaces/a/pods?resourceVersion={rv}&resourceVersionMatch=Exact"),
            format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact&labelSelector=app%3Dx"),
        ] {
            assert_same(&path, &direct.get(&path).await, &through.get(&path).await, "cache");
        }
        // Paged, Exact (the legacy RV=N with a limit too): every page from that state.
        for first in [
            format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact&limit=2"),
            format!("/api/v1/pods?resourceVersion={rv}&limit=4"),
        ] {
            let (mut d, mut t) = (direct.get(&first).await, through.get(&first).await);
            assert_same(&first, &d, &t, "cache");
            while let Some(token) = t.json()["metadata"]["continue"].as_str().map(String::from) {
                let next = format!("/api/v1/pods?limit=2&continue={token}");
                d = direct.get(&next).await;
                t = through.get(&next).await;
                assert_same(&next, &d, &t, "cache");
            }
        }
    }
    // Before the cache's first list there is no history to rebuild from: forwarded.
    let path = "/api/v1/pods?resourceVersion=3&resourceVersionMatch=Exact";
    assert_same(
        path,
        &direct.get(path).await,
        &through.get(path).await,
        "upstream",
    );
    let m = metrics(&gw).await;
    assert!(
        sample(
            &m,
            "watchgate_cache_snapshot_reads_total",
            &[PODS[0], PODS[1], ("result", "rebuilt")]
        ) >= 1.0
    );
    assert!(
        sample(
            &m,
            "watchgate_cache_snapshot_reads_total",
            &[PODS[0], PODS[1], ("result", "retained")]
        ) >= 1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_leave_with_the_history_window_and_tokens_then_go_upstream() {
    let (sim, gw) = setup(Duration::from_secs(1)).await;
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw.url()));
    let first = through.get("/api/v1/pods?limit=2").await;
    assert_eq!(first.source(), Some("cache"));
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    let rv = rv_of(&first.json());
    assert_eq!(
        sample(&metrics(&gw).await, "watchgate_cache_snapshots", PODS),
        1.0
    );
    // While the history reaches back to it, the next page comes from its snapshot.
    put_pod(&sim, "a", "p1", json!({"app": "changed"}), "n", "Running");
    let next = format!("/api/v1/pods?limit=2&continue={token}");
    assert_same(
        &next,
        &direct.get(&next).await,
        &through.get(&next).await,
        "cache",
    );
    // The window closes (events older than 1 s leave the history with the next write):
    // the snapshot goes, and the token is the upstream's to serve (etcd keeps 5 minutes).
    let mut i = 0;
    wait_until(
        "the snapshot leaves with the history window",
        EVENT_TIMEOUT,
        || {
            i += 1;
            let written = put_pod(&sim, "b", "p1", json!({"i": i.to_string()}), "n", "Running");
            let gw = &gw;
            async move {
                wait_until_cached(
                    &gw.url(),
                    "/api/v1/pods?resourceVersion=0",
                    rv_at_least(written),
                )
                .await;
                sample(&metrics(gw).await, "watchgate_cache_snapshots", PODS) == 0.0
            }
        },
    )
    .await;
    assert_same(
        &next,
        &direct.get(&next).await,
        &through.get(&next).await,
        "upstream",
    );
    let exact = format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact");
    assert_same(
        &exact,
        &direct.get(&exact).await,
        &through.get(&exact).await,
        "upstream",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_snapshots_are_bounded_and_reported() {
    let (sim, gw) = setup(Duration::from_secs(300)).await;
    let through = Http::new(&gw.url());
    let max = watchgate::cache::snapshots::MAX_RETAINED;
    // One first page per state: each keeps its snapshot for the pages after it.
    for i in 0..max + 20 {
        let w = put_pod(&sim, "a", "p1", json!({"i": i.to_string()}), "n", "Running");
        let page = through
            .get(&format!(
                "/api/v1/pods?resourceVersion={w}&resourceVersionMatch=NotOlderThan&limit=1"
            ))
            .await;
        assert_eq!(page.source(), Some("cache"));
        assert!(page.json()["metadata"]["continue"].is_string());
    }
    let m = metrics(&gw).await;
    assert_eq!(sample(&m, "watchgate_cache_snapshots", PODS), max as f64);
    assert!(sample(&m, "watchgate_cache_snapshot_bytes", PODS) > 0.0);
    assert!(
        sample(
            &m,
            "watchgate_cache_snapshot_reads_total",
            &[PODS[0], PODS[1], ("result", "evicted")]
        ) >= 20.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn states_inside_a_relists_gap_are_the_upstreams() {
    let (sim, gw) = setup(Duration::from_secs(300)).await;
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw.url()));
    let before = sim.store().current_rv();
    let open_watches = || async {
        sample(
            &metrics(&gw).await,
            "watchgate_upstream_watches",
            &[("resource", "pods")],
        )
    };
    // Its watch must be registered upstream first, so that the drop below ends it.
    wait_until(
        "the reflector's watch open upstream",
        EVENT_TIMEOUT,
        || async { open_watches().await == 1.0 },
    )
    .await;
    // The reflector's next watch is answered late (every request to the simulator waits
    // 2 s) with a 410; the writes meanwhile reach the cache only through the relist that
    // follows, which tells the new state but not the states on the way. The writes wait
    // for the old watch to be gone: an event racing the drop would still reach it.
    sim.faults().set_latency(Duration::from_secs(2));
    sim.faults().force_410_next_watch(1);
    sim.faults().drop_watches_now();
    wait_until("the reflector's watch dropped", EVENT_TIMEOUT, || async {
        open_watches().await == 0.0
    })
    .await;
    let w1 = put_pod(&sim, "a", "p1", json!({"gap": "1"}), "n", "Running");
    let w2 = put_pod(&sim, "a", "p2", json!({"gap": "2"}), "n", "Running");
    sim.faults().set_latency(Duration::ZERO);
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(w2)).await;
    assert!(before < w1 && w1 < w2);
    let inside = format!("/api/v1/pods?resourceVersion={w1}&resourceVersionMatch=Exact");
    assert_same(
        &inside,
        &direct.get(&inside).await,
        &through.get(&inside).await,
        "upstream",
    );
    let after = format!("/api/v1/pods?resourceVersion={w2}&resourceVersionMatch=Exact");
    assert_same(
        &after,
        &direct.get(&after).await,
        &through.get(&after).await,
        "cache",
    );
}
