//! SPDY/3.1 framing, as much as Kubernetes' streaming protocols use: the frames
//! (`moby/spdystream`'s framer, the SPDY draft 3 layout) and the zlib-compressed
//! name/value header blocks.
//!
//! Hand-written: no maintained Rust crate speaks SPDY, and the simulator needs only the
//! server side of what client-go's `spdystream` sends (docs/simulator.md, "port-forward").
//! Everything here is pure (bytes in, frames out), so arbitrary input is property-tested
//! (tests/bad_input_properties.rs, `spdy_frames_never_panic`).
//!
//! Header blocks are one zlib stream per direction for the life of the connection, each
//! block ended by a sync flush. The client's stream is compressed with SPDY/3's fixed
//! dictionary ([`dictionary`]), which inflating needs; ours is compressed without one,
//! which Go's reader accepts (a zlib header without FDICT ignores the dictionary).

use std::sync::OnceLock;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Control frame types (SPDY/3 §2.6).
pub const SYN_STREAM: u16 = 1;
pub const SYN_REPLY: u16 = 2;
pub const RST_STREAM: u16 = 3;
pub const SETTINGS: u16 = 4;
pub const PING: u16 = 6;
pub const GOAWAY: u16 = 7;
pub const HEADERS: u16 = 8;
pub const WINDOW_UPDATE: u16 = 9;

/// `FLAG_FIN` on DATA, SYN_STREAM and SYN_REPLY frames.
pub const FLAG_FIN: u8 = 0x01;

/// RST_STREAM status codes.
pub const PROTOCOL_ERROR: u32 = 1;
pub const REFUSED_STREAM: u32 = 3;
pub const CANCEL: u32 = 5;

/// The largest frame payload accepted (the format allows 16 MiB); far more than any
/// header block or data chunk a Kubernetes client writes (32 KiB copies).
pub const MAX_FRAME_PAYLOAD: usize = 1 << 20;
/// The largest decompressed header block accepted.
pub const MAX_HEADER_BLOCK: usize = 64 * 1024;

/// Why the byte stream is not SPDY/3 the simulator can follow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpdyError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("frame payload of {0} bytes is too large")]
    TooLarge(usize),
    #[error("control frame type {kind} is {len} bytes, too short")]
    Short { kind: u16, len: usize },
    #[error("header block: {0}")]
    Headers(&'static str),
    #[error("the header stream uses dictionary {0:#010x}, not SPDY/3's")]
    Dictionary(u32),
}

/// One frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Data {
        stream: u32,
        flags: u8,
        data: Bytes,
    },
    /// A control frame: `kind`, `flags` and the raw payload (see the `parse_*` helpers).
    Control {
        kind: u16,
        flags: u8,
        payload: Bytes,
    },
}

/// Takes one complete frame off the front of `buf`, if it holds one.
pub fn next_frame(buf: &mut BytesMut) -> Result<Option<Frame>, SpdyError> {
    if buf.len() < 8 {
        return Ok(None);
    }
    let len = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
    if len > MAX_FRAME_PAYLOAD {
        return Err(SpdyError::TooLarge(len));
    }
    let control = buf[0] & 0x80 != 0;
    if control {
        let version = u16::from_be_bytes([buf[0] & 0x7f, buf[1]]);
        if version != 3 {
            return Err(SpdyError::Version(version));
        }
    }
    if buf.len() < 8 + len {
        return Ok(None);
    }
    let head = buf.split_to(8);
    let payload = buf.split_to(len).freeze();
    let flags = head[4];
    Ok(Some(if control {
        Frame::Control {
            kind: u16::from_be_bytes([head[2], head[3]]),
            flags,
            payload,
        }
    } else {
        Frame::Data {
            stream: u32::from_be_bytes([head[0], head[1], head[2], head[3]]) & 0x7fff_ffff,
            flags,
            data: payload,
        }
    }))
}

/// The bytes of a DATA frame.
pub fn data_frame(stream: u32, fin: bool, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + data.len());
    b.put_u32(stream & 0x7fff_ffff);
    b.put_u8(if fin { FLAG_FIN } else { 0 });
    b.put_uint(data.len() as u64, 3);
    b.put_slice(data);
    b.freeze()
}

/// The bytes of a control frame.
pub fn control_frame(kind: u16, flags: u8, payload: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + payload.len());
    b.put_u16(0x8003);
    b.put_u16(kind);
    b.put_u8(flags);
    b.put_uint(payload.len() as u64, 3);
    b.put_slice(payload);
    b.freeze()
}

/// A SYN_STREAM's fields: stream id, whether the client has finished sending (FIN), and
/// its compressed header block.
pub fn parse_syn_stream(flags: u8, payload: &Bytes) -> Result<(u32, bool, Bytes), SpdyError> {
    if payload.len() < 10 {
        return Err(SpdyError::Short {
            kind: SYN_STREAM,
            len: payload.len(),
        });
    }
    let id = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff;
    Ok((id, flags & FLAG_FIN != 0, payload.slice(10..)))
}

/// The stream id a RST_STREAM, WINDOW_UPDATE or similar frame starts with.
pub fn stream_id(kind: u16, payload: &[u8]) -> Result<u32, SpdyError> {
    if payload.len() < 4 {
        return Err(SpdyError::Short {
            kind,
            len: payload.len(),
        });
    }
    Ok(u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]) & 0x7fff_ffff)
}

/// Parses a decompressed name/value block (SPDY/3: 32-bit counts and lengths; several
/// values of one name are joined by NUL).
pub fn parse_header_block(mut b: &[u8]) -> Result<Vec<(String, String)>, SpdyError> {
    let take = |b: &mut &[u8]| -> Result<String, SpdyError> {
        if b.len() < 4 {
            return Err(SpdyError::Headers("truncated length"));
        }
        let n = b.get_u32() as usize;
        if b.len() < n {
            return Err(SpdyError::Headers("truncated string"));
        }
        let s = String::from_utf8_lossy(&b[..n]).into_owned();
        b.advance(n);
        Ok(s)
    };
    if b.len() < 4 {
        return Err(SpdyError::Headers("truncated count"));
    }
    let count = b.get_u32() as usize;
    // Each pair takes at least 8 bytes: a count that cannot fit is a lie.
    if count > b.len() / 8 {
        return Err(SpdyError::Headers("more pairs than bytes"));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let name = take(&mut b)?;
        let value = take(&mut b)?;
        out.push((name, value));
    }
    Ok(out)
}

/// Serialises a name/value block (names must already be lowercase: Go's reader refuses
/// others).
pub fn header_block(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    b.put_u32(pairs.len() as u32);
    for (n, v) in pairs {
        b.put_u32(n.len() as u32);
        b.put_slice(n.as_bytes());
        b.put_u32(v.len() as u32);
        b.put_slice(v.as_bytes());
    }
    b
}

/// SPDY/3's zlib dictionary for header blocks (draft 3 §2.6.10.1): common header names and
/// values, each with a 32-bit length, then a run of status lines, dates and media types.
pub fn dictionary() -> &'static [u8] {
    static DICT: OnceLock<Vec<u8>> = OnceLock::new();
    DICT.get_or_init(|| {
        const WORDS: &[&str] = &[
            "options",
            "head",
            "post",
            "put",
            "delete",
            "trace",
            "accept",
            "accept-charset",
            "accept-encoding",
            "accept-language",
            "accept-ranges",
            "age",
            "allow",
            "authorization",
            "cache-control",
            "connection",
            "content-base",
            "content-encoding",
            "content-language",
            "content-length",
            "content-location",
            "content-md5",
            "content-range",
            "content-type",
            "date",
            "etag",
            "expect",
            "expires",
            "from",
            "host",
            "if-match",
            "if-modified-since",
            "if-none-match",
            "if-range",
            "if-unmodified-since",
            "last-modified",
            "location",
            "max-forwards",
            "pragma",
            "proxy-authenticate",
            "proxy-authorization",
            "range",
            "referer",
            "retry-after",
            "server",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "user-agent",
            "vary",
            "via",
            "warning",
            "www-authenticate",
            "method",
            "get",
            "status",
            "200 OK",
            "version",
            "HTTP/1.1",
            "url",
            "public",
            "set-cookie",
            "keep-alive",
            "origin",
        ];
        const TAIL: &[&str] = &[
            "100101201202205206300302303304305306307402405406407408409410411412413414415416417",
            "502504505",
            "203 Non-Authoritative Information",
            "204 No Content",
            "301 Moved Permanently",
            "400 Bad Request",
            "401 Unauthorized",
            "403 Forbidden",
            "404 Not Found",
            "500 Internal Server Error",
            "501 Not Implemented",
            "503 Service Unavailable",
            "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec ",
            "00:00:00 ",
            "Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
            "chunked,text/html,image/png,image/jpg,image/gif,application/xml,",
            "application/xhtml+xml,text/plain,text/javascript,",
            "publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.",
        ];
        let mut d = Vec::with_capacity(1423);
        for w in WORDS {
            d.put_u32(w.len() as u32);
            d.put_slice(w.as_bytes());
        }
        for t in TAIL {
            d.put_slice(t.as_bytes());
        }
        d
    })
}

/// Adler-32 (RFC 1950), the zlib header's dictionary id.
pub fn adler32(data: &[u8]) -> u32 {
    let (mut a, mut b) = (1u32, 0u32);
    for chunk in data.chunks(5552) {
        for &x in chunk {
            a += u32::from(x);
            b += a;
        }
        a %= 65521;
        b %= 65521;
    }
    (b << 16) | a
}

/// The inflating half of a connection's header compression: the peer's zlib stream,
/// header blocks fed in order. miniz_oxide's wrapping 32 KiB window starts out holding
/// the dictionary, which is what zlib's `inflateSetDictionary` does.
pub struct HeaderInflater {
    state: Box<miniz_oxide::inflate::core::DecompressorOxide>,
    window: Box<[u8]>,
    pos: usize,
    /// The zlib header (2 bytes, plus the 4-byte dictionary id when FDICT is set) until it
    /// is complete.
    header: Option<Vec<u8>>,
}

impl Default for HeaderInflater {
    fn default() -> Self {
        let dict = dictionary();
        let mut window = vec![0u8; 32 * 1024].into_boxed_slice();
        window[..dict.len()].copy_from_slice(dict);
        Self {
            state: Box::default(),
            window,
            pos: dict.len(),
            header: Some(Vec::new()),
        }
    }
}

impl HeaderInflater {
    /// Decompresses the next header block.
    pub fn inflate(&mut self, mut input: &[u8]) -> Result<Vec<u8>, SpdyError> {
        use miniz_oxide::inflate::core::{decompress, inflate_flags::TINFL_FLAG_HAS_MORE_INPUT};
        use miniz_oxide::inflate::TINFLStatus;
        if let Some(h) = &mut self.header {
            while h.len() < 2 && !input.is_empty() {
                h.push(input[0]);
                input = &input[1..];
            }
            if h.len() < 2 {
                return Ok(Vec::new());
            }
            if h[0] & 0x0f != 8 || (u16::from(h[0]) * 256 + u16::from(h[1])) % 31 != 0 {
                return Err(SpdyError::Headers("not a zlib stream"));
            }
            let fdict = h[1] & 0x20 != 0;
            while fdict && h.len() < 6 && !input.is_empty() {
                h.push(input[0]);
                input = &input[1..];
            }
            if fdict && h.len() < 6 {
                return Ok(Vec::new());
            }
            if fdict {
                let id = u32::from_be_bytes([h[2], h[3], h[4], h[5]]);
                if id != adler32(dictionary()) {
                    return Err(SpdyError::Dictionary(id));
                }
            }
            self.header = None;
        }
        let mut out = Vec::new();
        loop {
            let (status, used, written) = decompress(
                &mut self.state,
                input,
                &mut self.window,
                self.pos,
                TINFL_FLAG_HAS_MORE_INPUT,
            );
            out.extend_from_slice(&self.window[self.pos..self.pos + written]);
            self.pos = (self.pos + written) & (self.window.len() - 1);
            input = &input[used..];
            if out.len() > MAX_HEADER_BLOCK {
                return Err(SpdyError::Headers("block too large"));
            }
            match status {
                TINFLStatus::HasMoreOutput => continue,
                TINFLStatus::NeedsMoreInput if input.is_empty() => return Ok(out),
                TINFLStatus::NeedsMoreInput => continue,
                // A peer that ends its header stream has nothing more to say in it.
                TINFLStatus::Done => return Ok(out),
                _ => return Err(SpdyError::Headers("corrupt compressed data")),
            }
        }
    }
}

/// The deflating half: our header blocks, one zlib stream, a sync flush after each.
pub struct HeaderDeflater(flate2::Compress);

impl Default for HeaderDeflater {
    fn default() -> Self {
        Self(flate2::Compress::new(flate2::Compression::fast(), true))
    }
}

impl HeaderDeflater {
    pub fn deflate(&mut self, block: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut input = block;
        loop {
            let before = self.0.total_in();
            out.reserve(256);
            self.0
                .compress_vec(input, &mut out, flate2::FlushCompress::Sync)
                .expect("deflating into a growing buffer cannot fail");
            input = &input[(self.0.total_in() - before) as usize..];
            // Done once all input is in and the flush left room to spare.
            if input.is_empty() && out.len() < out.capacity() {
                return out;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        let d = dictionary();
        assert_eq!(d.len(), 1423);
        assert!(d.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
        assert!(d.ends_with(b",utf-,*,enq=0."));
    }

    /// The first frame kubectl 1.37 sends after `port-forward`'s SPDY upgrade (captured):
    /// the error stream's SYN_STREAM, its headers compressed by Go's zlib with SPDY/3's
    /// dictionary (FDICT set, dictionary id 0xe3c6a7c2).
    const KUBECTL_SYN_STREAM: &[u8] = &[
        0x80, 0x03, 0x00, 0x01, 0x00, 0x00, 0x00, 0x3e, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x78, 0xf9, 0xe3, 0xc6, 0xa7, 0xc2, 0x02, 0x25, 0x3a, 0x70, 0x3a, 0x2b,
        0x29, 0x4a, 0x4d, 0xcc, 0x85, 0x16, 0x25, 0xac, 0xa9, 0xa0, 0x80, 0x86, 0x14, 0xcb, 0x45,
        0xe0, 0x1c, 0x60, 0x61, 0x60, 0x61, 0xc0, 0xc0, 0xc0, 0xc0, 0x59, 0x04, 0x89, 0xc6, 0x4c,
        0x50, 0xf2, 0x66, 0x34, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
    ];

    #[test]
    fn kubectls_headers_inflate_with_the_dictionary() {
        assert_eq!(adler32(dictionary()), 0xe3c6_a7c2);
        let mut buf = BytesMut::from(KUBECTL_SYN_STREAM);
        let Some(Frame::Control {
            kind,
            flags,
            payload,
        }) = next_frame(&mut buf).unwrap()
        else {
            panic!("a control frame");
        };
        assert_eq!(kind, SYN_STREAM);
        let (id, fin, block) = parse_syn_stream(flags, &payload).unwrap();
        assert_eq!((id, fin), (1, false));
        let mut inf = HeaderInflater::default();
        let headers = parse_header_block(&inf.inflate(&block).unwrap()).unwrap();
        assert_eq!(
            headers,
            vec![
                ("streamtype".to_string(), "error".to_string()),
                ("port".into(), "8080".into()),
                ("requestid".into(), "0".into())
            ]
        );
    }

    #[test]
    fn header_blocks_round_trip_through_one_zlib_stream() {
        let blocks = [
            header_block(&[
                ("streamtype", "error"),
                ("port", "8080"),
                ("requestid", "0"),
            ]),
            header_block(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
            header_block(&[]),
        ];
        let (mut d, mut inf) = (HeaderDeflater::default(), HeaderInflater::default());
        for b in &blocks {
            assert_eq!(&inf.inflate(&d.deflate(b)).unwrap(), b);
        }
        assert_eq!(
            parse_header_block(&blocks[1]).unwrap(),
            vec![
                ("streamtype".to_string(), "data".to_string()),
                ("port".into(), "8080".into()),
                ("requestid".into(), "0".into())
            ]
        );
        // A plain zlib reader (what Go's is, for a stream without FDICT) reads ours.
        let z = HeaderDeflater::default().deflate(&blocks[0]);
        let mut out = Vec::with_capacity(256);
        flate2::Decompress::new(true)
            .decompress_vec(&z, &mut out, flate2::FlushDecompress::Sync)
            .unwrap();
        assert_eq!(out, blocks[0]);
    }

    #[test]
    fn frames_split_anywhere_and_round_trip() {
        let bytes = [
            data_frame(3, true, b"hello"),
            control_frame(PING, 0, &7u32.to_be_bytes()),
        ]
        .concat();
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for b in bytes {
            buf.put_u8(b);
            while let Some(f) = next_frame(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(
            got,
            vec![
                Frame::Data {
                    stream: 3,
                    flags: FLAG_FIN,
                    data: Bytes::from_static(b"hello")
                },
                Frame::Control {
                    kind: PING,
                    flags: 0,
                    payload: Bytes::copy_from_slice(&7u32.to_be_bytes())
                }
            ]
        );
        let mut v2 = BytesMut::from(&control_frame(PING, 0, &[0; 4])[..]);
        v2[1] = 2;
        assert_eq!(next_frame(&mut v2), Err(SpdyError::Version(2)));
    }
}
