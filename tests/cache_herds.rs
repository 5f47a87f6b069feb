//! Herds (issue 26): a cold gateway joins its caches' first sync instead of forwarding
//! the herd, consistent reads on a quiet large resource are proven fresh by one progress
//! watch (or forwarded at once when alone), and every forwarded request says why
//! (`watchgate_forwarded_requests_total{reason}`, docs/operations.md).

mod support;

use std::time::Duration;

use serde_json::{json, Value};

use support::http::Resp;
use support::metrics::sample;
use support::objects::configmap;
use support::servers::{cluster_config, start_gateway_with, start_sim_with};
use support::watch::{
    assert_same_events, open, open_ok, put_object, put_pod, resource, store_put, wait_until_cached,
};
use support::Http;
use watchgate::config::GatewayConfig;
use watchgate::sim::SimHandle;

/// client-go 1.36's watch-list request (reflector.go `watchList`; client-go cannot be
/// built here, so its query string is reproduced).
const WATCH_LIST: &str = "allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=561&watch=true";

fn seed_configmaps(sim: &SimHandle, n: u64) {
    let rt = resource("", "v1", "configmaps");
    for i in 0..n {
        store_put(
            sim.store(),
            rt,
            "default",
            configmap("default", &format!("cm-{i}"))
                .data(json!({"i": i.to_string()}))
                .build(),
        );
    }
}

/// A write to another resource: the global resourceVersion moves, pods stay quiet.
fn write_elsewhere(sim: &SimHandle, i: u64) {
    put_object(
        sim,
        resource("", "v1", "configmaps"),
        "default",
        configmap("default", "noise")
            .data(json!({"i": i.to_string()}))
            .build(),
    );
}

/// The cluster's identity: its `kube-system` namespace (read before it is killed).
async fn identity(sim: &support::servers::SimServer) -> Value {
    Http::new(sim.url())
        .get("/api/v1/namespaces/kube-system")
        .await
        .json()
}

/// The same cluster restored from an old backup on `addr`: its `kube-system` uid (the
/// cluster's identity) is `identity`'s, its resourceVersions start again. Only the
/// resourceVersions tell (tests/cache_consistency_check.rs has a rebuilt cluster, which
/// its identity gives away).
async fn restored_cluster(
    addr: std::net::SocketAddr,
    identity: Value,
) -> support::servers::SimServer {
    let mut cfg = cluster_config();
    cfg.addr = addr;
    cfg.bootstrap_namespaces = false;
    let new = start_sim_with(cfg).await;
    store_put(
        new.handle().store(),
        resource("", "v1", "namespaces"),
        "",
        identity,
    );
    new
}

async fn metrics(admin: &str) -> String {
    Http::new(admin).get("/metrics").await.text()
}

async fn forwarded(admin: &str, reason: &str) -> f64 {
    sample(
        &metrics(admin).await,
        "watchgate_forwarded_requests_total",
        &[("reason", reason)],
    )
}

/// A 200 the upstream answered: the gateway forwarded the read.
#[track_caller]
fn assert_forwarded(r: &support::http::Resp) {
    assert_eq!(
        (r.status.as_u16(), r.source()),
        (200, Some("upstream")),
        "{}",
        r.text()
    );
}

async fn progress_watches(admin: &str, res: &str) -> f64 {
    sample(
        &metrics(admin).await,
        "watchgate_reflector_progress_watches_total",
        &[("resource", res)],
    )
}

fn admin_of(gw: &support::servers::GatewayServer) -> String {
    format!("http://{}", gw.handle().admin_addr())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_herd_costs_the_upstream_one_sync() {
    let sim = start_sim_with(cluster_config()).await;
    seed_configmaps(sim.handle(), 1000);
    let cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    let gw = start_gateway_with(cfg).await;
    let admin = admin_of(&gw);
    let url = gw.url().to_string();
    let not_synced = forwarded(&admin, "not_synced").await;
    let stats = sim.handle().stats();
    let (lists, watches) = (stats.lists("configmaps"), stats.watches("configmaps"));

    // At once, on a gateway whose configmaps cache does not exist yet: RV=0 watches,
    // client-go's watch-lists, RV=0 lists, consistent lists and consistent gets.
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200u32 {
        let url = url.clone();
        tasks.spawn(async move {
            let path = match i % 5 {
                0 => "/api/v1/configmaps?watch=true&resourceVersion=0".to_string(),
                1 => format!("/api/v1/configmaps?{WATCH_LIST}"),
                2 => "/api/v1/configmaps?resourceVersion=0".to_string(),
                3 => "/api/v1/namespaces/default/configmaps".to_string(),
                _ => format!("/api/v1/namespaces/default/configmaps/cm-{i}"),
            };
            if path.contains("watch=true") {
                let w = open(&url, &path).await;
                (path, w.status.as_u16(), w.source().map(str::to_string))
            } else {
                let r: Resp = Http::new(&url).get(&path).await;
                (path, r.status.as_u16(), r.source().map(str::to_string))
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        let (path, status, source) = done.unwrap();
        assert_eq!(
            (status, source.as_deref()),
            (200, Some("cache")),
            "{path}: the herd joins the sync"
        );
    }
    // One sync (a watch-list) for the whole herd; consistent reads that arrived after it
    // was sent share a few probes (lists with limit=1); nothing else reached the upstream.
    assert_eq!(
        stats.watches("configmaps") - watches,
        1,
        "one upstream watch-list"
    );
    let probes = stats.lists("configmaps") - lists;
    assert!(probes <= 10, "{probes} probes for the herd");
    assert_eq!(stats.count("get", "configmaps"), 0, "no get forwarded");
    assert_eq!(forwarded(&admin, "not_synced").await, not_synced);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_that_arrived_during_the_first_sync_need_no_probe() {
    let sim = start_sim_with(cluster_config()).await;
    seed_configmaps(sim.handle(), 300);
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(sim.url()).unwrap()).await;
    let stats = sim.handle().stats();
    let lists = stats.lists("configmaps");
    // The first request starts the cache: discovery, then the watch-list, which is sent
    // after the request arrived; its state answers the request with no probe.
    let r = Http::new(gw.url())
        .get("/api/v1/namespaces/default/configmaps")
        .await;
    assert_eq!((r.status.as_u16(), r.source()), (200, Some("cache")));
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 300);
    assert_eq!(stats.lists("configmaps"), lists, "no probe, no list");
    let m = metrics(&admin_of(&gw)).await;
    assert_eq!(
        sample(
            &m,
            "watchgate_consistent_reads_total",
            &[("resource", "configmaps"), ("result", "synced")]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_sync_wait_a_cold_cache_forwards_as_before() {
    let sim = start_sim_with(cluster_config()).await;
    seed_configmaps(sim.handle(), 10);
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.cache_sync_wait = Duration::ZERO;
    let gw = start_gateway_with(cfg).await;
    let admin = admin_of(&gw);
    let before = forwarded(&admin, "not_synced").await;
    let r = Http::new(gw.url())
        .get("/api/v1/configmaps?resourceVersion=0")
        .await;
    assert_forwarded(&r);
    assert_eq!(forwarded(&admin, "not_synced").await, before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_resuming_from_before_a_cold_cache_gets_410_from_the_cache() {
    let sim = start_sim_with(cluster_config()).await;
    seed_configmaps(sim.handle(), 3);
    let early = support::watch::rv_of(&Http::new(sim.url()).get("/api/v1/configmaps").await.json());
    for i in 0..3 {
        write_elsewhere(sim.handle(), i);
    }
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(sim.url()).unwrap()).await;
    // kube-apiserver's watch cache answers a watch from before its window with a 410
    // in an ERROR event (cache_watcher.go, watch_cache.go `getAllEventsSinceLocked`);
    // the client relists, from the cache.
    let path = format!("/api/v1/configmaps?watch=true&resourceVersion={early}");
    let mut w = open_ok(gw.url(), &path).await;
    w.assert_from_cache();
    let e = w.next("the 410").await;
    assert_eq!(e.ty(), "ERROR");
    assert_eq!(e.object()["code"], 410, "{:?}", e.object());
    assert_eq!(e.object()["reason"], "Expired");
}

/// A simulator with `big` pods in namespace "big" (more than one page: a large resource
/// for the proof's rules) and three in "small"; a gateway whose pods cache is synced.
async fn quiet_large() -> (support::servers::SimServer, support::servers::GatewayServer) {
    let sim = start_sim_with(cluster_config()).await;
    let rt = resource("", "v1", "pods");
    for i in 0..600 {
        let p = support::objects::pod("big", &format!("p-{i}"))
            .labels(json!({}))
            .running_on("n")
            .build();
        store_put(sim.handle().store(), rt, "big", p);
    }
    for name in ["a", "b", "c"] {
        put_pod(
            sim.handle(),
            "small",
            name,
            json!({"app": "x"}),
            "n",
            "Running",
        );
    }
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(sim.url()).unwrap()).await;
    wait_until_cached(gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    (sim, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lone_consistent_get_on_a_quiet_large_resource_is_forwarded_at_once() {
    let (sim, gw) = quiet_large().await;
    let admin = admin_of(&gw);
    for i in 0..3 {
        write_elsewhere(sim.handle(), i);
    }
    let stats = sim.handle().stats();
    let (watches, not_fresh) = (stats.watches("pods"), forwarded(&admin, "not_fresh").await);
    let progress = progress_watches(&admin, "pods").await;
    let path = "/api/v1/namespaces/small/pods/a";
    let direct = Http::new(sim.url()).get(path).await;
    let r = Http::new(gw.url()).get(path).await;
    assert_forwarded(&r);
    assert_eq!(r.json(), direct.json());
    assert_eq!(forwarded(&admin, "not_fresh").await, not_fresh + 1.0);
    // No proof was asked for: no re-sync, no progress watch.
    assert_eq!(stats.watches("pods"), watches);
    assert_eq!(progress_watches(&admin, "pods").await, progress);
    // The stream has not moved since the probe found it behind: the next lone reads are
    // forwarded without a probe.
    let (lists, lone) = (stats.lists("pods"), forwarded(&admin, "lone_read").await);
    for _ in 0..3 {
        let r = Http::new(gw.url()).get(path).await;
        assert_forwarded(&r);
    }
    assert_eq!(forwarded(&admin, "lone_read").await, lone + 3.0);
    assert_eq!(stats.lists("pods"), lists, "no probe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_list_on_a_quiet_large_resource_is_proven_by_a_progress_watch() {
    let (sim, gw) = quiet_large().await;
    let admin = admin_of(&gw);
    for i in 0..3 {
        write_elsewhere(sim.handle(), i);
    }
    let stats = sim.handle().stats();
    let (watches, lists) = (stats.watches("pods"), stats.lists("pods"));
    let progress = progress_watches(&admin, "pods").await;
    let relists = sample(
        &metrics(&admin).await,
        "watchgate_reflector_relists_total",
        &[("resource", "pods"), ("reason", "consistent_read")],
    );
    let path = format!("/api/v1/namespaces/small/pods?{WATCH_LIST}");
    let mut d = open_ok(sim.url(), &path).await;
    let mut t = open_ok(gw.url(), &path).await;
    t.assert_from_cache();
    let (de, db) = d.initial_events().await;
    let (te, tb) = t.initial_events().await;
    assert_same_events(&path, &de, &te);
    assert!(tb.rv() >= db.rv(), "{} < {}", tb.rv(), db.rv());
    // The proof: one probe and one short watch (its pre-timeout bookmark), not a re-read
    // of the 603 pods.
    assert_eq!(progress_watches(&admin, "pods").await, progress + 1.0);
    // The test's own direct watch-list, and the progress watch.
    assert_eq!(stats.watches("pods"), watches + 2);
    assert_eq!(stats.lists("pods"), lists + 1);
    let m = metrics(&admin).await;
    assert_eq!(
        sample(
            &m,
            "watchgate_reflector_relists_total",
            &[("resource", "pods"), ("reason", "consistent_read")],
        ),
        relists
    );
}

/// Watch-lists wait for a progress bookmark anyway: a herd of them shares one probe sent
/// just before the bookmark can come, and that one bookmark (issue 26: 1,000 informers on
/// a quiet large resource cost the upstream at most 5 requests).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_of_watch_lists_on_a_quiet_large_resource_shares_one_probe_and_one_bookmark() {
    let (sim, gw) = quiet_large().await;
    let admin = admin_of(&gw);
    for i in 0..3 {
        write_elsewhere(sim.handle(), i);
    }
    let stats = sim.handle().stats();
    let (watches, lists) = (stats.watches("pods"), stats.lists("pods"));
    let progress = progress_watches(&admin, "pods").await;
    let path = format!("/api/v1/namespaces/small/pods?{WATCH_LIST}");
    let direct = {
        let mut d = open_ok(sim.url(), &path).await;
        d.initial_events().await.0
    };
    let mut herd = tokio::task::JoinSet::new();
    let spawn = |herd: &mut tokio::task::JoinSet<_>| {
        let (url, path) = (gw.url().to_string(), path.clone());
        herd.spawn(async move {
            let mut w = open_ok(&url, &path).await;
            w.assert_from_cache();
            w.initial_events().await.0
        });
    };
    // The first arrival's probe, sent at once, finds the cache behind and asks for the
    // progress watch; the rest of the herd arrives while its bookmark is on its way.
    spawn(&mut herd);
    support::wait::wait_for(
        "the progress watch",
        Duration::from_secs(10),
        || progress_watches(&admin, "pods"),
        |&n| n > progress,
    )
    .await;
    for _ in 0..299 {
        spawn(&mut herd);
    }
    while let Some(events) = herd.join_next().await {
        assert_same_events(&path, &direct, &events.unwrap());
    }
    // Two probes: the first arrival's, and the one the other 299 joined, held back until
    // just before the bookmark could come (without that, the herd's probes would follow
    // each other every 20 to 100 ms).
    assert_eq!(stats.lists("pods") - lists, 2, "probes");
    assert_eq!(progress_watches(&admin, "pods").await, progress + 1.0);
    // The test's direct watch-list and the progress watch; at most the ordinary watch
    // resumed after the progress watch's deadline.
    let upstream_watches = stats.watches("pods") - watches;
    assert!(
        (2..=3).contains(&upstream_watches),
        "{upstream_watches} watches"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_herd_of_consistent_gets_on_a_quiet_large_resource_shares_one_proof() {
    let (sim, gw) = quiet_large().await;
    for i in 0..3 {
        write_elsewhere(sim.handle(), i);
    }
    let stats = sim.handle().stats();
    let gets = stats.count("get", "pods");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..200 {
        let url = gw.url().to_string();
        tasks.spawn(async move { Http::new(&url).get("/api/v1/namespaces/small/pods/b").await });
    }
    let mut from_cache = 0;
    while let Some(r) = tasks.join_next().await {
        let r = r.unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.json()["metadata"]["name"], "b");
        from_cache += usize::from(r.source() == Some("cache"));
    }
    // The first arrivals may be forwarded (alone, before the herd shows); the rest wait
    // for the progress watch they share.
    let upstream_gets = stats.count("get", "pods") - gets;
    assert!(
        upstream_gets <= 40,
        "{upstream_gets} of 200 gets forwarded ({from_cache} from the cache)"
    );
    assert_eq!(upstream_gets as usize + from_cache, 200);
}

/// A probe the upstream throttles (API Priority and Fairness's 429, as during a herd) is
/// followed by another, which its reads share, instead of forwarding them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_probe_is_tried_again_not_forwarded() {
    let (sim, gw) = quiet_large().await;
    let admin = admin_of(&gw);
    let stats = sim.handle().stats();
    let (lists, failed) = (stats.lists("pods"), forwarded(&admin, "probe_failed").await);
    let probe_errors = sample(
        &metrics(&admin).await,
        "watchgate_consistency_probes_total",
        &[("resource", "pods"), ("result", "error")],
    );
    sim.handle().faults().throttle_next_list(1);
    let path = "/api/v1/namespaces/small/pods/a";
    let r = Http::new(gw.url()).get(path).await;
    assert_eq!(
        (r.status.as_u16(), r.source()),
        (200, Some("cache")),
        "{}",
        r.text()
    );
    assert_eq!(r.json()["metadata"]["name"], "a");
    assert_eq!(forwarded(&admin, "probe_failed").await, failed);
    assert_eq!(
        sample(
            &metrics(&admin).await,
            "watchgate_consistency_probes_total",
            &[("resource", "pods"), ("result", "error")],
        ),
        probe_errors + 1.0,
        "the throttled probe"
    );
    // The throttled probe is not counted by the simulator (APF rejects it before any
    // handler); the second one is.
    assert_eq!(stats.lists("pods"), lists + 1);

    // Throttled twice: the read is forwarded.
    sim.handle().faults().throttle_next_list(2);
    let r = Http::new(gw.url()).get(path).await;
    assert_forwarded(&r);
    assert_eq!(forwarded(&admin, "probe_failed").await, failed + 1.0);
}

/// The simulator rejects a throttled list as API Priority and Fairness does: 429, a
/// `Retry-After`, and Go's plain-text `http.Error`, not a Status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulators_throttled_list_is_api_priority_and_fairness_rejection() {
    let sim = start_sim_with(cluster_config()).await;
    sim.handle().faults().throttle_next_list(1);
    let r = Http::new(sim.url()).get("/api/v1/pods?limit=1").await;
    assert_eq!(r.status, 429);
    let header = |name: &str| r.headers.get(name).and_then(|v| v.to_str().ok());
    assert_eq!(header("retry-after"), Some("1"));
    assert_eq!(header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(r.text(), "Too many requests, please try again later.\n");
    assert_eq!(
        Http::new(sim.url())
            .get("/api/v1/pods?limit=1")
            .await
            .status,
        200
    );
}

/// Each forward reason has a request that earns it (issue 26, "Say why").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_forward_reason_is_earned_by_its_request() {
    let sim = start_sim_with(cluster_config()).await;
    put_pod(
        sim.handle(),
        "a",
        "web",
        json!({"app": "web"}),
        "n",
        "Running",
    );
    seed_configmaps(sim.handle(), 3);
    let early = support::watch::rv_of(&Http::new(sim.url()).get("/api/v1/pods").await.json());
    for i in 0..3 {
        write_elsewhere(sim.handle(), i);
    }
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    if let Some(policy) = cfg.cache.as_mut() {
        policy.exclude = vec!["secrets".into()];
    }
    let gw = start_gateway_with(cfg).await;
    let admin = admin_of(&gw);
    wait_until_cached(gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    let http = Http::new(gw.url());

    let cases: Vec<(&str, &str, Option<&str>)> = vec![
        ("not_a_read", "/version", None),
        ("pretty", "/api/v1/pods?resourceVersion=0&pretty=true", None),
        ("options", "/api/v1/pods?labelSelector=a%20in", None),
        ("excluded", "/api/v1/secrets?resourceVersion=0", None),
        (
            "not_cacheable",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            None,
        ),
        ("no_route", "/api/v1/pods/web?resourceVersion=0", None),
        (
            "representation",
            "/api/v1/pods?resourceVersion=0",
            Some("application/yaml"),
        ),
        (
            "field_selector",
            "/api/v1/pods?resourceVersion=0&fieldSelector=metadata.labels%3Dx",
            None,
        ),
        (
            "behind",
            "/api/v1/pods?resourceVersion=999999999&resourceVersionMatch=NotOlderThan",
            None,
        ),
        (
            "continue_token",
            "/api/v1/pods?limit=1&continue=garbage",
            None,
        ),
    ];
    for (reason, path, accept) in &cases {
        let before = forwarded(&admin, reason).await;
        let r = match accept {
            Some(a) => {
                http.request(http::Method::GET, path, &[("accept", a)], "")
                    .await
            }
            None => http.get(path).await,
        };
        assert_eq!(r.source(), Some("upstream"), "{path}: {}", r.text());
        assert_eq!(
            forwarded(&admin, reason).await,
            before + 1.0,
            "{path} is forwarded for {reason}"
        );
    }
    // An Exact list at a state older than the cache's first: not in its window.
    let before = forwarded(&admin, "past_state").await;
    let path = format!("/api/v1/pods?resourceVersion={early}&resourceVersionMatch=Exact");
    let r = http.get(&path).await;
    assert_eq!(r.source(), Some("upstream"), "{}", r.text());
    assert_eq!(forwarded(&admin, "past_state").await, before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_reasons_of_the_gateways_configuration() {
    use watchgate::cache::fresh::ConsistentReads;
    let sim = start_sim_with(cluster_config()).await;
    seed_configmaps(sim.handle(), 3);
    let path = "/api/v1/configmaps?resourceVersion=0";

    // No caches at all.
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let admin = admin_of(&gw);
    let before = forwarded(&admin, "no_cache").await;
    assert_eq!(
        Http::new(gw.url()).get(path).await.source(),
        Some("upstream")
    );
    assert_eq!(forwarded(&admin, "no_cache").await, before + 1.0);

    // --consistent-reads=upstream.
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.consistent_reads = ConsistentReads::Upstream;
    let gw = start_gateway_with(cfg).await;
    let admin = admin_of(&gw);
    wait_until_cached(gw.url(), path, |_| true).await;
    let before = forwarded(&admin, "consistent_reads_upstream").await;
    let r = Http::new(gw.url()).get("/api/v1/configmaps").await;
    assert_eq!(r.source(), Some("upstream"));
    assert_eq!(
        forwarded(&admin, "consistent_reads_upstream").await,
        before + 1.0
    );

    // A byte budget no cache fits.
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.cache_budget.max_resource_bytes = 16;
    let gw = start_gateway_with(cfg).await;
    let admin = admin_of(&gw);
    let http = Http::new(gw.url());
    // The first request waits for the sync, which drops the cache: over budget. (On a
    // loaded machine the sync may outlast the first request's wait: the drop is waited
    // for, so that the next request meets it.)
    let first = http.get(path).await;
    assert_eq!(first.source(), Some("upstream"));
    let registry = gw.handle().cache().unwrap().clone();
    support::wait::wait_until(
        "the cache is dropped for its size",
        support::EVENT_TIMEOUT,
        || {
            let registry = registry.clone();
            async move { !registry.dropped().is_empty() }
        },
    )
    .await;
    let before = forwarded(&admin, "over_budget").await;
    assert_eq!(http.get(path).await.source(), Some("upstream"));
    assert_eq!(forwarded(&admin, "over_budget").await, before + 1.0);

    // The upstream gone: the probe of a consistent read fails.
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(sim.url()).unwrap()).await;
    let admin = admin_of(&gw);
    wait_until_cached(gw.url(), path, |_| true).await;
    let before = forwarded(&admin, "probe_failed").await;
    sim.kill().await;
    let r = Http::new(gw.url()).get("/api/v1/configmaps").await;
    assert_eq!((r.status.as_u16(), r.source()), (503, Some("gateway")));
    assert_eq!(forwarded(&admin, "probe_failed").await, before + 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_security_leaves_unauthorized_is_forwarded_for_that_reason() {
    use support::secure::{Secure, ALICE};
    use watchgate::auth::SecurityConfig;
    // With --consistent-reads=upstream, the authz layer does not review consistent reads
    // for the cache (the upstream authorizes them): they reach the router unmarked.
    let s = Secure::start_configured(
        watchgate::sim::auth::demo_policy(),
        SecurityConfig::default(),
        |cfg| cfg.consistent_reads = watchgate::cache::fresh::ConsistentReads::Upstream,
    )
    .await;
    let admin = admin_of(&s.gateway);
    let before = forwarded(&admin, "not_authorized").await;
    let r = s
        .http(Some(ALICE))
        .get("/api/v1/namespaces/default/configmaps")
        .await;
    assert_forwarded(&r);
    assert_eq!(forwarded(&admin, "not_authorized").await, before + 1.0);
}

/// An upstream replaced behind the gateway (etcd restored from a backup, an endpoint now
/// serving a rebuilt cluster): its resourceVersions start again below the cache's. A
/// consistent read is then never answered from the cache built on the old one (issue 27).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_read_is_never_answered_by_a_cache_ahead_of_its_upstream() {
    let old = start_sim_with(cluster_config()).await;
    seed_configmaps(old.handle(), 50);
    let addr: std::net::SocketAddr = old.url().trim_start_matches("http://").parse().unwrap();
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(old.url()).unwrap()).await;
    let admin = admin_of(&gw);
    let path = "/api/v1/namespaces/default/configmaps";
    wait_until_cached(gw.url(), &format!("{path}?resourceVersion=0"), |_| true).await;
    let id = identity(&old).await;
    old.kill().await;

    // The cluster restored on the same address, with fewer writes behind it.
    let new = restored_cluster(addr, id).await;
    seed_configmaps(new.handle(), 2);
    let before = forwarded(&admin, "upstream_went_back").await;
    let direct = Http::new(new.url()).get(path).await;
    let r = Http::new(gw.url()).get(path).await;
    assert_forwarded(&r);
    assert_eq!(r.json()["items"], direct.json()["items"]);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 2);
    assert_eq!(forwarded(&admin, "upstream_went_back").await, before + 1.0);
}

/// Issue 27 item 2: an upstream whose resourceVersions went back (etcd restored, another
/// cluster behind the same address) has every cache dropped and rebuilt, as
/// kube-apiserver's would be after a restore. A watch served from the old cache ends with
/// an ERROR 410 Expired (its client relists), and from then on nothing the gateway
/// answers holds an object of the old cluster: every cache is the new cluster's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_went_back_rebuilds_every_cache_and_ends_its_watches_with_410() {
    let old = start_sim_with(cluster_config()).await;
    seed_configmaps(old.handle(), 50);
    for i in 0..5 {
        put_pod(
            old.handle(),
            "default",
            &format!("old-{i}"),
            json!({}),
            "n1",
            "Running",
        );
    }
    let addr: std::net::SocketAddr = old.url().trim_start_matches("http://").parse().unwrap();
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(old.url()).unwrap()).await;
    let admin = admin_of(&gw);
    let cms = "/api/v1/namespaces/default/configmaps";
    let pods = "/api/v1/namespaces/default/pods";
    wait_until_cached(gw.url(), &format!("{cms}?resourceVersion=0"), |_| true).await;
    wait_until_cached(gw.url(), &format!("{pods}?resourceVersion=0"), |_| true).await;
    let mut cm_watch = open_ok(gw.url(), &format!("{cms}?watch=true&resourceVersion=0")).await;
    cm_watch.assert_from_cache();
    assert_eq!(cm_watch.take(50, "the old configmaps").await.len(), 50);
    let mut pod_watch = open_ok(gw.url(), &format!("{pods}?watch=true&resourceVersion=0")).await;
    pod_watch.assert_from_cache();
    pod_watch.take(5, "the old pods").await;
    let id = identity(&old).await;
    old.kill().await;

    // The cluster restored on the same address, with fewer writes behind it.
    let new = restored_cluster(addr, id).await;
    seed_configmaps(new.handle(), 2);
    put_pod(new.handle(), "default", "new-0", json!({}), "n1", "Running");
    // The registry's own count: the metrics recorder is the process's, shared by tests.
    let registry = gw.handle().cache().unwrap().clone();
    let resets = || registry.resets();
    assert_eq!(resets(), 0);

    // The consistent read that notices is forwarded, and resets every cache.
    let r = Http::new(gw.url()).get(cms).await;
    assert_forwarded(&r);
    assert_eq!(r.json()["items"].as_array().unwrap().len(), 2);
    assert_eq!(resets(), 1, "one reset for every cache");
    assert!(
        sample(
            &metrics(&admin).await,
            "watchgate_upstream_resets_total",
            &[]
        ) >= 1.0
    );

    // Both watches (the noticing resource's and the other's) end with 410 Expired.
    for w in [&mut cm_watch, &mut pod_watch] {
        let e = w.next("the ERROR event of the reset").await;
        assert_eq!(e.ty(), "ERROR", "{e:?}");
        assert_eq!(e.object()["code"], 410, "{e:?}");
        assert_eq!(e.object()["reason"], "Expired", "{e:?}");
        w.expect_end(Duration::from_secs(5)).await;
    }

    // The new caches are the new cluster's: lists and watches from them equal its own.
    for path in [cms, pods] {
        let cached =
            wait_until_cached(gw.url(), &format!("{path}?resourceVersion=0"), |_| true).await;
        let direct = Http::new(new.url())
            .get(&format!("{path}?resourceVersion=0"))
            .await;
        assert_eq!(cached.json()["items"], direct.json()["items"], "{path}");
        assert_eq!(
            cached.json()["metadata"]["resourceVersion"],
            direct.json()["metadata"]["resourceVersion"],
            "{path}"
        );
        let q = format!("{path}?resourceVersion=0&{WATCH_LIST}");
        let mut from_sim = open_ok(new.url(), &q).await;
        let mut from_gw = open_ok(gw.url(), &q).await;
        from_gw.assert_from_cache();
        let (sim_events, sim_end) = from_sim.initial_events().await;
        let (gw_events, gw_end) = from_gw.initial_events().await;
        assert_same_events(path, &sim_events, &gw_events);
        assert_eq!(sim_end.rv(), gw_end.rv(), "{path}");
    }
    let cached_pods = Http::new(gw.url())
        .get(&format!("{pods}?resourceVersion=0"))
        .await;
    assert_eq!(cached_pods.json()["items"].as_array().unwrap().len(), 1);
    assert_eq!(resets(), 1, "the new caches do not reset again");
}
