//! Turning an upstream relist into ordinary events.
//!
//! After a 410 the reflector lists again and replaces the cache's state. Rather than end
//! every downstream watch (what kube-apiserver's cacher does, pushing all its clients into
//! a relist storm), the hub diffs the old state against the new one and delivers the
//! difference as events, so every watcher's stream stays continuous:
//!
//! - an object that is new, or whose resourceVersion changed, is ADDED/MODIFIED with its
//!   own resourceVersion (which lies in (old RV, list RV]);
//! - an object that is gone is DELETED. The upstream no longer knows when it was deleted,
//!   so the event carries the list's resourceVersion, the earliest RV at which the
//!   deletion is known to have happened, with the object's last state.
//!
//! Events are ordered by resourceVersion; deletions come after every change with a lower
//! RV and before a change at exactly the list RV. A client that disconnects in the middle
//! of several deletions sharing the list RV and resumes from it misses the rest of them:
//! the one case the history cannot express (docs/watch.md).
//!
//! If the new state contradicts the old one (the list RV is older than the cache's, or an
//! object changed at an RV the cache had already passed: an upstream restored from a
//! backup, say), there is no continuous story to tell, and the hub ends every watch as
//! kube-apiserver does.

use std::cmp::Ordering;
use std::sync::Arc;

use super::event::Change;
use crate::cache::object::CachedObject;
use crate::cache::store::Snapshot;

/// One change of a relist diff.
pub type DiffEvent = (Change, Arc<CachedObject>, Option<Arc<CachedObject>>);

/// The events that take a watcher from `old` to `new`, or `None` when there is no
/// consistent way to.
pub fn diff(old: &Snapshot, new: &Snapshot) -> Option<Vec<DiffEvent>> {
    let (from, to) = (old.resource_version, new.resource_version);
    if to < from {
        return None;
    }
    let mut upserts: Vec<DiffEvent> = Vec::new();
    let mut deletes: Vec<DiffEvent> = Vec::new();
    let mut a = old.objects.iter().peekable();
    let mut b = new.objects.iter().peekable();
    loop {
        let order = match (a.peek(), b.peek()) {
            (None, None) => break,
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (Some((ka, _)), Some((kb, _))) => ka.cmp(kb),
        };
        match order {
            Ordering::Less => {
                let (_, gone) = a.next().expect("peeked");
                deletes.push((
                    Change::Deleted,
                    Arc::new(gone.with_resource_version(to)),
                    Some(gone.clone()),
                ));
            }
            Ordering::Greater => {
                let (_, added) = b.next().expect("peeked");
                if added.resource_version <= from || added.resource_version > to {
                    return None;
                }
                upserts.push((Change::Upsert, added.clone(), None));
            }
            Ordering::Equal => {
                let (_, before) = a.next().expect("peeked");
                let (_, after) = b.next().expect("peeked");
                if after.resource_version == before.resource_version {
                    continue;
                }
                if after.resource_version <= from || after.resource_version > to {
                    return None;
                }
                upserts.push((Change::Upsert, after.clone(), Some(before.clone())));
            }
        }
    }
    upserts.sort_by_key(|(_, o, _)| o.resource_version);
    let at_list_rv = upserts.partition_point(|(_, o, _)| o.resource_version < to);
    let tail = upserts.split_off(at_list_rv);
    upserts.extend(deletes);
    upserts.extend(tail);
    Some(upserts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn obj(name: &str, rv: u64) -> Arc<CachedObject> {
        let raw = format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}"}}}}"#);
        Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap())
    }

    fn snap(rv: u64, objs: &[Arc<CachedObject>]) -> Snapshot {
        let mut s = Snapshot::default();
        for o in objs {
            s.insert(o.clone());
        }
        s.resource_version = rv;
        s
    }

    fn summary(d: &[DiffEvent]) -> Vec<(Change, String, u64)> {
        d.iter()
            .map(|(c, o, _)| (*c, o.name().to_string(), o.resource_version))
            .collect()
    }

    #[test]
    fn changes_in_rv_order_then_deletions_at_the_list_rv() {
        let old = snap(10, &[obj("a", 3), obj("b", 4), obj("c", 5), obj("d", 6)]);
        let new = snap(20, &[obj("a", 3), obj("b", 15), obj("e", 12), obj("f", 20)]);
        let d = diff(&old, &new).unwrap();
        use Change::*;
        assert_eq!(
            summary(&d),
            vec![
                (Upsert, "e".into(), 12),
                (Upsert, "b".into(), 15),
                (Deleted, "c".into(), 20),
                (Deleted, "d".into(), 20),
                (Upsert, "f".into(), 20),
            ]
        );
        // The modified object knows its previous state; the deleted one carries it.
        assert_eq!(d[1].2.as_ref().unwrap().resource_version, 4);
        assert_eq!(d[2].2.as_ref().unwrap().resource_version, 5);
        let v: serde_json::Value = serde_json::from_slice(&d[2].1.raw).unwrap();
        assert_eq!(v["metadata"]["resourceVersion"], "20");
    }

    #[test]
    fn contradictions_have_no_diff() {
        let old = snap(10, &[obj("a", 3)]);
        // The list is older than the cache.
        assert!(diff(&old, &snap(9, &[obj("a", 3)])).is_none());
        // An object changed at an RV the cache had already passed.
        assert!(diff(&old, &snap(20, &[obj("a", 7)])).is_none());
        assert!(diff(&old, &snap(20, &[obj("a", 3), obj("z", 8)])).is_none());
        // Nothing changed: no events.
        assert_eq!(diff(&old, &snap(10, &[obj("a", 3)])).unwrap().len(), 0);
    }
}
