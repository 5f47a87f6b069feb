//! What one consistency check costs (issue 27): a cache of N configmaps compared with the
//! upstream at its resourceVersion (`cache::consistency`: paged metadata-only lists at
//! resourceVersionMatch=Exact, compared by (namespace, name, resourceVersion)), next to
//! the same metadata pages fetched from the simulator alone (the upstream's share), and a
//! full JSON list of the resource (what a relist costs, for scale). Alternating rounds in
//! one process; medians.
//!
//!     cargo bench --bench consistency_check                      # 50,000 configmaps
//!     WATCHGATE_BENCH_QUICK=1 cargo bench --bench consistency_check   # smoke: 2,000
//!
//! Figures go to docs/benchmarks.md ("Consistency check").

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use watchgate::cache::consistency::Report;
use watchgate::config::GatewayConfig;
use watchgate::server::Gateway;
use watchgate::sim::seed::{seed_store, SeedSpec};
use watchgate::sim::{start, SimConfig};

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

const METADATA: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// GETs `url` with `accept`; the body and how long it took.
async fn fetch(client: &HttpClient, url: &str, accept: &str) -> (Bytes, Duration) {
    let started = Instant::now();
    let req = http::Request::get(url)
        .header("accept", accept)
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = client.request(req).await.expect("response");
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (body, started.elapsed())
}

/// The upstream's share of a check: every metadata page at exactly `rv`; (bytes, time).
async fn metadata_pages(client: &HttpClient, base: &str, rv: u64) -> (usize, Duration) {
    let started = Instant::now();
    let mut bytes = 0;
    let mut url = format!(
        "{base}/api/v1/configmaps?limit=10000&resourceVersion={rv}&resourceVersionMatch=Exact"
    );
    loop {
        let (body, _) = fetch(client, &url, METADATA).await;
        bytes += body.len();
        let page: Value = serde_json::from_slice(&body).unwrap();
        match page["metadata"]["continue"].as_str() {
            Some(c) if !c.is_empty() => {
                let c: String = form_urlencoded::byte_serialize(c.as_bytes()).collect();
                url = format!("{base}/api/v1/configmaps?limit=10000&continue={c}");
            }
            _ => return (bytes, started.elapsed()),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("WATCHGATE_BENCH_QUICK").is_some();
    let (n, rounds) = if quick { (2_000, 1) } else { (50_000, 5) };

    let sim = start(SimConfig::default()).await.unwrap();
    let spec = SeedSpec {
        namespaces: 10,
        configmaps: n,
        ..SeedSpec::per_type(0, 4096)
    };
    seed_store(sim.store(), &spec);
    let mut cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    cfg.cache_consistency_check_interval = Duration::ZERO;
    let gw = Gateway::start(cfg).await.unwrap();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let gw_url = format!("http://{}", gw.addr());
    let sim_url = sim.url();
    let sim_url = sim_url.trim_end_matches('/');

    // Start the cache and wait for its first sync.
    fetch(
        &client,
        &format!("{gw_url}/api/v1/configmaps?resourceVersion=0&limit=1"),
        "application/json",
    )
    .await;
    let registry = gw.cache().expect("caching on").clone();
    let cache = loop {
        if let Some(c) = registry.get("", "v1", "configmaps") {
            break c;
        }
        tokio::task::yield_now().await;
    };
    cache.wait_synced().await;
    let rv = cache.store.resource_version();
    let objects = cache.store.snapshot().len();

    let (mut check, mut pages, mut full) = (vec![], vec![], vec![]);
    let (mut meta_bytes, mut full_bytes) = (0, 0);
    for _ in 0..rounds {
        let started = Instant::now();
        let report = cache.consistency.check().await;
        check.push(started.elapsed().as_secs_f64() * 1e3);
        assert!(
            matches!(report, Report::Consistent { objects: o, .. } if o == objects),
            "{report}"
        );
        let (b, t) = metadata_pages(&client, sim_url, rv).await;
        meta_bytes = b;
        pages.push(t.as_secs_f64() * 1e3);
        let (body, t) = fetch(
            &client,
            &format!("{sim_url}/api/v1/configmaps"),
            "application/json",
        )
        .await;
        full_bytes = body.len();
        full.push(t.as_secs_f64() * 1e3);
    }
    let (check, pages, full) = (median(check), median(pages), median(full));
    println!(
        "consistency check of {objects} configmaps at resourceVersion {rv}, median of {rounds} rounds:"
    );
    println!("  whole check (gateway)          : {check:8.1} ms");
    println!(
        "  its metadata pages, sim alone  : {pages:8.1} ms  {:6.1} MB",
        meta_bytes as f64 / 1e6
    );
    println!(
        "  the gateway's own part         : {:8.1} ms  (decode + compare)",
        (check - pages).max(0.0)
    );
    println!(
        "  a full JSON list, sim alone    : {full:8.1} ms  {:6.1} MB  (a relist, for scale)",
        full_bytes as f64 / 1e6
    );
}
