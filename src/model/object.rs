//! One cached object: the exact JSON bytes the upstream sent, plus the few parsed values
//! that routing, ordering and selectors need.
//!
//! Keeping the upstream's bytes (instead of a parsed tree) is what lets lists and watch
//! events be served without re-serialising anything, and keeps memory close to the JSON
//! size. The header is parsed once, when the object enters the cache.

use std::borrow::Cow;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use serde::Deserialize;

use crate::selector::label::LabelDigest;

/// Why an upstream object could not enter the cache.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("object has no metadata.name")]
    MissingName,
    #[error("object has no metadata.resourceVersion")]
    MissingResourceVersion,
    #[error("object's resourceVersion {0:?} is not a number")]
    BadResourceVersion(String),
}

/// An immutable cached object. Shared by `Arc` between snapshots, history and watchers.
#[derive(Debug)]
pub struct CachedObject {
    /// The object's JSON exactly as the upstream sent it: with `kind`/`apiVersion` when it
    /// came in a watch event, without them when it came as an item of a built-in list.
    pub raw: Bytes,
    /// Where the fields after `kind`/`apiVersion` begin in `raw` (1 when `raw` has none):
    /// `{` + `raw[body_start..]` is the object without its TypeMeta.
    body_start: usize,
    /// `namespace/name` for namespaced objects, `name` otherwise: the etcd key suffix,
    /// whose byte order is the order kube-apiserver lists in.
    pub key: Box<str>,
    /// Length of the namespace prefix in `key` (0 for cluster-scoped objects).
    ns_len: usize,
    pub resource_version: u64,
    /// `metadata.uid`, as a 128-bit value (see [`Uid`]): what tells a deleted and
    /// re-created object from an updated one when only the two states are known.
    pub uid: Uid,
    pub labels: Box<[(Box<str>, Box<str>)]>,
    /// A digest of `labels` that rules most objects out of a label selector without
    /// reading them (see [`LabelDigest`]).
    pub label_digest: LabelDigest,
    /// Values of the field-selector labels this object's type supports, by label
    /// (`spec.nodeName`, `status.phase`, …). `metadata.*` are answered from `key`.
    pub fields: super::fields::FieldValues,
    /// Other representations of this object, built on first use and shared by every answer
    /// that needs them (see [`Derived`]).
    derived: Derived,
}

/// Representations derived from an object's JSON, each built at most once, on first use.
/// An object is immutable, so each is built at most once per object version; objects
/// nobody asks for another representation of pay only the empty cells.
#[derive(Debug, Default)]
struct Derived {
    /// The JSON of `metadata` as `PartialObjectMetadata` carries it (`None`: the object
    /// has no usable metadata, which the cache never admits).
    metadata_json: std::sync::OnceLock<Option<Bytes>>,
    /// The object's protobuf message (not enveloped), as kube-apiserver would encode it
    /// (`crate::proto`); `None` when it cannot be encoded (a field newer than the schema):
    /// protobuf answers that need it are then forwarded. It may be a slice of the first
    /// watch frame it was encoded for; `derived_bytes` counts the message's bytes.
    proto: std::sync::OnceLock<Option<Bytes>>,
    /// The `PartialObjectMetadata` protobuf message of the object.
    metadata_proto: std::sync::OnceLock<Option<Bytes>>,
}

impl CachedObject {
    pub fn namespace(&self) -> &str {
        &self.key[..self.ns_len]
    }

    pub fn name(&self) -> &str {
        if self.ns_len == 0 {
            &self.key
        } else {
            &self.key[self.ns_len + 1..]
        }
    }

    /// Whether `raw` carries `kind`/`apiVersion`.
    pub fn has_type_meta(&self) -> bool {
        self.body_start > 1
    }

    /// Appends the object as an item of a built-in list: without `kind`/`apiVersion`, as
    /// kube-apiserver writes list items of built-in types.
    pub fn write_without_type_meta(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        out.extend_from_slice(&self.raw[self.body_start..]);
    }

    /// Appends the object with its TypeMeta (watch events, gets, custom resource lists).
    /// `type_prefix` is `{"kind":"Pod","apiVersion":"v1",` for objects that lack it.
    pub fn write_with_type_meta(&self, type_prefix: &[u8], out: &mut Vec<u8>) {
        if self.has_type_meta() {
            out.extend_from_slice(&self.raw);
        } else {
            out.extend_from_slice(type_prefix);
            out.extend_from_slice(&self.raw[1..]);
        }
    }

    /// The memory this object holds: itself, its JSON, its parsed header and the other
    /// representations built so far (for the watch history's byte budget).
    pub fn heap_bytes(&self) -> usize {
        self.resident_bytes() + self.derived_bytes()
    }

    /// What the object holds from the moment it is parsed until it is dropped: itself,
    /// its JSON and its parsed header. Unlike [`CachedObject::heap_bytes`] it never
    /// changes, so the cache's byte budget can add it on insert and take it back on
    /// removal. Representations built later on demand are not in it: they are counted
    /// process-wide instead ([`derived_totals`], `watchgate_cache_derived_bytes`).
    pub fn resident_bytes(&self) -> usize {
        let labels: usize = self
            .labels
            .iter()
            .map(|(k, v)| std::mem::size_of::<(Box<str>, Box<str>)>() + k.len() + v.len())
            .sum();
        let fields: usize = self
            .fields
            .iter()
            .map(|(_, v)| std::mem::size_of::<(&str, Box<str>)>() + v.len())
            .sum();
        std::mem::size_of::<Self>() + self.raw.len() + self.key.len() + labels + fields
    }

    /// The bytes of the representations built so far, beyond the JSON (slices of the JSON
    /// or of the protobuf cost nothing more).
    pub fn derived_bytes(&self) -> usize {
        self.derived_parts().iter().sum()
    }

    /// [`CachedObject::derived_bytes`] by representation (`Representation` order).
    fn derived_parts(&self) -> [usize; 3] {
        let d = &self.derived;
        let own = |cell: &std::sync::OnceLock<Option<Bytes>>, within: Option<&Bytes>| {
            cell.get()
                .and_then(Option::as_ref)
                .map_or(0, |b| owned_len(b, within))
        };
        let proto = d.proto.get().and_then(Option::as_ref);
        [
            own(&d.metadata_json, Some(&self.raw)),
            own(&d.proto, None),
            own(&d.metadata_proto, proto),
        ]
    }

    /// Whether the protobuf message has been built (or found impossible) already.
    pub fn has_proto(&self) -> bool {
        self.derived.proto.get().is_some()
    }

    /// Whether the `PartialObjectMetadata` protobuf message has been built already.
    pub fn has_metadata_proto(&self) -> bool {
        self.derived.metadata_proto.get().is_some()
    }

    /// The object's protobuf message (bare, not enveloped) as type `ty`, built once.
    pub fn proto(&self, ty: crate::proto::MessageType) -> Option<Bytes> {
        self.derived
            .proto
            .get_or_init(|| self.kept_message(crate::proto::encode(ty, &self.raw).map(exact)))
            .clone()
    }

    /// The watch frame of an event whose object is this one, as message `ty` of
    /// `api_version`/`kind` (`None`: the object has no protobuf form). When the message is
    /// not built yet it is encoded straight into the frame, and kept as a slice of it
    /// (`proto::encode_watch_frame`: one allocation and copy instead of two, for events
    /// whose frame serves one watcher, like a kubelet's pods).
    pub fn proto_watch_frame(
        &self,
        ty: crate::proto::MessageType,
        event_type: &str,
        api_version: &str,
        kind: &str,
    ) -> Option<Bytes> {
        let built = |msg: &Bytes| {
            Bytes::from(crate::proto::object_watch_frame(
                event_type,
                api_version,
                kind,
                msg,
            ))
        };
        let mut frame = None;
        let msg = self.derived.proto.get_or_init(|| {
            let encoded =
                crate::proto::encode_watch_frame(ty, &self.raw, event_type, api_version, kind).map(
                    |(bytes, at)| {
                        let bytes = Bytes::from(bytes);
                        let msg = bytes.slice(at);
                        frame = Some(bytes);
                        msg
                    },
                );
            self.kept_message(encoded)
        });
        // The message was built before (by a list, or another thread first): frame it.
        frame.or_else(|| msg.as_ref().map(built))
    }

    /// What the `proto` cell keeps of an encoding: the message, counted in
    /// `watchgate_cache_derived_bytes`, or `None` (logged) when the object has no protobuf
    /// form.
    fn kept_message(&self, encoded: Result<Bytes, crate::proto::ProtoError>) -> Option<Bytes> {
        match encoded {
            Ok(msg) => Some(counted(Representation::Protobuf, msg, None)),
            Err(err) => {
                tracing::debug!(key = %self.key, %err, "object has no protobuf form");
                None
            }
        }
    }

    /// The `PartialObjectMetadata` protobuf message of the object, built once: for a
    /// built-in type, the first field of its own message (`metadata`, field 1, which Go
    /// writes first) when that is built; otherwise encoded from the JSON.
    pub fn metadata_proto(&self, ty: Option<crate::proto::MessageType>) -> Option<Bytes> {
        self.derived
            .metadata_proto
            .get_or_init(|| {
                if let Some(msg) = ty.and_then(|t| self.proto(t)) {
                    if let Some(end) = first_field_end(&msg, 0x0a) {
                        return Some(msg.slice(..end));
                    }
                }
                crate::proto::partial_object_metadata(&self.raw)
                    .ok()
                    .map(|b| counted(Representation::MetadataProtobuf, exact(b), None))
            })
            .clone()
    }

    /// The object's `metadata` as `PartialObjectMetadata` carries it in JSON
    /// (`model::meta`): a slice of the cached bytes for built-in types; for custom
    /// resources (`unstructured`), `ObjectMeta` rebuilt in Go field order, as the
    /// apiserver rebuilds it. Built once, then shared.
    pub fn metadata_json(&self, unstructured: bool) -> Option<Bytes> {
        self.derived
            .metadata_json
            .get_or_init(|| {
                let span = crate::model::meta::metadata_span(&self.raw)?;
                if unstructured {
                    crate::model::meta::object_meta_go_order(&self.raw[span])
                        .ok()
                        .map(|b| counted(Representation::MetadataJson, exact(b), None))
                } else {
                    Some(self.raw.slice(span))
                }
            })
            .clone()
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| &**k == key)
            .map(|(_, v)| &**v)
    }

    /// The value of a field-selector label, as the apiserver's `ToSelectableFields` would
    /// produce it. `None` means the label is not one this object carries.
    pub fn field(&self, label: &str) -> Option<&str> {
        match label {
            "metadata.name" => Some(self.name()),
            "metadata.namespace" => Some(self.namespace()),
            _ => self
                .fields
                .iter()
                .find(|(l, _)| *l == label)
                .map(|(_, v)| &**v),
        }
    }

    /// The same object with `metadata.resourceVersion` set to `rv`: what kube-apiserver
    /// sends in a DELETED event for an object that stopped matching a watcher's selector
    /// (the previous state, at the event's resourceVersion), and for deletions a relist
    /// discovered. The first `"resourceVersion":"<old>"` in the bytes is metadata's: the
    /// apiserver writes metadata before spec and status, and in metadata resourceVersion
    /// comes before managedFields and ownerReferences. The header is unchanged but for
    /// the resourceVersion.
    pub fn with_resource_version(&self, rv: u64) -> Self {
        let old = format!("\"resourceVersion\":\"{}\"", self.resource_version);
        let raw = match memchr::memmem::find(&self.raw[self.body_start..], old.as_bytes()) {
            Some(at) => {
                let at = at + self.body_start;
                let mut out = Vec::with_capacity(self.raw.len() + 8);
                out.extend_from_slice(&self.raw[..at]);
                out.extend_from_slice(format!("\"resourceVersion\":\"{rv}\"").as_bytes());
                out.extend_from_slice(&self.raw[at + old.len()..]);
                Bytes::from(out)
            }
            // Not written the apiserver's way: keep the bytes, the header still says `rv`.
            None => self.raw.clone(),
        };
        Self {
            raw,
            body_start: self.body_start,
            key: self.key.clone(),
            ns_len: self.ns_len,
            resource_version: rv,
            uid: self.uid,
            labels: self.labels.clone(),
            label_digest: self.label_digest,
            fields: self.fields.clone(),
            derived: Derived::default(),
        }
    }

    /// Parses the header out of `raw`. `field_labels` maps each supported field-selector
    /// label to its dotted JSON path (see `model::field_labels` for the table).
    pub fn parse(
        raw: Bytes,
        field_labels: &[(&'static str, &'static str)],
    ) -> Result<Self, ObjectError> {
        let (key, ns_len, resource_version, uid, labels) = Self::parse_meta(&raw)?;
        let fields = if field_labels.is_empty() {
            Box::default()
        } else {
            // A second pass, paid only by types with field labels beyond metadata; it
            // scans past everything off the wanted paths (src/cache/fields.rs).
            super::fields::read(&raw, field_labels)?
        };
        let label_digest = LabelDigest::of(labels.iter().map(|(k, v)| (&**k, &**v)));
        Ok(Self {
            body_start: type_meta_end(&raw),
            raw,
            key,
            ns_len,
            resource_version,
            uid,
            labels,
            label_digest,
            fields,
            derived: Derived::default(),
        })
    }

    /// Reads the metadata header: (key, namespace length, resourceVersion, uid, labels).
    #[allow(clippy::type_complexity)]
    fn parse_meta(
        raw: &[u8],
    ) -> Result<(Box<str>, usize, u64, Uid, Box<[(Box<str>, Box<str>)]>), ObjectError> {
        let header: Header<'_> = serde_json::from_slice(raw)?;
        let meta = header.metadata.ok_or(ObjectError::MissingName)?;
        // An empty name names nothing (the apiserver never sends one).
        let name = meta
            .name
            .filter(|n| !n.is_empty())
            .ok_or(ObjectError::MissingName)?;
        let rv_text = meta
            .resource_version
            .ok_or(ObjectError::MissingResourceVersion)?;
        let resource_version = crate::strconv::parse_uint(&rv_text)
            .map_err(|_| ObjectError::BadResourceVersion(rv_text.to_string()))?;
        let ns = meta.namespace.unwrap_or_default();
        let key: Box<str> = if ns.is_empty() {
            name.to_string().into()
        } else {
            format!("{ns}/{name}").into()
        };
        let labels = meta
            .labels
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (Box::from(&*k), Box::from(&*v)))
            .collect();
        let uid = meta.uid.as_deref().map(Uid::of).unwrap_or_default();
        Ok((key, ns.len(), resource_version, uid, labels))
    }
}

/// Where a protobuf message's first field ends, when that field has the `tag` byte (a
/// length-delimited field 1 is `0x0a`).
fn first_field_end(msg: &[u8], tag: u8) -> Option<usize> {
    if msg.first() != Some(&tag) {
        return None;
    }
    let mut len: usize = 0;
    for (i, b) in msg.iter().enumerate().skip(1).take(10) {
        len |= usize::from(b & 0x7f) << (7 * (i - 1));
        if b & 0x80 == 0 {
            let end = i + 1 + len;
            return (end <= msg.len()).then_some(end);
        }
    }
    None
}

/// An object's `metadata.uid` in 16 bytes instead of a 36-byte string plus its pointer.
/// The apiserver's uids are UUIDs, kept exactly; any other non-empty uid is kept as a
/// 64-bit hash of its text (two different ones compare equal with probability 2^-64).
/// The all-zero value means "no uid". Two `u64`s rather than a `u128`, whose 16-byte
/// alignment would pad every cached object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Uid([u64; 2]);

impl Uid {
    pub fn of(text: &str) -> Self {
        if text.is_empty() {
            return Self::default();
        }
        if let Some(v) = parse_uuid(text) {
            return Self([(v >> 64) as u64, v as u64]);
        }
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut h);
        // The tag keeps a hashed uid from ever equalling the nil UUID, or "no uid".
        Self([u64::MAX, h.finish()])
    }

    pub fn is_known(&self) -> bool {
        *self != Self::default()
    }
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (hex, either case) as a number.
fn parse_uuid(text: &str) -> Option<u128> {
    let b = text.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut v: u128 = 0;
    for (i, &c) in b.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            continue;
        }
        v = (v << 4) | (c as char).to_digit(16)? as u128;
    }
    Some(v)
}

/// Finds the end of leading `"kind":"…",` / `"apiVersion":"…",` fields, the way the
/// apiserver's encoders write them (first, unescaped, no whitespace). Returns the offset
/// of the first byte after them, or 1 (just past `{`) when there are none. Anything
/// unusual stops the scan early, which only means fewer bytes are treated as TypeMeta.
fn type_meta_end(raw: &[u8]) -> usize {
    let mut pos = 1;
    if raw.first() != Some(&b'{') {
        return pos;
    }
    for _ in 0..2 {
        let rest = &raw[pos..];
        let key_len = if rest.starts_with(b"\"kind\":\"") {
            8
        } else if rest.starts_with(b"\"apiVersion\":\"") {
            14
        } else {
            break;
        };
        let value = &rest[key_len..];
        let Some(close) = value.iter().position(|&b| b == b'"' || b == b'\\') else {
            break;
        };
        if value[close] != b'"' || value.get(close + 1) != Some(&b',') {
            break;
        }
        pos += key_len + close + 2;
    }
    pos
}

#[derive(Deserialize)]
struct Header<'a> {
    #[serde(borrow)]
    metadata: Option<Meta<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    namespace: Option<Cow<'a, str>>,
    #[serde(borrow)]
    resource_version: Option<Cow<'a, str>>,
    #[serde(borrow)]
    uid: Option<Cow<'a, str>>,
    #[serde(borrow)]
    labels: Option<std::collections::BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const POD_FIELDS: &[(&str, &str)] = &[
        ("spec.nodeName", "spec.nodeName"),
        ("status.phase", "status.phase"),
        ("spec.hostNetwork", "spec.hostNetwork"),
    ];

    #[test]
    fn parses_header_and_keeps_bytes() {
        let raw = Bytes::from_static(
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"prod","resourceVersion":"42","labels":{"app":"web","tier":"fe"}},"spec":{"nodeName":"node-3"},"status":{"phase":"Running"}}"#,
        );
        let o = CachedObject::parse(raw.clone(), POD_FIELDS).unwrap();
        assert_eq!(o.raw, raw);
        assert_eq!(o.key.as_ref(), "prod/web-1");
        assert_eq!(o.namespace(), "prod");
        assert_eq!(o.name(), "web-1");
        assert_eq!(o.resource_version, 42);
        assert_eq!(o.label("app"), Some("web"));
        assert_eq!(o.label("missing"), None);
        assert_eq!(o.field("spec.nodeName"), Some("node-3"));
        assert_eq!(o.field("status.phase"), Some("Running"));
        assert_eq!(o.field("spec.hostNetwork"), Some("false"));
        assert_eq!(o.field("metadata.namespace"), Some("prod"));
    }

    /// The first watch frame of an object encodes its message into the frame; the message
    /// kept from it is `proto()`'s, and later frames are built from it, byte-identical.
    #[test]
    fn a_watch_frame_encodes_the_message_once_and_keeps_it() {
        let raw = Bytes::from_static(
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"web-1","namespace":"prod","resourceVersion":"42"},"spec":{"nodeName":"node-3"},"status":{"phase":"Running"}}"#,
        );
        let pod = crate::proto::lookup("", "v1", "Pod").unwrap();
        let want_msg = crate::proto::encode(pod, &raw).unwrap();
        let want = crate::proto::object_watch_frame("MODIFIED", "v1", "Pod", &want_msg);
        let o = CachedObject::parse(raw, POD_FIELDS).unwrap();
        assert!(!o.has_proto());
        let first = o.proto_watch_frame(pod, "MODIFIED", "v1", "Pod").unwrap();
        assert_eq!(first[..], want[..]);
        assert!(o.has_proto(), "the message is kept");
        let msg = o.proto(pod).unwrap();
        assert_eq!(msg[..], want_msg[..]);
        assert!(
            first.as_ptr_range().contains(&msg.as_ptr()),
            "the kept message is a slice of the first frame"
        );
        let again = o.proto_watch_frame(pod, "MODIFIED", "v1", "Pod").unwrap();
        assert_eq!(again, first);
        let bad = CachedObject::parse(
            Bytes::from_static(
                br#"{"metadata":{"name":"a","resourceVersion":"1"},"spec":{"new":1}}"#,
            ),
            &[],
        )
        .unwrap();
        assert_eq!(bad.proto_watch_frame(pod, "ADDED", "v1", "Pod"), None);
        assert_eq!(
            bad.proto(pod),
            None,
            "remembered as having no protobuf form"
        );
    }

    #[test]
    fn names_and_resource_versions_must_be_real() {
        let parse =
            |meta: &str| CachedObject::parse(Bytes::from(format!(r#"{{"metadata":{meta}}}"#)), &[]);
        assert!(matches!(
            parse(r#"{"name":"","resourceVersion":"1"}"#),
            Err(ObjectError::MissingName)
        ));
        // Go's ParseUint takes no sign.
        assert!(matches!(
            parse(r#"{"name":"a","resourceVersion":"+1"}"#),
            Err(ObjectError::BadResourceVersion(_))
        ));
        assert!(parse(r#"{"name":"a","resourceVersion":"1"}"#).is_ok());
    }

    #[test]
    fn type_meta_is_found_and_can_be_added_or_dropped() {
        let watch_form = Bytes::from_static(
            br#"{"kind":"Pod","apiVersion":"v1","metadata":{"name":"a","resourceVersion":"1"}}"#,
        );
        let list_form = Bytes::from_static(br#"{"metadata":{"name":"a","resourceVersion":"1"}}"#);
        let prefix = br#"{"kind":"Pod","apiVersion":"v1","#;
        for raw in [watch_form.clone(), list_form.clone()] {
            let o = CachedObject::parse(raw, &[]).unwrap();
            let mut with = Vec::new();
            o.write_with_type_meta(prefix, &mut with);
            assert_eq!(with, watch_form);
            let mut without = Vec::new();
            o.write_without_type_meta(&mut without);
            assert_eq!(without, list_form);
        }
        // Unstructured objects put apiVersion first; escaped values stop the scan.
        assert_eq!(
            type_meta_end(br#"{"apiVersion":"x/v1","kind":"W","metadata":{}}"#),
            32
        );
        assert_eq!(type_meta_end(br#"{"kind":"P\u0041","metadata":{}}"#), 1);
        assert_eq!(type_meta_end(b"{}"), 1);
    }

    #[test]
    fn uids_are_kept_compactly_and_exactly() {
        let parse = |uid: &str| {
            let raw =
                format!(r#"{{"metadata":{{"name":"a","resourceVersion":"1","uid":"{uid}"}}}}"#);
            CachedObject::parse(Bytes::from(raw), &[]).unwrap().uid
        };
        let a = parse("6f1c2a4e-9b3d-4c5e-8f7a-0123456789ab");
        assert_eq!(a, Uid([0x6f1c_2a4e_9b3d_4c5e, 0x8f7a_0123_4567_89ab]));
        assert_eq!(a, parse("6F1C2A4E-9B3D-4C5E-8F7A-0123456789AB"));
        assert_ne!(a, parse("6f1c2a4e-9b3d-4c5e-8f7a-0123456789ac"));
        assert!(a.is_known());
        // Not a UUID: hashed, still told apart, and never "no uid".
        let (x, y) = (parse("uid-x"), parse("uid-y"));
        assert!(x.is_known() && x != y && x == parse("uid-x"));
        assert!(!parse("").is_known());
        let none = CachedObject::parse(
            Bytes::from_static(br#"{"metadata":{"name":"a","resourceVersion":"1"}}"#),
            &[],
        )
        .unwrap();
        assert!(!none.uid.is_known());
        assert_eq!(none.with_resource_version(5).uid, none.uid);
        assert!(std::mem::align_of::<CachedObject>() <= 8);
    }

    #[test]
    fn cluster_scoped_key_is_the_name() {
        let raw = Bytes::from_static(br#"{"metadata":{"name":"node-1","resourceVersion":"7"}}"#);
        let o = CachedObject::parse(raw, &[]).unwrap();
        assert_eq!(o.key.as_ref(), "node-1");
        assert_eq!(o.namespace(), "");
        assert_eq!(o.name(), "node-1");
    }

    #[test]
    fn rejects_malformed_objects() {
        for (raw, want) in [
            (&b"{not json"[..], "not valid JSON"),
            (br#"{"kind":"Pod"}"#, "no metadata.name"),
            (
                br#"{"metadata":{"name":"x"}}"#,
                "no metadata.resourceVersion",
            ),
            (
                br#"{"metadata":{"name":"x","resourceVersion":"abc"}}"#,
                "not a number",
            ),
        ] {
            let err = CachedObject::parse(Bytes::from_static(raw), &[]).unwrap_err();
            assert!(
                err.to_string().contains(want),
                "{err} should contain {want}"
            );
        }
    }

    #[test]
    fn escaped_strings_are_unescaped() {
        let raw = Bytes::from_static(
            br#"{"metadata":{"name":"a","resourceVersion":"1","labels":{"k":"v\u0041"}}}"#,
        );
        let o = CachedObject::parse(raw, &[]).unwrap();
        assert_eq!(o.label("k"), Some("vA"));
    }
}

/// The representations an object may derive from its JSON, as reported in
/// `watchgate_cache_derived_bytes{representation}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Representation {
    /// A custom resource's `ObjectMeta` in Go field order (built-in types slice their JSON).
    MetadataJson = 0,
    /// The object's protobuf message.
    Protobuf = 1,
    /// `PartialObjectMetadata` in protobuf, when it is not a slice of the message.
    MetadataProtobuf = 2,
}

impl Representation {
    pub const ALL: [Representation; 3] = [
        Representation::MetadataJson,
        Representation::Protobuf,
        Representation::MetadataProtobuf,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Representation::MetadataJson => "metadata_json",
            Representation::Protobuf => "protobuf",
            Representation::MetadataProtobuf => "metadata_protobuf",
        }
    }
}

/// Bytes of derived representations alive in the process, by [`Representation`]: built
/// lazily, so they are outside the cache's byte budget (which must not change while an
/// object is stored), but never unreported. Added when a cell is filled, taken back when
/// its object is dropped.
static DERIVED_BYTES: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// The bytes [`DERIVED_BYTES`] holds, by representation.
pub fn derived_totals() -> [(Representation, usize); 3] {
    Representation::ALL.map(|r| (r, DERIVED_BYTES[r as usize].load(Ordering::Relaxed)))
}

fn owned_len(b: &Bytes, within: Option<&Bytes>) -> usize {
    match within {
        Some(w) if w.as_ptr_range().contains(&b.as_ptr()) => 0,
        _ => b.len(),
    }
}

/// A built representation, kept for the object's life: without its growth's spare
/// capacity, which for an encoder's doubling `Vec` held up to as much again (measured:
/// the heap grew 2.1× the protobuf bytes of 3,000 pods before, 1.0× after). (A message
/// first built for a watch event is instead a slice of that event's frame, which keeps
/// ~50 bytes of frame header and spare room with it: `proto_watch_frame`.)
fn exact(mut b: Vec<u8>) -> Bytes {
    b.shrink_to_fit();
    Bytes::from(b)
}

fn counted(r: Representation, b: Bytes, within: Option<&Bytes>) -> Bytes {
    DERIVED_BYTES[r as usize].fetch_add(owned_len(&b, within), Ordering::Relaxed);
    b
}

impl Drop for CachedObject {
    fn drop(&mut self) {
        for (r, n) in Representation::ALL.into_iter().zip(self.derived_parts()) {
            if n > 0 {
                DERIVED_BYTES[r as usize].fetch_sub(n, Ordering::Relaxed);
            }
        }
    }
}
