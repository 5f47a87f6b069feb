//! Parsing the upstream's watch stream: newline-delimited JSON events, split from body
//! frames that need not align with lines ([`LineSplitter`]), each decoded into what the
//! reflector does with it ([`decode_event`]). Both are pure, so that every input an
//! upstream can send is property-tested (tests/bad_input_properties.rs).

use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use super::object::{CachedObject, ObjectError};

/// The longest single event accepted. kube-apiserver limits objects to about 1.5 MiB in
/// etcd; anything far beyond that is a broken stream, and the bound keeps memory bounded.
pub const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// Splits a byte stream into lines, holding at most one partial line.
#[derive(Default)]
pub struct LineSplitter {
    buf: BytesMut,
    /// How much of `buf` is known to hold no newline: a long line arriving in many small
    /// frames is scanned once, not once per frame.
    scanned: usize,
}

#[derive(Debug, thiserror::Error)]
#[error("watch event exceeds {MAX_EVENT_BYTES} bytes")]
pub struct EventTooLarge;

impl LineSplitter {
    /// Feeds one frame and returns the complete lines it finished (without `\n`).
    pub fn push(&mut self, frame: Bytes) -> Result<Vec<Bytes>, EventTooLarge> {
        self.buf.extend_from_slice(&frame);
        let mut lines = Vec::new();
        while let Some(at) = memchr::memchr(b'\n', &self.buf[self.scanned..]) {
            let line = self.buf.split_to(self.scanned + at).freeze();
            self.buf.advance(1);
            self.scanned = 0;
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line);
            }
        }
        self.scanned = self.buf.len();
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(EventTooLarge);
        }
        Ok(lines)
    }
}

/// One upstream watch event, borrowed from its line.
#[derive(Deserialize)]
pub struct RawEvent<'a> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    #[serde(borrow)]
    pub object: &'a RawValue,
}

/// The fields of a watch ERROR's Status the reflector acts on.
#[derive(Deserialize, Debug)]
pub struct ErrorStatus {
    #[serde(default)]
    pub code: u16,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

/// A BOOKMARK's object: only `metadata.resourceVersion` matters.
#[derive(Deserialize)]
pub struct Bookmark<'a> {
    #[serde(borrow)]
    pub metadata: BookmarkMeta<'a>,
}

#[derive(Deserialize)]
pub struct BookmarkMeta<'a> {
    #[serde(rename = "resourceVersion", borrow)]
    pub resource_version: std::borrow::Cow<'a, str>,
}

/// What one watch event asks of the cache.
#[derive(Debug)]
pub enum Decoded {
    /// ADDED or MODIFIED: the object's new state.
    Upsert(CachedObject),
    /// DELETED: the object's last state.
    Delete(CachedObject),
    /// BOOKMARK: the upstream has reached this resourceVersion.
    Progress(u64),
    /// An ERROR event saying the resourceVersion is gone (410 Expired or Gone): relist.
    Expired(String),
    /// Any other ERROR event: the watch failed; resume after a backoff.
    Failed { code: u16, message: String },
}

/// A line of a watch stream that is not an event the cache can apply: the reflector
/// relists rather than guess.
#[derive(Debug, thiserror::Error)]
pub enum MalformedEvent {
    #[error("event is not JSON: {0}")]
    NotJson(#[source] serde_json::Error),
    #[error("{0}")]
    Object(#[from] ObjectError),
    #[error("bookmark without a numeric resourceVersion")]
    Bookmark,
    #[error("unknown event type {0:?}")]
    UnknownType(String),
}

/// Decodes one line of an upstream watch (JSON: `{"type":…,"object":…}`).
/// `field_labels` are the type's field-selector labels (see [`CachedObject::parse`]).
pub fn decode_event(
    line: &[u8],
    field_labels: &[(&'static str, &'static str)],
) -> Result<Decoded, MalformedEvent> {
    let ev: RawEvent<'_> = serde_json::from_slice(line).map_err(MalformedEvent::NotJson)?;
    let object = || {
        CachedObject::parse(
            Bytes::copy_from_slice(ev.object.get().as_bytes()),
            field_labels,
        )
    };
    Ok(match ev.kind {
        "ADDED" | "MODIFIED" => Decoded::Upsert(object()?),
        "DELETED" => Decoded::Delete(object()?),
        "BOOKMARK" => {
            let rv = serde_json::from_str::<Bookmark<'_>>(ev.object.get())
                .ok()
                .and_then(|b| crate::request::parse_uint(&b.metadata.resource_version).ok())
                .ok_or(MalformedEvent::Bookmark)?;
            Decoded::Progress(rv)
        }
        "ERROR" => {
            let st: ErrorStatus = serde_json::from_str(ev.object.get()).unwrap_or(ErrorStatus {
                code: 0,
                reason: String::new(),
                message: ev.object.get().to_string(),
            });
            if st.code == 410 || st.reason == "Expired" || st.reason == "Gone" {
                Decoded::Expired(st.message)
            } else {
                Decoded::Failed {
                    code: st.code,
                    message: st.message,
                }
            }
        }
        other => return Err(MalformedEvent::UnknownType(other.to_string())),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_lines_across_frames() {
        let mut s = LineSplitter::default();
        assert!(s.push(Bytes::from_static(b"{\"a\":")).unwrap().is_empty());
        let lines = s
            .push(Bytes::from_static(b"1}\n{\"b\":2}\n\n{\"c\""))
            .unwrap();
        assert_eq!(
            lines,
            vec![
                Bytes::from_static(b"{\"a\":1}"),
                Bytes::from_static(b"{\"b\":2}")
            ]
        );
        let lines = s.push(Bytes::from_static(b":3}\n")).unwrap();
        assert_eq!(lines, vec![Bytes::from_static(b"{\"c\":3}")]);
    }

    #[test]
    fn parses_events() {
        let line = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12"}}}"#;
        let ev: RawEvent = serde_json::from_slice(line).unwrap();
        assert_eq!(ev.kind, "BOOKMARK");
        let b: Bookmark = serde_json::from_str(ev.object.get()).unwrap();
        assert_eq!(b.metadata.resource_version, "12");
        let line = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        let ev: RawEvent = serde_json::from_slice(line).unwrap();
        let st: ErrorStatus = serde_json::from_str(ev.object.get()).unwrap();
        assert_eq!((st.code, st.reason.as_str()), (410, "Expired"));
    }
}
