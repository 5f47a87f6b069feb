//! One change in a resource's history and its wire encodings.
//!
//! An event's JSON lines (`{"type":…,"object":…}\n`) are built at most once per event
//! and kind, on first use, and then shared (`Bytes` clones) by every watcher that receives
//! it: no per-watcher serialisation. Which kind a watcher gets depends on its selector
//! (see [`Event::transition`]), so up to four encodings exist per event, and usually one.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use crate::bookmark::BookmarkObject;
use crate::model::object::CachedObject;

/// What happened to the object, as the upstream (or a relist diff) reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Created or updated.
    Upsert,
    Deleted,
}

/// Representations other than JSON whose lines an event shares between watchers (see
/// [`Event::extra_line`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtraLine {
    /// JSON `PartialObjectMetadata` of this `meta.k8s.io` version.
    Metadata(crate::negotiate::MetaVersion),
    /// The object in protobuf (`;stream=watch` frames).
    Protobuf,
    /// `PartialObjectMetadata` of this version in protobuf.
    MetadataProtobuf(crate::negotiate::MetaVersion),
}

impl ExtraLine {
    /// Cells reserved per event (see [`Extra`]).
    const COUNT: usize = 5;

    fn slot(self) -> usize {
        use crate::negotiate::MetaVersion::{V1beta1, V1};
        match self {
            ExtraLine::Metadata(V1) => 0,
            ExtraLine::Metadata(V1beta1) => 1,
            ExtraLine::Protobuf => 2,
            ExtraLine::MetadataProtobuf(V1) => 3,
            ExtraLine::MetadataProtobuf(V1beta1) => 4,
        }
    }
}

/// The lines of an event in representations other than JSON, allocated on first use:
/// an event nobody watches that way pays one empty cell (16 bytes), a representation in
/// use its four lines.
type Extra = [OnceLock<Box<[OnceLock<Bytes>; 4]>>; ExtraLine::COUNT];

/// The event type one watcher sees, after its selector's transitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    Added,
    Modified,
    /// The object was deleted (the upstream's DELETED object).
    Deleted,
    /// The object stopped matching: DELETED carrying the previous state at this event's
    /// resourceVersion (cache_watcher.go `convertToWatchEvent`).
    DeletedPrevious,
}

impl Delivery {
    /// The watch event's `type`.
    pub fn event_type(self) -> &'static str {
        match self {
            Delivery::Added => "ADDED",
            Delivery::Modified => "MODIFIED",
            Delivery::Deleted | Delivery::DeletedPrevious => "DELETED",
        }
    }
}

/// One change in the history.
#[derive(Debug)]
pub struct Event {
    /// Position in the history (consecutive).
    pub seq: u64,
    pub rv: u64,
    pub change: Change,
    /// The new state; for a deletion, the deleted object at the deletion's RV.
    pub object: Arc<CachedObject>,
    /// The state before, when the cache had it.
    pub prev: Option<Arc<CachedObject>>,
    /// When it entered the history (for the time window and the oldest-age metric).
    pub at: Instant,
    lines: [OnceLock<Bytes>; 4],
    extra: OnceLock<Box<Extra>>,
    /// What it keeps alive apart from its encodings (see [`Event::base_cost`]).
    base_cost: usize,
    /// Bytes of the encodings built so far; `RETIRED` once it has left the history.
    encoded: AtomicUsize,
}

/// The flag in `Event::encoded` set when the event leaves the history: encodings built
/// after that are no longer the history's (the watcher that asked holds them).
const RETIRED: usize = 1 << (usize::BITS - 1);

/// The bytes of wire encodings built for the events of one history while they are in it.
/// Encodings are built on first use, by dispatch under the hub's lock or by a watcher
/// reading the history outside it, so the count is an atomic that each event adds to when
/// it encodes and subtracts its share from when it leaves ([`Event::retire`]). A race
/// between the two can leave it briefly negative, never wrong for long.
#[derive(Debug, Default)]
pub struct EncodedBytes(AtomicI64);

impl EncodedBytes {
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire).max(0) as usize
    }
}

impl Event {
    pub fn new(
        seq: u64,
        rv: u64,
        change: Change,
        object: Arc<CachedObject>,
        prev: Option<Arc<CachedObject>>,
    ) -> Self {
        let base_cost = std::mem::size_of::<Self>()
            + ARC_COUNTS
            + object.heap_bytes()
            + prev.as_deref().map_or(0, CachedObject::heap_bytes);
        Self {
            seq,
            rv,
            change,
            object,
            prev,
            at: Instant::now(),
            lines: Default::default(),
            extra: OnceLock::new(),
            base_cost,
            encoded: AtomicUsize::new(0),
        }
    }

    /// What the cacher's `convertToWatchEvent` sends a watcher whose selector is
    /// `matches`: the object matching now and before decides ADDED, MODIFIED or DELETED.
    /// A deletion, or a change of an object the cache never saw, is judged by the state
    /// before (as the cacher does: a DELETED for an unknown object reaches no one).
    pub fn transition(&self, matches: impl Fn(&CachedObject) -> bool) -> Option<Delivery> {
        let was = self.prev.as_deref().is_some_and(&matches);
        match self.change {
            Change::Deleted => was.then_some(Delivery::Deleted),
            Change::Upsert => match (was, matches(&self.object)) {
                (false, true) => Some(Delivery::Added),
                (true, true) => Some(Delivery::Modified),
                (true, false) => Some(Delivery::DeletedPrevious),
                (false, false) => None,
            },
        }
    }

    /// The object a watcher given `delivery` receives: the new state, or for an object
    /// that stopped matching the previous state at this event's resourceVersion.
    pub fn delivered_object(&self, delivery: Delivery) -> Arc<CachedObject> {
        match delivery {
            Delivery::DeletedPrevious => {
                let prev = self.prev.as_ref().unwrap_or(&self.object);
                Arc::new(prev.with_resource_version(self.rv))
            }
            _ => self.object.clone(),
        }
    }

    /// The shared line of this event in another representation, built on first use by
    /// `build` (from the delivered object) and counted in `encoded` like the JSON lines.
    pub fn extra_line(
        &self,
        which: ExtraLine,
        delivery: Delivery,
        encoded: &EncodedBytes,
        build: impl FnOnce(&CachedObject) -> Bytes,
    ) -> Bytes {
        let lines =
            self.extra.get_or_init(Default::default)[which.slot()].get_or_init(Default::default);
        lines[delivery as usize]
            .get_or_init(|| {
                let line = build(&self.delivered_object(delivery));
                self.count(line.len(), encoded);
                line
            })
            .clone()
    }

    fn count(&self, n: usize, encoded: &EncodedBytes) {
        if self.encoded.fetch_add(n, Ordering::AcqRel) & RETIRED == 0 {
            encoded.0.fetch_add(n as i64, Ordering::AcqRel);
        }
    }

    /// The shared wire line for `delivery`, built on first use and counted in `encoded`
    /// while the event is in the history.
    pub fn line(&self, delivery: Delivery, enc: &Encoder, encoded: &EncodedBytes) -> Bytes {
        let slot = &self.lines[delivery as usize];
        slot.get_or_init(|| {
            let line = match delivery {
                Delivery::Added => enc.object_line("ADDED", &self.object),
                Delivery::Modified => enc.object_line("MODIFIED", &self.object),
                Delivery::Deleted => enc.object_line("DELETED", &self.object),
                Delivery::DeletedPrevious => {
                    let prev = self.prev.as_ref().unwrap_or(&self.object);
                    enc.object_line("DELETED", &prev.with_resource_version(self.rv))
                }
            };
            self.count(line.len(), encoded);
            line
        })
        .clone()
    }

    /// What this event keeps alive apart from its encodings, for the history's budget:
    /// itself, its object and its previous state (JSON and parsed header). An upper
    /// bound: an object that is the new state of one event and the previous state of the
    /// next (or still the store's) is counted by each.
    pub fn base_cost(&self) -> usize {
        self.base_cost
    }

    /// The event leaves the history: its encodings stop counting in `encoded`, and any
    /// built later never start.
    pub fn retire(&self, encoded: &EncodedBytes) {
        let built = self.encoded.fetch_or(RETIRED, Ordering::AcqRel) & !RETIRED;
        encoded.0.fetch_sub(built as i64, Ordering::AcqRel);
    }
}

/// An `Arc`'s strong and weak counts, beside the value it holds.
const ARC_COUNTS: usize = 2 * std::mem::size_of::<usize>();

/// Encodes events and bookmarks of one resource type.
#[derive(Debug, Clone)]
pub struct Encoder {
    pub kind: String,
    pub api_version: String,
    /// `{"kind":"Pod","apiVersion":"v1",` for objects stored without TypeMeta (list items).
    type_prefix: Vec<u8>,
    /// `{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1",`: the head of a synthetic
    /// ADDED event for such an object, shared by every initial event.
    added_typed_head: Bytes,
    /// The type's BOOKMARK object (its zero object for built-in types).
    bookmark: BookmarkObject,
}

impl Encoder {
    pub fn new(kind: &str, api_version: &str) -> Self {
        let mut type_prefix = b"{\"kind\":".to_vec();
        serde_json::to_writer(&mut type_prefix, kind).expect("string serialises");
        type_prefix.extend_from_slice(b",\"apiVersion\":");
        serde_json::to_writer(&mut type_prefix, api_version).expect("string serialises");
        type_prefix.push(b',');
        let mut head = ADDED_HEAD.to_vec();
        head.extend_from_slice(&type_prefix);
        Self {
            kind: kind.to_string(),
            api_version: api_version.to_string(),
            type_prefix,
            added_typed_head: Bytes::from(head),
            bookmark: BookmarkObject::new(api_version, kind),
        }
    }

    /// A synthetic ADDED event for `obj` as frames that share the object's bytes (no copy
    /// per watcher): head, object (or its bytes after `{` when the head adds TypeMeta),
    /// tail. Their concatenation equals `object_line("ADDED", obj)`.
    pub fn added_frames(&self, obj: &CachedObject) -> [Bytes; 3] {
        if obj.has_type_meta() {
            [
                Bytes::from_static(ADDED_HEAD),
                obj.raw.clone(),
                Bytes::from_static(LINE_TAIL),
            ]
        } else {
            [
                self.added_typed_head.clone(),
                obj.raw.slice(1..),
                Bytes::from_static(LINE_TAIL),
            ]
        }
    }

    /// `{"type":"<kind>","object":<object with TypeMeta>}\n`.
    pub fn object_line(&self, kind: &str, obj: &CachedObject) -> Bytes {
        let mut out = Vec::with_capacity(obj.raw.len() + self.type_prefix.len() + 32);
        out.extend_from_slice(b"{\"type\":\"");
        out.extend_from_slice(kind.as_bytes());
        out.extend_from_slice(b"\",\"object\":");
        obj.write_with_type_meta(&self.type_prefix, &mut out);
        out.extend_from_slice(b"}\n");
        Bytes::from(out)
    }

    /// `{"kind":"Pod","apiVersion":"v1",`: what objects stored without TypeMeta get.
    pub fn type_prefix(&self) -> &[u8] {
        &self.type_prefix
    }

    /// The BOOKMARK line: the type's bookmark object (`crate::bookmark`) with only
    /// `metadata.resourceVersion`, plus the `k8s.io/initial-events-end` annotation when it
    /// closes the initial events of a watch-list.
    pub fn bookmark_line(&self, rv: u64, initial_events_end: bool) -> Bytes {
        value_line("BOOKMARK", &self.bookmark_object(rv, initial_events_end))
    }

    /// A bookmark's object (see [`Encoder::bookmark_line`]).
    pub fn bookmark_object(&self, rv: u64, initial_events_end: bool) -> Value {
        self.bookmark.at(rv, initial_events_end)
    }
}

const ADDED_HEAD: &[u8] = b"{\"type\":\"ADDED\",\"object\":";
const LINE_TAIL: &[u8] = b"}\n";

pub use crate::bookmark::INITIAL_EVENTS_END;

/// `{"type":"<kind>","object":<value>}\n` (ERROR events, bookmarks).
pub fn value_line(kind: &str, object: &Value) -> Bytes {
    let mut v = Vec::with_capacity(256);
    v.extend_from_slice(b"{\"type\":");
    serde_json::to_writer(&mut v, kind).expect("string serialises");
    v.extend_from_slice(b",\"object\":");
    serde_json::to_writer(&mut v, object).expect("value serialises");
    v.extend_from_slice(b"}\n");
    Bytes::from(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str, rv: u64, label: &str) -> Arc<CachedObject> {
        let raw = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{{"app":"{label}"}}}},"spec":{{"x":"{{\"resourceVersion\":\"{rv}\"}}"}}}}"#
        );
        Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap())
    }

    fn app_is(v: &'static str) -> impl Fn(&CachedObject) -> bool {
        move |o| o.label("app") == Some(v)
    }

    #[test]
    fn transitions_follow_the_cacher() {
        let a = obj("p", 5, "a");
        let b = obj("p", 6, "b");
        let moved = Event::new(0, 6, Change::Upsert, b.clone(), Some(a.clone()));
        assert_eq!(
            moved.transition(app_is("a")),
            Some(Delivery::DeletedPrevious)
        );
        assert_eq!(moved.transition(app_is("b")), Some(Delivery::Added));
        assert_eq!(moved.transition(app_is("c")), None);
        let same = Event::new(0, 6, Change::Upsert, obj("p", 6, "a"), Some(a.clone()));
        assert_eq!(same.transition(app_is("a")), Some(Delivery::Modified));
        let created = Event::new(0, 5, Change::Upsert, a.clone(), None);
        assert_eq!(created.transition(app_is("a")), Some(Delivery::Added));
        let gone = Event::new(0, 7, Change::Deleted, obj("p", 7, "a"), Some(a.clone()));
        assert_eq!(gone.transition(app_is("a")), Some(Delivery::Deleted));
        assert_eq!(gone.transition(app_is("b")), None);
        let unknown = Event::new(0, 7, Change::Deleted, obj("p", 7, "a"), None);
        assert_eq!(unknown.transition(|_| true), None);
    }

    #[test]
    fn stopped_matching_sends_the_previous_state_at_the_event_rv() {
        let enc = Encoder::new("Pod", "v1");
        let moved = Event::new(
            0,
            6,
            Change::Upsert,
            obj("p", 6, "b"),
            Some(obj("p", 5, "a")),
        );
        let line = moved.line(Delivery::DeletedPrevious, &enc, &EncodedBytes::default());
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["type"], "DELETED");
        assert_eq!(v["object"]["metadata"]["resourceVersion"], "6");
        assert_eq!(v["object"]["metadata"]["labels"]["app"], "a");
        // Only metadata's resourceVersion is rewritten.
        assert_eq!(v["object"]["spec"]["x"], r#"{"resourceVersion":"5"}"#);
        assert!(line.ends_with(b"}\n"));
        // Encoded once, shared afterwards.
        let again = moved.line(Delivery::DeletedPrevious, &enc, &EncodedBytes::default());
        assert_eq!(line.as_ptr(), again.as_ptr());
    }

    #[test]
    fn encodings_count_while_the_event_is_in_the_history() {
        let enc = Encoder::new("Pod", "v1");
        let counted = EncodedBytes::default();
        let moved = Event::new(
            0,
            6,
            Change::Upsert,
            obj("p", 6, "b"),
            Some(obj("p", 5, "a")),
        );
        // Both states, JSON and header, and the event itself.
        assert!(
            moved.base_cost() > moved.object.raw.len() + moved.prev.as_ref().unwrap().raw.len()
        );
        assert_eq!(counted.get(), 0, "nothing encoded yet");
        let added = moved.line(Delivery::Added, &enc, &counted);
        assert_eq!(counted.get(), added.len());
        // Built once: asking again counts nothing more.
        moved.line(Delivery::Added, &enc, &counted);
        let gone = moved.line(Delivery::DeletedPrevious, &enc, &counted);
        assert_eq!(counted.get(), added.len() + gone.len());
        // Out of the history: its encodings stop counting, and later ones never start.
        moved.retire(&counted);
        assert_eq!(counted.get(), 0);
        moved.line(Delivery::Modified, &enc, &counted);
        assert_eq!(counted.0.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn objects_without_type_meta_get_it() {
        let enc = Encoder::new("Pod", "v1");
        let raw = r#"{"metadata":{"name":"p","resourceVersion":"3"}}"#;
        let o = Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap());
        let line = Event::new(0, 3, Change::Upsert, o, None).line(
            Delivery::Added,
            &enc,
            &EncodedBytes::default(),
        );
        assert_eq!(
            &line[..],
            br#"{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"3"}}}
"#
        );
    }

    #[test]
    fn added_frames_concatenate_to_the_added_line() {
        let enc = Encoder::new("Pod", "v1");
        let bare = r#"{"metadata":{"name":"p","resourceVersion":"3"}}"#;
        let typed =
            r#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","resourceVersion":"3"}}"#;
        for raw in [bare, typed] {
            let o = CachedObject::parse(Bytes::from(raw), &[]).unwrap();
            let frames: Vec<u8> = enc.added_frames(&o).concat();
            assert_eq!(frames, enc.object_line("ADDED", &o).to_vec());
        }
    }

    #[test]
    fn bookmarks_carry_the_zero_object_and_the_resource_version() {
        let enc = Encoder::new("Pod", "v1");
        assert_eq!(
            &enc.bookmark_line(42, false)[..],
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42"},"spec":{"containers":null},"status":{}}}
"#
        );
        assert_eq!(
            &enc.bookmark_line(42, true)[..],
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"42","annotations":{"k8s.io/initial-events-end":"true"}},"spec":{"containers":null},"status":{}}}
"#
        );
    }
}
