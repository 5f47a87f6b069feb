//! Reading one watch event line cheaply. A load generator that parses every event of
//! 10,000 watchers into a JSON tree measures itself, not the gateway; so the fields the
//! checker needs (type, metadata.resourceVersion, the writer's stamp) are found by scanning
//! the bytes, and only lines that do not look like the apiserver's encoding are parsed.

use memchr::memmem::Finder;

/// The annotation the writer stamps on every write: `<run id>/<unix time in ns>`.
pub const STAMP_ANNOTATION: &str = "watchgate.io/load-written";

/// What the checker needs from one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventInfo {
    pub kind: Kind,
    /// metadata.resourceVersion of the object (0 when absent, e.g. in an ERROR Status).
    pub rv: u64,
    /// The writer's stamp (run id, write time in ns since the epoch), when present.
    pub stamp: Option<(String, u64)>,
    /// For ERROR events: the Status code.
    pub code: Option<u16>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
    Other,
}

fn kind_of(t: &[u8]) -> Kind {
    match t {
        b"ADDED" => Kind::Added,
        b"MODIFIED" => Kind::Modified,
        b"DELETED" => Kind::Deleted,
        b"BOOKMARK" => Kind::Bookmark,
        b"ERROR" => Kind::Error,
        _ => Kind::Other,
    }
}

/// Defines a substring finder searched for in every event line, built once: building a
/// finder costs more than the search itself (`memmem::find`, which builds one per call,
/// was ~7 % of the load tool's CPU per event).
macro_rules! needle {
    ($name:ident, $text:expr) => {
        static $name: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($text));
    };
}
pub(super) use needle;

needle!(RESOURCE_VERSION, b"\"resourceVersion\":\"");
needle!(STAMP, b"\"watchgate.io/load-written\":\"");
needle!(CODE, b"\"code\":");

/// The string value following `needle` (a `"name":"` needle), up to its closing quote.
fn string_after<'a>(line: &'a [u8], needle: &Finder<'_>) -> Option<&'a [u8]> {
    let at = needle.find(line)? + needle.needle().len();
    let len = memchr::memchr(b'"', &line[at..])?;
    Some(&line[at..at + len])
}

fn number_after(line: &[u8], needle: &Finder<'_>) -> Option<u64> {
    let at = needle.find(line)? + needle.needle().len();
    let digits = line[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&line[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// Scans one event line; falls back to a full parse for unusual encodings.
pub fn scan(line: &[u8]) -> Option<EventInfo> {
    const TYPE: &[u8] = b"{\"type\":\"";
    if !line.starts_with(TYPE) {
        return parse_slow(line);
    }
    let ty = &line[TYPE.len()..];
    let kind = kind_of(&ty[..memchr::memchr(b'"', ty)?]);
    if kind == Kind::Error {
        let code = number_after(line, &CODE).and_then(|c| u16::try_from(c).ok());
        return Some(EventInfo {
            kind,
            rv: 0,
            stamp: None,
            code,
        });
    }
    let rv = string_after(line, &RESOURCE_VERSION)
        .and_then(|s| std::str::from_utf8(s).ok()?.parse().ok())
        .unwrap_or(0);
    let stamp = string_after(line, &STAMP).and_then(parse_stamp);
    Some(EventInfo {
        kind,
        rv,
        stamp,
        code: None,
    })
}

pub(super) fn parse_stamp(s: &[u8]) -> Option<(String, u64)> {
    let s = std::str::from_utf8(s).ok()?;
    let (run, ns) = s.rsplit_once('/')?;
    Some((run.to_string(), ns.parse().ok()?))
}

fn parse_slow(line: &[u8]) -> Option<EventInfo> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let kind = kind_of(v.get("type")?.as_str()?.as_bytes());
    let obj = v.get("object")?;
    let rv = obj
        .pointer("/metadata/resourceVersion")
        .and_then(|x| x.as_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let stamp = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(STAMP_ANNOTATION))
        .and_then(|x| x.as_str())
        .and_then(|s| parse_stamp(s.as_bytes()));
    let code = (kind == Kind::Error)
        .then(|| obj.get("code").and_then(|c| c.as_u64()))
        .flatten()
        .and_then(|c| u16::try_from(c).ok());
    Some(EventInfo {
        kind,
        rv,
        stamp,
        code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scans_the_apiserver_encoding() {
        let line = br#"{"type":"MODIFIED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p","namespace":"n","resourceVersion":"1234","annotations":{"watchgate.io/load-written":"r1/1700000000123456789"}}}}"#;
        let e = scan(line).unwrap();
        assert_eq!(e.kind, Kind::Modified);
        assert_eq!(e.rv, 1234);
        assert_eq!(e.stamp, Some(("r1".into(), 1_700_000_000_123_456_789)));
        assert_eq!(parse_slow(line).unwrap(), e);
    }

    #[test]
    fn scans_errors_and_bookmarks() {
        let line = br#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (5)","reason":"Expired","code":410}}"#;
        let e = scan(line).unwrap();
        assert_eq!((e.kind, e.code), (Kind::Error, Some(410)));
        let line = br#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"77"}}}"#;
        let e = scan(line).unwrap();
        assert_eq!((e.kind, e.rv, e.stamp), (Kind::Bookmark, 77, None));
    }

    #[test]
    fn other_encodings_are_parsed() {
        let line = br#"{ "object": {"metadata": {"resourceVersion": "9"}}, "type": "ADDED" }"#;
        let e = scan(line).unwrap();
        assert_eq!((e.kind, e.rv), (Kind::Added, 9));
        assert!(scan(b"not json").is_none());
    }
}
