//! The dispatch index: which watchers an event can possibly reach.
//!
//! Each watcher sits in one bucket (see `WatchFilter::index_key`). For an event, only the
//! buckets its object's (and its previous state's) namespace and indexed field values
//! name are visited, plus the bucket of unindexed watchers: the cost of dispatching one
//! event does not grow with the number of watchers that cannot match it. With 5,000
//! kubelet-style watchers (`spec.nodeName=node-i`), an update to one pod visits one.
//!
//! The previous state's values are looked up too: a pod moving from node-a to node-b
//! must reach node-a's watcher (as DELETED) and node-b's (as ADDED).

use std::collections::HashMap;

use rustc_hash::FxHashSet;

use super::filter::{field_of, IndexKey};
use crate::model::object::CachedObject;

pub type WatcherId = u64;

#[derive(Debug, Default)]
pub struct Index {
    buckets: HashMap<IndexKey, FxHashSet<WatcherId>>,
    /// Field labels that have at least one watcher, with how many: only these are probed.
    labels_in_use: HashMap<&'static str, usize>,
}

impl Index {
    pub fn insert(&mut self, key: IndexKey, id: WatcherId) {
        if let IndexKey::Field(label, _) = &key {
            *self.labels_in_use.entry(label).or_default() += 1;
        }
        self.buckets.entry(key).or_default().insert(id);
    }

    pub fn remove(&mut self, key: &IndexKey, id: WatcherId) {
        let Some(bucket) = self.buckets.get_mut(key) else {
            return;
        };
        if !bucket.remove(&id) {
            return;
        }
        if bucket.is_empty() {
            self.buckets.remove(key);
        }
        if let IndexKey::Field(label, _) = key {
            if let Some(n) = self.labels_in_use.get_mut(label) {
                *n -= 1;
                if *n == 0 {
                    self.labels_in_use.remove(label);
                }
            }
        }
    }

    /// Appends to `out` every watcher that may care about a change from `prev` to `cur`.
    /// Each watcher appears at most once: it lives in one bucket, and each bucket is
    /// visited once.
    pub fn candidates(
        &self,
        cur: &CachedObject,
        prev: Option<&CachedObject>,
        out: &mut Vec<WatcherId>,
    ) {
        let mut visit = |key: &IndexKey| {
            if let Some(b) = self.buckets.get(key) {
                out.extend(b.iter().copied());
            }
        };
        visit(&IndexKey::All);
        let ns = cur.namespace();
        visit(&IndexKey::Namespace(ns.into()));
        if let Some(p) = prev {
            if p.namespace() != ns {
                visit(&IndexKey::Namespace(p.namespace().into()));
            }
        }
        for label in self.labels_in_use.keys() {
            let v = field_of(cur, label);
            visit(&IndexKey::Field(label, v.into()));
            if let Some(p) = prev {
                let pv = field_of(p, label);
                if pv != v {
                    visit(&IndexKey::Field(label, pv.into()));
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.buckets.values().map(|b| b.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::filter::NAME;
    use bytes::Bytes;

    fn pod(ns: &str, name: &str, node: &str) -> CachedObject {
        let raw = format!(
            r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"1"}},"spec":{{"nodeName":"{node}"}}}}"#
        );
        CachedObject::parse(Bytes::from(raw), &[("spec.nodeName", "spec.nodeName")]).unwrap()
    }

    fn sorted(mut v: Vec<WatcherId>) -> Vec<WatcherId> {
        v.sort();
        v
    }

    #[test]
    fn an_event_visits_only_the_buckets_its_object_names() {
        let mut idx = Index::default();
        for i in 0..5000u64 {
            idx.insert(
                IndexKey::Field("spec.nodeName", format!("node-{i}").into()),
                i,
            );
        }
        idx.insert(IndexKey::All, 10_000);
        idx.insert(IndexKey::Namespace("a".into()), 10_001);
        idx.insert(IndexKey::Namespace("b".into()), 10_002);
        idx.insert(IndexKey::Field(NAME, "p".into()), 10_003);
        let mut out = vec![];
        idx.candidates(&pod("a", "q", "node-7"), None, &mut out);
        assert_eq!(sorted(out), vec![7, 10_000, 10_001]);
        // Moving node-7 → node-9 in namespace a: both nodes' watchers hear of it.
        let mut out = vec![];
        idx.candidates(
            &pod("a", "p", "node-9"),
            Some(&pod("a", "p", "node-7")),
            &mut out,
        );
        assert_eq!(sorted(out), vec![7, 9, 10_000, 10_001, 10_003]);
    }

    #[test]
    fn removing_the_last_field_watcher_stops_probing_the_label() {
        let mut idx = Index::default();
        let k = IndexKey::Field("spec.nodeName", "n".into());
        idx.insert(k.clone(), 1);
        idx.remove(&k, 1);
        idx.remove(&k, 1);
        assert!(idx.is_empty());
        assert!(idx.labels_in_use.is_empty());
    }
}
