//! Fixtures shared by the fan-out tests: pods written straight into the simulator's store,
//! the simulator's event log as [`Sig`]s, its state as key → RV, and waits for the
//! gateway's cache and reflector.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use watchgate::sim::{Mutation, SimHandle, Store};

use crate::support::watch::store_put;
pub use crate::support::watch::{pods, rv_of};
use crate::support::watch_checker::{key_of, Sig};

/// Creates or replaces a pod (built with [`crate::support::objects::pod`]); returns the
/// write's RV. A pod without a uid gets `uid-{namespace}-{name}`, as the apiserver would
/// have given it one (the store keeps what it is given).
pub fn put(store: &Store, mut obj: Value) -> u64 {
    let ns = obj["metadata"]["namespace"].as_str().unwrap().to_string();
    if obj["metadata"].get("uid").is_none() {
        let name = obj["metadata"]["name"].as_str().unwrap();
        obj["metadata"]["uid"] = format!("uid-{ns}-{name}").into();
    }
    store_put(store, pods(), &ns, obj)
}

/// Changes a pod in place (no-op if it is gone); returns the write's RV, if any.
pub fn update(store: &Store, ns: &str, name: &str, f: impl FnOnce(&mut Value)) -> Option<u64> {
    let mut wrote = false;
    let out = store
        .mutate(pods(), ns, name, |cur| {
            Ok(match cur {
                Some(cur) => {
                    let mut v = cur.as_ref().clone();
                    f(&mut v);
                    wrote = true;
                    Mutation::Put(v)
                }
                None => Mutation::NoOp,
            })
        })
        .expect("update the pod");
    out.filter(|_| wrote).map(|o| rv_of(&o))
}

/// Deletes a pod; returns the deletion's RV if it existed.
pub fn delete(store: &Store, ns: &str, name: &str) -> Option<u64> {
    let mut existed = false;
    let out = store
        .mutate(pods(), ns, name, |cur| {
            existed = cur.is_some();
            Ok(if existed {
                Mutation::Delete
            } else {
                Mutation::NoOp
            })
        })
        .expect("delete the pod");
    out.filter(|_| existed).map(|o| rv_of(&o))
}

/// The simulator's log of pod events after `from`, restricted to `ns` if given.
pub fn log_since(store: &Store, from: u64, ns: Option<&str>) -> Vec<Sig> {
    let (events, _) = store
        .events_since(pods(), from, usize::MAX)
        .expect("the simulator's history still holds the test's events");
    events
        .iter()
        .filter(|e| ns.is_none_or(|n| e.namespace == n))
        .map(|e| Sig::from_parts(e.kind.as_str(), e.object_json()))
        .collect()
}

/// The simulator's current pods (in `ns` if given) as key → RV.
pub fn sim_state(store: &Store, ns: Option<&str>) -> BTreeMap<String, u64> {
    sim_state_where(store, ns, |_| true)
}

/// The simulator's current pods (in `ns` if given) that `matches` accepts, as key → RV.
pub fn sim_state_where(
    store: &Store,
    ns: Option<&str>,
    matches: impl Fn(&Value) -> bool,
) -> BTreeMap<String, u64> {
    let (_, items) = store.list(pods(), ns);
    items
        .iter()
        .filter(|o| matches(o))
        .map(|o| {
            (
                key_of(
                    o["metadata"]["namespace"].as_str().unwrap_or(""),
                    o["metadata"]["name"].as_str().unwrap(),
                ),
                rv_of(o),
            )
        })
        .collect()
}

/// Reads pods until the gateway answers from its cache (the first cacheable read starts
/// the reflector), then waits for the reflector's upstream watch to be open.
pub async fn warm(gateway_url: &str, sim: &SimHandle) {
    crate::support::watch::wait_until_cached(gateway_url, "/api/v1/pods?resourceVersion=0", |_| {
        true
    })
    .await;
    let stats = sim.stats().clone();
    crate::support::wait_until(
        "the reflector's upstream pod watch is open",
        Duration::from_secs(20),
        || {
            let stats = stats.clone();
            async move { stats.watches("pods") >= 1 }
        },
    )
    .await;
}

/// Shared handle to the simulator's store, for writer tasks.
pub fn store_of(sim: &SimHandle) -> Arc<Store> {
    sim.store().clone()
}

/// Percentile of sorted samples (nearest rank).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// The events a watch of pods after `from` must deliver, from the simulator's event log,
/// for a watcher scoped to `ns` (if given) whose selectors are `matches`: kube-apiserver's
/// cache_watcher.go `convertToWatchEvent`. An object that starts matching is ADDED, one
/// that matched before and after is MODIFIED, one deleted while matching is DELETED, and
/// one that stops matching is DELETED carrying its PREVIOUS content with the event's
/// resourceVersion.
pub fn log_filtered(
    store: &Store,
    from: u64,
    ns: Option<&str>,
    matches: impl Fn(&Value) -> bool,
) -> Vec<Sig> {
    use watchgate::sim::store::EventType;
    let (events, _) = store
        .events_since(pods(), from, usize::MAX)
        .expect("the simulator's history still holds the test's events");
    let mut out = Vec::new();
    for e in events
        .iter()
        .filter(|e| ns.is_none_or(|n| e.namespace == n))
    {
        let now = e.kind != EventType::Deleted && matches(&e.object);
        let before = e.prev.as_deref().is_some_and(&matches);
        match (e.kind, before, now) {
            (EventType::Deleted, true, _) => out.push(Sig::from_parts("DELETED", e.object_json())),
            (_, false, true) => out.push(Sig::from_parts("ADDED", e.object_json())),
            (_, true, true) => out.push(Sig::from_parts("MODIFIED", e.object_json())),
            (_, true, false) => {
                let mut prev = e.prev.as_deref().expect("matched before").clone();
                prev["metadata"]["resourceVersion"] = e.rv.to_string().into();
                let bytes = serde_json::to_vec(&prev).expect("encode");
                out.push(Sig::from_parts("DELETED", &bytes));
            }
            _ => {}
        }
    }
    out
}
