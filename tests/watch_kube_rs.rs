//! kube-rs through the gateway (issue 5, "What must be shown" 5, first bullet): kube-runtime's
//! `watcher` + `reflector` keep a store that matches the simulator through churn (creates,
//! updates, deletes), and their watches are served by the gateway's fan-out, not the
//! upstream.
//!
//! Two reflectors: kube-rs's defaults (a consistent paged list, from the cache once a probe
//! proves it fresh, then a watch from its RV)
//! and `any_semantic` (an RV="0" list from the cache). Both use a 2-second watch timeout so
//! that, during the churn, they resume from their last RV several times. Every resume
//! must continue: the watchers report no error, and no reflector lists again (neither
//! the upstream nor the gateway serves another pod list), so a gateway that answered
//! resumes with 410 (and sent the clients back to a list) fails here.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use support::servers::{start_gateway, start_sim_with};
use support::{watch_checker, watch_env};
use watchgate::sim::churn;
use watchgate::sim::seed::SeedSpec;
use watchgate::sim::SimConfig;

fn state_of(store: &Store<Pod>) -> BTreeMap<String, u64> {
    store
        .state()
        .iter()
        .map(|p| {
            let md = &p.metadata;
            (
                watch_checker::key_of(
                    md.namespace.as_deref().unwrap_or(""),
                    md.name.as_deref().unwrap_or(""),
                ),
                md.resource_version
                    .as_deref()
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0),
            )
        })
        .collect()
}

/// Pod lists the gateway has answered (from its cache or forwarded), from its metrics.
async fn gateway_pod_lists(gw: &support::servers::GatewayServer) -> u64 {
    let admin = support::http::Http::new(&format!("http://{}", gw.handle().admin_addr()));
    let resp = admin.get("/metrics").await;
    assert_eq!(resp.status, 200, "the gateway's /metrics");
    let text = resp.text();
    let lists: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("watchgate_requests_total{")
                && l.contains(r#"verb="list""#)
                && l.contains(r#"resource="pods""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    lists as u64
}

fn describe(have: &BTreeMap<String, u64>, want: &BTreeMap<String, u64>) -> String {
    let mut d = Vec::new();
    for (k, rv) in want {
        match have.get(k) {
            None => d.push(format!("missing {k}@{rv}")),
            Some(h) if h != rv => d.push(format!("{k}: {h} vs {rv}")),
            _ => {}
        }
    }
    for k in have.keys().filter(|k| !want.contains_key(*k)) {
        d.push(format!("extra {k}"));
    }
    let n = d.len();
    d.truncate(8);
    format!("{n} difference(s): {}", d.join("; "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_reflectors_match_the_simulator_through_churn() {
    let seed = 40;
    let sim = start_sim_with(SimConfig {
        bootstrap_namespaces: true,
        seed_per_type: seed,
        pod_size: 1024,
        ..SimConfig::default()
    })
    .await;
    let store = sim.handle().store().clone();
    let gw = start_gateway(sim.url()).await;
    watch_env::warm(gw.url(), sim.handle()).await;
    let upstream_watches = sim.handle().stats().watches("pods");

    let config = kube::Config::new(gw.url().parse().unwrap());
    let client = Client::try_from(config).expect("kube client for the gateway");
    let api: Api<Pod> = Api::all(client);
    let mut readers = Vec::new();
    let mut tasks = Vec::new();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    for (name, cfg) in [
        ("default", watcher::Config::default().timeout(2)),
        (
            "any_semantic",
            watcher::Config::default().any_semantic().timeout(2),
        ),
    ] {
        let (reader, writer) = reflector::store::<Pod>();
        let stream = reflector::reflector(writer, watcher(api.clone(), cfg)).applied_objects();
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                if let Err(e) = item {
                    errors.lock().unwrap().push(format!("{name}: {e}"));
                }
            }
        }));
        readers.push((name, reader));
    }
    for (name, r) in &readers {
        tokio::time::timeout(Duration::from_secs(30), r.wait_until_ready())
            .await
            .unwrap_or_else(|_| panic!("the {name} reflector did not sync within 30 s"))
            .expect("reflector writer alive");
    }
    // Each reflector has listed once. From here on, every watch that times out must be
    // resumed from its last RV: the upstream sees no more pod lists (neither a relist nor
    // the probe a consistent relist would cost) and the gateway answers no more (both
    // reflectors' lists come from its cache).
    let upstream_lists = sim.handle().stats().lists("pods");
    let gateway_lists = gateway_pod_lists(&gw).await;
    assert!(
        gateway_lists >= 2,
        "both reflectors' initial lists went through the gateway ({gateway_lists} counted)"
    );

    // Churn: updates of the seeded pods, creates and deletes of churn-N pods, 60 per
    // second for 6 s (three watch timeouts, so each reflector resumes a few times).
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let churner = tokio::spawn(churn::run(
        store.clone(),
        SeedSpec::per_type(seed, 1024),
        60.0,
        stop_rx,
    ));
    tokio::time::sleep(Duration::from_secs(6)).await;
    stop_tx.send(true).unwrap();
    let done = churner.await.unwrap();
    println!("churn: {done:?}");
    assert!(
        done.creates > 0 && done.deletes > 0 && done.updates > 0,
        "{done:?}"
    );

    // Bounded polling until both stores equal the simulator's pods (names and RVs).
    let want = watch_env::sim_state(&store, None);
    for (name, r) in &readers {
        let desc = format!(
            "the {name} reflector's store converges to the simulator's {} pods (equal, difference)",
            want.len()
        );
        support::wait::wait_for(
            &desc,
            Duration::from_secs(20),
            || async {
                let have = state_of(r);
                (have == want, describe(&have, &want))
            },
            |(same, _)| *same,
        )
        .await;
    }
    for t in &tasks {
        assert!(!t.is_finished(), "a kube-rs watcher stream ended");
    }
    for t in tasks {
        t.abort();
    }
    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "the kube-rs watchers reported {} error(s) through the churn, the first: {:?}",
        errors.len(),
        &errors[..errors.len().min(5)]
    );
    assert_eq!(
        (
            sim.handle().stats().lists("pods"),
            gateway_pod_lists(&gw).await
        ),
        (upstream_lists, gateway_lists),
        "pod lists (upstream, through the gateway) after the churn vs after the initial \
         sync: a reflector relisted, so a resume did not continue"
    );
    // Their watches (and resumes) were served by the gateway's fan-out: the simulator saw
    // only the gateway reflector's one watch.
    let now = sim.handle().stats().watches("pods");
    assert_eq!(
        (upstream_watches, now),
        (1, 1),
        "upstream pod watches: {upstream_watches} after the gateway synced, {now} after the \
         kube-rs watchers ran (every kube-rs watch must be served from the cache)"
    );
}
