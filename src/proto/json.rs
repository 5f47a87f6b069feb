//! A small JSON reader that keeps each value's source bytes.
//!
//! Hand-written rather than `serde_json::Value` for two reasons: `runtime.RawExtension`,
//! `metav1.FieldsV1` and apiextensions `JSON` carry the *exact* input bytes into
//! protobuf (Go's `UnmarshalJSON` copies them), which a parsed-and-reprinted value would
//! not reproduce (number spelling, escapes); and a pod parses without allocating (an
//! arena of values that each thread reuses, strings borrowed unless they have escapes)
//! instead of with hundreds of allocations.

use std::borrow::Cow;
use std::cell::Cell;

use super::ProtoError;

/// Deeper documents are refused (CRD schemas nest ~30 levels in practice).
pub(crate) const MAX_DEPTH: usize = 200;

/// A parsed document: every value is a node in one arena, containers refer to their
/// children as a contiguous range of it. The arena (and the parser's stack) come from
/// the thread's [`SPARE`] and go back to it when the document is dropped.
#[derive(Debug)]
pub(crate) struct Doc<'a> {
    nodes: Vec<Json<'a>>,
    pub root: Json<'a>,
}

/// The arena and the parser's stack of a finished document: empty, with their capacity.
#[derive(Default)]
struct Spare {
    nodes: Vec<Json<'static>>,
    stack: Vec<Json<'static>>,
}

thread_local! {
    /// Each thread keeps the vectors of its last document, so parsing the next one does
    /// not allocate them. Why: a watch event's object is encoded once and then dropped,
    /// and in the gateway the arena (~13 KiB for a 2 KiB pod) was a fresh allocation at
    /// the top of a glibc arena that had been trimmed in between: `sysmalloc`, an
    /// `mprotect` and page faults per event — 45 % of the protobuf frame's cost in the
    /// kubelet load run's profile (docs/protobuf.md "Cost"). Nested parses (a RawExtension
    /// compacted inside a decode) just allocate their own.
    static SPARE: Cell<Option<Spare>> = const { Cell::new(None) };
}

/// Vectors larger than this (in values: a ~50 KB document) are not kept, so a thread
/// holds at most ~256 KiB for the next document.
const SPARE_MAX_NODES: usize = 4096;

/// `v` emptied, as a vector of `'static` values with the same allocation: `collect`
/// from a `vec::IntoIter` into a type of the same size and alignment reuses the
/// allocation in place (std's in-place iteration; `spare_vectors_are_reused` checks
/// it), and an empty vector holds no borrow.
fn recycle(mut v: Vec<Json<'_>>) -> Vec<Json<'static>> {
    v.clear();
    v.into_iter()
        .map(|_| -> Json<'static> { unreachable!("the vector is empty") })
        .collect()
}

/// Keep `nodes`/`stack` for the thread's next document (unless one is kept already or
/// they are too large).
fn give_back(nodes: Option<Vec<Json<'_>>>, stack: Option<Vec<Json<'_>>>) {
    let keep = |v: Vec<Json<'_>>| (v.capacity() <= SPARE_MAX_NODES).then(|| recycle(v));
    let mut spare = SPARE.take().unwrap_or_default();
    if let Some(v) = nodes.and_then(keep) {
        if v.capacity() > spare.nodes.capacity() {
            spare.nodes = v;
        }
    }
    if let Some(v) = stack.and_then(keep) {
        if v.capacity() > spare.stack.capacity() {
            spare.stack = v;
        }
    }
    SPARE.set(Some(spare));
}

impl Drop for Doc<'_> {
    fn drop(&mut self) {
        give_back(Some(std::mem::take(&mut self.nodes)), None);
    }
}

#[derive(Debug)]
pub(crate) struct Json<'a> {
    /// The value's bytes exactly as in the input.
    pub raw: &'a [u8],
    /// The member name when the value is inside an object (empty in arrays).
    pub key: Cow<'a, str>,
    pub v: Val<'a>,
}

/// Children of a container: `nodes[start..start + len]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Kids {
    start: u32,
    len: u32,
}

#[derive(Debug)]
pub(crate) enum Val<'a> {
    Null,
    Bool(bool),
    /// The number's literal text (validated against the JSON grammar).
    Num(&'a str),
    Str(Cow<'a, str>),
    Arr(Kids),
    Obj(Kids),
}

impl<'a> Doc<'a> {
    pub(crate) fn parse(input: &'a [u8]) -> Result<Doc<'a>, ProtoError> {
        // One UTF-8 check for the whole input (vectorised for ASCII); strings are then
        // sliced out of the `str`, which costs a char-boundary check, not a re-validation.
        let src =
            std::str::from_utf8(input).map_err(|_| ProtoError::Json("invalid UTF-8".into()))?;
        let Spare {
            mut nodes,
            mut stack,
        } = SPARE.take().unwrap_or_default();
        // About one value per 12 bytes of Kubernetes JSON.
        nodes.reserve(input.len() / 12 + 4);
        stack.reserve(64);
        let mut p = Parser {
            s: input,
            src,
            pos: 0,
            nodes,
            stack,
        };
        let root = p.document();
        let Parser { nodes, stack, .. } = p;
        match root {
            Ok(root) => {
                give_back(None, Some(stack));
                Ok(Doc { nodes, root })
            }
            Err(e) => {
                give_back(Some(nodes), Some(stack));
                Err(e)
            }
        }
    }

    /// The members of an object or the elements of an array.
    pub(crate) fn kids(&self, k: Kids) -> &[Json<'a>] {
        &self.nodes[k.start as usize..(k.start + k.len) as usize]
    }

    /// `Some(members)` when `j` is an object.
    pub(crate) fn members(&self, j: &Json<'a>) -> Option<&[Json<'a>]> {
        match j.v {
            Val::Obj(k) => Some(self.kids(k)),
            _ => None,
        }
    }
}

impl Json<'_> {
    pub(crate) fn type_name(&self) -> &'static str {
        match self.v {
            Val::Null => "null",
            Val::Bool(_) => "bool",
            Val::Num(_) => "number",
            Val::Str(_) => "string",
            Val::Arr(_) => "array",
            Val::Obj(_) => "object",
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    /// The same bytes as `s`, known to be UTF-8.
    src: &'a str,
    pos: usize,
    nodes: Vec<Json<'a>>,
    /// Children of the containers being parsed; moved to `nodes` when a container closes.
    stack: Vec<Json<'a>>,
}

impl<'a> Parser<'a> {
    /// The input's one value, with nothing but whitespace around it.
    fn document(&mut self) -> Result<Json<'a>, ProtoError> {
        self.ws();
        let root = self.value(0, Cow::Borrowed(""))?;
        self.ws();
        if self.pos != self.s.len() {
            return Err(self.err("trailing data after the JSON value"));
        }
        Ok(root)
    }

    fn err(&self, what: &str) -> ProtoError {
        ProtoError::Json(format!("{what} at byte {}", self.pos))
    }

    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn lit(&mut self, word: &[u8]) -> Result<(), ProtoError> {
        if self.s[self.pos..].starts_with(word) {
            self.pos += word.len();
            Ok(())
        } else {
            Err(self.err("invalid literal"))
        }
    }

    /// Move the children pushed since `mark` into the arena.
    fn close(&mut self, mark: usize) -> Kids {
        let start = self.nodes.len() as u32;
        let len = (self.stack.len() - mark) as u32;
        self.nodes.extend(self.stack.drain(mark..));
        Kids { start, len }
    }

    fn value(&mut self, depth: usize, key: Cow<'a, str>) -> Result<Json<'a>, ProtoError> {
        if depth > MAX_DEPTH {
            return Err(ProtoError::TooDeep);
        }
        let start = self.pos;
        let v = match self.peek().ok_or_else(|| self.err("unexpected end"))? {
            b'n' => self.lit(b"null").map(|_| Val::Null)?,
            b't' => self.lit(b"true").map(|_| Val::Bool(true))?,
            b'f' => self.lit(b"false").map(|_| Val::Bool(false))?,
            b'"' => Val::Str(self.string()?),
            b'[' => {
                self.pos += 1;
                let mark = self.stack.len();
                self.ws();
                if self.peek() == Some(b']') {
                    self.pos += 1;
                } else {
                    loop {
                        self.ws();
                        let v = self.value(depth + 1, Cow::Borrowed(""))?;
                        self.stack.push(v);
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b']') => {
                                self.pos += 1;
                                break;
                            }
                            _ => return Err(self.err("expected , or ]")),
                        }
                    }
                }
                Val::Arr(self.close(mark))
            }
            b'{' => {
                self.pos += 1;
                let mark = self.stack.len();
                self.ws();
                if self.peek() == Some(b'}') {
                    self.pos += 1;
                } else {
                    loop {
                        self.ws();
                        if self.peek() != Some(b'"') {
                            return Err(self.err("expected a key"));
                        }
                        let key = self.string()?;
                        self.ws();
                        if self.peek() != Some(b':') {
                            return Err(self.err("expected :"));
                        }
                        self.pos += 1;
                        self.ws();
                        let v = self.value(depth + 1, key)?;
                        self.stack.push(v);
                        self.ws();
                        match self.peek() {
                            Some(b',') => self.pos += 1,
                            Some(b'}') => {
                                self.pos += 1;
                                break;
                            }
                            _ => return Err(self.err("expected , or }")),
                        }
                    }
                }
                Val::Obj(self.close(mark))
            }
            b'-' | b'0'..=b'9' => Val::Num(self.number()?),
            _ => return Err(self.err("unexpected character")),
        };
        Ok(Json {
            raw: &self.s[start..self.pos],
            key,
            v,
        })
    }

    fn number(&mut self) -> Result<&'a str, ProtoError> {
        let start = self.pos;
        let digits = |p: &mut Self| {
            let s = p.pos;
            while let Some(b'0'..=b'9') = p.peek() {
                p.pos += 1;
            }
            p.pos - s
        };
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.err("invalid number")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if digits(self) == 0 {
                return Err(self.err("invalid number"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if digits(self) == 0 {
                return Err(self.err("invalid number"));
            }
        }
        Ok(&self.src[start..self.pos])
    }

    fn string(&mut self) -> Result<Cow<'a, str>, ProtoError> {
        self.pos += 1; // opening quote
        let start = self.pos;
        // The common case: no escapes. Find the closing quote or the first backslash;
        // a control character before it is an error.
        let rest = &self.s[start..];
        let stop = plain_len(rest).ok_or_else(|| self.err("unterminated string"))?;
        if rest[stop] < 0x20 {
            return Err(self.err("control character in string"));
        }
        self.pos = start + stop;
        if rest[stop] == b'"' {
            self.pos += 1;
            return Ok(Cow::Borrowed(&self.src[start..start + stop]));
        }
        let mut out = String::from(&self.src[start..start + stop]);
        loop {
            let seg = self.pos;
            while let Some(c) = self.peek() {
                if ends_plain(c) {
                    break;
                }
                self.pos += 1;
            }
            out.push_str(&self.src[seg..self.pos]);
            match self.peek() {
                None => return Err(self.err("unterminated string")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(Cow::Owned(out));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    let c = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.pos += 1;
                    match c {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            // Go's decoder turns unpaired surrogates into U+FFFD.
                            let ch = if (0xd800..0xdc00).contains(&hi)
                                && self.s[self.pos..].starts_with(b"\\u")
                            {
                                let save = self.pos;
                                self.pos += 2;
                                let lo = self.hex4()?;
                                if (0xdc00..0xe000).contains(&lo) {
                                    char::from_u32(0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00))
                                } else {
                                    self.pos = save;
                                    None
                                }
                            } else {
                                char::from_u32(hi)
                            };
                            out.push(ch.unwrap_or('\u{fffd}'));
                        }
                        _ => return Err(self.err("invalid escape")),
                    }
                }
                Some(_) => return Err(self.err("control character in string")),
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, ProtoError> {
        let h = self
            .s
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.err("short \\u escape"))?;
        let s = std::str::from_utf8(h).map_err(|_| self.err("invalid \\u escape"))?;
        let v = u32::from_str_radix(s, 16).map_err(|_| self.err("invalid \\u escape"))?;
        self.pos += 4;
        Ok(v)
    }
}

/// Whether `c` ends the plain part of a JSON string: the closing quote, a backslash, or
/// a control character (an error).
fn ends_plain(c: u8) -> bool {
    c == b'"' || c == b'\\' || c < 0x20
}

/// The length of the plain part of a JSON string's contents `s` (the position of the
/// first byte that [`ends_plain`]); `None`: unterminated.
///
/// Eight bytes at a time in a `u64` (the "has a zero byte" bit trick): most strings
/// (keys, names) are a few bytes long, for which `memchr2`'s per-call dispatch and setup
/// cost more than the search; measured in docs/protobuf.md "Cost per object".
fn plain_len(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = 0;
    while let Some(chunk) = s.get(i..i + 8) {
        let v = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let quote = v ^ (ONES * u64::from(b'"'));
        let backslash = v ^ (ONES * u64::from(b'\\'));
        // A byte's high bit is set where it was zero (resp. below 0x20). Borrows can
        // only set bits above the first such byte, so the lowest bit is exact.
        let found = (quote.wrapping_sub(ONES) & !quote)
            | (backslash.wrapping_sub(ONES) & !backslash)
            | (v.wrapping_sub(ONES * 0x20) & !v);
        let found = found & HIGH;
        if found != 0 {
            return Some(i + found.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    s[i..].iter().position(|&c| ends_plain(c)).map(|p| i + p)
}

/// Bytes `write_go_string` cannot copy as they are: control characters, `"`, `\\`, the
/// HTML-sensitive `<`, `>`, `&`, and every non-ASCII byte (UTF-8 checks, U+2028/9).
static SPECIAL_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = i < 0x20 || i >= 0x80 || matches!(i as u8, b'"' | b'\\' | b'<' | b'>' | b'&');
        i += 1;
    }
    t
};

/// Write `s` as a JSON string the way Go's `encoding/json` does (HTML-safe escaping, as
/// kube-apiserver's `json.Encoder` leaves on): `<`, `>`, `&`, U+2028 and U+2029 become
/// `\u003c`, `\u003e`, `\u0026`, `\u2028`, `\u2029`; control characters are escaped;
/// each byte of invalid UTF-8 becomes `\ufffd`.
pub(crate) fn write_go_string(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Fast path: printable ASCII with nothing to escape (nearly every Kubernetes string).
    if !s.iter().any(|&c| SPECIAL_BYTE[c as usize]) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut rest = s;
    loop {
        let (valid, bad) = match std::str::from_utf8(rest) {
            Ok(v) => (v, 0),
            Err(e) => {
                let v = std::str::from_utf8(&rest[..e.valid_up_to()]).expect("valid prefix");
                (v, e.error_len().unwrap_or(rest.len() - e.valid_up_to()))
            }
        };
        let mut start = 0;
        let b = valid.as_bytes();
        let mut i = 0;
        while i < b.len() {
            let c = b[i];
            let esc: Option<&[u8]> = match c {
                b'"' => Some(b"\\\""),
                b'\\' => Some(b"\\\\"),
                b'\n' => Some(b"\\n"),
                b'\r' => Some(b"\\r"),
                b'\t' => Some(b"\\t"),
                0x08 => Some(b"\\b"),
                0x0c => Some(b"\\f"),
                _ => None,
            };
            if let Some(e) = esc {
                out.extend_from_slice(&b[start..i]);
                out.extend_from_slice(e);
                i += 1;
                start = i;
            } else if c < 0x20 || c == b'<' || c == b'>' || c == b'&' {
                out.extend_from_slice(&b[start..i]);
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c >> 4) as usize]);
                out.push(HEX[(c & 15) as usize]);
                i += 1;
                start = i;
            } else if c == 0xe2
                && b.get(i + 1) == Some(&0x80)
                && matches!(b.get(i + 2), Some(0xa8 | 0xa9))
            {
                out.extend_from_slice(&b[start..i]);
                out.extend_from_slice(if b[i + 2] == 0xa8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 3;
                start = i;
            } else {
                i += 1;
            }
        }
        out.extend_from_slice(&b[start..]);
        if bad == 0 {
            break;
        }
        for _ in 0..bad {
            out.extend_from_slice(b"\\ufffd");
        }
        rest = &rest[valid.len() + bad..];
    }
    out.push(b'"');
}

/// Append a raw JSON value the way `encoding/json` embeds a `MarshalJSON` result: its
/// `compact` drops insignificant whitespace and, with HTML escaping on, rewrites `<`,
/// `>`, `&`, U+2028 and U+2029 inside strings; every other byte is copied as is.
/// Fails on invalid JSON (so does Go's Marshal).
pub(crate) fn write_compact(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ProtoError> {
    Doc::parse(raw)?;
    let mut in_str = false;
    let mut esc = false;
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        if in_str {
            if esc {
                esc = false;
                out.push(c);
            } else if c == b'\\' {
                esc = true;
                out.push(c);
            } else if c == b'"' {
                in_str = false;
                out.push(c);
            } else if c == b'<' || c == b'>' || c == b'&' {
                out.extend_from_slice(match c {
                    b'<' => b"\\u003c",
                    b'>' => b"\\u003e",
                    _ => b"\\u0026",
                });
            } else if c == 0xe2
                && raw.get(i + 1) == Some(&0x80)
                && matches!(raw.get(i + 2), Some(0xa8 | 0xa9))
            {
                out.extend_from_slice(if raw[i + 2] == 0xa8 {
                    b"\\u2028"
                } else {
                    b"\\u2029"
                });
                i += 2;
            } else {
                out.push(c);
            }
        } else if c == b'"' {
            in_str = true;
            out.push(c);
        } else if !matches!(c, b' ' | b'\t' | b'\n' | b'\r') {
            out.push(c);
        }
        i += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go_str(s: &[u8]) -> String {
        let mut out = Vec::new();
        write_go_string(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn parses_and_keeps_raw_bytes() {
        let doc = br#"{"a": [1, 2.5e3, "x\u00e9\ud83d\ude00"], "b": {"c": null}, "d": true}"#;
        let d = Doc::parse(doc).unwrap();
        let m = d.members(&d.root).unwrap();
        assert_eq!(
            (m[0].key.as_ref(), m[0].raw),
            ("a", &br#"[1, 2.5e3, "x\u00e9\ud83d\ude00"]"#[..])
        );
        let Val::Arr(a) = m[0].v else { panic!() };
        let a = d.kids(a);
        assert!(matches!(a[1].v, Val::Num("2.5e3")));
        assert!(matches!(&a[2].v, Val::Str(s) if s == "xé😀"));
        let inner = d.members(&m[1]).unwrap();
        assert_eq!((inner[0].key.as_ref(), inner[0].raw), ("c", &b"null"[..]));
    }

    #[test]
    fn plain_len_finds_the_first_quote_backslash_or_control_character() {
        // Every position in and across the 8-byte words, every stopping byte, after
        // bytes that could fool the bit trick (0x80-0xff, just above each target).
        for len in 0..40 {
            for stop in [b'"', b'\\', 0x00, 0x1f, 0x0a] {
                for filler in [b'a', 0xff, 0x80, 0xa0, b'#', b']', 0x20, 0x7f] {
                    let mut s = vec![filler; len];
                    s.push(stop);
                    s.extend_from_slice(b"\"\\\x01 tail");
                    assert_eq!(plain_len(&s), Some(len), "{len} {stop:#x} {filler:#x}");
                    s.truncate(len);
                    assert_eq!(plain_len(&s), None, "{len} {filler:#x}: unterminated");
                }
            }
        }
    }

    #[test]
    fn spare_vectors_are_reused() {
        let doc = br#"{"a": [1, 2, {"b": "c"}], "d": "e"}"#;
        drop(Doc::parse(doc).unwrap());
        let spare = SPARE.take().expect("the document's vectors were kept");
        let (nodes, stack) = (spare.nodes.as_ptr(), spare.stack.as_ptr());
        assert!(spare.nodes.capacity() > 0 && spare.stack.capacity() > 0);
        SPARE.set(Some(spare));
        let d = Doc::parse(doc).unwrap();
        assert_eq!(
            d.nodes.as_ptr() as usize,
            nodes as usize,
            "the arena is reused"
        );
        let Val::Arr(a) = d.members(&d.root).unwrap()[0].v else {
            panic!("an array")
        };
        assert_eq!(d.kids(a).len(), 3);
        drop(d);
        let spare = SPARE.take().expect("kept again");
        assert_eq!(
            spare.nodes.as_ptr(),
            nodes,
            "recycling keeps the allocation"
        );
        assert_eq!(spare.stack.as_ptr(), stack);
        // A failed parse gives its vectors back too, and a huge one is not kept.
        assert!(Doc::parse(b"[1, 2").is_err());
        assert!(SPARE.take().is_some());
        let big = format!("[{}0]", "0,".repeat(SPARE_MAX_NODES * 2));
        drop(Doc::parse(big.as_bytes()).unwrap());
        let spare = SPARE.take().unwrap_or_default();
        assert!(spare.nodes.capacity() <= SPARE_MAX_NODES);
        assert!(spare.stack.capacity() <= SPARE_MAX_NODES);
    }

    #[test]
    fn rejects_malformed_json() {
        for bad in [
            &b"{"[..],
            b"[1,]",
            b"{\"a\" 1}",
            b"01",
            b"1.",
            b"\"\x01\"",
            b"nul",
            b"{} x",
            b"\"\\q\"",
        ] {
            assert!(
                Doc::parse(bad).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let deep = "[".repeat(MAX_DEPTH + 5);
        assert!(matches!(
            Doc::parse(deep.as_bytes()),
            Err(ProtoError::TooDeep)
        ));
    }

    #[test]
    fn go_string_escaping() {
        assert_eq!(go_str(b"a<b>&c"), r#""a\u003cb\u003e\u0026c""#);
        assert_eq!(
            go_str("\u{2028}\n\t\"\\\u{1}".as_bytes()),
            r#""\u2028\n\t\"\\\u0001""#
        );
        assert_eq!(go_str(b"x\xe2\x82y\xff"), r#""x\ufffd\ufffdy\ufffd""#);
    }

    #[test]
    fn compacts_like_encoding_json() {
        let mut out = Vec::new();
        write_compact(
            &mut out,
            b"{ \"f:a\" : { \".\" : {} , \"x\":\"< \\u00e9\" } }",
        )
        .unwrap();
        assert_eq!(out, br#"{"f:a":{".":{},"x":"\u003c \u00e9"}}"#);
    }
}
