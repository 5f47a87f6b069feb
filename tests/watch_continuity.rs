//! Continuity (issue 5, "What must be shown" 4): when the gateway's upstream watch breaks,
//! downstream watchers stay connected and see no gap, duplicate or reordering.
//!
//! - A dropped upstream watch (once, with the upstream slow to answer so that writes pile
//!   up meanwhile, then every 400 ms while writes flow) is resumed from the last RV: the
//!   upstream's history is complete, so every watcher's stream must be exactly the
//!   simulator's event log.
//! - An upstream 410 makes the reflector relist; the gateway delivers the difference as
//!   ordinary events (contract: ADDED/MODIFIED with the objects' RVs, DELETED with the list
//!   RV). The stream cannot equal the log then, so the state checker applies: RVs never go
//!   backwards, every event is a valid transition, and the state rebuilt from the events
//!   equals the simulator's. Writes during the outage include deletes, a pod created and
//!   deleted, and a pod updated twice.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use support::objects::pod;
use support::servers::{
    cluster_config, start_gateway_with, start_sim_with, GatewayServer, SimServer,
};
use support::wait_until;
use support::watch_checker::{Sig, StateChecker, StreamChecker};
use support::watch_clients::{h1_watch, read_sigs_until, H2Conn};
use support::watch_env;
use support::watch_env::{delete, put, sim_state_where, update, warm};
use watchgate::config::GatewayConfig;
use watchgate::sim::Store;

const NAMESPACES: [&str; 3] = ["ns-0", "ns-1", "ns-2"];
const SENTINEL: &str = "ns-1/zz-sentinel";
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

async fn env() -> (SimServer, GatewayServer) {
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    for i in 0..30 {
        put(
            &store,
            pod(NAMESPACES[i % 3], &format!("seed-{i}"))
                .label("app", "web")
                .running_on(&format!("node-{}", i % 3))
                .pad(300)
                .build(),
        );
    }
    // Bookmarks every 100 ms, so that streams carry some through the outages and the
    // checkers verify them.
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.watch.bookmark_interval = Duration::from_millis(100);
    let gw = start_gateway_with(cfg).await;
    warm(gw.url(), sim.handle()).await;
    (sim, gw)
}

/// What a watcher watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// Every pod.
    All,
    /// The pods of namespace `ns-1`.
    Ns1,
    /// Pods labelled `app=web` (the writes flip labels, so pods move in and out).
    Web,
}

const SCOPES: [Scope; 3] = [Scope::All, Scope::Ns1, Scope::Web];

impl Scope {
    fn ns(self) -> Option<&'static str> {
        (self == Scope::Ns1).then_some("ns-1")
    }

    fn matches(self, p: &serde_json::Value) -> bool {
        self != Scope::Web || p["metadata"]["labels"]["app"] == "web"
    }

    fn path(self, from: u64) -> String {
        let q = format!(
            "watch=true&resourceVersion={from}&allowWatchBookmarks=true&timeoutSeconds=300"
        );
        match self {
            Scope::All => format!("/api/v1/pods?{q}"),
            Scope::Ns1 => format!("/api/v1/namespaces/ns-1/pods?{q}"),
            Scope::Web => format!("/api/v1/pods?{q}&labelSelector=app%3Dweb"),
        }
    }

    /// What a watcher of this scope from `from` must get (exactly, when the upstream's
    /// history is complete).
    fn log(self, store: &Store, from: u64) -> Arc<Vec<Sig>> {
        Arc::new(watch_env::log_filtered(store, from, self.ns(), |p| {
            self.matches(p)
        }))
    }

    /// The simulator's current state as this scope sees it.
    fn state(self, store: &Store) -> BTreeMap<String, u64> {
        sim_state_where(store, self.ns(), |p| self.matches(p))
    }
}

/// A watcher and its task.
struct Watcher {
    id: usize,
    scope: Scope,
    task: tokio::task::JoinHandle<Result<Vec<Sig>, String>>,
}

/// 30 watchers from `from`, ten per scope, half over HTTP/1.1 and half as streams of one
/// HTTP/2 connection; all ask for bookmarks.
async fn watchers(addr: SocketAddr, from: u64) -> Vec<Watcher> {
    let conn = H2Conn::connect(addr).await.expect("h2c connection");
    let mut out = Vec::new();
    for id in 0..30 {
        let scope = SCOPES[id % 3];
        let path = scope.path(from);
        let w = if id % 2 == 0 {
            h1_watch(addr, &path).await
        } else {
            conn.watch(&path).await
        };
        let w = w.unwrap_or_else(|e| panic!("watcher {id}: {e}"));
        assert_eq!(w.status, 200, "watcher {id}");
        let mut lines = w.lines;
        // Until the sentinel, whatever its event type: a wrong one is the checker's to name.
        let task = tokio::spawn(async move {
            read_sigs_until(&mut lines, EVENT_TIMEOUT, |sig| sig.key == SENTINEL).await
        });
        out.push(Watcher { id, scope, task });
    }
    out
}

/// Deterministic writes over the namespaces: creates, updates and deletes.
struct Writer {
    store: Arc<Store>,
    n: usize,
    live: Vec<(String, String)>,
}

impl Writer {
    fn new(store: Arc<Store>) -> Self {
        let live = (0..30)
            .map(|i| (NAMESPACES[i % 3].to_string(), format!("seed-{i}")))
            .collect();
        Self { store, n: 0, live }
    }

    fn write(&mut self) {
        let i = self.n;
        self.n += 1;
        match i % 5 {
            0 | 3 => {
                let ns = NAMESPACES[(i / 5) % 3];
                let name = format!("w-{i}");
                put(
                    &self.store,
                    pod(ns, &name)
                        .label("app", "web")
                        .running_on("node-1")
                        .pad(300)
                        .build(),
                );
                self.live.push((ns.to_string(), name));
            }
            1 => {
                let (ns, name) = &self.live[(i * 7) % self.live.len()];
                update(&self.store, ns, name, |p| {
                    p["status"]["phase"] = format!("Step{i}").into();
                });
            }
            2 => {
                // In or out of `app=web`.
                let (ns, name) = &self.live[(i * 11) % self.live.len()];
                update(&self.store, ns, name, |p| {
                    let app = if p["metadata"]["labels"]["app"] == "web" {
                        "db"
                    } else {
                        "web"
                    };
                    p["metadata"]["labels"]["app"] = app.into();
                });
            }
            _ => {
                let (ns, name) = self.live.remove((i * 13) % self.live.len());
                delete(&self.store, &ns, &name);
            }
        }
    }

    fn writes(&mut self, n: usize) {
        for _ in 0..n {
            self.write();
        }
    }
}

async fn wait_for_watches(sim: &SimServer, at_least: u64, what: &str) {
    let stats = sim.handle().stats().clone();
    wait_until(what, Duration::from_secs(20), || {
        let stats = stats.clone();
        async move { stats.watches("pods") >= at_least }
    })
    .await;
}

/// Collects every watcher's events; panics with every failure at once.
async fn collect(ws: Vec<Watcher>) -> Vec<(usize, Scope, Vec<Sig>)> {
    let mut out = Vec::new();
    let mut failures = Vec::new();
    for w in ws {
        match tokio::time::timeout(Duration::from_secs(60), w.task)
            .await
            .expect("watchers finish within 60 s")
            .expect("watcher task")
        {
            Ok(ev) => out.push((w.id, w.scope, ev)),
            Err(e) => failures.push(format!("watcher {} ({:?}): {e}", w.id, w.scope)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_watch_drops_and_resumes_leave_every_watcher_continuous() {
    let (sim, gw) = env().await;
    let store = sim.handle().store().clone();
    let stats = sim.handle().stats().clone();
    let faults = sim.handle().faults().clone();
    let from = store.current_rv();
    let initial = SCOPES.map(|s| s.state(&store));
    let lists_before = stats.lists("pods");
    let watches_before = stats.watches("pods");
    let ws = watchers(gw.handle().addr(), from).await;
    let mut writer = Writer::new(store.clone());
    writer.writes(20);

    // One drop with a slow upstream: writes pile up until the reflector's resume lands.
    faults.set_latency(Duration::from_millis(500));
    faults.drop_watches_now();
    writer.writes(30);
    wait_for_watches(&sim, watches_before + 1, "the reflector resumes its watch").await;
    faults.set_latency(Duration::ZERO);
    writer.writes(10);

    // Then a drop every 400 ms while writes flow for about two seconds.
    let watches_mid = stats.watches("pods");
    faults.set_drop_watch_after(Some(Duration::from_millis(400)));
    faults.drop_watches_now();
    for _ in 0..100 {
        writer.write();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_for_watches(
        &sim,
        watches_mid + 3,
        "the reflector resumed after repeated drops",
    )
    .await;
    faults.set_drop_watch_after(None);
    writer.writes(10);
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );

    let resumes = stats.watches("pods") - watches_before;
    assert_eq!(
        stats.lists("pods"),
        lists_before,
        "the reflector relisted: this test is about resuming"
    );
    let logs = SCOPES.map(|s| s.log(&store, from));
    let finals = SCOPES.map(|s| s.state(&store));
    let results = collect(ws).await;
    let mut failures = Vec::new();
    for (id, scope, events) in &results {
        let (ns, scope_kind) = (scope, *scope);
        let scope = SCOPES.iter().position(|s| *s == scope_kind).unwrap();
        let mut strict = StreamChecker::new(logs[scope].clone());
        let mut state = StateChecker::with_state(initial[scope].clone(), from);
        for e in events {
            strict.observe(e);
            state.observe(e);
        }
        for v in strict.finish(true).iter().chain(state.violations()) {
            failures.push(format!("watcher {id} ({ns:?}): {v}"));
        }
        if let Some(d) = state.diff(&finals[scope]) {
            failures.push(format!("watcher {id} ({ns:?}): final state: {d}"));
        }
    }
    println!(
        "{} watchers checked over {} events ({resumes} upstream watches: one per resume)",
        results.len(),
        logs[0].len()
    );
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_410_and_relist_leave_every_watcher_continuous() {
    let (sim, gw) = env().await;
    let store = sim.handle().store().clone();
    let stats = sim.handle().stats().clone();
    let faults = sim.handle().faults().clone();
    let from = store.current_rv();
    let initial = SCOPES.map(|s| s.state(&store));
    let lists_before = stats.lists("pods");
    let ws = watchers(gw.handle().addr(), from).await;
    let mut writer = Writer::new(store.clone());
    writer.writes(20);
    // Deleted and created again (a new uid) during the outage.
    let phoenix = |uid: &str| {
        pod("ns-1", "phoenix")
            .label("app", "web")
            .running_on("node-1")
            .uid(uid)
            .build()
    };
    put(&store, phoenix("uid-phoenix-1"));
    let before_outage = store.current_rv();
    // The gateway has these before the outage (so they must arrive exactly as logged).
    support::watch::wait_until_cached(
        gw.url(),
        "/api/v1/namespaces/default/pods?resourceVersion=0",
        support::watch::rv_at_least(before_outage),
    )
    .await;

    // The reflector's next watch gets 410 and it relists; the upstream answers slowly,
    // so writes happen during the outage.
    let watches_before = stats.watches("pods");
    faults.force_410_next_watch(1);
    faults.set_latency(Duration::from_secs(1));
    faults.drop_watches_now();
    // These may still reach the dying watch or only the relist: either is fine.
    writer.writes(25);
    // Once the 410 has been answered the old stream is long gone and the relist's list is
    // in its one-second wait: these reach the gateway only through the relist's diff.
    wait_for_watches(
        &sim,
        watches_before + 1,
        "the reflector's watch gets its 410",
    )
    .await;
    let seed4_deleted = delete(&store, "ns-1", "seed-4").expect("seed-4 exists");
    let updates: Vec<u64> = ["Outage1", "Outage2"]
        .iter()
        .map(|phase| {
            update(&store, "ns-1", "seed-1", |p| {
                p["status"]["phase"] = (*phase).into()
            })
            .expect("seed-1 exists")
        })
        .collect();
    put(
        &store,
        pod("ns-1", "blip")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    delete(&store, "ns-1", "blip");
    let phoenix_deleted = delete(&store, "ns-1", "phoenix").expect("phoenix exists");
    let phoenix_created = put(&store, phoenix("uid-phoenix-2"));
    // The relist is a list, or a watch-list (`sendInitialEvents`), whichever the
    // reflector uses: one more list, or a watch after the one that got the 410.
    let stats2 = stats.clone();
    wait_until(
        "the reflector relists after the 410",
        Duration::from_secs(20),
        || {
            let stats = stats2.clone();
            async move {
                stats.lists("pods") > lists_before || stats.watches("pods") > watches_before + 1
            }
        },
    )
    .await;
    faults.set_latency(Duration::ZERO);
    assert_eq!(
        faults.to_json()["pendingWatch410"],
        0,
        "the forced 410 was consumed by the reflector's watch"
    );
    writer.writes(20);
    put(
        &store,
        pod("ns-1", "zz-sentinel")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );

    let logs = SCOPES.map(|s| s.log(&store, from));
    let finals = SCOPES.map(|s| s.state(&store));
    let results = collect(ws).await;
    let mut failures = Vec::new();
    for (id, scope, events) in &results {
        let (ns, scope_kind) = (scope, *scope);
        let scope = SCOPES.iter().position(|s| *s == scope_kind).unwrap();
        // Before the outage the upstream's history was complete: exactly the log.
        let before: Vec<Sig> = logs[scope]
            .iter()
            .filter(|s| s.rv <= before_outage)
            .cloned()
            .collect();
        let mut strict = StreamChecker::new(Arc::new(before));
        let mut state = StateChecker::with_state(initial[scope].clone(), from);
        for e in events {
            if e.rv <= before_outage {
                strict.observe(e);
            }
            state.observe(e);
        }
        for v in strict.finish(true).iter().chain(state.violations()) {
            failures.push(format!("watcher {id} ({ns:?}): {v}"));
        }
        if let Some(d) = state.diff(&finals[scope]) {
            failures.push(format!("watcher {id} ({ns:?}): final state: {d}"));
        }
        // What only the relist could tell: seed-1's two updates as one MODIFIED, seed-4's
        // deletion with the list's RV (for the scopes that see both whatever their
        // labels), the short-lived pod not at all.
        let seed1: Vec<&Sig> = events
            .iter()
            .filter(|e| e.key == "ns-1/seed-1" && e.rv > before_outage)
            .collect();
        let sees_ns1 = scope_kind != Scope::Web;
        if sees_ns1
            && (seed1.len() != 1 || seed1[0].kind != "MODIFIED" || seed1[0].rv != updates[1])
        {
            failures.push(format!(
                "watcher {id} ({ns:?}): seed-1 (updated at RVs {updates:?} during the outage) \
                 arrived as {:?}, want one MODIFIED at RV {}",
                seed1.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                updates[1]
            ));
        }
        let seed4: Vec<&Sig> = events.iter().filter(|e| e.key == "ns-1/seed-4").collect();
        if sees_ns1
            && (seed4.len() != 1 || seed4[0].kind != "DELETED" || seed4[0].rv <= seed4_deleted)
        {
            failures.push(format!(
                "watcher {id} ({ns:?}): seed-4 (deleted at RV {seed4_deleted} during the \
                 outage) arrived as {:?}, want one DELETED at the relist's RV",
                seed4.iter().map(|s| s.to_string()).collect::<Vec<_>>()
            ));
        }
        // The re-created pod: DELETED, then ADDED, as a watch that saw it happen would
        // report it (not a MODIFIED that changes its uid). The deletion gets the highest
        // RV below the new pod's that no other event of the relist uses: with the two
        // writes adjacent, exactly the real deletion's.
        let phoenix: Vec<(&str, u64)> = events
            .iter()
            .filter(|e| e.key == "ns-1/phoenix" && e.rv > before_outage)
            .map(|s| (s.kind.as_str(), s.rv))
            .collect();
        let want = [("DELETED", phoenix_deleted), ("ADDED", phoenix_created)];
        if phoenix != want {
            failures.push(format!(
                "watcher {id} ({ns:?}): phoenix (deleted at RV {phoenix_deleted} and created \
                 again at {phoenix_created} during the outage) arrived as {phoenix:?}, want \
                 {want:?}"
            ));
        }
        if events.iter().any(|e| e.key == "ns-1/blip") {
            failures.push(format!(
                "watcher {id} ({ns:?}): saw a pod that lived only during the outage"
            ));
        }
    }
    println!(
        "{} watchers checked; {} writes; upstream: {} lists, {} watches during the test",
        results.len(),
        logs[0].len(),
        stats.lists("pods") - lists_before,
        stats.watches("pods") - watches_before
    );
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures[..failures.len().min(10)].join("\n")
    );
}

/// `--watch-relist=end`: an upstream relist ends every watch of the resource, as
/// kube-apiserver's cacher terminates its watchers when its reflector relists; a client
/// resuming from an RV the relist skipped gets the 410 and relists, as from the apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_watch_relist_end_an_upstream_relist_ends_every_watch() {
    use support::watch::{open_ok, rv_at_least, wait_until_cached};
    let sim = start_sim_with(cluster_config()).await;
    let store = sim.handle().store().clone();
    let mut cfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
    cfg.watch.relist = watchgate::watch::RelistMode::End;
    let gw = start_gateway_with(cfg).await;
    let rv = put(
        &store,
        pod("ns-1", "a")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    wait_until_cached(gw.url(), "/api/v1/pods?resourceVersion=0", rv_at_least(rv)).await;
    let path = format!("/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion={rv}");
    let mut w = open_ok(gw.url(), &path).await;
    w.assert_from_cache();

    let (stats, faults) = (sim.handle().stats().clone(), sim.handle().faults().clone());
    let requests = || stats.lists("pods") + stats.watches("pods");
    let before = requests();
    // Written before the upstream watch is dropped, so that the relist's state is past
    // `rv` (written after, a relist done before it would be at `rv` itself, and a watch
    // from `rv` would then rightly continue).
    let written = put(
        &store,
        pod("ns-1", "b")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    faults.force_410_next_watch(1);
    faults.drop_watches_now();
    // The stream ends (no ERROR event: the cacher closes its watchers' channels). The
    // write may have reached the old upstream watch before it dropped: then its event
    // comes first.
    while let Some(e) = w.next_within(Duration::from_secs(20)).await {
        assert_eq!(
            (e.ty(), e.rv()),
            ("ADDED", written),
            "only b before the end: {e:?}"
        );
    }
    assert!(requests() >= before + 2, "the 410'd watch, then the relist");
    wait_until_cached(
        gw.url(),
        "/api/v1/pods?resourceVersion=0",
        rv_at_least(written),
    )
    .await;

    // Resuming from the old RV: the relist's history starts after it.
    let mut again = open_ok(gw.url(), &path).await;
    let e = again.next("the 410").await;
    assert_eq!(e.ty(), "ERROR", "{e:?}");
    assert_eq!(e.json["object"]["code"], 410, "{e:?}");
    again.assert_from_cache();
    // A client that relisted resumes from the new RV and sees the next change.
    let mut fresh = open_ok(
        gw.url(),
        &format!("/api/v1/namespaces/ns-1/pods?watch=1&resourceVersion={written}"),
    )
    .await;
    let c = put(
        &store,
        pod("ns-1", "c")
            .label("app", "web")
            .running_on("node-1")
            .build(),
    );
    let e = fresh.next("the write after the relist").await;
    assert_eq!((e.ty(), e.rv()), ("ADDED", c), "{e:?}");
}
