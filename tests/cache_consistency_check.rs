//! The consistency check (issue 27 item 1): a cache compared with the upstream at one
//! resourceVersion notices a change its watch never brought, says which keys differ (log
//! line, metric, `/readyz?verbose`, an operator's `POST /cache/consistency-check`), and
//! repairs itself with a re-sync that sends watchers the difference. And an upstream
//! replaced behind the gateway is noticed by the check alone, with no consistent read.
//!
//! The fault is the simulator's unwatched write (`Store::mutate_unwatched`, or
//! `POST /debug/sim/faults/unwatched-write`): the object changes, lists show it, no watch
//! delivers it, as if the cache had lost the event.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{json, Value};

use support::metrics::sample;
use support::objects::configmap;
use support::serve::Served;
use support::servers::{cluster_config, start_gateway_with, start_sim_with};
use support::wait::wait_until;
use support::watch::{open_ok, resource, store_put, wait_until_cached};
use support::{Http, EVENT_TIMEOUT};
use watchgate::config::GatewayConfig;
use watchgate::sim::store::Mutation;
use watchgate::sim::SimHandle;

const CMS: &str = "/api/v1/namespaces/default/configmaps";

fn seed(sim: &SimHandle, n: u64) -> u64 {
    let rt = resource("", "v1", "configmaps");
    (0..n)
        .map(|i| {
            store_put(
                sim.store(),
                rt,
                "default",
                configmap("default", &format!("cm-{i}"))
                    .data(json!({"i": i.to_string()}))
                    .build(),
            )
        })
        .max()
        .unwrap_or(0)
}

/// A watched write: the cache's resourceVersion moves past any unwatched one before it.
fn write_noise(sim: &SimHandle, i: u64) -> u64 {
    store_put(
        sim.store(),
        resource("", "v1", "configmaps"),
        "default",
        configmap("default", "noise")
            .data(json!({"i": i.to_string()}))
            .build(),
    )
}

/// name → resourceVersion of a list's items.
fn versions(list: &Value) -> BTreeMap<String, String> {
    list["items"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

async fn cached_list(gw: &str) -> Value {
    wait_until_cached(gw, &format!("{CMS}?resourceVersion=0"), |_| true)
        .await
        .json()
}

/// Waits until the gateway's RV=0 list is `new`; every answer before must be `old` whole:
/// no answer may mix the two clusters.
async fn answers_only_until(
    gw: &str,
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
) {
    let http = Http::new(gw);
    let path = format!("{CMS}?resourceVersion=0");
    let (http, path) = (&http, &path);
    wait_until(
        "the gateway answers the new cluster's state",
        Duration::from_secs(30),
        || async move {
            let r = http.get(path).await;
            if r.status != 200 {
                return false;
            }
            let seen = versions(&r.json());
            assert!(
                &seen == old || &seen == new,
                "an answer mixed the two clusters: {seen:?}"
            );
            &seen == new
        },
    )
    .await;
}

/// Within one interval (and its jitter), the periodic check finds the change the watch
/// never delivered; the re-sync sends it to the open watch as a MODIFIED event, and the
/// cache then equals the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unwatched_change_is_found_within_one_interval_and_repaired() {
    let sim = start_sim_with(cluster_config()).await;
    seed(sim.handle(), 20);
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.cache_consistency_check_interval = Duration::from_millis(300);
    let gw = start_gateway_with(cfg).await;
    let list = cached_list(gw.url()).await;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let mut watch = open_ok(gw.url(), &format!("{CMS}?watch=true&resourceVersion={rv}")).await;
    watch.assert_from_cache();

    // The fault, through the simulator's HTTP hook; then a watched write, so that the
    // cache's resourceVersion passes the unwatched one.
    let hook = Http::new(sim.url())
        .post_json(
            "/debug/sim/faults/unwatched-write?resource=configmaps&namespace=default&name=cm-3",
            &json!({}),
        )
        .await;
    assert_eq!(hook.status, 200, "{}", hook.text());
    let silent_rv: u64 = hook.json()["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let noise_rv = write_noise(sim.handle(), 1);
    assert!(noise_rv > silent_rv);

    // The watch brings the watched write. The lost change lies before it, where no event
    // can go any more: the re-sync ends the stream with kube-apiserver's 410 Expired, and
    // the client relists (a stream that resumed would carry the wrong cm-3 on).
    let e = watch.next("the watched write").await;
    assert_eq!((e.ty(), e.name()), ("ADDED", "noise"), "{e:?}");
    let e = watch
        .next_within(Duration::from_secs(20))
        .await
        .expect("the repair's ERROR event");
    assert_eq!(e.ty(), "ERROR", "{e:?}");
    assert_eq!(e.object()["code"], 410, "{e:?}");
    assert_eq!(e.object()["reason"], "Expired", "{e:?}");
    watch.expect_end(Duration::from_secs(5)).await;
    let relisted = cached_list(gw.url()).await;
    let cm3 = relisted["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["metadata"]["name"] == "cm-3")
        .unwrap();
    assert_eq!(
        cm3["metadata"]["annotations"]["watchgate.dev/unwatched-write"],
        "1"
    );
    assert_eq!(cm3["metadata"]["resourceVersion"], silent_rv.to_string());

    // The cache equals the upstream again.
    let direct = Http::new(sim.url())
        .get(&format!("{CMS}?resourceVersion=0"))
        .await
        .json();
    let cached = cached_list(gw.url()).await;
    assert_eq!(versions(&cached), versions(&direct));

    // Counted and reported: the failure names the key and both versions.
    let registry = gw.handle().cache().unwrap().clone();
    let cache = registry.get("", "v1", "configmaps").unwrap();
    let counters = &cache.consistency.counters;
    assert!(counters.failure.load(Ordering::Relaxed) >= 1);
    let admin = Http::new(&format!("http://{}", gw.handle().admin_addr()));
    let metrics = admin.get("/metrics").await.text();
    assert!(
        sample(
            &metrics,
            "watchgate_cache_consistency_checks_total",
            &[("resource", "configmaps"), ("result", "failure")]
        ) >= 1.0,
        "{metrics}"
    );
    // The checks go on, and find the repaired cache consistent.
    let success = counters.success.load(Ordering::Relaxed);
    wait_until("a later check passes", EVENT_TIMEOUT, || async {
        counters.success.load(Ordering::Relaxed) > success
    })
    .await;
    let readyz = admin.get("/readyz?verbose").await.text();
    assert!(
        readyz.contains("[+]consistency-configmaps.v1 ok (consistent at resourceVersion "),
        "{readyz}"
    );
}

/// An operator's check, with the periodic one off: it answers per cache, names the keys
/// that differ, and its finding forwards consistent reads until the re-sync is in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_check_names_the_keys_that_differ() {
    let sim = start_sim_with(cluster_config()).await;
    seed(sim.handle(), 10);
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.cache_consistency_check_interval = Duration::ZERO;
    let gw = start_gateway_with(cfg).await;
    let admin = Http::new(&format!("http://{}", gw.handle().admin_addr()));
    let list = cached_list(gw.url()).await;
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();

    let ok = admin
        .post_json("/cache/consistency-check", &json!({}))
        .await;
    assert_eq!(
        (ok.status.as_u16(), ok.text()),
        (
            200,
            format!(
                "[+]configmaps.v1 consistent at resourceVersion {rv} (10 objects)\n\
                 consistency check passed\n"
            )
        )
    );

    // An unwatched delete through the store, then a watched write the cache follows.
    let rt = resource("", "v1", "configmaps");
    let deleted = sim
        .handle()
        .store()
        .mutate_unwatched(rt, "default", "cm-5", |_| Ok(Mutation::Delete))
        .unwrap()
        .unwrap();
    let deleted_rv = deleted["metadata"]["resourceVersion"].as_str().unwrap();
    let noise_rv = write_noise(sim.handle(), 1);
    // The cache holds the noise write (at its RV): it has seen everything before it.
    let noise_rv = noise_rv.to_string();
    wait_until_cached(gw.url(), &format!("{CMS}?resourceVersion=0"), |r| {
        versions(&r.json()).get("noise") == Some(&noise_rv)
    })
    .await;
    // The cache cannot know by itself: the fault is real.
    let stale = cached_list(gw.url()).await;
    assert!(versions(&stale).contains_key("cm-5"));
    let cm5_rv = versions(&stale)["cm-5"].clone();
    assert_ne!(cm5_rv, deleted_rv);

    let found = admin
        .post_json("/cache/consistency-check", &json!({}))
        .await;
    assert_eq!(
        (found.status.as_u16(), found.text()),
        (
            500,
            format!(
                "[-]configmaps.v1 differs at resourceVersion {noise_rv}: 0 missing from the cache, \
                 1 only in the cache, 0 at another resourceVersion; first: default/cm-5 (cache \
                 {cm5_rv}, upstream absent); re-syncing\nconsistency check failed\n"
            )
        )
    );
    // Repaired: the cache and a consistent read equal the upstream.
    let http = Http::new(gw.url());
    let path = format!("{CMS}?resourceVersion=0");
    let (http_ref, path_ref) = (&http, &path);
    wait_until("the re-sync drops cm-5", EVENT_TIMEOUT, || async move {
        !versions(&http_ref.get(path_ref).await.json()).contains_key("cm-5")
    })
    .await;
    let direct = Http::new(sim.url()).get(CMS).await.json();
    let consistent = http.get(CMS).await;
    assert_eq!(consistent.status, 200);
    assert_eq!(versions(&consistent.json()), versions(&direct));
    let again = admin
        .post_json("/cache/consistency-check?resource=configmaps", &json!({}))
        .await;
    assert_eq!(again.status, 200, "{}", again.text());

    // Nothing to check, and the wrong method.
    let none = admin
        .post_json("/cache/consistency-check?resource=pods", &json!({}))
        .await;
    assert_eq!(none.status, 404, "{}", none.text());
    let get = admin.get("/cache/consistency-check").await;
    assert_eq!(get.status, 405, "{}", get.text());
}

/// etcd restored from an old backup behind the gateway: the same cluster (the same
/// `kube-system` uid), its resourceVersions back below the cache's, while clients read
/// only with resourceVersion=0, which never probe. The periodic check cannot read the
/// cache's resourceVersion there, a consistent probe finds the upstream below it, and
/// every cache is rebuilt. No answer ever mixes the two states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_restore_is_noticed_by_the_check_alone() {
    let old = start_sim_with(cluster_config()).await;
    seed(old.handle(), 30);
    let addr: std::net::SocketAddr = old.url().trim_start_matches("http://").parse().unwrap();
    let mut cfg = GatewayConfig::for_upstream_url(old.url()).unwrap();
    cfg.cache_consistency_check_interval = Duration::from_millis(300);
    let gw = start_gateway_with(cfg).await;
    let old_state = versions(&cached_list(gw.url()).await);
    let mut watch = open_ok(gw.url(), &format!("{CMS}?watch=true&resourceVersion=0")).await;
    watch.assert_from_cache();
    watch.take(30, "the old configmaps").await;
    let identity = Http::new(old.url())
        .get("/api/v1/namespaces/kube-system")
        .await
        .json();
    old.kill().await;

    let mut new_cfg = cluster_config();
    new_cfg.addr = addr;
    new_cfg.bootstrap_namespaces = false;
    let new = start_sim_with(new_cfg).await;
    store_put(
        new.handle().store(),
        resource("", "v1", "namespaces"),
        "",
        identity,
    );
    seed(new.handle(), 3);
    let new_state = versions(
        &Http::new(new.url())
            .get(&format!("{CMS}?resourceVersion=0"))
            .await
            .json(),
    );
    assert_ne!(old_state, new_state);

    answers_only_until(gw.url(), &old_state, &new_state).await;
    let e = watch.next("the ERROR event of the reset").await;
    assert_eq!(e.ty(), "ERROR", "{e:?}");
    assert_eq!(e.object()["code"], 410, "{e:?}");
    watch.expect_end(Duration::from_secs(5)).await;
    assert_eq!(gw.handle().cache().unwrap().resets(), 1);
}

/// The binary's log line names the resource, the resourceVersion and the first key that
/// differs; the process's own metric counts the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_line_names_the_first_differing_key() {
    let sim = start_sim_with(cluster_config()).await;
    seed(sim.handle(), 5);
    let gw = Served::start(&[
        "--server",
        sim.url(),
        "--cache=configmaps",
        "--cache-consistency-check-interval=200ms",
    ])
    .await;
    let admin = gw.admin();
    let admin_ref = &admin;
    wait_until("the gateway is ready", EVENT_TIMEOUT, || async move {
        admin_ref.get("/readyz").await.status == 200
    })
    .await;
    let rt = resource("", "v1", "configmaps");
    sim.handle()
        .store()
        .mutate_unwatched(rt, "default", "cm-2", |cur| {
            let mut v = cur.unwrap().as_ref().clone();
            v["data"]["i"] = json!("changed");
            Ok(Mutation::Put(v))
        })
        .unwrap();
    write_noise(sim.handle(), 1);
    let gw_ref = &gw;
    wait_until("the mismatch is logged", EVENT_TIMEOUT, || async move {
        gw_ref.stderr().contains("default/cm-2 (cache ")
    })
    .await;
    let logs = gw.stderr();
    let line = logs
        .lines()
        .find(|l| l.contains("default/cm-2 (cache "))
        .unwrap();
    assert!(line.contains(" WARN "), "{line}");
    assert!(
        line.contains("consistency check: the cache of configmaps differs at resourceVersion "),
        "{line}"
    );
    assert!(
        line.contains(
            "0 missing from the cache, 0 only in the cache, 1 at another resourceVersion"
        ),
        "{line}"
    );
    let metrics = admin.get("/metrics").await.text();
    assert!(
        sample(
            &metrics,
            "watchgate_cache_consistency_checks_total",
            &[("resource", "configmaps"), ("result", "failure")]
        ) >= 1.0,
        "{metrics}"
    );
}

/// A cluster rebuilt behind the gateway whose resourceVersions are *above* the cache's:
/// no resourceVersion gives it away, and a resumed watch would pile its events onto the
/// old cluster's objects. Its `kube-system` namespace has another uid, which the
/// reflector checks before it resumes: every cache is rebuilt, watches end with 410, and
/// no answer (RV=0 or consistent) ever mixes the two. The periodic check is off, so the
/// reflector's own check is what notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebuilt_cluster_ahead_of_the_cache_is_told_by_its_identity() {
    let old = start_sim_with(cluster_config()).await;
    seed(old.handle(), 3);
    let addr: std::net::SocketAddr = old.url().trim_start_matches("http://").parse().unwrap();
    let mut cfg = GatewayConfig::for_upstream_url(old.url()).unwrap();
    cfg.cache_consistency_check_interval = Duration::ZERO;
    let gw = start_gateway_with(cfg).await;
    let old_list = cached_list(gw.url()).await;
    let old_state = versions(&old_list);
    let old_rv: u64 = old_list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut watch = open_ok(gw.url(), &format!("{CMS}?watch=true&resourceVersion=0")).await;
    watch.assert_from_cache();
    watch.take(3, "the old configmaps").await;
    old.kill().await;

    // The new cluster has more writes behind it than the old one had.
    let mut new_cfg = cluster_config();
    new_cfg.addr = addr;
    let new = start_sim_with(new_cfg).await;
    seed(new.handle(), 8);
    for i in 0..old_rv {
        write_noise(new.handle(), i + 10);
    }
    let new_list = Http::new(new.url())
        .get(&format!("{CMS}?resourceVersion=0"))
        .await
        .json();
    let new_rv: u64 = new_list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(new_rv > old_rv, "{new_rv} > {old_rv}");
    let new_state = versions(&new_list);

    let e = watch.next("the ERROR event of the reset").await;
    assert_eq!(e.ty(), "ERROR", "{e:?}");
    assert_eq!(e.object()["code"], 410, "{e:?}");
    watch.expect_end(Duration::from_secs(5)).await;
    answers_only_until(gw.url(), &old_state, &new_state).await;
    let consistent = Http::new(gw.url()).get(CMS).await;
    assert_eq!(versions(&consistent.json()), new_state);
    assert_eq!(gw.handle().cache().unwrap().resets(), 1);
}
