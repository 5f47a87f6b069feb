//! How one watcher's events are written: the representation its Accept header negotiated
//! (`serve::watch`), applied to the history's events, the initial state and bookmarks.
//!
//! - JSON: the event's shared JSON lines ([`Event::line`]); synthetic ADDED events share
//!   the cached object's bytes.
//! - `PartialObjectMetadata` (client-go's metadata informers; k8s.io/apiserver
//!   `handlers/watch.go` transforms every event's object, bookmarks included, with
//!   `asPartialObjectMetadata`): `{"type":…,"object":{"kind":"PartialObjectMetadata",
//!   "apiVersion":"meta.k8s.io/v1","metadata":…}}`. An event's line is built once per
//!   version and delivery and shared by every such watcher ([`Event::extra_line`]); the
//!   metadata is the object's own bytes (`CachedObject::metadata_json`).
//! - Table (`kubectl get -w`): each event's object becomes a one-row Table, and only the
//!   first event a watcher gets carries `columnDefinitions` (watch.go sets
//!   `TableOptions.NoHeaders` after the first transform, bookmarks included). Tables are
//!   rendered per watcher and event, at the time of the event, as the apiserver's
//!   transform does; they are for people watching, few and slow.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::event::{Delivery, EncodedBytes, Encoder, Event, ExtraLine};
use crate::model::meta;
use crate::model::object::CachedObject;
use crate::model::proto_form::ProtoForm;
use crate::negotiate::MetaVersion;
use crate::proto::{self, MessageType};
use crate::table::{Convertor, TableOptions};

/// The representation of one watch's events.
#[derive(Debug)]
pub enum WatchEncoding {
    Json,
    /// `meta.k8s.io` PartialObjectMetadata; `unstructured` for custom resources (their
    /// ObjectMeta is rebuilt in Go order).
    Metadata {
        version: MetaVersion,
        unstructured: bool,
    },
    Table(TableWatch),
    /// The object in protobuf: `;stream=watch` frames whose object is the full envelope.
    Protobuf(ProtoWatch),
    /// `PartialObjectMetadata` in protobuf frames.
    MetadataProtobuf {
        version: MetaVersion,
        form: ProtoWatch,
    },
}

/// See [`WatchEncoding::bookmark_shape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BookmarkShape {
    Json,
    Metadata(MetaVersion),
    Protobuf,
    MetadataProtobuf(MetaVersion),
}

/// What a protobuf watch needs: the type's message (if it has one; `PartialObjectMetadata`
/// works without), its apiVersion and kind for envelopes, and the type's [`ProtoForm`] to
/// mark when an object turns out not to be encodable.
#[derive(Debug)]
pub struct ProtoWatch {
    pub ty: Option<MessageType>,
    pub api_version: String,
    pub kind: String,
    pub form: Arc<ProtoForm>,
    pub group: String,
}

impl ProtoWatch {
    /// The frame of `obj` in this watch's representation (`None`: it has no protobuf
    /// form).
    fn object_frame(
        &self,
        event_type: &str,
        obj: &CachedObject,
        metadata: Option<MetaVersion>,
    ) -> Option<Bytes> {
        match metadata {
            None => obj.proto_watch_frame(self.ty?, event_type, &self.api_version, &self.kind),
            Some(v) => {
                let msg = obj.metadata_proto(self.ty)?;
                Some(Bytes::from(proto::object_watch_frame(
                    event_type,
                    v.api_version(),
                    "PartialObjectMetadata",
                    &msg,
                )))
            }
        }
    }

    /// The frame of one event; an object with no protobuf form marks the type (its next
    /// protobuf requests are forwarded) and becomes an ERROR event, which ends the client's
    /// watch: kube-apiserver ends a watch whose object fails to encode, and the client's
    /// next watch is then the upstream's.
    fn frame(&self, event_type: &str, obj: &CachedObject, metadata: Option<MetaVersion>) -> Bytes {
        match self.object_frame(event_type, obj, metadata) {
            Some(frame) => frame,
            None => {
                self.form.mark_broken(&self.group);
                let status = crate::status::Status::internal(format!(
                    "unable to encode watch object {}: a field newer than watchgate's protobuf schema",
                    obj.key
                ));
                proto_status_frame(&status)
            }
        }
    }

    fn bookmark(&self, obj: &Value, metadata: Option<MetaVersion>) -> Bytes {
        let json = serde_json::to_vec(obj).expect("value serialises");
        let env = match metadata {
            None => proto::encode_object(&self.api_version, &self.kind, &json),
            Some(v) => proto::partial_object_metadata(&json)
                .map(|m| proto::encode_unknown(v.api_version(), "PartialObjectMetadata", &m)),
        };
        match env {
            Ok(env) => Bytes::from(proto::watch_frame("BOOKMARK", &env)),
            Err(e) => proto_status_frame(&crate::status::Status::internal(e)),
        }
    }
}

/// An ERROR event carrying `status`, in protobuf.
pub fn proto_status_frame(status: &crate::status::Status) -> Bytes {
    let json = serde_json::to_vec(&status.to_value()).expect("value serialises");
    let env = proto::encode_status(&json).unwrap_or_default();
    Bytes::from(proto::watch_frame("ERROR", &env))
}

/// A Table watch's convertor and options, and whether its first Table (the one with the
/// column definitions) has been written.
#[derive(Debug)]
pub struct TableWatch {
    convertor: Convertor,
    opts: TableOptions,
    headers_sent: AtomicBool,
}

impl TableWatch {
    pub fn new(convertor: Convertor, opts: TableOptions) -> Self {
        Self {
            convertor,
            opts,
            headers_sent: AtomicBool::new(false),
        }
    }

    fn table(&self, obj: &Value) -> Value {
        let mut opts = self.opts;
        // Only one thread writes a watcher's events at a time (dispatch under the hub's
        // lock, or the body): the swap only needs to be atomic to be shared.
        opts.no_headers = self.headers_sent.swap(true, Ordering::AcqRel);
        self.convertor
            .object_table(obj, &opts, jiff::Timestamp::now())
    }
}

impl WatchEncoding {
    /// The line of one history event for a watcher whose selector gave `d`.
    pub fn line(&self, ev: &Event, d: Delivery, enc: &Encoder, encoded: &EncodedBytes) -> Bytes {
        match self {
            WatchEncoding::Json => ev.line(d, enc, encoded),
            WatchEncoding::Metadata {
                version,
                unstructured,
            } => ev.extra_line(ExtraLine::Metadata(*version), d, encoded, |obj| {
                metadata_line(d.event_type(), obj, *version, *unstructured)
            }),
            WatchEncoding::Table(t) => {
                let obj = ev.delivered_object(d);
                table_line(d.event_type(), enc, &obj, t)
            }
            WatchEncoding::Protobuf(p) => ev.extra_line(ExtraLine::Protobuf, d, encoded, |obj| {
                p.frame(d.event_type(), obj, None)
            }),
            WatchEncoding::MetadataProtobuf { version, form } => {
                ev.extra_line(ExtraLine::MetadataProtobuf(*version), d, encoded, |obj| {
                    form.frame(d.event_type(), obj, Some(*version))
                })
            }
        }
    }

    /// The synthetic ADDED event of one object of a watch's initial state, as frames.
    pub fn added(&self, enc: &Encoder, obj: &CachedObject) -> AddedFrames {
        match self {
            WatchEncoding::Json => AddedFrames::Shared(enc.added_frames(obj)),
            WatchEncoding::Metadata {
                version,
                unstructured,
            } => {
                let m = obj.metadata_json(*unstructured).unwrap_or_default();
                AddedFrames::Shared([
                    Bytes::from_static(metadata_added_head(*version)),
                    m,
                    Bytes::from_static(b"}}\n"),
                ])
            }
            WatchEncoding::Table(t) => AddedFrames::One(table_line("ADDED", enc, obj, t)),
            WatchEncoding::Protobuf(p) => AddedFrames::One(p.frame("ADDED", obj, None)),
            WatchEncoding::MetadataProtobuf { version, form } => {
                AddedFrames::One(form.frame("ADDED", obj, Some(*version)))
            }
        }
    }

    /// What decides this watch's bookmark bytes besides the RV: watches of one hub with
    /// the same shape get the same bytes, so a tick encodes each bookmark once per shape
    /// (`Hub::send_due_bookmarks`). `None` for Tables, which are rendered per watcher.
    pub fn bookmark_shape(&self) -> Option<BookmarkShape> {
        match self {
            WatchEncoding::Json => Some(BookmarkShape::Json),
            WatchEncoding::Metadata { version, .. } => Some(BookmarkShape::Metadata(*version)),
            WatchEncoding::Table(_) => None,
            WatchEncoding::Protobuf(_) => Some(BookmarkShape::Protobuf),
            WatchEncoding::MetadataProtobuf { version, .. } => {
                Some(BookmarkShape::MetadataProtobuf(*version))
            }
        }
    }

    /// A BOOKMARK event at `rv`.
    pub fn bookmark(&self, enc: &Encoder, rv: u64, initial_events_end: bool) -> Bytes {
        match self {
            WatchEncoding::Json => enc.bookmark_line(rv, initial_events_end),
            WatchEncoding::Metadata { version, .. } => {
                let obj = enc.bookmark_object(rv, initial_events_end);
                let mut out = Vec::with_capacity(160);
                out.extend_from_slice(b"{\"type\":\"BOOKMARK\",\"object\":");
                out.extend_from_slice(meta::partial_head(*version));
                serde_json::to_writer(&mut out, &obj["metadata"]).expect("value serialises");
                out.extend_from_slice(b"}}\n");
                Bytes::from(out)
            }
            WatchEncoding::Table(t) => {
                let obj = enc.bookmark_object(rv, initial_events_end);
                value_event("BOOKMARK", &t.table(&obj))
            }
            WatchEncoding::Protobuf(p) => {
                p.bookmark(&enc.bookmark_object(rv, initial_events_end), None)
            }
            WatchEncoding::MetadataProtobuf { version, form } => {
                form.bookmark(&enc.bookmark_object(rv, initial_events_end), Some(*version))
            }
        }
    }

    /// An ERROR event carrying `status`, in this watch's encoding.
    pub fn error(&self, status: &crate::status::Status) -> Bytes {
        match self {
            WatchEncoding::Protobuf(_) | WatchEncoding::MetadataProtobuf { .. } => {
                proto_status_frame(status)
            }
            _ => value_event("ERROR", &status.to_value()),
        }
    }

    /// The response's Content-Type.
    pub fn content_type(&self) -> &'static str {
        match self {
            WatchEncoding::Protobuf(_) | WatchEncoding::MetadataProtobuf { .. } => {
                proto::WATCH_CONTENT_TYPE
            }
            _ => "application/json",
        }
    }
}

/// An ADDED event's frames: shared pieces where the encoding allows it.
pub enum AddedFrames {
    Shared([Bytes; 3]),
    One(Bytes),
}

fn metadata_added_head(version: MetaVersion) -> &'static [u8] {
    match version {
        MetaVersion::V1 => {
            br#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":"#
        }
        MetaVersion::V1beta1 => {
            br#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1beta1","metadata":"#
        }
    }
}

fn metadata_line(
    event_type: &str,
    obj: &CachedObject,
    version: MetaVersion,
    unstructured: bool,
) -> Bytes {
    let m = obj.metadata_json(unstructured).unwrap_or_default();
    let mut out = Vec::with_capacity(m.len() + 96);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    out.extend_from_slice(meta::partial_head(version));
    out.extend_from_slice(&m);
    out.extend_from_slice(b"}}\n");
    Bytes::from(out)
}

fn table_line(event_type: &str, enc: &Encoder, obj: &CachedObject, t: &TableWatch) -> Bytes {
    let mut raw = Vec::with_capacity(obj.raw.len() + 48);
    obj.write_with_type_meta(enc.type_prefix(), &mut raw);
    let value: Value = serde_json::from_slice(&raw).unwrap_or_default();
    value_event(event_type, &t.table(&value))
}

fn value_event(event_type: &str, object: &Value) -> Bytes {
    super::event::value_line(event_type, object)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::event::Change;

    fn obj(rv: u64) -> Arc<CachedObject> {
        let raw = format!(
            r#"{{"kind":"Pod","apiVersion":"v1","metadata":{{"name":"p","namespace":"ns","resourceVersion":"{rv}"}},"spec":{{}}}}"#
        );
        Arc::new(CachedObject::parse(Bytes::from(raw), &[]).unwrap())
    }

    #[test]
    fn metadata_lines_are_built_once_and_shared() {
        let enc = Encoder::new("Pod", "v1");
        let counted = EncodedBytes::default();
        let ev = Event::new(0, 5, Change::Upsert, obj(5), None);
        let m = WatchEncoding::Metadata {
            version: MetaVersion::V1,
            unstructured: false,
        };
        let a = m.line(&ev, Delivery::Added, &enc, &counted);
        assert_eq!(
            &a[..],
            br#"{"type":"ADDED","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"p","namespace":"ns","resourceVersion":"5"}}}
"#
        );
        let b = m.line(&ev, Delivery::Added, &enc, &counted);
        assert_eq!(a.as_ptr(), b.as_ptr(), "shared, not rebuilt");
        assert_eq!(counted.get(), a.len(), "counted in the history's encodings");
        // The synthetic ADDED of the initial state has the same bytes.
        let AddedFrames::Shared(frames) = m.added(&enc, &obj(5)) else {
            panic!("metadata frames share the object's bytes");
        };
        assert_eq!(frames.concat(), a.to_vec());
        assert_eq!(
            &m.bookmark(&enc, 9, true)[..],
            br#"{"type":"BOOKMARK","object":{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"resourceVersion":"9","annotations":{"k8s.io/initial-events-end":"true"}}}}
"#
        );
    }

    #[test]
    fn only_the_first_table_has_column_definitions() {
        let enc = Encoder::new("Pod", "v1");
        let t = WatchEncoding::Table(TableWatch::new(
            Convertor::builtin("", "Pod").unwrap(),
            TableOptions::new(MetaVersion::V1, None).unwrap(),
        ));
        let ev = Event::new(0, 5, Change::Upsert, obj(5), None);
        let first: Value =
            serde_json::from_slice(&t.line(&ev, Delivery::Added, &enc, &Default::default()))
                .unwrap();
        assert_eq!(first["object"]["kind"], "Table");
        assert!(first["object"]["columnDefinitions"].is_array());
        let second: Value = serde_json::from_slice(&t.bookmark(&enc, 6, false)).unwrap();
        assert_eq!(second["type"], "BOOKMARK");
        assert!(second["object"]["columnDefinitions"].is_null());
    }
}
