//! The upstream connection pool (issue 16, item 1): forwarded watches never wedge other
//! requests, and at `--upstream-max-connections` a request is refused with a 429 Status
//! and `Retry-After` instead of waiting.
//!
//! The upstream is an HTTPS stub that speaks HTTP/2 through ALPN and allows 100 streams
//! per connection, kube-apiserver's default. Watches are sent the way client-go sends an
//! informer's watch (`allowWatchBookmarks=true&timeoutSeconds=…&watch=true`, no
//! resourceVersion, so the gateway forwards them).

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use support::metrics::sample;
use support::raw::{get, h2};
use support::servers::{start_gateway_with, start_sim};
use support::stub::{endless_body, handler, json_response, Stub, TlsStub};
use support::wait::within;
use support::{wait_until, Http};
use watchgate::config::GatewayConfig;

/// Whether kube-apiserver reads the query as a watch: its first `watch` parameter, by
/// `Convert_Slice_string_To_bool` (all but `0` and `false`, a bare `watch` included).
fn is_watch(query: &str) -> bool {
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == "watch")
        .is_some_and(|(_, v)| !(v == "0" || v.eq_ignore_ascii_case("false")))
}

/// What the stub upstream answers: an endless watch for every watch, a namespace for
/// anything else. Counts the watches it has been sent.
fn apiserver(watches: Arc<AtomicUsize>) -> support::stub::StubHandler {
    handler(move |req: Request<Incoming>| {
        let watches = watches.clone();
        async move {
            if req.uri().query().is_some_and(is_watch) {
                watches.fetch_add(1, Ordering::SeqCst);
                return Response::builder()
                    .header("content-type", "application/json")
                    .body(endless_body())
                    .unwrap();
            }
            json_response(
                StatusCode::OK,
                serde_json::json!({"kind": "Namespace", "apiVersion": "v1",
                                   "metadata": {"name": "default"}}),
            )
        }
    })
}

/// client-go's informer watch of one namespace's configmaps.
fn watch_path(i: usize) -> String {
    format!("/api/v1/namespaces/ns-{i}/configmaps?allowWatchBookmarks=true&timeoutSeconds=600&watch=true")
}

/// `n` forwarded watches over downstream HTTP/2 connections of 250 streams each; their
/// response heads, in order.
async fn open_watches(
    addr: std::net::SocketAddr,
    from: usize,
    n: usize,
) -> Vec<Response<Incoming>> {
    let mut conns = Vec::new();
    for _ in 0..n.div_ceil(250) {
        conns.push(h2(addr).await);
    }
    let sends = (0..n).map(|i| {
        let mut conn = conns[i / 250].clone();
        let req = Request::get(format!("http://{addr}{}", watch_path(from + i)))
            .header("accept", "application/json, */*")
            .body(watchgate::body::empty())
            .unwrap();
        async move { conn.send_request(req).await.expect("a response head") }
    });
    futures_util::future::join_all(sends).await
}

async fn scrape(gw: &support::servers::GatewayServer) -> String {
    Http::new(&format!("http://{}", gw.handle().admin_addr()))
        .get("/metrics")
        .await
        .text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_get_answers_while_a_thousand_forwarded_watches_hold_the_upstream() {
    let watches = Arc::new(AtomicUsize::new(0));
    let stub = TlsStub::start(apiserver(watches.clone()), 100).await;
    let mut cfg = GatewayConfig::for_upstream(stub.kube_config());
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let addr = gw.handle().addr();

    let open = within(
        "1,000 forwarded watches get their response heads",
        Duration::from_secs(60),
        open_watches(addr, 0, 1000),
    )
    .await;
    for (i, w) in open.iter().enumerate() {
        assert_eq!(w.status(), 200, "watch {i}");
        assert_eq!(support::http::source(w.headers()), Some("upstream"));
    }
    assert_eq!(
        watches.load(Ordering::SeqCst),
        1000,
        "every watch reached the upstream"
    );

    // Before the pool, every request queued behind the 100 streams of one connection.
    let started = Instant::now();
    let (parts, body) = within(
        "a GET answers while 1,000 forwarded watches hold upstream streams",
        Duration::from_secs(10),
        get(addr, "/api/v1/namespaces/default"),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(parts.status, 200, "{}", String::from_utf8_lossy(&body));
    println!("GET answered in {took:?} with 1,000 forwarded watches open");

    // Ten long-running connections of 100 streams, and the GET's own short one.
    let endpoint = format!("127.0.0.1:{}", stub.addr.port());
    let text = scrape(&gw).await;
    let at = |name: &str, class: &str| {
        sample(
            &text,
            name,
            &[("class", class), ("endpoint", endpoint.as_str())],
        )
    };
    assert_eq!(at("watchgate_upstream_streams", "long_running"), 1000.0);
    assert_eq!(at("watchgate_upstream_connections", "long_running"), 10.0);
    assert_eq!(at("watchgate_upstream_connections", "short"), 1.0);
    assert_eq!(
        stub.connections(),
        11,
        "10 long-running + 1 short connections"
    );
    drop(open);
}

/// A watch however `watch` is spelt (`?watch`, `watch=`, `watch=t`, …: kube-apiserver reads
/// all but `0` and `false` as true) is long-running to the pool: it goes on the
/// connections for streams, never on the one kept for short requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_spelling_of_watch_is_long_running_to_the_pool() {
    let watches = Arc::new(AtomicUsize::new(0));
    let stub = TlsStub::start(apiserver(watches.clone()), 100).await;
    let mut cfg = GatewayConfig::for_upstream(stub.kube_config());
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let addr = gw.handle().addr();
    let conn = h2(addr).await;
    let spellings = ["watch", "watch=", "watch=t", "watch=True", "watch=yes"];
    let sends = spellings.iter().map(|w| {
        let mut conn = conn.clone();
        let req = Request::get(format!("http://{addr}/api/v1/namespaces/a/configmaps?{w}"))
            .body(watchgate::body::empty())
            .unwrap();
        async move { conn.send_request(req).await.expect("a response head") }
    });
    let open = within(
        "the watches get their response heads",
        Duration::from_secs(30),
        futures_util::future::join_all(sends),
    )
    .await;
    assert!(open.iter().all(|w| w.status() == 200));
    assert_eq!(watches.load(Ordering::SeqCst), spellings.len());
    let endpoint = format!("127.0.0.1:{}", stub.addr.port());
    let text = scrape(&gw).await;
    let at = |name: &str, class: &str| {
        sample(
            &text,
            name,
            &[("class", class), ("endpoint", endpoint.as_str())],
        )
    };
    assert_eq!(
        at("watchgate_upstream_streams", "long_running"),
        spellings.len() as f64
    );
    assert_eq!(at("watchgate_upstream_streams", "short"), 0.0);
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_beyond_the_bound_get_429_with_retry_after_and_gets_still_answer() {
    let watches = Arc::new(AtomicUsize::new(0));
    let stub = TlsStub::start(apiserver(watches.clone()), 100).await;
    let mut cfg = GatewayConfig::for_upstream(stub.kube_config());
    cfg.cache = None;
    // One connection kept for short requests; three for watches: 300 streams.
    cfg.upstream_max_connections = 4;
    let gw = start_gateway_with(cfg).await;
    let addr = gw.handle().addr();
    let refusals_before = sample(
        &scrape(&gw).await,
        "watchgate_upstream_refusals_total",
        &[("class", "long_running")],
    );

    let mut open = within(
        "300 forwarded watches get their response heads",
        Duration::from_secs(30),
        open_watches(addr, 0, 300),
    )
    .await;
    assert!(open.iter().all(|w| w.status() == 200));

    // Beyond: refused at once, not queued.
    let refused = within(
        "watches beyond the bound are answered (not left waiting)",
        Duration::from_secs(10),
        open_watches(addr, 300, 20),
    )
    .await;
    for w in refused {
        assert_eq!(w.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(w.headers()["retry-after"], "1");
        assert_eq!(w.headers()["content-type"], "application/json");
        assert_eq!(support::http::source(w.headers()), Some("gateway"));
        let body = w.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            std::str::from_utf8(&body).unwrap(),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\
             \"message\":\"Too many requests, please try again later.\",\"reason\":\"TooManyRequests\",\
             \"details\":{\"retryAfterSeconds\":1},\"code\":429}\n"
        );
    }
    assert_eq!(
        watches.load(Ordering::SeqCst),
        300,
        "refused watches never left"
    );

    // Short requests have their own connection.
    let (parts, _) = within(
        "a GET answers at the bound",
        Duration::from_secs(10),
        get(addr, "/api/v1/namespaces/default"),
    )
    .await;
    assert_eq!(parts.status, 200);

    // A watch that ends frees its stream for the next one.
    drop(open.pop());
    wait_until(
        "a watch is accepted again once one has ended",
        Duration::from_secs(10),
        || async { open_watches(addr, 400, 1).await[0].status() == 200 },
    )
    .await;

    let refusals = sample(
        &scrape(&gw).await,
        "watchgate_upstream_refusals_total",
        &[("class", "long_running")],
    ) - refusals_before;
    assert!(refusals >= 20.0, "refusals counted: {refusals}");
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_upstreams_are_bounded_by_the_same_flag_and_the_cache_keeps_its_watch() {
    // The simulator speaks plain http://: HTTP/1.1, one request per connection.
    let sim = start_sim().await;
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).unwrap();
    cfg.upstream_max_connections = 4;
    // Configmaps are never cached, so their watches are forwarded (a cached resource's
    // watch with no resourceVersion comes from the cache, docs/consistency.md).
    // Namespaces neither: a get of one is a forwarded short request (a cacheable one
    // would join its cache's sync and come from the cache).
    cfg.cache = Some(watchgate::cache::registry::CachePolicy {
        prewarm: vec!["pods".into()],
        exclude: vec!["configmaps".into(), "namespaces".into()],
    });
    let gw = start_gateway_with(cfg).await;
    let http = Http::new(gw.url());
    support::watch::wait_until_cached(gw.url(), "/api/v1/pods?resourceVersion=0", |_| true).await;

    // The reflector's pod watch holds one long-running connection: clients get the two
    // others the bound leaves them.
    let mut open = Vec::new();
    for i in 0..2 {
        let w = support::watch::open(gw.url(), &watch_path(i)).await;
        assert_eq!(w.status, 200, "watch {i}");
        open.push(w);
    }
    let refused = within(
        "a watch beyond the bound is answered",
        Duration::from_secs(10),
        http.get(&watch_path(2)),
    )
    .await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(refused.json()["reason"], "TooManyRequests");

    // Forwarded short requests and the cache still answer.
    let ns = http.get("/api/v1/namespaces/default").await;
    assert_eq!(ns.status, 200);
    assert_eq!(ns.source(), Some("upstream"));
    let pods = http.get("/api/v1/pods?resourceVersion=0").await;
    assert_eq!(pods.status, 200);
    assert_eq!(pods.source(), Some("cache"));
    drop(open);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_upstream_connections_are_reused_after_complete_answers() {
    // Answers with a Content-Length (hyper stops reading such a body at its last byte)
    // and chunked ones: either way the connection serves the next request.
    let stub = Stub::start(handler(|req: Request<Incoming>| async move {
        if req.uri().path().ends_with("/chunked") {
            let (tx, body) = support::stub::channel_body(2);
            tokio::spawn(async move {
                let _ = tx.send(bytes::Bytes::from_static(b"{\"kind\":")).await;
                let _ = tx.send(bytes::Bytes::from_static(b"\"List\"}")).await;
            });
            return Response::new(body);
        }
        json_response(StatusCode::OK, serde_json::json!({"kind": "Namespace"}))
    }))
    .await;
    let mut cfg = GatewayConfig::for_upstream_url(&stub.url()).unwrap();
    cfg.cache = None;
    let gw = start_gateway_with(cfg).await;
    let http = Http::new(gw.url());
    for i in 0..20 {
        let path = if i % 2 == 0 {
            "/api/v1/namespaces/default"
        } else {
            "/api/v1/namespaces/default/chunked"
        };
        let resp = http.get(path).await;
        assert_eq!(resp.status, 200, "request {i}");
        assert_eq!(resp.source(), Some("upstream"));
    }
    assert_eq!(
        stub.connections(),
        1,
        "20 sequential forwarded requests share one upstream connection"
    );
}
