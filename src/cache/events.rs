//! Parsing the upstream's watch stream: newline-delimited JSON events, split from body
//! frames that need not align with lines.

use bytes::{Buf, Bytes, BytesMut};
use serde::Deserialize;
use serde_json::value::RawValue;

/// The longest single event accepted. kube-apiserver limits objects to about 1.5 MiB in
/// etcd; anything far beyond that is a broken stream, and the bound keeps memory bounded.
pub const MAX_EVENT_BYTES: usize = 64 * 1024 * 1024;

/// Splits a byte stream into lines, holding at most one partial line.
#[derive(Default)]
pub struct LineSplitter {
    buf: BytesMut,
}

#[derive(Debug, thiserror::Error)]
#[error("watch event exceeds {MAX_EVENT_BYTES} bytes")]
pub struct EventTooLarge;

impl LineSplitter {
    /// Feeds one frame and returns the complete lines it finished (without `\n`).
    pub fn push(&mut self, frame: Bytes) -> Result<Vec<Bytes>, EventTooLarge> {
        self.buf.extend_from_slice(&frame);
        let mut lines = Vec::new();
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            let line = self.buf.split_to(pos).freeze();
            self.buf.advance(1);
            if !line.iter().all(u8::is_ascii_whitespace) {
                lines.push(line);
            }
        }
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
