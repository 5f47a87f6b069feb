//! Cache list benchmark (issue 4): RV="0" lists of N pods of ~4 KiB served from the
//! gateway's cache, next to the same list served by the simulator directly, in one run;
//! the same list gzipped; NotOlderThan first pages (`limit=500`); the time to sync, with
//! watch-list and with the paged list; the cache's resident memory per object; and a label
//! selector that matches nothing over many small objects.
//!
//!     cargo bench --bench cache_list                      # full: 50,000 pods, 300,000 configmaps
//!     WATCHGATE_BENCH_QUICK=1 cargo bench --bench cache_list   # smoke: seconds
//!
//! It also compares a gateway with metrics on and one with `GatewayConfig::metrics = false`
//! on the same cache-served list and single-object gets (issue 6).
//!
//! Figures go to docs/benchmarks.md. Medians of several rounds; both paths are measured
//! alternately in the same process so that the ratio survives a noisy machine.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use watchgate::config::GatewayConfig;
use watchgate::server::Gateway;
use watchgate::sim::seed::{seed_store, SeedSpec};
use watchgate::sim::{start, SimConfig};

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

/// Counts live heap bytes, so the cache's own footprint can be told apart from the
/// simulator's in one process.
#[path = "../tests/support/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{live_bytes, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Fetches `url` and reads the whole body; returns (bytes, elapsed, source header).
async fn fetch(client: &HttpClient, url: &str) -> (usize, Duration, String) {
    fetch_with(client, url, false).await
}

/// The same, asking for gzip when `gzip` is set (the bytes counted are the compressed ones).
async fn fetch_with(client: &HttpClient, url: &str, gzip: bool) -> (usize, Duration, String) {
    let started = Instant::now();
    let mut req = http::Request::get(url).body(Empty::<Bytes>::new()).unwrap();
    if gzip {
        req.headers_mut()
            .insert("accept-encoding", http::HeaderValue::from_static("gzip"));
    }
    let resp = client.request(req).await.expect("response");
    if gzip {
        assert_eq!(
            resp.headers().get("content-encoding").map(|v| v.as_bytes()),
            Some(&b"gzip"[..]),
            "{url}: a large list is gzipped"
        );
    }
    assert!(resp.status().is_success(), "{url}: {}", resp.status());
    let source = resp
        .headers()
        .get("x-watchgate-source")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_else(|| "sim".into());
    let mut body = resp.into_body();
    let mut n = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(d) = frame.expect("frame").into_data() {
            n += d.len();
        }
    }
    (n, started.elapsed(), source)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

async fn warm(client: &HttpClient, url: &str) -> Duration {
    let started = Instant::now();
    loop {
        let (_, _, source) = fetch(client, url).await;
        if source == "cache" {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "cache never synced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("WATCHGATE_BENCH_QUICK").is_some();
    let (pods, small, rounds) = if quick {
        (2_000, 10_000, 3)
    } else {
        (50_000, 300_000, 7)
    };
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();

    // --- RV=0 list of `pods` pods of ~4 KiB --------------------------------------------
    let sim = start(SimConfig::default()).await.unwrap();
    let mut spec = SeedSpec::per_type(0, 4096);
    spec.namespaces = 50;
    spec.pods = pods;
    seed_store(sim.store(), &spec);
    let gw = Gateway::start(GatewayConfig::for_upstream_url(&sim.url()).unwrap())
        .await
        .unwrap();
    let path = "/api/v1/pods?resourceVersion=0";
    let live_before = live_bytes();
    let sync = warm(&client, &format!("{}{path}", gw.url())).await;
    // Let the listing's transient buffers (the simulator's and the reflector's) go.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let cache_bytes = live_bytes().saturating_sub(live_before);

    let (mut sim_ms, mut gw_ms, mut sim_mbs, mut gw_mbs) = (vec![], vec![], vec![], vec![]);
    let mut size = 0;
    for _ in 0..rounds {
        let (n, t, _) = fetch(&client, &format!("{}{path}", sim.url())).await;
        sim_ms.push(t.as_secs_f64() * 1e3);
        sim_mbs.push(n as f64 / t.as_secs_f64() / 1e6);
        let (n2, t, src) = fetch(&client, &format!("{}{path}", gw.url())).await;
        assert_eq!(src, "cache");
        gw_ms.push(t.as_secs_f64() * 1e3);
        gw_mbs.push(n2 as f64 / t.as_secs_f64() / 1e6);
        size = n2;
    }
    println!(
        "RV=0 list of {pods} pods ({:.1} MB), median of {rounds} rounds:",
        size as f64 / 1e6
    );
    println!(
        "  simulator direct : {:>8.1} ms  {:>8.1} MB/s",
        median(sim_ms.clone()),
        median(sim_mbs)
    );
    println!(
        "  gateway (cache)  : {:>8.1} ms  {:>8.1} MB/s",
        median(gw_ms.clone()),
        median(gw_mbs)
    );
    println!(
        "  ratio (sim/cache): {:>8.1}x",
        median(sim_ms) / median(gw_ms)
    );
    println!(
        "  time to sync     : {:>8.1} ms (first cacheable read to first cache answer)",
        sync.as_secs_f64() * 1e3
    );
    println!(
        "  cache heap       : {:>8.1} MB for {:.1} MB of JSON ({:.2}x; {} B per object)",
        cache_bytes as f64 / 1e6,
        size as f64 / 1e6,
        cache_bytes as f64 / size as f64,
        cache_bytes / pods
    );

    // --- the same list gzipped, as kubectl asks for it ---------------------------------------
    let (mut sim_ms, mut gw_ms, mut zsize) = (vec![], vec![], 0);
    for _ in 0..rounds {
        let (_, t, _) = fetch_with(&client, &format!("{}{path}", sim.url()), true).await;
        sim_ms.push(t.as_secs_f64() * 1e3);
        let (n, t, src) = fetch_with(&client, &format!("{}{path}", gw.url()), true).await;
        assert_eq!(src, "cache");
        gw_ms.push(t.as_secs_f64() * 1e3);
        zsize = n;
    }
    println!(
        "gzipped RV=0 list ({:.1} MB -> {:.1} MB), median of {rounds} rounds:",
        size as f64 / 1e6,
        zsize as f64 / 1e6
    );
    println!(
        "  simulator direct : {:>8.1} ms  {:>8.1} MB/s of JSON",
        median(sim_ms.clone()),
        size as f64 / median(sim_ms.clone()) / 1e3
    );
    println!(
        "  gateway (cache)  : {:>8.1} ms  {:>8.1} MB/s of JSON",
        median(gw_ms.clone()),
        size as f64 / median(gw_ms.clone()) / 1e3
    );
    println!(
        "  ratio (sim/cache): {:>8.1}x",
        median(sim_ms) / median(gw_ms)
    );

    // --- NotOlderThan first pages of 500, as a paging client starts ----------------------
    let rv: u64 = {
        let resp = client
            .get(
                format!(
                    "{}/api/v1/pods?resourceVersion=0&fieldSelector=metadata.name%3Dnone",
                    gw.url()
                )
                .parse()
                .unwrap(),
            )
            .await
            .unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        v["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let page =
        format!("/api/v1/pods?resourceVersion={rv}&resourceVersionMatch=NotOlderThan&limit=500");
    let (mut sim_ms, mut gw_ms) = (vec![], vec![]);
    for _ in 0..rounds {
        let (_, t, _) = fetch(&client, &format!("{}{page}", sim.url())).await;
        sim_ms.push(t.as_secs_f64() * 1e3);
        let (_, t, src) = fetch(&client, &format!("{}{page}", gw.url())).await;
        assert_eq!(src, "cache");
        gw_ms.push(t.as_secs_f64() * 1e3);
    }
    println!("NotOlderThan first page of 500 pods, median of {rounds} rounds:");
    println!("  simulator direct : {:>8.2} ms", median(sim_ms.clone()));
    println!("  gateway (cache)  : {:>8.2} ms", median(gw_ms.clone()));
    println!(
        "  ratio (sim/cache): {:>8.1}x",
        median(sim_ms) / median(gw_ms)
    );

    // --- the time to sync with the paged list instead of watch-list --------------------------
    let mut paged_cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    paged_cfg.reflector.watch_list = watchgate::cache::reflector::WatchListMode::Off;
    let gw_paged = Gateway::start(paged_cfg).await.unwrap();
    let sync_paged = warm(&client, &format!("{}{path}", gw_paged.url())).await;
    println!(
        "time to sync {pods} pods: watch-list {:.1} ms, paged list (limit=500) {:.1} ms",
        sync.as_secs_f64() * 1e3,
        sync_paged.as_secs_f64() * 1e3
    );
    drop(gw_paged);

    // --- metrics on vs off (issue 6) -------------------------------------------------------
    // A second gateway with `GatewayConfig::metrics = false` (no request instrumentation at
    // all) on the same simulator, measured alternately with the metrics-on gateway above:
    // the whole list, and single-object gets where a per-request cost would show most.
    let mut off_cfg = GatewayConfig::for_upstream_url(&sim.url()).unwrap();
    off_cfg.metrics = false;
    let gw_off = Gateway::start(off_cfg).await.unwrap();
    warm(&client, &format!("{}{path}", gw_off.url())).await;
    let (mut on_ms, mut off_ms) = (vec![], vec![]);
    for _ in 0..rounds {
        let (_, t, _) = fetch(&client, &format!("{}{path}", gw.url())).await;
        on_ms.push(t.as_secs_f64() * 1e3);
        let (_, t, src) = fetch(&client, &format!("{}{path}", gw_off.url())).await;
        assert_eq!(src, "cache");
        off_ms.push(t.as_secs_f64() * 1e3);
    }
    // One pod's name (RV unset: RV=0 would ignore the limit and list everything).
    let get = "/api/v1/namespaces/ns-0/pods?limit=1";
    let one: serde_json::Value = {
        let resp = client
            .get(format!("{}{get}", sim.url()).parse().unwrap())
            .await
            .unwrap();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&body).unwrap()
    };
    let name = one["items"][0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let get = format!("/api/v1/namespaces/ns-0/pods/{name}?resourceVersion=0");
    let batch = if quick { 100 } else { 500 };
    let (mut on_us, mut off_us) = (vec![], vec![]);
    let (on_url, off_url) = (gw.url(), gw_off.url());
    // Which gateway goes first alternates by round: sequential gets measure wake-up
    // latency as much as work, and the second batch of a round finds the runtime warm.
    for round in 0..rounds * 2 {
        let mut order = [(&on_url, &mut on_us), (&off_url, &mut off_us)];
        if round % 2 == 1 {
            order.reverse();
        }
        for (target, out) in order {
            let started = Instant::now();
            for _ in 0..batch {
                let (_, _, src) = fetch(&client, &format!("{target}{get}")).await;
                assert_eq!(src, "cache");
            }
            out.push(started.elapsed().as_secs_f64() * 1e6 / batch as f64);
        }
    }
    println!("metrics on vs off, alternately, median of {rounds} rounds:");
    println!(
        "  RV=0 list of {pods} pods : on {:>8.1} ms   off {:>8.1} ms",
        median(on_ms),
        median(off_ms)
    );
    println!(
        "  RV=0 get of one pod      : on {:>8.1} us   off {:>8.1} us  (mean of {batch} sequential gets; {} rounds, who goes first alternating)",
        median(on_us),
        median(off_us),
        rounds * 2
    );
    drop(gw_off);
    drop(gw);
    sim.shutdown().await;

    // --- a label selector that matches nothing over `small` small objects ----------------
    let sim = start(SimConfig::default()).await.unwrap();
    let mut spec = SeedSpec::per_type(0, 4096);
    spec.namespaces = 100;
    spec.configmaps = small;
    seed_store(sim.store(), &spec);
    let gw = Gateway::start(GatewayConfig::for_upstream_url(&sim.url()).unwrap())
        .await
        .unwrap();
    let path = "/api/v1/configmaps?resourceVersion=0&labelSelector=app%3Dnothing";
    warm(&client, &format!("{}{path}", gw.url())).await;
    let (mut sim_ms, mut gw_ms) = (vec![], vec![]);
    for _ in 0..rounds {
        let (_, t, _) = fetch(&client, &format!("{}{path}", sim.url())).await;
        sim_ms.push(t.as_secs_f64() * 1e3);
        let (_, t, _) = fetch(&client, &format!("{}{path}", gw.url())).await;
        gw_ms.push(t.as_secs_f64() * 1e3);
    }
    println!("labelSelector matching nothing over {small} configmaps, median of {rounds}:");
    println!("  simulator direct : {:>8.1} ms", median(sim_ms));
    println!("  gateway (cache)  : {:>8.1} ms", median(gw_ms));
}
