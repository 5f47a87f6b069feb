//! Continue tokens in the upstream's own form (issue 27, "Fidelity"): kube-apiserver 1.36
//! pages from its watch cache and writes the start key with a leading slash
//! (`"start":"/p-2\u0000"`); apiservers that paged from etcd3 wrote it without
//! (`codec::continue_token`). The cache's pages carry the form the upstream's own tokens
//! take, learned from the tokens it issued (its paged lists, the consistent-read probes),
//! 1.36's until one is seen; a token of either form resumes on either server.

mod support;

use base64::Engine;
use serde_json::json;

use support::http::Resp;
use support::servers::{cluster_config, start_gateway_with};
use support::watch::{put_object, put_pod, resource, wait_until_cached};
use support::Http;
use watchgate::cache::reflector::WatchListMode;
use watchgate::codec::continue_token::KeyForm;
use watchgate::config::GatewayConfig;
use watchgate::server::GatewayHandle;
use watchgate::sim::{start, SimConfig, SimHandle};

/// Six pods in two namespaces, a gateway in front whose pods cache is synced.
async fn setup(form: KeyForm, watch_list: WatchListMode) -> (SimHandle, GatewayHandle) {
    let sim = start(SimConfig {
        continue_form: form,
        ..cluster_config()
    })
    .await
    .unwrap();
    for ns in ["a", "b"] {
        for name in ["p1", "p2", "p3"] {
            put_pod(&sim, ns, name, json!({"app": "x"}), "n", "Running");
        }
    }
    let mut cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    cfg.reflector.watch_list = watch_list;
    let gw = start_gateway_with(cfg).await.into_handle();
    wait_until_cached(&gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;
    (sim, gw)
}

fn token(r: &Resp) -> String {
    r.json()["metadata"]["continue"]
        .as_str()
        .unwrap_or_else(|| panic!("no continue token: {}", r.text()))
        .to_string()
}

/// The token's JSON, for readable failures.
fn token_json(t: &str) -> String {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .unwrap();
    String::from_utf8(raw).unwrap()
}

/// The first pages named, through the cache, have the simulator's bytes; then the list is
/// walked to its end both ways: the cache's tokens on the simulator and the simulator's on
/// the cache, page by page equal.
async fn assert_pages_identical(sim: &SimHandle, gw: &GatewayHandle, firsts: &[String]) {
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw.url()));
    for first in firsts {
        let (d, t) = (direct.get(first).await, through.get(first).await);
        assert_eq!(t.source(), Some("cache"), "{first}: {}", t.text());
        assert_eq!(
            token_json(&token(&t)),
            token_json(&token(&d)),
            "{first}: the cache's token against the simulator's"
        );
        assert_eq!(t.json(), d.json(), "{first}");
        let collection = first.split('?').next().unwrap();
        // The cache's tokens, resumed by the simulator; the simulator's, by the cache.
        for (minter, resumer, resumer_is_cache) in [(&t, &direct, false), (&d, &through, true)] {
            let mut page = minter.json();
            let mut pages = 1;
            while let Some(tok) = page["metadata"]["continue"].as_str().map(String::from) {
                let next = format!("{collection}?limit=2&continue={tok}");
                let resumed = resumer.get(&next).await;
                assert_eq!(resumed.status, 200, "{next}: {}", resumed.text());
                if resumer_is_cache {
                    assert_eq!(resumed.source(), Some("cache"), "{next}");
                }
                // The other server, asked the same, answers the same bytes.
                let other = if resumer_is_cache { &direct } else { &through };
                let same = other.get(&next).await;
                assert_eq!(resumed.json(), same.json(), "{next}");
                page = resumed.json();
                pages += 1;
            }
            assert!(pages >= 2, "{first}: the list was paged");
        }
    }
}

fn firsts(rv: u64) -> Vec<String> {
    vec![
        // NotOlderThan with a limit: a first page cut by the cache, as 1.36's cacher does.
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=2"),
        format!(
            "/api/v1/namespaces/a/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=1"
        ),
        // Exact, and the legacy RV=N with a limit.
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=Exact&limit=4"),
        format!("/api/v1/namespaces/b/pods?resourceVersion={rv}&limit=2"),
        // A consistent first page (no resourceVersion).
        "/api/v1/pods?limit=2".to_string(),
        "/api/v1/namespaces/a/pods?limit=2".to_string(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caches_tokens_are_1_36s_bytes_and_resume_on_either_side() {
    let (sim, gw) = setup(KeyForm::Rooted, WatchListMode::Auto).await;
    let rv = sim.store().current_rv();
    // Before the cache has seen any token of the upstream's: 1.36's form.
    let first = Http::new(&gw.url())
        .get(&format!(
            "/api/v1/namespaces/a/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=1"
        ))
        .await;
    assert_eq!(first.source(), Some("cache"));
    assert_eq!(
        token_json(&token(&first)),
        format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"/p1\u0000"}}"#)
    );
    assert_pages_identical(&sim, &gw, &firsts(rv)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_pages_from_etcd3_is_copied_once_its_probe_shows_the_form() {
    // An apiserver before ListFromCacheSnapshot writes relative start keys. The cache
    // synced by watch-list has seen no token of it yet: its first pages are 1.36's.
    let (sim, gw) = setup(KeyForm::Relative, WatchListMode::Auto).await;
    let (direct, through) = (Http::new(&sim.url()), Http::new(&gw.url()));
    let rv = sim.store().current_rv();
    let page =
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=2");
    let before = through.get(&page).await;
    assert_eq!(before.source(), Some("cache"));
    assert_eq!(
        token_json(&token(&before)),
        format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"/a/p2\u0000"}}"#)
    );
    // Still resumed by the upstream: both forms name the same key (the next tokens differ
    // in form, as the first did).
    let next = format!("/api/v1/pods?limit=2&continue={}", token(&before));
    assert_eq!(
        direct.get(&next).await.json()["items"],
        through.get(&next).await.json()["items"]
    );
    // A consistent read probes the upstream with a `limit=1` list (`cache::fresh`), whose
    // answer carries the upstream's token: from then on the cache writes that form.
    let consistent = through.get("/api/v1/pods?limit=2").await;
    assert_eq!(consistent.source(), Some("cache"), "{}", consistent.text());
    assert_eq!(
        token_json(&token(&consistent)),
        format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"a/p2\u0000"}}"#)
    );
    assert_pages_identical(&sim, &gw, &firsts(rv)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reflectors_paged_list_shows_the_form_too() {
    // More than one page of the reflector's (500 objects a page): its own list carries
    // the upstream's token, so the cache copies the form without any further request.
    let sim = start(SimConfig {
        continue_form: KeyForm::Relative,
        ..cluster_config()
    })
    .await
    .unwrap();
    let configmaps = resource("", "v1", "configmaps");
    for i in 0..501 {
        put_object(
            &sim,
            configmaps,
            "default",
            json!({"metadata": {"name": format!("c{i:03}"), "namespace": "default"}}),
        );
    }
    let mut cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    cfg.reflector.watch_list = WatchListMode::Off;
    let gw = start_gateway_with(cfg).await.into_handle();
    wait_until_cached(&gw.url(), "/api/v1/configmaps?resourceVersion=0", |_| true).await;
    let lists = sim.stats().lists("configmaps");
    let rv = sim.store().current_rv();
    let page = format!(
        "/api/v1/namespaces/default/configmaps?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=1"
    );
    let (d, t) = (
        Http::new(&sim.url()).get(&page).await,
        Http::new(&gw.url()).get(&page).await,
    );
    assert_eq!(t.source(), Some("cache"));
    assert_eq!(
        token_json(&token(&t)),
        format!(r#"{{"v":"meta.k8s.io/v1","rv":{rv},"start":"c000\u0000"}}"#)
    );
    assert_eq!(t.json(), d.json());
    // Learnt from the reflector's pages alone: the probe-free page above was the only
    // list since, and it reached the simulator directly.
    assert_eq!(sim.stats().lists("configmaps"), lists + 1);
}
