//! The one response/request body type used across the crate.
//!
//! Every handler answers with [`Body`]: either full bytes (the fast path) or a stream
//! (watches, large lists, forwarded bodies). Boxing keeps handler signatures simple; the
//! cost is one virtual call per frame, negligible next to the I/O.

use bytes::Bytes;
use http_body_util::{combinators::UnsyncBoxBody, BodyExt, Empty, Full};

pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The body type every handler in watchgate returns.
pub type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A body holding `bytes` in full.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// An empty body.
pub fn empty() -> Body {
    Empty::<Bytes>::new()
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Box any body whose error converts into [`BoxError`].
pub fn boxed<B>(body: B) -> Body
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

/// A request's body as the server received it: hyper's over HTTP/1.1, the h2 crate's
/// stream over HTTP/2 (the HTTP/2 server is written on h2 directly, `server::http2`, so that
/// a watch's frames can be sent without a task per stream). Everything downstream of the
/// server sees one type.
pub enum RequestBody {
    Hyper(hyper::body::Incoming),
    H2(H2RequestBody),
}

impl From<hyper::body::Incoming> for RequestBody {
    fn from(body: hyper::body::Incoming) -> Self {
        RequestBody::Hyper(body)
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            RequestBody::Hyper(b) => std::pin::Pin::new(b).poll_frame(cx).map_err(BoxError::from),
            RequestBody::H2(b) => b.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RequestBody::Hyper(b) => b.is_end_stream(),
            RequestBody::H2(b) => b.recv.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            RequestBody::Hyper(b) => b.size_hint(),
            RequestBody::H2(b) => b.size_hint(),
        }
    }
}

/// Told whenever an HTTP/2 request's body yields data or trailers: the connection's
/// keep-alive counts them as the client's activity, as hyper's does.
pub trait ReadActivity: Send + Sync {
    fn record(&self);
}

/// An HTTP/2 request's body: its DATA frames, each one's flow-control window given back
/// as soon as it is read (as hyper does), then its trailers. h2 itself checks the frames
/// against a declared `content-length`.
pub struct H2RequestBody {
    recv: h2::RecvStream,
    data_done: bool,
    content_length: Option<u64>,
    activity: std::sync::Arc<dyn ReadActivity>,
}

impl H2RequestBody {
    pub fn new(
        recv: h2::RecvStream,
        content_length: Option<u64>,
        activity: std::sync::Arc<dyn ReadActivity>,
    ) -> Self {
        H2RequestBody {
            recv,
            data_done: false,
            content_length,
            activity,
        }
    }

    fn poll_frame(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, BoxError>>> {
        use std::task::{ready, Poll};
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(bytes)) => {
                    let _ = self.recv.flow_control().release_capacity(bytes.len());
                    self.activity.record();
                    if let Some(left) = self.content_length.as_mut() {
                        *left = left.saturating_sub(bytes.len() as u64);
                    }
                    return Poll::Ready(Some(Ok(http_body::Frame::data(bytes))));
                }
                // RFC 9113 §8.1: RST_STREAM(NO_ERROR) ends the body early without
                // failing it (hyper reads it so too).
                Some(Err(err)) if err.reason() == Some(h2::Reason::NO_ERROR) => {
                    return Poll::Ready(None)
                }
                Some(Err(err)) => return Poll::Ready(Some(Err(err.into()))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => {
                self.activity.record();
                Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))))
            }
            Ok(None) => Poll::Ready(None),
            Err(err) if err.reason() == Some(h2::Reason::NO_ERROR) => Poll::Ready(None),
            Err(err) => Poll::Ready(Some(Err(err.into()))),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self.content_length {
            Some(left) if !self.data_done => http_body::SizeHint::with_exact(left),
            _ if self.recv.is_end_stream() || self.data_done => http_body::SizeHint::with_exact(0),
            _ => http_body::SizeHint::default(),
        }
    }
}
