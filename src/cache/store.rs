//! The cache's store: an ordered, persistent map of objects, published as immutable
//! snapshots.
//!
//! The writer (the reflector) builds each new version by applying one event to the
//! previous map. `imbl::OrdMap` shares structure between versions, so an update costs
//! O(log n) and taking a snapshot is an `Arc` clone: readers never block the writer and
//! never see a half-applied change. Keys are the etcd key suffix (`namespace/name`), whose
//! byte order is the order kube-apiserver lists in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::sync::watch;

use super::snapshots::Retained;
use crate::model::object::CachedObject;
use crate::model::resource::ResourceInfo;
use crate::model::snapshot::Snapshot;
use crate::watch::event::{Change as EventChange, Encoder};
use crate::watch::filter::WatchFilter;
use crate::watch::hub::{Hub, HubState, Registration, Start, TooOld};
use crate::watch::stats::EndReason;
use crate::watch::{relist, RelistMode, WatchConfig};

/// One change applied by the writer.
#[derive(Debug, Clone)]
pub enum Change {
    Upsert(Arc<CachedObject>),
    Delete(Arc<CachedObject>),
    /// A bookmark: the upstream has reached this resourceVersion with no object change.
    Progress(u64),
}

/// The shared store of one resource type, and the hub that fans its changes out to
/// downstream watchers.
#[derive(Debug)]
pub struct Store {
    // The lock is held only to swap or clone an `Arc`, never across an await or while
    // building a list, so contention is a few nanoseconds per access.
    current: RwLock<Arc<Snapshot>>,
    rv_tx: watch::Sender<u64>,
    /// Shared with the watch streams, which need the fan-out and nothing else of the store.
    hub: Arc<Hub>,
    /// Past states kept for continue tokens and Exact lists (`cache::snapshots`).
    retained: Retained,
    /// States before this resourceVersion cannot be rebuilt from the history: a relist
    /// replaced the state there, telling the result but not the steps to it.
    exact_floor: AtomicU64,
    /// The form of the upstream's continue tokens for this resource: kept here because
    /// everything that reads the upstream's lists of it (reflector, probes) and everything
    /// that mints tokens (`serve::read`) holds the store.
    token_form: super::token_form::TokenForm,
}

/// The one handle that changes a store, as kube-runtime's `Writer`: the resource's
/// reflector holds it, everything else reads through an `Arc<Store>` (`reader`), whose
/// methods cannot write. It reads as its store too (`Deref`).
#[derive(Debug)]
pub struct StoreWriter {
    store: Arc<Store>,
}

impl StoreWriter {
    /// Applies one change (see `Store::apply`).
    pub fn apply(&self, change: Change) {
        self.store.apply(change)
    }

    /// Replaces the whole state (see `Store::replace_with`).
    pub fn replace(&self, snapshot: Snapshot) {
        self.store.replace_with(snapshot, false)
    }

    /// Replaces the whole state after a failed consistency check (see
    /// `Store::replace_with`).
    pub fn replace_with(&self, snapshot: Snapshot, repair: bool) {
        self.store.replace_with(snapshot, repair)
    }

    /// The read-only handle, for everyone but the writer.
    pub fn reader(&self) -> &Arc<Store> {
        &self.store
    }
}

impl std::ops::Deref for StoreWriter {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

impl Store {
    /// A store with no type information (unit tests), and its writer.
    pub fn untyped() -> StoreWriter {
        Self::with_hub(Hub::new(
            Encoder::new("", ""),
            WatchConfig::default(),
            &[],
            metrics::Histogram::noop(),
        ))
    }

    /// The store of one resource type, with its watch fan-out: the writer, for the
    /// reflector, from which readers take `reader()`.
    pub fn for_resource(info: &ResourceInfo, cfg: WatchConfig) -> StoreWriter {
        let labels: Vec<&'static str> = info.field_labels.iter().map(|(l, _)| *l).collect();
        let dispatch = if cfg.record_dispatch {
            metrics::histogram!(
                crate::metrics::WATCH_DISPATCH_DURATION,
                "group" => info.group.clone(),
                "resource" => info.resource.clone()
            )
        } else {
            metrics::Histogram::noop()
        };
        Self::with_hub(Hub::new(
            Encoder::new(&info.kind, &info.api_version()),
            cfg,
            &labels,
            dispatch,
        ))
    }

    fn with_hub(hub: Hub) -> StoreWriter {
        let store = Self {
            current: RwLock::new(Arc::new(Snapshot::default())),
            rv_tx: watch::channel(0).0,
            hub: Arc::new(hub),
            retained: Retained::default(),
            exact_floor: AtomicU64::new(0),
            token_form: Default::default(),
        };
        StoreWriter {
            store: Arc::new(store),
        }
    }

    /// The form of the upstream's continue tokens for this resource.
    pub fn token_form(&self) -> &super::token_form::TokenForm {
        &self.token_form
    }

    /// The current snapshot, in O(1).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.current.read().expect("store lock").clone()
    }

    pub fn resource_version(&self) -> u64 {
        *self.rv_tx.borrow()
    }

    /// A second writer beside the reflector's, for `benches/lone_delivery.rs` alone: it
    /// feeds a live gateway's store directly (its simulator stays quiet) to time the
    /// fan-out without the upstream. Anything else writing would race the reflector.
    #[doc(hidden)]
    pub fn writer_for_benchmarks(self: &Arc<Self>) -> StoreWriter {
        StoreWriter {
            store: self.clone(),
        }
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// Registers a downstream watcher; its starting snapshot (if any) is exactly the state
    /// the history continues from.
    pub fn watch(
        &self,
        filter: WatchFilter,
        encoding: crate::watch::encoding::WatchEncoding,
        start: Start,
    ) -> Result<Registration, TooOld> {
        self.hub
            .register(|| self.snapshot(), filter, encoding, start)
    }

    /// Applies one change, publishes the new snapshot and hands the change to the
    /// watchers. Changes older than the store's resourceVersion are ignored: the upstream
    /// never sends them on a healthy stream, and applying one would move the cache
    /// backwards.
    fn apply(&self, change: Change) {
        // The hub's lock orders writers and watcher registrations: a watcher registered
        // under it sees either the state before this change (and then gets the event) or
        // the state after it (and does not).
        let mut hub = self.hub.lock();
        let cur = self.snapshot();
        let rv = match &change {
            Change::Upsert(o) | Change::Delete(o) => o.resource_version,
            Change::Progress(rv) => *rv,
        };
        if rv <= cur.resource_version {
            return;
        }
        let mut next = (*cur).clone();
        next.resource_version = rv;
        let event = match change {
            Change::Upsert(obj) => {
                let prev = next.insert(obj.clone());
                Some((EventChange::Upsert, obj, prev))
            }
            Change::Delete(obj) => {
                let prev = next.remove(&obj.key);
                Some((EventChange::Deleted, obj, prev))
            }
            Change::Progress(_) => None,
        };
        let next = Arc::new(next);
        *self.current.write().expect("store lock") = next.clone();
        let published = match event {
            Some((kind, obj, prev)) => Some(self.hub.publish(&mut hub, kind, obj, prev)),
            None => {
                self.hub.progress(&mut hub, rv);
                None
            }
        };
        self.trim_retained(&hub, &next);
        drop(hub);
        // The express lane's socket writes, outside the hub's lock (see `Hub::publish`).
        if let Some(p) = published {
            p.deliver(&self.hub);
        }
        self.rv_tx.send_replace(rv);
    }

    /// Replaces the whole state at once (after an initial list or a relist), so readers
    /// see either the old state or the new one, never a mix. Watchers receive the
    /// difference as ordinary events (watch::relist); when there is none to tell, their
    /// streams end. `repair` when the state replaces one a consistency check found wrong:
    /// if its difference cannot be told as events, the streams end with an ERROR 410
    /// instead of quietly, so that no client resumes from the wrong state.
    fn replace_with(&self, snapshot: Snapshot, repair: bool) {
        let why = if repair {
            EndReason::Inconsistent
        } else {
            EndReason::Relist
        };
        let mut hub = self.hub.lock();
        let old = self.snapshot();
        let rv = snapshot.resource_version;
        let new = Arc::new(snapshot);
        *self.current.write().expect("store lock") = new.clone();
        let first_list = old.resource_version == 0 && old.is_empty();
        let diff = match self.hub.cfg.relist {
            RelistMode::Diff => relist::diff(&old, &new),
            // Ended below like a relist that contradicts the cache, without the warning.
            RelistMode::End => None,
        };
        match (first_list, diff) {
            (false, Some(events)) => {
                for (kind, obj, prev) in events {
                    // A relist's events go out under the lock, one after another (rare).
                    self.hub
                        .publish(&mut hub, kind, obj, prev)
                        .deliver(&self.hub);
                }
                self.hub.progress(&mut hub, rv);
                // The diff's events tell where the state went, not every step on the
                // way: states inside the gap cannot be rebuilt. Retained snapshots are
                // real states and stay.
                if rv > old.resource_version {
                    self.exact_floor.fetch_max(rv, Ordering::AcqRel);
                }
            }
            (true, _) => {
                self.hub.restart(&mut hub, rv, EndReason::Relist);
                self.retained.clear();
                self.exact_floor.fetch_max(rv, Ordering::AcqRel);
            }
            (false, None) => {
                if repair {
                    tracing::warn!(
                        from = old.resource_version,
                        to = rv,
                        "the re-sync after a failed consistency check cannot be told as events; every watch of this resource ends with 410"
                    );
                } else if self.hub.cfg.relist == RelistMode::Diff {
                    tracing::warn!(
                        from = old.resource_version,
                        to = rv,
                        "relist contradicts the cache; ending every watch of this resource"
                    );
                }
                self.hub.restart(&mut hub, rv, why);
                self.retained.clear();
                self.exact_floor.fetch_max(rv, Ordering::AcqRel);
            }
        }
        self.trim_retained(&hub, &new);
        drop(hub);
        self.rv_tx.send_replace(rv);
    }

    /// Keeps `snap` (the state a first page was cut from) for the pages after it.
    pub fn retain(&self, snap: &Arc<Snapshot>) {
        let hub = self.hub.lock();
        self.retained.insert(snap.clone());
        self.trim_retained(&hub, &self.snapshot());
    }

    /// The state exactly at `rv` (at most the store's own RV): a retained snapshot, or one
    /// rebuilt from the history by undoing the events after `rv` (and then retained for
    /// the pages that follow). `None` when the history no longer reaches back to `rv` or
    /// a relist left a gap after it.
    pub fn state_at(&self, rv: u64) -> Option<Arc<Snapshot>> {
        if let Some(s) = self.retained.get(rv) {
            return Some(s);
        }
        let (base, events) = {
            let hub = self.hub.lock();
            let cur = self.snapshot();
            let floor = self.exact_floor.load(Ordering::Acquire);
            if rv > cur.resource_version || rv < floor {
                self.retained.stats.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            }
            if rv == cur.resource_version {
                return Some(cur);
            }
            let Some(events) = self.hub.events_after(&hub, rv) else {
                self.retained.stats.misses.fetch_add(1, Ordering::Relaxed);
                return None;
            };
            let base = self.retained.base_after(rv, floor).unwrap_or(cur);
            (base, events)
        };
        // Outside the lock: undo, newest first, every event in (rv, base].
        let mut state = (*base).clone();
        for ev in events
            .iter()
            .rev()
            .filter(|e| e.rv <= base.resource_version)
        {
            match &ev.prev {
                Some(prev) => {
                    state.insert(prev.clone());
                }
                None => {
                    if ev.change == EventChange::Upsert {
                        state.remove(&ev.object.key);
                    }
                }
            }
        }
        state.resource_version = rv;
        let state = Arc::new(state);
        self.retained.stats.rebuilt.fetch_add(1, Ordering::Relaxed);
        self.retain(&state);
        Some(state)
    }

    /// The retained snapshots: how many, and the bytes they are estimated to hold that the
    /// current state does not (`cache::snapshots`).
    pub fn retained_usage(&self) -> (usize, usize) {
        let hub = self.hub.lock();
        let cur = self.snapshot();
        // The history also shrinks with time alone (no write needed): catch up here too.
        self.trim_retained(&hub, &cur);
        let bytes = self
            .retained
            .bytes(cur.resource_version, cur.len(), |lo, hi| {
                self.hub.events_between(&hub, lo, hi)
            });
        (self.retained.len(), bytes)
    }

    pub fn retained_stats(&self) -> &crate::cache::snapshots::RetainedStats {
        &self.retained.stats
    }

    /// Drops the retained snapshots that may no longer be kept (under the hub's lock, so
    /// the history's floor is the one just published).
    fn trim_retained(&self, hub: &HubState, cur: &Snapshot) {
        if self.retained.is_empty() {
            return;
        }
        self.retained.trim(
            self.hub.floor_rv(hub),
            cur.resource_version,
            cur.len(),
            |lo, hi| self.hub.events_between(hub, lo, hi),
        );
    }

    /// Waits until the store has reached `rv`, for at most `timeout`. Returns the snapshot
    /// that satisfied it, or `None` on timeout (the caller answers "Too large resource
    /// version").
    pub async fn wait_for(&self, rv: u64, timeout: Duration) -> Option<Arc<Snapshot>> {
        let mut rx = self.rv_tx.subscribe();
        let reached = tokio::time::timeout(timeout, rx.wait_for(|cur| *cur >= rv)).await;
        match reached {
            Ok(Ok(_)) => Some(self.snapshot()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn obj(ns: &str, name: &str, rv: u64) -> Arc<CachedObject> {
        let raw = if ns.is_empty() {
            format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#)
        } else {
            format!(
                r#"{{"metadata":{{"name":"{name}","namespace":"{ns}","resourceVersion":"{rv}"}}}}"#
            )
        };
        Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap())
    }

    fn keys<'a>(it: impl Iterator<Item = &'a Arc<CachedObject>>) -> Vec<String> {
        it.map(|o| o.key.to_string()).collect()
    }

    #[test]
    fn snapshots_are_isolated_from_later_writes() {
        let store = Store::untyped();
        store.apply(Change::Upsert(obj("a", "x", 1)));
        let before = store.snapshot();
        store.apply(Change::Upsert(obj("a", "y", 2)));
        store.apply(Change::Delete(obj("a", "x", 3)));
        assert_eq!(keys(before.iter_namespace(None)), ["a/x"]);
        assert_eq!(before.resource_version, 1);
        let after = store.snapshot();
        assert_eq!(keys(after.iter_namespace(None)), ["a/y"]);
        assert_eq!(after.resource_version, 3);
    }

    #[test]
    fn lists_in_etcd_key_order_and_scopes_namespaces() {
        let store = Store::untyped();
        let mut rv = 0;
        for (ns, name) in [
            ("a-b", "z"),
            ("a", "y"),
            ("a", "b"),
            ("ab", "c"),
            ("b", "a"),
        ] {
            rv += 1;
            store.apply(Change::Upsert(obj(ns, name, rv)));
        }
        let snap = store.snapshot();
        // Byte order of "ns/name": '-' (0x2d) sorts before '/' (0x2f), which sorts
        // before letters, exactly as etcd orders /registry/pods/<ns>/<name>.
        assert_eq!(
            keys(snap.iter_namespace(None)),
            ["a-b/z", "a/b", "a/y", "ab/c", "b/a"]
        );
        assert_eq!(keys(snap.iter_namespace(Some("a"))), ["a/b", "a/y"]);
        assert_eq!(keys(snap.iter_namespace(Some("zz"))), Vec::<String>::new());
        assert_eq!(snap.get("a", "y").unwrap().resource_version, 2);
        assert!(snap.get("a", "q").is_none());
    }

    #[test]
    fn stale_changes_do_not_move_the_store_backwards() {
        let store = Store::untyped();
        store.apply(Change::Upsert(obj("", "n1", 5)));
        store.apply(Change::Upsert(obj("", "n1", 4)));
        store.apply(Change::Progress(3));
        assert_eq!(store.resource_version(), 5);
        store.apply(Change::Progress(9));
        assert_eq!(store.resource_version(), 9);
        assert_eq!(store.snapshot().len(), 1);
    }

    #[test]
    fn bytes_follow_inserts_replacements_and_removals() {
        let store = Store::untyped();
        let a1 = obj("a", "x", 1);
        let a2 = obj("a", "x", 12);
        let b = obj("a", "y", 13);
        store.apply(Change::Upsert(a1.clone()));
        assert_eq!(store.snapshot().bytes, a1.raw.len());
        store.apply(Change::Upsert(a2.clone()));
        store.apply(Change::Upsert(b.clone()));
        assert_eq!(store.snapshot().bytes, a2.raw.len() + b.raw.len());
        store.apply(Change::Delete(obj("a", "x", 14)));
        assert_eq!(store.snapshot().bytes, b.raw.len());
    }

    #[test]
    fn past_states_are_rebuilt_from_the_history_until_a_gap() {
        let store = Store::untyped();
        store.replace(Snapshot {
            resource_version: 10,
            ..Default::default()
        });
        let state = |s: &Snapshot| -> Vec<(String, u64)> {
            s.objects
                .values()
                .map(|o| (o.key.to_string(), o.resource_version))
                .collect()
        };
        let mut seen = vec![(10, state(&store.snapshot()))];
        let steps = [
            Change::Upsert(obj("a", "x", 11)),
            Change::Upsert(obj("a", "y", 12)),
            Change::Progress(14),
            Change::Upsert(obj("a", "x", 15)),
            Change::Delete(obj("a", "y", 16)),
            Change::Upsert(obj("a", "y", 17)),
            Change::Delete(obj("a", "x", 18)),
        ];
        for c in steps {
            store.apply(c);
            let now = store.snapshot();
            seen.push((now.resource_version, state(&now)));
        }
        // Every RV, including those no event of this resource carries (13: the state at 12).
        for rv in 10..=18 {
            let want = &seen.iter().rev().find(|(at, _)| *at <= rv).unwrap().1;
            let got = store.state_at(rv).expect("in the history");
            assert_eq!(&state(&got), want, "state at {rv}");
            assert_eq!(got.resource_version, rv);
        }
        assert!(store.state_at(9).is_none(), "before the first list");
        assert!(store.state_at(19).is_none(), "not reached yet");
        // A relist that moves the state on leaves a gap: its states are unknown.
        let mut next = (*store.snapshot()).clone();
        next.insert(obj("a", "z", 21));
        next.resource_version = 22;
        store.replace(next);
        assert!(store.state_at(20).is_none(), "inside the relist's gap");
        assert!(store.state_at(22).is_some());
        // A state retained before the gap stays.
        assert!(store.state_at(15).is_some(), "rebuilt earlier, retained");
    }

    #[tokio::test(start_paused = true)]
    async fn wait_for_returns_when_the_rv_arrives_or_times_out() {
        let store = Arc::new(Store::untyped());
        store.apply(Change::Progress(10));
        assert!(store.wait_for(10, Duration::from_secs(3)).await.is_some());
        assert!(store.wait_for(11, Duration::from_secs(3)).await.is_none());
        let s2 = store.clone();
        let waiter = tokio::spawn(async move { s2.wait_for(12, Duration::from_secs(3)).await });
        tokio::task::yield_now().await;
        store.apply(Change::Progress(12));
        let snap = waiter.await.unwrap().expect("reached");
        assert_eq!(snap.resource_version, 12);
    }
}
