//! Watch fan-out at scale (issue 5, "What must be shown" 2): a thousand concurrent watches
//! through the gateway, over a few HTTP/2 connections and many HTTP/1.1 ones, from RV N and
//! (one in ten) from RV "0", with four shapes (all pods, a namespace, a label selector, the
//! kubelet's field selector), cost exactly one upstream watch, and every watcher receives every matching event exactly once, in
//! resourceVersion order — checked event by event against the simulator's event log (with
//! kube-apiserver's selector transitions), which direct watches on the simulator with the
//! same paths and starting RV must agree with.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::objects::pod;
use support::servers::{cluster_config, start_gateway, start_gateway_with, start_sim_with};
use support::watch_checker::{Sig, StreamChecker, Violation};
use support::watch_clients::{h1_watch, read_sigs_until, H2Conn, LineReader};
use support::watch_env::{delete, put, update, warm};
use support::{watch_clients, watch_env};
use watchgate::config::GatewayConfig;

const WATCHERS: usize = 1000;
const H2_CONNECTIONS: usize = 8;
/// Streams per HTTP/2 connection: under any server's concurrent-stream limit (hyper's
/// default is 200, Go's 250).
const STREAMS_PER_H2: usize = 100;
const WRITES: usize = 300;
const NAMESPACES: [&str; 4] = ["ns-0", "ns-1", "ns-2", "ns-3"];
/// The last write: a pod every shape below matches, so a reader that sees it has seen
/// everything before it.
const SENTINEL: &str = "ns-1/zz-sentinel";
/// The bound for the next event on any stream.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The watch paths (query after `resourceVersion=N`), round-robin over the watchers: the
/// whole collection, one namespace, a label selector and the kubelet's field selector.
const SHAPES: [(&str, &str); 4] = [
    ("/api/v1/pods", ""),
    ("/api/v1/namespaces/ns-1/pods", ""),
    ("/api/v1/pods", "&labelSelector=app%3Dweb"),
    ("/api/v1/pods", "&fieldSelector=spec.nodeName%3Dnode-1"),
];

fn shape_path(shape: usize, from: u64) -> String {
    let (path, extra) = SHAPES[shape];
    format!("{path}?watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=300{extra}")
}

/// What a watcher of `shape` from `from` must receive (the simulator's event log with
/// kube-apiserver's selector transitions).
fn expected_for(store: &watchgate::sim::Store, from: u64, shape: usize) -> Vec<Sig> {
    let ns = (shape == 1).then_some("ns-1");
    watch_env::log_filtered(store, from, ns, |p| shape_matches(shape, p))
}

/// What a watcher of `shape` from RV "0" gets first: the current state's matching pods
/// as ADDED events, in key order.
fn initial_for(store: &watchgate::sim::Store, shape: usize) -> Vec<Sig> {
    let ns = (shape == 1).then_some("ns-1");
    let (_, items) = store.list(watch_env::pods(), ns);
    items
        .iter()
        .filter(|p| shape_matches(shape, p))
        .map(|p| Sig::from_parts("ADDED", &serde_json::to_vec(p.as_ref()).unwrap()))
        .collect()
}

fn shape_matches(shape: usize, p: &serde_json::Value) -> bool {
    match shape {
        2 => p["metadata"]["labels"]["app"] == "web",
        3 => p["spec"]["nodeName"] == "node-1",
        _ => true,
    }
}

/// Reads a stream until the sentinel's ADDED, returning every event's signature.
async fn read_until_sentinel(lines: &mut LineReader) -> Result<Vec<Sig>, String> {
    read_sigs_until(lines, EVENT_TIMEOUT, |sig| {
        sig.key == SENTINEL && sig.kind == "ADDED"
    })
    .await
}

/// What one watcher saw.
struct Outcome {
    id: usize,
    shape: usize,
    rv0: bool,
    proto: &'static str,
    source: Option<String>,
    events: Result<Vec<Sig>, String>,
}

/// A deterministic mix of writes: creates, label flips (in and out of `app=web`), node
/// moves (in and out of `spec.nodeName=node-1`), plain updates and deletes.
fn churn(store: &watchgate::sim::Store, writes: usize) {
    let mut live: Vec<(String, String)> = Vec::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut created = 0;
    for _ in 0..writes {
        let r = next();
        let op = if live.len() < 10 { 0 } else { r % 10 };
        match op {
            0..=2 => {
                let ns = NAMESPACES[(r >> 8) as usize % NAMESPACES.len()];
                let name = format!("p-{created}");
                created += 1;
                let app = if (r >> 16) % 2 == 0 { "web" } else { "db" };
                let node = format!("node-{}", (r >> 20) % 3);
                put(
                    store,
                    pod(ns, &name)
                        .label("app", app)
                        .running_on(&node)
                        .pad(200)
                        .build(),
                );
                live.push((ns.to_string(), name));
            }
            3..=4 => {
                let (ns, name) = &live[(r >> 8) as usize % live.len()];
                update(store, ns, name, |p| {
                    let app = if p["metadata"]["labels"]["app"] == "web" {
                        "db"
                    } else {
                        "web"
                    };
                    p["metadata"]["labels"]["app"] = app.into();
                });
            }
            5..=6 => {
                let (ns, name) = &live[(r >> 8) as usize % live.len()];
                update(store, ns, name, |p| {
                    let node = if p["spec"]["nodeName"] == "node-1" {
                        "node-2"
                    } else {
                        "node-1"
                    };
                    p["spec"]["nodeName"] = node.into();
                });
            }
            7..=8 => {
                let (ns, name) = &live[(r >> 8) as usize % live.len()];
                update(store, ns, name, |p| {
                    p["status"]["phase"] = format!("Phase{}", r % 1000).into();
                });
            }
            _ => {
                let (ns, name) = live.swap_remove((r >> 8) as usize % live.len());
                delete(store, &ns, &name);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_watchers_share_one_upstream_watch_and_see_every_event_once_in_order() {
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    for i in 0..40 {
        let ns = NAMESPACES[i % NAMESPACES.len()];
        let app = if i % 3 == 0 { "web" } else { "db" };
        put(
            &store,
            pod(ns, &format!("seed-{i}"))
                .label("app", app)
                .running_on(&format!("node-{}", i % 3))
                .pad(200)
                .build(),
        );
    }
    // Default bookmark interval (a minute): bookmarks have their own test below.
    let gw = start_gateway(sim.url()).await;
    let addr = gw.handle().addr();
    warm(gw.url(), sim.handle()).await;
    let reflector_watches = sim.handle().stats().watches("pods");
    let from = store.current_rv();
    let initial: Vec<Vec<Sig>> = (0..SHAPES.len())
        .map(|shape| initial_for(&store, shape))
        .collect();

    // The references: one direct watch on the simulator per shape.
    let mut references = Vec::new();
    for shape in 0..SHAPES.len() {
        let w = h1_watch(sim.handle().addr(), &shape_path(shape, from))
            .await
            .unwrap_or_else(|e| panic!("reference watch {shape}: {e}"));
        assert_eq!(w.status, 200, "reference watch {shape}");
        references.push(tokio::spawn(async move {
            let mut lines = w.lines;
            read_until_sentinel(&mut lines).await
        }));
    }
    let upstream_before = sim.handle().stats().watches("pods");

    // A thousand watchers: 800 streams over 8 HTTP/2 connections, 200 HTTP/1.1 connections.
    let mut conns = Vec::new();
    for _ in 0..H2_CONNECTIONS {
        conns.push(H2Conn::connect(addr).await.expect("h2c connection"));
    }
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel::<Result<(), String>>(WATCHERS);
    let mut tasks = Vec::with_capacity(WATCHERS);
    for id in 0..WATCHERS {
        let shape = id % SHAPES.len();
        // One in ten starts at RV "0": the current state as ADDED events, then the changes.
        let rv0 = (id / SHAPES.len()) % 10 == 9;
        let path = shape_path(shape, if rv0 { 0 } else { from });
        let h2 = (id < H2_CONNECTIONS * STREAMS_PER_H2).then(|| conns[id / STREAMS_PER_H2].clone());
        let ready = ready_tx.clone();
        tasks.push(tokio::spawn(async move {
            let proto = if h2.is_some() { "HTTP/2" } else { "HTTP/1.1" };
            let opened = match &h2 {
                Some(c) => c.watch(&path).await,
                None => h1_watch(addr, &path).await,
            };
            let mut w = match opened {
                Ok(w) if w.status == 200 => w,
                Ok(w) => {
                    let msg = format!("watch {id} ({proto}): status {}", w.status);
                    let _ = ready.send(Err(msg.clone())).await;
                    return Outcome {
                        id,
                        shape,
                        rv0,
                        proto,
                        source: None,
                        events: Err(msg),
                    };
                }
                Err(e) => {
                    let _ = ready.send(Err(e.clone())).await;
                    return Outcome {
                        id,
                        shape,
                        rv0,
                        proto,
                        source: None,
                        events: Err(e),
                    };
                }
            };
            let _ = ready.send(Ok(())).await;
            let source = w.source();
            let events = read_until_sentinel(&mut w.lines).await;
            Outcome {
                id,
                shape,
                rv0,
                proto,
                source,
                events,
            }
        }));
    }
    drop(ready_tx);
    let started = Instant::now();
    let mut open_errors = Vec::new();
    for _ in 0..WATCHERS {
        match tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await {
            Ok(Some(Ok(()))) => {}
            Ok(Some(Err(e))) => open_errors.push(e),
            Ok(None) => break,
            Err(_) => panic!("not every watcher got its response head within 60 s"),
        }
    }
    assert!(
        open_errors.is_empty(),
        "{} watches failed to open, e.g. {:?}",
        open_errors.len(),
        &open_errors[..open_errors.len().min(5)]
    );
    println!("{WATCHERS} watches open in {:.1?}", started.elapsed());
    let upstream_after_open = sim.handle().stats().watches("pods");

    // A few hundred writes, then the sentinel.
    let write_started = Instant::now();
    churn(&store, WRITES);
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let last_rv = store.current_rv();

    // The expected streams, from the simulator's event log; its own watches (same paths,
    // same RV) must agree.
    let expected: Vec<Arc<Vec<Sig>>> = (0..SHAPES.len())
        .map(|shape| Arc::new(expected_for(&store, from, shape)))
        .collect();
    let log_all = watch_env::log_since(&store, from, None);
    assert_eq!(*expected[0], log_all);
    for (shape, r) in references.into_iter().enumerate() {
        let direct: Vec<Sig> = r
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("direct watch on the simulator, shape {shape}: {e}"))
            .into_iter()
            .filter(Sig::is_change)
            .collect();
        assert!(
            direct == *expected[shape],
            "shape {shape}: the simulator's own watch disagrees with its event log \
             ({} events vs {})",
            direct.len(),
            expected[shape].len()
        );
    }
    assert!(
        expected.iter().all(|e| e.len() > 20),
        "every shape must see a real share of the writes: {:?}",
        expected.iter().map(|e| e.len()).collect::<Vec<_>>()
    );

    // Every watcher against its reference.
    let mut failures: Vec<String> = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut not_from_cache = 0;
    let mut delivered = 0usize;
    let mut initial_checked = 0usize;
    let mut bookmarks = 0usize;
    for t in tasks {
        let o = tokio::time::timeout(Duration::from_secs(90), t)
            .await
            .expect("every watcher finishes reading within 90 s")
            .expect("watcher task");
        if o.source.as_deref() != Some("cache") {
            not_from_cache += 1;
        }
        let events = match o.events {
            Ok(ev) => ev,
            Err(e) => {
                *counts.entry("stream failed").or_default() += 1;
                failures.push(format!(
                    "watcher {} ({}, shape {}): {e}",
                    o.id, o.proto, o.shape
                ));
                continue;
            }
        };
        let mut events = &events[..];
        if o.rv0 {
            // The state at the start, as ADDED events in key order (etcd's), exactly.
            let want = &initial[o.shape];
            let n = want.len().min(events.len());
            if let Some(i) = (0..n)
                .find(|&i| events[i] != want[i])
                .or((n < want.len()).then_some(n))
            {
                *counts.entry("initial state").or_default() += 1;
                failures.push(format!(
                    "watcher {} ({}, shape {}, RV 0): initial event {i} is {}, want {}",
                    o.id,
                    o.proto,
                    o.shape,
                    events.get(i).map_or("missing".into(), |s| s.to_string()),
                    want[i]
                ));
                continue;
            }
            initial_checked += n;
            events = &events[n..];
        }
        let mut checker = StreamChecker::new(expected[o.shape].clone());
        for sig in events {
            checker.observe(sig);
        }
        delivered += checker.observed();
        bookmarks += checker.bookmarks();
        for v in checker.finish(true) {
            let kind = match v {
                Violation::Gap { .. } => "gap",
                Violation::Duplicate { .. } => "duplicate",
                Violation::Reordered { .. } => "reordered",
                Violation::Mismatch { .. } => "mismatch",
                Violation::Unexpected { .. } => "unexpected",
                Violation::Error { .. } => "error event",
                Violation::Invalid { .. } => "invalid",
                Violation::Bookmark { ref why, .. } if why.starts_with("behind") => {
                    "bookmark behind a sent event"
                }
                Violation::Bookmark { .. } => "bookmark ahead of an unsent event",
            };
            *counts.entry(kind).or_default() += 1;
            failures.push(format!(
                "watcher {} ({}, shape {}): {v}",
                o.id, o.proto, o.shape
            ));
        }
    }
    println!(
        "{WATCHERS} watchers: {delivered} events, {initial_checked} initial ADDED events and \
         {bookmarks} bookmarks checked ({} writes after RV {from}, up to RV {last_rv}) in {:.1?}",
        log_all.len(),
        write_started.elapsed()
    );

    let upstream_end = sim.handle().stats().watches("pods");
    let mut problems = Vec::new();
    if !failures.is_empty() {
        problems.push(format!(
            "{} stream violations {counts:?}; first ones:\n  {}",
            failures.len(),
            failures[..failures.len().min(8)].join("\n  ")
        ));
    }
    if not_from_cache > 0 {
        problems.push(format!(
            "{not_from_cache} of {WATCHERS} watches were not served from the cache (x-watchgate-source)"
        ));
    }
    if reflector_watches != 1
        || upstream_after_open != upstream_before
        || upstream_end != upstream_before
    {
        problems.push(format!(
            "upstream pod watches: {reflector_watches} for the reflector (want 1); {} more after \
             {WATCHERS} downstream watches opened and {} at the end (want 0: one upstream watch \
             for all of them)",
            upstream_after_open - upstream_before,
            upstream_end - upstream_before
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// kube-apiserver allows 250 concurrent streams per HTTP/2 connection (k8s.io/apiserver
/// `SecureServingInfo.Serve`: `HTTP2MaxStreamsPerConnection`, else "make the default of
/// 250 explicit"), and client-go multiplexes all of a client's watches over one
/// connection: 250 watches on one connection must all be served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_http2_connection_carries_as_many_watches_as_kube_apiserver_allows() {
    const STREAMS: usize = 250;
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let gw = start_gateway(sim.url()).await;
    warm(gw.url(), sim.handle()).await;
    let from = store.current_rv();
    let conn = H2Conn::connect(gw.handle().addr())
        .await
        .expect("h2c connection");
    let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..STREAMS {
        let (conn, answered) = (conn.clone(), answered.clone());
        tasks.push(tokio::spawn(async move {
            let mut w = conn
                .watch(&shape_path(0, from))
                .await
                .map_err(|e| format!("stream {i}: {e}"))?;
            if w.status != 200 {
                return Err(format!("stream {i}: status {}", w.status));
            }
            answered.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            read_until_sentinel(&mut w.lines)
                .await
                .map_err(|e| format!("stream {i}: {e}"))
        }));
    }
    // Every stream must be open (its response head came) at once: a stream over the
    // server's limit waits for another to close.
    let stats = sim.handle().stats().clone();
    support::wait::wait_for(
        &format!(
            "all {STREAMS} concurrent watches on one HTTP/2 connection are answered (fewer: \
             the gateway's concurrent-stream limit is below kube-apiserver's 250); answered"
        ),
        Duration::from_secs(10),
        || std::future::ready(answered.load(std::sync::atomic::Ordering::Acquire)),
        |n| *n == STREAMS,
    )
    .await;
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let mut failures = Vec::new();
    for t in tasks {
        match tokio::time::timeout(Duration::from_secs(15), t).await {
            Ok(Ok(Ok(events))) => assert_eq!(events.len(), 1),
            Ok(Ok(Err(e))) => failures.push(e),
            Ok(Err(e)) => failures.push(e.to_string()),
            Err(_) => failures.push("no response head or event within 15 s".into()),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {STREAMS} watches on one HTTP/2 connection were not served (the server's \
         concurrent-stream limit is below kube-apiserver's 250?): {:?}",
        failures.len(),
        &failures[..failures.len().min(3)]
    );
    assert_eq!(stats.watches("pods"), 1, "one upstream watch");
}

/// BOOKMARKs promise that every event up to their RV has been sent: a client (client-go's
/// reflector) resumes from the last one it saw. So a bookmark must never carry an RV
/// behind an event the stream already sent (the client would get that event twice) nor
/// ahead of one it has not sent yet (the client would miss it). 200 watchers with a
/// bookmark every 50 ms while writes flow.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_never_run_behind_or_ahead_of_the_events_sent() {
    const N: usize = 200;
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.watch.bookmark_interval = Duration::from_millis(50);
    let gw = start_gateway_with(cfg).await;
    let addr = gw.handle().addr();
    warm(gw.url(), sim.handle()).await;
    for i in 0..20 {
        put(
            &store,
            pod(NAMESPACES[i % 4], &format!("seed-{i}"))
                .label("app", "web")
                .running_on("node-1")
                .pad(200)
                .build(),
        );
    }
    let from = store.current_rv();
    let conns = [
        H2Conn::connect(addr).await.expect("h2c"),
        H2Conn::connect(addr).await.expect("h2c"),
    ];
    let mut tasks = Vec::new();
    for id in 0..N {
        let shape = [0, 2][id % 2];
        let path = shape_path(shape, from);
        let conn = conns[id % 2].clone();
        tasks.push(tokio::spawn(async move {
            let mut w = if id % 4 < 2 {
                conn.watch(&path).await?
            } else {
                h1_watch(addr, &path).await?
            };
            if w.status != 200 {
                return Err(format!("status {}", w.status));
            }
            read_until_sentinel(&mut w.lines)
                .await
                .map(|ev| (shape, ev))
        }));
    }
    // 300 writes over about three seconds.
    for round in 0..30 {
        churn_step(&store, round);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let expected: Vec<Arc<Vec<Sig>>> = (0..SHAPES.len())
        .map(|shape| Arc::new(expected_for(&store, from, shape)))
        .collect();
    let (mut failures, mut bookmarks) = (Vec::new(), 0);
    for (id, t) in tasks.into_iter().enumerate() {
        let (shape, events) = match tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("watchers finish within 60 s")
            .unwrap()
        {
            Ok(x) => x,
            Err(e) => {
                failures.push(format!("watcher {id}: {e}"));
                continue;
            }
        };
        let mut c = StreamChecker::new(expected[shape].clone());
        for e in &events {
            c.observe(e);
        }
        bookmarks += c.bookmarks();
        failures.extend(
            c.finish(true)
                .iter()
                .map(|v| format!("watcher {id} (shape {shape}): {v}")),
        );
    }
    println!("{N} watchers: {bookmarks} consistent bookmarks");
    assert!(
        failures.is_empty(),
        "{} violation(s):\n  {}",
        failures.len(),
        failures[..failures.len().min(8)].join("\n  ")
    );
    assert!(bookmarks > N, "the streams carried bookmarks ({bookmarks})");
}

/// Ten writes of the deterministic mix (see [`churn`]), continuing where `round` left off.
fn churn_step(store: &watchgate::sim::Store, round: usize) {
    for k in 0..10 {
        let i = round * 10 + k;
        let ns = NAMESPACES[i % 4];
        match i % 4 {
            0 => {
                put(
                    store,
                    pod(ns, &format!("b-{i}"))
                        .label("app", "web")
                        .running_on("node-1")
                        .pad(200)
                        .build(),
                );
            }
            1 => {
                update(
                    store,
                    NAMESPACES[(i / 4) % 4],
                    &format!("seed-{}", (i / 4) % 20),
                    |p| {
                        p["status"]["phase"] = format!("P{i}").into();
                    },
                );
            }
            2 => {
                update(
                    store,
                    NAMESPACES[(i / 4) % 4],
                    &format!("seed-{}", (i / 4) % 20),
                    |p| {
                        let app = if p["metadata"]["labels"]["app"] == "web" {
                            "db"
                        } else {
                            "web"
                        };
                        p["metadata"]["labels"]["app"] = app.into();
                    },
                );
            }
            _ => {
                delete(store, NAMESPACES[(i - 3) % 4], &format!("b-{}", i - 3));
            }
        }
    }
}

/// Issue 18: a lone event reaching an idle HTTP/1.1 watcher is written by the fan-out
/// itself, with one `send`, instead of waking the connection's task (the express lane,
/// docs/watch.md "Dispatch"). Events written one at a time, each once every watcher has
/// read the one before, arrive exactly once, in order and in valid chunked framing
/// (hyper's client decodes the stream), and the gateway counts most of them as written
/// directly. Not all: a watch whose connection has not gone idle yet after its head (or
/// after an event) takes the next event through its task, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_events_reach_idle_http1_watchers_through_the_express_lane() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const N: usize = 40;
    const M: usize = 30;
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let gw = start_gateway(sim.url()).await;
    let addr = gw.handle().addr();
    warm(gw.url(), sim.handle()).await;
    put(
        &store,
        pod("ns-1", "lone")
            .label("app", "web")
            .running_on("node-1")
            .pad(200)
            .build(),
    );
    let from = store.current_rv();
    let seen = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..N {
        let (seen, started) = (seen.clone(), started.clone());
        tasks.push(tokio::spawn(async move {
            let mut w = h1_watch(addr, &shape_path(1, from)).await?;
            if w.status != 200 || w.source().as_deref() != Some("cache") {
                return Err(format!("status {}, source {:?}", w.status, w.source()));
            }
            started.fetch_add(1, Ordering::AcqRel);
            let mut events = Vec::new();
            loop {
                let line = w
                    .lines
                    .next_line_within(EVENT_TIMEOUT)
                    .await?
                    .ok_or("the stream ended")?;
                let sig = Sig::from_line(&line)?;
                if sig.kind == "BOOKMARK" {
                    continue;
                }
                seen.fetch_add(1, Ordering::AcqRel);
                let last = sig.key == SENTINEL;
                events.push(sig);
                if last {
                    return Ok::<_, String>(events);
                }
            }
        }));
    }
    support::wait::wait_until("every watch has its head", EVENT_TIMEOUT, || async {
        started.load(Ordering::Acquire) == N
    })
    .await;
    for i in 0..M {
        update(&store, "ns-1", "lone", |p| {
            p["metadata"]["labels"]["round"] = serde_json::json!(i.to_string());
        })
        .expect("the pod exists");
        support::wait::wait_until(
            &format!("every watcher read event {i}"),
            EVENT_TIMEOUT,
            || async { seen.load(Ordering::Acquire) == N * (i + 1) },
        )
        .await;
    }
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let expected = Arc::new(expected_for(&store, from, 1));
    assert_eq!(expected.len(), M + 1);
    for (id, t) in tasks.into_iter().enumerate() {
        let events = support::wait::within("a watcher ends", EVENT_TIMEOUT, t)
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("watcher {id}: {e}"));
        let mut c = StreamChecker::new(expected.clone());
        for e in &events {
            c.observe(e);
        }
        let v = c.finish(true);
        assert!(v.is_empty(), "watcher {id}: {v:?}");
    }
    let cache = gw
        .handle()
        .cache()
        .and_then(|r| r.get("", "v1", "pods"))
        .expect("pods are cached");
    let stats = &cache.store.hub().stats;
    let direct = stats.written_directly.load(Ordering::Relaxed) as usize;
    let deliveries = N * (M + 1);
    println!("{direct} of {deliveries} deliveries written directly");
    assert!(
        direct >= deliveries / 2 && direct <= deliveries,
        "{direct} of {deliveries} deliveries written by the fan-out itself"
    );
}

/// Issue 18, "the same for protobuf watchers": client-go's protobuf watches
/// (`Accept: application/vnd.kubernetes.protobuf,application/json`; frames of a 4-byte
/// length and a `WatchEvent`, built once per event and shared) take the same write paths
/// as JSON ones: the express lane (over HTTP/1.1 the frame is one chunk; over HTTP/2 one
/// DATA frame handed to h2) and coalesced HTTP/2 connection writes. Lone events, each
/// written once every watcher has read the one before, reach every watcher exactly once,
/// in order, each frame carrying that event's object version; most deliveries, over
/// either protocol, are written by the fan-out itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_watchers_get_every_lone_event_once_in_order_through_the_lane_and_http2() {
    use prost::Message;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use watch_clients::{h1_response, H2Conn};
    const CLIENT_GO: &str = "application/vnd.kubernetes.protobuf,application/json";
    const H1: usize = 20;
    const H2: usize = 20;
    const M: usize = 30;
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let gw = start_gateway(sim.url()).await;
    let addr = gw.handle().addr();
    warm(gw.url(), sim.handle()).await;
    put(
        &store,
        pod("ns-1", "lone")
            .label("app", "web")
            .running_on("node-1")
            .pad(200)
            .build(),
    );
    let from = store.current_rv();
    let path = shape_path(1, from);
    let seen = Arc::new(AtomicUsize::new(0));
    let mut responses = Vec::new();
    for _ in 0..H1 {
        responses.push(("h1", h1_response(addr, &path, CLIENT_GO).await.unwrap()));
    }
    let conn = H2Conn::connect(addr).await.unwrap();
    for _ in 0..H2 {
        responses.push(("h2", conn.response(&path, CLIENT_GO).await.unwrap()));
    }
    let mut tasks = Vec::new();
    for (proto_name, resp) in responses {
        let mut w = support::watch::Watch::from_response(format!("{proto_name} {path}"), resp);
        assert_eq!(w.status, 200, "{}", w.what);
        w.assert_from_cache();
        assert_eq!(
            w.headers["content-type"],
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
        let seen = seen.clone();
        tasks.push(tokio::spawn(async move {
            // (type, resourceVersion, namespace/name, the `round` label)
            let mut events: Vec<(String, u64, String, String)> = Vec::new();
            loop {
                let (ty, env) = w.next_proto("the next protobuf event").await;
                if ty == "BOOKMARK" {
                    continue;
                }
                let unknown = watchgate::proto::decode_unknown(&env).expect("an envelope");
                let p = k8s_pb::api::core::v1::Pod::decode(unknown.raw).expect("a Pod");
                let m = p.metadata.expect("metadata");
                let key = format!("{}/{}", m.namespace(), m.name());
                let rv = m.resource_version().parse().expect("a numeric RV");
                let round = m.labels.get("round").cloned().unwrap_or_default();
                seen.fetch_add(1, Ordering::AcqRel);
                let last = key == SENTINEL;
                events.push((ty, rv, key, round));
                if last {
                    return events;
                }
            }
        }));
    }
    let watchers = H1 + H2;
    for i in 0..M {
        update(&store, "ns-1", "lone", |p| {
            p["metadata"]["labels"]["round"] = serde_json::json!(i.to_string());
        })
        .expect("the pod exists");
        support::wait::wait_until(
            &format!("every protobuf watcher read event {i}"),
            EVENT_TIMEOUT,
            || async { seen.load(Ordering::Acquire) == watchers * (i + 1) },
        )
        .await;
    }
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let expected: Vec<(String, u64, String, String)> = expected_for(&store, from, 1)
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let round = if i < M { i.to_string() } else { String::new() };
            (s.kind, s.rv, s.key, round)
        })
        .collect();
    assert_eq!(expected.len(), M + 1);
    for (id, t) in tasks.into_iter().enumerate() {
        let events = support::wait::within("a protobuf watcher ends", EVENT_TIMEOUT, t)
            .await
            .unwrap();
        assert_eq!(events, expected, "watcher {id}");
    }
    let cache = gw
        .handle()
        .cache()
        .and_then(|r| r.get("", "v1", "pods"))
        .expect("pods are cached");
    let direct = cache
        .store
        .hub()
        .stats
        .written_directly
        .load(Ordering::Relaxed) as usize;
    let deliveries = (H1 + H2) * (M + 1);
    println!("{direct} of {deliveries} protobuf deliveries written directly");
    // Both protocols take the lane: more than the HTTP/1.1 watchers alone could account
    // for, and most of all of them.
    assert!(
        direct > H1 * (M + 1) && direct >= deliveries * 3 / 4 && direct <= deliveries,
        "{direct} of {deliveries} deliveries (half of them HTTP/2) written by the fan-out itself"
    );
}

/// Issue 18, the HTTP/2 express lane: a client that resets one of its streams (hyper's
/// client sends RST_STREAM(CANCEL) when a response body is dropped) ends that watch on the
/// gateway, whether the reset arrives while the stream is idle (the lane open) or after
/// an event the lane handed to h2; the other watches on the connection keep getting every
/// event, in order, through the lane.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_http2_watch_ends_and_its_neighbours_on_the_connection_go_on() {
    const WATCHES: usize = 6;
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let gw = start_gateway(sim.url()).await;
    warm(gw.url(), sim.handle()).await;
    put(
        &store,
        pod("ns-1", "lone")
            .label("app", "web")
            .running_on("node-1")
            .pad(200)
            .build(),
    );
    let from = store.current_rv();
    let path = shape_path(1, from);
    let conn = H2Conn::connect(gw.handle().addr()).await.unwrap();
    let mut watches = Vec::new();
    for i in 0..WATCHES {
        let w = conn
            .watch(&path)
            .await
            .unwrap_or_else(|e| panic!("watch {i}: {e}"));
        assert_eq!(w.status, 200);
        watches.push(w);
    }
    let cache = gw
        .handle()
        .cache()
        .and_then(|r| r.get("", "v1", "pods"))
        .expect("pods are cached");
    let hub = cache.store.hub();
    support::wait::wait_until("every watch is live", EVENT_TIMEOUT, || async {
        hub.live_watchers() == WATCHES
    })
    .await;
    let mut label = 0;
    let mut bump = || {
        label += 1;
        let l = label;
        update(&store, "ns-1", "lone", |p| {
            p["metadata"]["labels"]["round"] = serde_json::json!(l.to_string());
        })
    };
    // One event every watch reads: all idle again afterwards.
    bump();
    for (i, w) in watches.iter_mut().enumerate() {
        let line = w.lines.next_line_within(EVENT_TIMEOUT).await;
        let line = line.unwrap_or_else(|e| panic!("watch {i}: {e}"));
        let sig = Sig::from_line(&line.expect("an event")).unwrap();
        assert_eq!(
            (sig.kind.as_str(), sig.key.as_str()),
            ("MODIFIED", "ns-1/lone")
        );
    }
    // Reset while idle.
    drop(watches.remove(0));
    support::wait::wait_until(
        "the watch reset while idle ends on the gateway",
        EVENT_TIMEOUT,
        || async { hub.live_watchers() == WATCHES - 1 },
    )
    .await;
    // An event the lane hands to a stream that is reset before the client reads it.
    bump();
    drop(watches.remove(0));
    support::wait::wait_until(
        "the watch reset after an event ends on the gateway",
        EVENT_TIMEOUT,
        || async { hub.live_watchers() == WATCHES - 2 },
    )
    .await;
    let written_before = hub
        .stats
        .written_directly
        .load(std::sync::atomic::Ordering::Relaxed);
    for _ in 0..5 {
        bump();
    }
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let expected = expected_for(&store, from, 1);
    for (i, mut w) in watches.into_iter().enumerate() {
        let mut sigs = read_until_sentinel(&mut w.lines)
            .await
            .unwrap_or_else(|e| panic!("watch {i}: {e}"));
        // The first event was read above.
        sigs.insert(0, expected[0].clone());
        assert_eq!(sigs, expected, "watch {i} after its neighbours were reset");
    }
    let written = hub
        .stats
        .written_directly
        .load(std::sync::atomic::Ordering::Relaxed)
        - written_before;
    assert!(
        written > 0,
        "the remaining HTTP/2 watches got their events through the lane"
    );
}
