//! Reading one protobuf watch event (`application/vnd.kubernetes.protobuf;stream=watch`)
//! for the checker: the frame's WatchEvent (`proto::parse_watch_event`), the object's
//! `k8s\0` envelope (`proto::decode_unknown`), and from the object's message only field 1,
//! `ObjectMeta` — the same field in a Pod, a PartialObjectMetadata and a Status — read
//! with a minimal wire walker: resourceVersion (6) and the writer's stamp in annotations
//! (12). An ERROR event's Status carries its code in field 6. Nothing else is decoded, for
//! the reason `scan` does not build JSON trees (docs/benchmarks.md).

use super::scan::{EventInfo, Kind, STAMP_ANNOTATION};
use crate::proto;

/// Why a frame could not be read (counted as "watch: undecodable event").
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoScanError {
    #[error("watch event: {0}")]
    Proto(String),
    #[error("malformed protobuf field")]
    Wire,
}

impl From<proto::ProtoError> for ProtoScanError {
    fn from(e: proto::ProtoError) -> Self {
        Self::Proto(e.to_string())
    }
}

/// One field of a protobuf message: number and value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Other,
}

fn varint(b: &mut &[u8]) -> Result<u64, ProtoScanError> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&byte, rest) = b.split_first().ok_or(ProtoScanError::Wire)?;
        *b = rest;
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(ProtoScanError::Wire)
}

/// The fields of `msg`, in order; stops with an error at the first malformed one.
fn fields(mut msg: &[u8]) -> impl Iterator<Item = Result<(u64, Field<'_>), ProtoScanError>> {
    std::iter::from_fn(move || {
        if msg.is_empty() {
            return None;
        }
        let r = (|| {
            let key = varint(&mut msg)?;
            let f = match key & 7 {
                0 => Field::Varint(varint(&mut msg)?),
                1 => {
                    msg = msg.get(8..).ok_or(ProtoScanError::Wire)?;
                    Field::Other
                }
                2 => {
                    let len =
                        usize::try_from(varint(&mut msg)?).map_err(|_| ProtoScanError::Wire)?;
                    let (b, rest) = (msg.get(..len).ok_or(ProtoScanError::Wire)?, &msg[len..]);
                    msg = rest;
                    Field::Bytes(b)
                }
                5 => {
                    msg = msg.get(4..).ok_or(ProtoScanError::Wire)?;
                    Field::Other
                }
                _ => return Err(ProtoScanError::Wire),
            };
            Ok((key >> 3, f))
        })();
        if r.is_err() {
            msg = &[];
        }
        Some(r)
    })
}

/// The first length-delimited field `num` of `msg`.
fn bytes_field(msg: &[u8], num: u64) -> Result<Option<&[u8]>, ProtoScanError> {
    for f in fields(msg) {
        if let (n, Field::Bytes(b)) = f? {
            if n == num {
                return Ok(Some(b));
            }
        }
    }
    Ok(None)
}

fn kind_of(t: &str) -> Kind {
    match t {
        "ADDED" => Kind::Added,
        "MODIFIED" => Kind::Modified,
        "DELETED" => Kind::Deleted,
        "BOOKMARK" => Kind::Bookmark,
        "ERROR" => Kind::Error,
        _ => Kind::Other,
    }
}

/// Reads one WatchEvent (a frame's payload, without its 4-byte length).
pub fn scan_proto(event: &[u8]) -> Result<EventInfo, ProtoScanError> {
    let (ty, raw) = proto::parse_watch_event(event)?;
    let kind = kind_of(ty);
    let object = proto::decode_unknown(raw)?.raw;
    if kind == Kind::Error {
        let mut code = None;
        for f in fields(object) {
            if let (6, Field::Varint(c)) = f? {
                code = u16::try_from(c).ok();
            }
        }
        return Ok(EventInfo {
            kind,
            rv: 0,
            stamp: None,
            code,
        });
    }
    let mut rv = 0;
    let mut stamp = None;
    if let Some(meta) = bytes_field(object, 1)? {
        for f in fields(meta) {
            match f? {
                (6, Field::Bytes(b)) => {
                    rv = std::str::from_utf8(b)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0)
                }
                (12, Field::Bytes(entry)) => {
                    let key = bytes_field(entry, 1)?.unwrap_or_default();
                    if key == STAMP_ANNOTATION.as_bytes() {
                        stamp = bytes_field(entry, 2)?.and_then(super::scan::parse_stamp);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(EventInfo {
        kind,
        rv,
        stamp,
        code: None,
    })
}

/// What a list needs from a protobuf list response (a `k8s\0` envelope of a PodList,
/// PartialObjectMetadataList, ...): ListMeta (field 1: resourceVersion 2, continue 3) and
/// the number of items (field 2, repeated).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListHead {
    pub resource_version: Option<u64>,
    pub continue_token: Option<String>,
    pub items: u64,
}

pub fn scan_proto_list(body: &[u8]) -> Result<ListHead, ProtoScanError> {
    let list = proto::decode_unknown(body)?.raw;
    let mut head = ListHead {
        resource_version: None,
        continue_token: None,
        items: 0,
    };
    for f in fields(list) {
        match f? {
            (1, Field::Bytes(meta)) => {
                for m in fields(meta) {
                    match m? {
                        (2, Field::Bytes(rv)) => {
                            head.resource_version =
                                std::str::from_utf8(rv).ok().and_then(|s| s.parse().ok())
                        }
                        (3, Field::Bytes(c)) if !c.is_empty() => {
                            head.continue_token = Some(String::from_utf8_lossy(c).into_owned())
                        }
                        _ => {}
                    }
                }
            }
            (2, Field::Bytes(_)) => head.items += 1,
            _ => {}
        }
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod_event(ty: &str, json: &str) -> Vec<u8> {
        let env = proto::encode_object("v1", "Pod", json.as_bytes()).expect("a pod");
        let frame = proto::watch_frame(ty, &env);
        frame[4..].to_vec()
    }

    #[test]
    fn reads_a_pod_event_and_its_stamp() {
        let e = scan_proto(&pod_event(
            "MODIFIED",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"n","resourceVersion":"1234","annotations":{"a":"b","watchgate.io/load-written":"r1/1700000000123456789"}}}"#,
        ))
        .unwrap();
        assert_eq!(e.kind, Kind::Modified);
        assert_eq!(e.rv, 1234);
        assert_eq!(e.stamp, Some(("r1".into(), 1_700_000_000_123_456_789)));
    }

    #[test]
    fn reads_errors_and_bookmarks() {
        let status = proto::encode_status(
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old","reason":"Expired","code":410}"#,
        )
        .unwrap();
        let frame = proto::watch_frame("ERROR", &status);
        let e = scan_proto(&frame[4..]).unwrap();
        assert_eq!((e.kind, e.code), (Kind::Error, Some(410)));
        let e = scan_proto(&pod_event(
            "BOOKMARK",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"resourceVersion":"77"}}"#,
        ))
        .unwrap();
        assert_eq!((e.kind, e.rv, e.stamp), (Kind::Bookmark, 77, None));
    }

    #[test]
    fn reads_a_list_head() {
        let meta = proto::ListMeta {
            resource_version: "42",
            continue_token: "abc",
            remaining_item_count: None,
        }
        .encode();
        // PodList{metadata: 1, items: 2 (two empty pods)} in its envelope.
        let mut list = vec![0x0a, meta.len() as u8];
        list.extend_from_slice(&meta);
        list.extend_from_slice(&[0x12, 0x00, 0x12, 0x00]);
        let body = proto::encode_unknown("v1", "PodList", &list);
        let h = scan_proto_list(&body).unwrap();
        assert_eq!(h.resource_version, Some(42));
        assert_eq!(h.continue_token.as_deref(), Some("abc"));
        assert_eq!(h.items, 2);
        assert!(scan_proto_list(b"{}").is_err());
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(scan_proto(b"\xff\xff\xff").is_err());
        assert!(scan_proto(&[0x12, 0x05, 0x0a]).is_err());
    }
}
