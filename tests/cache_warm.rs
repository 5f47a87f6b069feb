//! Warm before the clients come (issue 26, item 3): the gateway records in its state file
//! (`--cache-state-file`) each resource whose cache synced and starts them at its next
//! start before any client asks. A resource the upstream no longer serves, or that does not
//! fit the byte budget, is forgotten; an excluded one is never recorded.

mod support;

use std::path::Path;

use serde_json::json;
use support::servers::{start_gateway_with, start_sim, GatewayServer};
use support::wait::wait_until;
use support::watch::{put_object, resource};
use support::{Http, EVENT_TIMEOUT};
use watchgate::cache::registry::CachePolicy;
use watchgate::cache::warm::{self, Gvr, WarmConfig};
use watchgate::config::GatewayConfig;

fn config(upstream: &str, state_file: &Path, exclude: &[&str]) -> GatewayConfig {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec![],
        exclude: exclude.iter().map(|s| s.to_string()).collect(),
    });
    cfg.cache_state = Some(WarmConfig {
        state_file: state_file.to_path_buf(),
    });
    cfg
}

/// Waits until the gateway's own cache of `resource` (core v1) has synced.
async fn wait_synced(gw: &GatewayServer, resource: &str) {
    let registry = gw.handle().cache().unwrap();
    wait_until(
        &format!("the {resource} cache syncs"),
        EVENT_TIMEOUT,
        || async move {
            registry
                .get("", "v1", resource)
                .is_some_and(|c| c.is_synced())
        },
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

fn configmap(sim: &watchgate::sim::SimHandle, name: &str) {
    put_object(
        sim,
        resource("", "v1", "configmaps"),
        "default",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "default"},
               "data": {"k": "v"}}),
    );
}

fn write_state(path: &Path, resources: &[Gvr]) {
    let text = json!({"format": 1, "resources": resources}).to_string();
    std::fs::write(path, text).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_gateway_starts_the_caches_of_its_state_file_before_any_client_asks() {
    let sim = start_sim().await;
    configmap(sim.handle(), "c1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");

    // First run: a client's read starts the configmaps cache; once it synced, the file
    // records it.
    let gw = start_gateway_with(config(sim.url(), &path, &[])).await;
    let resp = Http::new(gw.url())
        .get("/api/v1/namespaces/default/configmaps?resourceVersion=0")
        .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let configmaps = Gvr::new("", "v1", "configmaps");
    wait_for_file(&path, std::slice::from_ref(&configmaps)).await;
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        json!({"format": 1, "resources": [{"group": "", "version": "v1", "resource": "configmaps"}]}),
        "{text}"
    );
    assert!(
        !warm::temp_path(&path).exists(),
        "the temporary file is renamed over the state file"
    );
    gw.into_handle().shutdown().await;

    // Second run. No client request is sent to this gateway: it starts the cache itself,
    // and the upstream sees its list (or watch-list).
    let stats = sim.handle().stats();
    let upstream_reads = || stats.lists("configmaps") + stats.watches("configmaps");
    let before = upstream_reads();
    let gw = start_gateway_with(config(sim.url(), &path, &[])).await;
    wait_synced(&gw, "configmaps").await;
    assert!(
        upstream_reads() > before,
        "no upstream list or watch of configmaps: {}",
        stats.to_json()
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
    let gw = start_gateway_with(config(sim.url(), &path, &["secrets"])).await;
    // secrets is excluded (`--no-cache`): dropped when the file is read. gizmos: discovery
    // finds no such group, so it is dropped rather than tried at every start.
    wait_for_file(&path, std::slice::from_ref(&configmaps)).await;
    wait_synced(&gw, "configmaps").await;
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
async fn a_state_file_resource_over_the_byte_budget_is_forgotten() {
    let sim = start_sim().await;
    configmap(sim.handle(), "c1");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");
    write_state(&path, &[Gvr::new("", "v1", "configmaps")]);
    let mut cfg = config(sim.url(), &path, &[]);
    cfg.cache_budget.max_resource_bytes = 1;
    let _gw = start_gateway_with(cfg).await;
    // Dropped for its size: forgotten, so that the next start does not list it for nothing.
    wait_for_file(&path, &[]).await;
}
