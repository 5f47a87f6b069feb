//! `Content-Encoding: gzip` for large answers, as kube-apiserver gives them.
//!
//! k8s.io/apiserver `pkg/endpoints/handlers/responsewriters/writers.go`: a response is
//! gzipped when the client's `Accept-Encoding` names `gzip` (`ContentEncodingSupported`:
//! the comma-separated tokens of the header, trimmed, compared with `"gzip"` exactly) and
//! the body is larger than `defaultGzipThresholdBytes = 128 * 1024`. Streamed list
//! encoders write many small pieces, so `deferredResponseWriter` buffers them until more
//! than 128 KiB have accumulated (then gzips) or the body ends (then writes it plain). The
//! compression level is 1 (`gzipContentEncodingLevel`, kubernetes/kubernetes#112296).
//! A gzipped answer also gets `Vary: Accept-Encoding`.
//!
//! [`negotiate_stream`] does the same for the cache's streamed lists: it pulls at most
//! 128 KiB (plus one chunk) of the body before deciding, then streams the rest through
//! a gzip encoder chunk by chunk, so a list is never held whole, compressed or not.

use std::collections::VecDeque;
use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use http::{header, HeaderMap, HeaderValue, Response};
use http_body::{Body as _, Frame, SizeHint};
use http_body_util::BodyExt;

use crate::body::{self, Body, BoxError};

/// kube-apiserver's `defaultGzipThresholdBytes`: bodies larger than this are gzipped.
pub const GZIP_THRESHOLD: usize = 128 * 1024;

/// kube-apiserver's `gzipContentEncodingLevel`.
fn level() -> Compression {
    Compression::new(1)
}

/// Whether the request accepts a gzipped answer, exactly as `ContentEncodingSupported`
/// decides: the first `Accept-Encoding` header, split at commas, one token equal to
/// `gzip` after trimming spaces (so `gzip;q=1` does not count, as in the apiserver).
pub fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == "gzip"))
}

/// Compresses `data` in one go (level 1).
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(data.len() / 4 + 64), level());
    enc.write_all(data).expect("writing to a Vec cannot fail");
    enc.finish().expect("writing to a Vec cannot fail")
}

fn mark_gzipped(headers: &mut HeaderMap) {
    headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    headers.append(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    headers.remove(header::CONTENT_LENGTH);
}

/// A complete body: gzipped when the client accepts it and it is above the threshold.
/// Returns the body and whether it was compressed (the caller sets the headers with
/// [`apply`]).
pub fn encode_full(accept: bool, data: Vec<u8>) -> (Vec<u8>, bool) {
    if accept && data.len() > GZIP_THRESHOLD {
        (gzip(&data), true)
    } else {
        (data, false)
    }
}

/// Sets `Content-Encoding: gzip` and `Vary` on a response whose body was gzipped.
pub fn apply(resp: &mut Response<Body>, gzipped: bool) {
    if gzipped {
        mark_gzipped(resp.headers_mut());
    }
}

/// Gzips a successful response whose body is complete in memory (a `body::full`, whose
/// size is exact), when the request accepts gzip and the body is above the threshold.
/// Streamed bodies (no exact size) and small ones are returned unchanged.
pub async fn compress_full_response(request: &HeaderMap, resp: Response<Body>) -> Response<Body> {
    let big = resp
        .body()
        .size_hint()
        .exact()
        .is_some_and(|n| n as usize > GZIP_THRESHOLD);
    if !big || !accepts_gzip(request) || resp.headers().contains_key(header::CONTENT_ENCODING) {
        return resp;
    }
    let (mut parts, b) = resp.into_parts();
    let data = match b.collect().await {
        Ok(c) => c.to_bytes(),
        // A full body cannot fail; if it somehow did, answer what is known to be safe.
        Err(_) => return Response::from_parts(parts, body::empty()),
    };
    mark_gzipped(&mut parts.headers);
    Response::from_parts(parts, body::full(gzip(&data)))
}

/// A body that is produced synchronously, chunk by chunk (the cache's list bodies).
pub trait ChunkSource: Send + 'static {
    /// The next chunk, or `None` at the end.
    fn next_chunk(&mut self) -> Option<Bytes>;
}

/// How a streamed body goes out after the gzip negotiation.
pub struct Negotiated {
    pub body: Body,
    pub gzipped: bool,
}

/// Decides like `deferredResponseWriter`: when the client accepts gzip, pulls chunks
/// until more than [`GZIP_THRESHOLD`] bytes are known (gzip the whole body, streamed) or
/// the body ends (send those bytes plain, in one piece). Without gzip the body streams
/// as it is, with nothing read ahead.
pub fn negotiate_stream<S: ChunkSource + Unpin>(accept: bool, mut source: S) -> Negotiated {
    if !accept {
        return Negotiated {
            body: body::boxed(Plain { source }),
            gzipped: false,
        };
    }
    let mut head = VecDeque::new();
    let mut seen = 0usize;
    while seen <= GZIP_THRESHOLD {
        match source.next_chunk() {
            Some(c) => {
                seen += c.len();
                head.push_back(c);
            }
            None => {
                // The whole body is at most the threshold: one plain buffer of ≤ 128 KiB.
                let mut all = Vec::with_capacity(seen);
                for c in head {
                    all.extend_from_slice(&c);
                }
                return Negotiated {
                    body: body::full(all),
                    gzipped: false,
                };
            }
        }
    }
    Negotiated {
        body: body::boxed(GzipStream {
            head,
            source: Some(source),
            encoder: Some(GzEncoder::new(Vec::new(), level())),
        }),
        gzipped: true,
    }
}

/// Finishes a response from [`negotiate_stream`]'s decision.
pub fn respond(mut resp: Response<Body>, n: Negotiated) -> Response<Body> {
    *resp.body_mut() = n.body;
    apply(&mut resp, n.gzipped);
    resp
}

struct Plain<S> {
    source: S,
}

impl<S: ChunkSource + Unpin> http_body::Body for Plain<S> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Poll::Ready(
            self.get_mut()
                .source
                .next_chunk()
                .map(|c| Ok(Frame::data(c))),
        )
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// The read-ahead chunks, then the rest of the source, through one gzip encoder. Each
/// poll compresses one source chunk (≈64 KiB), so memory stays bounded and hyper's
/// backpressure paces the work.
struct GzipStream<S> {
    head: VecDeque<Bytes>,
    source: Option<S>,
    encoder: Option<GzEncoder<Vec<u8>>>,
}

impl<S: ChunkSource + Unpin> http_body::Body for GzipStream<S> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(enc) = this.encoder.as_mut() else {
                return Poll::Ready(None);
            };
            let next = match this.head.pop_front() {
                Some(c) => Some(c),
                None => this.source.as_mut().and_then(ChunkSource::next_chunk),
            };
            match next {
                Some(chunk) => {
                    if let Err(e) = enc.write_all(&chunk) {
                        return Poll::Ready(Some(Err(e.into())));
                    }
                    // The deflater keeps up to its window before emitting; skip empty
                    // frames and feed it more.
                    if !enc.get_ref().is_empty() {
                        let out = std::mem::take(enc.get_mut());
                        return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                    }
                }
                None => {
                    this.source = None;
                    let enc = this.encoder.take().expect("checked above");
                    return match enc.finish() {
                        Ok(rest) => Poll::Ready(Some(Ok(Frame::data(Bytes::from(rest))))),
                        Err(e) => Poll::Ready(Some(Err(e.into()))),
                    };
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.encoder.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::read::GzDecoder;
    use std::io::Read;

    struct Chunks(VecDeque<Bytes>);

    impl ChunkSource for Chunks {
        fn next_chunk(&mut self) -> Option<Bytes> {
            self.0.pop_front()
        }
    }

    fn chunks(total: usize, size: usize) -> (Chunks, Vec<u8>) {
        let mut all = Vec::new();
        let mut q = VecDeque::new();
        let mut i = 0u32;
        while all.len() < total {
            let n = size.min(total - all.len());
            let c: Vec<u8> = (0..n)
                .map(|j| b"abcdefghij{}[],:\"0123456789"[(j + i as usize * 7) % 27])
                .collect();
            all.extend_from_slice(&c);
            q.push_back(Bytes::from(c));
            i += 1;
        }
        (Chunks(q), all)
    }

    async fn collect(b: Body) -> Vec<u8> {
        b.collect().await.unwrap().to_bytes().to_vec()
    }

    fn gunzip(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        GzDecoder::new(data).read_to_end(&mut out).unwrap();
        out
    }

    #[test]
    fn accept_encoding_is_read_like_the_apiserver() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(v).unwrap());
            m
        };
        assert!(accepts_gzip(&h("gzip")));
        assert!(accepts_gzip(&h("deflate, gzip")));
        assert!(accepts_gzip(&h(" gzip ,br")));
        assert!(!accepts_gzip(&h("gzip;q=1.0")));
        assert!(!accepts_gzip(&h("identity")));
        assert!(!accepts_gzip(&h("x-gzip")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn the_threshold_is_strictly_more_than_128_kib() {
        for (total, want_gzip) in [
            (GZIP_THRESHOLD - 1, false),
            (GZIP_THRESHOLD, false),
            (GZIP_THRESHOLD + 1, true),
            (5 * GZIP_THRESHOLD + 17, true),
        ] {
            for size in [1000, 64 * 1024, GZIP_THRESHOLD + 5] {
                let (src, all) = chunks(total, size);
                let n = negotiate_stream(true, src);
                assert_eq!(n.gzipped, want_gzip, "total {total}, chunks of {size}");
                let out = collect(n.body).await;
                let plain = if n.gzipped { gunzip(&out) } else { out };
                assert_eq!(plain, all, "total {total}, chunks of {size}");
            }
            let (full, gz) = encode_full(true, chunks(total, total).1);
            assert_eq!(gz, want_gzip);
            let plain = if gz { gunzip(&full) } else { full };
            assert_eq!(plain, chunks(total, total).1);
        }
    }

    #[tokio::test]
    async fn without_gzip_nothing_is_read_ahead_or_compressed() {
        let (src, all) = chunks(3 * GZIP_THRESHOLD, 64 * 1024);
        let n = negotiate_stream(false, src);
        assert!(!n.gzipped);
        assert_eq!(n.body.size_hint().exact(), None, "still a stream");
        assert_eq!(collect(n.body).await, all);
        let (full, gz) = encode_full(false, all.clone());
        assert!(!gz);
        assert_eq!(full, all);
    }

    #[tokio::test]
    async fn full_responses_get_the_headers() {
        let mut req = HeaderMap::new();
        req.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("gzip"));
        let big = chunks(GZIP_THRESHOLD + 1, GZIP_THRESHOLD + 1).1;
        let resp = compress_full_response(&req, Response::new(body::full(big.clone()))).await;
        assert_eq!(resp.headers()[header::CONTENT_ENCODING], "gzip");
        assert_eq!(resp.headers()[header::VARY], "Accept-Encoding");
        assert_eq!(gunzip(&collect(resp.into_body()).await), big);
        let small = chunks(GZIP_THRESHOLD, GZIP_THRESHOLD).1;
        let resp = compress_full_response(&req, Response::new(body::full(small.clone()))).await;
        assert!(!resp.headers().contains_key(header::CONTENT_ENCODING));
        assert_eq!(collect(resp.into_body()).await, small);
    }
}
