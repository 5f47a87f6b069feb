//! The simulator's storage: an in-memory, MVCC-ish stand-in for etcd.
//!
//! - One global, monotonically increasing resourceVersion (etcd's revision). Every write
//!   of any type takes the next value, so RVs of one type have gaps, exactly like etcd.
//! - Current state per type is a `BTreeMap` keyed by etcd's key suffix (`ns/name`, or
//!   `name` for cluster-scoped types), so iteration order is etcd's key order.
//! - A bounded, global history of events (by count and/or age). Watchers read it at their
//!   own pace through a cursor (no per-watcher queues); lists at an older RV rebuild that
//!   state by undoing history newer than the RV. Anything older than the history window is
//!   "compacted": watches get 410, Exact lists get 410.
//! - Writers wake watchers through a `tokio::sync::watch` channel carrying the current RV
//!   (a single slot, so it can never grow).

// `Status` is the error currency of every handler (one per failed request), so its size
// does not matter on these paths.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use crate::sim::resources::ResourceType;
use crate::status::Status;

/// Identifies a resource type inside the store: (group, resource).
pub type TypeKey = (&'static str, &'static str);

fn type_key(rt: &ResourceType) -> TypeKey {
    (rt.group, rt.resource)
}

/// The etcd key suffix of an object: `ns/name` for namespaced objects, `name` otherwise.
/// Ordering these strings byte-wise is etcd's range order.
pub fn object_key(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

/// Limits of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Maximum number of events kept in history (all types together). 0 = unbounded by count.
    pub history_events: usize,
    /// Maximum age of events kept in history. None = unbounded by age.
    pub history_duration: Option<Duration>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            history_events: 100_000,
            // kube-apiserver compacts etcd every 5 minutes (--etcd-compaction-interval).
            history_duration: Some(Duration::from_secs(300)),
        }
    }
}

/// What a [`Store::mutate`] closure decided.
#[derive(Debug)]
pub enum Mutation {
    /// Create or replace the object with this value (the store sets metadata.resourceVersion).
    Put(Value),
    /// Delete the object.
    Delete,
    /// Leave it alone (nothing is written, no RV is consumed).
    NoOp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One write, as recorded in the history.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub type_key: TypeKey,
    pub key: String,
    pub namespace: String,
    pub name: String,
    pub kind: EventType,
    /// The new object; for DELETED the last state with metadata.resourceVersion set to the
    /// deletion's RV (what etcd3's watcher sends).
    pub object: Arc<Value>,
    /// The previous object (None for ADDED). Watch uses it for selector transitions, and
    /// lists at older RVs use it to undo this event.
    pub prev: Option<Arc<Value>>,
    pub at: Instant,
    /// A write no watch delivers (`Store::mutate_unwatched`, a test fault): lists at any
    /// resourceVersion see it, watches skip it, as if a cache had lost the event.
    pub unwatched: bool,
    /// `object` serialised once, on first use, and shared by every watcher.
    encoded: OnceLock<Bytes>,
    /// `object`'s protobuf envelope, likewise (`None`: it has none, e.g. the custom
    /// resource).
    envelope: OnceLock<Option<Bytes>>,
}

impl Event {
    /// The compact JSON of `object`, encoded once for all watchers.
    pub fn object_json(&self) -> &Bytes {
        self.encoded.get_or_init(|| {
            Bytes::from(serde_json::to_vec(self.object.as_ref()).unwrap_or_default())
        })
    }

    /// The protobuf envelope (`k8s\0` + `runtime.Unknown`) of `object`, encoded once for
    /// all protobuf watchers; `None` when the object has no protobuf.
    pub fn object_envelope(&self) -> Option<&Bytes> {
        self.envelope
            .get_or_init(|| {
                crate::sim::protobuf::encode_value(&self.object)
                    .ok()
                    .map(Bytes::from)
            })
            .as_ref()
    }
}

/// A consistent view of one type (optionally one namespace) at one RV.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The RV the view is at (the list's metadata.resourceVersion).
    pub rv: u64,
    /// Objects in etcd key order, with their keys.
    pub items: Vec<(String, Arc<Value>)>,
}

/// Which state a read wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadAt {
    /// The current state.
    Latest,
    /// The state exactly at this RV (410 if compacted, too-large if in the future).
    Exact(u64),
}

/// Why a history read failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryError {
    /// The requested RV is older than the history window. `oldest` is the oldest RV that
    /// can still be served (history is complete for every RV > compacted).
    Compacted { requested: u64, compacted: u64 },
}

struct Inner {
    rv: u64,
    /// History is complete for every RV strictly greater than this.
    compacted: u64,
    objects: HashMap<TypeKey, BTreeMap<String, Arc<Value>>>,
    history: VecDeque<Arc<Event>>,
}

/// The store. Shared as `Arc<Store>`.
pub struct Store {
    cfg: StoreConfig,
    inner: RwLock<Inner>,
    rv_tx: watch::Sender<u64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("rv", &self.current_rv())
            .finish()
    }
}

/// The RV an empty store starts at (etcd's first revision is 1).
pub const INITIAL_RV: u64 = 1;

/// Stores an object in the form kube-apiserver writes it. The apiserver decodes every
/// write into its Go struct and encodes it back, so the order of keys a client sent never
/// survives:
/// - a built-in type goes through its protobuf message (`sim::protobuf::normalize`:
///   JSON → protobuf → JSON as Go's `encoding/json` writes the struct): Go field order,
///   `omitempty`, zero values written;
/// - the custom resource (an unstructured Go map) has its keys sorted at every level, as
///   `encoding/json` writes maps.
///
/// Fields the Go struct lacks are dropped by the API's write path (`sim::protobuf::prune`
/// in write/), not here: an object put straight into the store with such fields (tests
/// do, with ad-hoc payloads) cannot take the round trip and keeps its writer's order, with
/// only `metadata` put in `ObjectMeta` order — as does a value of the wrong JSON type.
fn normalize_order(v: &mut Value, rt: &ResourceType) {
    if rt.is_custom() {
        sort_keys(v);
        return;
    }
    if let Err(e) = crate::sim::protobuf::normalize(rt, v) {
        tracing::debug!(error = %e, kind = rt.kind, "stored as written: no protobuf round trip");
        order_metadata(v);
    }
}

fn order_metadata(v: &mut Value) {
    let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let mut ordered = serde_json::Map::with_capacity(meta.len());
    for key in &crate::model::meta::OBJECT_META_ORDER {
        if let Some(x) = meta.remove(*key) {
            ordered.insert((*key).to_string(), x);
        }
    }
    // Anything else (the apiserver would drop it) keeps its place after the known fields.
    ordered.append(meta);
    *meta = ordered;
}

fn sort_keys(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = std::mem::take(m).into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (k, mut x) in entries {
                sort_keys(&mut x);
                m.insert(k, x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(sort_keys),
        _ => {}
    }
}

fn set_rv(v: &mut Value, rv: u64) {
    if let Some(obj) = v.as_object_mut() {
        let meta = obj
            .entry("metadata")
            .or_insert_with(|| Value::Object(Default::default()));
        if !meta.is_object() {
            *meta = Value::Object(Default::default());
        }
        if let Some(m) = meta.as_object_mut() {
            m.insert("resourceVersion".into(), Value::String(rv.to_string()));
        }
    }
}

impl Store {
    pub fn new(cfg: StoreConfig) -> Arc<Self> {
        let (rv_tx, _) = watch::channel(INITIAL_RV);
        Arc::new(Self {
            cfg,
            inner: RwLock::new(Inner {
                rv: INITIAL_RV,
                compacted: INITIAL_RV - 1,
                objects: HashMap::new(),
                history: VecDeque::new(),
            }),
            rv_tx,
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.cfg
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the maps half-updated (every write
        // is a few infallible inserts), so a poisoned lock is still consistent.
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The current global resourceVersion.
    pub fn current_rv(&self) -> u64 {
        self.read().rv
    }

    /// History is complete for every RV strictly greater than this value.
    pub fn compacted_rv(&self) -> u64 {
        self.read().compacted
    }

    /// A receiver that changes whenever the global RV moves (for watchers and RV waits).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.rv_tx.subscribe()
    }

    /// The current object, if any.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Option<Arc<Value>> {
        let inner = self.read();
        inner
            .objects
            .get(&type_key(rt))
            .and_then(|m| m.get(&object_key(ns, name)))
            .cloned()
    }

    /// Atomic read-modify-write of one object. The closure sees the current object and
    /// decides. On Put/Delete the store assigns the next RV, writes
    /// `metadata.resourceVersion`, records the event and wakes watchers.
    ///
    /// Returns the stored object after a Put, the deleted object (RV = deletion RV) after a
    /// Delete, and the current object after a NoOp. A Put whose value equals the current
    /// object is a no-op, like etcd3's `GuaranteedUpdate` skipping identical bytes.
    pub fn mutate(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        f: impl FnOnce(Option<&Arc<Value>>) -> Result<Mutation, Status>,
    ) -> Result<Option<Arc<Value>>, Status> {
        self.mutate_with(rt, ns, name, f, false)
    }

    /// [`Store::mutate`] whose event no watch delivers: the object changes, lists (at
    /// every resourceVersion from the write's on) show it, and every watch skips it. A
    /// fault for tests of the gateway's consistency check: a cache fed only by its watch
    /// can notice the change only by comparing itself with a list.
    pub fn mutate_unwatched(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        f: impl FnOnce(Option<&Arc<Value>>) -> Result<Mutation, Status>,
    ) -> Result<Option<Arc<Value>>, Status> {
        self.mutate_with(rt, ns, name, f, true)
    }

    fn mutate_with(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        f: impl FnOnce(Option<&Arc<Value>>) -> Result<Mutation, Status>,
        unwatched: bool,
    ) -> Result<Option<Arc<Value>>, Status> {
        let tk = type_key(rt);
        let key = object_key(ns, name);
        let mut guard = self.write();
        let inner = &mut *guard;
        let current = inner.objects.get(&tk).and_then(|m| m.get(&key)).cloned();
        let decision = f(current.as_ref())?;
        let (kind, object) = match decision {
            Mutation::NoOp => return Ok(current),
            Mutation::Put(mut v) => {
                // Normalised first (with the next RV in place, so that it takes its
                // ObjectMeta position): what is stored and compared is what the apiserver
                // would store.
                let rv = inner.rv + 1;
                set_rv(&mut v, rv);
                normalize_order(&mut v, rt);
                if let Some(cur) = &current {
                    let cur_rv = cur
                        .pointer("/metadata/resourceVersion")
                        .cloned()
                        .unwrap_or(Value::Null);
                    let mut probe = v.clone();
                    if let Some(m) = probe.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.insert("resourceVersion".into(), cur_rv);
                    }
                    if &probe == cur.as_ref() {
                        return Ok(current);
                    }
                }
                let kind = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (kind, Arc::new(v))
            }
            Mutation::Delete => {
                let Some(cur) = &current else {
                    return Ok(None);
                };
                let mut v = cur.as_ref().clone();
                set_rv(&mut v, inner.rv + 1);
                (EventType::Deleted, Arc::new(v))
            }
        };
        inner.rv += 1;
        let rv = inner.rv;
        let map = inner.objects.entry(tk).or_default();
        if kind == EventType::Deleted {
            map.remove(&key);
        } else {
            map.insert(key.clone(), object.clone());
        }
        inner.history.push_back(Arc::new(Event {
            rv,
            type_key: tk,
            key,
            namespace: ns.to_string(),
            name: name.to_string(),
            kind,
            object: object.clone(),
            prev: current,
            at: Instant::now(),
            unwatched,
            encoded: OnceLock::new(),
            envelope: OnceLock::new(),
        }));
        self.trim(inner);
        drop(guard);
        self.rv_tx.send_replace(rv);
        Ok(Some(object))
    }

    /// Applies the history window (count and age).
    fn trim(&self, inner: &mut Inner) {
        let now = Instant::now();
        while let Some(front) = inner.history.front() {
            let too_many =
                self.cfg.history_events > 0 && inner.history.len() > self.cfg.history_events;
            let too_old = self
                .cfg
                .history_duration
                .is_some_and(|d| now.duration_since(front.at) > d);
            if !(too_many || too_old) {
                break;
            }
            inner.compacted = front.rv;
            inner.history.pop_front();
        }
    }

    /// Compacts history up to and including `rv` (etcd `compact`). Clamped to the current RV.
    pub fn compact(&self, rv: u64) {
        let mut guard = self.write();
        let inner = &mut *guard;
        let rv = rv.min(inner.rv);
        while inner.history.front().is_some_and(|e| e.rv <= rv) {
            inner.history.pop_front();
        }
        inner.compacted = inner.compacted.max(rv);
    }

    /// Compacts everything: any RV older than the current one becomes too old.
    pub fn compact_now(&self) {
        let rv = self.current_rv();
        self.compact(rv);
    }

    /// Applies the age-based window without a write (called by readers, so that age-based
    /// compaction also happens on an idle store).
    pub fn expire_history(&self) {
        if self.cfg.history_duration.is_none() {
            return;
        }
        let needs = {
            let inner = self.read();
            let now = Instant::now();
            inner.history.front().is_some_and(|e| {
                self.cfg
                    .history_duration
                    .is_some_and(|d| now.duration_since(e.at) > d)
            })
        };
        if needs {
            let mut guard = self.write();
            self.trim(&mut guard);
        }
    }

    /// A snapshot of one type (all namespaces if `ns` is None) at `at`, starting after
    /// `start_after` (an object key, exclusive) — used by paged lists.
    ///
    /// Errors: `Compacted` if `Exact(rv)` is older than the window. `Exact(rv)` beyond the
    /// current RV is the caller's business (wait, then 504); here it yields the latest state
    /// with `rv` set to the current RV, so callers must check first.
    pub fn snapshot(
        &self,
        rt: &ResourceType,
        ns: Option<&str>,
        at: ReadAt,
    ) -> Result<Snapshot, HistoryError> {
        self.expire_history();
        let tk = type_key(rt);
        let inner = self.read();
        let in_ns = |k: &str| match ns {
            None | Some("") => true,
            Some(n) => k.len() > n.len() && k.starts_with(n) && k.as_bytes()[n.len()] == b'/',
        };
        let empty = BTreeMap::new();
        let map = inner.objects.get(&tk).unwrap_or(&empty);
        let range: Box<dyn Iterator<Item = (&String, &Arc<Value>)>> = match ns {
            None | Some("") => Box::new(map.iter()),
            Some(n) => {
                let lo = format!("{n}/");
                let hi = format!("{n}0"); // '0' is the byte after '/'
                Box::new(map.range::<String, _>((Bound::Included(lo), Bound::Excluded(hi))))
            }
        };
        match at {
            ReadAt::Exact(rv) if rv < inner.rv => {
                if rv < inner.compacted {
                    return Err(HistoryError::Compacted {
                        requested: rv,
                        compacted: inner.compacted,
                    });
                }
                let mut state: BTreeMap<String, Arc<Value>> =
                    range.map(|(k, v)| (k.clone(), v.clone())).collect();
                for ev in inner.history.iter().rev() {
                    if ev.rv <= rv {
                        break;
                    }
                    if ev.type_key != tk || !in_ns(&ev.key) {
                        continue;
                    }
                    match &ev.prev {
                        Some(p) => {
                            state.insert(ev.key.clone(), p.clone());
                        }
                        None => {
                            state.remove(&ev.key);
                        }
                    }
                }
                Ok(Snapshot {
                    rv,
                    items: state.into_iter().collect(),
                })
            }
            _ => Ok(Snapshot {
                rv: inner.rv,
                items: range.map(|(k, v)| (k.clone(), v.clone())).collect(),
            }),
        }
    }

    /// Convenience: the current objects of one type (optionally one namespace), in key order.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>) -> (u64, Vec<Arc<Value>>) {
        match self.snapshot(rt, ns, ReadAt::Latest) {
            Ok(s) => (s.rv, s.items.into_iter().map(|(_, v)| v).collect()),
            Err(_) => unreachable!("latest reads never touch history"),
        }
    }

    /// Up to `max` events of type `rt` with RV > `after`, plus the RV the scan reached
    /// (the new cursor: callers pass it back as `after` next time, even when no event of
    /// their type was found, so they never rescan other types' events).
    pub fn events_since(
        &self,
        rt: &ResourceType,
        after: u64,
        max: usize,
    ) -> Result<(Vec<Arc<Event>>, u64), HistoryError> {
        self.expire_history();
        let tk = type_key(rt);
        let inner = self.read();
        if after < inner.compacted {
            return Err(HistoryError::Compacted {
                requested: after,
                compacted: inner.compacted,
            });
        }
        // History RVs are strictly increasing: binary search the first event after `after`.
        let start = inner.history.partition_point(|e| e.rv <= after);
        let mut out = Vec::new();
        let mut cursor = after.max(inner.compacted);
        for ev in inner.history.range(start..) {
            if out.len() >= max {
                break;
            }
            cursor = ev.rv;
            if ev.type_key == tk && !ev.unwatched {
                out.push(ev.clone());
            }
        }
        if out.len() < max {
            // Scanned to the end: everything up to the current RV has been seen.
            cursor = cursor.max(inner.rv);
        }
        Ok((out, cursor))
    }

    /// Waits until the current RV is at least `rv`, or `timeout` passes. Returns whether
    /// it got there.
    pub async fn wait_for_rv(&self, rv: u64, timeout: Duration) -> bool {
        let mut rx = self.subscribe();
        let fut = async move { rx.wait_for(|cur| *cur >= rv).await.is_ok() };
        tokio::time::timeout(timeout, fut).await.unwrap_or(false)
    }

    /// Number of objects per type (for stats/debug).
    pub fn counts(&self) -> Vec<(TypeKey, usize)> {
        let inner = self.read();
        let mut v: Vec<_> = inner.objects.iter().map(|(k, m)| (*k, m.len())).collect();
        v.sort();
        v
    }

    /// Number of events in the history window.
    pub fn history_len(&self) -> usize {
        self.read().history.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::find;
    use serde_json::json;

    fn put(s: &Store, ns: &str, name: &str, v: Value) -> Arc<Value> {
        let rt = find("", "v1", "configmaps").unwrap();
        s.mutate(rt, ns, name, |_| Ok(Mutation::Put(v)))
            .unwrap()
            .unwrap()
    }

    #[test]
    fn rv_is_global_and_history_undoes() {
        let s = Store::new(StoreConfig::default());
        let cm = find("", "v1", "configmaps").unwrap();
        assert_eq!(s.current_rv(), 1);
        let a = put(
            &s,
            "a",
            "x",
            json!({"metadata":{"name":"x","namespace":"a"}}),
        );
        assert_eq!(a["metadata"]["resourceVersion"], "2");
        put(&s, "a-b", "y", json!({"metadata":{"name":"y"}}));
        put(
            &s,
            "a",
            "x",
            json!({"metadata":{"name":"x"},"data":{"k":"v"}}),
        );
        s.mutate(cm, "a-b", "y", |_| Ok(Mutation::Delete)).unwrap();
        assert_eq!(s.current_rv(), 5);
        // etcd key order: "a-b/y" sorts before "a/x".
        let snap = s.snapshot(cm, None, ReadAt::Exact(3)).unwrap();
        let keys: Vec<_> = snap.items.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["a-b/y", "a/x"]);
        assert_eq!(snap.items[1].1["metadata"]["resourceVersion"], "2");
        let snap = s.snapshot(cm, Some("a"), ReadAt::Latest).unwrap();
        assert_eq!(snap.items.len(), 1);
        assert_eq!(snap.rv, 5);
        // Identical put is a no-op.
        let cur = s.get(cm, "a", "x").unwrap();
        put(&s, "a", "x", cur.as_ref().clone());
        assert_eq!(s.current_rv(), 5);
        let (evs, cursor) = s.events_since(cm, 2, 10).unwrap();
        assert_eq!(evs.len(), 3);
        assert_eq!(cursor, 5);
        assert_eq!(evs[2].kind, EventType::Deleted);
        assert_eq!(evs[2].object["metadata"]["resourceVersion"], "5");
        s.compact(3);
        assert!(s.events_since(cm, 2, 10).is_err());
        assert!(s.events_since(cm, 3, 10).is_ok());
        assert!(s.snapshot(cm, None, ReadAt::Exact(2)).is_err());
    }
}
