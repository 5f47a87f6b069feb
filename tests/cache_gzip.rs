//! `Accept-Encoding: gzip` (issue 4): answers larger than 128 KiB are gzipped, by the
//! simulator (as kube-apiserver's responsewriters do) and by the cache alike, and they
//! decompress to exactly the bytes of the plain answer. kubectl and the Python client
//! read gzipped cache answers.

mod support;

use std::io::Read;
use std::time::Duration;

use bytes::Bytes;
use flate2::read::GzDecoder;
use http::Method;
use serde_json::{json, Value};

use support::objects::configmap;
use support::servers::gateway;
use support::watch::{put_object, resource, wait_until_cached};
use support::Http;
use watchgate::codec::gzip::GZIP_THRESHOLD;
use watchgate::server::GatewayHandle;
use watchgate::sim::{start, SimConfig, SimHandle};

fn put_configmap(sim: &SimHandle, ns: &str, name: &str, data_len: usize) -> u64 {
    let size = if data_len > 1000 { "big" } else { "small" };
    let obj = configmap(ns, name)
        .label("size", size)
        .data(json!({"blob": "x".repeat(data_len)}));
    put_object(sim, resource("", "v1", "configmaps"), ns, obj.build())
}

struct Answer {
    gzipped: bool,
    vary: bool,
    source: Option<String>,
    /// The body after decompression.
    plain: Bytes,
}

async fn fetch(base: &str, path: &str, gzip: bool) -> Answer {
    let mut headers = vec![("accept", "application/json, */*")];
    if gzip {
        headers.push(("accept-encoding", "gzip"));
    }
    let resp = Http::new(base)
        .request(Method::GET, path, &headers, Bytes::new())
        .await;
    assert_eq!(
        resp.status,
        200,
        "{path}: {}",
        String::from_utf8_lossy(&resp.body)
    );
    let enc = resp
        .headers
        .get("content-encoding")
        .map(|v| v.to_str().unwrap().to_string());
    let gzipped = match enc.as_deref() {
        None => false,
        Some("gzip") => true,
        Some(other) => panic!("{path}: unexpected Content-Encoding {other}"),
    };
    let plain = if gzipped {
        let mut out = Vec::new();
        GzDecoder::new(&resp.body[..])
            .read_to_end(&mut out)
            .unwrap_or_else(|e| panic!("{path}: not gzip: {e}"));
        Bytes::from(out)
    } else {
        resp.body.clone()
    };
    Answer {
        gzipped,
        vary: resp
            .headers
            .get_all("vary")
            .iter()
            .any(|v| v.to_str().unwrap().contains("Accept-Encoding")),
        source: resp.source().map(str::to_string),
        plain,
    }
}

/// "big": 40 configmaps of ~5 KiB (a ~200 KiB list); "small": two tiny ones.
async fn seeded() -> (SimHandle, GatewayHandle) {
    let sim = start(SimConfig::default()).await.unwrap();
    for i in 0..40 {
        put_configmap(&sim, "big", &format!("cm-{i:02}"), 5000);
    }
    put_configmap(&sim, "big", "huge", 200 * 1024);
    put_configmap(&sim, "small", "a", 10);
    put_configmap(&sim, "small", "b", 10);
    let gw = gateway(&sim.url()).await;
    (sim, gw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_answers_are_gzipped_by_the_simulator_and_the_cache_alike() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/configmaps?resourceVersion=0", |_| true).await;
    for (path, big) in [
        ("/api/v1/configmaps?resourceVersion=0", true),
        ("/api/v1/namespaces/big/configmaps?resourceVersion=0", true),
        (
            "/api/v1/namespaces/small/configmaps?resourceVersion=0",
            false,
        ),
        // A selector that keeps the list small: decided on the filtered body.
        (
            "/api/v1/configmaps?resourceVersion=0&labelSelector=size%3Dsmall",
            false,
        ),
        (
            "/api/v1/namespaces/big/configmaps/huge?resourceVersion=0",
            true,
        ),
        (
            "/api/v1/namespaces/big/configmaps/cm-01?resourceVersion=0",
            false,
        ),
    ] {
        let direct_plain = fetch(&sim.url(), path, false).await;
        let direct_gz = fetch(&sim.url(), path, true).await;
        let through_plain = fetch(&gw.url(), path, false).await;
        let through_gz = fetch(&gw.url(), path, true).await;
        assert_eq!(through_plain.source.as_deref(), Some("cache"), "{path}");
        assert_eq!(through_gz.source.as_deref(), Some("cache"), "{path}");
        assert!(
            !direct_plain.gzipped && !through_plain.gzipped,
            "{path}: not asked"
        );
        assert_eq!(direct_gz.gzipped, big, "{path}: simulator");
        assert_eq!(through_gz.gzipped, big, "{path}: cache");
        assert_eq!(direct_gz.vary, big, "{path}: simulator Vary");
        assert_eq!(through_gz.vary, big, "{path}: cache Vary");
        assert_eq!(
            (direct_plain.plain.len() > GZIP_THRESHOLD),
            big,
            "{path}: the test's sizes"
        );
        // Same bytes, compressed or not, from either server.
        assert_eq!(direct_gz.plain, direct_plain.plain, "{path}: simulator");
        assert_eq!(through_gz.plain, through_plain.plain, "{path}: cache");
        assert_eq!(
            through_plain.plain, direct_plain.plain,
            "{path}: cache vs simulator"
        );
    }
    // A consistent read comes from the cache once it is proven fresh
    // (docs/consistency.md), gzipped by the same rule.
    let path = "/api/v1/configmaps";
    let through = fetch(&gw.url(), path, true).await;
    assert_eq!(through.source.as_deref(), Some("cache"));
    assert!(through.gzipped, "{path}: gzipped");
    assert_eq!(through.plain, fetch(&sim.url(), path, false).await.plain);
}

/// Grows `small/edge` until `path` answers exactly `target` bytes uncompressed.
async fn size_exactly(sim: &SimHandle, gw: &GatewayHandle, path: &str, target: usize) {
    let mut data_len = target - 600;
    for _ in 0..6 {
        let rv = put_configmap(sim, "small", "edge", data_len);
        let len = fetch(&sim.url(), path, false).await.plain.len();
        if len == target {
            // The cache must be at this state too (NotOlderThan waits for it).
            let fresh = path.replace("resourceVersion=0", &format!("resourceVersion={rv}"));
            let through = fetch(&gw.url(), &fresh, false).await;
            assert_eq!(through.source.as_deref(), Some("cache"));
            assert_eq!(through.plain.len(), target, "{fresh}: cache body size");
            return;
        }
        data_len = data_len + target - len;
    }
    panic!("{path}: could not size the answer to {target} bytes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gzip_starts_above_128_kib_exactly() {
    let (sim, gw) = seeded().await;
    wait_until_cached(&gw.url(), "/api/v1/configmaps?resourceVersion=0", |_| true).await;
    for path in [
        "/api/v1/namespaces/small/configmaps/edge?resourceVersion=0",
        "/api/v1/namespaces/small/configmaps?resourceVersion=0",
    ] {
        for (target, want) in [(GZIP_THRESHOLD, false), (GZIP_THRESHOLD + 1, true)] {
            size_exactly(&sim, &gw, path, target).await;
            let direct = fetch(&sim.url(), path, true).await;
            let through = fetch(&gw.url(), path, true).await;
            assert_eq!(direct.plain.len(), target);
            assert_eq!(direct.gzipped, want, "{path} at {target} bytes: simulator");
            assert_eq!(through.gzipped, want, "{path} at {target} bytes: cache");
            assert_eq!(through.plain, direct.plain, "{path} at {target} bytes");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_and_the_python_client_read_gzipped_cache_answers() {
    let (sim, gw) = seeded().await;
    let path = "/api/v1/configmaps?resourceVersion=0";
    wait_until_cached(&gw.url(), path, |_| true).await;
    let direct: Value =
        serde_json::from_slice(&fetch(&sim.url(), path, false).await.plain).unwrap();
    assert!(fetch(&gw.url(), path, true).await.gzipped);
    let lists_before = sim.stats().lists("configmaps");

    // kubectl's Go transport asks for gzip on its own and inflates transparently.
    let kubectl = support::Kubectl::new(&gw.url());
    let raw = kubectl.ok(&["get", "--raw", path]).await;
    let raw: Value = serde_json::from_str(&raw).expect("kubectl printed JSON");
    assert_eq!(raw["items"], direct["items"]);
    assert_eq!(raw["metadata"], direct["metadata"]);

    // The Python client (urllib3 inflates when the answer says gzip).
    let out = support::python::run(
        "list_gzip.py",
        &[kubectl.kubeconfig().to_str().unwrap()],
        Duration::from_secs(60),
    )
    .await;
    assert!(out.status.success(), "{}\n{}", out.stdout, out.stderr);
    let py: Value = serde_json::from_str(out.stdout.trim()).expect("python printed JSON");
    let names: Vec<String> = direct["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["metadata"]["namespace"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(py["gzip"]["contentEncoding"], "gzip", "{py}");
    assert_eq!(py["gzip"]["names"], json!(names));
    assert_eq!(
        py["gzip"]["resourceVersion"],
        direct["metadata"]["resourceVersion"]
    );
    assert_eq!(py["default"]["names"], json!(names));
    assert_eq!(
        sim.stats().lists("configmaps"),
        lists_before,
        "both clients were answered by the cache"
    );
}
