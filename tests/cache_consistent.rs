//! Consistent reads from the cache (issue 15): gets, lists and watch-lists with no
//! resourceVersion are answered from the cache once a probe of the upstream proves it
//! fresh, and answer exactly what the simulator answers (docs/consistency.md).
//!
//! The race tests write straight to the simulator (bypassing the gateway) and read
//! through the gateway the moment the write is acknowledged, 1,000 times, on a busy
//! resource and on a quiet one.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use support::http::{Resp, MERGE_PATCH};
use support::objects::configmap;
use support::servers::{cluster_config, start_gateway_with};
use support::watch::{
    assert_same_events, open_ok, put_object, put_pod, resource, rv_of, store_put,
    wait_until_cached, Event,
};
use support::Http;
use watchgate::cache::fresh::ConsistentReads;
use watchgate::config::GatewayConfig;
use watchgate::sim::{start, SimHandle};

/// client-go's watch-list request (reflector.go `watchList`, WatchListClient on by
/// default since 1.35): no resourceVersion, so a consistent read.
const WATCH_LIST: &str = "allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=561&watch=true";

/// A simulator with pods in namespaces whose names prefix each other, and a gateway whose
/// pods cache has synced: its URL and its admin URL.
async fn seeded(consistent_reads: ConsistentReads) -> (SimHandle, String, String) {
    let sim = start(cluster_config()).await.unwrap();
    for ns in ["a", "a-b", "b"] {
        for (name, app) in [("web-1", "web"), ("web-2", "web"), ("db-1", "db")] {
            put_pod(&sim, ns, name, json!({ "app": app }), "node-1", "Running");
        }
    }
    let mut cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    cfg.consistent_reads = consistent_reads;
    let gw = start_gateway_with(cfg).await.into_handle();
    let url = gw.url();
    let admin = format!("http://{}", gw.admin_addr());
    // Keep the gateway running for the test's lifetime.
    std::mem::forget(gw);
    wait_until_cached(&url, "/api/v1/pods?resourceVersion=0", |_| true).await;
    (sim, url, admin)
}

/// A write to another resource: the global resourceVersion moves, pods stay quiet.
fn write_elsewhere(sim: &SimHandle, i: u64) -> u64 {
    put_object(
        sim,
        resource("", "v1", "configmaps"),
        "default",
        configmap("default", "other")
            .data(json!({"i": i.to_string()}))
            .build(),
    )
}

#[track_caller]
fn assert_same_answer(path: &str, direct: &Resp, through: &Resp) {
    assert_eq!(
        through.source(),
        Some("cache"),
        "{path}: {}",
        through.text()
    );
    assert_eq!(through.status, direct.status, "{path}: {}", through.text());
    assert_eq!(through.json(), direct.json(), "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_gets_and_lists_match_the_simulator() {
    let (sim, gw, _) = seeded(ConsistentReads::Cache).await;
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw));
    let paths = [
        "/api/v1/pods",
        "/api/v1/namespaces/a/pods",
        "/api/v1/namespaces/a-b/pods",
        "/api/v1/pods?labelSelector=app%3Dweb",
        "/api/v1/pods?fieldSelector=metadata.namespace%3Db",
        "/api/v1/namespaces/a/pods/web-1",
        "/api/v1/namespaces/a/pods/missing",
    ];
    for path in paths {
        assert_same_answer(path, &direct.get(path).await, &through.get(path).await);
    }
    // Writes elsewhere move the global resourceVersion; the pods stream has nothing to
    // say, so the cache re-syncs (one consistent watch-list) and answers at the new RV.
    for i in 0..3 {
        write_elsewhere(&sim, i);
    }
    let watches = sim.stats().watches("pods");
    for path in paths {
        assert_same_answer(path, &direct.get(path).await, &through.get(path).await);
    }
    let resyncs = sim.stats().watches("pods") - watches;
    assert!(
        (1..=2).contains(&resyncs),
        "{resyncs} re-syncs for one quiet RV"
    );
    // A write to pods itself arrives on the stream: no re-sync needed.
    let watches = sim.stats().watches("pods");
    put_pod(
        &sim,
        "a",
        "web-1",
        json!({"app": "web", "v": "2"}),
        "node-2",
        "Running",
    );
    for path in paths {
        assert_same_answer(path, &direct.get(path).await, &through.get(path).await);
    }
    assert_eq!(
        sim.stats().watches("pods"),
        watches,
        "the stream brought it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_consistent_lists_match_the_simulator_page_for_page() {
    let (sim, gw, _) = seeded(ConsistentReads::Cache).await;
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw));
    for first in [
        "/api/v1/pods?limit=2",
        "/api/v1/namespaces/a/pods?limit=1",
        "/api/v1/pods?limit=2&labelSelector=app%3Ddb",
    ] {
        let (mut d, mut t) = (direct.get(first).await, through.get(first).await);
        assert_same_answer(first, &d, &t);
        let base = first.split('?').next().unwrap().to_string();
        let query = first.split('?').nth(1).unwrap().to_string();
        let mut pages = 1;
        // Writes between pages: every later page is still cut from the first page's state.
        let mut i = 0;
        while let Some(token) = t.json()["metadata"]["continue"].as_str().map(String::from) {
            put_pod(
                &sim,
                "a",
                "web-2",
                json!({"app": "web", "i": i.to_string()}),
                "n",
                "Running",
            );
            write_elsewhere(&sim, i);
            i += 1;
            let next = format!("{base}?{query}&continue={token}");
            d = direct.get(&next).await;
            t = through.get(&next).await;
            assert_same_answer(&next, &d, &t);
            pages += 1;
        }
        assert!(d.json()["metadata"].get("continue").is_none());
        assert!(pages > 1, "{first}: one page only");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_watch_lists_match_the_simulator() {
    let (sim, gw, _) = seeded(ConsistentReads::Cache).await;
    write_elsewhere(&sim, 1);
    for (i, path) in [
        format!("/api/v1/pods?{WATCH_LIST}"),
        format!("/api/v1/namespaces/a/pods?{WATCH_LIST}&labelSelector=app%3Dweb"),
        // A plain watch with no resourceVersion is defaulted to a watch-list (1.32+).
        "/api/v1/pods?watch=1&allowWatchBookmarks=true".to_string(),
    ]
    .into_iter()
    .enumerate()
    {
        let mut d = open_ok(&sim.url(), &path).await;
        let mut t = open_ok(&gw, &path).await;
        t.assert_from_cache();
        let (de, db) = d.initial_events().await;
        let (te, tb) = t.initial_events().await;
        assert_same_events(&path, &de, &te);
        assert_same_events(&path, &[db], &[tb]);
        // Then the changes, on both.
        let x = i.to_string();
        let rv = put_pod(
            &sim,
            "a",
            "web-1",
            json!({"app": "web", "x": x}),
            "n",
            "Running",
        );
        let de = d.next("the change").await;
        let te = t.next("the change").await;
        assert_eq!(de.rv(), rv);
        assert_same_events(&path, &[de], &[te]);
    }
    // sendInitialEvents=false: "start at most recent", the changes only.
    let path = "/api/v1/namespaces/b/pods?watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan";
    let mut d = open_ok(&sim.url(), path).await;
    let mut t = open_ok(&gw, path).await;
    t.assert_from_cache();
    let rv = put_pod(
        &sim,
        "b",
        "db-1",
        json!({"app": "db", "x": "1"}),
        "n",
        "Running",
    );
    let (de, te) = (d.next("the change").await, t.next("the change").await);
    assert_eq!(de.rv(), rv);
    assert_same_events(path, &[de], &[te]);
}

/// Requests the gateway answered for pods lists, by source, from its metrics.
async fn pod_lists_by_source(admin: &str, source: &str) -> f64 {
    let text = Http::new(admin).get("/metrics").await.text();
    support::metrics::sample(
        &text,
        "watchgate_requests_total",
        &[("verb", "list"), ("resource", "pods"), ("source", source)],
    )
}

/// kubectl (its paged `limit=500` list) and the Python client (a plain list), neither with
/// a resourceVersion: consistent reads, answered from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_the_python_client_get_consistent_answers_from_the_cache() {
    let (sim, gw, admin) = seeded(ConsistentReads::Cache).await;
    write_elsewhere(&sim, 7);
    let (cached, forwarded) = (
        pod_lists_by_source(&admin, "cache").await,
        pod_lists_by_source(&admin, "upstream").await,
    );
    let kubectl = support::Kubectl::new(&gw);
    let direct = support::Kubectl::new(&sim.url());
    let args = ["get", "pods", "-A", "-o", "json"];
    let (got, want): (Value, Value) = (
        serde_json::from_str(&kubectl.ok(&args).await).unwrap(),
        serde_json::from_str(&direct.ok(&args).await).unwrap(),
    );
    assert_eq!(got["items"], want["items"]);
    let out = support::python::run(
        "list_rv0.py",
        &[kubectl.kubeconfig().to_str().unwrap(), "consistent"],
        Duration::from_secs(60),
    )
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let py: Value = serde_json::from_str(out.stdout.trim()).expect("python printed JSON");
    let all = Http::new(&sim.url()).get_json("/api/v1/pods").await;
    assert_eq!(py["resourceVersion"], all["metadata"]["resourceVersion"]);
    assert_eq!(py["names"].as_array().unwrap().len(), 9);
    assert_eq!(pod_lists_by_source(&admin, "upstream").await, forwarded);
    assert!(pod_lists_by_source(&admin, "cache").await >= cached + 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_of_consistent_reads_shares_a_few_probes() {
    let (sim, gw, _) = seeded(ConsistentReads::Cache).await;
    let lists = sim.stats().lists("pods");
    let watches = sim.stats().watches("pods");
    let mut tasks = Vec::new();
    for i in 0..300 {
        let gw = gw.clone();
        tasks.push(tokio::spawn(async move {
            if i % 3 == 0 {
                let mut w = open_ok(&gw, &format!("/api/v1/pods?{WATCH_LIST}")).await;
                let source = w.source().map(String::from);
                let (events, _) = w.initial_events().await;
                (source, events.len())
            } else {
                let r = Http::new(&gw).get("/api/v1/pods").await;
                let n = r.json()["items"].as_array().map_or(0, Vec::len);
                (r.source().map(String::from), n)
            }
        }));
    }
    for t in tasks {
        let (source, n) = t.await.unwrap();
        assert_eq!(source.as_deref(), Some("cache"));
        assert_eq!(n, 9);
    }
    let probes = sim.stats().lists("pods") - lists;
    println!("300 consistent reads: {probes} probes");
    assert!(
        (1..=30).contains(&probes),
        "300 concurrent consistent reads cost {probes} upstream lists"
    );
    assert_eq!(
        sim.stats().watches("pods"),
        watches,
        "the cache was fresh: no re-sync"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consistent_reads_upstream_forwards_them() {
    let (sim, gw, _) = seeded(ConsistentReads::Upstream).await;
    let through = Http::new(&gw);
    let lists = sim.stats().lists("pods");
    let r = through.get("/api/v1/pods").await;
    assert_eq!(r.source(), Some("upstream"));
    let w = open_ok(&gw, &format!("/api/v1/pods?{WATCH_LIST}")).await;
    assert_eq!(w.source(), Some("upstream"));
    assert_eq!(sim.stats().lists("pods"), lists + 1);
    // Other reads still come from the cache.
    let r = through.get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!(r.source(), Some("cache"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_upstream_consistent_reads_are_forwarded_and_fail_like_any_other() {
    let (sim, gw, _) = seeded(ConsistentReads::Cache).await;
    sim.shutdown().await;
    let through = Http::new(&gw);
    // The probe fails: forwarded, and the unreachable upstream's 503.
    let r = through.get("/api/v1/pods").await;
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["reason"], "ServiceUnavailable");
    // What needs no proof still comes from the cache.
    let r = through.get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!((r.status.as_u16(), r.source()), (200, Some("cache")));
}

/// The race: write straight to the simulator, then, the moment the write is acknowledged,
/// a consistent list, get and watch-list through the gateway, concurrently. Every one
/// must include the write. `busy`: other writes go to the same resource (its stream keeps
/// moving); otherwise to another resource (the pods stream has nothing to say when the
/// global RV moves: the cache must re-sync to prove itself fresh).
async fn race(busy: bool, large: bool) {
    const ITERATIONS: u64 = 1000;
    let (sim, gw, _) = seeded(ConsistentReads::Cache).await;
    if large {
        // More pods than one page (cache::fresh::SMALL_RESOURCE): a quiet read is no
        // longer proven by a re-sync. Lone gets and lists are forwarded at once, and
        // watch-lists wait for a progress watch's bookmark (about a second each in the
        // simulator, as in kube-apiserver), so only one iteration in 100 opens one.
        let rt = resource("", "v1", "pods");
        for i in 0..600 {
            let p = support::objects::pod("filler", &format!("f-{i}"))
                .labels(json!({}))
                .running_on("n")
                .build();
            store_put(sim.store(), rt, "filler", p);
        }
        support::watch::wait_until_cached(
            &gw,
            "/api/v1/pods?resourceVersion=0",
            support::watch::rv_at_least(sim.store().current_rv()),
        )
        .await;
    }
    let direct = Http::new(&sim.url());
    let through = Http::new(&gw);
    put_pod(
        &sim,
        "race",
        "racer",
        json!({"iter": "start"}),
        "n",
        "Running",
    );

    // Background writes, as fast as the store takes them (with a breath between).
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (store, stop) = (sim.store().clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                if busy {
                    let pod = support::objects::pod("busy", "noise")
                        .labels(json!({"i": i.to_string()}))
                        .running_on("n")
                        .build();
                    store_put(&store, resource("", "v1", "pods"), "busy", pod);
                } else {
                    store_put(
                        &store,
                        resource("", "v1", "configmaps"),
                        "default",
                        configmap("default", "noise")
                            .data(json!({"i": i.to_string()}))
                            .build(),
                    );
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            i
        })
    };

    let mut misses = Vec::new();
    let mut from_cache = 0u64;
    let (mut reads, mut watches_from_cache) = (0u64, 0u64);
    let list_path = "/api/v1/namespaces/race/pods";
    let get_path = "/api/v1/namespaces/race/pods/racer";
    let watch_path = format!("/api/v1/namespaces/race/pods?{WATCH_LIST}");
    for i in 0..ITERATIONS {
        let iter = i.to_string();
        let ack = direct
            .patch(
                get_path,
                MERGE_PATCH,
                &json!({"metadata": {"labels": {"iter": iter}}}),
            )
            .await;
        assert_eq!(ack.status, 200, "{}", ack.text());
        let w = rv_of(&ack.json());
        // Acknowledged: read now, all three at once.
        let with_watch = !large || i % 100 == 0;
        let (list, get, watch) =
            tokio::join!(through.get(list_path), through.get(get_path), async {
                if !with_watch {
                    return None;
                }
                let mut watch = open_ok(&gw, &watch_path).await;
                let source = watch.source().map(String::from);
                let (events, bookmark) = watch.initial_events().await;
                Some((source, events, bookmark))
            });
        let sees = |o: &Value| o["metadata"]["labels"]["iter"] == iter.as_str() && rv_of(o) >= w;
        let list_ok = list.status == 200
            && list.json()["items"]
                .as_array()
                .is_some_and(|items| items.iter().any(&sees));
        let get_ok = get.status == 200 && sees(&get.json());
        let (wsource, watch_ok, brv) = match watch {
            None => (None, true, 0),
            Some((wsource, events, bookmark)) => {
                let ok = events
                    .iter()
                    .any(|e: &Event| e.ty() == "ADDED" && sees(e.object()))
                    && bookmark.rv() >= w;
                (wsource, ok, bookmark.rv())
            }
        };
        if !(list_ok && get_ok && watch_ok) {
            misses.push(format!(
                "iteration {i}: write at {w}: list {list_ok} ({:?}), get {get_ok} ({:?}), watch-list {watch_ok} ({wsource:?}, bookmark {brv})",
                list.source(),
                get.source(),
            ));
        }
        reads += 2 + u64::from(with_watch);
        if wsource.as_deref() == Some("cache") {
            watches_from_cache += 1;
        }
        for source in [list.source(), get.source(), wsource.as_deref()] {
            if source == Some("cache") {
                from_cache += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let background = writer.await.unwrap();
    println!(
        "{}{} race: {ITERATIONS} writes, {reads} reads ({from_cache} from the cache), {background} background writes, {} misses",
        if busy { "busy" } else { "quiet" },
        if large { " large" } else { "" },
        misses.len()
    );
    assert!(
        misses.is_empty(),
        "{} misses:\n{}",
        misses.len(),
        misses.join("\n")
    );
    if large {
        // Lone gets and lists on a quiet large resource are forwarded (cheaper than a
        // proof); every watch-list is served from the cache after its proof.
        assert_eq!(
            watches_from_cache,
            ITERATIONS / 100,
            "watch-lists from the cache"
        );
        return;
    }
    // The feature under test is the cache's: nearly every read must have come from it
    // (a read may be forwarded only when freshness could not be proven in time).
    assert!(
        from_cache * 100 >= reads * 99,
        "only {from_cache} of {reads} reads came from the cache"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_on_a_busy_resource_never_misses_a_write() {
    race(true, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_on_a_quiet_resource_never_misses_a_write() {
    race(false, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn race_on_a_quiet_large_resource_never_misses_a_write() {
    race(false, true).await;
}
