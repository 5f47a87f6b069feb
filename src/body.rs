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
