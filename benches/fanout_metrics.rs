//! Watch fan-out with metrics on and off (issue 6): two gateways on one simulator, one with
//! `GatewayConfig::metrics = false`, each serving the same number of watchers from its
//! cache. Writes go to the simulator; both gateways receive every event at the same time,
//! so they compete for the same CPU and the comparison survives a noisy machine.
//!
//!     cargo bench --bench fanout_metrics                         # 200 watchers, 300 events
//!     WATCHGATE_BENCH_QUICK=1 cargo bench --bench fanout_metrics # 50 watchers, 60 events
//!
//! Reported per gateway: the delivery latency (write sent to the simulator → event read
//! by a watcher) over every watcher × event, median and p99, and the time until every
//! watcher had every event.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use tokio::sync::Mutex;

use watchgate::cache::registry::CachePolicy;
use watchgate::config::GatewayConfig;
use watchgate::server::{Gateway, GatewayHandle};
use watchgate::sim::{start, SimConfig};

const NS: &str = "/api/v1/namespaces/default/configmaps";

async fn gateway(sim: &str, metrics: bool) -> GatewayHandle {
    let mut cfg = GatewayConfig::for_upstream_url(sim).unwrap();
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["configmaps".into()],
        exclude: vec![],
    });
    cfg.metrics = metrics;
    Gateway::start(cfg).await.unwrap()
}

/// Reads one watch stream; records when event `i` (configmap `b{i}`) arrived.
async fn watcher(url: String, events: usize, epoch: Instant, out: Arc<Mutex<Vec<Duration>>>) {
    let client: Client<HttpConnector, Empty<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let resp = client.get(url.parse().unwrap()).await.expect("watch");
    assert!(resp.status().is_success());
    assert_eq!(
        resp.headers()
            .get("x-watchgate-source")
            .map(|v| v.as_bytes()),
        Some(&b"cache"[..])
    );
    let mut body = resp.into_body();
    let mut seen = vec![Duration::ZERO; events];
    let (mut buf, mut got) = (Vec::new(), 0);
    while got < events {
        let frame = body.frame().await.expect("stream open").expect("frame");
        let Ok(data) = frame.into_data() else {
            continue;
        };
        buf.extend_from_slice(&data);
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            let name = v["object"]["metadata"]["name"].as_str().unwrap_or("");
            if let Some(i) = name.strip_prefix('b').and_then(|n| n.parse::<usize>().ok()) {
                seen[i] = epoch.elapsed();
                got += 1;
            }
        }
    }
    out.lock().await.extend(seen);
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * p) as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::var_os("WATCHGATE_BENCH_QUICK").is_some();
    let (watchers, events) = if quick { (50, 60) } else { (200, 300) };
    let sim = start(SimConfig {
        bootstrap_namespaces: true,
        ..SimConfig::default()
    })
    .await
    .unwrap();
    let on = gateway(&sim.url(), true).await;
    let off = gateway(&sim.url(), false).await;
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();

    // Both caches synced, and the resourceVersion to watch from.
    let mut rv = String::new();
    for gw in [&on, &off] {
        let started = Instant::now();
        loop {
            let resp = client
                .get(
                    format!("{}{NS}?resourceVersion=0", gw.url())
                        .parse()
                        .unwrap(),
                )
                .await
                .unwrap();
            let cached = resp
                .headers()
                .get("x-watchgate-source")
                .map(|v| v.as_bytes())
                == Some(b"cache");
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            if cached {
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                rv = v["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string();
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(60), "never synced");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let epoch = Instant::now();
    let mut results = Vec::new();
    let mut tasks = Vec::new();
    for gw in [&on, &off] {
        let out = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..watchers {
            let url = format!("{}{NS}?watch=true&resourceVersion={rv}", gw.url());
            tasks.push(tokio::spawn(watcher(url, events, epoch, out.clone())));
        }
        results.push(out);
    }
    // Let every watch open before the first write.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let mut sent = Vec::with_capacity(events);
    for i in 0..events {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("b{i}")},
            "data": {"k": "x".repeat(2048)},
        });
        sent.push(epoch.elapsed());
        let req = http::Request::post(format!("{}{NS}", sim.url()))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(&body).unwrap())))
            .unwrap();
        let resp = client.request(req).await.unwrap();
        assert!(resp.status().is_success());
        resp.into_body().collect().await.unwrap();
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("every watcher got every event")
            .unwrap();
    }

    println!(
        "watch fan-out, {watchers} watchers per gateway, {events} events of ~2 KiB, metrics on vs off:"
    );
    for (label, out) in ["on ", "off"].iter().zip(results) {
        let seen = out.lock().await;
        let mut lat: Vec<f64> = seen
            .chunks(events)
            .flat_map(|w| {
                w.iter()
                    .zip(&sent)
                    .map(|(r, s)| r.saturating_sub(*s).as_secs_f64() * 1e3)
            })
            .collect();
        let last = seen.iter().max().unwrap().saturating_sub(sent[0]);
        println!(
            "  metrics {label}: delivery latency median {:>7.2} ms  p99 {:>7.2} ms;  all delivered after {:>7.1} ms",
            pct(&mut lat, 0.5),
            pct(&mut lat, 0.99),
            last.as_secs_f64() * 1e3
        );
    }
}
