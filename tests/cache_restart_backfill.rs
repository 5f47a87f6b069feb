//! Resuming after a restart (issue 26, item 1): the state file (`--cache-state-file`)
//! records the resourceVersion each cache had reached, refreshed while the gateway runs;
//! a gateway started on it reads the state exactly there and watches from there, so that
//! a client reconnecting with the resourceVersion it last saw gets the events it missed
//! while the gateway was down, from the cache, in order, without a 410 and a relist.
//! When the upstream no longer has that resourceVersion (compacted), the cache syncs as
//! usual and such a client gets 410, as before (docs/cache.md, "Resuming after a
//! restart"). The file names the cluster its resourceVersions belong to (`kube-system`'s
//! uid): another cluster behind the same address is not resumed from, and such a client
//! gets 410 rather than the other cluster's events on top of the old one's objects.
//!
//! A SIGKILL is stood for by copying the state file while the first gateway runs (what a
//! kill would leave: the last periodic write) and starting the second gateway on the copy;
//! the first one's drain then writes only its own file.

mod support;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};
use support::objects::configmap;
use support::servers::{
    cluster_config, start_gateway_with, start_sim, start_sim_with, GatewayServer, SimServer,
};
use support::wait::wait_until;
use support::watch::{delete_object, open_ok, put_object, resource, store_put, Watch};
use support::EVENT_TIMEOUT;
use watchgate::cache::registry::CachePolicy;
use watchgate::cache::warm::{self, Gvr, WarmConfig};
use watchgate::config::GatewayConfig;

const PATH: &str = "/api/v1/namespaces/default/configmaps";

fn config(upstream: &str, state_file: &Path) -> GatewayConfig {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy::default());
    cfg.cache_state = Some(WarmConfig {
        state_file: state_file.to_path_buf(),
        timeout: Duration::from_secs(60),
    });
    cfg
}

fn put_configmap(sim: &SimServer, name: &str, value: &str) -> u64 {
    let cm = configmap("default", name).data(json!({"k": value}));
    put_object(
        sim.handle(),
        resource("", "v1", "configmaps"),
        "default",
        cm.build(),
    )
}

fn configmaps() -> Gvr {
    Gvr::new("", "v1", "configmaps")
}

/// The cluster's identity: its `kube-system` namespace's uid.
async fn cluster_uid(sim: &SimServer) -> String {
    let ns = support::Http::new(sim.url())
        .get("/api/v1/namespaces/kube-system")
        .await
        .json();
    ns["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The next event of `w` that is not a BOOKMARK.
async fn next_change(w: &mut Watch, desc: &str) -> support::watch::Event {
    loop {
        let ev = w.next(desc).await;
        if ev.ty() != "BOOKMARK" {
            return ev;
        }
    }
}

/// The first run: a gateway with the state file at `path`, a watcher that saw every
/// write up to N (the returned RV) through it, and the state file as a SIGKILL would
/// leave it once its periodic write has recorded `recorded` (copied to `killed`).
/// Returns N and the recorded resourceVersion.
async fn first_run(sim: &SimServer, path: &Path, killed: &Path) -> (GatewayServer, u64, u64) {
    put_configmap(sim, "a", "1");
    let gw = start_gateway_with(config(sim.url(), path)).await;
    let mut w = open_ok(gw.url(), &format!("{PATH}?watch=true&resourceVersion=0")).await;
    w.assert_from_cache();
    let ev = next_change(&mut w, "the initial ADDED of a").await;
    assert_eq!(ev.typed(), ("ADDED".into(), "a".into()));

    // A write the watcher sees, which the state file then records as its cache's RV: the
    // periodic write, not a drain's (warm::PROGRESS_EVERY, then the debounce).
    let recorded = put_configmap(sim, "b", "1");
    let ev = next_change(&mut w, "b added").await;
    assert_eq!(
        (ev.typed(), ev.rv()),
        (("ADDED".into(), "b".into()), recorded)
    );
    wait_until(
        "the state file records the cache's resourceVersion",
        EVENT_TIMEOUT,
        || async move {
            warm::read_entries(path).is_ok_and(|e| e == [(configmaps(), Some(recorded))])
        },
    )
    .await;
    std::fs::copy(path, killed).unwrap();
    // The resourceVersions are this cluster's, and the file says so.
    assert_eq!(
        warm::read_cluster(killed).unwrap(),
        Some(cluster_uid(sim).await),
        "{}",
        std::fs::read_to_string(killed).unwrap()
    );

    // One more write the watcher sees after that: it reconnects from a resourceVersion
    // newer than the recorded one, as most clients of a gateway that records every few
    // seconds do.
    let seen = put_configmap(sim, "a", "2");
    let ev = next_change(&mut w, "a modified").await;
    assert_eq!(
        (ev.typed(), ev.rv()),
        (("MODIFIED".into(), "a".into()), seen)
    );
    (gw, seen, recorded)
}

/// Writes made while the gateway is down; their `(type, name, rv)`.
fn writes_while_down(sim: &SimServer) -> Vec<(String, String, u64)> {
    let c = put_configmap(sim, "c", "1");
    let b = put_configmap(sim, "b", "2");
    let a = delete_object(
        sim.handle(),
        resource("", "v1", "configmaps"),
        "default",
        "a",
    );
    vec![
        ("ADDED".into(), "c".into(), c),
        ("MODIFIED".into(), "b".into(), b),
        ("DELETED".into(), "a".into(), a),
    ]
}

fn paths() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache-state.json");
    let killed = dir.path().join("killed-state.json");
    (dir, path, killed)
}

/// Writes while the gateway is down, starts it again on the state file `killed`, and
/// resumes a watch from `seen`: it replays exactly the missed writes from the backfilled
/// cache, which resumed once and was not refused as another cluster's.
async fn restart_and_resume(sim: &SimServer, killed: &Path, seen: u64) -> (GatewayServer, Watch) {
    let missed = writes_while_down(sim);
    let gw = start_gateway_with(config(sim.url(), killed)).await;
    // The client reconnects with the last resourceVersion it saw, as client-go does.
    let mut w = open_ok(
        gw.url(),
        &format!("{PATH}?watch=true&allowWatchBookmarks=true&resourceVersion={seen}"),
    )
    .await;
    w.assert_from_cache();
    let mut got = Vec::new();
    for _ in &missed {
        let ev = next_change(&mut w, "a missed event").await;
        got.push((ev.ty().to_string(), ev.name().to_string(), ev.rv()));
    }
    assert_eq!(got, missed, "exactly the missed events, in order");
    let cache = gw
        .handle()
        .cache()
        .unwrap()
        .get("", "v1", "configmaps")
        .unwrap();
    assert_eq!(cache.stats.backfills.load(Ordering::Relaxed), 1);
    assert_eq!(
        cache.stats.backfills_other_cluster.load(Ordering::Relaxed),
        0
    );
    (gw, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_resumes_across_a_restart_with_the_events_it_missed_from_the_cache() {
    let sim = start_sim().await;
    let (_dir, path, killed) = paths();
    let (gw, seen, recorded) = first_run(&sim, &path, &killed).await;
    assert!(recorded < seen);
    gw.into_handle().shutdown().await;

    // Reset before the writes made while it is down: those are not lists or watches.
    let stats = sim.handle().stats();
    stats.reset();
    let (gw, mut w) = restart_and_resume(&sim, &killed, seen).await;
    w.expect_quiet(Duration::from_millis(300)).await;

    // The cache was built from the recorded resourceVersion: an Exact list there and a
    // watch from it, no consistent list or watch-list.
    let cache = gw
        .handle()
        .cache()
        .unwrap()
        .get("", "v1", "configmaps")
        .unwrap();
    assert_eq!(cache.stats.backfill_fallbacks.load(Ordering::Relaxed), 0);
    let shapes = stats.shapes_json();
    let lists = &shapes["list"]["configmaps"];
    assert_eq!(lists["rv=N,exact,limit"], json!(1), "{shapes}");
    let watches = &shapes["watch"]["configmaps"];
    assert_eq!(watches["rv=N"], json!(1), "{shapes}");
    assert_eq!(watches.get("watch-list"), None, "{shapes}");
    assert_eq!(lists.get("consistent,limit"), None, "{shapes}");

    // Later writes follow on the same stream, once.
    let d = put_configmap(&sim, "d", "1");
    let ev = next_change(&mut w, "d added").await;
    assert_eq!((ev.typed(), ev.rv()), (("ADDED".into(), "d".into()), d));

    // A consistent read sees every write.
    let resp = support::Http::new(gw.url()).get(PATH).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(names(&resp.body), ["b=2", "c=1", "d=1"]);
}

/// `name=data.k` of a list's items, sorted.
fn names(body: &[u8]) -> Vec<String> {
    let list: Value = serde_json::from_slice(body).unwrap();
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}={}",
                o["metadata"]["name"].as_str().unwrap(),
                o["data"]["k"].as_str().unwrap()
            )
        })
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consistent_read_waiting_for_the_backfill_is_not_answered_by_its_past_state() {
    let sim = start_sim().await;
    let (_dir, path, killed) = paths();
    let (gw, _seen, _recorded) = first_run(&sim, &path, &killed).await;
    gw.into_handle().shutdown().await;
    writes_while_down(&sim);
    // Every upstream answer slowed, so that the read below arrives before the cache's
    // first request is sent (discovery alone takes longer). The state of an ordinary
    // first sync would answer it with no probe (docs/consistency.md, step 0); the state at
    // the recorded resourceVersion lacks the writes made while the gateway was down.
    sim.handle()
        .faults()
        .set_latency(Duration::from_millis(200));
    let gw = start_gateway_with(config(sim.url(), &killed)).await;
    let resp = support::Http::new(gw.url()).get(PATH).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(names(&resp.body), ["b=2", "c=1"]);
    let cache = gw
        .handle()
        .cache()
        .unwrap()
        .get("", "v1", "configmaps")
        .unwrap();
    assert_eq!(cache.stats.backfills.load(Ordering::Relaxed), 1);
    let f = &cache.fresh.counters;
    assert_eq!(
        f.synced.load(Ordering::Relaxed),
        0,
        "answered as if the backfill were a consistent read"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_resume_point_syncs_as_usual_and_the_watcher_gets_410() {
    let sim = start_sim().await;
    let (_dir, path, killed) = paths();
    let (gw, seen, _recorded) = first_run(&sim, &path, &killed).await;
    gw.into_handle().shutdown().await;

    writes_while_down(&sim);
    // The upstream compacts past everything the first run saw.
    sim.handle().store().compact_now();
    let gw = start_gateway_with(config(sim.url(), &killed)).await;
    let mut w = open_ok(
        gw.url(),
        &format!("{PATH}?watch=true&resourceVersion={seen}"),
    )
    .await;
    w.assert_from_cache();
    let ev = w.next("the 410").await;
    assert_eq!(ev.ty(), "ERROR", "{ev:?}");
    assert_eq!(ev.object()["code"], json!(410), "{ev:?}");
    let cache = gw
        .handle()
        .cache()
        .unwrap()
        .get("", "v1", "configmaps")
        .unwrap();
    assert_eq!(cache.stats.backfills.load(Ordering::Relaxed), 0);
    assert_eq!(cache.stats.backfill_fallbacks.load(Ordering::Relaxed), 1);
    // The relist is answered by the cache's ordinary sync.
    let resp = support::Http::new(gw.url())
        .get(&format!("{PATH}?resourceVersion=0"))
        .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.source(), Some("cache"));
}

/// The gateway restarted with its state file in front of the same cluster as before,
/// its `kube-system` namespace gone (no identity to read, or none the gateway may read):
/// the file's uid cannot be checked, and the cache resumes as a gateway whose file names
/// no cluster would (a 410 or failure would still fall back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_that_cannot_be_read_resumes_as_before_and_a_later_other_one_rebuilds() {
    let sim = start_sim().await;
    let (_dir, path, killed) = paths();
    let (gw, seen, _recorded) = first_run(&sim, &path, &killed).await;
    gw.into_handle().shutdown().await;
    let uid = cluster_uid(&sim).await;
    delete_object(
        sim.handle(),
        resource("", "v1", "namespaces"),
        "",
        "kube-system",
    );
    let (gw, mut w) = restart_and_resume(&sim, &killed, seen).await;
    // Nothing known contradicts the file's cluster: it is kept.
    gw.handle().cache().unwrap().save_state_file().await;
    assert_eq!(warm::read_cluster(&killed).unwrap(), Some(uid));

    // The caches resumed as the file's cluster's: once the identity can be read and is
    // another one (the cluster had been replaced), every cache is rebuilt and the watch
    // ends with 410, as for a cluster replaced under a running gateway.
    store_put(
        sim.handle().store(),
        resource("", "v1", "namespaces"),
        "",
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": "kube-system", "uid": "another-cluster"}}),
    );
    let registry = gw.handle().cache().unwrap();
    assert_eq!(registry.resets(), 0);
    // The reflector's stream breaks; it reads the identity before it resumes.
    sim.handle().faults().drop_watches_now();
    let ev = w.next("the 410 of the rebuild").await;
    assert_eq!(ev.ty(), "ERROR", "{ev:?}");
    assert_eq!(ev.object()["code"], json!(410), "{ev:?}");
    assert_eq!(registry.resets(), 1);
}

/// A file written by a gateway that did not record the cluster: its resourceVersions
/// are resumed from as before, and the file names the cluster from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_file_that_names_no_cluster_is_resumed_from_as_before() {
    let sim = start_sim().await;
    let (_dir, path, killed) = paths();
    let (gw, seen, _recorded) = first_run(&sim, &path, &killed).await;
    gw.into_handle().shutdown().await;
    let mut old: Value = serde_json::from_slice(&std::fs::read(&killed).unwrap()).unwrap();
    old.as_object_mut().unwrap().remove("cluster").unwrap();
    std::fs::write(&killed, serde_json::to_vec(&old).unwrap()).unwrap();
    assert_eq!(warm::read_cluster(&killed).unwrap(), None);

    let (gw, _watch) = restart_and_resume(&sim, &killed, seen).await;
    gw.handle().cache().unwrap().save_state_file().await;
    assert_eq!(
        warm::read_cluster(&killed).unwrap(),
        Some(cluster_uid(&sim).await)
    );
}

/// The cluster behind the gateway's address was rebuilt while the gateway was down: a
/// new cluster (another `kube-system` uid) whose resourceVersions went past the ones the
/// old cluster's clients saw. The state at the recorded resourceVersion exists there, but
/// it is the new cluster's: resuming from it would send a client that resumes from the
/// old cluster's resourceVersion the new cluster's events on top of the old one's
/// objects. No cache resumes; each syncs as usual (no reset: the new process served
/// nothing of the old cluster), the client gets 410 and relists, and the file then holds
/// the new cluster's uid and resourceVersions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_cluster_behind_the_address_is_not_resumed_from_and_the_watcher_gets_410() {
    let old = start_sim().await;
    let (_dir, path, killed) = paths();
    let (gw, seen, recorded) = first_run(&old, &path, &killed).await;
    gw.into_handle().shutdown().await;
    let old_uid = cluster_uid(&old).await;
    let addr: std::net::SocketAddr = old.url().trim_start_matches("http://").parse().unwrap();
    old.kill().await;

    let new = start_sim_with(watchgate::sim::SimConfig {
        addr,
        ..cluster_config()
    })
    .await;
    let new_uid = cluster_uid(&new).await;
    assert_ne!(new_uid, old_uid);
    // More writes than the old cluster had: its history covers the recorded
    // resourceVersion (an Exact list there succeeds) and its state is past the client's.
    let mut now = 0;
    for i in 0.. {
        now = put_configmap(&new, &format!("new-{i}"), "1");
        if now > seen + 3 {
            break;
        }
    }
    assert!(recorded < seen && seen < now, "{recorded} < {seen} < {now}");
    // A second resource in the file: the identity is read once for both.
    let mut file: Value = serde_json::from_slice(&std::fs::read(&killed).unwrap()).unwrap();
    file["resources"].as_array_mut().unwrap().push(json!({
        "group": "", "version": "v1", "resource": "services",
        "resourceVersion": recorded.to_string(),
    }));
    std::fs::write(&killed, serde_json::to_vec(&file).unwrap()).unwrap();
    new.handle().stats().reset();

    let gw = start_gateway_with(config(new.url(), &killed)).await;
    let mut w = open_ok(
        gw.url(),
        &format!("{PATH}?watch=true&resourceVersion={seen}"),
    )
    .await;
    w.assert_from_cache();
    let ev = w.next("the 410").await;
    assert_eq!(ev.ty(), "ERROR", "{ev:?}");
    assert_eq!(ev.object()["code"], json!(410), "{ev:?}");

    let registry = gw.handle().cache().unwrap();
    let reg = &registry;
    wait_until("both caches synced", EVENT_TIMEOUT, || async move {
        reg.get("", "v1", "services").is_some_and(|c| c.is_synced())
    })
    .await;
    for r in ["configmaps", "services"] {
        let cache = registry.get("", "v1", r).unwrap();
        let s = &cache.stats;
        assert_eq!(s.backfills_other_cluster.load(Ordering::Relaxed), 1, "{r}");
        assert_eq!(s.backfills.load(Ordering::Relaxed), 0, "{r}");
        assert_eq!(s.backfill_fallbacks.load(Ordering::Relaxed), 0, "{r}");
    }
    assert_eq!(registry.resets(), 0, "a fresh process has nothing to reset");
    // The upstream was never asked for the state at the recorded resourceVersion, and
    // was asked for its identity once.
    let shapes = new.handle().stats().shapes_json();
    for r in ["configmaps", "services"] {
        assert_eq!(shapes["list"][r].get("rv=N,exact,limit"), None, "{shapes}");
    }
    assert_eq!(
        shapes["get"]["namespaces"],
        json!({"consistent": 1}),
        "{shapes}"
    );

    // The relist is answered by the cache, with the new cluster's objects alone.
    let resp = support::Http::new(gw.url())
        .get(&format!("{PATH}?resourceVersion=0"))
        .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.source(), Some("cache"));
    let list: Value = serde_json::from_slice(&resp.body).unwrap();
    let items = list["items"].as_array().unwrap();
    assert!(!items.is_empty());
    for o in items {
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(
            name.starts_with("new-"),
            "an object of the old cluster: {name}"
        );
    }

    // The file now names the new cluster, with the new cluster's resourceVersions.
    registry.save_state_file().await;
    let file = warm::read_file(&killed).unwrap();
    assert_eq!(file.cluster, Some(new_uid), "{file:?}");
    assert_eq!(file.entries.len(), 2, "{file:?}");
    for (gvr, rv) in &file.entries {
        assert!(
            rv.is_some_and(|rv| rv >= now),
            "{gvr:?} {file:?}: the new cluster's, at or after {now}"
        );
    }
}
