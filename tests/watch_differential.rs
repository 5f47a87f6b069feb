//! Watch semantics through the gateway, differential (issue 5, "What must be shown" 1): the
//! same watch request sent to the simulator directly and through the gateway must produce
//! the same event sequence (types and objects), for RV=0, RV=N, a too-old RV (410), label
//! and field selectors with objects moving in and out, namespace scope, single-object
//! watches, bookmarks, sendInitialEvents with the initial-events-end bookmark, and
//! timeoutSeconds. Every watch with an RV set must also be served from the gateway's cache
//! (`x-watchgate-source: cache`): without the fan-out these tests fail.
//!
//! The simulator is the ground truth (docs/simulator.md cites the kube-apiserver code it
//! follows). Writes go straight into its store; each expected event is awaited with a
//! bounded wait, and "nothing else came" is shown by a sentinel write that must be the very
//! next event, not by sleeping.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::objects::configmap;
use support::servers::{
    cluster_config, start_gateway_with, start_sim_with, GatewayServer, SimServer,
};
use support::wait::within;
use support::watch::{
    assert_same_bytes, assert_same_events, delete_object, delete_pod, open_ok, put_object, put_pod,
    resource, rv_at_least, rv_of, stored_pod, typed, wait_until_cached, Event, Watch,
};
use watchgate::config::GatewayConfig;
use watchgate::sim::{Mutation, SimHandle};

const NS1: &str = "/api/v1/namespaces/ns1/pods";

/// A simulator and a gateway in front of it, the gateway's pods cache synced.
struct Pair {
    sim: SimServer,
    gw: GatewayServer,
}

impl Pair {
    async fn start() -> Self {
        Self::start_with(None).await
    }

    /// `bookmarks`: the bookmark interval of both the simulator and the gateway.
    async fn start_with(bookmarks: Option<Duration>) -> Self {
        let mut cfg = cluster_config();
        if let Some(b) = bookmarks {
            cfg.bookmark_interval = b;
        }
        let sim = start_sim_with(cfg).await;
        let mut gcfg = GatewayConfig::for_upstream_url(sim.url()).expect("gateway config");
        if let Some(b) = bookmarks {
            gcfg.watch.bookmark_interval = b;
        }
        let gw = start_gateway_with(gcfg).await;
        let p = Self { sim, gw };
        p.caught_up(p.h().store().current_rv()).await;
        p
    }

    fn h(&self) -> &SimHandle {
        self.sim.handle()
    }

    /// Waits until the gateway's pods cache has seen every write up to `rv`.
    async fn caught_up(&self, rv: u64) {
        wait_until_cached(
            self.gw.url(),
            "/api/v1/pods?resourceVersion=0",
            rv_at_least(rv),
        )
        .await;
    }

    /// The same watch, to the simulator and through the gateway.
    async fn open(&self, path: &str) -> (Watch, Watch) {
        let s = open_ok(self.sim.url(), path).await;
        let g = open_ok(self.gw.url(), path).await;
        (s, g)
    }
}

/// Reads `n` events from both streams and asserts they are the same; returns the
/// simulator's.
async fn same_next(s: &mut Watch, g: &mut Watch, n: usize, desc: &str) -> Vec<Event> {
    let se = s.take(n, desc).await;
    let ge = g.take(n, desc).await;
    assert_same_events(desc, &se, &ge);
    se
}

fn types(evs: &[Event]) -> Vec<(String, String)> {
    evs.iter().map(Event::typed).collect()
}

/// A pods watch's BOOKMARK event at `rv`: the Pod's zero object (as the apiserver's watch
/// cache makes it) with only metadata.resourceVersion set.
fn pod_bookmark(rv: u64) -> Value {
    json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
           "metadata": {"resourceVersion": rv.to_string()},
           "spec": {"containers": null}, "status": {}}})
}

/// `obj` with metadata.resourceVersion set to `rv`.
fn at_rv(mut obj: Value, rv: u64) -> Value {
    obj["metadata"]["resourceVersion"] = json!(rv.to_string());
    obj
}

/// Writes a pod named `sentinel` that the watch must see, and asserts it is the next event
/// of both streams: nothing else (no extra, duplicated or late event) came before it.
async fn sentinel(p: &Pair, s: &mut Watch, g: &mut Watch, ns: &str, labels: Value, node: &str) {
    put_pod(p.h(), ns, "sentinel", labels, node, "Pending");
    let evs = same_next(s, g, 1, "the sentinel write, and nothing before it").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "sentinel")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv0_initial_state_then_changes() {
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "b", json!({"app": "web"}), "node-1", "Running");
    put_pod(h, "ns2", "c", json!({"app": "db"}), "node-2", "Running");
    put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Pending");
    let last = put_pod(
        h,
        "ns1",
        "b",
        json!({"app": "web", "v": "2"}),
        "node-1",
        "Running",
    );
    p.caught_up(last).await;

    let (mut s, mut g) = p.open("/api/v1/pods?watch=1&resourceVersion=0").await;
    // Synthetic ADDED for the current state, in etcd key order, each at its own RV.
    let initial = same_next(&mut s, &mut g, 3, "the initial state").await;
    assert_eq!(
        types(&initial),
        typed(&[("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")])
    );
    for (ev, (ns, name)) in initial
        .iter()
        .zip([("ns1", "a"), ("ns1", "b"), ("ns2", "c")])
    {
        assert_eq!(ev.object(), &stored_pod(h, ns, name), "initial {ns}/{name}");
    }

    // Then the changes made after the watch started.
    put_pod(h, "ns2", "d", json!({}), "node-3", "Pending");
    let m = put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    let d = delete_pod(h, "ns2", "c");
    let changes = same_next(&mut s, &mut g, 3, "the changes after the start").await;
    assert_eq!(
        types(&changes),
        typed(&[("ADDED", "d"), ("MODIFIED", "a"), ("DELETED", "c")])
    );
    assert_eq!(changes[1].rv(), m);
    assert_eq!(changes[2].rv(), d, "DELETED carries the deletion's RV");
    sentinel(&p, &mut s, &mut g, "ns1", json!({}), "node-1").await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv_n_sends_exactly_the_changes_after_n_in_order() {
    let p = Pair::start().await;
    let h = p.h();
    let n = put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Pending");
    let b = put_pod(h, "ns1", "b", json!({"app": "db"}), "node-2", "Running");
    let a2 = put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    p.caught_up(a2).await;

    let (mut s, mut g) = p.open(&format!("{NS1}?watch=1&resourceVersion={n}")).await;
    // No synthetic events: only what happened after N, from the history.
    let history = same_next(&mut s, &mut g, 2, "the changes after N").await;
    assert_eq!(types(&history), typed(&[("ADDED", "b"), ("MODIFIED", "a")]));
    assert_eq!((history[0].rv(), history[1].rv()), (b, a2));
    // Then live ones.
    let d = delete_pod(h, "ns1", "b");
    put_pod(h, "ns1", "c", json!({}), "node-1", "Pending");
    let live = same_next(&mut s, &mut g, 2, "the live changes").await;
    assert_eq!(types(&live), typed(&[("DELETED", "b"), ("ADDED", "c")]));
    assert_eq!(live[0].rv(), d);
    sentinel(&p, &mut s, &mut g, "ns1", json!({}), "node-1").await;
    // The wire bytes too: a client cannot tell the gateway from the apiserver.
    assert_same_bytes("RV=N events", &s.seen, &g.seen);
    for h in ["content-type", "transfer-encoding"] {
        assert_eq!(
            g.headers.get(h),
            s.headers.get(h),
            "header {h}: gateway {:?}, simulator {:?}",
            g.headers,
            s.headers
        );
    }
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv_older_than_the_history_is_200_and_one_410_error_event() {
    // The simulator's history is compacted past RV `old` before the gateway starts, so
    // `old` is older than both histories.
    let sim = start_sim_with(cluster_config()).await;
    let h = sim.handle();
    let old = put_pod(h, "ns1", "a", json!({}), "node-1", "Pending");
    put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let compacted = put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    h.store().compact(compacted);
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(sim.url()).unwrap()).await;
    wait_until_cached(
        gw.url(),
        "/api/v1/pods?resourceVersion=0",
        rv_at_least(compacted),
    )
    .await;

    let path = format!("{NS1}?watch=1&resourceVersion={old}");
    let mut s = open_ok(sim.url(), &path).await;
    let mut g = open_ok(gw.url(), &path).await;
    let se = s.next("the 410 ERROR event").await;
    let ge = g.next("the 410 ERROR event").await;
    // The simulator's M is its compaction point; the gateway's is its own history's start.
    let shape = |e: &Event| -> (Value, u64) {
        let msg = e.object()["message"].as_str().unwrap_or("").to_string();
        let prefix = format!("too old resource version: {old} (");
        let m: u64 = msg
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(')'))
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("message {msg:?} is not `{prefix}M)`: {e:?}"));
        let mut v = e.json.clone();
        v["object"]["message"] = json!("too old resource version: N (M)");
        (v, m)
    };
    let (s_shape, s_m) = shape(&se);
    let (g_shape, g_m) = shape(&ge);
    assert_eq!(
        s_shape,
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
               "status": "Failure", "message": "too old resource version: N (M)",
               "reason": "Expired", "code": 410}}),
        "the simulator's ERROR event"
    );
    assert_eq!(s_m, compacted);
    assert_eq!(
        g_shape, s_shape,
        "the gateway's ERROR event must have the simulator's shape: got {ge:?}"
    );
    // watch_cache.go getAllEventsSinceLocked: M is oldest-1, which for a cache that has
    // dropped nothing since its list at RV L is L itself (here: the compaction point, the
    // current RV when the gateway started).
    assert_eq!(
        g_m, compacted,
        "M in the gateway's 410 must be its cache's start RV (cacher: oldest-1): {ge:?}"
    );
    // Then the stream ends, cleanly.
    s.expect_end(Duration::from_secs(5)).await;
    g.expect_end(Duration::from_secs(5)).await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_selector_transitions_into_within_and_out_of() {
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    let start = put_pod(h, "ns1", "b", json!({"app": "db"}), "node-1", "Running");
    p.caught_up(start).await;

    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={start}&labelSelector=app%3Dweb"
        ))
        .await;
    // b moves into the selector → ADDED.
    put_pod(h, "ns1", "b", json!({"app": "web"}), "node-1", "Running");
    // a changes within it → MODIFIED.
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "web", "v": "2"}),
        "node-1",
        "Running",
    );
    // a moves out of it → DELETED with the previous object at the event's RV.
    let a_before = stored_pod(h, "ns1", "a");
    let out = put_pod(h, "ns1", "a", json!({"app": "db"}), "node-1", "Running");
    // Changes outside it are invisible; deleting a matching object → DELETED.
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "db", "v": "3"}),
        "node-1",
        "Running",
    );
    delete_pod(h, "ns1", "a");
    let gone = delete_pod(h, "ns1", "b");
    let evs = same_next(&mut s, &mut g, 4, "label selector transitions").await;
    assert_eq!(
        types(&evs),
        typed(&[
            ("ADDED", "b"),
            ("MODIFIED", "a"),
            ("DELETED", "a"),
            ("DELETED", "b")
        ])
    );
    assert_eq!(
        evs[2].object(),
        &at_rv(a_before, out),
        "leaving the selector: DELETED carries the previous object at the event's RV"
    );
    assert_eq!(evs[3].rv(), gone);
    sentinel(&p, &mut s, &mut g, "ns1", json!({"app": "web"}), "node-1").await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_selector_transitions_phase_and_node_name() {
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "a", json!({}), "node-1", "Pending");
    let start = put_pod(h, "ns1", "b", json!({}), "node-2", "Running");
    p.caught_up(start).await;

    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={start}&fieldSelector=status.phase%3DPending"
        ))
        .await;
    // The kubelet's watch: all namespaces, one node.
    let (mut sk, mut gk) = p
        .open(&format!(
            "/api/v1/pods?watch=1&resourceVersion={start}&fieldSelector=spec.nodeName%3Dnode-2"
        ))
        .await;

    put_pod(h, "ns1", "b", json!({}), "node-2", "Pending"); // b: into Pending
    let a_before = stored_pod(h, "ns1", "a");
    let a_out = put_pod(h, "ns1", "a", json!({}), "node-2", "Running"); // a: out of Pending, onto node-2
    put_pod(h, "ns1", "b", json!({"v": "2"}), "node-2", "Pending"); // b: within both
    let b_before = stored_pod(h, "ns1", "b");
    let b_out = put_pod(h, "ns1", "b", json!({"v": "2"}), "node-3", "Pending"); // b: off node-2

    let evs = same_next(&mut s, &mut g, 4, "status.phase=Pending transitions").await;
    assert_eq!(
        types(&evs),
        typed(&[
            ("ADDED", "b"),
            ("DELETED", "a"),
            ("MODIFIED", "b"),
            ("MODIFIED", "b")
        ])
    );
    assert_eq!(evs[1].object(), &at_rv(a_before, a_out));
    let evs = same_next(&mut sk, &mut gk, 4, "spec.nodeName=node-2 transitions").await;
    assert_eq!(
        types(&evs),
        typed(&[
            ("MODIFIED", "b"),
            ("ADDED", "a"),
            ("MODIFIED", "b"),
            ("DELETED", "b")
        ])
    );
    assert_eq!(evs[3].object(), &at_rv(b_before, b_out));
    sentinel(&p, &mut s, &mut g, "ns1", json!({}), "node-2").await;
    let evs = same_next(&mut sk, &mut gk, 1, "the sentinel on node-2").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "sentinel")]));
    g.assert_from_cache();
    gk.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_scoped_watches_see_only_their_namespace() {
    let p = Pair::start().await;
    let h = p.h();
    // Namespaces whose names are prefixes of each other.
    put_pod(h, "a", "x", json!({}), "node-1", "Running");
    put_pod(h, "ab", "x", json!({}), "node-1", "Running");
    let start = put_pod(h, "a-b", "x", json!({}), "node-1", "Running");
    p.caught_up(start).await;

    let (mut s0, mut g0) = p
        .open("/api/v1/namespaces/a/pods?watch=1&resourceVersion=0")
        .await;
    let evs = same_next(&mut s0, &mut g0, 1, "RV=0 in namespace a").await;
    assert_eq!(evs[0].object()["metadata"]["namespace"], "a");
    let (mut s, mut g) = p
        .open(&format!(
            "/api/v1/namespaces/a/pods?watch=1&resourceVersion={start}"
        ))
        .await;
    for ns in ["ab", "a-b", "a", "default"] {
        put_pod(h, ns, "y", json!({}), "node-1", "Running");
    }
    delete_pod(h, "ab", "x");
    delete_pod(h, "a", "x");
    let evs = same_next(&mut s, &mut g, 2, "namespace a's changes").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "y"), ("DELETED", "x")]));
    for e in &evs {
        assert_eq!(e.object()["metadata"]["namespace"], "a", "{e:?}");
    }
    let evs = same_next(&mut s0, &mut g0, 2, "namespace a's changes (RV=0 watch)").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "y"), ("DELETED", "x")]));
    sentinel(&p, &mut s, &mut g, "a", json!({}), "node-1").await;
    g.assert_from_cache();
    g0.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_object_watches_by_field_selector_and_legacy_path() {
    let p = Pair::start().await;
    let h = p.h();
    let start = put_pod(h, "ns1", "a", json!({}), "node-1", "Pending");
    put_pod(h, "ns1", "ab", json!({}), "node-1", "Pending");
    let a2 = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(a2).await;

    let (mut sf, mut gf) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={start}&fieldSelector=metadata.name%3Da"
        ))
        .await;
    let (mut sl, mut gl) = p
        .open(&format!(
            "/api/v1/watch/namespaces/ns1/pods/a?resourceVersion={start}"
        ))
        .await;
    // RV=0 on the legacy path: the object itself first.
    let (mut s0, mut g0) = p
        .open("/api/v1/watch/namespaces/ns1/pods/a?resourceVersion=0")
        .await;
    let evs = same_next(&mut s0, &mut g0, 1, "legacy path, RV=0").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "a")]));

    put_pod(h, "ns1", "ab", json!({"v": "2"}), "node-1", "Running");
    put_pod(h, "ns2", "a", json!({}), "node-1", "Running");
    let d = delete_pod(h, "ns1", "a");
    put_pod(h, "ns1", "a", json!({"v": "3"}), "node-1", "Pending");
    for (s, g, what) in [
        (&mut sf, &mut gf, "fieldSelector=metadata.name=a"),
        (&mut sl, &mut gl, "/watch/namespaces/ns1/pods/a"),
    ] {
        let evs = same_next(s, g, 3, what).await;
        assert_eq!(
            types(&evs),
            typed(&[("MODIFIED", "a"), ("DELETED", "a"), ("ADDED", "a")]),
            "{what}"
        );
        assert_eq!((evs[0].rv(), evs[1].rv()), (a2, d), "{what}");
    }
    let evs = same_next(&mut s0, &mut g0, 2, "legacy path, RV=0, changes").await;
    assert_eq!(types(&evs), typed(&[("DELETED", "a"), ("ADDED", "a")]));
    for g in [&gf, &gl, &g0] {
        g.assert_from_cache();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_have_the_apiservers_shape_and_cadence() {
    let p = Pair::start_with(Some(Duration::from_millis(300))).await;
    let h = p.h();
    let rv = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;

    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        ))
        .await;
    // Idle: a bookmark at the RV everything has been seen up to: the type's zero object
    // with only metadata.resourceVersion set, as the apiserver's watch cache writes it.
    let want = pod_bookmark;
    let evs = same_next(&mut s, &mut g, 1, "the first idle bookmark").await;
    assert_eq!(evs[0].json, want(rv));
    // A change, then the next bookmark carries its RV.
    let b = put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    let evs = same_next(&mut s, &mut g, 2, "ADDED, then a bookmark").await;
    assert_eq!(types(&evs)[0], ("ADDED".to_string(), "b".to_string()));
    assert_eq!(evs[1].json, want(b));
    // And they keep coming while idle.
    let evs = same_next(&mut s, &mut g, 1, "another idle bookmark").await;
    assert_eq!(evs[0].json, want(b));
    g.assert_from_cache();

    // Without allowWatchBookmarks, none: the sentinel is the next event.
    let (mut s, mut g) = p.open(&format!("{NS1}?watch=1&resourceVersion={b}")).await;
    // Two bookmark intervals pass (bounded by the bookmark watch opened alongside).
    let (mut sb, mut gb) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={b}&allowWatchBookmarks=true"
        ))
        .await;
    same_next(&mut sb, &mut gb, 2, "two bookmark intervals").await;
    sentinel(&p, &mut s, &mut g, "ns1", json!({}), "node-1").await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_rv0_then_initial_events_end_bookmark_then_changes() {
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let rv = put_pod(h, "ns1", "c", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0"
        ))
        .await;
    initial_events_then_changes(&p, &mut s, &mut g, rv).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_rv_n_then_initial_events_end_bookmark_then_changes() {
    let p = Pair::start().await;
    let h = p.h();
    let n = put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let rv = put_pod(h, "ns1", "c", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={n}"
        ))
        .await;
    initial_events_then_changes(&p, &mut s, &mut g, rv).await;
}

/// Bookmark objects byte for byte: a built-in type's is its zero object (Go struct), a
/// custom resource's a Go map with sorted keys (`unstructured.Unstructured`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmark_objects_are_the_apiservers_bytes_for_built_in_and_custom_types() {
    let p = Pair::start().await;
    let watch_list = "?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0";
    // A custom resource first (its cache reaches the newest write: the bookmark's RV).
    let widgets = resource("example.com", "v1", "widgets");
    let rv = put_object(
        p.h(),
        widgets,
        "ns1",
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
               "metadata": {"name": "w1", "namespace": "ns1"}, "spec": {"size": 3}}),
    );
    let wpath = "/apis/example.com/v1/namespaces/ns1/widgets";
    wait_until_cached(
        p.gw.url(),
        &format!("{wpath}?resourceVersion=0"),
        rv_at_least(rv),
    )
    .await;
    let (mut s, mut g) = p.open(&format!("{wpath}{watch_list}")).await;
    let (se, ge) = (
        s.take(2, "widget + bookmark").await,
        g.take(2, "widget + bookmark").await,
    );
    assert_same_bytes("a custom resource's watch-list", &se, &ge);
    assert_eq!(
        std::str::from_utf8(&ge[1].raw).unwrap().trim_end(),
        format!(
            r#"{{"type":"BOOKMARK","object":{{"apiVersion":"example.com/v1","kind":"Widget","metadata":{{"annotations":{{"k8s.io/initial-events-end":"true"}},"resourceVersion":"{rv}"}}}}}}"#
        )
    );
    g.assert_from_cache();

    // Then a built-in type.
    let rv = put_pod(p.h(), "ns2", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let (mut s, mut g) = p.open(&format!("{NS1}{watch_list}")).await;
    let (se, ge) = (
        s.take(1, "pods bookmark").await,
        g.take(1, "pods bookmark").await,
    );
    assert_same_bytes("a built-in type's watch-list", &se, &ge);
    assert_eq!(
        std::str::from_utf8(&ge[0].raw).unwrap().trim_end(),
        format!(
            r#"{{"type":"BOOKMARK","object":{{"kind":"Pod","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}","annotations":{{"k8s.io/initial-events-end":"true"}}}},"spec":{{"containers":null}},"status":{{}}}}}}"#
        )
    );
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv0_watch_with_bookmarks_defaults_to_watch_list() {
    // apimachinery SetListOptionsDefaults (WatchList on): watch=1 with RV "" or "0" and
    // neither sendInitialEvents nor resourceVersionMatch becomes sendInitialEvents=true,
    // so the initial events end with the annotated bookmark.
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let rv = put_pod(h, "ns1", "c", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&allowWatchBookmarks=true&resourceVersion=0"
        ))
        .await;
    initial_events_then_changes(&p, &mut s, &mut g, rv).await;
}

/// ADDED a, b, c (the state, key order), the initial-events-end bookmark at `rv`, then live
/// changes.
async fn initial_events_then_changes(p: &Pair, s: &mut Watch, g: &mut Watch, rv: u64) {
    let evs = same_next(s, g, 4, "initial events and their end bookmark").await;
    assert_eq!(
        types(&evs)[..3],
        typed(&[("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")])[..]
    );
    assert_eq!(
        evs[3].json,
        json!({"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
               "metadata": {"resourceVersion": rv.to_string(),
                            "annotations": {"k8s.io/initial-events-end": "true"}},
               "spec": {"containers": null}, "status": {}}})
    );
    put_pod(p.h(), "ns1", "a", json!({"v": "2"}), "node-1", "Running");
    delete_pod(p.h(), "ns1", "b");
    let evs = same_next(s, g, 2, "live changes after the initial events").await;
    assert_eq!(types(&evs), typed(&[("MODIFIED", "a"), ("DELETED", "b")]));
    sentinel(p, s, g, "ns1", json!({}), "node-1").await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_seconds_ends_the_stream_cleanly_after_about_one_second() {
    let p = Pair::start().await;
    let rv = put_pod(p.h(), "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let started = Instant::now();
    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={rv}&timeoutSeconds=1"
        ))
        .await;
    put_pod(p.h(), "ns1", "b", json!({}), "node-1", "Running");
    let evs = same_next(&mut s, &mut g, 1, "a change before the timeout").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "b")]));
    for (w, who) in [(&mut s, "simulator"), (&mut g, "gateway")] {
        // Bounded: the stream must end on its own, within a generous 5 s.
        w.expect_end(Duration::from_secs(5)).await;
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(900),
            "{who}: timeoutSeconds=1 ended the stream after {took:?}"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "both streams ended within 5 s"
    );
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv_newer_than_the_cache_waits_and_sends_only_what_follows_it() {
    // api-concepts: for RV N newer than what the server has, "the API server may wait
    // indefinitely"; events after N are then delivered as they come.
    let p = Pair::start().await;
    let h = p.h();
    let rv = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let n = rv + 2;
    let (mut s, mut g) = p.open(&format!("{NS1}?watch=1&resourceVersion={n}")).await;
    put_pod(h, "ns1", "b", json!({}), "node-1", "Running"); // n - 1
    put_pod(h, "ns1", "c", json!({}), "node-1", "Running"); // n
    let d = put_pod(h, "ns1", "d", json!({}), "node-1", "Running"); // n + 1
    assert_eq!(d, n + 1);
    let evs = same_next(&mut s, &mut g, 1, "the first change after N").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "d")]));
    sentinel(&p, &mut s, &mut g, "ns1", json!({}), "node-1").await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_with_a_future_rv_is_the_upstreams_504_error_event() {
    let p = Pair::start().await;
    let h = p.h();
    let rv = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let q =
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";

    // An RV that never comes: 200, then after the 3 s wait one ERROR event with the Too
    // large resource version Status (504), then the end. The gateway's cache cannot tell
    // an RV it has not reached from one that never comes, so after its short catch-up
    // wait the upstream answers (cache::serve::CATCH_UP_WAIT).
    // (kube-apiserver answers only after the wait: cacher.Watch returns newErrWatcher, then
    // serveWatch writes the 200; so both are opened at once.)
    let far = rv + 1000;
    let path = format!("{NS1}?{q}&resourceVersion={far}");
    let started = Instant::now();
    let (mut s, mut g) = tokio::join!(open_ok(p.sim.url(), &path), open_ok(p.gw.url(), &path));
    let evs = same_next(&mut s, &mut g, 1, "the Too large resource version ERROR").await;
    assert_eq!(evs[0].ty(), "ERROR");
    assert_eq!(evs[0].object()["code"], 504);
    assert_eq!(
        evs[0].object()["message"],
        format!("Timeout: Too large resource version: {far}, current: {rv}")
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(2900),
        "the ERROR comes after the 3 s wait, not after {waited:?}"
    );
    s.expect_end(Duration::from_secs(5)).await;
    g.expect_end(Duration::from_secs(5)).await;
    assert_eq!(g.source(), Some("upstream"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_multiplexed_on_one_h2c_connection_match_the_simulator() {
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let p = Pair::start().await;
    let h = p.h();
    let rv = put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    p.caught_up(rv).await;

    // One TCP connection, HTTP/2 with prior knowledge, three concurrent watch streams.
    let addr = p.gw.url().trim_start_matches("http://").to_string();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake::<
        _,
        _,
        http_body_util::Empty<bytes::Bytes>,
    >(TokioExecutor::new(), TokioIo::new(tcp))
    .await
    .expect("h2c handshake with the gateway");
    tokio::spawn(conn);
    let paths = [
        format!("{NS1}?watch=1&resourceVersion={rv}"),
        format!("{NS1}?watch=1&resourceVersion={rv}&labelSelector=app%3Dweb"),
        "/api/v1/pods?watch=1&resourceVersion=0&fieldSelector=spec.nodeName%3Dnode-1".to_string(),
    ];
    let mut pairs = Vec::new();
    for path in &paths {
        let mut sender = sender.clone();
        let req = http::Request::get(format!("{}{path}", p.gw.url()))
            .header("accept", "application/json")
            .body(http_body_util::Empty::new())
            .unwrap();
        let resp = sender.send_request(req).await.expect("an h2 watch stream");
        assert_eq!(resp.version(), http::Version::HTTP_2);
        assert_eq!(resp.status(), 200, "{path}");
        let g = Watch::from_response(format!("h2c {path}"), resp);
        let s = open_ok(p.sim.url(), path).await;
        pairs.push((s, g));
    }
    let (s2, g2) = &mut pairs[2];
    let initial = same_next(s2, g2, 1, "h2c RV=0 initial").await;
    assert_eq!(types(&initial), typed(&[("ADDED", "a")]));
    put_pod(h, "ns1", "b", json!({"app": "web"}), "node-1", "Running");
    put_pod(h, "ns1", "a", json!({"app": "db"}), "node-1", "Running");
    let want = [
        typed(&[("ADDED", "b"), ("MODIFIED", "a")]),
        typed(&[("ADDED", "b"), ("DELETED", "a")]),
        typed(&[("ADDED", "b"), ("MODIFIED", "a")]),
    ];
    for ((s, g), want) in pairs.iter_mut().zip(want) {
        let evs = same_next(s, g, 2, "h2c stream").await;
        assert_eq!(types(&evs), want, "{}", g.what);
    }
    for (_, g) in &pairs {
        g.assert_from_cache();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_scoped_watches_of_namespaces_and_nodes() {
    let p = Pair::start().await;
    let h = p.h();
    let namespaces = resource("", "v1", "namespaces");
    let nodes = resource("", "v1", "nodes");
    let ns = |name: &str, labels: Value| {
        json!({"kind": "Namespace", "apiVersion": "v1",
               "metadata": {"name": name, "labels": labels},
               "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}})
    };
    let node = |name: &str, labels: Value| {
        json!({"kind": "Node", "apiVersion": "v1",
               "metadata": {"name": name, "labels": labels}, "spec": {}})
    };
    put_object(h, namespaces, "", ns("team-a", json!({"team": "a"})));
    let rv = put_object(h, nodes, "", node("node-a", json!({"role": "worker"})));
    wait_until_cached(
        p.gw.url(),
        "/api/v1/namespaces?resourceVersion=0",
        rv_at_least(rv),
    )
    .await;
    wait_until_cached(
        p.gw.url(),
        "/api/v1/nodes?resourceVersion=0",
        rv_at_least(rv),
    )
    .await;

    let (mut sl, mut gl) = p
        .open("/api/v1/namespaces?watch=1&resourceVersion=0&labelSelector=team")
        .await;
    let evs = same_next(&mut sl, &mut gl, 1, "namespaces with a team label, initial").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "team-a")]));
    // The legacy path to one namespace object.
    let (mut s1, mut g1) = p
        .open("/api/v1/watch/namespaces/team-a?resourceVersion=0")
        .await;
    let evs = same_next(&mut s1, &mut g1, 1, "the namespace team-a, initial").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "team-a")]));
    let (mut sn, mut gn) = p
        .open(&format!(
            "/api/v1/nodes?watch=1&resourceVersion={rv}&labelSelector=role%3Dworker"
        ))
        .await;

    put_object(h, namespaces, "", ns("team-b", json!({"team": "b"})));
    put_object(
        h,
        namespaces,
        "",
        ns("team-a", json!({"team": "a", "x": "1"})),
    );
    put_object(h, nodes, "", node("node-b", json!({"role": "worker"})));
    put_object(
        h,
        nodes,
        "",
        node("node-a", json!({"role": "control-plane"})),
    );
    delete_object(h, nodes, "", "node-b");
    let evs = same_next(&mut sl, &mut gl, 2, "namespaces with a team label").await;
    assert_eq!(
        types(&evs),
        typed(&[("ADDED", "team-b"), ("MODIFIED", "team-a")])
    );
    let evs = same_next(&mut s1, &mut g1, 1, "the namespace team-a").await;
    assert_eq!(types(&evs), typed(&[("MODIFIED", "team-a")]));
    let evs = same_next(&mut sn, &mut gn, 3, "worker nodes").await;
    assert_eq!(
        types(&evs),
        typed(&[
            ("ADDED", "node-b"),
            ("DELETED", "node-a"),
            ("DELETED", "node-b")
        ])
    );
    for g in [&gl, &g1, &gn] {
        g.assert_from_cache();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_api_group_deployments() {
    let p = Pair::start().await;
    let h = p.h();
    let deployments = resource("apps", "v1", "deployments");
    let deploy = |name: &str, replicas: u32| {
        json!({"kind": "Deployment", "apiVersion": "apps/v1",
               "metadata": {"name": name, "namespace": "ns1", "labels": {"app": name}},
               "spec": {"replicas": replicas,
                        "selector": {"matchLabels": {"app": name}},
                        "template": {"metadata": {"labels": {"app": name}},
                                     "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
    };
    // The gateway's deployments cache starts (a list) before the writes, so that RV N is
    // in its history (older than its start would be a 410, as in the cacher).
    wait_until_cached(
        p.gw.url(),
        "/apis/apps/v1/deployments?resourceVersion=0",
        rv_at_least(h.store().current_rv()),
    )
    .await;
    let n = put_object(h, deployments, "ns1", deploy("web", 1));
    let rv = put_object(h, deployments, "ns1", deploy("db", 1));
    wait_until_cached(
        p.gw.url(),
        "/apis/apps/v1/deployments?resourceVersion=0",
        rv_at_least(rv),
    )
    .await;
    let base = "/apis/apps/v1/namespaces/ns1/deployments?watch=1";
    let (mut s0, mut g0) = p.open(&format!("{base}&resourceVersion=0")).await;
    let (mut sn, mut gn) = p.open(&format!("{base}&resourceVersion={n}")).await;
    let evs = same_next(&mut s0, &mut g0, 2, "deployments, initial").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "db"), ("ADDED", "web")]));
    let evs = same_next(&mut sn, &mut gn, 1, "deployments after N").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "db")]));
    put_object(h, deployments, "ns1", deploy("web", 3));
    delete_object(h, deployments, "ns1", "db");
    for (s, g) in [(&mut s0, &mut g0), (&mut sn, &mut gn)] {
        let evs = same_next(s, g, 2, "deployment changes").await;
        assert_eq!(
            types(&evs),
            typed(&[("MODIFIED", "web"), ("DELETED", "db")])
        );
        assert_eq!(evs[0].object()["apiVersion"], "apps/v1");
        assert_eq!(evs[0].object()["spec"]["replicas"], 3);
    }
    g0.assert_from_cache();
    gn.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_false_sends_only_changes() {
    let p = Pair::start().await;
    let h = p.h();
    let n = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let rv = put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let q = "watch=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true";
    let (mut s0, mut g0) = p.open(&format!("{NS1}?{q}&resourceVersion=0")).await;
    let (mut sn, mut gn) = p.open(&format!("{NS1}?{q}&resourceVersion={n}")).await;
    let evs = same_next(&mut sn, &mut gn, 1, "RV=N: the changes after N").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "b")]));
    put_pod(h, "ns1", "c", json!({}), "node-1", "Running");
    // RV=0: no initial state, and no initial-events-end bookmark; just the change.
    let evs = same_next(&mut s0, &mut g0, 1, "RV=0: only the change").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "c")]));
    let evs = same_next(&mut sn, &mut gn, 1, "RV=N: the live change").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "c")]));
    sentinel(&p, &mut s0, &mut g0, "ns1", json!({}), "node-1").await;
    g0.assert_from_cache();
    gn.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_based_and_combined_selectors() {
    let p = Pair::start().await;
    let h = p.h();
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "web", "tier": "fe"}),
        "node-1",
        "Running",
    );
    put_pod(
        h,
        "ns1",
        "b",
        json!({"app": "db", "tier": "be"}),
        "node-1",
        "Pending",
    );
    put_pod(
        h,
        "ns1",
        "c",
        json!({"app": "web", "canary": "1"}),
        "node-2",
        "Pending",
    );
    let rv = put_pod(h, "ns1", "d", json!({"app": "cache"}), "node-1", "Pending");
    p.caught_up(rv).await;
    let selectors = [
        // (query, initial names)
        (
            "labelSelector=app%20in%20(web%2Cdb)%2Ctier!%3Dfe",
            vec!["b", "c"],
        ),
        ("labelSelector=!canary%2Capp", vec!["a", "b", "d"]),
        ("labelSelector=app%20notin%20(cache)", vec!["a", "b", "c"]),
        (
            "labelSelector=app%3Dweb&fieldSelector=status.phase!%3DRunning",
            vec!["c"],
        ),
        (
            "fieldSelector=spec.nodeName%3Dnode-1%2Cstatus.phase%3DPending",
            vec!["b", "d"],
        ),
    ];
    let mut pairs = Vec::new();
    for (q, initial) in &selectors {
        let (mut s, mut g) = p
            .open(&format!("{NS1}?watch=1&resourceVersion=0&{q}"))
            .await;
        let evs = same_next(&mut s, &mut g, initial.len(), q).await;
        let names: Vec<&str> = evs.iter().map(Event::name).collect();
        assert_eq!(&names, initial, "{q}");
        pairs.push((q, s, g));
    }
    // Every pod moves: a → db on node-2 Pending; b → web canary; c loses canary, Running;
    // d → tier fe on node-2.
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "db", "tier": "fe"}),
        "node-2",
        "Pending",
    );
    put_pod(
        h,
        "ns1",
        "b",
        json!({"app": "web", "canary": "1"}),
        "node-1",
        "Pending",
    );
    put_pod(h, "ns1", "c", json!({"app": "web"}), "node-2", "Running");
    put_pod(
        h,
        "ns1",
        "d",
        json!({"app": "cache", "tier": "fe"}),
        "node-2",
        "Pending",
    );
    // The sentinel matches every selector: it ends each sequence.
    put_pod(
        h,
        "ns1",
        "z",
        json!({"app": "web", "tier": "be"}),
        "node-1",
        "Pending",
    );
    for (q, s, g) in &mut pairs {
        let mut se = Vec::new();
        let mut ge = Vec::new();
        loop {
            let e = s.next(q).await;
            let last = e.name() == "z";
            se.push(e);
            if last {
                break;
            }
        }
        for _ in 0..se.len() {
            ge.push(g.next(q).await);
        }
        assert_same_events(q, &se, &ge);
        g.assert_from_cache();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_the_rv_the_gateway_cache_started_at() {
    // The gateway's cache starts from a list at RV L: a watch from exactly L is served
    // from the history, without a 410 (watch_cache.go: too old only below oldest-1 = L).
    let sim = start_sim_with(cluster_config()).await;
    let h = sim.handle();
    put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let gw = start_gateway_with(GatewayConfig::for_upstream_url(sim.url()).unwrap()).await;
    let start = h.store().current_rv();
    wait_until_cached(
        gw.url(),
        "/api/v1/pods?resourceVersion=0",
        rv_at_least(start),
    )
    .await;
    let list = support::Http::new(gw.url())
        .get_json("/api/v1/pods?resourceVersion=0")
        .await;
    let l: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap();
    assert_eq!(l, start, "nothing was written since the cache started");
    let path = format!("{NS1}?watch=1&resourceVersion={l}");
    let mut s = open_ok(sim.url(), &path).await;
    let mut g = open_ok(gw.url(), &path).await;
    put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    let evs = same_next(&mut s, &mut g, 1, "the first change after L").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "b")]));
    g.assert_from_cache();
}

/// A write to another resource: it moves the global RV (etcd's revision) but not the pods.
fn put_configmap(h: &SimHandle, name: &str) -> u64 {
    put_object(
        h,
        resource("", "v1", "configmaps"),
        "ns1",
        configmap("ns1", name).data(json!({"k": "v"})).build(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rv_n_from_a_write_to_another_resource() {
    // RVs are global (etcd revisions): a client may well hold the RV of another resource's
    // write (a list's RV is the revision at list time). Watching pods from it must behave
    // as from any other N: the changes after N; for a watch-list, the state at (at least)
    // N right away, since the store is at N: not a 3 s wait and a 504.
    // (kube-apiserver's watch cache gets there by asking etcd for a progress notification
    // while a request waits for freshness: watch_cache.go waitUntilFreshAndBlock and the
    // cacher's progress requester. An apiserver offers no such request to the gateway, so
    // after a short catch-up wait the watch-list is forwarded and the upstream answers it:
    // same events, right away. The plain watch from N is served from the cache.)
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    let pod_rv = put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    p.caught_up(pod_rv).await;
    let n = put_configmap(h, "other");

    let (mut s, mut g) = p.open(&format!("{NS1}?watch=1&resourceVersion={n}")).await;
    let path = format!(
        "{NS1}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={n}"
    );
    let started = Instant::now();
    let (mut sl, mut gl) = tokio::join!(open_ok(p.sim.url(), &path), open_ok(p.gw.url(), &path));
    let evs = same_next(&mut sl, &mut gl, 3, "watch-list from another resource's RV").await;
    assert_eq!(
        types(&evs)[..2],
        typed(&[("ADDED", "a"), ("ADDED", "b")])[..]
    );
    assert_eq!(evs[2].ty(), "BOOKMARK");
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(2),
        "the store is at RV {n} already: the initial events must not wait ({waited:?})"
    );
    put_pod(h, "ns1", "c", json!({}), "node-1", "Running");
    let evs = same_next(&mut s, &mut g, 1, "the first pod change after N").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "c")]));
    let evs = same_next(&mut sl, &mut gl, 1, "the watch-list's first live change").await;
    assert_eq!(types(&evs), typed(&[("ADDED", "c")]));
    g.assert_from_cache();
    assert_eq!(gl.source(), Some("upstream"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmarks_advance_past_writes_to_other_resources() {
    // A bookmark says "you have seen everything up to RV X". kube-apiserver's cacher moves
    // X with etcd progress notifications, so an idle watcher of pods resumes after writes
    // to other resources without replaying them. The gateway's bookmarks must get there
    // too (its upstream watch asks for bookmarks), within a few intervals.
    let p = Pair::start_with(Some(Duration::from_millis(300))).await;
    let h = p.h();
    let rv = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true"
        ))
        .await;
    let cm = put_configmap(h, "other");
    let want = pod_bookmark(cm);
    for (w, who) in [(&mut s, "simulator"), (&mut g, "gateway")] {
        let desc = format!("{who}: the bookmark at the configmap's RV {cm}");
        within(&desc, Duration::from_secs(10), async {
            loop {
                let e = w
                    .next_within(Duration::from_secs(10))
                    .await
                    .unwrap_or_else(|| panic!("{who}: the stream ended"));
                assert_eq!(
                    e.ty(),
                    "BOOKMARK",
                    "{who}: only bookmarks expected, got {e:?}"
                );
                if e.json == want {
                    break;
                }
                assert!(e.rv() < cm, "{who}: bookmark {e:?}");
            }
        })
        .await;
    }
    g.assert_from_cache();
}

/// Folds a watch-list stream (initial ADDED events, the initial-events-end bookmark, then
/// changes, up to the ADDED of `end`) into name → RV, checking as it goes that nothing is
/// lost, duplicated or reordered: names are unique in the initial state; afterwards RVs
/// strictly increase and stay above the bookmark's; ADDED only for an absent object,
/// MODIFIED and DELETED only for a present one.
async fn fold_watch_list(w: &mut Watch, end: &str) -> std::collections::BTreeMap<String, u64> {
    let mut state = std::collections::BTreeMap::new();
    let what = w.what.clone();
    let mut last: Option<u64> = None;
    loop {
        let e = w.next("the next event of the fold").await;
        match (e.ty(), last) {
            ("ADDED", None) => {
                assert!(
                    state.insert(e.name().to_string(), e.rv()).is_none(),
                    "{what}: duplicate initial object {e:?}"
                );
            }
            ("BOOKMARK", None) => {
                assert_eq!(
                    e.object()["metadata"]["annotations"]["k8s.io/initial-events-end"],
                    "true",
                    "{what}: {e:?}"
                );
                last = Some(e.rv());
            }
            ("BOOKMARK", Some(l)) => {
                assert!(e.rv() >= l, "{what}: bookmark going back: {e:?} after {l}");
                last = Some(e.rv());
            }
            (t, Some(l)) => {
                assert!(
                    e.rv() > l,
                    "{what}: {e:?} is not after RV {l} (reordered or duplicated)"
                );
                last = Some(e.rv());
                let had = state.contains_key(e.name());
                match t {
                    "ADDED" => assert!(!had, "{what}: ADDED for a present object: {e:?}"),
                    "MODIFIED" | "DELETED" => {
                        assert!(had, "{what}: {t} for an absent object: {e:?}")
                    }
                    _ => panic!("{what}: unexpected {e:?}"),
                }
                if t == "DELETED" {
                    state.remove(e.name());
                } else {
                    state.insert(e.name().to_string(), e.rv());
                }
                if t == "ADDED" && e.name() == end {
                    return state;
                }
            }
            (_, None) => panic!("{what}: {e:?} before the initial-events-end bookmark"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_lists_started_during_churn_are_consistent() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let p = Pair::start().await;
    let h = p.h();
    let mut rv = 0;
    for i in 0..20 {
        rv = put_pod(
            h,
            "ns1",
            &format!("p{i:02}"),
            json!({}),
            "node-1",
            "Running",
        );
    }
    p.caught_up(rv).await;

    // 400 writes over 30 names: creates, updates and deletes, interleaved with the watches'
    // starts (each starts once the writer has made some progress).
    let done = Arc::new(AtomicU64::new(0));
    let writer = {
        let (store, done) = (h.store().clone(), done.clone());
        let pods = support::watch::pods();
        tokio::spawn(async move {
            for i in 0..400u64 {
                let name = format!("p{:02}", (i * 7) % 30);
                let obj = support::objects::pod("ns1", &name)
                    .labels(json!({"i": i.to_string()}))
                    .running_on("node-1")
                    .build();
                let delete = i % 5 == 4;
                store
                    .mutate(pods, "ns1", &name, |cur| {
                        Ok(match (delete, cur) {
                            (true, Some(_)) => Mutation::Delete,
                            _ => Mutation::Put(obj),
                        })
                    })
                    .expect("store write");
                done.store(i + 1, Ordering::SeqCst);
                // Pacing (about 0.5 s in all), so that the watches start mid-churn.
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let q = "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion=0";
    let mut watches = Vec::new();
    for at in [20, 150, 300] {
        support::wait::wait_until(
            &format!("the writer made {at} writes"),
            Duration::from_secs(20),
            || {
                let done = done.clone();
                async move { done.load(Ordering::SeqCst) >= at }
            },
        )
        .await;
        let (s, g) = p.open(&format!("{NS1}?{q}")).await;
        if at == 20 {
            let now = done.load(Ordering::SeqCst);
            assert!(
                now < 400,
                "the first watches must start mid-churn (writes done: {now})"
            );
        }
        watches.push(s);
        watches.push(g);
    }
    support::wait::within("the writer finishes", Duration::from_secs(30), writer)
        .await
        .unwrap();
    put_pod(h, "ns1", "zz-end", json!({}), "node-1", "Running");
    let want: std::collections::BTreeMap<String, u64> = h
        .store()
        .list(support::watch::pods(), Some("ns1"))
        .1
        .iter()
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                rv_of(o),
            )
        })
        .collect();
    for w in &mut watches {
        let got = fold_watch_list(w, "zz-end").await;
        assert_eq!(
            got, want,
            "{}: the folded stream must equal the store",
            w.what
        );
    }
    for g in watches.iter().skip(1).step_by(2) {
        g.assert_from_cache();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookmark_comes_two_seconds_before_the_timeout() {
    // cache_watcher.go nextBookmarkTime: besides the ~1 min heartbeat, a bookmark "right
    // before the watcher timeout - for now we simply set it 2s before the deadline", so
    // clients resume from an up-to-date RV. Both the simulator and the gateway send it.
    let p = Pair::start().await; // bookmark interval: the default minute
    let rv = put_pod(p.h(), "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let started = Instant::now();
    let path =
        format!("{NS1}?watch=1&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=4");
    let (mut s, mut g) = tokio::join!(open_ok(p.sim.url(), &path), open_ok(p.gw.url(), &path));
    let evs = same_next(&mut s, &mut g, 1, "the pre-timeout bookmark").await;
    assert_eq!(evs[0].json, pod_bookmark(rv));
    let at = started.elapsed();
    // Due 2 s after the start; the simulator's watch cache pops it at the tick of that
    // time's second, up to a second early (cacher.go `watcherBookmarkTimeBuckets`).
    assert!(
        at >= Duration::from_secs(1),
        "the bookmark is due about 2 s before the 4 s deadline, came after {at:?}"
    );
    // Popped before it was due, the simulator's watcher is queued again and gets it once
    // more at the next tick (`finishDispatching`, src/sim/bookmarks.rs); the gateway sends
    // it once, at its due time. Either way nothing but that bookmark, then the end.
    while let Some(e) = s.next_within(Duration::from_secs(6)).await {
        assert_eq!(e.json, pod_bookmark(rv));
    }
    g.expect_end(Duration::from_secs(6)).await;
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_but_valid_watch_queries_match() {
    let p = Pair::start().await;
    let h = p.h();
    put_pod(h, "ns1", "a", json!({"app": "web"}), "node-1", "Running");
    put_pod(h, "ns2", "a", json!({"app": "web"}), "node-1", "Running");
    let n = put_pod(h, "ns1", "b", json!({"app": "db"}), "node-2", "Pending");
    p.caught_up(n).await;
    let queries = [
        format!("/api/v1/pods?watch=1&resourceVersion={n}&fieldSelector=metadata.namespace%3Dns1"),
        format!("/api/v1/pods?watch=true&resourceVersion={n}&limit=1"),
        format!("{NS1}?watch=1&resourceVersion={n}&labelSelector=&fieldSelector="),
        format!("{NS1}?watch=1&resourceVersion={n}&fieldSelector=metadata.name!%3Da"),
        format!("{NS1}?watch=1&resourceVersion={n}&allowWatchBookmarks=false&timeoutSeconds=30"),
        format!("{NS1}?watch=1&resourceVersion={n}&resourceVersion=0"),
        format!("{NS1}?watch=1&resourceVersion=0&resourceVersion={n}"),
        format!("/api/v1/watch/pods?resourceVersion={n}"),
        "/api/v1/watch/namespaces/ns1/pods?resourceVersion=0&labelSelector=app%3Dweb".to_string(),
        format!("/api/v1/pods?watch=1&resourceVersion={n}&fieldSelector=metadata.name%3Da%2Cmetadata.namespace%3Dns2"),
        format!("{NS1}?watch=1&resourceVersion=0&labelSelector=app%3Dweb&sendInitialEvents=true&resourceVersionMatch=NotOlderThan"),
        format!("{NS1}?watch=1&resourceVersion={n}&fieldSelector=spec.nodeName%3D"),
        format!("{NS1}?watch=1&resourceVersion={n}&pretty=true"),
        format!("{NS1}?watch=1&resourceVersion={n}&labelSelector=app%20notin%20()"),
    ];
    let mut pairs = Vec::new();
    for q in &queries {
        let (s, g) = p.open(q).await;
        pairs.push((q, s, g));
    }
    put_pod(h, "ns1", "c", json!({"app": "web"}), "", "Pending");
    put_pod(h, "ns2", "a", json!({"app": "db"}), "node-1", "Running");
    put_pod(h, "ns1", "a", json!({"app": "db"}), "node-2", "Running");
    delete_pod(h, "ns1", "b");
    // End markers (label end=1) that every query sees at least one of.
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "web", "end": "1"}),
        "",
        "Running",
    );
    put_pod(
        h,
        "ns1",
        "zz",
        json!({"app": "web", "end": "1"}),
        "",
        "Running",
    );
    put_pod(
        h,
        "ns2",
        "a",
        json!({"app": "web", "end": "1"}),
        "",
        "Running",
    );
    let mut failures = Vec::new();
    for (q, s, g) in &mut pairs {
        let mut se = Vec::new();
        loop {
            let e = s.next(q).await;
            let end = e.object()["metadata"]["labels"]["end"] == "1";
            se.push(e);
            if end {
                break;
            }
        }
        let mut ge = Vec::new();
        for _ in 0..se.len() {
            ge.push(g.next(q).await);
        }
        if se.iter().map(|e| &e.json).ne(ge.iter().map(|e| &e.json)) {
            failures.push(format!(
                "{q}\n--- simulator (expected) ---\n{}\n--- gateway (got) ---\n{}",
                se.iter()
                    .map(|e| format!("  {e:?}"))
                    .collect::<Vec<_>>()
                    .join("\n"),
                ge.iter()
                    .map(|e| format!("  {e:?}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    // All but `pretty` (which the gateway leaves to the upstream) come from the cache.
    for (q, _, g) in &pairs {
        if !q.contains("pretty") && g.source() != Some("cache") {
            failures.push(format!("{q}: x-watchgate-source {:?}", g.source()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} watches differ:\n{}",
        failures.len(),
        queries.len(),
        failures.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initial_events_come_in_etcd_key_order_across_namespaces() {
    // etcd keys are `<namespace>/<name>`: "a-b/x" < "a/x" < "ab/x" (byte order, '-' < '/'
    // < 'b'), which is not the (namespace, name) tuple order.
    let p = Pair::start().await;
    let h = p.h();
    let mut rv = 0;
    for (ns, name) in [
        ("ab", "x"),
        ("a", "x1"),
        ("a-b", "x"),
        ("a", "x"),
        ("a", "x-1"),
    ] {
        rv = put_pod(h, ns, name, json!({}), "node-1", "Running");
    }
    p.caught_up(rv).await;
    for q in [
        "/api/v1/pods?watch=1&resourceVersion=0",
        "/api/v1/pods?watch=1&resourceVersion=0&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    ] {
        let (mut s, mut g) = p.open(q).await;
        let evs = same_next(&mut s, &mut g, 5, q).await;
        let keys: Vec<String> = evs
            .iter()
            .map(|e| format!("{}/{}", e.object()["metadata"]["namespace"].as_str().unwrap(), e.name()))
            .collect();
        assert_eq!(keys, ["a-b/x", "a/x", "a/x-1", "a/x1", "ab/x"], "{q}");
        g.assert_from_cache();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_bytes_match_for_every_kind_of_event() {
    // Not only equal JSON: the same bytes, for synthetic ADDED, ADDED, MODIFIED, DELETED,
    // DELETED with the previous object (RV rewritten), the initial-events-end BOOKMARK.
    let p = Pair::start().await;
    let h = p.h();
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "web", "z": "1", "b": "2"}),
        "node-1",
        "Running",
    );
    let rv = put_pod(h, "ns1", "b", json!({"app": "web"}), "node-1", "Pending");
    p.caught_up(rv).await;
    let (mut s, mut g) = p
        .open(&format!(
            "{NS1}?watch=1&resourceVersion=0&labelSelector=app%3Dweb&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true"
        ))
        .await;
    put_pod(h, "ns1", "c", json!({"app": "web"}), "node-1", "Pending");
    put_pod(
        h,
        "ns1",
        "a",
        json!({"app": "web", "z": "2", "b": "2"}),
        "node-1",
        "Running",
    );
    put_pod(h, "ns1", "a", json!({"app": "db"}), "node-1", "Running");
    delete_pod(h, "ns1", "b");
    let evs = same_next(&mut s, &mut g, 7, "every kind of event").await;
    assert_eq!(
        types(&evs),
        typed(&[
            ("ADDED", "a"),
            ("ADDED", "b"),
            ("BOOKMARK", ""),
            ("ADDED", "c"),
            ("MODIFIED", "a"),
            ("DELETED", "a"),
            ("DELETED", "b")
        ])
    );
    assert_same_bytes("every kind of event", &s.seen, &g.seen);
    g.assert_from_cache();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_initial_events_with_an_rv_reached_during_the_wait() {
    // RV N one ahead of the store: the watch-list waits (up to 3 s) until N exists, then
    // sends the state at N. Whether the write lands before or during the wait, the answer
    // is the same: a, b, then the end bookmark at N.
    let p = Pair::start().await;
    let h = p.h();
    let rv = put_pod(h, "ns1", "a", json!({}), "node-1", "Running");
    p.caught_up(rv).await;
    let path = format!(
        "{NS1}?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&resourceVersion={}",
        rv + 1
    );
    let (sim_url, gw_url) = (p.sim.url().to_string(), p.gw.url().to_string());
    let opens = {
        let path = path.clone();
        tokio::spawn(async move { tokio::join!(open_ok(&sim_url, &path), open_ok(&gw_url, &path)) })
    };
    tokio::task::yield_now().await;
    let b = put_pod(h, "ns1", "b", json!({}), "node-1", "Running");
    assert_eq!(b, rv + 1);
    let (mut s, mut g) = opens.await.unwrap();
    let evs = same_next(&mut s, &mut g, 3, "the state at N").await;
    assert_eq!(
        types(&evs)[..2],
        typed(&[("ADDED", "a"), ("ADDED", "b")])[..]
    );
    assert_eq!(evs[2].ty(), "BOOKMARK");
    assert_eq!(evs[2].rv(), b);
    g.assert_from_cache();
}
