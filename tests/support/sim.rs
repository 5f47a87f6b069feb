//! The simulator's own tests: a bare simulator (no namespaces, no objects, so that every
//! item a test counts is one it wrote), JSON reads of it and its lists' fields.
//!
//! Writes into its store are [`super::watch::put_pod`] and friends.

use http::StatusCode;
use serde_json::Value;

use watchgate::sim::{SimConfig, SimHandle};

use super::http::Http;

/// A simulator with `SimConfig::default()` as `f` leaves it.
pub async fn sim_with(f: impl FnOnce(&mut SimConfig)) -> SimHandle {
    let mut cfg = SimConfig::default();
    f(&mut cfg);
    watchgate::sim::start(cfg).await.expect("sim starts")
}

/// A simulator with `SimConfig::default()`.
pub async fn sim() -> SimHandle {
    sim_with(|_| {}).await
}

/// GET → (status, JSON body).
pub async fn get(h: &SimHandle, path: &str) -> (StatusCode, Value) {
    let resp = Http::new(&h.url()).get(path).await;
    (resp.status, resp.json())
}

/// A watch (or any request) on the simulator, its answer read as [`super::watch::Watch`].
pub async fn watch(h: &SimHandle, path: &str) -> super::watch::Watch {
    super::watch::open(&h.url(), path).await
}

/// Names of a list's items, in order.
pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items in {list}"))
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

/// A list's metadata.resourceVersion as a number.
pub fn list_rv(list: &Value) -> u64 {
    super::watch::rv_of(list)
}
