//! Warm before the clients come (issue 26, item 3): the gateway records in its state file
//! (`--cache-state-file`) each resource whose cache synced, starts them at its next start
//! before any client asks, and `/readyz` waits for them, for the warm-up at most. A resource
//! the upstream no longer serves, or that does not fit the byte budget, is forgotten; an
//! excluded one is never recorded.

mod support;

use std::path::Path;
use std::time::Duration;

use http::{Response, StatusCode};
use serde_json::json;
use support::objects::configmap;
use support::servers::{start_gateway_with, start_sim, GatewayServer};
use support::stub::{handler, json_response, pods_only_discovery, Stub};
use support::wait::{wait_for, wait_until};
use support::watch::{put_object, resource};
use support::{Http, EVENT_TIMEOUT};
use watchgate::cache::registry::CachePolicy;
use watchgate::cache::warm::{self, Gvr, WarmConfig};
use watchgate::config::GatewayConfig;

fn config(upstream: &str, state_file: &Path, exclude: &[&str], warmup: Duration) -> GatewayConfig {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec![],
        exclude: exclude.iter().map(|s| s.to_string()).collect(),
    });
    cfg.cache_state = Some(WarmConfig {
        state_file: state_file.to_path_buf(),
        timeout: warmup,
    });
    cfg
}

fn admin(gw: &GatewayServer) -> Http {
    Http::new(&format!("http://{}", gw.handle().admin_addr()))
}

async fn wait_ready(gw: &GatewayServer) {
    let admin = admin(gw);
    // The verbose answer, so that a timeout names the check that held readiness.
    wait_for(
        "/readyz answers 200",
        EVENT_TIMEOUT,
        || {
            let admin = admin.clone();
            async move {
                let r = admin.get("/readyz?verbose").await;
                (r.status.as_u16(), r.text())
            }
        },
        |(status, _)| *status == 200,
    )
    .await;
}

/// Waits until the state file holds exactly `want`.
async fn wait_for_file(path: &Path, want: &[Gvr]) {
    wait_until(
        &format!("the state file holds {want:?}"),
        EVENT_TIMEOUT,
        || async move { warm::read(path).map(|r| r == want).unwrap_or(false) },
    )
    .await;
}

fn put_configmap(sim: &watchgate::sim::SimHandle, name: &str) -> u64 {
    let cm = configmap("default", name).data(json!({"k": "v"}));
    put_object(sim, resource("", "v1", "configmaps"), "default", cm.build())
}

fn write_state(path: &Path, resources: &[Gvr]) {
    let text = json!({"format": 1, "resources": resources}).to_string();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_starts_the_caches_of_its_state_file_before_any_client_asks() {
    let sim = start_sim().await;
    let c1_rv = put_configmap(sim.handle(), "c1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");

    // First run: a client's read starts the configmaps cache; once it synced, the file
    // records it.
    let gw = start_gateway_with(config(sim.url(), &path, &[], Duration::from_secs(60))).await;
    let resp = Http::new(gw.url())
        .get("/api/v1/namespaces/default/configmaps?resourceVersion=0")
        .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let configmaps = Gvr::new("", "v1", "configmaps");
    wait_for_file(&path, std::slice::from_ref(&configmaps)).await;
    // The cluster is written once the caches' identity is known: with the cache's record
    // if it was by then, else with the next refresh (warm::PROGRESS_EVERY).
    let path_ref = &path;
    wait_until(
        "the state file names the cluster",
        EVENT_TIMEOUT,
        || async move { warm::read_cluster(path_ref).is_ok_and(|c| c.is_some()) },
    )
    .await;
    // With the resourceVersion its cache had reached (docs/cache.md, "Resuming after a
    // restart"): the state it synced at, or a newer one.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut saved = serde_json::from_str::<serde_json::Value>(&text).unwrap();
    let rv = saved["resources"][0]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion")
        .unwrap_or_else(|| panic!("no resourceVersion: {text}"));
    assert!(
        rv.as_str().unwrap().parse::<u64>().unwrap() >= c1_rv,
        "{text}"
    );
    // And the cluster those resourceVersions belong to: its kube-system uid.
    let cluster = saved.as_object_mut().unwrap().remove("cluster");
    let kube_system = Http::new(sim.url())
        .get("/api/v1/namespaces/kube-system")
        .await
        .json();
    assert_eq!(
        cluster,
        Some(kube_system["metadata"]["uid"].clone()),
        "{text}"
    );
    assert_eq!(
        saved,
        json!({"format": 1, "resources": [{"group": "", "version": "v1", "resource": "configmaps"}]}),
        "{text}"
    );
    assert!(
        !warm::temp_path(&path).exists(),
        "the temporary file is renamed over the state file"
    );
    gw.into_handle().shutdown().await;

    // Second run, with every upstream answer taking 1.5 s: the cache cannot have synced
    // when /readyz is first asked. No client request is sent to this gateway.
    let stats = sim.handle().stats();
    let upstream_reads = || stats.lists("configmaps") + stats.watches("configmaps");
    let before = upstream_reads();
    sim.handle()
        .faults()
        .set_latency(Duration::from_millis(1500));
    let gw = start_gateway_with(config(sim.url(), &path, &[], Duration::from_secs(60))).await;
    let admin = admin(&gw);
    let resp = admin.get("/readyz?verbose").await;
    assert_eq!(resp.status, 500, "{}", resp.text());
    assert!(
        resp.text().contains("[-]warm-configmaps.v1 failed: not "),
        "{}",
        resp.text()
    );

    sim.handle().faults().set_latency(Duration::ZERO);
    wait_ready(&gw).await;
    // Ready means synced, and the cache was started by the gateway itself: the upstream
    // saw its list (or watch-list) without any client having asked.
    let cache = gw
        .handle()
        .cache()
        .unwrap()
        .get("", "v1", "configmaps")
        .expect("the state file's resource was started at start-up");
    assert!(cache.is_synced(), "/readyz passed before the cache synced");
    assert!(
        upstream_reads() > before,
        "no upstream list or watch of configmaps: {}",
        stats.to_json()
    );
    let text = admin.get("/readyz?verbose").await.text();
    assert_eq!(
        text,
        "[+]ping ok\n[+]shutdown ok\n[+]upstream ok\n[+]warm-configmaps.v1 ok\n\
         [+]consistency-configmaps.v1 ok (not checked yet)\nreadyz check passed\n"
    );
    // The first client is answered from the cache.
    let resp = Http::new(gw.url())
        .get("/api/v1/namespaces/default/configmaps?resourceVersion=0")
        .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.source(), Some("cache"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_file_forgets_what_the_upstream_does_not_serve_and_never_holds_excluded_resources(
) {
    let sim = start_sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");
    let configmaps = Gvr::new("", "v1", "configmaps");
    let gizmos = Gvr::new("nothing.example", "v1", "gizmos");
    write_state(
        &path,
        &[
            configmaps.clone(),
            Gvr::new("", "v1", "secrets"),
            gizmos.clone(),
        ],
    );
    let gw = start_gateway_with(config(
        sim.url(),
        &path,
        &["secrets"],
        Duration::from_secs(60),
    ))
    .await;
    // secrets is excluded (`--no-cache`): dropped when the file is read. gizmos: discovery
    // finds no such group, so it is dropped rather than tried at every start.
    wait_for_file(&path, std::slice::from_ref(&configmaps)).await;
    wait_ready(&gw).await;
    let text = admin(&gw).get("/readyz?verbose").await.text();
    assert_eq!(
        text,
        "[+]ping ok\n[+]shutdown ok\n[+]upstream ok\n\
         [+]warm-configmaps.v1 ok\n\
         [+]warm-gizmos.v1.nothing.example ok (not served upstream; dropped from the state file)\n\
         [+]consistency-configmaps.v1 ok (not checked yet)\n\
         readyz check passed\n"
    );
    let stats = sim.handle().stats();
    assert_eq!(
        stats.lists("secrets") + stats.watches("secrets"),
        0,
        "an excluded resource of the state file was started: {}",
        stats.to_json()
    );

    // A client reads secrets (forwarded, never cached), then namespaces (cached): once the
    // file holds namespaces, it would hold secrets too if excluded reads were recorded.
    let http = Http::new(gw.url());
    let resp = http.get("/api/v1/secrets?resourceVersion=0").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.source(), Some("upstream"));
    let resp = http.get("/api/v1/namespaces?resourceVersion=0").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    wait_for_file(&path, &[configmaps, Gvr::new("", "v1", "namespaces")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_resource_over_the_byte_budget_is_forgotten_and_does_not_hold_readiness() {
    let sim = start_sim().await;
    put_configmap(sim.handle(), "c1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");
    write_state(&path, &[Gvr::new("", "v1", "configmaps")]);
    let mut cfg = config(sim.url(), &path, &[], Duration::from_secs(60));
    cfg.cache_budget.max_resource_bytes = 1;
    let gw = start_gateway_with(cfg).await;
    wait_for_file(&path, &[]).await;
    wait_ready(&gw).await;
    let text = admin(&gw).get("/readyz?verbose").await.text();
    assert!(
        text.contains("[+]warm-configmaps.v1 ok (not cached: its cache would hold ")
            && text.contains("over --cache-max-resource-bytes=1; its requests are forwarded)\n"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_resource_that_cannot_sync_holds_readiness_for_the_warm_up_only() {
    // An apiserver that serves pods in discovery but never answers their list or watch.
    let stub = Stub::start(handler(|req| async move {
        match req.uri().path() {
            "/version" => json_response(StatusCode::OK, json!({"major": "1", "minor": "36"})),
            "/api/v1" => pods_only_discovery(),
            _ => {
                std::future::pending::<()>().await;
                Response::new(watchgate::body::empty())
            }
        }
    }))
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");
    write_state(&path, &[Gvr::new("", "v1", "pods")]);
    let warmup = Duration::from_secs(3);
    let started = tokio::time::Instant::now();
    let gw = start_gateway_with(config(&stub.url(), &path, &[], warmup)).await;
    let admin = admin(&gw);
    let resp = admin.get("/readyz?verbose").await;
    assert_eq!(resp.status, 500, "{}", resp.text());
    assert!(
        resp.text().contains("[-]warm-pods.v1 failed: not "),
        "{}",
        resp.text()
    );

    wait_ready(&gw).await;
    assert!(
        started.elapsed() >= warmup,
        "ready after {:?}, before the end of the warm-up",
        started.elapsed()
    );
    let text = admin.get("/readyz?verbose").await.text();
    assert!(
        text.contains(
            "[+]warm-pods.v1 ok (not synced, but the 3s warm-up is over; its requests are forwarded until it syncs)\n"
        ),
        "{text}"
    );
    // Never synced, so never recorded as cached; the entry stays for the next start.
    assert_eq!(warm::read(&path).unwrap(), [Gvr::new("", "v1", "pods")]);
}
