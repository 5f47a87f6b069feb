//! The bytes around messages: the `k8s\0` + `runtime.Unknown` envelope of every
//! protobuf response body, lists assembled from per-item bytes, and watch frames.
//!
//! Sources (k8s.io/apimachinery):
//! - `pkg/runtime/serializer/protobuf/protobuf.go`: `Serializer.doEncode` writes the
//!   4-byte prefix `k8s\0` then `runtime.Unknown{TypeMeta{APIVersion, Kind}, Raw:
//!   <object message>}` through `Unknown.NestedMarshalTo` (`pkg/runtime/types_proto.go`),
//!   which writes, in field order: `1: TypeMeta` (apiVersion and kind always, as value
//!   strings), `2: raw` (the object's own `Marshal`), `3: contentEncoding` and
//!   `4: contentType` — both always, empty: `1a 00 22 00` ends every envelope.
//! - the same file's `RawSerializer` writes a message without prefix or envelope, and
//!   `LengthDelimitedFramer` prefixes each frame with its length as a 4-byte big-endian
//!   integer. The codec factory (`serializer/codec_factory.go`) pairs the protobuf media
//!   type's stream (`;stream=watch`) with that raw serializer and framer.
//! - k8s.io/apiserver `pkg/endpoints/handlers/watch.go`: the watch encoder encodes the
//!   event's object with the *normal* serializer (so the object keeps its `k8s\0` +
//!   Unknown envelope), puts those bytes in `metav1.WatchEvent{Type, Object:
//!   RawExtension{Raw}}` and writes that with the stream (raw) serializer through the
//!   framer. One frame = `len(4, BE)` + `0a <type> 12 <RawExtension{0a <envelope>}>`.

use super::encode::{encode_value, with_scratch};
use super::json::{Doc, Val};
use super::schema::{lookup, MessageType};
use super::wire::{
    begin_len, end_len, put_bytes, put_tag, put_varint, varint_len, Reader, WireValue, WT_LEN,
    WT_VARINT,
};
use super::ProtoError;

/// The prefix of every protobuf body kube-apiserver writes (protobuf.go `protoEncodingPrefix`).
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// `application/vnd.kubernetes.protobuf`
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// `application/vnd.kubernetes.protobuf;stream=watch`
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

fn put_type_meta(out: &mut Vec<u8>, api_version: &str, kind: &str) {
    put_tag(out, 1, WT_LEN);
    put_varint(
        out,
        (1 + varint_len(api_version.len() as u64)
            + api_version.len()
            + 1
            + varint_len(kind.len() as u64)
            + kind.len()) as u64,
    );
    put_bytes(out, 1, api_version.as_bytes());
    put_bytes(out, 2, kind.as_bytes());
}

/// contentEncoding and contentType, both written empty by `NestedMarshalTo`.
const UNKNOWN_TAIL: [u8; 4] = [0x1a, 0x00, 0x22, 0x00];

/// `k8s\0` + `runtime.Unknown` around an object's message bytes: a get response body,
/// or the object of a watch event.
pub fn encode_unknown(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len() + api_version.len() + kind.len() + 20);
    out.extend_from_slice(&MAGIC);
    put_type_meta(&mut out, api_version, kind);
    put_bytes(&mut out, 2, raw);
    out.extend_from_slice(&UNKNOWN_TAIL);
    out
}

/// JSON object → `k8s\0` + Unknown in one pass (the message is written in place).
/// `apiVersion`/`kind` name the envelope; the kind's message is looked up from them.
pub fn encode_object(api_version: &str, kind: &str, json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let ty = type_of(api_version, kind)?;
    let doc = Doc::parse(json)?;
    let mut out = Vec::with_capacity(json.len() + 32);
    out.extend_from_slice(&MAGIC);
    put_type_meta(&mut out, api_version, kind);
    put_tag(&mut out, 2, WT_LEN);
    let pos = begin_len(&mut out);
    encode_value(&mut out, ty, &doc, &doc.root)?;
    end_len(&mut out, pos);
    out.extend_from_slice(&UNKNOWN_TAIL);
    Ok(out)
}

/// The message of `apiVersion` (`v1`, `apps/v1`) + `kind`.
pub fn type_of(api_version: &str, kind: &str) -> Result<MessageType, ProtoError> {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    lookup(group, version, kind)
        .ok_or_else(|| ProtoError::UnknownKind(format!("{api_version}, Kind={kind}")))
}

/// A parsed `runtime.Unknown` envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unknown<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
    pub content_encoding: &'a str,
    pub content_type: &'a str,
}

/// Parse `k8s\0` + Unknown (what `Serializer.Decode` accepts).
pub fn decode_unknown(body: &[u8]) -> Result<Unknown<'_>, ProtoError> {
    let rest = body
        .strip_prefix(&MAGIC[..])
        .ok_or(ProtoError::NotEnvelope)?;
    fn s(b: &[u8]) -> Result<&str, ProtoError> {
        std::str::from_utf8(b)
            .map_err(|_| ProtoError::InvalidValue("non-UTF-8 type metadata".into()))
    }
    let mut u = Unknown {
        api_version: "",
        kind: "",
        raw: &[],
        content_encoding: "",
        content_type: "",
    };
    let mut r = Reader::new(rest);
    while let Some((num, v)) = r.field()? {
        let WireValue::Len(b) = v else {
            return Err(ProtoError::WrongWireType {
                message: "io.k8s.apimachinery.pkg.runtime.Unknown",
                field: "?",
                wire_type: v.wire_type(),
            });
        };
        match num {
            1 => {
                let mut tm = Reader::new(b);
                while let Some((n, tv)) = tm.field()? {
                    match (n, tv) {
                        (1, WireValue::Len(x)) => u.api_version = s(x)?,
                        (2, WireValue::Len(x)) => u.kind = s(x)?,
                        _ => {}
                    }
                }
            }
            2 => u.raw = b,
            3 => u.content_encoding = s(b)?,
            4 => u.content_type = s(b)?,
            _ => {}
        }
    }
    Ok(u)
}

/// Envelope body → JSON (with `kind`/`apiVersion`), for kinds in the table.
pub fn decode_object(body: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let u = decode_unknown(body)?;
    let ty = type_of(u.api_version, u.kind)?;
    super::decode(ty, u.raw, Some((u.api_version, u.kind)))
}

/// `metav1.ListMeta` of a list response.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListMeta<'a> {
    pub resource_version: &'a str,
    pub continue_token: &'a str,
    pub remaining_item_count: Option<i64>,
}

impl ListMeta<'_> {
    /// The message bytes: selfLink, resourceVersion and continue are Go value strings
    /// (always written, selfLink empty), remainingItemCount a pointer.
    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(16 + self.resource_version.len() + self.continue_token.len());
        put_bytes(&mut out, 1, b"");
        put_bytes(&mut out, 2, self.resource_version.as_bytes());
        put_bytes(&mut out, 3, self.continue_token.as_bytes());
        if let Some(n) = self.remaining_item_count {
            put_tag(&mut out, 4, WT_VARINT);
            put_varint(&mut out, n as u64);
        }
        out
    }
}

/// The framing of a list response assembled from per-item message bytes:
/// `prefix`, then every item as `item_header(len)` + item bytes, then `suffix`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEnvelope {
    pub prefix: Vec<u8>,
    pub suffix: Vec<u8>,
    item_field: u32,
}

/// Bytes one item of `item_len` takes inside a list: tag + length varint + item.
pub fn item_frame_len(item_len: usize) -> usize {
    1 + varint_len(item_len as u64) + item_len
}

impl ListEnvelope {
    /// `list` is the list kind's message (`PodList`, `PartialObjectMetadataList`, ...);
    /// `items_framed_len` the sum of `item_frame_len` over the items that will follow.
    /// Lists put `metadata` and `items` in field-number order, so meta.k8s.io/v1beta1
    /// `PartialObjectMetadataList` (items = 1, metadata = 2) ends with its ListMeta.
    pub fn new(
        list: MessageType,
        api_version: &str,
        kind: &str,
        meta: &ListMeta<'_>,
        items_framed_len: usize,
    ) -> Result<ListEnvelope, ProtoError> {
        let def = list.def();
        let num = |name: &str| {
            def.fields
                .iter()
                .find(|f| f.json == name)
                .map(|f| f.num)
                .ok_or_else(|| ProtoError::InvalidValue(format!("{} is not a list", def.name)))
        };
        let (meta_num, items_num) = (num("metadata")?, num("items")?);
        let meta_bytes = meta.encode();
        let mut meta_field = Vec::with_capacity(meta_bytes.len() + 3);
        put_bytes(&mut meta_field, meta_num, &meta_bytes);
        let body_len = meta_field.len() + items_framed_len;

        let mut prefix = Vec::with_capacity(64 + meta_field.len());
        prefix.extend_from_slice(&MAGIC);
        put_type_meta(&mut prefix, api_version, kind);
        put_tag(&mut prefix, 2, WT_LEN);
        put_varint(&mut prefix, body_len as u64);
        let mut suffix = Vec::with_capacity(meta_field.len() + 4);
        if meta_num < items_num {
            prefix.extend_from_slice(&meta_field);
        } else {
            suffix.extend_from_slice(&meta_field);
        }
        suffix.extend_from_slice(&UNKNOWN_TAIL);
        Ok(ListEnvelope {
            prefix,
            suffix,
            item_field: items_num,
        })
    }

    /// The tag and length that precede an item's bytes (at most 11 bytes).
    pub fn item_header(&self, item_len: usize) -> Vec<u8> {
        let mut h = Vec::with_capacity(11);
        put_tag(&mut h, self.item_field, WT_LEN);
        put_varint(&mut h, item_len as u64);
        h
    }

    /// Append one item with its header.
    pub fn write_item(&self, out: &mut Vec<u8>, item: &[u8]) {
        put_bytes(out, self.item_field, item);
    }
}

/// The `metav1.WatchEvent` message (what the stream serializer writes, unframed) for an
/// event whose object is already enveloped (`encode_unknown` / `encode_object`).
pub fn watch_event(event_type: &str, object_envelope: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object_envelope.len() + event_type.len() + 16);
    write_watch_event(&mut out, event_type, object_envelope);
    out
}

fn write_watch_event(out: &mut Vec<u8>, event_type: &str, object_envelope: &[u8]) {
    put_bytes(out, 1, event_type.as_bytes());
    // Object is a value runtime.RawExtension whose Raw is set: {1: raw}.
    put_tag(out, 2, WT_LEN);
    put_varint(out, item_frame_len(object_envelope.len()) as u64);
    put_bytes(out, 1, object_envelope);
}

/// One `;stream=watch` frame: 4-byte big-endian length, then the WatchEvent.
pub fn watch_frame(event_type: &str, object_envelope: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(object_envelope.len() + event_type.len() + 20);
    out.extend_from_slice(&[0; 4]);
    write_watch_event(&mut out, event_type, object_envelope);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    out
}

/// The frame of an event whose object is `message` (a bare message of `apiVersion`
/// `api_version`, `kind`): the bytes of `watch_frame(event_type, &encode_unknown(
/// api_version, kind, message))`, written at once rather than through an envelope that
/// is copied again (a kubelet's event frame is built for its one delivery).
pub fn object_watch_frame(
    event_type: &str,
    api_version: &str,
    kind: &str,
    message: &[u8],
) -> Vec<u8> {
    object_watch_frame_at(event_type, api_version, kind, message).0
}

/// [`object_watch_frame`], and where `message` lies in the frame: the cache keeps the
/// object's message as a slice of the first frame it was encoded for
/// ([`encode_watch_frame`]).
fn object_watch_frame_at(
    event_type: &str,
    api_version: &str,
    kind: &str,
    message: &[u8],
) -> (Vec<u8>, std::ops::Range<usize>) {
    let type_meta = 1
        + varint_len(api_version.len() as u64)
        + api_version.len()
        + 1
        + varint_len(kind.len() as u64)
        + kind.len();
    let envelope = MAGIC.len()
        + 1
        + varint_len(type_meta as u64)
        + type_meta
        + item_frame_len(message.len())
        + UNKNOWN_TAIL.len();
    let mut out = Vec::with_capacity(envelope + event_type.len() + 24);
    out.extend_from_slice(&[0; 4]);
    put_bytes(&mut out, 1, event_type.as_bytes());
    put_tag(&mut out, 2, WT_LEN);
    put_varint(&mut out, item_frame_len(envelope) as u64);
    put_tag(&mut out, 1, WT_LEN);
    put_varint(&mut out, envelope as u64);
    out.extend_from_slice(&MAGIC);
    put_type_meta(&mut out, api_version, kind);
    put_tag(&mut out, 2, WT_LEN);
    put_varint(&mut out, message.len() as u64);
    let at = out.len();
    out.extend_from_slice(message);
    out.extend_from_slice(&UNKNOWN_TAIL);
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
    (out, at..at + message.len())
}

/// The watch frame of an event whose object is `json`, encoded as message `ty` of
/// `api_version`/`kind` (the bytes of [`object_watch_frame`] of [`super::encode`]'s
/// message), and where that message lies in the frame.
///
/// Here, above the encoder, rather than in it: the envelope builds on the encoder, not
/// the other way round.
///
/// Why: a kubelet's pod event reaches one watcher, so the message is encoded for that one
/// frame. Writing the frame straight from the scratch buffer costs one allocation and one
/// copy of the message instead of two of each (an exact-size message, then the frame);
/// the cache keeps the message as a slice of this frame.
pub fn encode_watch_frame(
    ty: MessageType,
    json: &[u8],
    event_type: &str,
    api_version: &str,
    kind: &str,
) -> Result<(Vec<u8>, std::ops::Range<usize>), ProtoError> {
    with_scratch(ty, json, |msg| {
        object_watch_frame_at(event_type, api_version, kind, msg)
    })
}

/// A complete frame's payload (a WatchEvent) and the bytes after it.
pub type Frame<'a> = (&'a [u8], &'a [u8]);

/// Split the first frame off a `;stream=watch` byte stream: `Ok(None)` until the frame
/// is complete; `Err` when its length exceeds `max_frame`.
pub fn split_frame(buf: &[u8], max_frame: usize) -> Result<Option<Frame<'_>>, ProtoError> {
    let Some(h) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes(h.try_into().expect("4 bytes")) as usize;
    if len > max_frame {
        return Err(ProtoError::InvalidValue(format!(
            "watch frame of {len} bytes exceeds {max_frame}"
        )));
    }
    Ok(buf.get(4..4 + len).map(|frame| (frame, &buf[4 + len..])))
}

/// A decoded WatchEvent: its type and the object's envelope bytes.
pub fn parse_watch_event(event: &[u8]) -> Result<(&str, &[u8]), ProtoError> {
    let mut ty = "";
    let mut raw: &[u8] = &[];
    let mut r = Reader::new(event);
    while let Some((num, v)) = r.field()? {
        match (num, v) {
            (1, WireValue::Len(b)) => {
                ty = std::str::from_utf8(b)
                    .map_err(|_| ProtoError::InvalidValue("event type".into()))?
            }
            (2, WireValue::Len(b)) => {
                let mut re = Reader::new(b);
                while let Some((n, rv)) = re.field()? {
                    if let (1, WireValue::Len(x)) = (n, rv) {
                        raw = x;
                    }
                }
            }
            (1 | 2, _) => {
                return Err(ProtoError::WrongWireType {
                    message: "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
                    field: if num == 1 { "type" } else { "object" },
                    wire_type: v.wire_type(),
                })
            }
            _ => {}
        }
    }
    Ok((ty, raw))
}

/// A `metav1.Status` JSON (as `crate::status` writes it) → `k8s\0` + Unknown with
/// `apiVersion: v1, kind: Status`: error responses and the object of ERROR events.
pub fn encode_status(status_json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    encode_object("v1", "Status", status_json)
}

/// The `metav1.PartialObjectMetadata` message of an object: its `metadata` as
/// ObjectMeta (field 1), everything else dropped — what the apiserver sends for
/// `as=PartialObjectMetadata` (meta.k8s.io v1 and v1beta1 share the message). Works for
/// any object with standard metadata, custom resources included.
pub fn partial_object_metadata(object_json: &[u8]) -> Result<Vec<u8>, ProtoError> {
    let doc = Doc::parse(object_json)?;
    let members = doc
        .members(&doc.root)
        .ok_or_else(|| ProtoError::InvalidValue("object JSON is not an object".into()))?;
    let meta = members.iter().rev().find(|v| v.key == "metadata");
    let object_meta =
        MessageType::by_name("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta").expect("in table");
    let mut out = Vec::with_capacity(object_json.len() / 2);
    put_tag(&mut out, 1, WT_LEN);
    let pos = begin_len(&mut out);
    match meta {
        Some(m) if !matches!(m.v, Val::Null) => encode_value(&mut out, object_meta, &doc, m)?,
        _ => {
            let empty = Doc::parse(b"{}")?;
            encode_value(&mut out, object_meta, &empty, &empty.root)?
        }
    }
    end_len(&mut out, pos);
    Ok(out)
}
