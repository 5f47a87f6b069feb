//! Request counters per resource, so tests can assert e.g. "100 clients through the
//! gateway cause exactly one upstream list". Exposed via `SimHandle::stats()` and
//! `GET /debug/sim/stats` (docs/simulator.md).

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::{json, Value};

/// Counts per (verb, resource). Resource is printed like `GroupResource` (`pods`,
/// `deployments.apps`).
#[derive(Debug, Default)]
pub struct Stats {
    counts: Mutex<BTreeMap<(String, String), u64>>,
}

impl Stats {
    /// Records one request.
    pub fn record(&self, verb: &str, resource: &str) {
        let mut m = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *m.entry((verb.to_string(), resource.to_string()))
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
}
