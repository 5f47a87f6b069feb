//! Retained snapshots: the past states continue tokens and Exact lists are served from,
//! as kube-apiserver 1.34+ serves them from its watch cache (`ListFromCacheSnapshot`,
//! KEP-4988).
//!
//! A snapshot is an `imbl::OrdMap` that shares every node it has in common with the
//! store's current state, so keeping one costs only what changed since: the tree nodes
//! the later events copied (the objects they replaced are held by the watch history
//! anyway, as those events' previous states). Two ways to get the state at N:
//!
//! - **retained**: the cache keeps the snapshot a first page was cut from, so the pages
//!   after it are cut from the same state (an `Arc` clone, O(1));
//! - **rebuilt**: from the oldest retained snapshot after N, or the current state, by
//!   undoing the history's events after N (each event keeps the state it replaced), for
//!   a token the upstream issued or an Exact list. Possible only while the history holds
//!   every event after N (the watch history window) and no relist left a gap after N (a
//!   relist tells the new state, not the steps to it): `Store::state_at`.
//!
//! Bounds (docs/consistency.md, "Memory"): a retained snapshot is dropped when the watch
//! history no longer reaches back to it (then the objects it holds would no longer be
//! counted in the history's budget), after [`RETAINED_IDLE`] without a page, and the
//! oldest go first beyond [`MAX_RETAINED`] per resource or when the nodes they hold alone
//! are estimated above [`RETAINED_BYTES`]. Their number and estimated bytes are exported
//! (`watchgate_cache_snapshots`, `watchgate_cache_snapshot_bytes`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::model::snapshot::Snapshot;

/// Snapshots retained per resource at most.
pub const MAX_RETAINED: usize = 64;

/// A snapshot nobody paged from for this long is dropped; the next page is rebuilt (while
/// the history allows) or forwarded.
pub const RETAINED_IDLE: Duration = Duration::from_secs(90);

/// Estimated bytes the retained snapshots of one resource may hold alone.
pub const RETAINED_BYTES: usize = 64 * 1024 * 1024;

/// One B+tree node of the store's map as `imbl` copies it on a write: 16 (key, value)
/// pairs or children, the keys' own heap copies, and the node's header. An estimate.
const NODE_BYTES: usize = 1024;

/// Counters for metrics and tests.
#[derive(Debug, Default)]
pub struct RetainedStats {
    /// Pages or Exact lists served from a retained snapshot.
    pub hits: AtomicU64,
    /// States rebuilt from the history.
    pub rebuilt: AtomicU64,
    /// States the cache could not give (forwarded).
    pub misses: AtomicU64,
    /// Snapshots dropped before their window closed (idle, count or byte bound).
    pub evicted: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    snap: Arc<Snapshot>,
    used: Instant,
}

/// The retained snapshots of one resource, by resourceVersion.
#[derive(Debug, Default)]
pub struct Retained {
    map: Mutex<BTreeMap<u64, Entry>>,
    pub stats: RetainedStats,
}

impl Retained {
    /// The retained snapshot at exactly `rv`.
    pub fn get(&self, rv: u64) -> Option<Arc<Snapshot>> {
        let mut map = self.map.lock().expect("retained lock");
        let e = map.get_mut(&rv)?;
        e.used = Instant::now();
        self.stats.hits.fetch_add(1, Ordering::Relaxed);
        Some(e.snap.clone())
    }

    /// The oldest retained snapshot newer than `rv` and at least `floor` (a base to rebuild
    /// the state at `rv` from with the fewest events).
    pub fn base_after(&self, rv: u64, floor: u64) -> Option<Arc<Snapshot>> {
        let map = self.map.lock().expect("retained lock");
        map.range(rv.max(floor).saturating_add(1)..)
            .next()
            .map(|(_, e)| e.snap.clone())
    }

    /// Keeps `snap` (replacing one at the same RV).
    pub fn insert(&self, snap: Arc<Snapshot>) {
        let mut map = self.map.lock().expect("retained lock");
        map.insert(
            snap.resource_version,
            Entry {
                snap,
                used: Instant::now(),
            },
        );
    }

    /// Drops what may no longer be kept: snapshots older than `floor` (the oldest RV the
    /// history still reaches back to), idle ones, then the oldest while there are more
    /// than [`MAX_RETAINED`] or they hold more than [`RETAINED_BYTES`]. `events_between`
    /// counts the history's events in (lo, hi]; `current_rv` and `objects` describe the
    /// current state.
    pub fn trim(
        &self,
        floor: u64,
        current_rv: u64,
        objects: usize,
        events_between: impl Fn(u64, u64) -> usize,
    ) {
        let mut map = self.map.lock().expect("retained lock");
        if map.is_empty() {
            return;
        }
        // Out of the history's reach: nothing to do with eviction counters, the window
        // closed as it would for the upstream's own tokens.
        while map.first_key_value().is_some_and(|(rv, _)| *rv < floor) {
            map.pop_first();
        }
        let now = Instant::now();
        let before = map.len();
        map.retain(|_, e| now.saturating_duration_since(e.used) < RETAINED_IDLE);
        let mut evicted = before - map.len();
        while map.len() > MAX_RETAINED
            || estimate(&map, current_rv, objects, &events_between) > RETAINED_BYTES
        {
            if map.pop_first().is_none() {
                break;
            }
            evicted += 1;
        }
        if evicted > 0 {
            self.stats
                .evicted
                .fetch_add(evicted as u64, Ordering::Relaxed);
        }
    }

    /// Forgets everything (the history restarted: its states belong to another story).
    pub fn clear(&self) {
        self.map.lock().expect("retained lock").clear();
    }

    pub fn len(&self) -> usize {
        self.map.lock().expect("retained lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The estimated bytes the retained snapshots hold that the current state does not.
    pub fn bytes(
        &self,
        current_rv: u64,
        objects: usize,
        events_between: impl Fn(u64, u64) -> usize,
    ) -> usize {
        let map = self.map.lock().expect("retained lock");
        estimate(&map, current_rv, objects, &events_between)
    }
}

/// Each event after a retained snapshot copied one root-to-leaf path of the tree; the old
/// path stays alive for the newest retained snapshot before the event (and no other), so
/// the nodes the snapshots hold alone are at most (events after the oldest) × (path).
fn estimate(
    map: &BTreeMap<u64, Entry>,
    current_rv: u64,
    objects: usize,
    events_between: &impl Fn(u64, u64) -> usize,
) -> usize {
    let Some((&oldest, _)) = map.first_key_value() else {
        return 0;
    };
    events_between(oldest, current_rv).saturating_mul(path_bytes(objects))
}

/// The bytes of one root-to-leaf path of a map of `objects` entries (B+tree nodes hold
/// 16 entries and are at least a third full: fan-out 6 to 16; 8 is assumed).
pub fn path_bytes(objects: usize) -> usize {
    let mut depth = 1;
    let mut reach = 8usize;
    while reach < objects {
        reach = reach.saturating_mul(8);
        depth += 1;
    }
    depth * NODE_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(rv: u64) -> Arc<Snapshot> {
        Arc::new(Snapshot {
            resource_version: rv,
            ..Default::default()
        })
    }

    #[test]
    fn bases_and_floors() {
        let r = Retained::default();
        for rv in [10, 20, 30] {
            r.insert(snap(rv));
        }
        assert_eq!(r.get(20).unwrap().resource_version, 20);
        assert!(r.get(25).is_none());
        assert_eq!(r.base_after(15, 0).unwrap().resource_version, 20);
        assert_eq!(r.base_after(20, 0).unwrap().resource_version, 30);
        // Bases must not lie behind a relist's gap.
        assert_eq!(r.base_after(5, 25).unwrap().resource_version, 30);
        assert!(r.base_after(30, 0).is_none());
        r.trim(15, 40, 10, |_, _| 0);
        assert!(r.get(10).is_none(), "out of the history's reach");
        assert_eq!(r.len(), 2);
    }

    #[test]
    fn the_byte_bound_drops_the_oldest_first() {
        let r = Retained::default();
        for rv in 1..=5 {
            r.insert(snap(rv * 100));
        }
        // 1,000 events after the oldest, paths of 1 node: 1,000 KiB.
        let per_event = |lo: u64, hi: u64| ((hi - lo) as usize) * 2;
        assert_eq!(r.bytes(600, 1, per_event), 1000 * NODE_BYTES);
        // A budget that fits what follows the third: the first two go.
        let events = |lo: u64, hi: u64| ((hi - lo) as usize) * RETAINED_BYTES / 350 / NODE_BYTES;
        r.trim(0, 600, 1, events);
        assert!(r.get(100).is_none() && r.get(200).is_none());
        assert!(r.get(300).is_some());
        assert_eq!(r.stats.evicted.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_count_bound_and_idle_snapshots() {
        let r = Retained::default();
        for rv in 1..=(MAX_RETAINED as u64 + 3) {
            r.insert(snap(rv));
        }
        r.trim(0, 1000, 1, |_, _| 0);
        assert_eq!(r.len(), MAX_RETAINED);
        assert!(r.get(1).is_none() && r.get(4).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn idle_snapshots_go() {
        let r = Retained::default();
        r.insert(snap(1));
        tokio::time::advance(RETAINED_IDLE / 2).await;
        r.insert(snap(2));
        tokio::time::advance(RETAINED_IDLE / 2 + Duration::from_millis(1)).await;
        r.trim(0, 10, 1, |_, _| 0);
        assert!(r.get(1).is_none());
        assert!(r.get(2).is_some());
    }

    #[test]
    fn paths_grow_with_the_log_of_the_size() {
        assert_eq!(path_bytes(1), NODE_BYTES);
        assert_eq!(path_bytes(64), 2 * NODE_BYTES);
        assert_eq!(path_bytes(150_000), 6 * NODE_BYTES);
    }
}
