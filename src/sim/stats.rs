//! Request counters per resource, so tests can assert e.g. "100 clients through the
//! gateway cause exactly one upstream list". Exposed via `SimHandle::stats()` and
//! `GET /debug/sim/stats` (docs/simulator.md).
//!
//! Each request is also counted by its *shape* (what kind of get, list or watch it is,
//! from its query and Accept; see [`shape`]), under `GET /debug/sim/stats/shapes`: a
//! gateway's reflector list, its freshness probes and the reads it forwarded are all
//! `list`s, and only the shape tells them apart in a load run's report.

use std::collections::BTreeMap;
use std::sync::Mutex;

use http::HeaderMap;
use serde_json::{json, Value};

/// Counts per (verb, resource). Resource is printed like `GroupResource` (`pods`,
/// `deployments.apps`).
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<BTreeMap<(String, String), u64>>,
    /// Counts per (verb, resource, shape).
    shapes: Mutex<BTreeMap<(String, String, String), u64>>,
}

/// The shape of a get, list or watch, from its query and Accept: the resourceVersion
/// semantics first (`consistent` when none is given, `rv=0`, `rv=N`, `rv=N,exact`; a
/// watch with `sendInitialEvents=true` is a `watch-list`), then what else sets it apart:
/// `limit=1`, `limit` (a page), `continue`, `short` (a watch with `timeoutSeconds` of 60
/// or less), `metadata` or `table` (the `as=` of the Accept).
pub fn shape(verb: &str, query: &[(String, String)], headers: &HeaderMap) -> String {
    let q = |k: &str| {
        query
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let mut parts: Vec<&str> = Vec::new();
    let rv = match q("resourceVersion") {
        None | Some("") => "consistent",
        Some("0") => "rv=0",
        Some(_) => "rv=N",
    };
    if verb == "watch" && q("sendInitialEvents") == Some("true") {
        parts.push("watch-list");
    } else {
        parts.push(rv);
        if q("resourceVersionMatch") == Some("Exact") {
            parts.push("exact");
        }
    }
    match q("limit").and_then(|l| l.parse::<i64>().ok()) {
        Some(1) if verb != "watch" => parts.push("limit=1"),
        Some(n) if n > 1 && verb != "watch" => parts.push("limit"),
        _ => {}
    }
    if q("continue").is_some_and(|c| !c.is_empty()) {
        parts.push("continue");
    }
    if verb == "watch"
        && q("timeoutSeconds")
            .and_then(|t| t.parse::<i64>().ok())
            .is_some_and(|t| (1..=60).contains(&t))
    {
        parts.push("short");
    }
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("as=PartialObjectMetadata") {
        parts.push("metadata");
    } else if accept.contains("as=Table") {
        parts.push("table");
    }
    parts.join(",")
}

impl Stats {
    /// Records one request.
    pub fn record(&self, verb: &str, resource: &str) {
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((verb.to_string(), resource.to_string()))
            .or_insert(0) += 1;
    }

    /// Records one request and its [`shape`].
    pub fn record_request(
        &self,
        verb: &str,
        resource: &str,
        query: &[(String, String)],
        headers: &HeaderMap,
    ) {
        self.record(verb, resource);
        let s = shape(verb, query, headers);
        let mut m = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((verb.to_string(), resource.to_string(), s))
            .or_insert(0) += 1;
    }

    /// Requests seen for `verb` ("list", "watch", "get", …) on `resource`.
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        let m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        m.get(&(verb.to_string(), resource.to_string()))
            .copied()
            .unwrap_or(0)
    }

    pub fn lists(&self, resource: &str) -> u64 {
        self.count("list", resource)
    }

    pub fn watches(&self, resource: &str) -> u64 {
        self.count("watch", resource)
    }

    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.shapes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// `{"list": {"pods": 3}, "watch": {"pods": 1}}`.
    pub fn to_json(&self) -> Value {
        let m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = serde_json::Map::new();
        for ((verb, res), n) in m.iter() {
            let e = out.entry(verb.clone()).or_insert_with(|| json!({}));
            e[res] = json!(n);
        }
        Value::Object(out)
    }

    /// `{"list": {"pods": {"consistent,limit=1": 2, "rv=0": 1}}}`.
    pub fn shapes_json(&self) -> Value {
        let m = self.shapes.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = serde_json::Map::new();
        for ((verb, res, shape), n) in m.iter() {
            let e = out.entry(verb.clone()).or_insert_with(|| json!({}));
            if e.get(res).is_none() {
                e[res] = json!({});
            }
            e[res][shape] = json!(n);
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Vec<(String, String)> {
        form_urlencoded::parse(s.as_bytes())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect()
    }

    fn accept(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(http::header::ACCEPT, http::HeaderValue::from_static(v));
        h
    }

    #[test]
    fn shapes_tell_reflectors_probes_and_forwarded_reads_apart() {
        let none = HeaderMap::new();
        assert_eq!(shape("list", &q(""), &none), "consistent");
        assert_eq!(shape("list", &q("limit=1"), &none), "consistent,limit=1");
        assert_eq!(shape("list", &q("limit=500"), &none), "consistent,limit");
        assert_eq!(
            shape("list", &q("limit=500&continue=abc"), &none),
            "consistent,limit,continue"
        );
        assert_eq!(
            shape("list", &q("resourceVersion=0&limit=500"), &none),
            "rv=0,limit"
        );
        assert_eq!(
            shape(
                "list",
                &q("resourceVersion=42&resourceVersionMatch=Exact"),
                &none
            ),
            "rv=N,exact"
        );
        assert_eq!(shape("get", &q(""), &none), "consistent");
        assert_eq!(
            shape(
                "watch",
                &q("allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan&sendInitialEvents=true&timeoutSeconds=412&watch=true"),
                &none
            ),
            "watch-list"
        );
        assert_eq!(
            shape("watch", &q("watch=1&resourceVersion=0"), &none),
            "rv=0"
        );
        assert_eq!(
            shape(
                "watch",
                &q("watch=1&resourceVersion=17&timeoutSeconds=5"),
                &none
            ),
            "rv=N,short"
        );
        assert_eq!(
            shape(
                "watch",
                &q("watch=1&resourceVersion=17&timeoutSeconds=600"),
                &none
            ),
            "rv=N"
        );
        assert_eq!(
            shape(
                "list",
                &q(""),
                &accept("application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1")
            ),
            "consistent,metadata"
        );
        assert_eq!(
            shape(
                "get",
                &q(""),
                &accept("application/json;as=Table;g=meta.k8s.io;v=v1")
            ),
            "consistent,table"
        );
    }

    #[test]
    fn shapes_are_counted_and_reset_with_the_counts() {
        let s = Stats::default();
        let none = HeaderMap::new();
        s.record_request("list", "pods", &q("limit=1"), &none);
        s.record_request("list", "pods", &q("limit=1"), &none);
        s.record_request("list", "pods", &q("resourceVersion=0"), &none);
        assert_eq!(s.lists("pods"), 3);
        assert_eq!(
            s.shapes_json(),
            json!({"list": {"pods": {"consistent,limit=1": 2, "rv=0": 1}}})
        );
        s.reset();
        assert_eq!(s.shapes_json(), json!({}));
        assert_eq!(s.to_json(), json!({}));
    }
}
