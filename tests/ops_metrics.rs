//! Operating watchgate (issue 6): `/metrics` moves as requests are served, its text parses
//! with prometheus_client's own parser, and `/readyz` follows the upstream and the
//! `--cache` resources' sync.
//!
//! The metrics recorder is process-global and the tests of this binary may run in one
//! process in parallel (`cargo test`), so every assertion is a delta over series that
//! only one test touches. A scrape refreshes the cache series of *its* gateway's caches and
//! renders the process's: two tests caching the same resource would read each other's
//! gauges. So each test that reads per-resource series has its resource to itself:
//!
//! | resource | test |
//! | --- | --- |
//! | pods | `rv0_lists_count_as_cache_requests_and_reach_upstream_at_most_once` |
//! | configmaps | `open_watches_show_in_the_long_running_gauge` |
//! | namespaces | `metrics_text_parses_with_prometheus_client` |
//! | events | `cache_bytes_sync_time_upstream_watches_and_process_metrics_are_exported` |
//! | endpoints | `metrics_can_be_turned_off` (no other test may create an endpoints series) |
//! | services | `n_cached_watchers_show_as_n_watchers_and_one_upstream_watch` |
//! | secrets | `a_watcher_that_falls_past_the_history_is_counted_as_slow` |
//! | widgets.example.com | `fan_out_counters_move_and_watchers_end_by_timeout_and_client_gone` |
//! | made-up ones, gadgets.real.example | `made_up_resources_create_no_label_values_whatever_the_answer` |
//! | nodes | the `/readyz` tests, which never read `/metrics` |
//!
//! `watchgate_upstream_up` is process-wide: tests/ops_upstream.rs checks it in a process
//! of its own.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use watchgate::cache::registry::CachePolicy;
use watchgate::config::GatewayConfig;
use watchgate::sim::resources::find;
use watchgate::sim::Mutation;

use support::metrics::{sample, samples};
use support::objects::{configmap, pod};
use support::process;
use support::servers::{start_gateway_with, start_sim, GatewayServer};
use support::wait::wait_until;
use support::{tools, Http, EVENT_TIMEOUT};

async fn gateway_caching(upstream: &str, prewarm: &[&str]) -> GatewayServer {
    let mut cfg = GatewayConfig::for_upstream_url(upstream).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: prewarm.iter().map(|s| s.to_string()).collect(),
        exclude: vec![],
    });
    start_gateway_with(cfg).await
}

fn admin(gw: &GatewayServer) -> Http {
    Http::new(&format!("http://{}", gw.handle().admin_addr()))
}

async fn scrape(gw: &GatewayServer) -> String {
    let resp = admin(gw).get("/metrics").await;
    assert_eq!(resp.status, 200, "/metrics: {}", resp.text());
    resp.text()
}

fn put_pod(sim: &watchgate::sim::SimHandle, name: &str) {
    put(sim, "pods", name, pod("default", name).build());
}

/// Writes `obj` as `default/name` of the core resource `resource`, straight into the store.
fn put(sim: &watchgate::sim::SimHandle, resource: &str, name: &str, obj: serde_json::Value) {
    let rt = find("", "v1", resource).unwrap();
    sim.store()
        .mutate(rt, "default", name, |_| Ok(Mutation::Put(obj)))
        .unwrap()
        .unwrap();
}

async fn wait_ready(gw: &GatewayServer) {
    let admin = admin(gw);
    wait_until("/readyz answers 200", EVENT_TIMEOUT, || {
        let admin = admin.clone();
        async move { admin.get("/readyz").await.status == 200 }
    })
    .await;
}

const CACHED_PODS: &[(&str, &str)] = &[
    ("verb", "list"),
    ("resource", "pods"),
    ("scope", "cluster"),
    ("code", "200"),
    ("source", "cache"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv0_lists_count_as_cache_requests_and_reach_upstream_at_most_once() {
    let sim = start_sim().await;
    for i in 0..3 {
        put_pod(sim.handle(), &format!("p{i}"));
    }
    let gw = gateway_caching(sim.url(), &["pods"]).await;
    wait_ready(&gw).await;

    let before = scrape(&gw).await;
    let lists_before = sim.handle().stats().lists("pods");
    let http = Http::new(gw.url());
    for i in 0..100 {
        let resp = http.get("/api/v1/pods?resourceVersion=0").await;
        assert_eq!(resp.status, 200, "list {i}: {}", resp.text());
        assert_eq!(
            resp.source(),
            Some("cache"),
            "list {i} was not served from the cache"
        );
    }
    // A get of a pod that does not exist, answered by the cache: a 404 under its own code.
    let missing = http
        .get("/api/v1/namespaces/default/pods/nope?resourceVersion=0")
        .await;
    assert_eq!(missing.status, 404, "{}", missing.text());
    assert_eq!(missing.headers["x-watchgate-source"], "cache");
    let after = scrape(&gw).await;

    let delta = sample(&after, "watchgate_requests_total", CACHED_PODS)
        - sample(&before, "watchgate_requests_total", CACHED_PODS);
    assert_eq!(delta, 100.0, "cache-served pod lists counted:\n{after}");
    let upstream_lists = sim.handle().stats().lists("pods") - lists_before;
    assert!(
        upstream_lists <= 1,
        "100 RV=0 lists caused {upstream_lists} upstream lists"
    );
    // Durations are observed for each of them, under the same bounded labels, the code
    // included.
    let timed = |labels: &[(&str, &str)]| {
        sample(&after, "watchgate_request_duration_seconds_count", labels)
            - sample(&before, "watchgate_request_duration_seconds_count", labels)
    };
    assert_eq!(timed(CACHED_PODS), 100.0, "durations observed:\n{after}");
    let missing_get = &[
        ("verb", "get"),
        ("resource", "pods"),
        ("scope", "resource"),
        ("code", "404"),
        ("source", "cache"),
    ];
    assert_eq!(timed(missing_get), 1.0, "the 404's duration:\n{after}");
    // Every duration series carries a code.
    for (labels, _) in samples(&after, "watchgate_request_duration_seconds_count", &[]) {
        assert!(
            labels.get("code").is_some_and(|c| c.len() == 3),
            "{labels:?}"
        );
    }
    // Cache answers take microseconds: the buckets go below kube-apiserver's 5 ms floor.
    let les: Vec<f64> = samples(
        &after,
        "watchgate_request_duration_seconds_bucket",
        CACHED_PODS,
    )
    .map(|(l, _)| l["le"].parse().unwrap())
    .collect();
    assert_eq!(
        les.len(),
        watchgate::metrics::DURATION_BUCKETS.len() + 1,
        "{les:?}"
    );
    assert!(les[0] <= 0.00025, "{les:?}");

    // The cache gauges, refreshed at scrape time.
    let pods = &[("group", ""), ("resource", "pods")];
    assert_eq!(sample(&after, "watchgate_cache_synced", pods), 1.0);
    assert_eq!(sample(&after, "watchgate_cache_objects", pods), 3.0);
    assert!(sample(&after, "watchgate_cache_resource_version", pods) > 0.0);
    assert!(sample(&after, "watchgate_reflector_lists_total", pods) >= 1.0);
    assert!(
        sample(
            &after,
            "watchgate_upstream_requests_total",
            &[("code", "200")]
        ) >= 1.0
    );

    // No series carries a namespace, name, user or resourceVersion label.
    for line in after.lines().filter(|l| l.starts_with("watchgate_")) {
        for banned in [
            "namespace=",
            "name=",
            "user=",
            "resourceVersion=",
            "resource_version=",
        ] {
            assert!(
                !line.contains(&format!("{{{banned}")) && !line.contains(&format!(",{banned}")),
                "unbounded label in {line}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_watches_show_in_the_long_running_gauge() {
    let sim = start_sim().await;
    let gw = gateway_caching(sim.url(), &[]).await;
    let http = Http::new(gw.url());
    let cms = &[("group", ""), ("resource", "configmaps")];
    let base = sample(&scrape(&gw).await, "watchgate_long_running_requests", cms);

    // However `watch` is spelt: kube-apiserver reads all but `0` and `false` as true.
    let mut watches = Vec::new();
    for w in ["watch", "watch=", "watch=True"] {
        watches.push(
            http.watch(&format!("/api/v1/namespaces/default/configmaps?{w}"))
                .await,
        );
    }
    let open = sample(&scrape(&gw).await, "watchgate_long_running_requests", cms) - base;
    assert_eq!(open, 3.0, "three watches open");
    // Watches are not requests in flight, and are not timed as requests.
    drop(watches);

    // A closed watch is noticed when its stream is next written to: make an event.
    let direct = Http::new(sim.url());
    let resp = direct
        .post_json(
            "/api/v1/namespaces/default/configmaps",
            &configmap("", "tick").build(),
        )
        .await;
    assert_eq!(resp.status, 201, "{}", resp.text());
    let gw_ref = &gw;
    wait_until(
        "the closed watches leave the gauge",
        EVENT_TIMEOUT,
        || async move {
            sample(
                &scrape(gw_ref).await,
                "watchgate_long_running_requests",
                cms,
            ) == base
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_text_parses_with_prometheus_client() {
    let sim = start_sim().await;
    let gw = gateway_caching(sim.url(), &["namespaces"]).await;
    wait_ready(&gw).await;
    let http = Http::new(gw.url());
    assert_eq!(
        http.get("/api/v1/namespaces?resourceVersion=0")
            .await
            .status,
        200
    );
    assert_eq!(http.get("/api/v1/namespaces/default").await.status, 200);
    assert_eq!(http.get("/version").await.status, 200);
    let text = scrape(&gw).await;

    let mut cmd = tokio::process::Command::new(tools::python());
    cmd.arg(tools::python_scripts().join("parse_metrics.py"));
    let out = process::run(cmd, Some(text.as_bytes()), Duration::from_secs(60)).await;
    assert!(
        out.status.success(),
        "prometheus_client rejected the text: {}\n{text}",
        out.stderr
    );
    let families: BTreeMap<String, String> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let mut it = l.split(' ');
            Some((it.next()?.to_string(), it.next()?.to_string()))
        })
        .collect();
    // prometheus_client names counter families without their `_total` suffix.
    for (name, kind) in [
        ("watchgate_requests", "counter"),
        ("watchgate_request_duration_seconds", "histogram"),
        ("watchgate_requests_in_flight", "gauge"),
        ("watchgate_upstream_requests", "counter"),
        ("watchgate_upstream_watches", "gauge"),
        ("watchgate_cache_objects", "gauge"),
        ("watchgate_cache_synced", "gauge"),
        ("watchgate_reflector_lists", "counter"),
        ("watchgate_cache_bytes", "gauge"),
        ("watchgate_cache_sync_duration_seconds", "gauge"),
        ("watchgate_watchers", "gauge"),
        ("watchgate_terminated_watchers", "counter"),
        ("watchgate_watch_cache_history_events", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_cpu_seconds", "counter"),
        ("process_open_fds", "gauge"),
    ] {
        assert_eq!(
            families.get(name).map(String::as_str),
            Some(kind),
            "family {name} in {families:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_waits_for_the_cached_resources_to_sync() {
    let sim = start_sim().await;
    // Every simulator answer takes 1.5 s: discovery and the first list need at least two,
    // so the gateway cannot be ready when /readyz is first asked.
    sim.handle()
        .faults()
        .set_latency(Duration::from_millis(1500));
    let gw = gateway_caching(sim.url(), &["nodes"]).await;
    let admin = admin(&gw);

    let resp = admin.get("/readyz?verbose").await;
    assert_eq!(resp.status, 500, "{}", resp.text());
    let text = resp.text();
    assert!(text.contains("[+]ping ok"), "{text}");
    assert!(text.contains("[-]cache-nodes failed: not "), "{text}");
    assert!(text.trim_end().ends_with("readyz check failed"), "{text}");
    // Liveness does not depend on the upstream.
    assert_eq!(admin.get("/livez").await.status, 200);
    assert_eq!(admin.get("/healthz").await.status, 200);

    sim.handle().faults().set_latency(Duration::ZERO);
    wait_ready(&gw).await;
    let resp = admin.get("/readyz?verbose").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let text = resp.text();
    for line in [
        "[+]ping ok",
        "[+]upstream ok",
        "[+]cache-nodes ok",
        "readyz check passed",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    assert_eq!(admin.get("/readyz").await.text(), "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_bytes_sync_time_upstream_watches_and_process_metrics_are_exported() {
    let sim = start_sim().await;
    let event = |name: &str| {
        json!({
            "kind": "Event", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "default"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p"},
            "reason": "Sized", "message": "x".repeat(200),
        })
    };
    put(sim.handle(), "events", "sized-0", event("sized-0"));
    let gw = gateway_caching(sim.url(), &["events"]).await;
    wait_ready(&gw).await;
    let events = &[("group", ""), ("resource", "events")];
    let text = scrape(&gw).await;
    // The cached JSON of the one event: a get adds `kind` and `apiVersion`, which list
    // items (and so the cache's copies) do not carry.
    let one = Http::new(gw.url())
        .get("/api/v1/namespaces/default/events/sized-0?resourceVersion=0")
        .await;
    assert_eq!(one.status, 200);
    let bytes = sample(&text, "watchgate_cache_bytes", events);
    assert!(
        bytes > 0.0 && bytes <= one.body.len() as f64 && bytes >= one.body.len() as f64 - 40.0,
        "cache bytes {bytes} for one event of {} bytes:\n{text}",
        one.body.len()
    );
    assert!(sample(&text, "watchgate_cache_sync_duration_seconds", events) > 0.0);
    // Its reflector follows one open upstream watch (the watch-list's stream).
    assert_eq!(sample(&text, "watchgate_upstream_watches", events), 1.0);
    // Upstream durations carry the code, like the upstream request counter.
    assert!(
        sample(
            &text,
            "watchgate_upstream_request_duration_seconds_count",
            &[("code", "200")]
        ) >= 1.0,
        "{text}"
    );
    assert_eq!(sim.handle().stats().watches("events"), 1);

    put(sim.handle(), "events", "sized-1", event("sized-1"));
    let gw_ref = &gw;
    wait_until(
        "a second event adds to the cache bytes",
        EVENT_TIMEOUT,
        || async move {
            let text = scrape(gw_ref).await;
            sample(&text, "watchgate_cache_objects", events) == 2.0
                && sample(&text, "watchgate_cache_bytes", events) > bytes * 1.5
        },
    )
    .await;

    // Process metrics, as every Prometheus client library names them.
    let text = scrape(&gw).await;
    // metrics-process exports CPU time as an integer counter: a young test process may
    // still be at 0 seconds.
    assert!(
        text.lines()
            .any(|l| l.starts_with("process_cpu_seconds_total ")),
        "process_cpu_seconds_total missing:\n{text}"
    );
    for name in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        assert!(
            sample(&text, name, &[]) > 0.0,
            "{name} missing or 0:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_an_upstream_that_comes_up_after_the_gateway() {
    // A free port with nothing listening yet: discovery fails at start-up.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = gateway_caching(&format!("http://127.0.0.1:{port}"), &["nodes"]).await;
    let admin = admin(&gw);
    wait_until("discovery has been tried", EVENT_TIMEOUT, || {
        let admin = admin.clone();
        async move {
            let text = admin.get("/readyz?verbose").await.text();
            text.contains("[-]upstream failed") && text.contains("[-]cache-nodes failed: not ")
        }
    })
    .await;

    // The upstream appears; no client request is made: the background retry must notice.
    let mut cfg = support::servers::cluster_config();
    cfg.addr = ([127, 0, 0, 1], port).into();
    let _sim = support::servers::start_sim_with(cfg).await;
    let admin_ref = &admin;
    wait_until(
        "/readyz turns 200 after the upstream comes up",
        Duration::from_secs(60),
        || async move { admin_ref.get("/readyz").await.status == 200 },
    )
    .await;
    let text = admin.get("/readyz?verbose").await.text();
    assert!(text.contains("[+]cache-nodes ok"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_does_not_depend_on_downstream_clients() {
    let sim = start_sim().await;
    let gw = gateway_caching(sim.url(), &["nodes"]).await;
    wait_ready(&gw).await;
    let admin = admin(&gw);
    // Misbehaving clients: garbage requests, bad paths, a watch abandoned mid-stream,
    // half-sent requests left open.
    let http = Http::new(gw.url());
    for path in [
        "/api/v1/nodes?labelSelector=%%%",
        "/api/v1/nodes?resourceVersion=abc",
        "/apis/nope.example/v1/things",
        "/api/v1/nodes?watch=true&timeoutSeconds=-1",
    ] {
        let status = http.get(path).await.status;
        assert!(
            status.is_client_error() || status.is_success(),
            "{path}: {status}"
        );
        assert_eq!(admin.get("/readyz").await.status, 200, "after {path}");
    }
    let mut half_open = Vec::new();
    for _ in 0..20 {
        let mut s = tokio::net::TcpStream::connect(gw.handle().addr())
            .await
            .unwrap();
        use tokio::io::AsyncWriteExt;
        s.write_all(b"GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        half_open.push(s);
    }
    let w = http.watch("/api/v1/nodes?watch=true").await;
    drop(w);
    assert_eq!(admin.get("/readyz").await.status, 200);
    assert_eq!(admin.get("/readyz?verbose").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_can_be_turned_off() {
    let sim = start_sim().await;
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.metrics = false;
    let off = start_gateway_with(cfg).await;
    // A gateway with metrics on, in the same process, to read the global registry.
    let on = gateway_caching(sim.url(), &[]).await;

    let resp = admin(&off).get("/metrics").await;
    assert_eq!(resp.status, 404, "{}", resp.text());
    assert_eq!(resp.json()["reason"], "NotFound");
    // Still served; not counted. Only this test touches `endpoints`.
    let http = Http::new(off.url());
    for _ in 0..5 {
        let status = http
            .get("/api/v1/namespaces/default/endpoints")
            .await
            .status;
        assert_eq!(status, 200);
    }
    let text = scrape(&on).await;
    assert!(
        !text.contains("resource=\"endpoints\""),
        "a metrics-off gateway recorded requests:\n{text}"
    );
    // The same requests through the metrics-on gateway are counted (the check above
    // would pass vacuously otherwise).
    let http_on = Http::new(on.url());
    let status = http_on
        .get("/api/v1/namespaces/default/endpoints")
        .await
        .status;
    assert_eq!(status, 200);
    assert!(scrape(&on).await.contains("resource=\"endpoints\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n_cached_watchers_show_as_n_watchers_and_one_upstream_watch() {
    let sim = start_sim().await;
    let gw = gateway_caching(sim.url(), &["services"]).await;
    wait_ready(&gw).await;
    let svcs = &[("group", ""), ("resource", "services")];
    let http = Http::new(gw.url());
    const N: usize = 4;
    let mut watches = Vec::new();
    for _ in 0..N {
        let w = http
            .watch("/api/v1/namespaces/default/services?watch=true&resourceVersion=0")
            .await;
        watches.push(w);
    }
    let gw_ref = &gw;
    wait_until(
        "the watchers gauge counts the N cached watchers",
        EVENT_TIMEOUT,
        || async move {
            let text = scrape(gw_ref).await;
            sample(&text, "watchgate_watchers", svcs) == N as f64
        },
    )
    .await;
    let text = scrape(&gw).await;
    assert_eq!(
        sample(&text, "watchgate_long_running_requests", svcs),
        N as f64,
        "{text}"
    );
    assert_eq!(
        sample(&text, "watchgate_upstream_watches", svcs),
        1.0,
        "{text}"
    );
    assert_eq!(
        sim.handle().stats().watches("services"),
        1,
        "{}",
        sim.handle().stats().to_json()
    );
    drop(watches);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_that_falls_past_the_history_is_counted_as_slow() {
    use tokio::io::AsyncWriteExt;

    let sim = start_sim().await;
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["secrets".into()],
        exclude: vec![],
    });
    // A history of a few events: a watcher that stops reading falls past it quickly.
    cfg.watch.history_bytes = 256 * 1024;
    let gw = start_gateway_with(cfg).await;
    wait_ready(&gw).await;
    let secrets = &[("group", ""), ("resource", "secrets"), ("reason", "slow")];
    let before = sample(
        &scrape(&gw).await,
        "watchgate_terminated_watchers_total",
        secrets,
    );
    let rv = Http::new(gw.url())
        .get("/api/v1/namespaces/default/secrets?resourceVersion=0")
        .await
        .json()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();

    // A client that asks for a watch and never reads, with a tiny receive buffer.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stalled = socket.connect(gw.handle().addr()).await.unwrap();
    stalled
        .write_all(
            format!(
                "GET /api/v1/namespaces/default/secrets?watch=true&resourceVersion={rv} HTTP/1.1\r\nHost: x\r\nAccept: application/json\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();

    // 200 secrets of 64 KiB (12.8 MB): far more than the socket buffers, the watcher's
    // queue and the 256 KiB history hold together.
    let direct = Http::new(sim.url());
    let blob = "A".repeat(64 * 1024);
    for i in 0..200 {
        let resp = direct
            .post_json(
                "/api/v1/namespaces/default/secrets",
                &json!({"apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": format!("s{i}")},
                        "data": {"blob": blob}}),
            )
            .await;
        assert_eq!(resp.status, 201, "{}", resp.text());
    }
    let gw_ref = &gw;
    // It finds out that the history moved past it when it reads again: its stream ends
    // (cleanly) and the terminated counter says why.
    let reader = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut buf = vec![0u8; 1 << 16];
        let mut tail = Vec::new();
        loop {
            match stalled.read(&mut buf).await {
                Ok(0) | Err(_) => return tail,
                Ok(n) => {
                    tail.extend_from_slice(&buf[..n]);
                    let keep = tail.len().saturating_sub(16);
                    tail.drain(..keep);
                    if tail.ends_with(b"0\r\n\r\n") {
                        return tail;
                    }
                }
            }
        }
    });
    wait_until(
        "the stalled watcher is ended as slow",
        Duration::from_secs(60),
        || async move {
            sample(
                &scrape(gw_ref).await,
                "watchgate_terminated_watchers_total",
                secrets,
            ) - before
                >= 1.0
        },
    )
    .await;
    let tail = tokio::time::timeout(EVENT_TIMEOUT, reader)
        .await
        .expect("the slow watcher's stream ends")
        .unwrap();
    assert!(
        tail.ends_with(b"0\r\n\r\n"),
        "the stream ends with the last chunk: {:?}",
        String::from_utf8_lossy(&tail)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_without_caches_becomes_ready_once_the_upstream_answers() {
    // Nothing listens on this port yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = GatewayConfig::for_upstream_url(&format!("http://127.0.0.1:{port}"))
        .expect("gateway config");
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let admin = admin(&gw);
    // Unreachable: not ready, however often it is asked (each time probes and fails).
    for _ in 0..3 {
        let resp = admin.get("/readyz?verbose").await;
        assert_eq!(resp.status, 500, "{}", resp.text());
        let text = resp.text();
        assert!(
            text.contains("[-]upstream failed: the upstream has not answered yet"),
            "{text}"
        );
        assert!(
            !text.contains("cache-"),
            "no --cache, no cache checks: {text}"
        );
    }

    // The upstream comes up. No client request is sent: only /readyz is asked, as the
    // kubelet would.
    let mut sim_cfg = support::servers::cluster_config();
    sim_cfg.addr = ([127, 0, 0, 1], port).into();
    let _sim = support::servers::start_sim_with(sim_cfg).await;
    let admin_ref = &admin;
    wait_until(
        "/readyz turns 200 once the upstream answers",
        EVENT_TIMEOUT,
        || async move { admin_ref.get("/readyz").await.status == 200 },
    )
    .await;
    let text = admin.get("/readyz?verbose").await.text();
    assert!(text.contains("[+]upstream ok"), "{text}");
}

/// A stub upstream that answers every path under `/apis/made.up.example/` and `madeup*`
/// with the next of 403, 401, 400, 404, 500 and 422 (a Status each), and
/// `/apis/real.example/v1/gadgets` with 200 the first time and 403 after.
async fn refusing_stub() -> support::stub::Stub {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let n = std::sync::Arc::new(AtomicUsize::new(0));
    let gadgets = std::sync::Arc::new(AtomicUsize::new(0));
    support::stub::Stub::start(support::stub::handler(
        move |req: http::Request<hyper::body::Incoming>| {
            let (n, gadgets) = (n.clone(), gadgets.clone());
            async move {
                let code = if req.uri().path() == "/apis/real.example/v1/gadgets" {
                    if gadgets.fetch_add(1, Ordering::SeqCst) == 0 {
                        200
                    } else {
                        403
                    }
                } else {
                    [403, 401, 400, 404, 500, 422][n.fetch_add(1, Ordering::SeqCst) % 6]
                };
                let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                  "message": "no", "code": code});
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(watchgate::body::full(body.to_string()))
                    .unwrap()
            }
        },
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_up_resources_create_no_label_values_whatever_the_answer() {
    let stub = refusing_stub().await;
    let mut cfg = GatewayConfig::for_upstream_url(&stub.url()).expect("gateway config");
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let http = Http::new(gw.url());
    let before = scrape(&gw).await;
    let mut codes = BTreeMap::<u16, f64>::new();
    for i in 0..60 {
        for path in [
            format!("/apis/made.up.example/v1/things{i}"),
            format!("/api/v1/namespaces/default/madeup{i}?watch=true"),
        ] {
            let status = http.get(&path).await.status;
            *codes.entry(status.as_u16()).or_default() += 1.0;
        }
    }
    assert_eq!(
        codes.keys().copied().collect::<Vec<_>>(),
        [400, 401, 403, 404, 422, 500],
        "the stub's answers"
    );
    let after = scrape(&gw).await;
    for line in after.lines().filter(|l| l.starts_with("watchgate_")) {
        assert!(
            !line.contains("made.up") && !line.contains("things") && !line.contains("madeup"),
            "a made-up resource became a label value: {line}"
        );
    }
    // Each request is still counted, under empty group and resource.
    for (code, n) in &codes {
        let code = code.to_string();
        let blank = [("group", ""), ("resource", ""), ("code", code.as_str())];
        let counted = sample(&after, "watchgate_requests_total", &blank)
            - sample(&before, "watchgate_requests_total", &blank);
        assert!(
            counted >= *n,
            "{n} answers {code} counted {counted} times:\n{after}"
        );
    }

    // A resource the upstream serves keeps its labels from its first success on, failures
    // included; so do the gateway's own answers for it (here: the upstream gone).
    assert_eq!(http.get("/apis/real.example/v1/gadgets").await.status, 200);
    assert_eq!(http.get("/apis/real.example/v1/gadgets").await.status, 403);
    let dead = start_gateway_with({
        let mut cfg =
            GatewayConfig::for_upstream_url("http://127.0.0.1:1").expect("gateway config");
        cfg.cache = None;
        cfg
    })
    .await;
    let resp = Http::new(dead.url())
        .get("/apis/real.example/v1/gadgets")
        .await;
    assert_eq!(resp.status, 503, "{}", resp.text());
    assert_eq!(resp.headers["x-watchgate-source"], "gateway");
    let text = scrape(&gw).await;
    let gadgets = |code, source| {
        sample(
            &text,
            "watchgate_requests_total",
            &[
                ("group", "real.example"),
                ("resource", "gadgets"),
                ("code", code),
                ("source", source),
            ],
        )
    };
    assert_eq!(gadgets("200", "upstream"), 1.0, "{text}");
    assert_eq!(gadgets("403", "upstream"), 1.0, "{text}");
    assert_eq!(gadgets("503", "gateway"), 1.0, "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fan_out_counters_move_and_watchers_end_by_timeout_and_client_gone() {
    let sim = start_sim().await;
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.cache = Some(CachePolicy {
        prewarm: vec!["widgets.example.com".into()],
        exclude: vec![],
    });
    cfg.watch.bookmark_interval = Duration::from_millis(200);
    let gw = start_gateway_with(cfg).await;
    wait_ready(&gw).await;
    let widgets = &[("group", "example.com"), ("resource", "widgets")];
    let with = |reason: &'static str| {
        [
            ("group", "example.com"),
            ("resource", "widgets"),
            ("reason", reason),
        ]
    };
    let before = scrape(&gw).await;
    let delta = |text: &str, name: &str, labels: &[(&str, &str)]| {
        sample(text, name, labels) - sample(&before, name, labels)
    };
    let http = Http::new(gw.url());
    const PATH: &str = "/apis/example.com/v1/namespaces/default/widgets";

    // timeoutSeconds=1, served from the cache: the stream ends on its own.
    let mut short = http
        .watch(&format!(
            "{PATH}?watch=true&resourceVersion=0&timeoutSeconds=1"
        ))
        .await;
    while let Some(ev) = short.next_within(EVENT_TIMEOUT).await.map(|e| e.json) {
        assert_eq!(
            ev["type"], "BOOKMARK",
            "nothing else happens meanwhile: {ev}"
        );
    }
    let gw_ref = &gw;
    let delta_ref = &delta;
    wait_until(
        "the timed-out watcher is counted",
        EVENT_TIMEOUT,
        || async move {
            let text = scrape(gw_ref).await;
            delta_ref(
                &text,
                "watchgate_terminated_watchers_total",
                &with("timeout"),
            ) == 1.0
        },
    )
    .await;

    // A watcher with bookmarks that receives three events.
    let mut w = http
        .watch(&format!(
            "{PATH}?watch=true&resourceVersion=0&allowWatchBookmarks=true"
        ))
        .await;
    let direct = Http::new(sim.url());
    for i in 0..3 {
        let resp = direct
            .post_json(
                PATH,
                &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                        "metadata": {"name": format!("w{i}")}}),
            )
            .await;
        assert_eq!(resp.status, 201, "{}", resp.text());
    }
    let (mut added, mut bookmarks) = (0, 0);
    while added < 3 || bookmarks == 0 {
        let ev = w.next("an event").await.json;
        match ev["type"].as_str() {
            Some("ADDED") => added += 1,
            Some("BOOKMARK") => bookmarks += 1,
            _ => panic!("unexpected {ev}"),
        }
    }
    wait_until(
        "delivered, bytes and bookmarks move",
        EVENT_TIMEOUT,
        || async move {
            let text = scrape(gw_ref).await;
            delta_ref(&text, "watchgate_watch_events_delivered_total", widgets) == 3.0
                && delta_ref(&text, "watchgate_watch_bytes_written_total", widgets) > 0.0
                && delta_ref(&text, "watchgate_watch_bookmarks_total", widgets) >= 1.0
        },
    )
    .await;

    // Its client goes away; the next write to the stream notices.
    drop(w);
    let resp = direct
        .post_json(
            PATH,
            &json!({"apiVersion": "example.com/v1", "kind": "Widget",
                    "metadata": {"name": "w3"}}),
        )
        .await;
    assert_eq!(resp.status, 201, "{}", resp.text());
    wait_until(
        "the abandoned watcher is counted",
        EVENT_TIMEOUT,
        || async move {
            let text = scrape(gw_ref).await;
            delta_ref(
                &text,
                "watchgate_terminated_watchers_total",
                &with("client_gone"),
            ) == 1.0
                && sample(&text, "watchgate_watchers", widgets) == 0.0
        },
    )
    .await;
    let text = scrape(&gw).await;
    for reason in ["slow", "relist", "shutdown"] {
        assert_eq!(
            delta(&text, "watchgate_terminated_watchers_total", &with(reason)),
            0.0,
            "{reason}:\n{text}"
        );
    }
    assert_eq!(
        delta(
            &text,
            "watchgate_terminated_watchers_total",
            &with("timeout")
        ),
        1.0
    );

    // Dispatch takes microseconds: its histogram has buckets for them, not the request
    // histograms' (which start at 250 µs).
    let les: Vec<String> = samples(
        &text,
        "watchgate_watch_dispatch_duration_seconds_bucket",
        widgets,
    )
    .map(|(l, _)| l["le"].to_string())
    .collect();
    let want: Vec<String> = watchgate::metrics::DISPATCH_BUCKETS
        .iter()
        .map(|b| b.to_string())
        .chain(["+Inf".to_string()])
        .collect();
    assert_eq!(les, want, "dispatch buckets:\n{text}");
    assert!(watchgate::metrics::DISPATCH_BUCKETS[0] <= 0.000_005);
    assert_eq!(
        sample(
            &text,
            "watchgate_watch_dispatch_duration_seconds_count",
            widgets
        ),
        4.0,
        "one observation per upstream event:\n{text}"
    );
}
