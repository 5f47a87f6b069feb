//! Turning an upstream relist into ordinary events.
//!
//! After a 410 the reflector lists again and replaces the cache's state. Rather than end
//! every downstream watch (what kube-apiserver's cacher does, pushing all its clients into
//! a relist storm), the hub diffs the old state against the new one and delivers the
//! difference as events, so every watcher's stream stays continuous (the default,
//! `--watch-relist=diff`; `end` does what the cacher does, docs/watch.md):
//!
//! - an object that is new, or whose resourceVersion changed, is ADDED/MODIFIED with its
//!   own resourceVersion (which lies in (old RV, list RV]);
//! - an object that is gone is DELETED. The upstream no longer knows when it was deleted,
//!   so the event carries the list's resourceVersion, the earliest RV at which the
//!   deletion is known to have happened, with the object's last state;
//! - an object deleted and created again under the same name (its uid changed) is
//!   DELETED, then ADDED, as a watch that saw it happen would have reported it (a
//!   MODIFIED would change the uid under the client's feet). The deletion happened before
//!   the new object's creation, so before the new state's RV `n`: it gets the highest RV
//!   below `n` that no other event of the relist uses. No surviving object's RV can be
//!   the deletion's own (every RV is one write, and that one was the deletion), so that
//!   RV is at or after the real deletion, and it is the event's alone, so a client that
//!   resumes from it misses nothing. (Only when two re-created objects compete for the
//!   same free RVs can one be placed a little before its real deletion.)
//!
//! Events are ordered by resourceVersion; deletions at the list RV come after every
//! change with a lower RV and before a change at exactly the list RV. A client that
//! disconnects in the middle of several deletions sharing the list RV and resumes from it
//! misses the rest of them: the one case the history cannot express (docs/watch.md).
//!
//! If the new state contradicts the old one, there is no continuous story to tell, and
//! the hub ends every watch as kube-apiserver does. Contradictions: the list RV is older
//! than the cache's; an object changed at an RV the cache had already passed (an upstream
//! restored from a backup, say); the list is at the cache's own RV but differs from it
//! (a deletion could only be placed at an RV resuming clients have already passed); a
//! re-created object with no free RV between the cache's RV and its own.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;

use super::event::Change;
use crate::model::object::CachedObject;
use crate::model::snapshot::Snapshot;

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
    // (the state before, the RV of the object that replaced it)
    let mut recreated: Vec<(Arc<CachedObject>, u64)> = Vec::new();
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
                // At the cache's own RV, the deletion would be placed at an RV every
                // resuming client has already passed.
                if to == from {
                    return None;
                }
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
                let same_uid = before.uid == after.uid || !before.uid.is_known();
                if after.resource_version == before.resource_version {
                    if !same_uid {
                        return None;
                    }
                    continue;
                }
                if after.resource_version <= from || after.resource_version > to {
                    return None;
                }
                if same_uid {
                    upserts.push((Change::Upsert, after.clone(), Some(before.clone())));
                } else {
                    recreated.push((before.clone(), after.resource_version));
                    upserts.push((Change::Upsert, after.clone(), None));
                }
            }
        }
    }
    if !recreated.is_empty() {
        let mut used: HashSet<u64> = upserts.iter().map(|(_, o, _)| o.resource_version).collect();
        for (before, next_rv) in recreated {
            let rv = (from + 1..next_rv).rev().find(|rv| !used.contains(rv))?;
            used.insert(rv);
            upserts.push((
                Change::Deleted,
                Arc::new(before.with_resource_version(rv)),
                Some(before),
            ));
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
        obj_uid(name, rv, &format!("uid-{name}"))
    }

    fn obj_uid(name: &str, rv: u64, uid: &str) -> Arc<CachedObject> {
        let raw =
            format!(r#"{{"metadata":{{"name":"{name}","resourceVersion":"{rv}","uid":"{uid}"}}}}"#);
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

    #[test]
    fn a_re_created_object_is_deleted_then_added() {
        let old = snap(10, &[obj("a", 3), obj("b", 4), obj("c", 5)]);
        let new = snap(
            20,
            &[
                obj_uid("a", 15, "uid-a2"),
                obj("b", 14),
                obj_uid("c", 20, "uid-c2"),
                obj("d", 19),
            ],
        );
        let d = diff(&old, &new).unwrap();
        use Change::*;
        // a: deleted before its new state's RV 15, at the highest RV below it no other
        // event uses (14 is b's); c: before 20, where 19 is d's.
        assert_eq!(
            summary(&d),
            vec![
                (Deleted, "a".into(), 13),
                (Upsert, "b".into(), 14),
                (Upsert, "a".into(), 15),
                (Deleted, "c".into(), 18),
                (Upsert, "d".into(), 19),
                (Upsert, "c".into(), 20),
            ]
        );
        // The deletion carries the old object (old uid) at its RV; the new one is an
        // addition, not a change of the old one.
        let v: serde_json::Value = serde_json::from_slice(&d[0].1.raw).unwrap();
        assert_eq!(v["metadata"]["uid"], "uid-a");
        assert_eq!(v["metadata"]["resourceVersion"], "13");
        assert_eq!(d[0].2.as_ref().unwrap().resource_version, 3);
        assert!(d[2].2.is_none(), "ADDED has no previous state");
        // Two re-created objects never share a deletion RV.
        let old = snap(10, &[obj("a", 3), obj("b", 4)]);
        let new = snap(14, &[obj_uid("a", 13, "a2"), obj_uid("b", 14, "b2")]);
        assert_eq!(
            summary(&diff(&old, &new).unwrap()),
            vec![
                (Deleted, "b".into(), 11),
                (Deleted, "a".into(), 12),
                (Upsert, "a".into(), 13),
                (Upsert, "b".into(), 14),
            ]
        );
    }

    #[test]
    fn a_re_creation_with_no_room_for_its_deletion_contradicts() {
        // Re-created at the RV right after the cache's: its deletion has no RV to be at.
        let old = snap(10, &[obj("a", 3)]);
        assert!(diff(&old, &snap(11, &[obj_uid("a", 11, "a2")])).is_none());
        // Two re-creations and an update squeezed into too few RVs.
        let old = snap(10, &[obj("a", 3), obj("b", 4)]);
        let new = snap(13, &[obj_uid("a", 12, "a2"), obj_uid("b", 13, "b2")]);
        assert!(diff(&old, &new).is_none());
        // Same RV, different uid: the same write cannot have made both.
        let old = snap(10, &[obj("a", 3)]);
        assert!(diff(&old, &snap(20, &[obj_uid("a", 3, "a2")])).is_none());
        // An object the cache knew without a uid is updated, as before.
        let old = snap(10, &[obj_uid("a", 3, "")]);
        let d = diff(&old, &snap(20, &[obj("a", 12)])).unwrap();
        assert_eq!(summary(&d), vec![(Change::Upsert, "a".into(), 12)]);
        assert!(d[0].2.is_some());
    }

    #[test]
    fn a_list_at_the_caches_own_rv_that_lacks_objects_contradicts() {
        let old = snap(10, &[obj("a", 3), obj("b", 4)]);
        assert!(diff(&old, &snap(10, &[obj("a", 3)])).is_none());
        // The same state at the same RV: nothing to tell.
        assert_eq!(diff(&old, &old.clone()).unwrap().len(), 0);
    }
}
