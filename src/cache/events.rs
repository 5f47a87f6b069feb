//! Parsing the upstream's watch stream: newline-delimited JSON events, split from body
//! frames that need not align with lines ([`LineSplitter`]), each decoded into what the
//! reflector does with it ([`decode_event`]). Both are pure, so that every input an
//! upstream can send is property-tested (tests/bad_input_properties.rs).

use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::model::object::{CachedObject, ObjectError};

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

/// The fields of a watch ERROR's Status (or an error response's) the reflector acts on.
#[derive(Deserialize, Debug, Default)]
pub struct ErrorStatus {
    #[serde(default)]
    pub code: u16,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub details: Option<ErrorDetails>,
}

#[derive(Deserialize, Debug, Default)]
pub struct ErrorDetails {
    #[serde(default)]
    pub causes: Vec<ErrorCause>,
    #[serde(rename = "retryAfterSeconds", default)]
    pub retry_after_seconds: Option<u32>,
}

#[derive(Deserialize, Debug, Default)]
pub struct ErrorCause {
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub message: String,
}

impl ErrorStatus {
    /// "Too large resource version": the apiserver's watch cache has not reached the
    /// resourceVersion asked for (a lagging apiserver of an HA control plane). Recognised
    /// the way client-go's reflector does (`isTooLargeResourceVersionError`): the
    /// `ResourceVersionTooLarge` cause, or, from apiservers before 1.19, a Timeout whose
    /// cause or message says so.
    pub fn is_too_large_resource_version(&self) -> bool {
        const TEXT: &str = "Too large resource version";
        let causes = self.details.iter().flat_map(|d| &d.causes);
        if causes
            .clone()
            .any(|c| c.reason == "ResourceVersionTooLarge")
        {
            return true;
        }
        if self.code != 504 && self.reason != "Timeout" {
            return false;
        }
        causes.clone().any(|c| c.message == TEXT) || self.message.contains(TEXT)
    }

    /// The Status's `retryAfterSeconds`, if any.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.details
            .as_ref()
            .and_then(|d| d.retry_after_seconds)
            .map(|s| std::time::Duration::from_secs(s.into()))
    }
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
    /// An ERROR event saying the upstream is behind the requested resourceVersion ("Too
    /// large resource version"): try again, never relist.
    Behind(ErrorStatus),
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
                .and_then(|b| crate::strconv::parse_uint(&b.metadata.resource_version).ok())
                .ok_or(MalformedEvent::Bookmark)?;
            Decoded::Progress(rv)
        }
        "ERROR" => {
            let st: ErrorStatus =
                serde_json::from_str(ev.object.get()).unwrap_or_else(|_| ErrorStatus {
                    message: ev.object.get().to_string(),
                    ..Default::default()
                });
            if st.code == 410 || st.reason == "Expired" || st.reason == "Gone" {
                Decoded::Expired(st.message)
            } else if st.is_too_large_resource_version() {
                // A lagging apiserver: retried (elsewhere), never relisted.
                Decoded::Behind(st)
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
        assert!(!st.is_too_large_resource_version());
    }

    #[test]
    fn too_large_resource_version_is_recognised_like_client_go() {
        let current = crate::status::Status::too_large_resource_version(20, 10, 1).to_value();
        let st: ErrorStatus = serde_json::from_value(current).unwrap();
        assert!(st.is_too_large_resource_version());
        assert_eq!(st.retry_after(), Some(std::time::Duration::from_secs(1)));
        // 1.17.0-1.18.5: the cause's message only.
        let old: ErrorStatus = serde_json::from_str(
            r#"{"code":504,"reason":"Timeout","message":"Timeout: Too large resource version: 20, current: 10","details":{"causes":[{"message":"Too large resource version"}]}}"#,
        )
        .unwrap();
        assert!(old.is_too_large_resource_version());
        // Before 1.17: the message only.
        let older: ErrorStatus = serde_json::from_str(
            r#"{"code":504,"reason":"Timeout","message":"Too large resource version: 20, current: 10"}"#,
        )
        .unwrap();
        assert!(older.is_too_large_resource_version());
        let other: ErrorStatus = serde_json::from_str(
            r#"{"code":504,"reason":"Timeout","message":"request timed out"}"#,
        )
        .unwrap();
        assert!(!other.is_too_large_resource_version());
    }
}
