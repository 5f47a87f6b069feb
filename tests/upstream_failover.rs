//! Several apiservers behind one gateway (issue 16, item 2): two simulators sharing one
//! store, like two kube-apiservers on one etcd, given as two `--server`s. One is killed
//! (every connection dropped mid-stream, as when its process dies):
//!
//! - cached watches continue: every watcher's stream is exactly the store's event log
//!   (0 gaps, duplicates or reorderings), with no 410 and no new initial events, and the
//!   reflector resumes on the survivor from its last resourceVersion without a relist;
//! - cached reads continue, and follow the writes made after the kill;
//! - forwarded reads and writes go to the survivor at once;
//! - with every apiserver gone, cached watches stay open and continue when one returns;
//! - a lagging apiserver ("Too large resource version", a frozen watch cache) only delays
//!   the cache: the reflector goes to the one that is ahead, and never relists.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use support::objects::pod;
use support::servers::{
    cluster_config, start_gateway_with, start_replica_with, start_sim_with, GatewayServer,
    SimServer,
};
use support::watch_checker::{Sig, StreamChecker};
use support::watch_clients::{h1_watch, read_sigs_until, H2Conn};
use support::watch_env;
use support::watch_env::{delete, put, update};
use support::{wait_until, Http};
use watchgate::cache::reflector::ReflectorStats;
use watchgate::config::GatewayConfig;
use watchgate::sim::{SimConfig, Store};

const EVENT_TIMEOUT: Duration = Duration::from_secs(30);
const SENTINEL: &str = "ns-1/zz-sentinel";

/// Two apiservers of one cluster (`a` first in the gateway's `--server` order, unless
/// `b_first`) and a gateway caching pods in front of both. `b` is configured by `b_cfg`.
struct Cluster {
    a: SimServer,
    b: SimServer,
    gw: GatewayServer,
    store: Arc<Store>,
}

async fn cluster(b_cfg: SimConfig, b_first: bool) -> Cluster {
    let a = start_sim_with(cluster_config()).await;
    let store = a.handle().store().clone();
    for i in 0..30 {
        put(
            &store,
            pod(&format!("ns-{}", i % 3), &format!("seed-{i}"))
                .label("app", "web")
                .running_on("node-1")
                .pad(200)
                .build(),
        );
    }
    let b = start_replica_with(b_cfg, store.clone()).await;
    let urls = if b_first {
        [b.url(), a.url()]
    } else {
        [a.url(), b.url()]
    };
    let mut cfg = GatewayConfig::for_upstream_urls(&urls).expect("gateway config");
    cfg.watch.bookmark_interval = Duration::from_millis(100);
    // Configmaps are never cached: their reads are forwarded whatever their semantics (a
    // consistent read of a cached resource comes from the cache, docs/consistency.md).
    cfg.cache = Some(watchgate::cache::registry::CachePolicy {
        prewarm: vec!["pods".into()],
        exclude: vec!["configmaps".into()],
    });
    let gw = start_gateway_with(cfg).await;
    support::watch::wait_until_cached(gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    Cluster { a, b, gw, store }
}

/// The gateway's pod reflector's counters.
fn reflector(gw: &GatewayServer) -> Arc<ReflectorStats> {
    gw.handle()
        .cache()
        .expect("caching gateway")
        .caches()
        .into_iter()
        .find(|c| c.info.resource == "pods")
        .expect("the pod cache")
        .stats
        .clone()
}

fn load(a: &std::sync::atomic::AtomicU64) -> u64 {
    a.load(std::sync::atomic::Ordering::Relaxed)
}

/// Waits until `sim` has served at least `n` pod watches (the reflector's).
async fn watches_reach(sim: &SimServer, n: u64, what: &str) {
    let stats = sim.handle().stats().clone();
    wait_until(what, Duration::from_secs(20), || {
        let stats = stats.clone();
        async move { stats.watches("pods") >= n }
    })
    .await;
}

/// Creates, updates and deletes pods straight in the shared store, as other clients of
/// the cluster would.
struct Writer {
    store: Arc<Store>,
    n: usize,
}

impl Writer {
    fn writes(&mut self, count: usize) {
        for _ in 0..count {
            let i = self.n;
            self.n += 1;
            let ns = format!("ns-{}", i % 3);
            match i % 4 {
                0 | 1 => {
                    put(
                        &self.store,
                        pod(&ns, &format!("w-{i}"))
                            .label("app", "web")
                            .running_on("node-2")
                            .pad(200)
                            .build(),
                    );
                }
                2 => {
                    update(&self.store, &ns, &format!("seed-{}", i % 30), |p| {
                        p["status"]["phase"] = format!("Step{i}").into();
                    });
                }
                _ => {
                    delete(
                        &self.store,
                        &format!("ns-{}", (i - 3) % 3),
                        &format!("w-{}", i - 3),
                    );
                }
            }
        }
    }

    fn sentinel(&self) {
        put(
            &self.store,
            pod("ns-1", "zz-sentinel")
                .label("app", "web")
                .running_on("node-1")
                .build(),
        );
    }
}

/// `n` cached watches of every pod from `from`, half over HTTP/1.1, half as streams of
/// one HTTP/2 connection, each read until the sentinel.
async fn watchers(
    addr: SocketAddr,
    from: u64,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<Vec<Sig>, String>>> {
    let conn = H2Conn::connect(addr).await.expect("h2c connection");
    let path =
        format!("/api/v1/pods?watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=300");
    let mut out = Vec::new();
    for id in 0..n {
        let w = if id % 2 == 0 {
            h1_watch(addr, &path).await
        } else {
            conn.watch(&path).await
        };
        let w = w.unwrap_or_else(|e| panic!("watcher {id}: {e}"));
        assert_eq!(w.status, 200, "watcher {id}");
        assert_eq!(w.source().as_deref(), Some("cache"), "watcher {id}");
        let mut lines = w.lines;
        out.push(tokio::spawn(async move {
            read_sigs_until(&mut lines, EVENT_TIMEOUT, |s| s.key == SENTINEL).await
        }));
    }
    out
}

/// Every watcher's stream must be exactly the store's event log from `from`: no gap,
/// duplicate or reordering, no 410 or ERROR, no new initial events.
async fn assert_exact(
    ws: Vec<tokio::task::JoinHandle<Result<Vec<Sig>, String>>>,
    store: &Store,
    from: u64,
) {
    let log = Arc::new(watch_env::log_since(store, from, None));
    let mut failures = Vec::new();
    let n = ws.len();
    for (id, w) in ws.into_iter().enumerate() {
        let events = match tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("watchers finish within 60 s")
            .expect("watcher task")
        {
            Ok(ev) => ev,
            Err(e) => {
                failures.push(format!("watcher {id}: {e}"));
                continue;
            }
        };
        let mut strict = StreamChecker::new(log.clone());
        for e in &events {
            strict.observe(e);
        }
        for v in strict.finish(true) {
            failures.push(format!("watcher {id}: {v}"));
        }
    }
    println!("{n} watchers checked over {} events", log.len());
    assert!(
        failures.is_empty(),
        "{} stream violation(s):\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_watches_continue_across_a_failover_with_no_violation_and_no_relist() {
    let c = cluster(cluster_config(), false).await;
    let stats = reflector(&c.gw);
    let lists = load(&stats.lists);
    let from = c.store.current_rv();
    let ws = watchers(c.gw.handle().addr(), from, 20).await;
    let mut writer = Writer {
        store: c.store.clone(),
        n: 0,
    };
    writer.writes(20);
    support::watch::wait_until_cached(
        c.gw.url(),
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        support::watch::rv_at_least(c.store.current_rv()),
    )
    .await;
    assert_eq!(
        c.b.handle().stats().watches("pods"),
        0,
        "the reflector watches a, the first"
    );

    c.a.kill().await;
    // Written while the reflector has no upstream watch: they reach it through b.
    writer.writes(30);
    watches_reach(&c.b, 1, "the reflector resumes its watch on b").await;
    writer.writes(10);
    writer.sentinel();

    assert_exact(ws, &c.store, from).await;
    assert_eq!(load(&stats.lists), lists, "the reflector relisted");
    assert_eq!(load(&stats.relists_after_expired), 0);
    assert_eq!(c.b.handle().stats().lists("pods"), 0, "no list on b");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_continue_across_a_failover() {
    let c = cluster(cluster_config(), false).await;
    let http = Http::new(c.gw.url());
    c.a.kill().await;
    let mut writer = Writer {
        store: c.store.clone(),
        n: 0,
    };
    writer.writes(12);
    let rv = c.store.current_rv();
    support::watch::wait_until_cached(
        c.gw.url(),
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        support::watch::rv_at_least(rv),
    )
    .await;

    let list = http.get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!(list.status, 200);
    assert_eq!(list.source(), Some("cache"));
    let body = list.json();
    let got: std::collections::BTreeMap<String, u64> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap(),
                    p["metadata"]["name"].as_str().unwrap()
                ),
                support::watch::rv_of(p),
            )
        })
        .collect();
    assert_eq!(
        got,
        watch_env::sim_state(&c.store, None),
        "the cache follows the writes made after the kill"
    );
    let one = http
        .get("/api/v1/namespaces/ns-1/pods/w-1?resourceVersion=0")
        .await;
    assert_eq!((one.status.as_u16(), one.source()), (200, Some("cache")));
    assert_eq!(
        c.b.handle().stats().lists("pods"),
        0,
        "served from the cache, not b"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_reads_and_writes_go_to_the_survivor() {
    let c = cluster(cluster_config(), false).await;
    let http = Http::new(c.gw.url());
    let a_label = c.a_label();
    // Before the kill, forwarded reads go to a, the first.
    let consistent = "/api/v1/namespaces/ns-1/configmaps";
    let (a_lists, b_lists) = (
        c.a.handle().stats().lists("configmaps"),
        c.b.handle().stats().lists("configmaps"),
    );
    assert_eq!(http.get(consistent).await.source(), Some("upstream"));
    assert_eq!(c.a.handle().stats().lists("configmaps"), a_lists + 1);
    assert_eq!(c.b.handle().stats().lists("configmaps"), b_lists);

    c.a.kill().await;
    let mut writer = Writer {
        store: c.store.clone(),
        n: 0,
    };
    writer.writes(3);
    // The very first request after the kill is answered: a's refused connection sends it
    // to b, it is not a 503.
    let list = support::wait::within(
        "a forwarded list answers after the kill",
        Duration::from_secs(10),
        http.get(consistent),
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(list.source(), Some("upstream"));
    assert_eq!(
        list.json()["metadata"]["resourceVersion"],
        c.store.current_rv().to_string(),
        "a consistent read, from b"
    );
    assert_eq!(
        c.b.handle().stats().lists("configmaps"),
        b_lists + 1,
        "b answered"
    );
    let created = http
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &support::objects::configmap("", "after-the-kill").build(),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert!(c
        .store
        .get(
            watchgate::sim::resources::find("", "v1", "configmaps").unwrap(),
            "default",
            "after-the-kill"
        )
        .is_some());

    let metrics = Http::new(&format!("http://{}", c.gw.handle().admin_addr()))
        .get("/metrics")
        .await
        .text();
    assert_eq!(
        support::metrics::sample(
            &metrics,
            "watchgate_upstream_endpoint_healthy",
            &[("endpoint", &a_label)]
        ),
        0.0,
        "a is left out"
    );
}

impl Cluster {
    fn a_label(&self) -> String {
        self.a.url().trim_start_matches("http://").to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_watches_stay_open_while_every_apiserver_is_down_and_continue_after() {
    let c = cluster(cluster_config(), false).await;
    let stats = reflector(&c.gw);
    let lists = load(&stats.lists);
    let a_addr: SocketAddr = c.a.url().trim_start_matches("http://").parse().unwrap();
    let from = c.store.current_rv();
    let ws = watchers(c.gw.handle().addr(), from, 10).await;
    let mut writer = Writer {
        store: c.store.clone(),
        n: 0,
    };
    writer.writes(10);
    support::watch::wait_until_cached(
        c.gw.url(),
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        support::watch::rv_at_least(c.store.current_rv()),
    )
    .await;
    let Cluster { a, b, gw, store } = c;
    a.kill().await;
    b.kill().await;
    writer.writes(10);
    // Down for a while: the watchers get bookmarks (every 100 ms) and nothing ends them.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        ws.iter().all(|w| !w.is_finished()),
        "a watcher's stream ended"
    );

    // a comes back on its address.
    let back = start_replica_with(
        SimConfig {
            addr: a_addr,
            ..cluster_config()
        },
        store.clone(),
    )
    .await;
    watches_reach(&back, 1, "the reflector resumes on the returning apiserver").await;
    writer.writes(10);
    writer.sentinel();
    assert_exact(ws, &store, from).await;
    assert_eq!(load(&stats.lists), lists, "the reflector relisted");
    drop(gw);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_apiserver_sends_the_reflector_to_the_one_ahead_and_never_relists() {
    // b comes first and its watch cache is stuck behind the store; it gives up waiting
    // for a newer resourceVersion after 300 ms (kube-apiserver: 3 s).
    let a = start_sim_with(cluster_config()).await;
    let store = a.handle().store().clone();
    let b = start_replica_with(
        SimConfig {
            too_large_rv_wait: Duration::from_millis(300),
            ..cluster_config()
        },
        store.clone(),
    )
    .await;
    b.handle().faults().freeze_at(store.current_rv());
    for i in 0..10 {
        put(
            &store,
            pod(&format!("ns-{}", i % 3), &format!("seed-{i}"))
                .label("app", "web")
                .running_on("node-1")
                .pad(200)
                .build(),
        );
    }
    let c = {
        let mut cfg = GatewayConfig::for_upstream_urls(&[b.url(), a.url()]).unwrap();
        cfg.watch.bookmark_interval = Duration::from_millis(100);
        cfg.cache = Some(watchgate::cache::registry::CachePolicy {
            prewarm: vec!["pods".into()],
            exclude: vec![],
        });
        let gw = start_gateway_with(cfg).await;
        Cluster { a, b, gw, store }
    };
    // The reflector's watch-list (a consistent read) got "Too large resource version"
    // from b, and went to a, which is ahead, rather than to a paged list.
    support::watch::wait_until_cached(
        c.gw.url(),
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        support::watch::rv_at_least(c.store.current_rv()),
    )
    .await;
    let stats = reflector(&c.gw);
    assert!(
        load(&stats.behind) >= 1,
        "b's Too large resource version was seen"
    );
    assert_eq!(
        load(&stats.watch_list_fallbacks),
        0,
        "no fallback to a paged list"
    );
    assert_eq!(load(&stats.watch_lists), 1);
    assert_eq!(
        load(&stats.lists),
        load(&stats.behind) + 1,
        "watch-lists only: the ones b answered from behind, then a's"
    );
    let metrics = Http::new(&format!("http://{}", c.gw.handle().admin_addr()))
        .get("/metrics")
        .await
        .text();
    assert!(
        support::metrics::sample(
            &metrics,
            "watchgate_reflector_restarts_total",
            &[("resource", "pods"), ("reason", "upstream_behind")],
        ) >= 1.0
    );

    // a dies; the reflector resumes on b, still behind: a watch from a resourceVersion b
    // has not reached yet waits there (as on kube-apiserver), so the cache is late, and
    // nothing else happens to it or its watchers.
    let lists = load(&stats.lists);
    let from = c.store.current_rv();
    let ws = watchers(c.gw.handle().addr(), from, 10).await;
    let mut writer = Writer {
        store: c.store.clone(),
        n: 0,
    };
    let Cluster { a, b, gw, store } = c;
    let b_watches = b.handle().stats().watches("pods");
    a.kill().await;
    writer.writes(20);
    watches_reach(&b, b_watches + 1, "the reflector resumes on b").await;
    let late = Http::new(gw.url())
        .get_json("/api/v1/namespaces/default/pods?resourceVersion=0")
        .await;
    assert_eq!(
        late["metadata"]["resourceVersion"],
        from.to_string(),
        "b is frozen: the cache has nothing newer yet"
    );
    // b catches up: everything arrives, in order, exactly once.
    b.handle().faults().unfreeze();
    writer.writes(10);
    writer.sentinel();
    assert_exact(ws, &store, from).await;
    assert_eq!(load(&stats.lists), lists, "the reflector relisted");
    assert_eq!(load(&stats.relists_after_expired), 0);
}

/// An apiserver that answers but is not ready (its `/readyz` fails, as when it begins a
/// graceful shutdown) is left out by the periodic checks, and taken back once it is ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apiserver_whose_readyz_fails_is_left_out_until_it_is_ready_again() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use support::stub::{handler, json_response, Stub};
    let apiserver = |name: &'static str, ready: Arc<AtomicBool>| {
        handler(move |req: http::Request<hyper::body::Incoming>| {
            let ready = ready.clone();
            async move {
                if req.uri().path() == "/readyz" {
                    let code = if ready.load(Ordering::SeqCst) {
                        http::StatusCode::OK
                    } else {
                        http::StatusCode::INTERNAL_SERVER_ERROR
                    };
                    return json_response(code, serde_json::json!({}));
                }
                json_response(http::StatusCode::OK, serde_json::json!({"from": name}))
            }
        })
    };
    let a_ready = Arc::new(AtomicBool::new(true));
    let a = Stub::start(apiserver("a", a_ready.clone())).await;
    let b = Stub::start(apiserver("b", Arc::new(AtomicBool::new(true)))).await;
    let mut cfg = GatewayConfig::for_upstream_urls(&[&a.url(), &b.url()]).unwrap();
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let http = Http::new(gw.url());
    let from = |http: Http| async move { http.get_json("/version").await["from"].clone() };
    assert_eq!(
        from(http.clone()).await,
        "a",
        "the first --server takes requests"
    );

    a_ready.store(false, Ordering::SeqCst);
    wait_until(
        "requests go to b once a's /readyz fails",
        Duration::from_secs(20),
        || async { from(http.clone()).await == "b" },
    )
    .await;
    a_ready.store(true, Ordering::SeqCst);
    wait_until(
        "requests go back to a once it is ready",
        Duration::from_secs(40),
        || async { from(http.clone()).await == "a" },
    )
    .await;
}
